"""The public/private line: each package's `__init__` exports its public API and nothing else.

`PUBLIC` pins, per package, the names its `__init__` exports (`__all__`): the names the docs,
tutorials, configs, experiments, scripts and examples call through the package. Everything else
stays importable from its module (`posteriorjax.sweep.store.Record`), not from the package, so a
rename inside a package breaks no user. Every exported name is rendered in the API reference
(`docs/api/*.md`): its package or its defining module has a `:::` entry there and the object has a
docstring (mkdocstrings shows no member without one), unless `UNDOCUMENTED` gives the reason.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "posteriorjax"

PUBLIC = {
    "diffusion": {
        "dsm_loss", "GRFNoise", "MaternNoise", "RBFNoise", "WhiteNoise", "EDMDenoiser",
        "Normalizer", "preconditioning", "regression_target", "score", "euler_step", "heun_step",
        "sample", "sample_ode", "karras_sigmas", "log_normal_sigma",
    },
    "exchange": {
        "Ensemble", "Forward", "GivenCases", "evaluate", "export", "load", "read_ensemble",
        "read_samples", "with_sensors",
    },
    "metrics": {
        "calibration", "diagnostics", "geometry", "lc2st", "mira", "posterior", "registry",
        "scoring", "suite",
    },
    "nn": {
        "FNO", "NeuralopFNO", "SongUNet", "SongUNO", "TuckerSpectralConv", "UNO", "UNet",
        "DeepONet", "CNO", "Transolver", "GNOT", "aa_activation", "grid_tokens",
        "FunctionAutoencoder", "DiT", "FlaxLinen", "FlaxNNX", "from_linen", "from_nnx",
        "ChannelMLP", "Dropout", "Pointwise", "SpectralConv", "spectral_resample",
        "FourierEmbedding", "NoiseEmbedding", "sinusoidal_embedding", "get", "names",
        "InverseNet", "Normalizer", "Surrogate", "field_normalizer", "state_statistics",
    },
    "observations": {
        "PRESET_TOLERANCE", "AbstractObservation", "AveragePool", "ColumnObservation",
        "GaussianNoise", "MaskObservation", "mixture", "names", "pattern", "point_sensors",
    },
    "physics": set(),
    "reference": set(),
    "report": set(),
    "samplers": {
        "REGISTRY", "AbstractSampler", "get", "names", "networks", "options", "register", "unregister",
    },
    "studies": set(),
    "sweep": {"STAGES", "calibration_settings", "dry_run", "reference_config", "run", "run_pair", "validate"},
    "tasks": {
        "REGISTRY", "AbstractPhysics", "Cases", "Channel", "Task", "get", "names", "register", "unregister",
    },
    "training": {
        "TrainConfig", "build_model", "config", "fit", "kinds", "make_optimizer", "make_step", "run",
        "scan", "scan_ensemble", "trained", "update",
    },
}  # fmt: skip

# package -> why its exports are not (yet) in the API reference
UNDOCUMENTED = {
    "nn": "the networks are documented on the Networks guide page (docs/networks.md), not in docs/api",
}


def _packages() -> list[str]:
    return sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def _api_entries() -> set[str]:
    """The objects the API reference renders: every `::: posteriorjax...` line of docs/api/*.md."""
    entries = set()
    for page in (ROOT / "docs" / "api").glob("*.md"):
        entries |= set(re.findall(r"^::: (\S+)\s*$", page.read_text(), flags=re.MULTILINE))
    return entries


def _attribute_docstring(module: types.ModuleType, name: str) -> bool:
    """Whether module-level `name = ...` is followed by a string (an attribute docstring, which
    mkdocstrings renders; a constant without one is not shown)."""
    body = ast.parse(inspect.getsource(module)).body
    for stmt, after in zip(body[:-1], body[1:], strict=True):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
    return False


def _rendered_by(package: str, name: str, entries: set[str]) -> str | None:
    """The `:::` entry that renders `posteriorjax.<package>.<name>`, or None."""
    pkg = importlib.import_module(f"posteriorjax.{package}")
    obj = getattr(pkg, name)
    if isinstance(obj, types.ModuleType):
        return obj.__name__ if obj.__name__ in entries and obj.__doc__ else None
    if inspect.isfunction(obj) or inspect.isclass(obj):
        if not obj.__doc__:
            return None
        for entry in (pkg.__name__, obj.__module__):
            if entry in entries:
                return entry
        return None
    # a constant: rendered (through the package or its own module) where it is assigned with an
    # attribute docstring
    modules = [pkg] + [
        importlib.import_module(f"{pkg.__name__}.{m.name}") for m in pkgutil.iter_modules(pkg.__path__)
    ]
    modules += [importlib.import_module(e) for e in sorted(entries) if e.startswith("posteriorjax.")]
    for module in modules:
        for attr, value in vars(module).items():
            if value is obj and _attribute_docstring(module, attr):
                for entry in (pkg.__name__, module.__name__):
                    if entry in entries:
                        return entry
    return None


def test_every_package_is_pinned():
    assert sorted(PUBLIC) == _packages()


@pytest.mark.parametrize("package", _packages())
def test_init_exports_its_public_api_only(package):
    """`__all__` is the pinned list, and the package's `__init__` binds no other public name of the
    project (a submodule aside; an underscore alias keeps a name it needs private)."""
    pkg = importlib.import_module(f"posteriorjax.{package}")
    assert set(getattr(pkg, "__all__", ())) == PUBLIC[package]
    assert len(getattr(pkg, "__all__", ())) == len(PUBLIC[package]), "a name listed twice in __all__"
    tree = ast.parse((PACKAGE / package / "__init__.py").read_text())
    bound = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("posteriorjax"):
            bound |= {a.asname or a.name for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {t.id for t in targets if isinstance(t, ast.Name)}
    stray = {
        n
        for n in bound - PUBLIC[package] - {"__all__", "annotations"}
        if not n.startswith("_") and not isinstance(getattr(pkg, n, None), types.ModuleType)
    }
    assert not stray, f"posteriorjax.{package} binds public names outside __all__: {sorted(stray)}"


@pytest.mark.parametrize("package", [p for p in _packages() if PUBLIC[p] and p not in UNDOCUMENTED])
def test_every_export_is_in_the_api_reference(package):
    entries = _api_entries()
    missing = [n for n in sorted(PUBLIC[package]) if _rendered_by(package, n, entries) is None]
    assert not missing, (
        f"posteriorjax.{package} exports {missing}, which docs/api/*.md does not render (no `:::` entry "
        "for the package or the defining module, or no docstring)"
    )


def test_the_reference_check_fails_on_an_undocumented_export():
    """The check can fail: a function of a module without a `:::` entry, and a constant without an
    attribute docstring, are both reported."""
    entries = _api_entries()
    assert _rendered_by("sweep", "run_pair", entries) == "posteriorjax.sweep.pair"
    assert _rendered_by("sweep", "run_pair", entries - {"posteriorjax.sweep.pair"}) is None
    assert _rendered_by("sweep", "STAGES", entries) == "posteriorjax.sweep.run"
    assert _rendered_by("sweep", "STAGES", entries - {"posteriorjax.sweep.run"}) is None
    settings = importlib.import_module("posteriorjax.sweep.settings")
    assert not _attribute_docstring(settings, "SAMPLER_KEYS")
