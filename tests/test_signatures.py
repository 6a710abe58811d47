"""Signatures, read from the source with `ast`: a public function of the package takes at most
`MAX_PUBLIC` positional-or-keyword parameters (self/cls aside), any other at most `MAX_POSITIONAL`;
the rest are keyword-only (after a `*`), so a call names what it sets and a reordered signature
fails loudly. A function is public when neither its name nor an enclosing class's, function's or
module's starts with an underscore (dunder methods such as `__call__` count as public).

`ALLOWED` lists the functions where the positional order is itself the contract, each with its
reason; an entry that no longer needs its place fails too, so the list cannot rot.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "posteriorjax"
MAX_PUBLIC = 5
MAX_POSITIONAL = 6

_STATIC_ARGNUMS = "jax.jit with static_argnums: the positional order is the jit signature"
# (file relative to the package, function name): why it keeps more positional parameters
ALLOWED = {
    ("metrics/calibration.py", "_tarp"): _STATIC_ARGNUMS,
    ("metrics/calibration.py", "_tarp_bootstrap"): _STATIC_ARGNUMS,
    ("metrics/mira.py", "_mira"): _STATIC_ARGNUMS,
    ("physics/radiative.py", "_transport"): _STATIC_ARGNUMS,
    # spectral_cost's five sizes plus the backend; nn/layers.py is being reworked apart
    ("nn/layers.py", "spectral_path"): "the sizes of spectral_cost, then the backend",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _positional(node: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> list[str]:
    """The positional-or-keyword parameters of `node`, less self/cls of a method."""
    names = [a.arg for a in node.args.posonlyargs + node.args.args]
    if in_class and names and names[0] in ("self", "cls"):
        names = names[1:]
    return names


def too_many(root: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """{(file, function): its positional parameters} for every function of `root` with more than
    `MAX_PUBLIC` (public) or `MAX_POSITIONAL` (private) positional-or-keyword parameters."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        module_private = any(_private(part) for part in Path(rel).with_suffix("").parts)

        def visit(node, in_class, private, rel=rel):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names = _positional(child, in_class)
                    hidden = private or _private(child.name)
                    if len(names) > (MAX_POSITIONAL if hidden else MAX_PUBLIC):
                        found[(rel, child.name)] = names
                    visit(child, False, hidden)
                else:
                    inner = private or (isinstance(child, ast.ClassDef) and _private(child.name))
                    visit(child, isinstance(child, ast.ClassDef), inner)

        visit(ast.parse(path.read_text(), filename=str(path)), False, module_private)
    return found


def test_long_signatures_are_keyword_only():
    found = {k: v for k, v in too_many().items() if k not in ALLOWED}
    assert not found, "\n".join(
        f"{file}: {name}({', '.join(params)}) has {len(params)} positional parameters (at most "
        f"{MAX_PUBLIC} public, {MAX_POSITIONAL} private): put a `*` before the ones a caller should name, "
        "or add it to ALLOWED with why"
        for (file, name), params in found.items()
    )


def test_every_allowed_entry_is_still_needed():
    stale = sorted(set(ALLOWED) - set(too_many()))
    assert not stale, f"ALLOWED lists functions that no longer need it: {stale}"


def test_the_check_counts_methods_without_self_stops_at_the_star_and_sees_private_names(tmp_path):
    root = tmp_path / "posteriorjax"
    (root / "sub").mkdir(parents=True)
    (root / "m.py").write_text(
        "def wide(a, b, c, d, e, f):\n    pass\n"
        "def starred(a, b, c, *, d, e, f, g):\n    pass\n"
        "def _private(a, b, c, d, e, f):\n    pass\n"
        "def _wider(a, b, c, d, e, f, g):\n    pass\n"
        "class C:\n"
        "    def method(self, a, b, c, d, e):\n        pass\n"
        "    def __call__(self, a, b, c, d, e, f):\n        pass\n"
        "class _C:\n"
        "    def __call__(self, p, q, r, s, t, u):\n        pass\n"
    )
    (root / "sub" / "_inner.py").write_text("def build(a, b, c, d, e, f):\n    pass\n")
    assert too_many(root) == {
        ("m.py", "wide"): list("abcdef"),
        ("m.py", "_wider"): list("abcdefg"),
        ("m.py", "__call__"): list("abcdef"),
    }
