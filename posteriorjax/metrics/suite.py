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
forward model, and `observation_values` (shared with the sweep) evaluates it
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

from posteriorjax.metrics import _checks, calibration, diagnostics, posterior, scoring

DEFAULT_SPECTRAL_DC = "auto"
CONFORMAL_LEVEL = 0.9
# interval scale factors q of the split-conformal grid (q = 1: the ensemble's own interval)
CONFORMAL_SCALES = tuple(float(v) for v in np.round(np.geomspace(0.25, 16.0, 25), 4))


def finite_member(x: jax.Array) -> jax.Array:
    """The default validity of one member: every value finite (boolean scalar)."""
    return jnp.all(jnp.isfinite(x))


def valid_members(valid, samples, fallback=None):
    """`(ok (N,), safe (N, ...))`: `valid` of each member, and the ensemble with invalid members replaced.

    `valid` maps one member to a boolean scalar (a task's `valid`). An invalid
    member is replaced by `fallback` (one member's shape, e.g. the true field)
    or, when None, by the first valid member, so a forward model run on `safe`
    only ever sees valid inputs -- unless no member is valid and no fallback is
    given. Mask what is computed from replaced members afterwards.
    """
    ok = jax.vmap(valid)(samples)
    if fallback is None:
        fallback = samples[jnp.argmax(ok)]
    mask = ok.reshape((-1,) + (1,) * (samples.ndim - 1))
    return ok, jnp.where(mask, samples, jnp.asarray(fallback, samples.dtype))


def observation_values(forward, samples, y_obs, noise_std, *, valid=None, fallback=None):
    """Data misfit of the members where the physics is defined (pure; jit/vmap-able).

    Args:
      forward: one member `(C, H, W)` -> predicted observations `(M,)` (a task's `forward`).
      samples: ensemble `(N, C, H, W)`. y_obs: `(M,)`. noise_std: scalar or `(M,)`.
      valid: one member -> boolean scalar (a task's `valid`); None = every value finite.
      fallback: a valid field `(C, H, W)` the forward model sees in place of an
        invalid member (see `valid_members`; None = the first valid member).

    Returns `{"obs_misfit": scalar, "num_invalid": int32 scalar}`: the mean over
    members of the whitened misfit (1/M) ||(forward(x_i) - y_obs) / noise_std||^2
    (`diagnostics.observation_misfit`), NaN when any member is invalid.
    """
    ok, safe = valid_members(finite_member if valid is None else valid, samples, fallback)
    misfit = diagnostics.observation_misfit(forward, safe, y_obs, noise_std)
    value = jnp.mean(jnp.where(ok, misfit, jnp.nan))
    return {"obs_misfit": value, "num_invalid": jnp.sum(~ok).astype(jnp.int32)}


def _compute(
    samples,
    ref_samples,
    ref_weights=None,
    truth=None,
    *,
    evaluation_field=None,
    field_stats=None,
    directions=None,
    spectral_dc=DEFAULT_SPECTRAL_DC,
    forward=None,
    y_obs=None,
    noise_std=None,
    valid=None,
    fallback=None,
    levels=calibration.DEFAULT_LEVELS,
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
        misfit of the raw valid samples, `observation_values`).
      valid: one raw member -> boolean scalar, whether the physics is defined
        there (a task's `valid`); given, `num_invalid` counts the members
        outside it. The forward model only runs on valid members.
      fallback: as in `observation_values` (with no valid member and
        no `fallback`, the forward model sees an invalid member).
      levels: nominal levels of the coverage curve.

    Returns keys (those that apply): `num_samples`, `num_nonfinite`,
    `mean_error`, `std_error` (N, M >= 2), `mmd`, `swd`, `spectral_error`,
    `spectral_error_published`, `spectral_dc_excluded` (fields); with `truth`:
    `rel_l2_mean` (ensemble mean), `rel_l2_samples` (mean over members),
    `rel_l2_best`, `crps` (standard estimator, mean over elements),
    `crps_fair` (N >= 2), `energy_score`, `marginal_w1` and `variance_ratio`
    (marginal fidelity: W1 and variance ratio of the pooled values of all
    members against the truth's values, `calibration.marginal_wasserstein`,
    `variance_decomposition` with one case), `conformal_inside` and
    `conformal_widths` `(len(CONFORMAL_SCALES),)` (N >= 2: the fraction of
    elements inside the central `CONFORMAL_LEVEL` interval scaled by each q of
    `CONFORMAL_SCALES`, `calibration.conformal_intervals`, and its mean width;
    split conformal over held-out cases is `results.calibration_rows`),
    `coverage` `(K,)` and
    `coverage_error` (N >= 2); `obs_misfit`; `num_invalid`. Every metric
    but the counts is NaN when any member is non-finite; the distributional
    ones use every member, valid or not.
    """
    raw = jnp.asarray(samples)
    num_nonfinite = _checks.count_nonfinite(raw)
    x, y = raw, jnp.asarray(ref_samples, raw.dtype)
    t = None if truth is None else jnp.asarray(truth, raw.dtype)
    if evaluation_field is not None:
        x, y = jax.vmap(evaluation_field)(x), jax.vmap(evaluation_field)(y)
        t = None if t is None else evaluation_field(t)
    n, m = x.shape[0], y.shape[0]
    fields = x.ndim == 4
    out = {"num_samples": jnp.asarray(n), "num_nonfinite": num_nonfinite}
    out["mean_error"] = posterior.mean_error(x, y, ref_weights)
    if n >= 2 and m >= 2:
        out["std_error"] = posterior.std_error(x, y, ref_weights)
    out["mmd"] = posterior.mmd(x, y, ref_weights)
    if fields or x.ndim == 2:
        out["swd"] = posterior.sliced_wasserstein(
            x, y, ref_weights, field_stats=field_stats, directions=directions
        )
    if fields:
        out["spectral_error"] = posterior.spectral_error(x, y, ref_weights, include_dc=spectral_dc)
        out["spectral_error_published"] = posterior.spectral_error(x, y, ref_weights, include_dc=True)
        if spectral_dc == "auto":
            _, _, s_ref = posterior.spectral_errors(x, y, ref_weights)
            excluded = posterior.dc_is_roundoff(s_ref)
        else:
            excluded = jnp.asarray(not spectral_dc)
        out["spectral_dc_excluded"] = excluded.astype(jnp.int32)
    if t is not None:
        rel = posterior.relative_l2(x, t)
        out["rel_l2_mean"] = posterior.mean_relative_l2(x, t)
        out["rel_l2_samples"] = jnp.mean(rel)
        out["rel_l2_best"] = jnp.min(rel)
        out["crps"] = jnp.mean(scoring.crps(x, t))
        out["energy_score"] = scoring.energy_score(x, t)
        # marginal fidelity within the case: all members' values pooled against the truth's values
        out["marginal_w1"] = calibration.marginal_wasserstein(x[None], t[None])
        out["variance_ratio"] = calibration.variance_decomposition(x[None], t[None])["predicted_ratio"]
        if n >= 2:
            # split conformal over cases (aggregated in `results.calibration_rows`): per scale q the
            # fraction of elements inside the q-scaled central interval and its mean width
            score = calibration.interval_scores(x, t, CONFORMAL_LEVEL)
            scales = jnp.asarray(CONFORMAL_SCALES, x.dtype)
            out["conformal_inside"] = jnp.mean(score.reshape(1, -1) <= scales[:, None], axis=1)
            q = scales.reshape((-1,) + (1,) * t.ndim)
            lo, hi = calibration.conformal_intervals(x, CONFORMAL_LEVEL, q)
            out["conformal_widths"] = jnp.mean((hi - lo).reshape(scales.shape[0], -1), axis=1)
        if n >= 2:
            out["crps_fair"] = jnp.mean(scoring.crps(x, t, estimator="fair"))
            cov = calibration.coverage(x, t, levels)
            out["coverage"] = cov
            out["coverage_error"] = calibration.calibration_error(cov, levels)
    if forward is not None and y_obs is not None and noise_std is not None:
        out.update(observation_values(forward, raw, y_obs, noise_std, valid=valid, fallback=fallback))
    elif valid is not None:
        out["num_invalid"] = jnp.sum(~jax.vmap(valid)(raw)).astype(jnp.int32)
    bad = num_nonfinite > 0
    keep = ("num_samples", "num_nonfinite", "num_invalid", "spectral_dc_excluded")
    return {k: v if k in keep else jnp.where(bad, jnp.nan, v) for k, v in out.items()}


compute = eqx.filter_jit(_compute)


def evaluation_name(task) -> str:
    """How a task's fields are scored: `task.evaluation_name` if it has one, else a generic label."""
    if task is None or getattr(task, "evaluation_field", None) is None:
        return "identity"
    return str(getattr(task, "evaluation_name", "task.evaluation_field"))


def evaluate(samples, ref_samples, ref_weights=None, *, task=None, truth=None, y_obs=None, **options):
    """Run the whole suite on one case (eager) -> dict of Python floats, lists and strings.

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
    `spectral_dc` (the policy).
    """
    x = _checks.ensemble(samples, "samples")
    y = _checks.ensemble(ref_samples, "ref_samples")
    _checks.same_event_shape(x, y, "samples", "ref_samples")
    _checks.finite(y, "ref_samples")
    w = _checks.weights(ref_weights, y.shape[0], "ref_weights", y.dtype)
    if truth is not None:
        t = jnp.asarray(truth)
        if t.shape != x.shape[1:]:
            raise ValueError(f"truth: expected shape {x.shape[1:]} (one member of samples), got {t.shape}")
        _checks.finite(t, "truth")
    kwargs = {}
    if task is not None:
        if getattr(task, "evaluation_field", None) is not None:
            kwargs["evaluation_field"] = task.evaluation_field
        if getattr(task, "field_stats", None) is not None:
            kwargs["field_stats"] = tuple(np.asarray(s, np.float64).tolist() for s in task.field_stats)
        kwargs["valid"] = getattr(task, "valid", None) or finite_member
        if y_obs is not None and getattr(task, "forward", None) is not None:
            kwargs.update(forward=task.forward, y_obs=jnp.asarray(y_obs), noise_std=task.noise_std)
    if "field_stats" in options:
        options["field_stats"] = tuple(np.asarray(s, np.float64).tolist() for s in options["field_stats"])
    swd_norm = "given" if "field_stats" in options else ("task" if "field_stats" in kwargs else "reference")
    kwargs.update(options)
    unsolved = None
    if kwargs.get("forward") is not None and kwargs.get("fallback") is None:
        ok = jax.vmap(kwargs.get("valid") or finite_member)(x)
        if not bool(jnp.any(ok)):  # nothing the forward model may see: no misfit, and no solve
            unsolved = {"obs_misfit": float("nan")}
            del kwargs["forward"]
    out = compute(x, y, w, truth, **kwargs)
    record = {k: (np.asarray(v).tolist()) for k, v in jax.device_get(out).items()}
    record.update(unsolved or {})
    record["evaluation"] = evaluation_name(task) if "evaluation_field" not in options else "given"
    record["swd_normalization"] = swd_norm
    record["spectral_dc"] = str(kwargs.get("spectral_dc", DEFAULT_SPECTRAL_DC))
    return record
