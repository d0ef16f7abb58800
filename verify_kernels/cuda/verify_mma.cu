// Tree-verify attention over a paged MLA latent cache: mma.sync, ldmatrix, cp.async (sm_80+ ISA,
// one source for sm_90 and sm_120; no wgmma).
//
// CTA tile: ROWS = 16 * WARPS_M query rows (row r = node * H + head of one request) against one
// KV split, walked in tiles of BLOCK_N tokens. Warps form a WARPS_M x WARPS_N grid:
//   S = Q K^T : warp (wm, wn) owns rows [16 wm, 16 wm + 16) x tile columns [wn S_COLS, +S_COLS)
//   O += P V  : warp (wm, wn) owns rows [16 wm, +16) x output columns [wn O_COLS, +O_COLS)
// so the row max is exchanged through shared memory and P is staged there (bf16/fp16) before P V.
// Shared memory: Q [ROWS][576], STAGES x KV [BLOCK_N][576] (one tile is both K, all 576
// columns, and V, its first 512), P [ROWS][BLOCK_N], two [WARPS_N][ROWS] float reductions. Rows
// are padded by 8 elements (1168 bytes, an odd number of 16-byte chunks) so ldmatrix is
// conflict-free.
// Whole pages arrive with 16-byte cp.async loads, consecutive threads on consecutive chunks of
// the same row; positions past the sequence are zero-filled (src-size 0) so NaN in unused pool
// slots never reaches shared memory. The tree bitmask is read only on tiles that reach the tree.
// Online softmax in fp32 (base 2). With one split the CTA writes the output; otherwise fp32
// partial outputs and base-2 log-sum-exps, merged by verify_combine.

#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef WARPS_N
#define WARPS_N 2
#endif
#ifndef BLOCK_N
#define BLOCK_N 16
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif

#include "mma_sync.cuh"

constexpr int D = 576;
constexpr int DV = 512;
constexpr int ROWS = 16 * WARPS_M;
constexpr int THREADS = 32 * WARPS_M * WARPS_N;
constexpr int SMEM_STRIDE = D + 8;
constexpr int P_STRIDE = BLOCK_N + 8;
constexpr int S_COLS = BLOCK_N / WARPS_N;
constexpr int S_NTILES = S_COLS / 8;
constexpr int O_COLS = DV / WARPS_N;
constexpr int O_NTILES = O_COLS / 8;
constexpr int CHUNKS_PER_ROW = D / 8;  // 16-byte chunks
#define NEG_INF __int_as_float(0xff800000)

static_assert(BLOCK_N % 16 == 0, "BLOCK_N must be a multiple of 16 (P V k-steps)");
static_assert(S_COLS % 8 == 0, "each warp's S columns must be whole n8 tiles");
static_assert(O_NTILES % 2 == 0, "output columns per warp must be a multiple of 16");
static_assert(S_NTILES == 1 || S_NTILES % 2 == 0, "S n8 tiles per warp: 1 or even");

// Kernel arguments, flat (CuPy passes scalars and pointers, not structs).
#define VERIFY_PARAMS                                                                                   \
  const elem_t *__restrict__ q, const elem_t *__restrict__ kv, const int *__restrict__ block_table,  \
      const int *__restrict__ prefix_lens, const int *__restrict__ tree_mask, elem_t *__restrict__ out, \
      float *__restrict__ partial_out, float *__restrict__ partial_lse, long long stride_qb,           \
      long long stride_qt, long long stride_qh, long long stride_ob, long long stride_ot,              \
      long long stride_oh, int stride_table_b, int stride_mask_b, int stride_mask_t, int tree_nodes,   \
      int heads, int page_size, int num_splits, int split_len, float scale_log2

// Issue the cp.async copies of the BLOCK_N rows at positions [tile_start, +BLOCK_N) of request b.
__device__ __forceinline__ void load_kv_tile(elem_t* dst, const elem_t* kv, int page_size, const int* table,
                                             int tile_start, int seq_len) {
  for (int idx = threadIdx.x; idx < BLOCK_N * CHUNKS_PER_ROW; idx += THREADS) {
    const int row = idx / CHUNKS_PER_ROW;
    const int chunk = idx - row * CHUNKS_PER_ROW;
    const int pos = tile_start + row;
    const bool valid = pos < seq_len;
    const elem_t* src = kv;
    if (valid) {
      const long long page = table[pos / page_size];
      src = kv + (page * page_size + pos % page_size) * D + chunk * 8;
    }
    cp_async_16(dst + row * SMEM_STRIDE + chunk * 8, src, valid);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) verify_mma(VERIFY_PARAMS) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  elem_t* q_s = reinterpret_cast<elem_t*>(smem_raw);
  elem_t* kv_s = q_s + ROWS * SMEM_STRIDE;
  elem_t* p_s = kv_s + STAGES * BLOCK_N * SMEM_STRIDE;
  float* red_max = reinterpret_cast<float*>(p_s + ROWS * P_STRIDE);
  float* red_sum = red_max + WARPS_N * ROWS;

  const int row_block = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int g = lane / 4, t = lane % 4;
  const int num_rows = tree_nodes * heads;
  const int row0 = row_block * ROWS;

  const int prefix_len = prefix_lens[b];
  const int seq_len = prefix_len + tree_nodes;
  const int start = split * split_len;
  const int end = min(start + split_len, seq_len);
  const int* table = block_table + (long long)b * stride_table_b;
  const int num_tiles = end > start ? (end - start + BLOCK_N - 1) / BLOCK_N : 0;

  // Q rows of this block (zero past the last row), in the same commit group as the first tile.
  for (int idx = threadIdx.x; idx < ROWS * CHUNKS_PER_ROW; idx += THREADS) {
    const int row = idx / CHUNKS_PER_ROW, chunk = idx - row * CHUNKS_PER_ROW;
    const int r = row0 + row;
    const bool valid = r < num_rows;
    const elem_t* src = q;
    if (valid) {
      const int node = r / heads, head = r - node * heads;
      src = q + b * stride_qb + node * stride_qt + head * stride_qh + chunk * 8;
    }
    cp_async_16(q_s + row * SMEM_STRIDE + chunk * 8, src, valid);
  }
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < num_tiles) load_kv_tile(kv_s + s * BLOCK_N * SMEM_STRIDE, kv, page_size, table, start + s * BLOCK_N, seq_len);
    cp_async_commit();
  }

  float acc[O_NTILES][4];
#pragma unroll
  for (int j = 0; j < O_NTILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  float m_run[2] = {NEG_INF, NEG_INF};  // rows g and g + 8 of this warp's 16
  float l_part[2] = {0.f, 0.f};          // this thread's share of the row sums

  const int my_row_local[2] = {wm * 16 + g, wm * 16 + g + 8};

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int prefetch = tile + STAGES - 1;
    if (prefetch < num_tiles)
      load_kv_tile(kv_s + (prefetch % STAGES) * BLOCK_N * SMEM_STRIDE, kv, page_size, table, start + prefetch * BLOCK_N, seq_len);
    cp_async_commit();
    cp_async_wait<STAGES - 1>();
    __syncthreads();

    const elem_t* k_tile = kv_s + (tile % STAGES) * BLOCK_N * SMEM_STRIDE;
    const int tile_start = start + tile * BLOCK_N;

    // S = Q K^T for rows [16 wm, +16) x columns [wn S_COLS, +S_COLS).
    float s[S_NTILES][4];
#pragma unroll
    for (int j = 0; j < S_NTILES; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll 4
    for (int k = 0; k < D / 16; ++k) {
      unsigned a[4];
      ldmatrix_x4(a, q_s + (wm * 16 + (lane % 16)) * SMEM_STRIDE + k * 16 + (lane / 16) * 8);
      if constexpr (S_NTILES == 1) {
        unsigned bfrag[2];
        ldmatrix_x2(bfrag, k_tile + (wn * S_COLS + (lane % 8)) * SMEM_STRIDE + k * 16 + ((lane / 8) % 2) * 8);
        mma_16816(s[0], a, bfrag[0], bfrag[1]);
      } else {
#pragma unroll
        for (int j = 0; j < S_NTILES; j += 2) {
          unsigned bfrag[4];
          ldmatrix_x4(bfrag, k_tile + (wn * S_COLS + j * 8 + (lane / 16) * 8 + (lane % 8)) * SMEM_STRIDE + k * 16 +
                                 ((lane / 8) % 2) * 8);
          mma_16816(s[j], a, bfrag[0], bfrag[1]);
          mma_16816(s[j + 1], a, bfrag[2], bfrag[3]);
        }
      }
    }

    // Scale to base 2; mask only tiles that reach the tree tokens or the sequence end.
    const bool needs_mask = tile_start + BLOCK_N > prefix_len;
    float tile_max[2] = {NEG_INF, NEG_INF};
#pragma unroll
    for (int j = 0; j < S_NTILES; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2;
        float v = s[j][e] * scale_log2;
        if (needs_mask) {
          const int pos = tile_start + wn * S_COLS + j * 8 + 2 * t + (e % 2);
          const int r = row0 + my_row_local[half];
          bool visible = pos < seq_len;
          if (visible && pos >= prefix_len && r < num_rows) {
            const int node = r / heads, col = pos - prefix_len;
            const int word = tree_mask[(long long)b * stride_mask_b + (long long)node * stride_mask_t + col / 32];
            visible = (word >> (col % 32)) & 1;
          }
          v = visible ? v : NEG_INF;
        }
        s[j][e] = v;
        tile_max[half] = fmaxf(tile_max[half], v);
      }
    }
    // Row max: over the quad (the 4 lanes sharing a row), then across the WARPS_N warps.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xffffffff, tile_max[half], 1));
      tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xffffffff, tile_max[half], 2));
    }
    if (WARPS_N > 1) {
      if (t == 0) {
        red_max[wn * ROWS + my_row_local[0]] = tile_max[0];
        red_max[wn * ROWS + my_row_local[1]] = tile_max[1];
      }
      __syncthreads();
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float m = NEG_INF;
#pragma unroll
        for (int w = 0; w < WARPS_N; ++w) m = fmaxf(m, red_max[w * ROWS + my_row_local[half]]);
        tile_max[half] = m;
      }
    }
    float alpha[2], m_safe[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float m_new = fmaxf(m_run[half], tile_max[half]);
      // A row may see nothing yet (its ancestors lie in another split): keep exp2 finite.
      m_safe[half] = m_new == NEG_INF ? 0.f : m_new;
      alpha[half] = exp2f(m_run[half] - m_safe[half]);
      m_run[half] = m_new;
      l_part[half] *= alpha[half];
    }
    // P = exp2(S - m), staged to shared memory for P V; this thread's row sums.
#pragma unroll
    for (int j = 0; j < S_NTILES; ++j) {
      const float p0 = exp2f(s[j][0] - m_safe[0]), p1 = exp2f(s[j][1] - m_safe[0]);
      const float p2 = exp2f(s[j][2] - m_safe[1]), p3 = exp2f(s[j][3] - m_safe[1]);
      l_part[0] += p0 + p1;
      l_part[1] += p2 + p3;
      const int col = wn * S_COLS + j * 8 + 2 * t;
      *reinterpret_cast<unsigned*>(p_s + my_row_local[0] * P_STRIDE + col) = pack2(p0, p1);
      *reinterpret_cast<unsigned*>(p_s + my_row_local[1] * P_STRIDE + col) = pack2(p2, p3);
    }
#pragma unroll
    for (int j = 0; j < O_NTILES; ++j) {
      acc[j][0] *= alpha[0];
      acc[j][1] *= alpha[0];
      acc[j][2] *= alpha[1];
      acc[j][3] *= alpha[1];
    }
    __syncthreads();  // P complete

    // O += P V over this warp's output columns; V = the tile's first 512 columns.
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
      unsigned a[4];
      ldmatrix_x4(a, p_s + (wm * 16 + (lane % 16)) * P_STRIDE + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int j = 0; j < O_NTILES; j += 2) {
        unsigned bfrag[4];
        ldmatrix_x4_trans(bfrag, k_tile + (kk * 16 + ((lane / 8) % 2) * 8 + (lane % 8)) * SMEM_STRIDE + wn * O_COLS +
                                     j * 8 + (lane / 16) * 8);
        mma_16816(acc[j], a, bfrag[0], bfrag[1]);
        mma_16816(acc[j + 1], a, bfrag[2], bfrag[3]);
      }
    }
    __syncthreads();  // the stage, P and the reductions are reused next
  }
  cp_async_wait<0>();

  // Row sums: over the quad, then across the WARPS_N warps.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l_part[half] += __shfl_xor_sync(0xffffffff, l_part[half], 1);
    l_part[half] += __shfl_xor_sync(0xffffffff, l_part[half], 2);
  }
  if (t == 0) {
    red_sum[wn * ROWS + my_row_local[0]] = l_part[0];
    red_sum[wn * ROWS + my_row_local[1]] = l_part[1];
  }
  __syncthreads();
  float inv_l[2], lse[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float l = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS_N; ++w) l += red_sum[w * ROWS + my_row_local[half]];
    inv_l[half] = l > 0.f ? 1.f / l : 0.f;
    lse[half] = l > 0.f ? m_run[half] + log2f(l) : NEG_INF;
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row0 + my_row_local[half];
    if (r >= num_rows) continue;
    if (num_splits == 1) {
      const int node = r / heads, head = r - node * heads;
      elem_t* dst = out + b * stride_ob + node * stride_ot + head * stride_oh + wn * O_COLS + 2 * t;
#pragma unroll
      for (int j = 0; j < O_NTILES; ++j)
        *reinterpret_cast<unsigned*>(dst + j * 8) = pack2(acc[j][2 * half] * inv_l[half], acc[j][2 * half + 1] * inv_l[half]);
    } else {
      const long long partial_row = ((long long)b * num_splits + split) * num_rows + r;
      float* dst = partial_out + partial_row * DV + wn * O_COLS + 2 * t;
#pragma unroll
      for (int j = 0; j < O_NTILES; ++j)
        *reinterpret_cast<float2*>(dst + j * 8) = make_float2(acc[j][2 * half] * inv_l[half], acc[j][2 * half + 1] * inv_l[half]);
      if (wn == 0 && t == 0) partial_lse[partial_row] = lse[half];
    }
  }
}

// Merge the splits of one row: out = sum_s 2^(lse_s - max) O_s / sum_s 2^(lse_s - max).
// One block of 128 threads per (row, request), 4 columns per thread.
extern "C" __global__ void __launch_bounds__(128) verify_combine(const float* partial_out, const float* partial_lse,
                                                                 elem_t* out, long long stride_ob, long long stride_ot,
                                                                 long long stride_oh, int tree_nodes, int heads,
                                                                 int num_splits) {
  const int r = blockIdx.x, b = blockIdx.y;
  const int num_rows = tree_nodes * heads;
  const long long first = (long long)b * num_splits * num_rows + r;
  float lse_max = NEG_INF;
  for (int s = 0; s < num_splits; ++s) lse_max = fmaxf(lse_max, partial_lse[first + (long long)s * num_rows]);
  if (lse_max == NEG_INF) lse_max = 0.f;
  float4 total = make_float4(0.f, 0.f, 0.f, 0.f);
  float weight_sum = 0.f;
  const int col = threadIdx.x * 4;
  for (int s = 0; s < num_splits; ++s) {
    const long long row = first + (long long)s * num_rows;
    const float w = exp2f(partial_lse[row] - lse_max);
    weight_sum += w;
    if (w == 0.f) continue;
    const float4 v = *reinterpret_cast<const float4*>(partial_out + row * DV + col);
    total.x += w * v.x;
    total.y += w * v.y;
    total.z += w * v.z;
    total.w += w * v.w;
  }
  const float inv = weight_sum > 0.f ? 1.f / weight_sum : 0.f;
  const int node = r / heads, head = r - node * heads;
  elem_t* dst = out + b * stride_ob + node * stride_ot + head * stride_oh + col;
  *reinterpret_cast<unsigned*>(dst) = pack2(total.x * inv, total.y * inv);
  *reinterpret_cast<unsigned*>(dst + 2) = pack2(total.z * inv, total.w * inv);
}
