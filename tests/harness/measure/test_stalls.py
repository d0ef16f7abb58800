"""``vk stalls`` on a committed ncu record: the mbarrier waits it reports are the ones read by hand from the same
file (results/notes/2026-12-07-symmetric-warpgroups.md: warpgroup 0 on p1, 5.7% of the samples)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.measure.stalls import Instruction, barrier_waits, code_size, read_source_csv, reason_totals

RECORD = (Path(__file__).parents[3] / "results" / "ncu"
          / "sym-stalls-at-e6602f1-nvidia-h100-80gb-hbm3.sass-sym_verify.csv.xz")


def test_record_waits_match_the_hand_reading():
    [(kernel, instructions)] = read_source_csv(RECORD)
    assert kernel == "_sym_verify_kernel"
    total = sum(instruction.samples for instruction in instructions)
    waits = barrier_waits(instructions)
    samples, sites = waits["mbarrier +0x387e0"]
    assert round(100 * samples / total, 1) == 5.7 and sites == 2
    [(_, qreg)] = read_source_csv(RECORD.parents[0] / "cuda_qreg-131072-64-8-sm_90-default-sass-nvidia-h200.csv")
    qreg_total = sum(instruction.samples for instruction in qreg)
    qreg_waits = barrier_waits(qreg)  # its ring's wait branches 11 instructions after the TRYWAIT
    assert round(100 * qreg_waits["mbarrier [R141+UR9]"][0] / qreg_total) == 19
    assert max(waits, key=lambda key: waits[key][0]) == "wgmma (WARPGROUP.DEPBAR)"


def test_code_size_counts_the_instructions_in_loops_and_reasons_sum_per_kernel():
    """Loops: the instructions executed more often than the first one (every warp runs it once); a file without
    execution counts gives the size alone. The reasons' totals come most first and never exceed the samples."""
    [(_, instructions)] = read_source_csv(RECORD)
    assert code_size(instructions) == ("8720 SASS instructions (136.2 KB), 1669 in loops (26.1 KB: executed more "
                                       "than once a warp)")
    totals = reason_totals(instructions)
    assert list(totals.values()) == sorted(totals.values(), reverse=True)
    assert 0 < sum(totals.values()) <= sum(instruction.samples for instruction in instructions)
    bare = [Instruction(0, "LDC R1, c[0x0][0x28]", 1, {"wait": 1}), Instruction(16, "EXIT", 2, {"selected": 2})]
    assert code_size(bare) == "2 SASS instructions (0.0 KB)"
    assert reason_totals(bare) == {"selected": 2, "wait": 1}


def test_every_kernel_of_a_file():
    kernels = read_source_csv(RECORD.with_name(RECORD.name.replace("sym_verify", "mla")))
    assert [name.split("(")[0].split("<")[0].split()[-1] for name, _ in kernels] == [
        "smxx::decode::get_mla_metadata_kernel", "sm90::flash_fwd_splitkv_mla_kernel",
        "smxx::decode::flash_fwd_mla_combine_kernel"]
    assert all(instructions for _, instructions in kernels)


def test_a_cut_record_with_comment_lines():
    """The older records keep one kernel's columns after a comment line, without ncu's name line."""
    path = RECORD.parents[0] / "cuda_qreg-131072-64-8-sm_90-default-sass-nvidia-h200.csv"
    [(kernel, instructions)] = read_source_csv(path)
    assert kernel == path.name and sum(instruction.samples for instruction in instructions) > 0


def test_branch_counts_only_for_its_own_predicate():
    """A branch on the TRYWAIT's predicate counts for its barrier, a few instructions later too; a branch on
    another predicate, or on the same one after it was written again, does not."""
    instructions = [Instruction(0, "SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [R4+URZ+0x100], R3", 5, {}),
                    Instruction(16, "@!P1  BRA 0x7f00", 4, {}),
                    Instruction(32, "@!P2  BRA 0x7f00", 7, {}),
                    Instruction(48, "SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR4+0x108], R0", 1, {}),
                    Instruction(64, "IADD3 R1, R1, 0x1, RZ", 3, {}),
                    Instruction(80, "@!P1  BRA 0x7f10", 9, {}),
                    Instruction(96, "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R141+UR9], R140", 2, {}),
                    Instruction(112, "ISETP.NE.AND P0, PT, R2, RZ, PT", 3, {}),
                    Instruction(128, "@!P0  BRA 0x7f20", 6, {})]
    assert barrier_waits(instructions) == {"mbarrier +0x100": (12, 1), "mbarrier +0x108": (10, 1),
                                           "mbarrier [R141+UR9]": (2, 1)}


def test_named_barrier_waits_sit_on_the_next_instruction():
    instructions = [Instruction(0, "BAR.SYNC.DEFER_BLOCKING R230, 0x80", 2, {}),
                    Instruction(16, "LDS.128 R140, [R227+0x24880]", 50, {"barrier": 45, "wait": 5}),
                    Instruction(32, "WARPGROUP.DEPBAR.LE gsb0, 0x0", 30, {"barrier": 30}),
                    Instruction(48, "BAR.SYNC.DEFER_BLOCKING 0x2, 0x80", 1, {}),
                    Instruction(64, "SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [R4+URZ+0x387c0], R3", 9, {"barrier": 8})]
    assert barrier_waits(instructions) == {"named barrier (BAR.SYNC)": (47, 1), "wgmma (WARPGROUP.DEPBAR)": (30, 1),
                                           "named barrier (BAR.SYNC) before mbarrier +0x387c0": (9, 1),
                                           "mbarrier +0x387c0": (1, 1)}


def test_refuses_a_file_that_is_not_the_source_page(tmp_path, capsys):
    path = tmp_path / "details.csv"
    path.write_text('"ID","Kernel Name","Metric"\n"0","k","1"\n"1","k","2"\n')
    assert main(["stalls", str(path)]) == 2
    assert "not ncu's SASS source page" in capsys.readouterr().err
    with pytest.raises(ValueError):
        read_source_csv(path)
