"""The fastest config of each variant at each shape of a bench record file, as a short table.

    python3 scripts/best_configs.py results/bench/cuda_ws-side-by-side-nvidia-h200.jsonl
"""

import json
import sys

from tabulate import tabulate


def best_rows(path: str) -> list[tuple]:
    best = {}
    for line in open(path):
        record = json.loads(line)
        if record.get("status") != "ok" or "median_ms" not in record:
            continue
        key = (record["prefix_len"], record["tree_nodes"], record["heads"], record["variant"])
        if key not in best or record["median_ms"] < best[key]["median_ms"]:
            best[key] = record
    return [(*key, f"{r['median_ms']:.4f}", f"{r.get('pct_roofline', 0):.1f}",
             ",".join(f"{k}={v}" for k, v in (r.get("resolved_config") or {}).items()))
            for key, r in sorted(best.items())]


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print(path)
        print(tabulate(best_rows(path), headers=["L", "T", "H", "variant", "best ms", "% floor", "config"]))
