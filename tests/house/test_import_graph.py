"""Imports only run downward: the documented level table of bert4long's modules.

Every module gets a level; a module may import modules of its own level or
below, never above. Imports inside functions (lazy imports) count too: a lazy
import only hides a cycle, it does not remove it.

    level  room            modules
    0      foundations     bert4long.ops, bert4long.output_folders, bert4long.tokenizers,
                           bert4long.tensorflow_only, bert4long.lazy_names, bert4long.kernel_names,
                           bert4long.pretrained, bert4long.position_alpha, bert4long.rope_scaling, bert4long.precision,
                           bert4long.families (the table)
    1      attention       bert4long.attention (kernels and MultiHeadAttention)
    2      layers          bert4long.layers
    3      checkpoints     bert4long.checkpoints (both formats in and out, configs, Source, extend)
    4      models          bert4long.models (the builders, segment recurrence) and every other top-level module:
                           the bert4keras facade (backend, snippets), optimizers
    5      pipelines       bert4long.data, bert4long.training, bert4long.export,
                           bert4long.text_serving, bert4long.prediction
    6      entry points    bert4long.cli, bert4long (the package's __init__)

A new module is placed by its prefix: the longest prefix in `LEVELS` wins, and
a top-level module not listed is level 4. Within a level, modules import each other without a circle
(`import_circles`): module to module, lazy imports included.

Around the package the same rule holds between folders (`HOUSE`): `benchmarks/` (the product's measurements)
imports bert4long, `studies/` (the research) imports both, and bert4long imports neither.
"""
import ast
import pathlib

from paths import ROOT

PACKAGE = pathlib.Path(ROOT) / "bert4long"

LEVELS = {
    "bert4long.ops": 0,
    "bert4long.output_folders": 0,
    "bert4long.tensorflow_only": 0,
    "bert4long.precision": 0,
    "bert4long.lazy_names": 0,
    "bert4long.kernel_names": 0,
    "bert4long.tokenizers": 0,
    "bert4long.pretrained": 0,
    "bert4long.position_alpha": 0,
    "bert4long.rope_scaling": 0,
    "bert4long.families": 0,
    "bert4long.attention": 1,
    "bert4long.layers": 2,
    "bert4long.checkpoints": 3,
    "bert4long.data": 5,
    "bert4long.training": 5,
    "bert4long.export": 5,
    "bert4long.text_serving": 5,
    "bert4long.prediction": 5,
    "bert4long.cli": 6,
    "bert4long": 6,  # the package itself (bert4long/__init__.py)
}
MODELS_LEVEL = 4


def level(module):
    """Level of a dotted module name under `LEVELS` (longest prefix; other top-level modules: 3)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LEVELS and (end > 1 or len(parts) == 1):
            return LEVELS[prefix]
    return MODELS_LEVEL


def module_name(path, package_dir):
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name, package_dir):
    """Whether dotted ``name`` is a module or package of ``package_dir`` (not a name defined in one)."""
    path = package_dir.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_modules(path, package_dir):
    """``(line, module)`` of every bert4long import in ``path``, lazy ones included."""
    name = module_name(path, package_dir)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from bert4long import layers` imports bert4long.layers, not the package's __init__ alone
            targets = list(dict.fromkeys(f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}", package_dir)
                                         else base for alias in node.names))
        else:
            continue
        for target in targets:
            if target == "bert4long" or target.startswith("bert4long."):
                yield node.lineno, target


def upward_imports(package_dir=PACKAGE):
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        importer = module_name(path, package_dir)
        for line, target in imported_modules(path, package_dir):
            if level(target) > level(importer):
                found.append(f"{path.relative_to(package_dir.parent)}:{line}: {importer} (level {level(importer)}) "
                             f"imports {target} (level {level(target)})")
    return found


def test_level_table():
    assert level("bert4long.ops.dropout") == 0
    assert level("bert4long.attention.multi_head") == 1
    assert level("bert4long.layers.embeddings") == 2
    assert level("bert4long.families") == 0
    assert level("bert4long.checkpoints.source") == 3
    assert level("bert4long.models.longformer") == MODELS_LEVEL
    assert level("bert4long.some_new_module") == MODELS_LEVEL
    assert level("bert4long.training.loop") == 5
    assert level("bert4long.cli.finetune") == 6
    assert level("bert4long") == 6


def test_upward_imports_are_found(tmp_path):
    """The check can fail: a lazy upward import in a low module is reported with its line."""
    package = tmp_path / "bert4long"
    (package / "ops").mkdir(parents=True)
    (package / "ops" / "bad.py").write_text("def f():\n    from bert4long.layers import dropout\n")
    assert upward_imports(package) == [
        "bert4long/ops/bad.py:2: bert4long.ops.bad (level 0) imports bert4long.layers (level 2)"
    ]


def test_no_import_runs_upward():
    offending = upward_imports()
    assert not offending, "imports that run up the level table (see this test's docstring):\n" + "\n".join(offending)


def import_graph(package_dir=PACKAGE):
    """``{module: the bert4long modules it imports}``, lazy imports included (`imported_modules`)."""
    paths = {module_name(path, package_dir): path for path in sorted(package_dir.rglob("*.py"))}
    return {importer: sorted({target for _, target in imported_modules(path, package_dir)
                              if target in paths and target != importer}) for importer, path in paths.items()}


def import_circles(package_dir=PACKAGE):
    """Each circle of `import_graph`, as the modules it passes through in order, first one smallest."""
    graph, circles, done = import_graph(package_dir), set(), set()

    def walk(module, path):
        for target in graph[module]:
            if target in path:
                circle = path[path.index(target):]
                start = circle.index(min(circle))
                circles.add(tuple(circle[start:] + circle[:start]))
            elif target not in done:
                walk(target, path + [target])
        done.add(module)

    for module in graph:
        if module not in done:
            walk(module, [module])
    return sorted(" -> ".join(circle + (circle[0],)) for circle in circles)


def test_import_circles_are_found(tmp_path):
    """The check can fail: a circle closed by a lazy import, within one level, is reported."""
    package = tmp_path / "bert4long"
    (package / "cli").mkdir(parents=True)
    (package / "cli" / "a.py").write_text("from bert4long.cli.b import f\n")
    (package / "cli" / "b.py").write_text("def f():\n    from bert4long.cli import a\n")
    assert import_circles(package) == ["bert4long.cli.a -> bert4long.cli.b -> bert4long.cli.a"]


def test_no_import_circle():
    circles = import_circles()
    assert not circles, "modules that import each other (move the shared fact down to one of them):\n" + \
        "\n".join(circles)


HOUSE = {"bert4long": 0, "benchmarks": 1, "studies": 2}   # the product, its measurements, the research on it


def house_imports(root=PACKAGE.parent):
    """``path:line: folder imports module`` for every import of a higher folder of `HOUSE` (lazy ones included)."""
    found = []
    for folder, rank in HOUSE.items():
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                found += [f"{path.relative_to(root)}:{node.lineno}: {folder} imports {name}"
                          for name in names if HOUSE.get(name.split(".")[0], -1) > rank]
    return found


def test_house_imports_are_found(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bad.py").write_text("def f():\n    from studies.report import fmt\n")
    assert house_imports(tmp_path) == ["benchmarks/bad.py:2: benchmarks imports studies.report"]


def test_studies_sit_above_benchmarks_above_the_package():
    offending = house_imports()
    assert not offending, "imports that run up from bert4long to benchmarks to studies:\n" + "\n".join(offending)
