"""One plan per decode step: inside ``plan_once()``, verify calls share the planner's plan (planner.py), so a
step's layers launch the planner once, not once per layer, the way FlashMLA's metadata and FlashInfer's
``plan()`` are made once a step and read by every layer.

A call reuses a plan made inside the same block when it has the same ``prefix_lens`` tensor, unchanged since
(torch's in-place version counter), the same T and plan bounds, and the CUDA-graph capture state the block
began in: a graph captured inside a block entered outside any capture makes its own plans, so its replays
never read a plan made for the lengths of another time. Within a block the lengths are the step's: a write to
``prefix_lens`` that torch does not see (a custom kernel's) inside the block would leave the plan stale, as it
would FlashInfer's. Outside a block every call plans for itself.

Torch only (no Triton): the package exports ``plan_once``.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch

_SCOPE: contextvars.ContextVar[tuple[bool, dict] | None] = contextvars.ContextVar("verify_plan_scope", default=None)


def _capturing() -> bool:
    """Whether the current CUDA stream is being captured into a graph (False without CUDA)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


@contextlib.contextmanager
def plan_once():
    """Share one plan between the verify calls of the block that have the same lengths (module docstring)."""
    token = _SCOPE.set((_capturing(), {}))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def _key(prefix_lens: torch.Tensor, tree_nodes: int, bounds) -> tuple:
    return (prefix_lens.data_ptr(), str(prefix_lens.device), prefix_lens._version, tree_nodes, bounds)


def shared_plan(prefix_lens: torch.Tensor, tree_nodes: int, bounds) -> torch.Tensor | None:
    """The plan a call of the current block made for these lengths, T and bounds; None outside a block, where
    the capture state differs from the block's start, or where none was made (or the lengths changed)."""
    scope = _SCOPE.get()
    if scope is None or scope[0] != _capturing():
        return None
    kept = scope[1].get(_key(prefix_lens, tree_nodes, bounds))
    return kept[1] if kept is not None and kept[0] is prefix_lens else None


def keep_plan(prefix_lens: torch.Tensor, tree_nodes: int, bounds, plan: torch.Tensor) -> None:
    """Keep ``plan`` for the rest of the block (nothing outside a block or in another capture state)."""
    scope = _SCOPE.get()
    if scope is not None and scope[0] == _capturing():
        scope[1][_key(prefix_lens, tree_nodes, bounds)] = (prefix_lens, plan)
