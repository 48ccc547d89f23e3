"""Size guards: `bert4long/models/__init__.py` stays model assembly, and no function grows past one screen, in the package,
the benchmarks, the studies or the examples."""
import ast
import pathlib

from paths import ROOT

ROOT = pathlib.Path(ROOT)
PACKAGE = ROOT / "bert4long"
GUARDED = ("bert4long", "benchmarks", "studies", "examples")
MAX_MODELS_LINES = 450
MAX_FUNCTION_LINES = 80


def long_functions(source, max_lines=MAX_FUNCTION_LINES):
    """``(line, name, length)`` of every function in ``source`` over ``max_lines`` lines (decorators excluded)."""
    return [(node.lineno, node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > max_lines]


def test_models_py_stays_model_assembly():
    lines = len((PACKAGE / "models" / "__init__.py").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODELS_LINES, f"bert4long/models/__init__.py has {lines} lines (at most {MAX_MODELS_LINES})"


def test_no_function_over_80_lines():
    offenders = [f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
                 for folder in GUARDED for path in sorted((ROOT / folder).rglob("*.py"))
                 for line, name, length in long_functions(path.read_text(encoding="utf-8"))]
    print("\n".join(offenders))
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(offenders)


def test_the_function_check_can_fail():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(f"def long():\n{body}\n") == [(1, "long", MAX_FUNCTION_LINES + 1)]
    assert long_functions("def short():\n    return 1\n") == []
