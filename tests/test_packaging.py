"""setup.py's dependency ranges against the two pinned sets CI installs from."""

import ast
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _setup_kwargs() -> dict:
    call = next(
        node
        for node in ast.walk(ast.parse((ROOT / "setup.py").read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup"
    )
    return {
        k.arg: ast.literal_eval(k.value)
        for k in call.keywords
        if k.arg in ("install_requires", "extras_require")
    }


def _pins(name: str) -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    pairs = (line.split("==") for line in lines if line and not line.startswith("#"))
    return {canonicalize_name(k): v for k, v in pairs}


def _requirements() -> list[Requirement]:
    kwargs = _setup_kwargs()
    return [Requirement(r) for r in kwargs["install_requires"] + sum(kwargs["extras_require"].values(), [])]


def test_every_dependency_has_a_range():
    for req in _requirements():
        ops = {s.operator for s in req.specifier}
        assert ops == {">=", "<"}, f"{req}: expected a lower and an upper bound"


def test_lower_bound_set_is_the_declared_lower_bounds():
    """constraints-lower.txt (CI's smoke venv) pins every runtime dependency and flax at its lower bound."""
    lower = _pins("constraints-lower.txt")
    kwargs = _setup_kwargs()
    for r in kwargs["install_requires"] + kwargs["extras_require"]["flax"]:
        req = Requirement(r)
        bound = next(s.version for s in req.specifier if s.operator == ">=")
        assert lower.get(canonicalize_name(req.name)) == bound, (
            f"{req.name}: lower bound {bound}, pinned {lower}"
        )


def test_tested_set_is_inside_the_declared_ranges():
    tested = _pins("constraints.txt")
    for req in _requirements():
        version = tested.get(canonicalize_name(req.name))
        assert version is not None, f"{req.name}: missing from constraints.txt"
        assert req.specifier.contains(version), f"{req.name}=={version} outside {req.specifier}"
    assert "chex" not in tested  # not a dependency any more
