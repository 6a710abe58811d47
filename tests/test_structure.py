"""The package's layering, read from the source with `ast`: no package imports one above it, and
no function-local import hides a cycle.

`LAYERS` is the one statement of the layering, bottom to top. A module of package P may import
its own package and the packages of lower layers only; two packages of one layer never import
each other. This holds for every import, at module level or inside a function. A
function-local import is allowed only for an optional dependency (`OPTIONAL`) or where
`ALLOWED_LOCAL` names it with its reason: everything else is imported at module level, where a
cycle fails at import time instead of hiding until the function runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "posteriorjax"

# Bottom to top. `files` is the ground floor (files on disk, digests, provenance: imports no
# other package), beside `registry` (the one registry shape); `__init__` is the root package
# (`__version__` only). `kinds` (the network-kind registry) sits above `nn`, below the samplers
# that register their own kinds.
LAYERS = (
    ("files", "registry", "__init__"),
    ("deferred",),
    ("checks",),
    ("console", "rng", "parallel", "grids"),
    ("random_fields", "physics", "observations", "nn", "metrics"),
    ("diffusion", "tasks", "kinds"),
    ("reference",),
    ("samplers",),
    ("training",),
    ("plugins",),
    ("sweep",),
    ("report",),
    ("exchange",),
    ("studies", "testing"),
    ("cli",),
    ("__main__",),
)

# Optional dependencies (extras, or heavy imports only one path needs): imported where used,
# so that the package imports without them.
OPTIONAL = {
    "h5py",  # [exchange]
    "datasets",  # [posteriorbench]
    "torch",  # [bench]; reading .pt sample files
    "flax",  # [flax]; nn.flax_adapter
    "neuraloperator",  # [bench]
    "matplotlib",  # pyplot picks a backend on import: only the studies' own plots import it
}

# (file relative to the package, imported module): function-local imports kept on purpose.
ALLOWED_LOCAL = {
    # the CLI entry point imports absl, ml_collections and JAX (`parallel`) only once a
    # subcommand runs, so `posteriorjax --help` answers without loading JAX
    **{("cli.py", m): "lazy entry point" for m in ("absl", "ml_collections", "posteriorjax.parallel")},
}


def _package(module: str) -> str:
    """The package of a dotted module name inside posteriorjax (`posteriorjax.sweep.run` -> sweep)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path):
    """Yield (line, imported module, function-local?) for every import of `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    module = _module_of(path, root)
    is_package = path.name == "__init__.py"

    def visit(node, local):
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield child.lineno, alias.name, local
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: resolve against this module's package
                    anchor = module.split(".")[: len(module.split(".")) - child.level + is_package]
                    base = ".".join([*anchor, *([base] if base else [])])
                # `from posteriorjax import tasks` imports the package `tasks`
                names = [f"{base}.{a.name}" for a in child.names] if base == "posteriorjax" else [base]
                for name in dict.fromkeys(names):
                    yield child.lineno, name, local
            yield from visit(child, inner)

    yield from visit(tree, False)


def _layer(package: str) -> int:
    for i, layer in enumerate(LAYERS):
        if package in layer:
            return i
    raise KeyError(package)


def _package_of(module: str, root: Path) -> str:
    package = _package(module)
    # `from posteriorjax import __version__`: a name of the root package, not a package
    return package if (root / package).is_dir() or (root / f"{package}.py").is_file() else "__init__"


def violations(root: Path = PACKAGE) -> list[str]:
    """Every import of the package under `root` that breaks the layering or hides in a function."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        own = _package_of(_module_of(path, root), root)
        for line, imported, local in _imports(path, root):
            where = f"{rel}:{line}"
            if imported == "posteriorjax" or imported.startswith("posteriorjax."):
                target = _package_of(imported, root)
                if target != own:
                    mine, theirs = _layer(own), _layer(target)
                    if theirs >= mine:
                        out.append(f"{where}: {own} imports {imported} (layer {theirs} >= its {mine})")
            if local and imported.split(".")[0] not in OPTIONAL and (rel, imported) not in ALLOWED_LOCAL:
                out.append(f"{where}: function-local import of {imported}")
    return out


def test_every_package_has_one_layer():
    packages = {p.stem for p in PACKAGE.glob("*.py")} | {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    listed = [p for layer in LAYERS for p in layer]
    assert sorted(listed) == sorted(packages)


def test_no_package_imports_upward_and_no_local_import_hides_a_cycle():
    found = violations()
    assert not found, f"{len(found)} violation(s) of the layering in tests/test_structure.py:\n" + "\n".join(
        found
    )


def test_the_check_catches_an_upward_and_a_local_import(tmp_path):
    """An upward import (module level) and a cycle-hiding local import are both reported."""
    root = tmp_path / "posteriorjax"
    for package in ("sweep", "report"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "checks.py").write_text("")
    (root / "sweep" / "__init__.py").write_text("from posteriorjax.report import tables\n")
    (root / "files.py").write_text("def f():\n    import h5py\n    from posteriorjax import checks\n")
    found = violations(root)
    assert len(found) == 3, found
    assert found[0].startswith("files.py:3: files imports posteriorjax.checks")
    assert found[1] == "files.py:3: function-local import of posteriorjax.checks"
    assert found[2].startswith("sweep/__init__.py:1: sweep imports posteriorjax.report (layer")


def test_the_ground_floor_imports_no_other_package():
    """`files` (after diffrax's `_misc.py`) and `registry`: every package may import them, they
    import none of them."""
    assert LAYERS[0] == ("files", "registry", "__init__")
    for name in ("files.py", "registry.py"):
        assert not [m for _, m, _ in _imports(PACKAGE / name, PACKAGE) if m.startswith("posteriorjax")]
