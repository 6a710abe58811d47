"""`checks.error_if`: eager ValueError, `eqx.error_if` by default, a program output when functionalized."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

from posteriorjax import checks, deferred, parallel

pytestmark = pytest.mark.skipif(not deferred.FUNCTIONAL, reason="this JAX lacks checkify's rule table")


def _f(x, h):
    """A hyperparameter check at the top, a per-row check under vmap, a loop, a jitted helper."""
    h = checks.error_if(h, ~(h >= 0), "hparams: g must be >= 0", value=h)
    rows = jax.vmap(lambda r: checks.error_if(r, ~jnp.all(r > 0), "a: expected positive", value=jnp.min(r)))
    y = jax.jit(rows)(x * h)
    y = jax.lax.fori_loop(0, 3, lambda i, v: jnp.sin(v) + v, y)
    return jnp.sum(y)


def _mapped(xs, hs):
    """`_f` per configuration, `lax.map`-batched and `shard_map`ped as the sweep's chunk program."""
    local = lambda xs, hs: jax.lax.map(lambda a: _f(*a), (xs, hs), batch_size=2)  # noqa: E731
    spec, mesh = PartitionSpec(parallel.AXIS), parallel.data_mesh()
    return jax.shard_map(local, mesh=mesh, in_specs=(spec, spec), out_specs=spec, check_vma=False)(xs, hs)


def test_concrete_values_raise_at_once_naming_the_value():
    with pytest.raises(ValueError, match=r"^hparams: g must be >= 0, got -2.0$"):
        checks.error_if(jnp.float32(-2.0), jnp.asarray(True), "hparams: g must be >= 0", value=-2.0)
    bad = np.array([False, True, True])
    with pytest.raises(ValueError, match=r"^w: bad, got 5$"):
        checks.error_if(np.zeros(3), bad, "w: bad", value=np.array([4, 5, 6]))
    assert checks.error_if(3.0, np.array(False), "never") == 3.0


def test_traced_checks_are_equinox_callbacks_unless_functionalized():
    x = jnp.ones((3, 4))
    plain = jax.jit(_f)
    assert "callback" in plain.lower(x, 1.0).as_text()
    with pytest.raises(Exception, match="hparams: g must be >= 0"):
        jax.block_until_ready(plain(x, -1.0))
    checked = jax.jit(deferred.functionalize(_f))
    assert "callback" not in checked.lower(x, 1.0).as_text()
    failure, out = checked(x, 1.0)
    assert deferred.failure_message(failure) is None
    assert out == plain(x, 1.0)  # the same computation
    failure, _ = checked(x, -2.0)
    assert deferred.failure_message(failure) == "hparams: g must be >= 0, got -2.0"
    failure, _ = checked(x.at[1, 2].set(-5.0), 1.0)
    with pytest.raises(checks.CheckFailed, match=r"^pair: a: expected positive, got -5.0$"):
        deferred.raise_failure(failure, "pair")


def test_functionalized_checks_pass_lax_map_shard_map_and_grad():
    xs, hs = jnp.ones((5, 3, 4)), jnp.array([1.0, 2.0, -3.0, 4.0, -5.0])
    program = jax.jit(deferred.functionalize(_mapped))
    assert "callback" not in program.lower(xs, hs).as_text()
    failure, _ = program(xs, hs)
    assert deferred.failure_message(failure) == "hparams: g must be >= 0, got -3.0"  # the first failing one
    failure, out = program(xs, jnp.abs(hs))
    assert deferred.failure_message(failure) is None
    np.testing.assert_array_equal(out, jax.jit(_mapped)(xs, jnp.abs(hs)))
    grad = jax.grad(lambda h: _f(jnp.ones((3, 4)), h))
    failure, g = jax.jit(deferred.functionalize(grad))(2.0)
    assert deferred.failure_message(failure) is None and g == jax.jit(grad)(2.0)
    failure, _ = jax.jit(deferred.functionalize(grad))(-2.0)
    assert deferred.failure_message(failure) == "hparams: g must be >= 0, got -2.0"


def test_program_text_does_not_depend_on_what_was_traced_before():
    """The failure codes come from the messages, so the cache key of a program is fixed."""
    x = jnp.ones((3, 4))
    first = jax.jit(deferred.functionalize(_f)).lower(x, 1.0).as_text()
    jax.jit(deferred.functionalize(lambda v: checks.error_if(v, v < 0, "other: negative") + 1)).lower(1.0)
    assert jax.jit(deferred.functionalize(_f)).lower(x, 1.0).as_text() == first


def test_a_message_with_braces_is_shown_as_written():
    program = deferred.functionalize(lambda v: checks.error_if(v, v < 0, "v: in {0, 1}", value=v))
    failure, _ = jax.jit(program)(-1.0)
    assert deferred.failure_message(failure) == "v: in {0, 1}, got -1.0"


def test_functional_form_only_under_the_known_rule_convention():
    """checkify's rules take `(error, enabled_errors, *operands)` in jax 0.8-0.10; jax 0.11 puts a
    context first, where the functional rule would be handed the wrong arguments."""

    def jax_0_10(primitive, error, enabled_errors, *invals, **params): ...

    def jax_0_11(primitive, ctx, error, enabled_errors, *invals, **params): ...

    def outputs_first(primitive, error, enabled_errors, *invals, **params): ...

    # string annotations, as jax's own (`from __future__ import annotations`)
    jax_0_10.__annotations__["return"] = "tuple[Error, Sequence[core.Value]]"
    jax_0_11.__annotations__["return"] = "tuple[Error, Sequence[core.Value]]"
    outputs_first.__annotations__["return"] = "tuple[Sequence[core.Value], Error]"
    assert deferred._rule_convention_is_known(jax_0_10)
    assert not deferred._rule_convention_is_known(jax_0_11)
    assert not deferred._rule_convention_is_known(outputs_first)
    assert deferred.FUNCTIONAL  # the tested JAX (constraints.txt) has the known convention
