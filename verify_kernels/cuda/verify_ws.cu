// Tree-verify attention over a paged MLA latent cache, warp-specialized on the portable ISA:
// mma.sync m16n8k16 + ldmatrix, cp.async.bulk row copies and mbarriers (sm_90 and sm_120; no
// wgmma, no tcgen05, no TMA tensor maps).
//
// CTA: ROWS = 16 * ROW_TILES * WARPS_M query rows (row r = node * H + head of one request) against
// one unit of the plan (verify_kernels/planner.py: a request and a range of its positions, read from
// `plan` on the device), walked in tiles of BLOCK_N tokens. Grid (row blocks, units bound); a CTA
// past the plan's units returns at once. With SPANS = 1 (the planner's spans rule) the grid is
// (row blocks, spans) and CTA c owns the batch's tiles [c * span, (c + 1) * span) laid end to end,
// walked as segments (its range's part in one request, each a unit of the plan): per segment the
// consumers load that request's Q rows, run the same tile loop and write that unit's output; the
// ring's slots and mbarrier phases run on across segments. With GAPS = 1 (a segment_cost in the plan)
// the walk steps over the gap laid before each request (plan_walk.cuh's segment_at): a segment inside
// a gap has no tile and writes empty partial rows.
//   warp CONSUMERS (the last), with PRODUCER = 1: the producer. It only moves KV rows into a
//     STAGES-deep ring: one 1152-byte cp.async.bulk per token row, completing on the slot's `full`
//     mbarrier; rows past the sequence are copied from a global row of zeros (NaN in unused pool
//     slots never reaches a tile). It waits on the slot's `empty` mbarrier before refilling it.
//     With PRODUCER = 0 there is no such warp (its registers go to the consumers): consumer warp 0
//     issues the same copies for tile j - 1 + STAGES right after tile j's first consumer barrier,
//     which every consumer reaches only after finishing tile j - 1.
//   warps 0 .. CONSUMERS-1, a WARPS_M x WARPS_N grid: warp (wm, wn) owns rows
//     [wm * 16 * ROW_TILES, +16 * ROW_TILES) and output columns [wn * O_COLS, +O_COLS) of O += P V
//     (ROW_TILES x O_COLS / 8 mma per k-step). S = Q K^T of a tile:
//       SPLIT_K = 1: every warp of the row group computes all BLOCK_N columns over head dims
//         [wn * 576 / WARPS_N, +576 / WARPS_N); the fp32 partials are summed through shared memory
//         (two named barriers of the row group per tile), so each warp holds whole S rows, takes the
//         row max itself and keeps P in registers as P V's A fragments;
//       SPLIT_K = 0: warp wn computes columns [wn * S_COLS, +S_COLS) over all 576 dims; the row max
//         crosses the WARPS_N warps and P is staged (bf16/fp16) in shared memory (two consumer-wide
//         named barriers per tile).
//     No barrier includes the producer: a consumer warp releases a slot with one arrive on its
//     `empty` mbarrier.
// Shared memory: mbarriers, Q [ROWS][584] (loaded once by the consumers with cp.async),
// STAGES x KV [BLOCK_N][584] (all 576 columns are K, the first 512 are V), then either every
// consumer warp's partial S (SPLIT_K = 1, fp32 in fragment order) or P [ROWS][BLOCK_N + 8], and two
// [WARPS_N][ROWS] float reductions. Rows padded by 8 elements so ldmatrix is conflict-free.
// Online softmax in fp32 (base 2). A request of one unit is written to the output; otherwise fp32
// partial outputs and natural-log LSEs at the unit's partial rows for the shared combine
// (verify_kernels/split_combine.py).

#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef ROW_TILES
#define ROW_TILES 1
#endif
#ifndef WARPS_N
#define WARPS_N 2
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
#ifndef PRODUCER
#define PRODUCER 1
#endif
#ifndef SPLIT_K
#define SPLIT_K 1
#endif
#ifndef SPANS
#define SPANS 0
#endif
#ifndef GAPS
#define GAPS 0
#endif
#include "mma_sync.cuh"
#include "kv_ring.cuh"
#include "plan_walk.cuh"

constexpr int D = 576;
constexpr int DV = 512;
constexpr int ROW_WARP = 16 * ROW_TILES;  // rows per consumer warp
constexpr int ROWS = ROW_WARP * WARPS_M;
constexpr int CONSUMERS = WARPS_M * WARPS_N;
constexpr int CONSUMER_THREADS = 32 * CONSUMERS;
constexpr int THREADS = CONSUMER_THREADS + 32 * PRODUCER;
// Registers per thread so MIN_BLOCKS CTAs fit an SM: its 64K registers are four 16K banks, one per
// sub-partition, and warps are dealt to them in turn, so the fullest bank holds ceil(warps / 4).
constexpr int WARPS_PER_BANK = ((THREADS / 32) * MIN_BLOCKS + 3) / 4;
#define MAX_REGS_RAW (16384 / (32 * WARPS_PER_BANK) / 8 * 8)
#define MAX_REGS (MAX_REGS_RAW > 255 ? 255 : MAX_REGS_RAW)
constexpr int SMEM_STRIDE = D + 8;
constexpr int P_STRIDE = BLOCK_N + 8;
// S of a tile: with SPLIT_K each warp of a row computes all BLOCK_N columns over its 576 / WARPS_N
// dims (partials summed through shared memory); without, BLOCK_N / WARPS_N columns over all dims.
constexpr int S_COLS = SPLIT_K ? BLOCK_N : BLOCK_N / WARPS_N;
constexpr int S_NTILES = S_COLS / 8;
constexpr int K_STEPS = SPLIT_K ? D / 16 / WARPS_N : D / 16;
constexpr int O_COLS = DV / WARPS_N;
constexpr int O_NTILES = O_COLS / 8;
constexpr int CHUNKS_PER_ROW = D / 8;  // 16-byte chunks
constexpr int BARRIER_BYTES = 128;     // 2 * STAGES mbarriers, padded
#define NEG_INF __int_as_float(0xff800000)
#define LN2 0.6931471805599453f

static_assert(BLOCK_N % 16 == 0, "BLOCK_N must be a multiple of 16 (P V k-steps)");
static_assert(S_COLS % 8 == 0, "each warp's S columns must be whole n8 tiles");
static_assert(O_NTILES % 2 == 0, "output columns per warp must be a multiple of 16");
static_assert(S_NTILES == 1 || S_NTILES % 2 == 0, "S n8 tiles per warp: 1 or even");
static_assert(2 * STAGES * 8 <= BARRIER_BYTES, "too many stages for the barrier block");
static_assert(PRODUCER || (STAGES >= 2 && WARPS_N >= 2 && !SPLIT_K),
              "without a producer warp: STAGES >= 2, WARPS_N >= 2 and no SPLIT_K (its refill needs a CTA barrier)");
static_assert(!SPLIT_K || (D / 16) % WARPS_N == 0, "SPLIT_K: 36 k-steps must split evenly over WARPS_N");
static_assert(WARPS_M <= 14, "named barriers: 1 for the consumers, 2 .. WARPS_M + 1 for the rows");

// mbarriers, bulk copies and fence.proxy.async: kv_ring.cuh; the plan's units and spans: plan_walk.cuh.
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(CONSUMER_THREADS) : "memory");
}
// The WARPS_N warps that share rows (SPLIT_K's partial S exchange).
__device__ __forceinline__ void row_group_sync(int wm) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(2 + wm), "n"(32 * WARPS_N) : "memory");
}

// cp.async.wait_all for Q; the other cp.async, ldmatrix and mma.sync helpers are in mma_sync.cuh.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Kernel arguments, flat (CuPy passes scalars and pointers, not structs).
#define VERIFY_PARAMS                                                                                   \
  const elem_t *__restrict__ q, const elem_t *__restrict__ kv, const int *__restrict__ block_table,  \
      const int *__restrict__ prefix_lens, const int *__restrict__ tree_mask, elem_t *__restrict__ out, \
      float *__restrict__ partial_out, float *__restrict__ partial_lse, long long stride_qb,           \
      long long stride_qt, long long stride_qh, long long stride_ob, long long stride_ot,              \
      long long stride_oh, int stride_table_b, int stride_mask_b, int stride_mask_t, int tree_nodes,   \
      int heads, int page_size, const int *__restrict__ plan, int batch, float scale_log2,             \
      const elem_t *__restrict__ zero_row

// One warp's copies of tile `tile` into its ring slot: rows [start + tile * BLOCK_N, +BLOCK_N) of
// the request, one cp.async.bulk per row completing on full[slot] (32 lane arrivals, each with its
// bytes); rows past the sequence are copied from `zero_row` (576 zeros in global memory), so every
// write to the ring goes through the async proxy and is ordered by the mbarrier alone. `ring`: the
// tiles the CTA's ring carried before this segment's (SPANS; 0 for a unit).
__device__ __forceinline__ void issue_tile(elem_t* kv_s, unsigned long long* full, const elem_t* kv,
                                           const elem_t* zero_row, const int* table, int page_size, int start,
                                           int seq_len, int tile, int ring, int lane) {
  const int slot = (ring + tile) % STAGES;
  elem_t* dst = kv_s + slot * BLOCK_N * SMEM_STRIDE;
  const int tile_start = start + tile * BLOCK_N;
  const unsigned rows = lane < BLOCK_N ? (BLOCK_N - lane + 31) / 32 : 0;  // rows lane, lane + 32, ...
  // Earlier generic-proxy reads of this slot (its last tile) come before the async proxy writes it.
  fence_proxy_async();
  mbar_arrive_expect_tx(&full[slot], rows * KV_ROW_BYTES);
  for (int row = lane; row < BLOCK_N; row += 32) {
    const int pos = tile_start + row;
    const elem_t* src = zero_row;  // past the sequence: zeros, through the same async proxy
    if (pos < seq_len) {
      const long long page = table[pos / page_size];
      src = kv + (page * page_size + pos % page_size) * D;
    }
    bulk_copy_kv_row(dst + row * SMEM_STRIDE, src, &full[slot]);
  }
}

// The producer warp (PRODUCER = 1): every tile of a unit or segment, once the consumers have
// released its slot (`ring`: as in issue_tile).
__device__ __forceinline__ void produce(elem_t* kv_s, unsigned long long* full, unsigned long long* empty,
                                        const elem_t* kv, const elem_t* zero_row, const int* table, int page_size, int start, int seq_len,
                                        int num_tiles, int ring, int lane) {
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int used = ring + tile;  // the ring's tiles before this one
    if (used >= STAGES) mbar_wait(&empty[used % STAGES], ((used / STAGES) & 1) ^ 1);
    issue_tile(kv_s, full, kv, zero_row, table, page_size, start, seq_len, tile, ring, lane);
  }
}

extern "C" __global__ void __maxnreg__(MAX_REGS) verify_ws(VERIFY_PARAMS) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned long long* full = reinterpret_cast<unsigned long long*>(smem_raw);
  unsigned long long* empty = full + STAGES;
  elem_t* q_s = reinterpret_cast<elem_t*>(smem_raw + BARRIER_BYTES);
  elem_t* kv_s = q_s + ROWS * SMEM_STRIDE;
  // P [ROWS][P_STRIDE] halves, or with SPLIT_K the partial S of every consumer warp in fragment
  // order ([warp][row tile][n8 tile][lane] float4: each lane reads what the same lane wrote).
  elem_t* p_s = kv_s + STAGES * BLOCK_N * SMEM_STRIDE;
  float4* s_x = reinterpret_cast<float4*>(p_s);
  float* red_max = reinterpret_cast<float*>(p_s) + (SPLIT_K ? CONSUMERS * ROWS * BLOCK_N / WARPS_M : ROWS * P_STRIDE / 2);
  float* red_sum = red_max + WARPS_N * ROWS;

#if SPANS
  const int row_block = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int num_rows = tree_nodes * heads;
  const int row0 = row_block * ROWS;
  // The CTA's span of the batch's tiles, its first request and its first segment's unit (plan_walk.cuh).
  PlanSpan cta_span;
  if (!plan_span<BLOCK_N>(plan, batch, blockIdx.y, lane, cta_span)) return;  // past the batch: the whole CTA
  const int begin = cta_span.begin, end_tile = cta_span.end_tile;
  const int first_unit = cta_span.first_unit, first_request = cta_span.first_request;
#else
  // The unit's request and positions, as plan_walk.cuh's plan_unit finds them (written out here: this
  // order of the loads is the one every tuned record of this kernel was measured with).
  const int row_block = blockIdx.x, unit = blockIdx.y;
  if (unit >= plan[batch]) return;  // past the plan (the grid is sized for the longest plan): the whole CTA
  int b = 0;  // the request: the last b with plan[b] <= unit
  for (int hi = batch - 1; b < hi;) {
    const int mid = (b + hi + 1) / 2;
    if (plan[mid] <= unit) b = mid; else hi = mid - 1;
  }
  const int first_unit = plan[b], splits = plan[b + 1] - first_unit;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int num_rows = tree_nodes * heads;
  const int row0 = row_block * ROWS;

  const int prefix_len = prefix_lens[b];
  const int seq_len = prefix_len + tree_nodes;
  const int chunk = plan[batch + 1];
  const int start = (unit - first_unit) * chunk;
  const int end = min(start + chunk, seq_len);
  const int* table = block_table + (long long)b * stride_table_b;
  const int num_tiles = end > start ? (end - start + BLOCK_N - 1) / BLOCK_N : 0;
#endif

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 32);         // every producer lane arrives (with its expected bytes)
      mbar_init(&empty[s], CONSUMERS); // one arrive per consumer warp
    }
  }
  __syncthreads();

  if (PRODUCER && warp == CONSUMERS) {
#if SPANS
    for (int position = begin, b = first_request, ring = 0; position < end_tile; ++b) {
      const Segment seg = segment_at<BLOCK_N, GAPS>(plan, batch, b, position, end_tile);
      produce(kv_s, full, empty, kv, zero_row, block_table + (long long)b * stride_table_b, page_size, seg.start,
              prefix_lens[b] + tree_nodes, seg.num_tiles, ring, lane);
      ring += seg.num_tiles;
      position += seg.laid;
    }
#else
    produce(kv_s, full, empty, kv, zero_row, table, page_size, start, seq_len, num_tiles, 0, lane);
#endif
    return;
  }
#if !SPANS
  if (!PRODUCER && warp == 0) {  // without a producer warp, consumer warp 0 fills the ring ahead
    for (int tile = 0; tile < STAGES && tile < num_tiles; ++tile)
      issue_tile(kv_s, full, kv, zero_row, table, page_size, start, seq_len, tile, 0, lane);
  }
#endif

  // ---- consumers ----
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int g = lane / 4, t = lane % 4;
#if SPANS
  // One pass of the code below per segment, in order: request first_request from tile begin, then
  // each next request from its first tile, until end_tile; the k-th segment is unit first_unit + k.
  for (int position = begin, segment = 0, ring = 0; position < end_tile; ++segment) {
  const int b = first_request + segment, unit = first_unit + segment, splits = plan[b + 1] - plan[b];
  const int prefix_len = prefix_lens[b];
  const int seq_len = prefix_len + tree_nodes;
  const Segment seg = segment_at<BLOCK_N, GAPS>(plan, batch, b, position, end_tile);
  const int start = seg.start, num_tiles = seg.num_tiles;
  const int* table = block_table + (long long)b * stride_table_b;
  if (segment > 0) consumer_sync();  // every consumer is done with the last segment's Q, slots and sums
  if (!PRODUCER && warp == 0) {  // without a producer warp, consumer warp 0 fills the ring ahead
    for (int tile = 0; tile < STAGES && tile < num_tiles; ++tile)
      issue_tile(kv_s, full, kv, zero_row, table, page_size, start, seq_len, tile, ring, lane);
  }
#else
  constexpr int ring = 0;  // the ring's tiles before this unit's
#endif

  // Q rows of this block (zero past the last row).
  for (int idx = threadIdx.x; idx < ROWS * CHUNKS_PER_ROW; idx += CONSUMER_THREADS) {
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
  cp_async_wait_all();
  consumer_sync();

  float acc[ROW_TILES][O_NTILES][4];
#pragma unroll
  for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
    for (int j = 0; j < O_NTILES; ++j) acc[rt][j][0] = acc[rt][j][1] = acc[rt][j][2] = acc[rt][j][3] = 0.f;
  // Per row tile: rows g and g + 8 of its 16 ("half" 0 and 1).
  float m_run[ROW_TILES][2], l_part[ROW_TILES][2];
  int row_local[ROW_TILES][2];
#pragma unroll
  for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      m_run[rt][half] = NEG_INF;
      l_part[rt][half] = 0.f;
      row_local[rt][half] = wm * ROW_WARP + rt * 16 + g + 8 * half;
    }

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int slot = (ring + tile) % STAGES;
    mbar_wait(&full[slot], ((ring + tile) / STAGES) & 1);
    const elem_t* k_tile = kv_s + slot * BLOCK_N * SMEM_STRIDE;
    const int tile_start = start + tile * BLOCK_N;

    // S = Q K^T for this warp's rows x columns [s_col0, +S_COLS) over k-steps [k0, +K_STEPS).
    const int s_col0 = SPLIT_K ? 0 : wn * S_COLS;
    const int k0 = SPLIT_K ? wn * K_STEPS : 0;
    float s[ROW_TILES][S_NTILES][4];
#pragma unroll
    for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
      for (int j = 0; j < S_NTILES; ++j) s[rt][j][0] = s[rt][j][1] = s[rt][j][2] = s[rt][j][3] = 0.f;
    // With registers to spare, the fragments of k-step k + 1 are loaded while the mma of step k
    // run (two register sets); under a tight cap (a producer warp beside 8 consumers) one set.
    constexpr int FRAGMENT_SETS = MAX_REGS >= 224 ? 2 : 1;
    unsigned a[FRAGMENT_SETS][ROW_TILES][4], bq[FRAGMENT_SETS][S_NTILES > 1 ? S_NTILES / 2 : 1][4];
    auto load_fragments = [&](int k, int buf) {
#pragma unroll
      for (int rt = 0; rt < ROW_TILES; ++rt)
        ldmatrix_x4(a[buf][rt], q_s + (wm * ROW_WARP + rt * 16 + (lane % 16)) * SMEM_STRIDE + k * 16 + (lane / 16) * 8);
      if constexpr (S_NTILES == 1) {
        unsigned pair[2];
        ldmatrix_x2(pair, k_tile + (s_col0 + (lane % 8)) * SMEM_STRIDE + k * 16 + ((lane / 8) % 2) * 8);
        bq[buf][0][0] = pair[0];
        bq[buf][0][1] = pair[1];
      } else {
#pragma unroll
        for (int j = 0; j < S_NTILES; j += 2)
          ldmatrix_x4(bq[buf][j / 2], k_tile + (s_col0 + j * 8 + (lane / 16) * 8 + (lane % 8)) * SMEM_STRIDE +
                                          k * 16 + ((lane / 8) % 2) * 8);
      }
    };
    if constexpr (FRAGMENT_SETS == 2) load_fragments(k0, 0);
#pragma unroll 2
    for (int k = 0; k < K_STEPS; ++k) {
      const int buf = FRAGMENT_SETS == 2 ? (k & 1) : 0;
      if constexpr (FRAGMENT_SETS == 2) {
        if (k + 1 < K_STEPS) load_fragments(k0 + k + 1, buf ^ 1);
      } else {
        load_fragments(k0 + k, 0);
      }
#pragma unroll
      for (int rt = 0; rt < ROW_TILES; ++rt) {
        if constexpr (S_NTILES == 1) {
          mma_16816(s[rt][0], a[buf][rt], bq[buf][0][0], bq[buf][0][1]);
        } else {
#pragma unroll
          for (int j = 0; j < S_NTILES; j += 2) {
            mma_16816(s[rt][j], a[buf][rt], bq[buf][j / 2][0], bq[buf][j / 2][1]);
            mma_16816(s[rt][j + 1], a[buf][rt], bq[buf][j / 2][2], bq[buf][j / 2][3]);
          }
        }
      }
    }

    if constexpr (SPLIT_K && WARPS_N > 1) {
      // S = the row's WARPS_N partials, summed in warp order (the same bits in every warp).
      row_group_sync(wm);  // the partials of the last tile have been read
#pragma unroll
      for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
        for (int j = 0; j < S_NTILES; ++j)
          s_x[((warp * ROW_TILES + rt) * S_NTILES + j) * 32 + lane] = make_float4(s[rt][j][0], s[rt][j][1], s[rt][j][2], s[rt][j][3]);
      row_group_sync(wm);
#pragma unroll
      for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
        for (int j = 0; j < S_NTILES; ++j) {
          float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
          for (int w = 0; w < WARPS_N; ++w) {
            const float4 part = w == wn ? make_float4(s[rt][j][0], s[rt][j][1], s[rt][j][2], s[rt][j][3])
                                        : s_x[(((wm * WARPS_N + w) * ROW_TILES + rt) * S_NTILES + j) * 32 + lane];
            sum.x += part.x;
            sum.y += part.y;
            sum.z += part.z;
            sum.w += part.w;
          }
          s[rt][j][0] = sum.x;
          s[rt][j][1] = sum.y;
          s[rt][j][2] = sum.z;
          s[rt][j][3] = sum.w;
        }
    }

    // Scale to base 2; mask only tiles that reach the tree tokens or the sequence end.
    const bool needs_mask = tile_start + BLOCK_N > prefix_len;
    float tile_max[ROW_TILES][2];
#pragma unroll
    for (int rt = 0; rt < ROW_TILES; ++rt) {
      tile_max[rt][0] = tile_max[rt][1] = NEG_INF;
#pragma unroll
      for (int j = 0; j < S_NTILES; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int half = e / 2;
          float v = s[rt][j][e] * scale_log2;
          if (needs_mask) {
            const int pos = tile_start + s_col0 + j * 8 + 2 * t + (e % 2);
            const int r = row0 + row_local[rt][half];
            bool visible = pos < seq_len;
            if (visible && pos >= prefix_len && r < num_rows) {
              const int node = r / heads, col = pos - prefix_len;
              const int word = tree_mask[(long long)b * stride_mask_b + (long long)node * stride_mask_t + col / 32];
              visible = (word >> (col % 32)) & 1;
            }
            v = visible ? v : NEG_INF;
          }
          s[rt][j][e] = v;
          tile_max[rt][half] = fmaxf(tile_max[rt][half], v);
        }
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        tile_max[rt][half] = fmaxf(tile_max[rt][half], __shfl_xor_sync(0xffffffff, tile_max[rt][half], 1));
        tile_max[rt][half] = fmaxf(tile_max[rt][half], __shfl_xor_sync(0xffffffff, tile_max[rt][half], 2));
      }
    }
    // Row max across the WARPS_N warps of a row. red_max is rewritten only after the P barrier,
    // which every warp passes after reading it.
    if (!SPLIT_K && WARPS_N > 1) {
      if (t == 0) {
#pragma unroll
        for (int rt = 0; rt < ROW_TILES; ++rt) {
          red_max[wn * ROWS + row_local[rt][0]] = tile_max[rt][0];
          red_max[wn * ROWS + row_local[rt][1]] = tile_max[rt][1];
        }
      }
      consumer_sync();
      // Every consumer is past tile - 1's P V: without a producer warp, refill its slot now.
      if (!PRODUCER && warp == 0 && tile >= 1 && tile - 1 + STAGES < num_tiles)
        issue_tile(kv_s, full, kv, zero_row, table, page_size, start, seq_len, tile - 1 + STAGES, ring, lane);
#pragma unroll
      for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float m = NEG_INF;
#pragma unroll
          for (int w = 0; w < WARPS_N; ++w) m = fmaxf(m, red_max[w * ROWS + row_local[rt][half]]);
          tile_max[rt][half] = m;
        }
    }
#pragma unroll
    for (int rt = 0; rt < ROW_TILES; ++rt) {
      float alpha[2], m_safe[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float m_new = fmaxf(m_run[rt][half], tile_max[rt][half]);
        // A row may see nothing yet (its ancestors lie in another split): keep exp2 finite.
        m_safe[half] = m_new == NEG_INF ? 0.f : m_new;
        alpha[half] = exp2f(m_run[rt][half] - m_safe[half]);
        m_run[rt][half] = m_new;
        l_part[rt][half] *= alpha[half];
      }
      // P = exp2(S - m), staged to shared memory for P V; this thread's row sums.
#pragma unroll
      for (int j = 0; j < S_NTILES; ++j) {
        const float p0 = exp2f(s[rt][j][0] - m_safe[0]), p1 = exp2f(s[rt][j][1] - m_safe[0]);
        const float p2 = exp2f(s[rt][j][2] - m_safe[1]), p3 = exp2f(s[rt][j][3] - m_safe[1]);
        l_part[rt][0] += p0 + p1;
        l_part[rt][1] += p2 + p3;
        if constexpr (SPLIT_K) {  // P stays in registers: S's accumulators become P V's A fragments
          s[rt][j][0] = p0;
          s[rt][j][1] = p1;
          s[rt][j][2] = p2;
          s[rt][j][3] = p3;
        } else {
          const int col = wn * S_COLS + j * 8 + 2 * t;
          *reinterpret_cast<unsigned*>(p_s + row_local[rt][0] * P_STRIDE + col) = pack2(p0, p1);
          *reinterpret_cast<unsigned*>(p_s + row_local[rt][1] * P_STRIDE + col) = pack2(p2, p3);
        }
      }
#pragma unroll
      for (int j = 0; j < O_NTILES; ++j) {
        acc[rt][j][0] *= alpha[0];
        acc[rt][j][1] *= alpha[0];
        acc[rt][j][2] *= alpha[1];
        acc[rt][j][3] *= alpha[1];
      }
    }
    if (!SPLIT_K && WARPS_N > 1) consumer_sync();  // P complete across the row's warps
    else __syncwarp();

    // O += P V over this warp's output columns; V = the tile's first 512 columns.
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
      unsigned a[ROW_TILES][4];
#pragma unroll
      for (int rt = 0; rt < ROW_TILES; ++rt) {
        if constexpr (SPLIT_K) {  // m16n8 accumulators of columns 16 kk .. +16 = the m16k16 A fragment
          a[rt][0] = pack2(s[rt][2 * kk][0], s[rt][2 * kk][1]);
          a[rt][1] = pack2(s[rt][2 * kk][2], s[rt][2 * kk][3]);
          a[rt][2] = pack2(s[rt][2 * kk + 1][0], s[rt][2 * kk + 1][1]);
          a[rt][3] = pack2(s[rt][2 * kk + 1][2], s[rt][2 * kk + 1][3]);
        } else {
          ldmatrix_x4(a[rt], p_s + (wm * ROW_WARP + rt * 16 + (lane % 16)) * P_STRIDE + kk * 16 + (lane / 16) * 8);
        }
      }
#pragma unroll
      for (int j = 0; j < O_NTILES; j += 2) {
        unsigned bfrag[4];
        ldmatrix_x4_trans(bfrag, k_tile + (kk * 16 + ((lane / 8) % 2) * 8 + (lane % 8)) * SMEM_STRIDE + wn * O_COLS +
                                     j * 8 + (lane / 16) * 8);
#pragma unroll
        for (int rt = 0; rt < ROW_TILES; ++rt) {
          mma_16816(acc[rt][j], a[rt], bfrag[0], bfrag[1]);
          mma_16816(acc[rt][j + 1], a[rt], bfrag[2], bfrag[3]);
        }
      }
    }
    if (PRODUCER) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);  // this warp is done with the slot
    }
  }

  // Row sums: over the quad, then (without SPLIT_K, where a warp saw only its columns) across the
  // WARPS_N warps.
#pragma unroll
  for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      l_part[rt][half] += __shfl_xor_sync(0xffffffff, l_part[rt][half], 1);
      l_part[rt][half] += __shfl_xor_sync(0xffffffff, l_part[rt][half], 2);
      if (!SPLIT_K && t == 0) red_sum[wn * ROWS + row_local[rt][half]] = l_part[rt][half];
    }
  if (!SPLIT_K) consumer_sync();

#pragma unroll
  for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float l = l_part[rt][half];
      if (!SPLIT_K) {
        l = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS_N; ++w) l += red_sum[w * ROWS + row_local[rt][half]];
      }
      const float inv_l = l > 0.f ? 1.f / l : 0.f;
      const int r = row0 + row_local[rt][half];
      if (r >= num_rows) continue;
      if (splits == 1) {
        const int node = r / heads, head = r - node * heads;
        elem_t* dst = out + b * stride_ob + node * stride_ot + head * stride_oh + wn * O_COLS + 2 * t;
#pragma unroll
        for (int j = 0; j < O_NTILES; ++j)
          *reinterpret_cast<unsigned*>(dst + j * 8) =
              pack2(acc[rt][j][2 * half] * inv_l, acc[rt][j][2 * half + 1] * inv_l);
      } else {
        const long long partial_row = (long long)unit * num_rows + r;
        float* dst = partial_out + partial_row * DV + wn * O_COLS + 2 * t;
#pragma unroll
        for (int j = 0; j < O_NTILES; ++j)
          *reinterpret_cast<float2*>(dst + j * 8) =
              make_float2(acc[rt][j][2 * half] * inv_l, acc[rt][j][2 * half + 1] * inv_l);
        if (wn == 0 && t == 0) partial_lse[partial_row] = l > 0.f ? (m_run[rt][half] + log2f(l)) * LN2 : NEG_INF;
      }
    }
#if SPANS
  ring += num_tiles;
  position += seg.laid;  // a gap's tiles too (GAPS)
  }  // the segment loop
#endif
}
