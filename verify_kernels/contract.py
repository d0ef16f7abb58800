"""The verify-attention data contract: argument checks shared by the oracle and every variant.

```
q           [B, T, H, Dqk]  bf16 or fp16
kv_cache    [num_pages, page_size, Dqk]  same dtype and device; V = kv_cache[..., :v_dim]
block_table [B, max_pages] int32   physical page of each logical page of request b
prefix_lens [B] int32   committed tokens; the T tree tokens sit at positions prefix_len .. +T-1
tree_mask   [B, T, ceil(T/32)] int32   ancestor bitmask (see trees.py)
```

:func:`check_arguments` looks only at metadata (shapes, dtypes, devices) and never syncs, so it also
runs inside CUDA-graph capture; :func:`check_values` reads values (a host sync) and runs when
``validate=True``.
"""

from __future__ import annotations

import numbers

from dataclasses import dataclass

import torch

from . import trees

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
# The float64 oracle also takes float32 (the CPU decode loop's lossless check runs in float32).
ORACLE_DTYPES = SUPPORTED_DTYPES + (torch.float32,)
MAX_TREE_NODES = 1024
MAX_HEADS = 128
# What every variant honours: q and out rows by any strides of their leading dimensions, as long as
# each row is contiguous and starts on a 16-byte boundary (the CUDA variants copy rows with 16-byte
# cp.async and store them with 16-byte vectors); block_table and tree_mask rows by any row stride;
# prefix_lens only contiguous; kv_cache only contiguous and aligned (it is never copied).
ALIGN_BYTES = 16


@dataclass(frozen=True)
class ProblemShape:
    """Everything a variant needs to decide whether (and how) it runs; known without a sync."""

    batch: int
    tree_nodes: int
    heads: int
    head_dim: int
    v_dim: int
    page_size: int
    num_pages: int
    max_pages: int
    dtype: torch.dtype
    device: torch.device

    @property
    def rows(self) -> int:
        """Query rows per request: tree nodes x heads."""
        return self.tree_nodes * self.heads


def _expect_tensor(name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    return value


def _expect_dim(name: str, value: torch.Tensor, dims: int, layout: str) -> None:
    if value.dim() != dims:
        raise ValueError(f"{name}: expected {dims} dimensions {layout}, got shape {tuple(value.shape)}")


def _expect_dtype(name: str, value: torch.Tensor, expected: tuple[torch.dtype, ...]) -> None:
    if value.dtype not in expected:
        names = " or ".join(str(d) for d in expected)
        raise TypeError(f"{name}: expected dtype {names}, got {value.dtype}")


def _expect_device(name: str, value: torch.Tensor, device: torch.device) -> None:
    if value.device != device:
        raise ValueError(f"{name}: expected device {device} (the device of q), got {value.device}")


def _expect_shape(name: str, value: torch.Tensor, expected: tuple[int, ...], layout: str) -> None:
    if tuple(value.shape) != expected:
        raise ValueError(f"{name}: expected shape {expected} {layout}, got {tuple(value.shape)}")


def check_pool_layout(name: str, pool: torch.Tensor) -> None:
    """The pool is read in place as whole pages (never copied: that would cost its whole size per
    call), so it must be contiguous and start on an ALIGN_BYTES boundary; a slice of pages of a
    larger pool is one."""
    if not pool.is_contiguous() or pool.data_ptr() % ALIGN_BYTES:
        raise ValueError(
            f"{name}: expected a contiguous pool starting on a {ALIGN_BYTES}-byte boundary (pages are read in place "
            f"as whole blocks), got strides {pool.stride()} at byte offset "
            f"{pool.storage_offset() * pool.element_size()}")


def check_arguments(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim,
                    dtypes: tuple[torch.dtype, ...] = SUPPORTED_DTYPES) -> ProblemShape:
    """Check shapes, dtypes and devices against the contract; return the problem's shape.

    Raises TypeError for a wrong type or dtype and ValueError for a wrong shape, device or range,
    each naming the argument, what was expected and what was given.
    """
    for name, value in (("q", q), ("kv_cache", kv_cache), ("block_table", block_table),
                        ("prefix_lens", prefix_lens), ("tree_mask", tree_mask)):
        _expect_tensor(name, value)
    _expect_dim("q", q, 4, "[B, T, H, Dqk]")
    _expect_dtype("q", q, dtypes)
    batch, tree_nodes, heads, head_dim = q.shape
    device = q.device
    if batch < 1:
        raise ValueError(f"q: expected at least one request (B >= 1), got B = {batch}")
    if not 1 <= tree_nodes <= MAX_TREE_NODES:
        raise ValueError(f"q: expected 1 <= T <= {MAX_TREE_NODES} tree nodes, got T = {tree_nodes}")
    if not 1 <= heads <= MAX_HEADS:
        raise ValueError(f"q: expected 1 <= H <= {MAX_HEADS} heads, got H = {heads}")

    _expect_dim("kv_cache", kv_cache, 3, "[num_pages, page_size, Dqk]")
    _expect_dtype("kv_cache", kv_cache, (q.dtype,))
    _expect_device("kv_cache", kv_cache, device)
    num_pages, page_size, kv_dim = kv_cache.shape
    if kv_dim != head_dim:
        raise ValueError(f"kv_cache: expected last dimension Dqk = {head_dim} (as q), got {kv_dim}")
    if num_pages < 1 or page_size < 1:
        raise ValueError(f"kv_cache: expected a non-empty pool, got shape {tuple(kv_cache.shape)}")
    check_pool_layout("kv_cache", kv_cache)

    _expect_dim("block_table", block_table, 2, "[B, max_pages]")
    _expect_dtype("block_table", block_table, (torch.int32,))
    _expect_device("block_table", block_table, device)
    if block_table.shape[0] != batch:
        raise ValueError(f"block_table: expected {batch} rows (B of q), got shape {tuple(block_table.shape)}")

    _expect_dim("prefix_lens", prefix_lens, 1, "[B]")
    _expect_dtype("prefix_lens", prefix_lens, (torch.int32,))
    _expect_device("prefix_lens", prefix_lens, device)
    _expect_shape("prefix_lens", prefix_lens, (batch,), "[B]")

    _expect_dim("tree_mask", tree_mask, 3, "[B, T, ceil(T/32)]")
    _expect_dtype("tree_mask", tree_mask, (torch.int32,))
    _expect_device("tree_mask", tree_mask, device)
    _expect_shape("tree_mask", tree_mask, (batch, tree_nodes, trees.mask_words(tree_nodes)), "[B, T, ceil(T/32)]")

    # NumPy and other integral / real scalars are numbers too; bools are not.
    if isinstance(v_dim, bool) or not isinstance(v_dim, numbers.Integral):
        raise TypeError(f"v_dim: expected an int, got {type(v_dim).__name__}")
    v_dim = int(v_dim)
    if not 1 <= v_dim <= head_dim:
        raise ValueError(f"v_dim: expected 1 <= v_dim <= Dqk = {head_dim}, got {v_dim}")
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, numbers.Real):
        raise TypeError(f"sm_scale: expected a float, got {type(sm_scale).__name__}")
    if not (0.0 < float(sm_scale) < float("inf")):
        raise ValueError(f"sm_scale: expected a positive finite float, got {sm_scale}")

    return ProblemShape(
        batch=batch, tree_nodes=tree_nodes, heads=heads, head_dim=head_dim, v_dim=v_dim,
        page_size=page_size, num_pages=num_pages, max_pages=block_table.shape[1],
        dtype=q.dtype, device=device,
    )


def check_out(out, shape: ProblemShape) -> None:
    """Check a caller-provided output buffer: [B, T, H, v_dim], q's dtype and device."""
    _expect_tensor("out", out)
    expected = (shape.batch, shape.tree_nodes, shape.heads, shape.v_dim)
    _expect_shape("out", out, expected, "[B, T, H, v_dim]")
    _expect_dtype("out", out, (shape.dtype,))
    _expect_device("out", out, shape.device)
    if any(stride == 0 and size > 1 for size, stride in zip(out.shape, out.stride())):
        raise ValueError("out: expected a writable buffer whose elements do not overlap, got shape "
                         f"{tuple(out.shape)} with strides {out.stride()}")


def _rows_aligned(tensor: torch.Tensor) -> bool:
    """Contiguous last dimension, 16-byte aligned start and leading strides (in bytes)."""
    size = tensor.element_size()
    return ((tensor.stride(-1) == 1 or tensor.shape[-1] == 1) and tensor.data_ptr() % ALIGN_BYTES == 0
            and all((stride * size) % ALIGN_BYTES == 0 for stride in tensor.stride()[:-1]))


def _fresh_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy in a new (allocator-aligned) buffer; ``.contiguous()`` would hand back a
    contiguous tensor that starts off the 16-byte boundary unchanged."""
    return torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device).copy_(tensor)


def kernel_layouts(q, block_table, prefix_lens, tree_mask, out):
    """The arguments in layouts every variant honours (see ALIGN_BYTES), copying only those that are not:
    (q, block_table, prefix_lens, tree_mask, out_for_kernel). When ``out_for_kernel is not out`` the
    kernel writes a fresh buffer and the caller copies it into ``out``. Metadata only: no host sync,
    so it runs inside CUDA-graph capture (the copies are captured with the kernel)."""
    if not _rows_aligned(q):
        q = _fresh_copy(q)
    if not (block_table.stride(-1) == 1 or block_table.shape[-1] == 1):
        block_table = _fresh_copy(block_table)
    if not prefix_lens.is_contiguous():
        prefix_lens = _fresh_copy(prefix_lens)
    if not (tree_mask.stride(-1) == 1 or tree_mask.shape[-1] == 1):
        tree_mask = _fresh_copy(tree_mask)
    kernel_out = out if out is not None and _rows_aligned(out) else None
    return q, block_table, prefix_lens, tree_mask, kernel_out


def check_values(block_table, prefix_lens, tree_mask, shape: ProblemShape) -> None:
    """Value checks (host sync): prefix lengths, table capacity, page ids, tree-mask structure."""
    lens = prefix_lens.to(torch.int64)
    if (lens < 0).any():
        b = int((lens < 0).nonzero()[0])
        raise ValueError(f"prefix_lens: expected non-negative lengths, got {int(lens[b])} for request {b}")
    capacity = shape.max_pages * shape.page_size
    needed = lens + shape.tree_nodes
    if (needed > capacity).any():
        b = int((needed > capacity).nonzero()[0])
        raise ValueError(
            f"block_table: request {b} needs prefix_len + T = {int(needed[b])} positions, but its "
            f"{shape.max_pages} pages x page_size {shape.page_size} hold {capacity}"
        )
    pages_used = (needed + shape.page_size - 1) // shape.page_size  # [B]
    logical = torch.arange(shape.max_pages, device=block_table.device)
    in_use = logical[None, :] < pages_used[:, None]
    bad = in_use & ((block_table < 0) | (block_table >= shape.num_pages))
    if bad.any():
        b, p = (int(x) for x in bad.nonzero()[0])
        raise ValueError(
            f"block_table: request {b} logical page {p} maps to page {int(block_table[b, p])}, "
            f"outside the pool [0, {shape.num_pages})"
        )
    trees.validate_tree_mask(tree_mask)
