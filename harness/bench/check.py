"""``vk check``: every registered variant against the oracle over the case matrix, as a table."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from tabulate import tabulate
from tqdm import tqdm

from verify_kernels import variants

from harness.bench.cases import Case, CaseResult, check_matrix, run_case
from harness.measure import counters as ncu_counters


def check_jobs(variant_names: list[str], cases: list[Case]) -> list[tuple[str, Case, int, dict]]:
    """(variant, case, page size, config) for each variant, each (page size, config) it is checked at
    and each case, in the order they run."""
    return [(name, case, page_size, config or {}) for name in variant_names
            for page_size, config in check_matrix(name) for case in cases]


def job_key(variant: str, case: str, page_size: int, config: dict) -> tuple:
    """What tells one check job from another, in a job and in its record (``vk check --resume``)."""
    return variant, case, int(page_size), json.dumps(config or {}, sort_keys=True)


def recorded_jobs(records: list[dict]) -> set[tuple]:
    """The jobs ``records`` already hold a result for (pass, fail or skip)."""
    return {job_key(r["variant"], r["case"], r["page_size"], r.get("config") or {}) for r in records}


def run_check(jobs: list[tuple[str, Case, int, dict]], *, device: str, progress: bool = True,
              counters: bool = False, profile=ncu_counters.profile, on_result=None) -> list[CaseResult]:
    """Run each job of ``check_jobs``; results in order, each also handed to ``on_result`` as it ends
    (the CLI appends its record there, so a run cut short keeps what it finished).
    ``counters`` (CUDA only): each passed case is profiled once more under ncu, in a separate process."""
    results = []
    for name, case, page_size, config in tqdm(jobs, desc="vk check", unit="case", disable=not progress):
        result = run_case(name, case, device=device, page_size=page_size, config=config or None)
        if counters and device == "cuda" and result.passed:
            result.counters = profile(case_argv(name, case, page_size, config))
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def case_argv(variant: str, case: Case, page_size: int, config: dict) -> list[str]:
    """The command that replays a check case once for ncu (harness.bench.counters_target)."""
    spec = {"case": asdict(case), "variant": variant, "page_size": page_size, "config": config}
    return [sys.executable, "-m", "harness.bench.counters_target", json.dumps(spec)]


def format_table(results: list[CaseResult], width: int = 120) -> str:
    """The cases that ran (passed or failed), in ``width`` columns; skips are summarised apart."""
    ran = [r for r in results if r.status != "skip"]
    counted = any(r.counters for r in ran)
    rows = [(r.variant, r.case, r.page_size, _format_config(r.config)[:24],
             "-" if r.rel_error == float("inf") else f"{r.rel_error:.1e}", f"{r.tolerance:g}", r.status.upper(),
             *((_tensor_cell(r.counters),) if counted else ()), r.reason) for r in ran]
    headers = ["variant", "case", "page", "config", "rel_err", "tol", "result", *(["tensor %"] if counted else []),
               "reason"]
    table = tabulate(rows, headers=headers)
    room = max(20, width - max((len(line) - len(rows[i - 2][-1]) if i >= 2 else 0)
                                for i, line in enumerate(table.splitlines())) if rows else width)
    rows = [(*row[:-1], _shorten(row[-1], room)) for row in rows]
    return tabulate(rows, headers=headers) if rows else "(no case ran)"


def _tensor_cell(found: dict | None) -> str:
    if not found:
        return "-"
    if found.get("status") != "ok":
        return found.get("status", "-")
    return "n/a" if found.get("tensor_pipe_pct") is None else f"{found['tensor_pipe_pct']:.1f}"


def summary(results: list[CaseResult]) -> list[str]:
    """One line per variant: how many cases ran, passed and failed, or why it was skipped."""
    lines = []
    for name in dict.fromkeys(r.variant for r in results):
        mine = [r for r in results if r.variant == name]
        ran = [r for r in mine if r.status != "skip"]
        skipped = [r for r in mine if r.status == "skip"]
        passed, failed = sum(r.passed for r in ran), sum(r.status == "fail" for r in ran)
        text = f"{name}: ran {len(ran)} ({passed} passed, {failed} failed)"
        if skipped:
            reasons = sorted({r.reason.split("does not support this problem: ", 1)[-1].split(". Variants that do")[0]
                              for r in skipped})
            text += f", skipped {len(skipped)}: " + "; ".join(reasons)
        lines.append(_shorten(text, 120))
    return lines


def _shorten(text: str, width: int) -> str:
    """``text`` cut at a word boundary to ``width`` characters, with an ellipsis if cut."""
    if len(text) <= width:
        return text
    cut = text[:width - 3].rsplit(" ", 1)[0]
    return (cut or text[:width - 3]) + "..."


def _format_config(config: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items()) or "default"


def all_variants() -> list[str]:
    return list(variants.VARIANTS)
