"""``vk check``: every registered variant against the oracle over the case matrix, as a table."""

from __future__ import annotations

from tabulate import tabulate
from tqdm import tqdm

from verify_kernels import variants

from harness.bench.cases import Case, CaseResult, check_matrix, run_case


def run_check(variant_names: list[str], cases: list[Case], *, device: str, progress: bool = True) -> list[CaseResult]:
    """Run each variant on each case at each (page size, config) it is checked at; results in order."""
    jobs = [(name, case, page_size, config) for name in variant_names
            for page_size, config in check_matrix(name) for case in cases]
    results = []
    for name, case, page_size, config in tqdm(jobs, desc="vk check", unit="case", disable=not progress):
        results.append(run_case(name, case, device=device, page_size=page_size, config=config or None))
    return results


def format_table(results: list[CaseResult]) -> str:
    rows = [(r.variant, r.case, r.shape, r.page_size, _format_config(r.config),
             "-" if r.status == "skip" or r.rel_error == float("inf") else f"{r.rel_error:.2e}",
             f"{r.tolerance:g}", r.status.upper(), r.reason[:80]) for r in results]
    return tabulate(rows, headers=["variant", "case", "shape", "page", "config", "rel_error", "tol", "result",
                                   "reason"])


def _format_config(config: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items()) or "default"


def all_variants() -> list[str]:
    return list(variants.VARIANTS)
