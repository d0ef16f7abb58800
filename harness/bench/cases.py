"""One case runner for every variant: ``vk check``, the CPU tests and the GPU tests all use it.

Each case is run as FlashMLA's and FlashInfer's tests do: fresh seeded inputs, NaN in every unused
pool slot, the output buffer poisoned with NaN before the call, the variant run before the oracle
allocates anything, and the error measured as ||out - ref|| / ||ref|| in float64.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch

from verify_kernels import make_problem, reference_attention, variants, verify_attention
from verify_kernels.api import UnsupportedProblemError

# Relative-error tolerances per input dtype (norm-wise, against the float64 oracle).
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Case:
    """One checked problem. Page size comes from the variant (its ``CHECK_PAGE_SIZES``)."""

    name: str
    prefix_lens: tuple[int, ...]
    tree_nodes: int
    heads: int
    tree: str = "random"
    dtype: str = "bfloat16"
    q_scale: float = 1.0
    seed: int = 0

    def describe(self) -> str:
        lens = self.prefix_lens[0] if len(set(self.prefix_lens)) == 1 else list(self.prefix_lens)
        batch = f"B={len(self.prefix_lens)} " if len(self.prefix_lens) > 1 else ""
        return f"{batch}L={lens} T={self.tree_nodes} H={self.heads} {self.tree} {self.dtype}"


@dataclass
class CaseResult:
    variant: str
    case: str
    shape: str
    page_size: int
    rel_error: float
    tolerance: float
    status: str = "fail"  # "pass", "fail" or "skip" (the variant does not support the shape)
    reason: str = ""
    seconds: float = 0.0
    config: dict = field(default_factory=dict)
    counters: dict | None = None  # vk check --counters: harness.measure.counters.profile's row

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def as_record(self) -> dict:
        return asdict(self)


def _boundary_cases(page: int) -> list[Case]:
    return [
        Case("page_edge_minus_1", (page - 1,), 1, 1, "chain"),
        Case("page_edge", (page,), 33, 2),
        Case("page_edge_plus_1", (page + 1,), 16, 3, "star"),
        Case("tree_ends_on_page", (2 * page - 40,), 40, 2, "binary"),
    ]


def cpu_cases() -> list[Case]:
    """Small shapes that the Triton interpreter runs in seconds; every odd case is here."""
    return [
        Case("prefix_0", (0,), 7, 2),
        Case("prefix_1", (1,), 5, 2, "chain"),
        *_boundary_cases(64),
        Case("several_requests", (0, 70, 129), 9, 2),
        Case("single_node", (97,), 1, 4),
        Case("odd_lengths", (54,), 97, 1),
        Case("large_logits", (97,), 20, 2, q_scale=8.0),
        Case("fp16", (54,), 33, 2, dtype="float16"),
        Case("fp16_large_logits", (130,), 17, 1, "star", dtype="float16", q_scale=8.0),
        Case("wide_star", (30,), 100, 1, "star"),
    ]


def gpu_cases() -> list[Case]:
    """The CPU cases plus the large shapes the contract promises (T to 1024, H to 128)."""
    return cpu_cases() + [
        Case("long_prefix_edge", (4095,), 33, 8),
        Case("long_prefix_chain", (32768,), 64, 8, "chain"),
        Case("mixed_batch", (4097, 0, 1000, 63), 33, 8),
        Case("T256_H64", (4096,), 256, 64),
        Case("T1024_H8", (2049,), 1024, 8),
        Case("T1024_H64", (8191,), 1024, 64, "binary"),
        Case("H128", (1025,), 64, 128),
        Case("H1_T1", (32769,), 1, 1),
        Case("gpu_large_logits", (8192,), 128, 8, q_scale=8.0),
        Case("gpu_fp16", (16384,), 256, 16, dtype="float16"),
    ]


def check_page_sizes(name: str) -> tuple[int, ...]:
    return tuple(variants.load_variant(name).CHECK_PAGE_SIZES)


def check_matrix(name: str) -> list[tuple[int, dict]]:
    """(page size, config overrides) pairs a variant is checked at: every page size with its
    default config, plus its extra ``CHECK_CONFIGS`` at the largest page size."""
    module = variants.load_variant(name)
    page_sizes = check_page_sizes(name)
    extra = [c for c in variants.optional(module, "CHECK_CONFIGS") if c]
    return [(page, {}) for page in page_sizes] + [(page_sizes[-1], dict(c)) for c in extra]


def run_case(variant: str, case: Case, *, device: str, page_size: int, config: dict | None = None) -> CaseResult:
    """Run ``variant`` on ``case`` against the oracle; never raises for a kernel failure."""
    dtype = DTYPES[case.dtype]
    tolerance = TOLERANCE[dtype]
    problem = make_problem(list(case.prefix_lens), case.tree_nodes, case.heads, page_size=page_size,
                           tree=case.tree, dtype=dtype, device=device, seed=case.seed, q_scale=case.q_scale)
    result = CaseResult(variant, case.name, case.describe(), page_size, math.inf, tolerance,
                        config=dict(config or {}))
    out = torch.full((*problem.q.shape[:3], problem.v_dim), float("nan"), dtype=dtype, device=device)
    start = time.perf_counter()
    try:
        verify_attention(*problem.arguments(), **problem.kwargs(), variant=variant, config=config, out=out)
        if out.is_cuda:
            torch.cuda.synchronize()
    except UnsupportedProblemError as error:
        result.status, result.reason = "skip", f"unsupported: {error}"
        return result
    except Exception as error:  # a kernel failure is a row with its reason, not a crash
        result.reason = f"{type(error).__name__}: {error}"
        return result
    result.seconds = time.perf_counter() - start
    reference = reference_attention(*problem.arguments(), **problem.kwargs())
    unwritten_or_nan = int(torch.isnan(out).sum())
    if unwritten_or_nan:
        result.reason = f"{unwritten_or_nan} NaN elements (unwritten output or leaked from unused slots)"
        return result
    diff = (out.double() - reference.double()).norm()
    result.rel_error = float(diff / reference.double().norm().clamp_min(1e-30))
    result.status = "pass" if result.rel_error <= tolerance else "fail"
    if not result.passed:
        result.reason = f"relative error {result.rel_error:.3g} > tolerance {tolerance:g}"
    return result
