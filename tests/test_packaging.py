"""pyproject.toml's dependency ranges against the two pinned sets CI installs from."""

from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _project(text: str | None = None) -> dict:
    """The `[project]` table (PEP 621) of `text`, by default the repository's pyproject.toml."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text() if text is None else text)["project"]


def _pins(text: str) -> dict[str, str]:
    """`{canonical name: version}` of a constraints file's `name==version` lines."""
    pairs = (line.split("==") for line in text.splitlines() if line and not line.startswith("#"))
    return {canonicalize_name(k): v for k, v in pairs}


def _requirements(project: dict) -> list[Requirement]:
    extras = project["optional-dependencies"].values()
    return [Requirement(r) for r in project["dependencies"] + sum(extras, [])]


def _disagreements(project: dict, lower: dict[str, str], tested: dict[str, str]) -> list[str]:
    """Every way pyproject's ranges and the two pinned sets disagree (empty: they agree).

    Each dependency has a lower and an upper bound; constraints-lower.txt (CI's smoke venv)
    pins every runtime dependency and flax at its lower bound; constraints.txt pins every
    declared dependency (extras included) inside its range.
    """
    out = []
    for req in _requirements(project):
        ops = {s.operator for s in req.specifier}
        if ops != {">=", "<"}:
            out.append(f"{req}: expected a lower and an upper bound")
        version = tested.get(canonicalize_name(req.name))
        if version is None:
            out.append(f"{req.name}: missing from constraints.txt")
        elif not req.specifier.contains(version):
            out.append(f"{req.name}=={version} outside {req.specifier} (constraints.txt)")
    for r in project["dependencies"] + project["optional-dependencies"]["flax"]:
        req = Requirement(r)
        bound = next((s.version for s in req.specifier if s.operator == ">="), None)
        if lower.get(canonicalize_name(req.name)) != bound:
            pinned = lower.get(canonicalize_name(req.name))
            out.append(f"{req.name}: lower bound {bound}, constraints-lower.txt pins {pinned}")
    return out


def test_pyproject_and_constraint_files_agree():
    lower = _pins((ROOT / "constraints-lower.txt").read_text())
    tested = _pins((ROOT / "constraints.txt").read_text())
    assert _disagreements(_project(), lower, tested) == []
    assert "chex" not in tested  # not a dependency any more
    assert not (ROOT / "setup.py").exists()  # one place declares the package


def test_a_disagreement_is_named():
    """A moved bound, an unpinned extra and a one-sided range are each reported by name."""
    text = (ROOT / "pyproject.toml").read_text()
    lower = _pins((ROOT / "constraints-lower.txt").read_text())
    tested = _pins((ROOT / "constraints.txt").read_text())
    raised = _project(text.replace('"scipy>=1.13.1,<2"', '"scipy>=1.14.0,<2"'))
    assert _disagreements(raised, lower, tested) == [
        "scipy: lower bound 1.14.0, constraints-lower.txt pins 1.13.1"
    ]
    narrowed = _project(text.replace('"optax>=0.2.5,<0.3"', '"optax>=0.2.5,<0.2.8"'))
    assert _disagreements(narrowed, lower, tested) == [
        "optax==0.2.8 outside <0.2.8,>=0.2.5 (constraints.txt)"
    ]
    extra = _project(text.replace('"h5py>=3.16.0,<4"]', '"h5py>=3.16.0,<4", "zarr>=3"]'))
    assert _disagreements(extra, lower, tested) == [
        "zarr>=3: expected a lower and an upper bound",
        "zarr: missing from constraints.txt",
    ]


def test_console_command_and_packages():
    """`posteriorjax` is the one console command; configs and experiments stay installed top-level."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["scripts"] == {"posteriorjax": "posteriorjax.cli:main"}
    include = data["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {"posteriorjax", "posteriorjax.*", "experiments", "configs", "configs.*"} <= set(include)


def test_ruff_is_one_version_everywhere():
    """The pre-commit hook runs the ruff that constraints.txt pins (and .ci/run installs)."""
    hooks = (ROOT / ".pre-commit-config.yaml").read_text()
    pinned = _pins((ROOT / "constraints.txt").read_text())["ruff"]
    assert f"rev: v{pinned}\n" in hooks and "id: ruff-check" in hooks and "id: ruff-format" in hooks


def test_citation_and_changelog_name_this_version():
    import yaml

    from posteriorjax import __version__

    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["version"] == _project()["version"] == __version__
    assert len(citation["references"]) == 5 and all(r["authors"] for r in citation["references"])
    assert (ROOT / "CHANGELOG.md").read_text().startswith("# Changelog\n")
