// Tree-verify attention over a paged MLA latent cache on the portable ISA (mma.sync m16n8k16,
// ldmatrix, cp.async.bulk and mbarriers: sm_90 and sm_120), with Q held in registers so that
// shared memory carries only K/V, one partial-S exchange and P (design:
// results/notes/2026-12-04-portable-kernel-design.md).
//
// CTA: ROWS = 32 * WARPS_M query rows (row r = node * H + head of one request) against one unit of
// the plan (a request and a range of its positions), walked in tiles of BLOCK_N tokens from a
// STAGES-deep ring of bulk-copied KV rows. Grid (row blocks, units bound); a CTA past the plan's
// units returns at once. With SPANS = 1 (the planner's spans rule, plan_walk.cuh) the grid is (row
// blocks, spans) and a CTA walks its span's segments, one per request the span meets: per segment it
// loads that request's Q fragments, runs the same tile loop and writes that unit; the ring's slots
// and mbarrier phases run on across segments, and a CTA-wide barrier separates two segments (every
// warp done with the last one's slots, partial S, P and row sums); with GAPS = 1 (a segment_cost in the
// plan) it steps over the gap laid before each request, and a segment inside a gap has no tile (empty
// partial rows). No producer warp: every warp copies its share of a tile's rows (BLOCK_N / warps, one
// bulk copy per row), the first STAGES tiles at the start and tile i - 1 + STAGES right
// after tile i's CTA-wide barrier, when every warp is done with tile i - 1's slot.
// Warps: WARPS_M row groups of 4 warps; row group wm owns rows [32 wm, +32) (two 16-row tiles).
// Warp wn of a group (the "dim warp"):
//   S: holds Q's head dims [144 wn, +144) of the group's 32 rows as mma A fragments (72 registers,
//     loaded once) and computes the partial S over those dims for all BLOCK_N columns; the four
//     partials go to shared memory (fp32).
//   softmax: owns rows [8 wn, +8) of the group (4 lanes per row, BLOCK_N / 4 columns per lane): sums
//     the four partials, masks, keeps the running max and sum, writes P (bf16/fp16) and the rescale
//     factor of its rows.
//   O += P V: output columns [128 wn, +128) of all 32 rows (128 fp32 registers), P's A fragments by
//     ldmatrix, V = the tile's first 512 columns by ldmatrix.trans.
// Two barriers per tile: CTA-wide after the partial S (it also frees tile i - 1's slot), the row
// group's after P. (The last warp refilling the whole tile through a per-slot counter took about 20%
// more time, 30% at sm_120's tile: notes/2026-12-04-qreg-ring.md.) With EMPTY_BARS = n (1 or 2) the
// first barrier is the row group's too and a slot is freed by its own mbarrier instead (empty[slot]: one
// arrival per warp after its P V of the tile), which a warp waits on before copying its share of tile
// i - n + STAGES, so the two row groups never wait for each other at a barrier (notes/2026-12-06-qreg-empty-bars.md).
// Shared memory: mbarriers, the ring [STAGES][BLOCK_N][584], partial S
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
#ifndef SPANS
#define SPANS 0
#endif
#ifndef GAPS
#define GAPS 0
#endif
#ifndef EMPTY_BARS
#define EMPTY_BARS 0
#endif
#include "mma_sync.cuh"
#include "kv_ring.cuh"
#include "plan_walk.cuh"

constexpr int D = 576;
constexpr int DV = 512;
constexpr int DIM_WARPS = 4;                 // warps sharing a row group
constexpr int GROUP_ROWS = 32;               // two 16-row tiles
constexpr int ROWS = GROUP_ROWS * WARPS_M;
constexpr int CONSUMERS = DIM_WARPS * WARPS_M;
constexpr int THREADS = 32 * CONSUMERS;
constexpr int Q_KSTEPS = D / 16 / DIM_WARPS;  // 9 k-steps of 16 head dims per warp
constexpr int O_COLS = DV / DIM_WARPS;        // 128
constexpr int O_NTILES = O_COLS / 8;
constexpr int OWN_ROWS = GROUP_ROWS / DIM_WARPS;  // 8 rows per softmax owner warp, 4 lanes each
constexpr int OWN_SEGS = BLOCK_N / 16;            // float4 column segments per owner lane
constexpr int PITCH = D + 8;
constexpr int S_PITCH = BLOCK_N + 8;
constexpr int P_PITCH = BLOCK_N + 8;
constexpr int BARRIER_BYTES = 128;  // STAGES mbarriers, padded
constexpr int SHARE = BLOCK_N / CONSUMERS;  // a warp's rows of each tile
#define NEG_INF __int_as_float(0xff800000)
#define LN2 0.6931471805599453f

static_assert(BLOCK_N == 16 || BLOCK_N == 32 || BLOCK_N == 64, "BLOCK_N: 16, 32 or 64");
static_assert(STAGES >= 2 && STAGES * 12 <= BARRIER_BYTES, "STAGES: 2 .. 10");
static_assert(EMPTY_BARS == 0 || (EMPTY_BARS <= 2 && STAGES > EMPTY_BARS && 2 * STAGES * 8 <= BARRIER_BYTES),
              "EMPTY_BARS: 0, or a refill lag of 1 or 2 tiles below STAGES, STAGES <= 8 (full and empty mbarriers)");
static_assert(BLOCK_N % CONSUMERS == 0, "BLOCK_N: a multiple of the CTA's warps (each copies its share)");
static_assert(WARPS_M >= 1 && WARPS_M <= 14, "named barriers: 1 .. WARPS_M for the row groups");

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
  unsigned long long* empty = full + STAGES;  // used with EMPTY_BARS only
  elem_t* ring = reinterpret_cast<elem_t*>(smem_raw + BARRIER_BYTES);
  float* s_part = reinterpret_cast<float*>(ring + STAGES * BLOCK_N * PITCH);
  elem_t* p_s = reinterpret_cast<elem_t*>(s_part + WARPS_M * DIM_WARPS * GROUP_ROWS * S_PITCH);
  float* row_scale = reinterpret_cast<float*>(p_s + ROWS * P_PITCH);  // alpha per tile, then 1 / l

#if SPANS
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  PlanSpan cta_span;  // the CTA's span of the batch's tiles (plan_walk.cuh)
  if (!plan_span<BLOCK_N>(plan, batch, blockIdx.y, lane, cta_span)) return;  // past the batch: the whole CTA
#else
  PlanUnit u;
  if (!plan_unit(plan, batch, prefix_lens, tree_nodes, blockIdx.y, u)) return;
  const int b = u.request, start = u.start, end = u.end;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#endif
  const int wm = warp / DIM_WARPS, wn = warp % DIM_WARPS;
  const int g = lane / 4, t = lane % 4;
  const int num_rows = tree_nodes * heads;
  const int group_row0 = blockIdx.x * ROWS + wm * GROUP_ROWS;  // first row of this warp's group
#if !SPANS
  const int prefix_len = prefix_lens[b];
  const int seq_len = prefix_len + tree_nodes;
  const int num_tiles = end > start ? (end - start + BLOCK_N - 1) / BLOCK_N : 0;
#endif

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], BLOCK_N);  // one arrival per row, with its bytes
      if (EMPTY_BARS) mbar_init(&empty[s], CONSUMERS);  // one arrival per warp done with the slot's tile
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
#if SPANS
  // One pass of the code below per segment, in order: request first_request from tile begin, then each
  // next request from its first tile, until end_tile; the k-th segment is unit first_unit + k.
  for (int position = cta_span.begin, b = cta_span.first_request, unit = cta_span.first_unit, ring_tiles = 0;
       position < cta_span.end_tile; ++b, ++unit) {
  const int splits = plan[b + 1] - plan[b];
  const int prefix_len = prefix_lens[b];
  const int seq_len = prefix_len + tree_nodes;
  const Segment seg = segment_at<BLOCK_N, GAPS>(plan, batch, b, position, cta_span.end_tile);
  const int start = seg.start, num_tiles = seg.num_tiles;
  if (position > cta_span.begin) __syncthreads();  // every warp done with the last segment's slots, partial S, P and row sums
#else
  const unsigned unit = blockIdx.y;  // unsigned, as blockIdx.y: the partial rows index as before the spans walk
  const int splits = u.splits;
  constexpr int ring_tiles = 0;  // the ring's tiles before this unit's
#endif
  auto issue_share = [&](int tile) {
    int request = b;
    asm volatile("" : "+r"(request));  // the table row's address computed here: held across the loop, it spilled
    issue_kv_rows<BLOCK_N, STAGES, PITCH, SHARE>(ring, full, kv, zero_row,
                                                 block_table + (long long)request * stride_table_b, page_size, start,
                                                 seq_len, tile, ring_tiles, warp * SHARE, lane);
  };
#if EMPTY_BARS
  auto wait_freed = [&](int freed) {  // every warp has arrived on the slot of the ring's tile `freed`
    mbar_wait(&empty[freed % STAGES], (freed / STAGES) & 1);
  };
#endif
  for (int tile = 0; tile < STAGES && tile < num_tiles; ++tile) {
#if EMPTY_BARS
    // The slot held the last segment's tile: released before the segment barrier, waited here all the same
    // (every arrival has its wait).
    if (ring_tiles + tile >= STAGES) wait_freed(ring_tiles + tile - STAGES);
#endif
    issue_share(tile);
  }

  // Q's A fragments of this warp's head dims [144 wn, +144), rows g and g + 8 of each row tile
  // (zero past the last row), straight from global memory.
  unsigned qf[2][Q_KSTEPS][4];
#pragma unroll
  for (int rt = 0; rt < 2; ++rt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = group_row0 + rt * 16 + g + 8 * half;
      const unsigned* src = nullptr;
      if (r < num_rows) {
        const int node = r / heads, head = r - node * heads;
        src = reinterpret_cast<const unsigned*>(q + b * stride_qb + node * stride_qt + head * stride_qh +
                                                wn * Q_KSTEPS * 16 + 2 * t);
      }
#pragma unroll
      for (int k = 0; k < Q_KSTEPS; ++k) {
        qf[rt][k][half] = src ? __ldg(src + k * 8) : 0u;
        qf[rt][k][2 + half] = src ? __ldg(src + k * 8 + 4) : 0u;
      }
    }

  float acc[2][O_NTILES][4];
#pragma unroll
  for (int rt = 0; rt < 2; ++rt)
#pragma unroll
    for (int j = 0; j < O_NTILES; ++j) acc[rt][j][0] = acc[rt][j][1] = acc[rt][j][2] = acc[rt][j][3] = 0.f;

  // The softmax rows this warp owns: 4 lanes per row, lanes of a quarter warp on rows two apart
  // (conflict-free float4 reads at S_PITCH); columns [4 (t + 4 i), +4) for i < OWN_SEGS.
  const int own_row = wn * OWN_ROWS + (lane / 16) * 4 + (lane / 8) % 2 + 2 * ((lane / 4) % 2);  // in the group
  const int own_r = group_row0 + own_row;
  // With SPANS, node -1 marks a row past the last, so the mask test needs no own_r (the segment loop's
  // registers pushed it to local memory inside the tile loop on sm_90); the units kernel keeps its code.
  const int own_node = own_r < num_rows ? own_r / heads : (SPANS ? -1 : 0);
  float m_run = NEG_INF, l_run = 0.f;  // this lane's share of the row sum
  float* my_part = s_part + (wm * DIM_WARPS + wn) * GROUP_ROWS * S_PITCH;
  const float* group_parts = s_part + wm * DIM_WARPS * GROUP_ROWS * S_PITCH;
  elem_t* group_p = p_s + wm * GROUP_ROWS * P_PITCH;  // P of the group's rows
  float* group_scale = row_scale + wm * GROUP_ROWS;   // their rescale factors, then 1 / l
  auto kv_tile = [&](int tile) -> const elem_t* { return ring + ((ring_tiles + tile) % STAGES) * BLOCK_N * PITCH; };

  // Partial S of `tile` over this warp's 144 dims: 2 row tiles x BLOCK_N columns, 16 columns at a time
  // (the accumulators of one 16-column chunk live beside O and Q; K is read once either way), stored
  // fp32 in this warp's partial.
  auto partial_s = [&](int tile) {
    mbar_wait(&full[(ring_tiles + tile) % STAGES], ((ring_tiles + tile) / STAGES) & 1);
    const elem_t* k_tile = kv_tile(tile);
#pragma unroll
    for (int c = 0; c < BLOCK_N / 16; ++c) {
      float s[2][2][4];
#pragma unroll
      for (int rt = 0; rt < 2; ++rt)
#pragma unroll
        for (int j = 0; j < 2; ++j) s[rt][j][0] = s[rt][j][1] = s[rt][j][2] = s[rt][j][3] = 0.f;
#pragma unroll
      for (int k = 0; k < Q_KSTEPS; ++k) {
        unsigned kf[4];
        ldmatrix_x4(kf, k_tile + (c * 16 + (lane / 16) * 8 + (lane % 8)) * PITCH + (wn * Q_KSTEPS + k) * 16 +
                            ((lane / 8) % 2) * 8);
#pragma unroll
        for (int rt = 0; rt < 2; ++rt) {
          mma_16816(s[rt][0], qf[rt][k], kf[0], kf[1]);
          mma_16816(s[rt][1], qf[rt][k], kf[2], kf[3]);
        }
      }
#pragma unroll
      for (int rt = 0; rt < 2; ++rt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float* row_g = my_part + (rt * 16 + g) * S_PITCH + c * 16 + j * 8 + 2 * t;
          *reinterpret_cast<float2*>(row_g) = make_float2(s[rt][j][0], s[rt][j][1]);
          *reinterpret_cast<float2*>(row_g + 8 * S_PITCH) = make_float2(s[rt][j][2], s[rt][j][3]);
        }
    }
  };

  // Softmax of the owned rows: load_s sums the four partials in warp order (scaled to base 2);
  // finish_softmax masks, keeps the running max and sum and writes P (bf16/fp16) and the rescale
  // factor of `tile`.
  auto load_s = [&](float (&v)[OWN_SEGS][4]) {
#pragma unroll
    for (int i = 0; i < OWN_SEGS; ++i) {
      const int col = 4 * (t + 4 * i);
#pragma unroll
      for (int w = 0; w < DIM_WARPS; ++w) {
        const float4 part = *reinterpret_cast<const float4*>(group_parts + (w * GROUP_ROWS + own_row) * S_PITCH + col);
        v[i][0] = w ? v[i][0] + part.x : part.x;
        v[i][1] = w ? v[i][1] + part.y : part.y;
        v[i][2] = w ? v[i][2] + part.z : part.z;
        v[i][3] = w ? v[i][3] + part.w : part.w;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) v[i][e] *= scale_log2;
    }
  };
  auto finish_softmax = [&](float (&v)[OWN_SEGS][4], int tile) {
    const int tile_start = start + tile * BLOCK_N;
    float tile_max = NEG_INF;
    const bool needs_mask = tile_start + BLOCK_N > prefix_len;  // the tile reaches the tree or the end
#pragma unroll
    for (int i = 0; i < OWN_SEGS; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (needs_mask) {
          const int pos = tile_start + 4 * (t + 4 * i) + e;
          bool visible = pos < seq_len;
          if (visible && pos >= prefix_len && (SPANS ? own_node >= 0 : own_r < num_rows)) {
            const int col = pos - prefix_len;
            int req = b;
            asm volatile("" : "+r"(req));  // the mask row's address computed here, not held across the loop
            visible = (tree_mask[(long long)req * stride_mask_b + (long long)own_node * stride_mask_t + col / 32] >>
                       (col % 32)) & 1;
          }
          if (!visible) v[i][e] = NEG_INF;
        }
        tile_max = fmaxf(tile_max, v[i][e]);
      }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffff, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffff, tile_max, 2));
    const float m_new = fmaxf(m_run, tile_max);
    const float m_safe = m_new == NEG_INF ? 0.f : m_new;  // nothing visible yet: keep exp2 finite
    const float alpha = exp2f(m_run - m_safe);
    m_run = m_new;
    l_run *= alpha;
    elem_t* p_out = group_p;
#pragma unroll
    for (int i = 0; i < OWN_SEGS; ++i) {
      const float p0 = exp2f(v[i][0] - m_safe), p1 = exp2f(v[i][1] - m_safe);
      const float p2 = exp2f(v[i][2] - m_safe), p3 = exp2f(v[i][3] - m_safe);
      l_run += (p0 + p1) + (p2 + p3);
      *reinterpret_cast<uint2*>(p_out + own_row * P_PITCH + 4 * (t + 4 * i)) = make_uint2(pack2(p0, p1), pack2(p2, p3));
    }
    if (t == 0) group_scale[own_row] = alpha;
  };

  // O = O * alpha + P V over this warp's 128 output columns: rescale, then one 16-token step of P V.
  // (Skipping the rescale where every alpha is 1 halved the multiplies and changed nothing measured:
  // notes/2026-12-04-cuda-qreg-levers.md.)
  auto rescale_o = [&]() {
#pragma unroll
    for (int rt = 0; rt < 2; ++rt) {
      const float a0 = group_scale[rt * 16 + g], a1 = group_scale[rt * 16 + g + 8];
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
    const elem_t* p_in = group_p;
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

  for (int tile = 0; tile < num_tiles; ++tile) {
    partial_s(tile);
#if EMPTY_BARS
    row_group_sync(wm);  // the group's partial S of tile complete
    if (tile >= EMPTY_BARS && tile - EMPTY_BARS + STAGES < num_tiles) {
      wait_freed(ring_tiles + tile - EMPTY_BARS);  // its slot takes the refill
      issue_share(tile - EMPTY_BARS + STAGES);
    }
#else
    __syncthreads();  // every warp's partial S of tile, hence every warp done with tile - 1's slot
    if (tile >= 1 && tile - 1 + STAGES < num_tiles) issue_share(tile - 1 + STAGES);
#endif
    float v[OWN_SEGS][4];
    load_s(v);
    finish_softmax(v, tile);
    row_group_sync(wm);  // P and the rescale factors of the group's rows complete
    rescale_o();
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) pv_step(tile, kk);
#if EMPTY_BARS
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[(ring_tiles + tile) % STAGES]);  // this warp is done with the slot
#endif
  }

  // Row sums: the owner's four lanes, then 1 / l through shared memory for the group's warps.
  l_run += __shfl_xor_sync(0xffffffff, l_run, 1);
  l_run += __shfl_xor_sync(0xffffffff, l_run, 2);
  row_group_sync(wm);  // every warp has read the last tile's rescale factors
  float* inv_l_s = group_scale;
  if (t == 0) inv_l_s[own_row] = l_run > 0.f ? 1.f / l_run : 0.f;
  if (splits > 1 && t == 0 && own_r < num_rows)
    partial_lse[(long long)unit * num_rows + own_r] = l_run > 0.f ? (m_run + log2f(l_run)) * LN2 : NEG_INF;
  row_group_sync(wm);

#pragma unroll
  for (int rt = 0; rt < 2; ++rt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = rt * 16 + g + 8 * half;
      const int r = group_row0 + row;
      if (r >= num_rows) continue;
      const float inv_l = inv_l_s[row];
      if (splits == 1) {
        const int node = r / heads, head = r - node * heads;
        elem_t* dst = out + b * stride_ob + node * stride_ot + head * stride_oh + wn * O_COLS + 2 * t;
#pragma unroll
        for (int j = 0; j < O_NTILES; ++j)
          *reinterpret_cast<unsigned*>(dst + j * 8) = pack2(acc[rt][j][2 * half] * inv_l, acc[rt][j][2 * half + 1] * inv_l);
      } else {
        float* dst = partial_out + ((long long)unit * num_rows + r) * DV + wn * O_COLS + 2 * t;
#pragma unroll
        for (int j = 0; j < O_NTILES; ++j)
          *reinterpret_cast<float2*>(dst + j * 8) = make_float2(acc[rt][j][2 * half] * inv_l, acc[rt][j][2 * half + 1] * inv_l);
      }
    }
#if SPANS
  ring_tiles += num_tiles;
  position += seg.laid;  // a gap's tiles too (GAPS)
  }  // the segment loop
#endif
}
