"""One rule for the whole command line, run over a table of hostile inputs to every subcommand: exit
status 2, exactly one line on stderr naming the flag or file (what was expected, what was given),
no traceback, and nothing written when the input is refused.

The classes: an output path that cannot be written; a records or table file that is empty,
truncated, not JSONL/YAML or of the wrong kind; unknown names; out-of-range numbers and sizes that
cannot fit; flags that act only on a GPU given on the CPU; unknown config keys; bad storage URLs.
Each case runs ``vk`` in-process (``harness.cli.main``) in a fresh folder holding the fixtures.
"""

import json
import os

import pytest

from harness.cli import main
from harness.measure.records import SCHEMA_VERSION

from conftest import HAS_CUDA

A_FILE = "afile"                       # a regular file: nothing can be written under it
UNWRITABLE = f"{A_FILE}/sub/out.x"     # an output path whose parent folder cannot be created


def _record(kind: str, **payload) -> str:
    return json.dumps({"schema_version": SCHEMA_VERSION, "kind": kind, **payload}) + "\n"


FIXTURES = {
    A_FILE: "x",
    "empty.jsonl": "",
    "truncated.jsonl": _record("bench", variant="triton_splitkv") + '{"schema_version": 1, "kind": "ben',
    "text.jsonl": "hello world\n",
    "not-a-record.jsonl": json.dumps({"variant": "x"}) + "\n",
    "decode.jsonl": _record("decode", context=0),
    "bench.jsonl": _record("bench", variant="triton_splitkv"),
    "broken.yaml": "a: [1, 2\n",
    "empty.yaml": "",
    "list.yaml": "- 1\n- 2\n",
    "not-winners.yaml": "study: {variant: triton_splitkv}\n",
    "fake-winners.yaml": ("s: {variant: triton_splitkv, l_bucket: 4096, tree_nodes: 16, heads: 8, page_size: 64, "
                          "config: {}, gpu: fake-cpu, median_ms: 1.0}\n"),
    "sweep-unknown.yaml": "nonsense: 3\n",
    "sweep-range.yaml": "tree: [0, 16]\n",
    "sweep-type.yaml": "prefix: hello\n",
    "sweep-choice.yaml": "mode: fast\n",
    "sweep-plan.yaml": "plan: twice\n",
    "broken.xz": "not xz at all",
    "bad-source.csv": '"Kernel Name","k",\n"Address","Source","Warp Stall Sampling (All Samples)"\n"zz","NOP","1"\n',
}

# (argv, what the one line must name)
CASES = [
    # output paths that cannot be written, checked before the work
    (("check", "--device", "cpu", "--out", UNWRITABLE), "--out"),
    (("check", "--device", "cpu", "--out", "."), "--out"),
    (("bench", "--out", UNWRITABLE), "--out"),
    (("report", "bench.jsonl", "--out", UNWRITABLE), "--out"),
    (("decode", "--device", "cpu", "--out", UNWRITABLE), "--out"),
    (("decode-report", "decode.jsonl", "--out-dir", UNWRITABLE), "--out-dir"),
    (("decode-report", "decode.jsonl", "--out-dir", A_FILE), "--out-dir"),
    (("tune", "--winners", UNWRITABLE), "--winners"),
    (("tune-quality", "--storage", "sqlite:///x.db", "--study", "s", "--plot", UNWRITABLE), "--plot"),
    (("index", "--out", UNWRITABLE), "--out"),
    (("tune-gemm", "--table", UNWRITABLE, "--out", "o.jsonl"), "--table"),
    (("tune-gemm", "--table", "t.json", "--out", "."), "--out"),
    (("tune-gemm", "--table", "t.json", "--out", "o.jsonl", "--rows", "0,16"), "--rows"),
    (("tune-gemm", "--table", "t.json", "--out", "o.jsonl", "--preset", "k3"), "--preset"),
    # records files: empty, truncated, not JSONL, not records, of the wrong kind, a folder, missing
    (("report", "empty.jsonl"), "empty.jsonl"),
    (("report", "truncated.jsonl"), "truncated.jsonl:2"),
    (("report", "text.jsonl"), "text.jsonl:1"),
    (("report", "broken.yaml"), "broken.yaml:1"),
    (("report", "not-a-record.jsonl"), "not-a-record.jsonl:1"),
    (("report", "decode.jsonl"), "expected bench records"),
    (("report", "."), "folder"),
    (("report", "missing.jsonl"), "no such file"),
    (("decode-report", "bench.jsonl"), "expected decode records"),
    (("decode-report", "truncated.jsonl"), "truncated.jsonl:2"),
    (("decode-report", "missing.jsonl"), "no such file"),
    (("stalls", "missing.csv"), "no such file"),
    (("stalls", "."), "a folder"),
    (("stalls", "text.jsonl"), "not ncu's SASS source page"),
    (("stalls", "empty.jsonl"), "not ncu's SASS source page"),
    (("stalls", "broken.xz"), "cannot be read as CSV"),
    (("stalls", "bad-source.csv"), "not ncu's numbers"),
    (("stalls", "bad-source.csv", "--top", "0"), "--top"),
    (("predict", "--check", "empty.jsonl"), "empty.jsonl"),
    (("predict", "--check", "truncated.jsonl"), "truncated.jsonl:2"),
    (("predict", "--arch", "sm_90", "--check-proxy", "sm_120", "--proxy-storage", "sqlite:///missing.db"),
     "no such file"),
    (("predict-fit", "--records", "truncated.jsonl"), "truncated.jsonl:2"),
    (("predict-fit", "--records", "decode.jsonl"), "expected bench records"),
    # tables: not YAML, empty, another type, not winner records, not measurements
    (("tuned", "--file", "broken.yaml"), "broken.yaml:2"),
    (("tuned", "--file", "empty.yaml"), "empty.yaml"),
    (("tuned", "--file", "list.yaml"), "list.yaml"),
    (("tuned", "--file", "not-winners.yaml"), "not a winner record"),
    (("tuned", "--compare", "broken.yaml", "list.yaml"), "broken.yaml"),
    (("tuned", "--publish", "--file", "empty.yaml"), "empty"),
    (("tuned", "--publish", "--file", "fake-winners.yaml"), "not a measurement"),
    (("tuned", "--json"), "--json"),
    (("tuned", "--explain", "--arch", "sm_120"), "--explain needs --prefix"),
    (("tuned", "--explain", "--arch", "sm_7", "--prefix", "1", "--tree", "1", "--heads", "1"), "--arch"),
    (("bench", "--sweep", "broken.yaml"), "broken.yaml:2"),
    (("bench", "--sweep", "list.yaml"), "list.yaml"),
    (("bench", "--sweep", "sweep-unknown.yaml"), "unknown keys"),
    (("bench", "--sweep", "sweep-range.yaml"), "tree"),
    (("bench", "--sweep", "sweep-type.yaml"), "prefix"),
    (("bench", "--sweep", "sweep-choice.yaml"), "mode"),
    (("bench", "--sweep", "sweep-plan.yaml"), "plan"),
    (("bench", "--plan", "twice"), "--plan"),
    (("bench", "--sweep", "missing.yaml"), "--sweep"),
    # unknown names
    (("bench", "--variants", "no_such_variant"), "no_such_variant"),
    (("tune", "--variants", "no_such_variant"), "--variants"),
    (("decode", "--device", "cpu", "--variants", "no_such_variant"), "--variants"),
    (("decode", "--preset", "no_such_preset"), "--preset"),
    (("predict", "--variant", "no_such_variant"), "no_such_variant"),
    (("predict", "--arch", "sm_999"), "sm_999"),
    (("predict-fit", "--records", "bench.jsonl", "--variant", "no_such_variant"), "no_such_variant"),
    (("tune-quality", "--storage", "sqlite:///missing.db", "--study", "s"), "no such file"),
    (("predict-fit", "--variant", "cuda_ws", "--study", "cuda_ws|x", "--storage", "sqlite:///missing.db"),
     "no such file"),
    # out-of-range numbers and sizes that cannot fit
    (("decode", "--device", "cpu", "--seed", "-1"), "--seed"),
    (("tune", "--seed", str(2**40)), "--seed"),
    (("decode", "--device", "cpu", "--prompt", "1,2,99999999"), "--prompt"),
    (("decode", "--device", "cpu", "--prompt", "-1"), "--prompt"),
    (("decode", "--device", "cpu", "--prompt-len", "100000"), "positions"),
    (("decode", "--device", "cpu", "--context", "99999999999"), "--context"),
    (("decode", "--preset", "k2-tp8", "--device", "cpu", "--context", "262000"), "positions"),
    (("tune", "--prefix", "99999999999"), "--prefix"),
    (("tune", "--page-size", "7"), "--page-size"),
    (("bench", "--prefix", "99999999999"), "--prefix"),
    # flags that act only on a GPU, given on the CPU; flags that need another
    (("decode", "--device", "cpu", "--gemm", "splitk"), "--gemm splitk"),
    (("decode", "--device", "cpu", "--gemm-table", "bench.jsonl"), "--gemm-table"),
    (("decode", "--device", "cpu", "--pdl"), "--pdl"),
    (("decode", "--device", "cpu", "--counters"), "--counters"),
    (("decode", "--device", "cpu", "--weights", A_FILE), "--weights"),
    (("decode-report", "decode.jsonl", "--name", "a/b"), "--name"),
    # unknown config keys, as the API refuses them
    (("static", "--variant", "triton_splitkv", "--config", '{"NOPE": 1}'), "NOPE"),
    (("predict", "--config", '{"NOPE": 1}'), "NOPE"),
    # storage URLs that no storage can open: refused at once, in one line
    (("tune", "--storage", "foo"), "storage"),
    (("tune", "--storage", "sqlite://relative-without-third-slash.db"), "storage"),
    (("tune", "--storage", "journal://"), "storage"),
    (("tune-quality", "--storage", "foo", "--study", "s"), "storage"),
    # numbers out of range and names unknown, refused by the parser
    (("decode", "--context", "-5"), "--context"),
    (("decode", "--page-size", "0"), "--page-size"),
    (("decode", "--new-tokens", "-3"), "--new-tokens"),
    (("decode", "--budget", "0"), "--budget"),
    (("decode", "--budget", "2000"), "--budget"),
    (("decode", "--temperature", "-1"), "--temperature"),
    (("bench", "--tree", "0"), "--tree"),
    (("tune", "--heads", "129"), "--heads"),
    (("check", "--cases", "no_such_case", "--device", "cpu"), "--cases"),
    (("check", "--variants", "no_such_variant", "--device", "cpu"), "--variants"),
    (("static", "--variant", "no_such_variant"), "--variant"),
]
if not HAS_CUDA:
    CASES += [(("decode", "--preset", "k2-tp8", "--device", "cpu"), "GiB"),
              (("decode", "--device", "cuda"), "--device"),
              (("ceilings",), "needs a CUDA GPU"), (("check", "--device", "cuda"), "--device")]


def _tree(folder):
    return {(path, os.path.getsize(os.path.join(path, name)), name)
            for path, _, names in os.walk(folder) for name in names}


@pytest.mark.parametrize("argv, named", CASES, ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_hostile_input_is_one_line_exit_2_and_writes_nothing(argv, named, tmp_path, monkeypatch, capsys):
    for name, text in FIXTURES.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VK_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("VK_TUNE_FAKE", "1")  # vk tune checks its inputs before it looks for a GPU
    before = _tree(tmp_path)
    try:
        code = main(list(argv))
    except SystemExit as error:  # argparse's own refusals
        code = error.code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, (code, captured.err[-800:], captured.out[-400:])
    assert len(lines) == 1, captured.err
    assert named in lines[0], lines[0]
    assert _tree(tmp_path) == before, "a refused input wrote files"


def test_every_subcommand_is_in_the_table():
    from harness.cli import build_parser

    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)
    covered = {argv[0] for argv, _ in CASES}
    # env takes no input; ceilings only a GPU (in the table where there is none)
    assert commands - covered <= {"env", "ceilings"}, sorted(commands - covered)
