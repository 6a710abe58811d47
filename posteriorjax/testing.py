"""Conformance checks for samplers and tasks, the ones the registry-wide tests run.

Call them on your own (out-of-tree) sampler or task before putting it in a sweep::

    from posteriorjax import tasks, testing
    task = tasks.get("poisson_fixed", resolution=16, num_sensors=12)
    testing.check_task(task)
    testing.check_sampler("my_sampler", task, config={"num_steps": 4})

Every failure raises an `AssertionError` that names the property that failed and what
was seen (a bad argument to the checker itself is a `ValueError`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import samplers
from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.tasks.base import Channel, Task

__all__ = ["build_sampler", "check_bad_input", "check_jit_vmap", "check_sampler", "check_task"]


def _fail(prop: str, seen: str):
    raise AssertionError(f"{prop}: {seen}")


def build_sampler(sampler_or_builder, task: Task, config: Mapping | None = None) -> AbstractSampler:
    """The sampler under test: a registered name (`samplers.get(name, task, **config)`), a
    builder `builder(task, **config)`, or a built `AbstractSampler` (then `config` must be empty)."""
    config = dict(config or {})
    if isinstance(sampler_or_builder, AbstractSampler):
        if config:
            raise ValueError("config: a built sampler takes no config; pass its builder or name instead")
        s = sampler_or_builder
    elif isinstance(sampler_or_builder, str):
        s = samplers.get(sampler_or_builder, task, **config)
    elif callable(sampler_or_builder):
        s = sampler_or_builder(task, **config)
    else:
        raise ValueError(
            f"sampler_or_builder: expected an AbstractSampler, a registered name or a builder, "
            f"got {type(sampler_or_builder).__name__}"
        )
    if not isinstance(s, AbstractSampler):
        _fail("builder returns an AbstractSampler", f"got {type(s).__name__}")
    return s


def _second_hparams(s: AbstractSampler, hparams: Mapping | None) -> dict:
    """The second hyperparameter point of the vmap check: `hparams` overrides, else half of the
    first default (the registry tests' choice)."""
    if hparams is not None:
        return s.hparams(**hparams)
    first = sorted(s.defaults)[:1]
    return s.hparams(**{k: 0.5 * s.defaults[k] for k in first})


def check_jit_vmap(
    s: AbstractSampler,
    task: Task,
    hparams: Mapping | None = None,
    *,
    num_samples: int = 3,
    data_aware: bool = True,
    seed: int = 3,
) -> np.ndarray:
    """`sample` jits and vmaps over 2 cases x 2 hyperparameter points, compiles once, is
    deterministic for a fixed key, depends on the key and (`data_aware`) on the case.

    Returns the samples `(2 cases, 2 hparams, num_samples, *task.unknown_shape)`.
    """
    ys = task.cases(seed, 2).y_obs
    hp = jax.tree.map(lambda *v: jnp.stack(v), s.hparams(), _second_hparams(s, hparams))
    over_hp = jax.vmap(lambda y, h, k: s.sample(k, y, num_samples, h), (None, 0, None), axis_size=2)
    f = jax.jit(jax.vmap(over_hp, (0, None, None)))
    first, again = np.asarray(f(ys, hp, jr.key(0))), np.asarray(f(ys, hp, jr.key(0)))
    other = np.asarray(f(ys, hp, jr.key(1)))
    expected = (2, 2, num_samples, *task.unknown_shape)
    if first.shape != expected:
        _fail(
            "output shape (cases, hparams, num_samples, C, H, W)", f"expected {expected}, got {first.shape}"
        )
    if not np.all(np.isfinite(first)):
        _fail("finite samples", f"{int(np.sum(~np.isfinite(first)))} non-finite value(s) of {first.size}")
    if not np.array_equal(first, again):
        _fail("deterministic for a fixed key", f"max difference {np.max(np.abs(first - again)):g}")
    if f._cache_size() != 1:
        _fail("compiled once", f"{f._cache_size()} compilations for three calls of the same shapes")
    if data_aware and np.allclose(first[0], first[1]):
        _fail("depends on the observations", "two cases gave the same samples (data_aware=False for a prior)")
    if np.allclose(first, other):
        _fail("depends on the key", "keys 0 and 1 gave the same samples")
    return first


def _raises(prop: str, pattern: str, fn: Callable, *args, kinds=(Exception,)) -> None:
    """Assert that `fn(*args)` raises one of `kinds` (when run to completion) naming `pattern`."""
    try:
        jax.block_until_ready(fn(*args))
    except kinds as e:
        if not re.search(pattern, str(e)):
            _fail(prop, f"the error does not name {pattern!r}: {type(e).__name__}: {e}")
        return
    except Exception as e:
        _fail(prop, f"expected {' or '.join(k.__name__ for k in kinds)}, got {type(e).__name__}: {e}")
    _fail(prop, "no error was raised")


def check_bad_input(
    s: AbstractSampler, task: Task, *, bad_hparams: Mapping[str, float] | None = None, seed: int = 3
) -> None:
    """`sample` rejects, with an error naming the argument: a `y_obs` of the wrong length,
    `num_samples` 0, -1 and 2.0, an unknown hyperparameter, and each hyperparameter outside its
    domain (`bad_hparams[name]`, default -1.0; the error may come from `eqx.error_if`)."""
    y = task.cases(seed, 1).y_obs[0]
    hp, key = s.hparams(), jr.key(0)
    value_error = (ValueError,)
    _raises("rejects a y_obs of the wrong length", "y_obs", s.sample, key, y[:-1], 2, hp, kinds=value_error)
    for bad in (0, -1, 2.0):
        _raises(f"rejects num_samples={bad!r}", "num_samples", s.sample, key, y, bad, hp, kinds=value_error)
    extra = {**hp, "bogus": jnp.float32(1.0)}
    _raises("rejects an unknown hyperparameter", "hparams", s.sample, key, y, 2, extra, kinds=value_error)
    bad_hparams = dict(bad_hparams or {})
    unknown = sorted(set(bad_hparams) - set(s.defaults))
    if unknown:
        raise ValueError(
            f"bad_hparams: {s.name} has no hyperparameter(s) {unknown}; it has {sorted(s.defaults)}"
        )
    for k in s.defaults:
        outside = s.hparams(**{k: bad_hparams.get(k, -1.0)})
        _raises(
            f"rejects hyperparameter {k}={float(outside[k])!r}", re.escape(k), s.sample, key, y, 2, outside
        )


def check_sampler(
    sampler_or_builder,
    task: Task,
    config: Mapping | None = None,
    hparams: Mapping | None = None,
    *,
    num_samples: int = 3,
    data_aware: bool = True,
    bad_hparams: Mapping[str, float] | None = None,
) -> AbstractSampler:
    """Run every sampler check of the registry tests on one sampler; returns the sampler.

    `hparams`: overrides giving the second hyperparameter point of the vmap check;
    `data_aware=False` for samplers that ignore `y_obs` (a prior); `bad_hparams`: a value
    outside each hyperparameter's domain (default -1.0).
    """
    s = build_sampler(sampler_or_builder, task, config)
    check_jit_vmap(s, task, hparams, num_samples=num_samples, data_aware=data_aware)
    check_bad_input(s, task, bad_hparams=bad_hparams)
    return s


def check_task(task: Task, *, num_cases: int = 4, seed: int = 3) -> None:
    """Run the task-contract checks of the registry tests on one task.

    Shapes (`unknown_shape (C, H, W)`, state, `num_observations`); one `Channel(name, unit)` per
    unknown channel; `cases` fixed (case i independent of `num`) and consistent
    (`u_true = solve(x_true)`, `y_obs - forward(x_true)` of about the noise std, prior draws
    `valid`); `forward` jits and vmaps to the looped values; bad shapes are errors naming
    `x` and `y_obs`; `config_hash` is stable.
    """
    if not isinstance(task, Task):
        raise ValueError(f"task: expected a posteriorjax Task, got {type(task).__name__}")
    shape = task.unknown_shape
    if len(shape) != 3:
        _fail("unknown_shape is (C, H, W)", f"got {shape}")
    if len(task.channels) != shape[0]:
        _fail("one Channel(name, unit) per channel", f"{len(task.channels)} channel(s) for unknown {shape}")
    for c in task.channels:
        if not (isinstance(c, Channel) and c.name and c.unit):
            _fail("channels have a name and a unit", f"got {c!r}")
    m = task.num_observations
    cases = task.cases(seed, num_cases)
    for field, want in (("x_true", shape), ("u_true", task.state_shape), ("y_obs", (m,))):
        got = tuple(getattr(cases, field).shape)
        if got != (num_cases, *want):
            _fail(f"cases.{field} shape", f"expected {(num_cases, *want)}, got {got}")
    again = task.cases(seed, 2)
    if not np.array_equal(np.asarray(cases.y_obs[:2]), np.asarray(again.y_obs)):
        _fail("case i does not depend on num", "cases(seed, 2) differs from the first two of cases(seed, 4)")
    if not all(bool(task.valid(x)) for x in cases.x_true):
        _fail("prior draws are valid", "task.valid is False on a drawn case")
    u0 = np.asarray(task.solve(cases.x_true[0]))
    if not np.allclose(np.asarray(cases.u_true[0]), u0, rtol=1e-5, atol=1e-7):
        _fail("u_true = solve(x_true)", f"max difference {np.max(np.abs(cases.u_true[0] - u0)):g}")
    batched = np.asarray(jax.jit(jax.vmap(task.forward))(cases.x_true))
    looped = np.stack([np.asarray(task.forward(x)) for x in cases.x_true])
    if not np.allclose(batched, looped, rtol=1e-5, atol=1e-8):
        _fail("forward jits and vmaps", f"max difference to the loop {np.max(np.abs(batched - looped)):g}")
    ratio = float(np.std((np.asarray(cases.y_obs) - looped) / np.asarray(task.noise_std)))
    if not 0.5 < ratio < 1.5:
        _fail("observation noise has the task's noise_std", f"residual std / noise_std = {ratio:.3g}")
    if not np.isfinite(float(task.log_likelihood(cases.x_true[0], cases.y_obs[0]))):
        _fail("finite log_likelihood at the truth", "got a non-finite value")
    bad_x = jnp.zeros(shape[1:])
    _raises("forward rejects an x of the wrong shape", r"\bx\b", task.forward, bad_x, kinds=(ValueError,))
    x0, short = cases.x_true[0], cases.y_obs[0][:-1]
    _raises(
        "log_likelihood rejects a short y_obs", "y_obs", task.log_likelihood, x0, short, kinds=(ValueError,)
    )
    if task.config_hash() != task.config_hash() or task.config_dict().get("task") != task.name:
        _fail("config_dict names the task", f"got {task.config_dict()}")
