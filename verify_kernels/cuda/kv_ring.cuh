// A shared-memory ring of KV token rows filled by cp.async.bulk and handed over with mbarriers
// (PTX ISA 8.0: sm_90 and sm_120), for the CUDA verify kernels.
//
// A tile is TILE_ROWS token rows of 576 elements (1152 bytes, one bulk copy each) at a row pitch of
// PITCH elements; slot `tile % SLOTS` of the ring holds it and completes on full[slot] (one arrival
// per row, each with the row's bytes). Rows past the sequence are copied from a global row of zeros, so
// NaN in unused pool slots never reaches a tile and every write to the ring goes through the async
// proxy, ordered by the mbarrier alone.
#pragma once
// Include mma_sync.cuh first (elem_t, smem_addr): sources inline local headers one level deep.

constexpr int KV_ROW_ELEMS = 576;
constexpr int KV_ROW_BYTES = KV_ROW_ELEMS * 2;

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(smem_addr(bar))
               : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
                   smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  }
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_copy_kv_row(void* dst, const void* src, unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(dst)),
      "l"(src), "n"(KV_ROW_BYTES), "r"(smem_addr(bar))
      : "memory");
}

// One warp's share of tile `tile`: rows [first_row, +SHARE) of the tile (positions start + tile *
// TILE_ROWS + row of the request) into slot (ring_tiles + tile) % SLOTS, lane i < SHARE copying row
// first_row + i; `ring_tiles`: the tiles the ring carried before this unit's or segment's (0 for a unit).
// full[slot] counts TILE_ROWS arrivals, one per row, each with the row's bytes; every warp of the CTA
// issues its share, so the copies go out in parallel (one warp issuing a whole tile's 32 copies
// stalled its row group: notes/2026-12-04-qreg-ring.md).
template <int TILE_ROWS, int SLOTS, int PITCH, int SHARE>
__device__ __forceinline__ void issue_kv_rows(elem_t* ring, unsigned long long* full, const elem_t* kv,
                                              const elem_t* zero_row, const int* table, int page_size, int start,
                                              int seq_len, int tile, int ring_tiles, int first_row, int lane) {
  static_assert(SHARE >= 1 && SHARE <= 32 && TILE_ROWS % SHARE == 0, "a warp's share: 1 .. 32 rows");
  if (lane >= SHARE) return;
  const int slot = (ring_tiles + tile) % SLOTS, row = first_row + lane, pos = start + tile * TILE_ROWS + row;
  const elem_t* src = zero_row;
  if (pos < seq_len) {
    const long long page = table[pos / page_size];
    src = kv + (page * page_size + pos % page_size) * KV_ROW_ELEMS;
  }
  // Earlier generic-proxy reads of this slot (its last tile) come before the async proxy writes it.
  fence_proxy_async();
  mbar_arrive_expect_tx(&full[slot], KV_ROW_BYTES);
  bulk_copy_kv_row(ring + (slot * TILE_ROWS + row) * PITCH, src, &full[slot]);
}
