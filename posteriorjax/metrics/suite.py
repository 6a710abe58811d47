"""The metric suite: every metric that applies to one case, in one call.

`compute` is the pure, jit/vmap-able core (arrays in, dict of arrays out;
wrapped in `eqx.filter_jit`, so an eager call also compiles and never raises on
non-finite samples): a sweep vmaps it over cases and hyperparameters. `evaluate` is the eager entry
point: it validates its inputs, reads the task's options, runs `compute` under
`eqx.filter_jit` and adds descriptive string entries.

Non-finite generated samples are never an error here: `num_nonfinite` counts
the members with any NaN/inf (before the evaluation transform, which could map
NaN to a finite value) and every metric of the record is NaN, so nothing is
averaged over NaN downstream.

Members outside the physics' domain (`Task.valid`, e.g. a non-positive Darcy
permeability) are not an error either. The distributional metrics compare
fields, not solves, so they use every member; only the data misfit runs the
forward model, and `diagnostics.observation_values` (shared with the sweep) evaluates it
on the valid members alone: `num_invalid` counts the others, which never reach
a solver (whose domain check would abort a jitted program), and `obs_misfit`,
a mean over the whole ensemble, is NaN when any member is invalid (never a mean
over the valid members only, which would flatter a sampler that leaves the domain).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks
from posteriorjax.metrics import calibration, diagnostics, registry


def _compute(
    samples,
    ref_samples,
    ref_weights=None,
    truth=None,
    *,
    evaluation_field=None,
    field_stats=None,
    directions=None,
    spectral_dc=registry.DEFAULT_SPECTRAL_DC,
    forward=None,
    y_obs=None,
    noise_std=None,
    valid=None,
    fallback=None,
    levels=calibration.DEFAULT_LEVELS,
    sample_weights=None,
):
    """All applicable metrics of one case -> dict of JAX arrays (pure; jit/vmap-able).

    Args:
      samples: generated ensemble `(N, C, H, W)` (or `(N, d)`), raw sampler output.
      ref_samples, ref_weights: reference posterior `(M, ...)`, `(M,)` (None = uniform).
      truth: the true unknown `(C, H, W)` of the case, or None.
      evaluation_field: maps one member `(C, H, W)` to the scored field(s)
        `(C', H, W)` (the task's `evaluation_field`, e.g. Darcy's projection on
        {3, 12} at 7.5); applied to samples, reference and truth. None = identity.
      field_stats: `(mean, std)` for the SWD z-score; None falls back to the
        reference ensemble's own statistics (see `posterior.sliced_wasserstein`).
      directions: SWD directions; None = the published 128 seed-0 GRF directions.
      spectral_dc: ``"auto"`` (default), True or False: `spectral_error` keeps
        the DC bin unless the reference DC power is round-off (exactly zero-mean
        fields), where bin 0 is a ratio of round-off numbers that would inject
        a random factor into the geometric mean. `spectral_error_published`
        always keeps it (the published definition), and
        `spectral_dc_excluded` (0/1) records the choice.
      forward, y_obs, noise_std: with all three, `obs_misfit` (mean whitened
        misfit of the raw valid samples, `diagnostics.observation_values`).
      valid: one raw member -> boolean scalar, whether the physics is defined
        there (a task's `valid`); given, `num_invalid` counts the members
        outside it. The forward model only runs on valid members.
      fallback: as in `diagnostics.observation_values` (with no valid member and
        no `fallback`, the forward model sees an invalid member).
      levels: nominal levels of the coverage curve.
      sample_weights: weights `(N,)` of the generated members (summing to 1) or None (uniform):
        the posterior metrics are then weighted as PosteriorBench weighs them, and the metrics
        without a weighted form are NaN (`registry.compute`).

    Returns `{name: array}` for every entry of `registry.METRICS` that applies
    (`Metric.applies`: its needs, e.g. `truth` for `crps`, `forward`/`y_obs`/
    `noise_std` for `obs_misfit`; its minimum ensemble sizes, e.g. N >= 2 for
    `crps_fair` and the coverage curve; its ensemble ranks), in registry order.
    Every masked metric (all but the counts and `spectral_dc_excluded`) is NaN
    when any member is non-finite; the distributional ones use every member,
    valid or not.
    """
    raw = jnp.asarray(samples)
    x, y = raw, jnp.asarray(ref_samples, raw.dtype)
    t = None if truth is None else jnp.asarray(truth, raw.dtype)
    if evaluation_field is not None:
        x, y = jax.vmap(evaluation_field)(x), jax.vmap(evaluation_field)(y)
        t = None if t is None else evaluation_field(t)
    inputs = registry.Inputs(
        raw,
        x,
        y,
        ref_weights,
        t,
        field_stats=field_stats,
        directions=directions,
        spectral_dc=spectral_dc,
        forward=forward,
        y_obs=y_obs,
        noise_std=noise_std,
        valid=valid,
        fallback=fallback,
        levels=levels,
        sample_weights=sample_weights,
    )
    return registry.compute(inputs)


compute = eqx.filter_jit(_compute)
"""All applicable metrics of one case -> dict of JAX arrays (`_compute` under `eqx.filter_jit`).

`compute(samples (N, C, H, W), ref_samples (M, C, H, W), ref_weights (M,) | None, truth (C, H, W) |
None, **options)`: pure, jit/vmap-able; the sweep vmaps it over cases. `evaluate` is the
checked entry point.
"""


def evaluation_name(task) -> str:
    """How a task's fields are scored: `task.evaluation_name` if it has one, else a generic label."""
    if task is None or getattr(task, "evaluation_field", None) is None:
        return "identity"
    return str(getattr(task, "evaluation_name", "task.evaluation_field"))


def too_small(x, y, w, truth, *, kwargs: dict, present: set) -> dict:
    """NaN entries, and their reason under ``"undefined"``, for the metrics the ensemble sizes exclude.

    A metric whose needs the case meets (truth, observation, rank) but whose minimum
    ensemble sizes (`Metric.min_samples`, `min_reference`) it does not, e.g.
    `std_error` or `coverage` of a point estimate N = 1, is recorded as NaN (a
    curve as NaN of its length) instead of being left out, and ``"undefined"``
    says why. Empty when every applicable metric was computed. `x (N, C, H, W)` the samples,
    `y (M, C, H, W)` and `w (M,)` the weighted reference, `truth (C, H, W)` or None; `kwargs`
    the options of `compute`, `present` the metrics it returned.
    """
    t = None if truth is None else jnp.asarray(truth, x.dtype)
    given = {k: kwargs.get(k) for k in ("forward", "y_obs", "noise_std", "valid")}
    inputs = registry.Inputs(x, x, y, w, t, **given)
    small = [
        m
        for m in registry.REGISTRY.values()
        if m.name not in present
        and m.needs <= inputs.available()
        and (m.ndims is None or x.ndim in m.ndims)
        and (x.shape[0] < m.min_samples or y.shape[0] < m.min_reference)
    ]
    if not small:
        return {}
    n, m_ref = max(x.shape[0], 2), max(y.shape[0], 2)  # every minimum in the registry is <= 2
    # traced (never run) at sizes every metric takes: each NaN entry gets the shape it would have
    shapes = jax.eval_shape(
        lambda a, b, c, d: _compute(a, b, c, d, **kwargs),
        jax.ShapeDtypeStruct((n, *x.shape[1:]), x.dtype),
        jax.ShapeDtypeStruct((m_ref, *y.shape[1:]), y.dtype),
        jax.ShapeDtypeStruct((m_ref,), y.dtype),
        None if t is None else jax.ShapeDtypeStruct(t.shape, t.dtype),
    )
    out = {m.name: np.full(shapes[m.name].shape, np.nan).tolist() for m in small}
    out["undefined"] = "; ".join(
        f"{m.name}: needs N >= {m.min_samples} samples and M >= {m.min_reference} reference members, "
        f"got N = {x.shape[0]}, M = {y.shape[0]}"
        for m in small
    )
    return out


def evaluate(samples, ref_samples, ref_weights=None, *, task=None, truth=None, y_obs=None, **options):
    """Run the whole suite on one case (eager) -> dict of Python floats, lists and strings.

    `samples (N, C, H, W)`, `ref_samples (M, C, H, W)`, `ref_weights (M,)` or None (uniform),
    `truth (C, H, W)` and `y_obs (m,)` when the task has them, in the task's physical units.

    Validates shapes, reference values and weights (ValueError naming the
    argument); non-finite generated samples are reported (`num_nonfinite`,
    NaN metrics), not raised. The duck-typed `task` supplies
    `evaluation_field`, `field_stats` (SWD z-score), `valid` (the physics'
    domain; default every value finite) for `num_invalid`, and with `y_obs`
    also `forward`/`noise_std` for `obs_misfit`. Members outside `valid` (a
    sampler's non-positive Darcy permeability) are counted as in the sweep,
    never raised: `obs_misfit` is NaN when any member is invalid, and the
    distributional metrics, which compare fields and never solve, use every
    member. `options` go to `compute` and override the task's. String
    entries: `evaluation` (the transform applied, e.g. ``"binarized@7.5"``),
    `swd_normalization` (``"task"``, ``"given"`` or ``"reference"``),
    `spectral_dc` (the policy), and, when the ensemble is too small for some
    metric (N = 1: `std_error`, `crps_fair`, the coverage curve ...), that metric
    as NaN with the reason in `undefined` (never a silently dropped key).
    Non-finite or misshapen `y_obs` is a ValueError.
    """
    x = checks.ensemble(samples, "samples")
    y = checks.ensemble(ref_samples, "ref_samples")
    checks.same_event_shape(x, y, "samples", "ref_samples")
    if y_obs is not None:
        checks.finite(y_obs, "y_obs")
    checks.finite(y, "ref_samples")
    w = checks.weights(ref_weights, y.shape[0], "ref_weights", y.dtype)
    if truth is not None:
        t = jnp.asarray(truth)
        if t.shape != x.shape[1:]:
            raise ValueError(f"truth: expected shape {x.shape[1:]} (one member of samples), got {t.shape}")
        checks.finite(t, "truth")
    kwargs = {}
    if task is not None:
        if getattr(task, "evaluation_field", None) is not None:
            kwargs["evaluation_field"] = task.evaluation_field
        if getattr(task, "field_stats", None) is not None:
            kwargs["field_stats"] = tuple(np.asarray(s, np.float64).tolist() for s in task.field_stats)
        kwargs["valid"] = getattr(task, "valid", None) or diagnostics.finite_member
        if y_obs is not None and getattr(task, "check_observation", None) is not None:
            task.check_observation(y_obs)
        if y_obs is not None and getattr(task, "forward", None) is not None:
            kwargs.update(forward=task.forward, y_obs=jnp.asarray(y_obs), noise_std=task.noise_std)
    if "field_stats" in options:
        options["field_stats"] = tuple(np.asarray(s, np.float64).tolist() for s in options["field_stats"])
    swd_norm = "given" if "field_stats" in options else ("task" if "field_stats" in kwargs else "reference")
    kwargs.update(options)
    unsolved = None
    if kwargs.get("forward") is not None and kwargs.get("fallback") is None:
        ok = jax.vmap(kwargs.get("valid") or diagnostics.finite_member)(x)
        if not bool(jnp.any(ok)):  # nothing the forward model may see: no misfit, and no solve
            unsolved = {"obs_misfit": float("nan")}
            del kwargs["forward"]
    out = compute(x, y, w, truth, **kwargs)
    record = {k: (np.asarray(v).tolist()) for k, v in jax.device_get(out).items()}
    record.update(unsolved or {})
    record.update(too_small(x, y, w, truth, kwargs=kwargs, present=set(record)))
    record["evaluation"] = evaluation_name(task) if "evaluation_field" not in options else "given"
    record["swd_normalization"] = swd_norm
    record["spectral_dc"] = str(kwargs.get("spectral_dc", registry.DEFAULT_SPECTRAL_DC))
    return record
