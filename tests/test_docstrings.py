"""The docstring rule of the public API (docs/extending.md, "Docstrings"): every public callable
has a docstring, and every one that takes or returns arrays states their shapes in parentheses,
`(N, C, H, W)`, somewhere in its docstring (a class: its own or its `__call__`'s).

The public callables are the functions and classes the package `__init__`s export (the names
`tests/test_public_api.py` pins) and, for an exported module (`metrics.posterior`,
`training.kinds`), the functions and classes that module defines without an underscore. A
callable takes arrays when a parameter or the return is annotated with an array type, or a
parameter has one of the names in `ARRAY_NAMES`.
"""

from __future__ import annotations

import importlib
import inspect
import re
import types

import pytest

from tests.test_public_api import PUBLIC

# an annotation naming one of these is an array (jax.Array, np.ndarray, ArrayLike, jaxtyping's)
ARRAY_ANNOTATION = re.compile(r"\b(Array|ArrayLike|ndarray|Float|Int|Bool|Shaped)\b")
# parameters that hold arrays whatever their annotation
ARRAY_NAMES = frozenset({"x", "y", "y_obs", "obs", "samples", "fields", "field", "truth", "u"})

# A shape is a parenthesised tuple with a comma whose entries are dimensions: `...`, an integer, a
# name that starts upper-case (N, C_in, H), a single lower-case letter (n, m, d) or a count (num,
# num_samples, n_obs, dim, bins), each maybe plus or times another (`bins + 1`, `2C`, `H*W`). Any
# lower-case name passes beside an upper-case one (`(L, in_channels)`), not alone: `(lo, hi)` and
# `(x, sigma)` are tuples of values, and `(0, 1)` (numbers only) an interval.
_STRONG = r"(?:\.\.\.|\d*[A-Z]\w*)"
_DIM = r"(?:\.\.\.|\d*[A-Z]\w*|[a-z]|num|num_\w+|n_\w+|dim|bins|\d+)"
_NAME = r"(?:\.\.\.|\d*[A-Za-z_]\w*|\d+)"
_TUPLE = re.compile(r"\(([^()]*,[^()]*)\)")


def _entries_are(pattern: str, entries: list[str]) -> bool:
    expr = re.compile(rf"{pattern}(?:\s*[*+-]\s*{pattern})*")
    return all(expr.fullmatch(e) for e in entries)


def states_a_shape(doc: str) -> bool:
    """Whether `doc` has a shape (see above): `(N, C, H, W)`, `(m,)`, `(..., d)`, `(num, H, W)`."""
    for match in _TUPLE.finditer(doc):
        entries = [e.strip() for e in match.group(1).split(",")]
        entries = entries[:-1] if len(entries) > 1 and not entries[-1] else entries
        if not entries or not all(entries) or all(re.fullmatch(r"\d+", e) for e in entries):
            continue
        if _entries_are(_DIM, entries):
            return True
        if _entries_are(_NAME, entries) and any(re.fullmatch(_STRONG, e) for e in entries):
            return True
    return False


def _takes_arrays(fn) -> bool:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    for param in signature.parameters.values():
        if param.name in ARRAY_NAMES:
            return True
        if param.annotation is not inspect.Parameter.empty and ARRAY_ANNOTATION.search(str(param.annotation)):
            return True
    ret = signature.return_annotation
    return ret is not inspect.Signature.empty and bool(ARRAY_ANNOTATION.search(str(ret)))


def _defined_in(module: types.ModuleType):
    for name, value in vars(module).items():
        if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value)):
            if value.__module__ == module.__name__:
                yield name, value


def public_callables() -> list[tuple[str, object]]:
    """[(dotted name, object)] of every public function and class, as the module docstring says."""
    found = []
    for package, names in sorted(PUBLIC.items()):
        pkg = importlib.import_module(f"posteriorjax.{package}")
        for name in sorted(names):
            obj = getattr(pkg, name)
            if isinstance(obj, types.ModuleType):
                found += [(f"{package}.{name}.{n}", v) for n, v in _defined_in(obj)]
            elif inspect.isfunction(obj) or inspect.isclass(obj):
                found.append((f"{package}.{name}", obj))
    return found


def check(obj) -> str | None:
    """What `obj` lacks under the rule, or None."""
    if not (obj.__doc__ or "").strip():
        return "no docstring"
    doc, arrays = obj.__doc__, _takes_arrays(obj)
    if inspect.isclass(obj):
        call = obj.__dict__.get("__call__")
        if inspect.isfunction(call):
            doc += "\n" + (call.__doc__ or "")
            arrays = arrays or _takes_arrays(call)
    if arrays and not states_a_shape(doc):
        return "takes or returns arrays, and its docstring states no shape in parentheses, e.g. (N, C, H, W)"
    return None


def test_there_are_public_callables_to_check():
    names = dict(public_callables())
    assert len(names) > 100
    assert "metrics.posterior.relative_l2" in names and "diffusion.sample" in names


def test_every_public_callable_follows_the_docstring_rule():
    found = [(name, obj, check(obj)) for name, obj in public_callables()]
    failures = [f"{name} ({inspect.getsourcefile(obj)}): {why}" for name, obj, why in found if why]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    "doc, expected",
    [
        ("Samples `(N, C, H, W)`.", True),
        ("Returns shape (m,).", True),
        ("x: (..., d) points; (num_samples, C_in, H, W) draws", True),
        ("Edges, shape (bins + 1,).", True),
        ("Directions `(num, H, W)`; tokens (L, in_channels).", True),
        ("The interval (0, 1).", False),
        ("Returns (lo, hi), the bounds.", False),
        ("Takes (x, sigma) and returns the score.", False),
        ("An array of samples.", False),
    ],
)
def test_what_counts_as_a_shape(doc, expected):
    assert states_a_shape(doc) is expected


def test_the_check_fails_on_a_bad_docstring():
    def undocumented(n: int) -> int:
        return n

    def no_shape(samples, weights):
        """The weighted mean of the samples."""

    def annotated(a: jax.Array) -> float:  # noqa: F821  (the annotation is only read as a string)
        """The mean of a."""

    def with_shape(samples):
        """The mean of samples `(N, C, H, W)` over the members, `(C, H, W)`."""

    def scalar_only(n: int, name: str) -> int:
        """No arrays here."""

    class Net:
        """A network."""

        def __call__(self, x):
            """Apply it."""

    class ShapedNet:
        """A network."""

        def __call__(self, x):
            """Map `(C_in, H, W) -> (C_out, H, W)`."""

    assert check(undocumented) == "no docstring"
    assert check(no_shape) is not None and check(annotated) is not None and check(Net) is not None
    assert check(with_shape) is None and check(scalar_only) is None and check(ShapedNet) is None
