"""The house rules of DESIGN.md that a machine can measure: small modules with one concern
(under 400 lines) and short functions (under 60 lines), across the whole package."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "scalesim"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60



def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_bundled" not in p.parts)


def long_functions(path: Path, root: Path = PACKAGE) -> list[str]:
    """Functions (methods and nested ones too) longer than the limit, from `def` to their last line."""
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(root)}:{node.lineno} {node.name}() is {node.end_lineno - node.lineno + 1} lines"
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


def test_the_measure_counts_a_function_from_def_to_its_last_line(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))     # def + 60 lines = 61
    (tmp_path / "long.py").write_text(f"@decorated\ndef long():\n{body}\n\n\ndef short():\n    pass\n")
    assert long_functions(tmp_path / "long.py", tmp_path) == [f"long.py:2 long() is {MAX_FUNCTION_LINES + 1} lines"]


def test_no_module_is_over_400_lines():
    long = [f"{p.relative_to(PACKAGE)}: {n} lines" for p in modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert long == [], "split these by concern: " + "; ".join(long)


def test_no_function_is_over_60_lines():
    long = [offender for p in modules() for offender in long_functions(p)]
    assert long == [], "split these: " + "; ".join(long)



def test_one_did_you_mean_helper():
    """Close-name suggestions come from errors.did_you_mean alone, so every message suggests alike."""
    own = [str(p.relative_to(PACKAGE)) for p in modules() if p.name != "errors.py" and any(
        isinstance(n, (ast.Import, ast.ImportFrom)) and "difflib" in ([a.name for a in n.names] + [getattr(n, "module", None) or ""])
        for n in ast.walk(ast.parse(p.read_text())))]
    assert own == [], "use scalesim.errors.did_you_mean in: " + ", ".join(own)
