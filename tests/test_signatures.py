"""Signatures, read from the source with `ast`: a function of the package takes at most
`MAX_POSITIONAL` positional-or-keyword parameters (self/cls aside); the rest are keyword-only
(after a `*`), so a call names what it sets and a reordered signature fails loudly.

`ALLOWED` lists the functions where the positional order is itself the contract, each with its
reason; an entry that no longer needs its place fails too, so the list cannot rot.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "posteriorjax"
MAX_POSITIONAL = 6

_STATIC_ARGNUMS = "jax.jit with static_argnums: the positional order is the jit signature"
_REFERENCE_METHOD = (
    "a reference method: `registry.build` calls every method, plugins' included, as "
    "(task, cases, spec, key, workdir, pool_key, progress)"
)
# (file relative to the package, function name): why it keeps more positional parameters
ALLOWED = {
    ("metrics/calibration.py", "_tarp"): _STATIC_ARGNUMS,
    ("metrics/calibration.py", "_tarp_bootstrap"): _STATIC_ARGNUMS,
    ("metrics/mira.py", "_mira"): _STATIC_ARGNUMS,
    ("physics/radiative.py", "_transport"): _STATIC_ARGNUMS,
    ("reference/registry.py", "_exact"): _REFERENCE_METHOD,
    ("reference/registry.py", "_pcn"): _REFERENCE_METHOD,
    ("reference/registry.py", "builder"): _REFERENCE_METHOD,
    ("reference/registry.py", "_importance"): _REFERENCE_METHOD,
    ("reference/registry.py", "_surrogate_rejection"): _REFERENCE_METHOD,
}


def _positional(node: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> list[str]:
    """The positional-or-keyword parameters of `node`, less self/cls of a method."""
    names = [a.arg for a in node.args.posonlyargs + node.args.args]
    if in_class and names and names[0] in ("self", "cls"):
        names = names[1:]
    return names


def too_many(root: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """{(file, function): its positional parameters} for every function of `root` with more than
    `MAX_POSITIONAL` positional-or-keyword parameters."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()

        def visit(node, in_class, rel=rel):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names = _positional(child, in_class)
                    if len(names) > MAX_POSITIONAL:
                        found[(rel, child.name)] = names
                    visit(child, False)
                else:
                    visit(child, isinstance(child, ast.ClassDef))

        visit(ast.parse(path.read_text(), filename=str(path)), False)
    return found


def test_long_signatures_are_keyword_only():
    found = {k: v for k, v in too_many().items() if k not in ALLOWED}
    assert not found, "\n".join(
        f"{file}: {name}({', '.join(params)}) has {len(params)} positional parameters (at most "
        f"{MAX_POSITIONAL}): put a `*` before the ones a caller should name, or add it to ALLOWED with why"
        for (file, name), params in found.items()
    )


def test_every_allowed_entry_is_still_needed():
    stale = sorted(set(ALLOWED) - set(too_many()))
    assert not stale, f"ALLOWED lists functions that no longer need it: {stale}"


def test_the_check_counts_methods_without_self_and_stops_at_the_star(tmp_path):
    root = tmp_path / "posteriorjax"
    root.mkdir()
    (root / "m.py").write_text(
        "def wide(a, b, c, d, e, f, g):\n    pass\n"
        "def starred(a, b, c, *, d, e, f, g):\n    pass\n"
        "class C:\n"
        "    def method(self, a, b, c, d, e, f):\n        pass\n"
        "    def wider(self, a, b, c, d, e, f, g):\n        pass\n"
    )
    assert too_many(root) == {
        ("m.py", "wide"): list("abcdefg"),
        ("m.py", "wider"): list("abcdefg"),
    }
