// Tree-verify attention over a paged MLA latent cache on the portable ISA (mma.sync m16n8k16,
// ldmatrix, cp.async.bulk and mbarriers: sm_90 and sm_120), with Q held in registers so that
// shared memory carries only K/V, one partial-S exchange and P (design:
// results/notes/2026-12-04-portable-kernel-design.md).
//
// CTA: ROWS = 32 * WARPS_M query rows (row r = node * H + head of one request) against one unit of
// the plan (a request and a range of its positions), walked in tiles of BLOCK_N tokens from a
// STAGES-deep ring of bulk-copied KV rows. Grid (row blocks, units bound); a CTA past the plan's
// units returns at once. No producer warp: consumer warp 0 fills the ring at the start, and the
// last warp to finish a tile refills its slot (a shared counter per slot).
// Warps: WARPS_M row groups of DIM_WARPS (4 or 8) warps; row group wm owns rows [32 wm, +32) (two
// 16-row tiles). Warp wn of a group (the "dim warp"), with QD = 576 / DIM_WARPS head dims (144 or 72):
//   S: holds Q's head dims [QD wn, +QD) of the group's 32 rows as mma A fragments (72 or 36 registers,
//     loaded once; 72 dims are four k16 steps and one k8 step) and computes the partial S over those
//     dims for all BLOCK_N columns; the DIM_WARPS partials go to shared memory (fp32).
//   softmax: owns rows [32 / DIM_WARPS wn, +32 / DIM_WARPS) of the group (DIM_WARPS lanes per row,
//     BLOCK_N / DIM_WARPS columns per lane): sums the partials, masks, keeps the running max and sum,
//     writes P (bf16/fp16) and the rescale factor of its rows.
//   O += P V: output columns [512 / DIM_WARPS wn, +512 / DIM_WARPS) of all 32 rows (128 or 64 fp32
//     registers), P's A fragments by ldmatrix, V = the tile's first 512 columns by ldmatrix.trans.
// DIM_WARPS 8 halves the registers per thread (two CTAs of 8 warps, or one of 16, per SM: four warps per
// scheduler instead of two) for twice the partial-S bytes.
// Two named barriers of the row group per tile (after the partial S, after P); none CTA-wide.
// Shared memory: mbarriers and slot counters, the ring [STAGES][BLOCK_N][584], partial S
// [WARPS_M][4][32][BLOCK_N + 8] fp32, P [ROWS][BLOCK_N + 8], the rescale factors and row sums
// [ROWS] fp32. Padding makes the fragment stores and the owners' float4 reads conflict-free.
// Online softmax in fp32 (base 2). A request of one unit is written to the output; otherwise fp32
// partial outputs and natural-log LSEs at the unit's partial rows for the shared combine
// (verify_kernels/split_combine.py).

#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef BLOCK_N
#define BLOCK_N 16
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef PIPELINE
#define PIPELINE 0
#endif
#ifndef DIM_WARPS
#define DIM_WARPS 4
#endif
#include "mma_sync.cuh"
#include "kv_ring.cuh"

constexpr int D = 576;
constexpr int DV = 512;
constexpr int GROUP_ROWS = 32;               // two 16-row tiles
constexpr int ROWS = GROUP_ROWS * WARPS_M;
constexpr int CONSUMERS = DIM_WARPS * WARPS_M;
constexpr int THREADS = 32 * CONSUMERS;
constexpr int Q_DIMS = D / DIM_WARPS;         // 144 or 72 head dims per warp
constexpr int Q_KSTEPS = Q_DIMS / 16;         // k16 steps: 9 or 4
constexpr bool Q_K8 = Q_DIMS % 16 == 8;       // and one k8 step (72 dims)
constexpr int S_NT = DIM_WARPS == 8 ? 1 : 2;  // n8 tiles of S per step: one at DIM_WARPS 8 (registers)
constexpr int S_CHUNK = 8 * S_NT;
constexpr int O_COLS = DV / DIM_WARPS;        // 128 or 64
constexpr int O_NTILES = O_COLS / 8;
constexpr int OWN_ROWS = GROUP_ROWS / DIM_WARPS;  // 8 or 4 rows per softmax owner warp
constexpr int OWN_LANES = 32 / OWN_ROWS;          // lanes per owned row: 4 or 8
constexpr int OWN_VEC = BLOCK_N / OWN_LANES < 4 ? BLOCK_N / OWN_LANES : 4;  // floats per shared read
constexpr int OWN_SEGS = BLOCK_N / (OWN_LANES * OWN_VEC);                  // reads per owner lane per partial
constexpr int PITCH = D + 8;
constexpr int S_PITCH = BLOCK_N + 8;
constexpr int P_PITCH = BLOCK_N + 8;
constexpr int BARRIER_BYTES = 128;  // STAGES mbarriers and STAGES counters, padded
constexpr int P_BUFFERS = PIPELINE ? 2 : 1;
#define NEG_INF __int_as_float(0xff800000)
#define LN2 0.6931471805599453f

static_assert(BLOCK_N == 16 || BLOCK_N == 32 || BLOCK_N == 64, "BLOCK_N: 16, 32 or 64");
static_assert(STAGES >= 2 && STAGES * 12 <= BARRIER_BYTES, "STAGES: 2 .. 10");
static_assert(PIPELINE == 0 || PIPELINE == 1, "PIPELINE: 0 or 1");
static_assert(WARPS_M >= 1 && WARPS_M <= 14, "named barriers: 1 .. WARPS_M for the row groups");
static_assert(DIM_WARPS == 4 || DIM_WARPS == 8, "DIM_WARPS: 4 or 8");
static_assert(THREADS <= 1024, "DIM_WARPS x WARPS_M <= 32 warps");

__device__ __forceinline__ unsigned ldmatrix_x1(const void* p) {
  unsigned r;
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r) : "r"(smem_addr(p)));
  return r;
}

// c (16x8 fp32) += a (16x8) * b (8x8): m16n8k8, a0 = row g, a1 = row g + 8 (k 2t, 2t + 1), b0 = k 2t, 2t + 1.
__device__ __forceinline__ void mma_1688(float (&c)[4], const unsigned (&a)[2], unsigned b0) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 "
               "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(b0));
}

__device__ __forceinline__ void row_group_sync(int wm) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + wm), "n"(32 * DIM_WARPS) : "memory");
}

#define VERIFY_PARAMS                                                                                   \
  const elem_t *__restrict__ q, const elem_t *__restrict__ kv, const int *__restrict__ block_table,  \
      const int *__restrict__ prefix_lens, const int *__restrict__ tree_mask, elem_t *__restrict__ out, \
      float *__restrict__ partial_out, float *__restrict__ partial_lse, long long stride_qb,           \
      long long stride_qt, long long stride_qh, long long stride_ob, long long stride_ot,              \
      long long stride_oh, int stride_table_b, int stride_mask_b, int stride_mask_t, int tree_nodes,   \
      int heads, int page_size, const int *__restrict__ plan, int batch, float scale_log2,             \
      const elem_t *__restrict__ zero_row

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) verify_qreg(VERIFY_PARAMS) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned long long* full = reinterpret_cast<unsigned long long*>(smem_raw);
  int* released = reinterpret_cast<int*>(full + STAGES);  // warps done with each slot's tile
  elem_t* ring = reinterpret_cast<elem_t*>(smem_raw + BARRIER_BYTES);
  float* s_part = reinterpret_cast<float*>(ring + STAGES * BLOCK_N * PITCH);
  elem_t* p_s = reinterpret_cast<elem_t*>(s_part + WARPS_M * DIM_WARPS * GROUP_ROWS * S_PITCH);
  float* row_scale = reinterpret_cast<float*>(p_s + P_BUFFERS * ROWS * P_PITCH);  // alpha per tile, then 1 / l

  PlanUnit u;
  if (!plan_unit(plan, batch, prefix_lens, tree_nodes, blockIdx.y, u)) return;
  const int b = u.request, start = u.start, end = u.end;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / DIM_WARPS, wn = warp % DIM_WARPS;
  const int g = lane / 4, t = lane % 4;
  const int num_rows = tree_nodes * heads;
  const int group_row0 = blockIdx.x * ROWS + wm * GROUP_ROWS;  // first row of this warp's group
  const int prefix_len = prefix_lens[b];
  const int seq_len = prefix_len + tree_nodes;
  const int* table = block_table + (long long)b * stride_table_b;
  const int num_tiles = end > start ? (end - start + BLOCK_N - 1) / BLOCK_N : 0;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 32);  // every lane of the issuing warp arrives with its bytes
      released[s] = 0;
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (warp == 0) {
    for (int tile = 0; tile < STAGES && tile < num_tiles; ++tile)
      issue_kv_tile<BLOCK_N, STAGES, PITCH>(ring, full, kv, zero_row, table, page_size, start, seq_len, tile, lane);
  }

  // Q's A fragments of this warp's head dims [Q_DIMS wn, +Q_DIMS), rows g and g + 8 of each row tile
  // (zero past the last row), straight from global memory; the k8 step's after the k16 steps'.
  unsigned qf[2][Q_KSTEPS][4];
  unsigned qf8[2][2];
#pragma unroll
  for (int rt = 0; rt < 2; ++rt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = group_row0 + rt * 16 + g + 8 * half;
      const unsigned* src = nullptr;
      if (r < num_rows) {
        const int node = r / heads, head = r - node * heads;
        src = reinterpret_cast<const unsigned*>(q + b * stride_qb + node * stride_qt + head * stride_qh +
                                                wn * Q_DIMS + 2 * t);
      }
#pragma unroll
      for (int k = 0; k < Q_KSTEPS; ++k) {
        qf[rt][k][half] = src ? __ldg(src + k * 8) : 0u;
        qf[rt][k][2 + half] = src ? __ldg(src + k * 8 + 4) : 0u;
      }
      qf8[rt][half] = Q_K8 && src ? __ldg(src + Q_KSTEPS * 8) : 0u;
    }

  float acc[2][O_NTILES][4];
#pragma unroll
  for (int rt = 0; rt < 2; ++rt)
#pragma unroll
    for (int j = 0; j < O_NTILES; ++j) acc[rt][j][0] = acc[rt][j][1] = acc[rt][j][2] = acc[rt][j][3] = 0.f;

  // The softmax rows this warp owns: OWN_LANES lanes per row (lane % OWN_LANES = `cl`), columns
  // [OWN_VEC (cl + OWN_LANES i), +OWN_VEC) for i < OWN_SEGS. With 4 lanes a row, the lanes of a quarter
  // warp sit on rows two apart (conflict-free float4 reads at S_PITCH); with 8, a quarter warp is a row.
  const int cl = lane % OWN_LANES;
  const int own_row = wn * OWN_ROWS + (OWN_LANES == 4 ? (lane / 16) * 4 + (lane / 8) % 2 + 2 * ((lane / 4) % 2)
                                                      : lane / OWN_LANES);  // in the group
  const int own_r = group_row0 + own_row;
  const int own_node = own_r < num_rows ? own_r / heads : 0;
  const int* own_mask = tree_mask + (long long)b * stride_mask_b + (long long)own_node * stride_mask_t;
  float m_run = NEG_INF, l_run = 0.f;  // this lane's share of the row sum
  float* my_part = s_part + (wm * DIM_WARPS + wn) * GROUP_ROWS * S_PITCH;
  const float* group_parts = s_part + wm * DIM_WARPS * GROUP_ROWS * S_PITCH;
  // P and the rescale factors: one buffer, or two alternating with PIPELINE (tile i's in buffer i % 2).
  auto group_p = [&](int tile) { return p_s + ((PIPELINE ? tile % 2 : 0) * ROWS + wm * GROUP_ROWS) * P_PITCH; };
  auto group_scale = [&](int tile) { return row_scale + (PIPELINE ? tile % 2 : 0) * ROWS + wm * GROUP_ROWS; };
  auto kv_tile = [&](int tile) -> const elem_t* { return ring + (tile % STAGES) * BLOCK_N * PITCH; };

  // Partial S of `tile` over this warp's 144 dims: 2 row tiles x BLOCK_N columns, 16 columns at a time
  // (the accumulators of one 16-column chunk live beside O and Q; K is read once either way), stored
  // fp32 in this warp's partial.
  auto partial_s = [&](int tile) {
    mbar_wait(&full[tile % STAGES], (tile / STAGES) & 1);
    const elem_t* k_tile = kv_tile(tile);
#pragma unroll
    for (int c = 0; c < BLOCK_N / S_CHUNK; ++c) {
      float s[2][S_NT][4];
#pragma unroll
      for (int rt = 0; rt < 2; ++rt)
#pragma unroll
        for (int j = 0; j < S_NT; ++j) s[rt][j][0] = s[rt][j][1] = s[rt][j][2] = s[rt][j][3] = 0.f;
      const elem_t* k_dims = k_tile + wn * Q_DIMS;
#pragma unroll
      for (int k = 0; k < Q_KSTEPS; ++k) {
        if constexpr (S_NT == 2) {  // tokens c * 16 + [0, 8) then [8, 16), dims k * 16 + [0, 8) then [8, 16)
          unsigned kf[4];
          ldmatrix_x4(kf, k_tile + (c * 16 + (lane / 16) * 8 + (lane % 8)) * PITCH + wn * Q_DIMS + k * 16 +
                              ((lane / 8) % 2) * 8);
#pragma unroll
          for (int rt = 0; rt < 2; ++rt) {
            mma_16816(s[rt][0], qf[rt][k], kf[0], kf[1]);
            mma_16816(s[rt][1], qf[rt][k], kf[2], kf[3]);
          }
        } else {  // tokens c * 8 + [0, 8), dims k * 16 + [0, 8) then [8, 16)
          unsigned kf[2];
          ldmatrix_x2(kf, k_dims + (c * 8 + (lane % 8)) * PITCH + k * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
          for (int rt = 0; rt < 2; ++rt) mma_16816(s[rt][0], qf[rt][k], kf[0], kf[1]);
        }
      }
      if constexpr (Q_K8) {  // the last 8 dims, Q_KSTEPS * 16 + [0, 8)
        if constexpr (S_NT == 2) {
          unsigned kf[2];
          ldmatrix_x2(kf, k_dims + (c * 16 + ((lane / 8) % 2) * 8 + (lane % 8)) * PITCH + Q_KSTEPS * 16);
#pragma unroll
          for (int rt = 0; rt < 2; ++rt) {
            mma_1688(s[rt][0], qf8[rt], kf[0]);
            mma_1688(s[rt][1], qf8[rt], kf[1]);
          }
        } else {
          const unsigned kf = ldmatrix_x1(k_dims + (c * 8 + (lane % 8)) * PITCH + Q_KSTEPS * 16);
#pragma unroll
          for (int rt = 0; rt < 2; ++rt) mma_1688(s[rt][0], qf8[rt], kf);
        }
      }
#pragma unroll
      for (int rt = 0; rt < 2; ++rt)
#pragma unroll
        for (int j = 0; j < S_NT; ++j) {
          float* row_g = my_part + (rt * 16 + g) * S_PITCH + c * S_CHUNK + j * 8 + 2 * t;
          *reinterpret_cast<float2*>(row_g) = make_float2(s[rt][j][0], s[rt][j][1]);
          *reinterpret_cast<float2*>(row_g + 8 * S_PITCH) = make_float2(s[rt][j][2], s[rt][j][3]);
        }
    }
  };

  // Softmax of the owned rows, in two steps so that P V can run between them: load_s sums the four
  // partials in warp order (scaled to base 2); finish_softmax masks, keeps the running max and sum and
  // writes P (bf16/fp16) and the rescale factor of `tile`.
  auto load_s = [&](float (&v)[OWN_SEGS][OWN_VEC]) {
#pragma unroll
    for (int i = 0; i < OWN_SEGS; ++i) {
      const int col = OWN_VEC * (cl + OWN_LANES * i);
#pragma unroll
      for (int w = 0; w < DIM_WARPS; ++w) {
        const float* part = group_parts + (w * GROUP_ROWS + own_row) * S_PITCH + col;
        if constexpr (OWN_VEC == 4) {
          const float4 x = *reinterpret_cast<const float4*>(part);
          v[i][0] = w ? v[i][0] + x.x : x.x;
          v[i][1] = w ? v[i][1] + x.y : x.y;
          v[i][2] = w ? v[i][2] + x.z : x.z;
          v[i][3] = w ? v[i][3] + x.w : x.w;
        } else {
          const float2 x = *reinterpret_cast<const float2*>(part);
          v[i][0] = w ? v[i][0] + x.x : x.x;
          v[i][1] = w ? v[i][1] + x.y : x.y;
        }
      }
#pragma unroll
      for (int e = 0; e < OWN_VEC; ++e) v[i][e] *= scale_log2;
    }
  };
  auto finish_softmax = [&](float (&v)[OWN_SEGS][OWN_VEC], int tile) {
    const int tile_start = start + tile * BLOCK_N;
    float tile_max = NEG_INF;
    const bool needs_mask = tile_start + BLOCK_N > prefix_len;  // the tile reaches the tree or the end
#pragma unroll
    for (int i = 0; i < OWN_SEGS; ++i)
#pragma unroll
      for (int e = 0; e < OWN_VEC; ++e) {
        if (needs_mask) {
          const int pos = tile_start + OWN_VEC * (cl + OWN_LANES * i) + e;
          bool visible = pos < seq_len;
          if (visible && pos >= prefix_len && own_r < num_rows) {
            const int col = pos - prefix_len;
            visible = (own_mask[col / 32] >> (col % 32)) & 1;
          }
          if (!visible) v[i][e] = NEG_INF;
        }
        tile_max = fmaxf(tile_max, v[i][e]);
      }
#pragma unroll
    for (int mask = 1; mask < OWN_LANES; mask *= 2)
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffff, tile_max, mask));
    const float m_new = fmaxf(m_run, tile_max);
    const float m_safe = m_new == NEG_INF ? 0.f : m_new;  // nothing visible yet: keep exp2 finite
    const float alpha = exp2f(m_run - m_safe);
    m_run = m_new;
    l_run *= alpha;
    elem_t* p_out = group_p(tile);
#pragma unroll
    for (int i = 0; i < OWN_SEGS; ++i) {
      elem_t* dst = p_out + own_row * P_PITCH + OWN_VEC * (cl + OWN_LANES * i);
      const float p0 = exp2f(v[i][0] - m_safe), p1 = exp2f(v[i][1] - m_safe);
      if constexpr (OWN_VEC == 4) {
        const float p2 = exp2f(v[i][2] - m_safe), p3 = exp2f(v[i][3] - m_safe);
        l_run += (p0 + p1) + (p2 + p3);
        *reinterpret_cast<uint2*>(dst) = make_uint2(pack2(p0, p1), pack2(p2, p3));
      } else {
        l_run += p0 + p1;
        *reinterpret_cast<unsigned*>(dst) = pack2(p0, p1);
      }
    }
    if (cl == 0) group_scale(tile)[own_row] = alpha;
  };

  // O = O * alpha + P V over this warp's 128 output columns: rescale, then one 16-token step of P V.
  auto rescale_o = [&](int tile) {
    const float* scale = group_scale(tile);
#pragma unroll
    for (int rt = 0; rt < 2; ++rt) {
      const float a0 = scale[rt * 16 + g], a1 = scale[rt * 16 + g + 8];
#pragma unroll
      for (int j = 0; j < O_NTILES; ++j) {
        acc[rt][j][0] *= a0;
        acc[rt][j][1] *= a0;
        acc[rt][j][2] *= a1;
        acc[rt][j][3] *= a1;
      }
    }
  };
  auto pv_step = [&](int tile, int kk) {
    const elem_t* p_in = group_p(tile);
    const elem_t* v_tile = kv_tile(tile);
    unsigned pf[2][4];
#pragma unroll
    for (int rt = 0; rt < 2; ++rt)
      ldmatrix_x4(pf[rt], p_in + (rt * 16 + (lane % 16)) * P_PITCH + kk * 16 + (lane / 16) * 8);
#pragma unroll
    for (int j = 0; j < O_NTILES; j += 2) {
      unsigned vf[4];
      ldmatrix_x4_trans(vf, v_tile + (kk * 16 + ((lane / 8) % 2) * 8 + (lane % 8)) * PITCH + wn * O_COLS + j * 8 +
                                (lane / 16) * 8);
#pragma unroll
      for (int rt = 0; rt < 2; ++rt) {
        mma_16816(acc[rt][j], pf[rt], vf[0], vf[1]);
        mma_16816(acc[rt][j + 1], pf[rt], vf[2], vf[3]);
      }
    }
  };

  // Done with the slot of `tile`: the last of the CTA's warps refills it with tile + STAGES.
  auto release = [&](int tile) {
    __syncwarp();
    int last = 0;
    if (lane == 0) {
      __threadfence_block();  // this warp's reads of the slot before the count
      last = atomicAdd(&released[tile % STAGES], 1) == CONSUMERS - 1;
      if (last) {
        released[tile % STAGES] = 0;
        __threadfence_block();
      }
    }
    if (__shfl_sync(0xffffffff, last, 0) && tile + STAGES < num_tiles)
      issue_kv_tile<BLOCK_N, STAGES, PITCH>(ring, full, kv, zero_row, table, page_size, start, seq_len, tile + STAGES,
                                            lane);
  };

#if PIPELINE
  // Tile i's P V runs between the two barriers of tile i + 1's softmax: a warp holds two slots (i's V,
  // i + 1's K), the P buffers alternate, and each warp has the HMMAs of P V to issue while the softmax's
  // shared loads and exponentials wait.
  auto step = [&](int tile, bool next) {
    if (next) partial_s(tile + 1);
    row_group_sync(wm);  // the group's partial S of tile + 1 complete
    float v[OWN_SEGS][OWN_VEC];
    if (next) load_s(v);
    rescale_o(tile);
    pv_step(tile, 0);
    if (next) finish_softmax(v, tile + 1);
#pragma unroll
    for (int kk = 1; kk < BLOCK_N / 16; ++kk) pv_step(tile, kk);
    release(tile);
    row_group_sync(wm);  // P and the rescale factors of tile + 1 complete; the partials read
  };
  if (num_tiles > 0) {
    partial_s(0);
    row_group_sync(wm);
    float v[OWN_SEGS][OWN_VEC];
    load_s(v);
    finish_softmax(v, 0);
    row_group_sync(wm);
    for (int tile = 0; tile + 1 < num_tiles; ++tile) step(tile, true);
    step(num_tiles - 1, false);
  }
#else
  for (int tile = 0; tile < num_tiles; ++tile) {
    partial_s(tile);
    row_group_sync(wm);  // the group's partial S complete
    float v[OWN_SEGS][OWN_VEC];
    load_s(v);
    finish_softmax(v, tile);
    row_group_sync(wm);  // P and the rescale factors of the group's rows complete
    rescale_o(tile);
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) pv_step(tile, kk);
    release(tile);
  }
#endif

  // Row sums: the owner's lanes, then 1 / l through shared memory for the group's warps.
#pragma unroll
  for (int mask = 1; mask < OWN_LANES; mask *= 2) l_run += __shfl_xor_sync(0xffffffff, l_run, mask);
  row_group_sync(wm);  // every warp has read the last tile's rescale factors
  float* inv_l_s = group_scale(0);
  if (cl == 0) inv_l_s[own_row] = l_run > 0.f ? 1.f / l_run : 0.f;
  if (u.splits > 1 && cl == 0 && own_r < num_rows)
    partial_lse[(long long)blockIdx.y * num_rows + own_r] = l_run > 0.f ? (m_run + log2f(l_run)) * LN2 : NEG_INF;
  row_group_sync(wm);

#pragma unroll
  for (int rt = 0; rt < 2; ++rt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = rt * 16 + g + 8 * half;
      const int r = group_row0 + row;
      if (r >= num_rows) continue;
      const float inv_l = inv_l_s[row];
      if (u.splits == 1) {
        const int node = r / heads, head = r - node * heads;
        elem_t* dst = out + b * stride_ob + node * stride_ot + head * stride_oh + wn * O_COLS + 2 * t;
#pragma unroll
        for (int j = 0; j < O_NTILES; ++j)
          *reinterpret_cast<unsigned*>(dst + j * 8) = pack2(acc[rt][j][2 * half] * inv_l, acc[rt][j][2 * half + 1] * inv_l);
      } else {
        float* dst = partial_out + ((long long)blockIdx.y * num_rows + r) * DV + wn * O_COLS + 2 * t;
#pragma unroll
        for (int j = 0; j < O_NTILES; ++j)
          *reinterpret_cast<float2*>(dst + j * 8) = make_float2(acc[rt][j][2 * half] * inv_l, acc[rt][j][2 * half + 1] * inv_l);
      }
    }
}
