"""``vk stalls`` on a committed ncu record: the mbarrier waits it reports are the ones read by hand from the same
file (results/notes/2026-12-07-symmetric-warpgroups.md: warpgroup 0 on p1, 5.7% of the samples)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.measure.stalls import Instruction, barrier_waits, read_source_csv

RECORD = (Path(__file__).parents[3] / "results" / "ncu"
          / "sym-stalls-at-e6602f1-nvidia-h100-80gb-hbm3.sass-sym_verify.csv.xz")


def test_record_waits_match_the_hand_reading():
    [(kernel, instructions)] = read_source_csv(RECORD)
    assert kernel == "_sym_verify_kernel"
    total = sum(instruction.samples for instruction in instructions)
    waits = barrier_waits(instructions)
    samples, sites = waits["mbarrier +0x387e0"]
    assert round(100 * samples / total, 1) == 5.7 and sites == 2
    assert max(waits, key=lambda key: waits[key][0]) == "wgmma (WARPGROUP.DEPBAR)"


def test_every_kernel_of_a_file():
    kernels = read_source_csv(RECORD.with_name(RECORD.name.replace("sym_verify", "mla")))
    assert [name.split("(")[0].split("<")[0].split()[-1] for name, _ in kernels] == [
        "smxx::decode::get_mla_metadata_kernel", "sm90::flash_fwd_splitkv_mla_kernel",
        "smxx::decode::flash_fwd_mla_combine_kernel"]
    assert all(instructions for _, instructions in kernels)


def test_branch_counts_only_for_its_own_predicate():
    instructions = [Instruction(0, "SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [R4+URZ+0x100], R3", 5, {}),
                    Instruction(16, "@!P2  BRA 0x7f00", 7, {}),
                    Instruction(32, "SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR4+0x108], R0", 1, {}),
                    Instruction(48, "IADD3 R1, R1, 0x1, RZ", 3, {}),
                    Instruction(64, "@!P1  BRA 0x7f10", 9, {})]
    assert barrier_waits(instructions) == {"mbarrier +0x100": (12, 1), "mbarrier +0x108": (1, 1)}


def test_refuses_a_file_that_is_not_the_source_page(tmp_path, capsys):
    path = tmp_path / "details.csv"
    path.write_text('"ID","Kernel Name","Metric"\n"0","k","1"\n"1","k","2"\n')
    assert main(["stalls", str(path)]) == 2
    assert "not ncu's SASS source page" in capsys.readouterr().err
    with pytest.raises(ValueError):
        read_source_csv(path)
