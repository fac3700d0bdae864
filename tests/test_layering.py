"""Imports flow downward (DESIGN.md), and simpy lives in the engine alone."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "scalesim"

# What each layer may import from scalesim (besides itself and the leaf
# helpers units, errors, schema).
ALLOWED = {
    "hardware": set(),
    "topology": {"hardware"},
    "collectives": {"topology", "hardware"},
    "program": {"collectives"},
    "models": set(),
    "costs": {"hardware", "models"},
    "parallel": {"models", "costs", "collectives", "program", "topology", "hardware"},
    "engine": {"program", "collectives", "serving"},
    "serving": {"scenario", "topology"},   # serving specs, workload, batching policy, metrics
    "result": {"engine"},
    "scenario": {"topology"},
    "report": {"result", "engine", "hardware", "models", "topology", "units"},
}
LEAVES = {"units", "errors", "schema", "fairshare", "paths", "yaml_load", "limits"}


def layer_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def scalesim_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("scalesim."):
            names.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("scalesim."))
    return names


def test_imports_flow_downward():
    problems = []
    for path in PACKAGE.rglob("*.py"):
        layer = layer_of(path)
        if layer not in ALLOWED:
            continue
        for imported in scalesim_imports(path) - {layer} - LEAVES:
            if imported not in ALLOWED[layer]:
                problems.append(f"{path.relative_to(PACKAGE)} imports scalesim.{imported}")
    assert not problems, problems


def test_simpy_is_imported_by_the_engine_only():
    users = [p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py")
             if "import simpy" in p.read_text() and layer_of(p) != "engine"]
    assert users == []
