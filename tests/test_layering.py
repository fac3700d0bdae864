"""Imports flow downward (DESIGN.md): every module of the package has a layer and imports
only the layers below it; simpy lives in the engine alone, matplotlib in report/ alone, and
results and reports can be read on a machine without simpy."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "scalesim"

# What each layer may import from scalesim (besides itself and the leaves).
BELOW_APP = {"hardware", "topology", "collectives", "program", "timeline", "models", "costs", "parallel",
             "engine", "serving", "scenario", "result"}
ALLOWED = {
    "hardware": set(),
    "topology": {"hardware"},
    "collectives": {"topology", "hardware"},
    "program": {"collectives"},
    "timeline": set(),
    "models": set(),
    "costs": {"hardware", "models"},
    "parallel": {"models", "costs", "collectives", "program", "topology", "hardware"},
    "engine": {"program", "collectives", "serving", "timeline"},
    "serving": {"scenario", "topology"},   # serving specs, workload, batching policy, metrics
    "result": {"timeline"},
    "scenario": {"topology"},
    "report": {"result", "timeline", "hardware", "models", "topology"},
    "app": BELOW_APP,                      # orchestration: wires the layers, never draws
    "cli": BELOW_APP | {"app", "report"},  # only wires
    "__main__": {"cli"},
    "__init__": set(),
}
LEAVES = {"units", "errors", "schema", "fairshare", "paths", "yaml_load", "limits", "outputs"}


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


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_bundled" not in p.parts)


def test_every_module_has_a_layer():
    loose = [str(p.relative_to(PACKAGE)) for p in modules() if layer_of(p) not in ALLOWED | dict.fromkeys(LEAVES)]
    assert loose == []


def test_imports_flow_downward():
    problems = []
    for path in modules():
        layer = layer_of(path)
        allowed = ALLOWED.get(layer, set())
        for imported in scalesim_imports(path) - {layer} - LEAVES:
            if imported not in allowed:
                problems.append(f"{path.relative_to(PACKAGE)} imports scalesim.{imported}")
    assert not problems, problems


def test_leaves_import_only_leaves():
    problems = [f"{p.relative_to(PACKAGE)} imports scalesim.{imported}" for p in modules()
                if layer_of(p) in LEAVES for imported in scalesim_imports(p) - LEAVES]
    assert not problems, problems


def test_simpy_is_imported_by_the_engine_only():
    users = [p.relative_to(PACKAGE) for p in modules()
             if "import simpy" in p.read_text() and layer_of(p) != "engine"]
    assert users == []


def test_matplotlib_is_imported_by_report_only():
    users = [p.relative_to(PACKAGE) for p in modules()
             if "matplotlib" in scalesim_imports_of_third_party(p) and layer_of(p) != "report"]
    assert users == []


def scalesim_imports_of_third_party(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
    return names


BLOCK_SIMPY = """
import importlib.abc, pkgutil, sys
class NoSimpy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "simpy" or name.startswith("simpy."):
            raise ImportError("simpy is not installed here")
sys.meta_path.insert(0, NoSimpy())
import scalesim.result, scalesim.report
for info in pkgutil.iter_modules(scalesim.report.__path__):
    __import__("scalesim.report." + info.name)
assert "simpy" not in sys.modules
print("ok")
"""


def test_results_and_reports_are_read_without_the_engine():
    done = subprocess.run([sys.executable, "-c", BLOCK_SIMPY], capture_output=True, text=True,
                          cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
