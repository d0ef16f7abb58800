"""The paged latent KV cache of every layer for one decode stream, with its page allocator.

Pool [layers, num_pages, page_size, 576]: page p of every layer belongs to the same token range,
so one block table [1, max_pages] (int32, on the device) serves all layers. The allocator hands
pages out of a free list as the sequence grows and takes them back when it shrinks (the tree
rows past the committed length, after each step). Entries of the block table past the allocated
pages point at page 0 and are never read (the kernels stop at prefix_len + T).
"""

from __future__ import annotations

import torch

from verify_kernels.paging import flat_slots


class PageAllocator:
    """A free list of page ids 0..num_pages-1."""

    def __init__(self, num_pages: int):
        self.num_pages = num_pages
        self._free = list(range(num_pages - 1, -1, -1))  # pop() hands out low ids first

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def allocate(self, count: int) -> list[int]:
        if count > len(self._free):
            raise MemoryError(f"KV pool: {count} more pages needed, {len(self._free)} free of {self.num_pages}")
        return [self._free.pop() for _ in range(count)]

    def release(self, pages: list[int]) -> None:
        self._free.extend(reversed(pages))


class PagedKVCache:
    def __init__(self, layers: int, num_pages: int, page_size: int, row_dim: int, *, dtype, device,
                 max_pages: int | None = None):
        self.page_size = page_size
        # NaN until written: a kernel that reads a row outside prefix + tree poisons its output.
        self.pool = torch.full((layers, num_pages, page_size, row_dim), float("nan"), dtype=dtype, device=device)
        self.allocator = PageAllocator(num_pages)
        self.pages: list[int] = []
        self.max_pages = max_pages or num_pages
        self.block_table = torch.zeros(1, self.max_pages, dtype=torch.int32, device=device)
        self.prefix_lens = torch.zeros(1, dtype=torch.int32, device=device)
        self.prefix_len = 0  # host copy: committed rows

    @classmethod
    def for_tokens(cls, layers: int, tokens: int, page_size: int, row_dim: int, *, dtype, device) -> "PagedKVCache":
        pages = -(-tokens // page_size)
        return cls(layers, pages, page_size, row_dim, dtype=dtype, device=device, max_pages=pages)

    @property
    def capacity(self) -> int:
        return len(self.pages) * self.page_size

    def reserve(self, tokens: int) -> None:
        """Pages for ``tokens`` rows in total (the committed prefix plus a tree), allocated if missing."""
        needed = -(-tokens // self.page_size)
        if needed > self.max_pages:
            raise MemoryError(f"KV pool: {tokens} tokens need {needed} pages, the block table holds {self.max_pages}")
        if needed > len(self.pages):
            new = self.allocator.allocate(needed - len(self.pages))
            start = len(self.pages)
            self.pages.extend(new)
            if len(new) == 1:  # the decode step's case: a fill, no upload from pageable memory
                self.block_table[0, start:start + 1].fill_(new[0])
            else:
                self.block_table[0, start:start + len(new)] = torch.tensor(new, dtype=torch.int32)

    def truncate(self, tokens: int) -> None:
        """Keep the pages that hold ``tokens`` rows; the rest go back to the allocator."""
        keep = -(-tokens // self.page_size)
        if keep < len(self.pages):
            self.allocator.release(self.pages[keep:])
            self.block_table[0, keep:len(self.pages)] = 0
            del self.pages[keep:]

    def set_prefix_len(self, tokens: int) -> None:
        self.prefix_len = tokens
        self.prefix_lens.fill_(tokens)

    def slots(self, positions: torch.Tensor) -> torch.Tensor:
        """Flat row index (within one layer's pool) of each position [N] of the sequence."""
        return flat_slots(self.block_table[0], positions.to(torch.int64), self.page_size)

    def layer(self, index: int) -> torch.Tensor:
        return self.pool[index]

    def write_rows(self, layer: int, slots: torch.Tensor, rows: torch.Tensor) -> None:
        self.pool[layer].view(-1, self.pool.shape[-1]).index_copy_(0, slots, rows.to(self.pool.dtype))

    def fill_random_prefix(self, tokens: int, *, seed: int) -> None:
        """Rows 0..tokens-1 of every layer: random latent rows (the decode cost of a long context
        without prefilling it); the sequence then continues at position ``tokens``."""
        self.reserve(tokens)
        generator = torch.Generator(device=self.pool.device).manual_seed(seed)
        slots = self.slots(torch.arange(tokens, device=self.pool.device))
        for layer in range(self.pool.shape[0]):
            rows = torch.randn(tokens, self.pool.shape[-1], generator=generator, device=self.pool.device,
                               dtype=torch.float32)
            self.write_rows(layer, slots, rows)
        self.set_prefix_len(tokens)
