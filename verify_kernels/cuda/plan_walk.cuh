// The planner's device plan (verify_kernels/planner.py) as the CUDA verify kernels walk it: which
// request and which positions a CTA computes.
//
// Units rule (waves >= 1, or kv_splits > 0): plan[0..batch] the first unit of each request
// (plan[batch]: all units), plan[batch + 1] the positions per unit; a CTA computes one unit.
// Spans rule (waves 0, kv_splits 0; the kernels' SPANS): plan[batch + 1] the positions per span (whole
// tiles), plan[batch + 2 + b] the batch's tiles before request b, plan[2 batch + 2] all of them; a CTA
// computes one span of the batch's tiles, one segment per request the span meets, and the k-th
// segment of a span is unit first_unit + k (the combine's partial rows); plan[2 batch + 2] all tiles,
// plan[2 batch + 3] the gap laid before each request but the first (segment_cost; kernels compiled with GAPS).
#pragma once

// For `unit`: its request (the last b with plan[b] <= unit), its position range [start, end) and the
// request's unit count. Returns false for a unit past the plan (the grid is sized for the longest plan).
struct PlanUnit {
  int request, start, end, splits;
};
__device__ __forceinline__ bool plan_unit(const int* plan, int batch, const int* prefix_lens, int tree_nodes,
                                          int unit, PlanUnit& u) {
  if (unit >= plan[batch]) return false;
  int b = 0;
  for (int hi = batch - 1; b < hi;) {
    const int mid = (b + hi + 1) / 2;
    if (plan[mid] <= unit) b = mid; else hi = mid - 1;
  }
  const int seq_len = prefix_lens[b] + tree_nodes;
  u.request = b;
  u.splits = plan[b + 1] - plan[b];
  u.start = (unit - plan[b]) * plan[batch + 1];
  u.end = min(u.start + plan[batch + 1], seq_len);
  return true;
}

// CTA `cta`'s span: the batch's tiles [begin, end_tile) (TILE_ROWS positions a tile), its first
// request, and its first segment's unit: the spans before it plus the requests that start strictly
// inside an earlier span. Each warp counts with ballots, 32 requests a step, so the counts are
// warp-uniform (every lane of the warp calls it). Returns false for a span past the batch's tiles.
struct PlanSpan {
  int begin, end_tile, first_request, first_unit;
};
template <int TILE_ROWS>
__device__ __forceinline__ bool plan_span(const int* plan, int batch, unsigned cta, int lane, PlanSpan& s) {
  const int span = plan[batch + 1] / TILE_ROWS, total = plan[2 * batch + 2];
  s.begin = min(cta * span, total);
  s.end_tile = min(s.begin + span, total);
  if (s.begin >= s.end_tile) return false;
  s.first_unit = cta;
  s.first_request = 0;
  for (int step = 0; step < batch; step += 32) {
    const int other = step + lane;
    const bool inner = other >= 1 && other < batch;
    const int other_start = inner ? plan[batch + 2 + other] : 0;
    s.first_unit += __popc(__ballot_sync(0xffffffff, inner && other_start < s.begin && other_start % span != 0));
    s.first_request += __popc(__ballot_sync(0xffffffff, inner && other_start <= s.begin));
  }
  return true;
}

// Request b's segment of a span, from the span's laid tile `position` up to the request's end or
// `end_tile`: its first position in the request, its tiles and the laid tiles it spans (the walk's
// step). With GAPS (the plan's segment_cost: plan[2 batch + 3] tiles laid before each request but the
// first) the tiles of the gap are none of the request's: a segment inside the gap has no tile (only a
// span's last can be one; its partial rows are empty: l 0, LSE -inf). planner.reference_segment states it.
struct Segment {
  int start, num_tiles, laid;
};
template <int TILE_ROWS, bool STEP_GAPS>  // not GAPS: the kernels define that macro
__device__ __forceinline__ Segment segment_at(const int* plan, int batch, int b, int position, int end_tile) {
  if constexpr (STEP_GAPS) {
    const int laid_start = plan[batch + 2 + b], stop = min(end_tile, plan[batch + 3 + b]);
    const int gap = b >= 1 ? plan[2 * batch + 3] : 0, first = max(position - laid_start - gap, 0);
    return {first * TILE_ROWS, max(stop - laid_start - gap - first, 0), stop - position};
  } else {
    Segment s{(position - plan[batch + 2 + b]) * TILE_ROWS, min(end_tile, plan[batch + 3 + b]) - position, 0};
    s.laid = s.num_tiles;
    return s;
  }
}
