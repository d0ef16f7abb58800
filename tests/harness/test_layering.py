"""The harness's subpackages import one another in one direction only (harness/README.md):
measure <- static <- bench <- tune, and decode on measure, static and bench; predict on measure and
static, under tune; no import circle."""

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[2] / "harness"
# What each subpackage may import from the harness besides itself (cli.py and arguments.py,
# the command line, sit above them all).
ALLOWED = {
    "measure": set(),
    "static": {"measure"},
    "bench": {"measure", "static"},
    "tune": {"measure", "static", "bench", "predict"},
    "decode": {"measure", "static", "bench"},
    "predict": {"measure", "static"},
}


def _harness_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("harness."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("harness.")}
    return found


def test_every_subpackage_imports_only_the_ones_below_it():
    wrong = {}
    for package, allowed in ALLOWED.items():
        for path in (HARNESS / package).glob("*.py"):
            used = _harness_imports(path) - {package} - allowed
            if path.name == "cli.py":
                used -= {"arguments"}
            if used:
                wrong[f"{package}/{path.name}"] = sorted(used)
    assert not wrong


def test_no_module_imports_a_module_that_imports_it_back():
    modules = {}
    for path in HARNESS.rglob("*.py"):
        name = ".".join(path.relative_to(HARNESS.parent).with_suffix("").parts)
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("harness"):
                deps.add(node.module)
                deps |= {f"{node.module}.{a.name}" for a in node.names}
        modules[name] = deps
    graph = {name: {d for d in deps if d in modules and d != name} for name, deps in modules.items()}

    def reaches(start, goal, seen):
        return any(d == goal or (d not in seen and not seen.add(d) and reaches(d, goal, seen)) for d in graph[start])

    circles = sorted(name for name in graph if reaches(name, name, set()))
    assert not circles
