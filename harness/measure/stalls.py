"""Where a kernel's warps wait, from ncu's per-SASS-instruction stall samples.

Input: the CSV that ``ncu -i REP --page source --csv --print-source sass`` prints (plain or ``.xz``), as
``experiments/sym/ncu_stalls.sh`` writes it, or one kernel's columns after ``#`` comment lines (older records).
Output: the kernel's code size (its instructions, and those in loops where the file has ncu's execution counts),
the samples per stall reason, the instructions with the most samples, and the samples summed per mbarrier (every
``SYNCS...TRYWAIT`` on one shared-memory address, with the ``@!P BRA`` right after it that waits for its answer, in
line or in the out-of-line retry loop) and per kind of wait (wgmma, named barrier).
"""

from __future__ import annotations

import csv
import lzma
import re
from dataclasses import dataclass
from pathlib import Path

_TRYWAIT = re.compile(r"SYNCS\.PHASECHK\S*TRYWAIT\s+(!?P\d)\s*,\s*\[([^\]]+)\]")
_BRANCH_ON = re.compile(r"^@!?(P\d)\s+BRA\b")
_OFFSET = re.compile(r"(0x[0-9a-f]+)\s*$")
_WRITES_PREDICATE = re.compile(r"^(?:@!?U?P\w+\s+)?[A-Z][\w.]*\s+(P\d)\s*,")  # e.g. ISETP.NE.AND P0, ...
_BAR_SYNC = re.compile(r"(^|\s)BAR\.SYNC\b")  # a named barrier's wait (not WARPGROUP.DEPBAR, not MEMBAR)
_BRANCH_WINDOW = 24  # instructions between a TRYWAIT and the branch on its answer (cuda_qreg: 11)


@dataclass(frozen=True)
class Instruction:
    offset: int  # from the kernel's first instruction
    sass: str
    samples: int
    reasons: dict[str, int]  # stall reason -> samples, all samples (issued or not)
    executed: int = 0  # warp instructions executed (ncu's "Instructions Executed"; 0 where the file has none)


def read_source_csv(path: Path) -> list[tuple[str, list[Instruction]]]:
    """Each kernel of the file (ncu prints one block per kernel): its name and its instructions, in address
    order."""
    opener = lzma.open if str(path).endswith(".xz") else open
    try:
        with opener(path, "rt", newline="") as file:
            rows = list(csv.reader(file))
    except (lzma.LZMAError, UnicodeDecodeError, csv.Error, EOFError) as error:
        raise ValueError(f"{path}: cannot be read as CSV ({error})") from None
    rows = [row for row in rows if row and not row[0].startswith("#")]  # our records' comment lines
    if rows and rows[0][:1] == ["Address"]:  # one kernel's columns without ncu's name line (cut records)
        rows.insert(0, ["Kernel Name", path.name])
    starts = [i for i, row in enumerate(rows) if row[:1] == ["Kernel Name"]]
    if not rows or starts[:1] != [0]:
        raise ValueError(f"{path}: not ncu's SASS source page as CSV (--page source --csv --print-source sass)")
    return [_read_kernel(path, rows[start:end]) for start, end in zip(starts, starts[1:] + [len(rows)])]


def _read_kernel(path: Path, rows: list[list[str]]) -> tuple[str, list[Instruction]]:
    if len(rows) < 3 or "Address" not in rows[1]:
        raise ValueError(f"{path}: not ncu's SASS source page as CSV (--page source --csv --print-source sass)")
    header = rows[1]
    address, source = header.index("Address"), header.index("Source")
    samples = header.index("Warp Stall Sampling (All Samples)")
    executed = header.index("Instructions Executed") if "Instructions Executed" in header else None
    reasons = {name[len("stall_"):]: i for i, name in enumerate(header)
               if name.startswith("stall_") and "(Not Issued)" not in name}
    try:
        base = int(rows[2][address], 16)
        instructions = [Instruction(int(row[address], 16) - base, row[source].strip(), int(row[samples] or 0),
                                    {name: int(row[i] or 0) for name, i in reasons.items() if (row[i] or "0") != "0"},
                                    int(row[executed] or 0) if executed is not None else 0)
                        for row in rows[2:] if len(row) == len(header)]
    except ValueError as error:
        raise ValueError(f"{path}: a row that is not ncu's numbers ({error})") from None
    return rows[0][1], instructions


def barrier_waits(instructions: list[Instruction]) -> dict[str, tuple[int, int]]:
    """Samples per waited-on thing, value (samples, sites): ``mbarrier <address>`` (the TRYWAIT, and the branch on
    its predicate that waits for its answer: the next one within ``_BRANCH_WINDOW`` instructions, unless the
    predicate is written first), ``wgmma (WARPGROUP.DEPBAR)``, ``named barrier (BAR.SYNC)`` (ncu puts a warp
    waiting at BAR.SYNC on the instruction after it: that one's ``barrier`` samples), keyed ``before <mbarrier>``
    where that instruction is a TRYWAIT."""
    waits: dict[str, list[int]] = {}

    def add(key: str, samples: int) -> None:
        entry = waits.setdefault(key, [0, 0])
        entry[0] += samples
        entry[1] += 1

    pending: tuple[str, str, int] | None = None  # (predicate, barrier key, instructions left) of the last TRYWAIT
    bar_samples = None  # the BAR.SYNC just before: its own samples
    for instruction in instructions:
        sass = instruction.sass
        match = _TRYWAIT.search(sass)
        if match:
            offset = _OFFSET.search(match.group(2).replace("URZ", "").rstrip("+ "))
            key = f"mbarrier +{offset.group(1)}" if offset else f"mbarrier [{match.group(2)}]"
        own = instruction.samples  # its samples less those of a warp still at the BAR.SYNC before it
        if bar_samples is not None:  # (the compiler puts one before many TRYWAITs: the warps' skew there)
            at_bar = instruction.reasons.get("barrier", 0)
            own -= at_bar
            add("named barrier (BAR.SYNC)" + (f" before {key}" if match else ""), bar_samples + at_bar)
        bar_samples = instruction.samples if _BAR_SYNC.search(sass) else None
        if match:
            pending = (match.group(1).lstrip("!"), key, _BRANCH_WINDOW)
            add(key, own)
            continue
        if "WARPGROUP.DEPBAR" in sass:
            add("wgmma (WARPGROUP.DEPBAR)", own)
        if pending:
            branch = _BRANCH_ON.match(sass)
            written = _WRITES_PREDICATE.match(sass)
            if branch and branch.group(1) == pending[0]:
                waits[pending[1]][0] += instruction.samples
                pending = None
            elif (written and written.group(1) == pending[0]) or pending[2] <= 1:
                pending = None
            else:
                pending = (pending[0], pending[1], pending[2] - 1)
    return {key: (samples, sites) for key, (samples, sites) in waits.items()}


def code_size(instructions: list[Instruction]) -> str:
    """The kernel's instructions and bytes (16 a Hopper or Blackwell SASS instruction), and those in loops: executed
    more often than its first instruction, which every warp runs once (the tile loops, and the waits' retry loops:
    the code the instruction cache must hold while the kernel runs)."""
    line = f"{len(instructions)} SASS instructions ({16 * len(instructions) / 1024:.1f} KB)"
    once = instructions[0].executed if instructions else 0
    if once:
        looped = sum(1 for instruction in instructions if instruction.executed > once)
        line += f", {looped} in loops ({16 * looped / 1024:.1f} KB: executed more than once a warp)"
    return line


def reason_totals(instructions: list[Instruction]) -> dict[str, int]:
    """Samples per stall reason over the kernel, most first."""
    totals: dict[str, int] = {}
    for instruction in instructions:
        for name, count in instruction.reasons.items():
            totals[name] = totals.get(name, 0) + count
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def format_stalls(path: Path, top: int = 20) -> str:
    """Per kernel of the file: its code size, then three markdown tables: the samples per stall reason, the ``top``
    instructions by samples, and the waits by barrier."""
    from tabulate import tabulate

    parts = []
    for kernel, instructions in read_source_csv(path):
        total = sum(instruction.samples for instruction in instructions) or 1
        reason_rows = [(name, f"{100 * count / total:.1f}", count)
                       for name, count in list(reason_totals(instructions).items())[:top]]
        busiest = sorted(instructions, key=lambda instruction: -instruction.samples)[:top]
        rows = [(f"{instruction.offset:#x}", f"{100 * instruction.samples / total:.1f}", instruction.sass[:72],
                 ", ".join(f"{name} {count}" for name, count in
                           sorted(instruction.reasons.items(), key=lambda item: -item[1])[:2]))
                for instruction in busiest]
        waits = sorted(barrier_waits(instructions).items(), key=lambda item: -item[1][0])
        wait_rows = [(key, f"{100 * samples / total:.1f}", sites) for key, (samples, sites) in waits]
        parts += [f"# {kernel[:120]}: {total} stall samples over {len(instructions)} SASS instructions "
                  f"({path.name})", "", f"Code: {code_size(instructions)}", "",
                  tabulate(reason_rows, headers=("stall reason", "% samples", "samples"), tablefmt="github"), "",
                  tabulate(rows, headers=("offset", "% samples", "SASS", "top reasons"), tablefmt="github"), "",
                  tabulate(wait_rows, headers=("waits on", "% samples", "sites"), tablefmt="github"), ""]
    return "\n".join(parts)
