"""``vk report --peers``: per shape, the best of our variants against the best peer, and the
portable race (FlashInfer's fa2 backend beside our kernels that also build for sm_120).

A shape is (tree kind, L, T, H, B); page sizes are merged (each implementation at the page size
it ran). Only rows checked against the oracle and timed (status ok) compete. The ratio is the best
peer's time over ours: above 1 we are ahead.
"""

from __future__ import annotations

from collections import defaultdict

from tabulate import tabulate

# Our kernels that build for sm_120 as well as sm_90 (no wgmma, no TMA tensor maps).
PORTABLE_VARIANTS = ("cuda_ws", "triton_splitkv", "cuda_coalesced")
PORTABLE_PEER = "flashinfer_fa2"


def shape_key(record: dict) -> tuple:
    """(tree kind, L, T, H, B): the problem a bench record timed (page size aside); L is the tuple
    of lengths for a ragged batch."""
    lengths = tuple(record.get("prefix_lens") or (record["prefix_len"],) * record.get("batch", 1))
    return (record.get("tree", "random"), lengths, record["tree_nodes"], record["heads"], record["batch"])


def lengths_cell(lengths: tuple) -> str:
    """L of a table row: the one length of its requests, or a ragged batch's lengths."""
    if len(set(lengths)) == 1:
        return f"{lengths[0]:,}"
    return "ragged " + "/".join(f"{length:,}" for length in lengths)


def _fastest_ok(records: list[dict]) -> dict[tuple, dict[str, dict]]:
    """shape -> implementation -> its fastest ok record (over page sizes and repeated runs)."""
    found: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for record in records:
        if record.get("status") != "ok" or record.get("median_ms") is None:
            continue
        by_name = found[shape_key(record)]
        earlier = by_name.get(record["variant"])
        if earlier is None or record["median_ms"] < earlier["median_ms"]:
            by_name[record["variant"]] = record
    return found


def _best(by_name: dict[str, dict], implementation: str, names=None) -> dict | None:
    pool = [r for name, r in by_name.items() if r.get("implementation", "variant") == implementation
            and (names is None or name in names)]
    return min(pool, key=lambda r: r["median_ms"], default=None)


def _who(record: dict | None) -> str:
    if record is None:
        return "-"
    pct = f", {record['pct_roofline']:.0f}%" if record.get("pct_roofline") is not None else ""
    return f"{record['variant']} {record['median_ms']:.3f} ms{pct}"


def ahead_or_behind(records: list[dict]) -> list[dict]:
    """One row per shape with an ok peer and an ok variant: best ours, best peer, ratio, verdict."""
    rows = []
    for shape, by_name in sorted(_fastest_ok(records).items()):
        ours, peer = _best(by_name, "variant"), _best(by_name, "peer")
        if ours is None or peer is None:
            continue
        ratio = peer["median_ms"] / ours["median_ms"]
        rows.append({"shape": shape, "ours": ours, "peer": peer, "ratio": ratio,
                     "verdict": "ahead" if ratio >= 1.0 else "behind"})
    return rows


def portable_race(records: list[dict]) -> list[dict]:
    """One row per shape where FlashInfer fa2 ran: it beside each portable variant of ours."""
    rows = []
    for shape, by_name in sorted(_fastest_ok(records).items()):
        peer = by_name.get(PORTABLE_PEER)
        if peer is None:
            continue
        ours = _best(by_name, "variant", PORTABLE_VARIANTS)
        rows.append({"shape": shape, "peer": peer, "by_variant": {n: by_name.get(n) for n in PORTABLE_VARIANTS},
                     "ours": ours, "ratio": peer["median_ms"] / ours["median_ms"] if ours else None})
    return rows


def peers_sections(records: list[dict]) -> list[str]:
    """Markdown lines: the ahead-or-behind table, shapes where a peer wins, the portable race."""
    lines = ["## Ours against the peers", "",
             "Per shape, the fastest of our variants and the fastest peer (each checked against the oracle, "
             "timed in the same run); ratio = peer time / our time (above 1: we are ahead).", ""]
    rows = ahead_or_behind(records)
    if not rows:
        return lines + ["No shape has both an ok peer row and an ok variant row.", ""]
    table = [[r["shape"][0], lengths_cell(r["shape"][1]), *r["shape"][2:], _who(r["ours"]), _who(r["peer"]),
              f"{r['ratio']:.2f}", r["verdict"]] for r in rows]
    lines += [tabulate(table, headers=["tree", "L", "T", "H", "B", "best of ours", "best peer", "ratio", ""],
                       tablefmt="github"), ""]
    behind = [r for r in rows if r["verdict"] == "behind"]
    ahead = len(rows) - len(behind)
    lines += [f"Ahead at {ahead} of {len(rows)} shapes, behind at {len(behind)}."
              + (" Behind at: " + "; ".join(f"{r['shape'][0]} L={lengths_cell(r['shape'][1])} T={r['shape'][2]} "
                                             f"H={r['shape'][3]} ({r['peer']['variant']}, x{r['ratio']:.2f})"
                                             for r in behind) if behind else ""), ""]
    race = portable_race(records)
    if race:
        lines += ["## The portable race", "",
                  f"FlashInfer `{PORTABLE_PEER}` (what SGLang routes sm_120 MLA to) beside our kernels that also "
                  f"build for sm_120 ({', '.join(PORTABLE_VARIANTS)}); timed on this GPU, not on an sm_120 card. "
                  "Ratio = fa2 time / our best portable time.", ""]
        table = [[r["shape"][0], lengths_cell(r["shape"][1]), *r["shape"][2:], f"{r['peer']['median_ms']:.3f}",
                  *[f"{v['median_ms']:.3f}" if v else "-" for v in r["by_variant"].values()],
                  f"{r['ratio']:.2f}" if r["ratio"] else "-",
                  ("ahead" if r["ratio"] >= 1.0 else "behind") if r["ratio"] else ""] for r in race]
        lines += [tabulate(table, headers=["tree", "L", "T", "H", "B", f"{PORTABLE_PEER} ms",
                                           *[f"{name} ms" for name in PORTABLE_VARIANTS], "ratio", ""],
                           tablefmt="github"), ""]
        behind = [r for r in race if r["ratio"] and r["ratio"] < 1.0]
        lines += [f"Our best portable kernel is ahead of {PORTABLE_PEER} at {len(race) - len(behind)} of "
                  f"{len(race)} shapes, behind at {len(behind)}.", ""]
    return lines
