"""What every peer shares: the unavailable-with-a-reason error and the chain-tree (causal) guard.

A peer is not a variant: it need not honour the contract's no-allocation rule, and it is never
dispatched to. A peer factory takes a VerifyProblem and returns a no-argument callable producing
[B, T, H, v_dim]; it raises PeerUnavailable, with the reason, when it cannot run the problem here,
and the bench records that reason as the row. A factory may set ``call.graph_safe = False`` when
the peer cannot be captured in a CUDA graph; the bench then times it with events and says so.
"""

from __future__ import annotations

import importlib

import torch

from verify_kernels import trees


class PeerUnavailable(RuntimeError):
    """This peer cannot run the problem on this machine; the message says why."""


def is_causal(problem) -> bool:
    """Whether every request's tree is a chain: node i sees tree nodes 0..i, i.e. causal attention
    over s_q = T new tokens appended after the prefix (what causal-only MLA kernels compute)."""
    nodes = problem.q.shape[1]
    visible = trees.unpack_bits(problem.tree_mask, nodes).cpu()
    causal = torch.ones(nodes, nodes, dtype=torch.bool).tril()
    return bool((visible == causal).all())


def require_causal(problem, peer: str) -> None:
    if not is_causal(problem):
        raise PeerUnavailable(f"{peer} takes no tree mask (causal only): it runs chain trees, this problem's "
                              f"tree is {problem.tree_kind!r}")


def require_mla_dims(problem, peer: str, head_dim: int = 576, v_dim: int = 512) -> None:
    if problem.q.shape[-1] != head_dim or problem.v_dim != v_dim:
        raise PeerUnavailable(f"{peer} runs MLA with Dqk {head_dim} and v_dim {v_dim}; this problem has Dqk "
                              f"{problem.q.shape[-1]}, v_dim {problem.v_dim}")


def require_cuda_arch(problem, peer: str, archs: tuple[tuple[int, int], ...]) -> None:
    if problem.q.device.type != "cuda":
        raise PeerUnavailable(f"{peer} needs a CUDA GPU; the problem is on {problem.q.device}")
    capability = torch.cuda.get_device_capability(problem.q.device)
    if capability not in archs:
        wanted = ", ".join(f"sm_{major}{minor}" for major, minor in archs)
        raise PeerUnavailable(f"{peer} runs on {wanted}; this GPU is sm_{capability[0]}{capability[1]}")


def import_peer(package: str, peer: str, how_to_install: str):
    """The peer's package, or PeerUnavailable saying it is not installed and how to install it."""
    try:
        return importlib.import_module(package)
    except ImportError as error:
        raise PeerUnavailable(f"{peer} is not installed here ({error}); {how_to_install}") from None
