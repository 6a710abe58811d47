"""The shared argument checks: what passes, what is returned, and the house error format."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posteriorjax import checks


def test_positive_int():
    assert checks.positive_int("n", 3) == 3 and checks.positive_int("n", np.int64(2)) == 2
    assert type(checks.positive_int("n", np.int32(4))) is int
    for bad in (0, -1, True, 2.0, "3", None):
        with pytest.raises(ValueError, match=r"^n: expected a positive integer, got "):
            checks.positive_int("n", bad)
    checks.positive_ints(width=4, layers=1)
    with pytest.raises(ValueError, match=r"^layers: expected a positive integer, got 0$"):
        checks.positive_ints(width=4, layers=0)


def test_positive():
    assert checks.positive("eps", 2) == 2.0 and checks.positive("eps", np.float32(0.5)) == 0.5
    assert checks.positive("eps", jnp.asarray(1.5)) == 1.5
    assert checks.positive("g", 0.0, allow_zero=True) == 0.0
    for bad in (0.0, -1.0, float("nan"), float("inf"), True, "1.0", None, [1.0]):
        with pytest.raises(ValueError, match=r"^eps: expected a finite number > 0, got "):
            checks.positive("eps", bad)
    with pytest.raises(ValueError, match=r"g: expected a finite number >= 0, got -1"):
        checks.positive("g", -1, allow_zero=True)
    with pytest.raises(TypeError, match="eps: expected a static number"):
        jax.jit(lambda v: checks.positive("eps", v))(1.0)


def test_positive_scalar_eager_and_traced():
    out = checks.positive_scalar("nu", 0.1, jnp.float32)
    assert out.dtype == jnp.float32 and out.shape == ()
    assert float(checks.positive_scalar("a", 0.0, jnp.float32, allow_zero=True)) == 0.0
    with pytest.raises(ValueError, match=r"nu: expected a finite value > 0, got -1.0"):
        checks.positive_scalar("nu", -1.0, jnp.float32)
    with pytest.raises(ValueError, match="nu: expected a scalar"):
        checks.positive_scalar("nu", jnp.ones(2), jnp.float32)
    f = jax.jit(lambda v: checks.positive_scalar("nu", v, jnp.float32) * 2)
    assert float(f(1.0)) == 2.0
    with pytest.raises(Exception, match="nu: expected a finite value > 0"):
        f(jnp.nan)


def test_in_choices():
    assert checks.in_choices("basis", "sine", ("cosine", "sine")) == "sine"
    with pytest.raises(ValueError, match=r"^basis: expected one of \('cosine', 'sine'\), got 'dct'$"):
        checks.in_choices("basis", "dct", ("cosine", "sine"))
    with pytest.raises(ValueError, match=r"expected one of \['a', 'b'\], got \['a'\]"):
        checks.in_choices("method", ["a"], sorted({"b": 1, "a": 2}))  # unhashable: in no choice
