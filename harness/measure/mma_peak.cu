// mma.sync m16n8k16 throughput: each warp issues CHAINS independent accumulator chains of
// m16n8k16 (bf16 in, fp32 accumulate) from registers, ITERS times. No memory traffic in the loop,
// so the rate is the tensor-core ceiling a portable (non-wgmma) kernel can approach.
#ifndef CHAINS
#define CHAINS 8
#endif

extern "C" __global__ void __launch_bounds__(256) mma_peak(float* out, int iters, unsigned seed) {
  unsigned a[4], b[2];
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = seed * (threadIdx.x + i + 1) | 0x3c003c00u;
  b[0] = seed ^ threadIdx.x;
  b[1] = seed + threadIdx.x;
  float c[CHAINS][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) {
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                   "{%0,%1,%2,%3};\n"
                   : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) sum += c[k][0] + c[k][1] + c[k][2] + c[k][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
