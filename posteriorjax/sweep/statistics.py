"""Program, statistics: what a case program computes besides `suite.compute` (pure JAX).

The over-case calibration statistics every record carries (aggregated by `results`):
`tarp_credibility` (TARP, Lemos et al. 2023) and `mira_statistic` (MIRA, Sharief et al.),
see `calibration_statistics` and `settings.CalibrationSettings`. By default the TARP
reference point of a case is a prior draw (`tarp_reference_fields`) and TARP's space is a
fixed per-channel standardization (`tarp_normalization`), both independent of the cases, so
the statistic is defined for any number of cases. Sampler output is scored as it is, but the
physics is evaluated only where it is defined (`Task.valid`): `num_invalid` counts the members
outside it, whose data misfit (and PDE residual) is NaN (`observation_values`).
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax.metrics import calibration, diagnostics, mira
from posteriorjax.sweep.settings import CalibrationSettings
from posteriorjax.tasks.base import Cases, Task

MIRA_REGIONS = 100


def stream_keys(seed: int) -> dict[str, jax.Array]:
    """Independent named key streams of a sweep seed: sampler, reference, tarp, mira."""
    k = jr.split(jr.key(int(seed)), 4)
    return {"sampler": k[0], "reference": k[1], "tarp": k[2], "mira": k[3]}


def mira_case_key(mira_stream, case):
    """Region key of a case; equals `mira.mira(mira_stream, ...)`'s key of condition `case`."""
    return jr.fold_in(jr.split(mira_stream)[0], case)


def tarp_reference_fields(task: Task, seed: int, num_cases: int) -> jax.Array:
    """TARP reference point of every case, `(num_cases, C', H, W)` (evaluated fields, data units).

    Case c's point is a prior draw, `task.evaluation_field(task.prior.sample(
    fold_in(tarp_stream, c)))` with `tarp_stream = stream_keys(seed)["tarp"]`.
    TARP's coverage theorem (Lemos et al. 2023, Thm. 3) holds for any reference
    distribution that is independent of the truth given the data: the prior
    qualifies, and unlike a point uniform in the box spanned by the truths of
    all cases it stays meaningful when there are few cases in many dimensions
    (the truths then span the box, the samples lie outside it and every
    credibility collapses to 0, even for the exact posterior).
    """
    return _prior_fields(task, stream_keys(seed)["tarp"], int(num_cases))


@eqx.filter_jit
def _prior_fields(task: Task, key, num: int) -> jax.Array:
    """`evaluation_field(prior.sample(fold_in(key, i)))` for i < num, `(num, C', H, W)`."""

    def one(i):
        return task.evaluation_field(task.prior.sample(jr.fold_in(key, i)))

    return jax.vmap(one)(jnp.arange(num))


TARP_STATS_DRAWS = 256


def tarp_normalization(task: Task) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel `(shift (C',), scale (C',))` of TARP's space (evaluated fields, data units).

    TARP distances are taken between (field - shift) / scale, per channel, for
    samples, truth and reference point alike. The map depends on the task only
    (never on the cases): `task.field_stats` (mean, std; scalars apply to every
    channel) when present, else the per-channel mean and std of
    `TARP_STATS_DRAWS` prior draws from the fixed key `jr.key(0)`. A zero std
    gives scale 1. Only the relative scale of the channels matters: for one
    channel the credibilities do not depend on the map.
    """
    shape = jax.eval_shape(task.evaluation_field, jax.ShapeDtypeStruct(task.unknown_shape, jnp.float32)).shape
    channels = shape[0]
    if task.field_stats is not None:
        shift, scale = (np.asarray(v, np.float64) for v in task.field_stats)
        for name, v in (("mean", shift), ("std", scale)):
            if v.ndim > 1 or v.size not in (1, channels):
                raise ValueError(
                    f"task.field_stats: expected a scalar or {channels} per-channel values for the {name}, "
                    f"got shape {v.shape}"
                )
        shift, scale = np.broadcast_to(shift, (channels,)), np.broadcast_to(scale, (channels,))
    else:
        draws = np.asarray(_prior_fields(task, jr.key(0), TARP_STATS_DRAWS), np.float64)
        shift, scale = draws.mean(axis=(0, 2, 3)), draws.std(axis=(0, 2, 3))
    scale = np.where(scale > 0, scale, 1.0)
    return shift.astype(np.float32), scale.astype(np.float32)


def program_data(task: Task, cases: Cases, reference: tuple, *, seed: int) -> dict[str, np.ndarray]:
    """Arrays every configuration reads: cases, reference and TARP's reference points and map.

    `tarp_shift`, `tarp_scale` `(d,)`: `tarp_normalization` broadcast over the
    d = C' H W values of an evaluated field; `tarp_points (K, d)`: the
    `tarp_reference_fields` of the K cases of sweep seed `seed`, normalized.
    """
    x_true = np.asarray(cases.x_true)
    num = x_true.shape[0]
    points = np.asarray(tarp_reference_fields(task, seed, num))
    shift, scale = tarp_normalization(task)
    shift = np.broadcast_to(shift[:, None, None], points.shape[1:]).reshape(-1)
    scale = np.broadcast_to(scale[:, None, None], points.shape[1:]).reshape(-1)
    ref_samples, ref_weights = reference
    return {
        "y_obs": np.asarray(cases.y_obs),
        "x_true": x_true,
        "ref_samples": np.asarray(ref_samples),
        "ref_weights": np.asarray(ref_weights),
        "tarp_shift": shift,
        "tarp_scale": scale,
        "tarp_points": ((points.reshape(num, -1) - shift) / scale).astype(points.dtype),
    }


def observation_anchor(task: Task, ref_samples, ref_weights) -> jax.Array:
    """m(y): the weighted mean of a case's reference samples `(M, C, H, W)`, evaluated, flat `(d,)`."""
    fields = jax.vmap(task.evaluation_field)(ref_samples)
    return jnp.tensordot(ref_weights.astype(fields.dtype), fields, axes=1).reshape(-1)


def calibration_statistics(
    task: Task,
    samples,
    truth,
    *,
    shift,
    scale,
    tarp_point,
    mira_key,
    anchor=None,
    options=None,
    tarp_key=None,
) -> dict:
    """Per-case statistics of the over-case calibration metrics (NaN if any sample is non-finite).

    On the evaluated fields flattened to `d` values: `tarp_credibility` =
    `calibration.tarp_credibility` of the case in TARP's space
    ((field - `shift (d,)`) / `scale (d,)`) with reference point
    `tarp_point (d,)` (already in that space), and `mira_statistic` =
    `mira.condition_statistic` (mean over `MIRA_REGIONS` regions drawn from
    `mira_key`; needs N >= 2, NaN for N = 1). `options` (`settings.CalibrationSettings`) with
    observation-dependent centres or references needs `anchor (d,)` =
    `observation_anchor` (data units); the TARP reference is then
    `calibration.observation_references(tarp_key, anchor, tarp_half_width)`.
    """
    o = CalibrationSettings.parse(options)
    n = samples.shape[0]
    x = jax.vmap(task.evaluation_field)(samples).reshape(n, -1)
    t = task.evaluation_field(truth).reshape(-1).astype(x.dtype)
    bad = ~jnp.all(jnp.isfinite(samples))
    xn, tn = (x - shift) / scale, (t - shift) / scale
    if o.tarp_reference == "observation":
        point = calibration.observation_references(tarp_key, anchor[None], o.tarp_half_width)[0]
        tarp_point = (point - shift) / scale
    f = calibration.tarp_credibility(xn[None], tn[None], tarp_point[None].astype(x.dtype))[0]
    out = {"tarp_credibility": f}
    if n >= 2:
        observed = o.mira_centres == "observation"
        out["mira_statistic"] = mira.condition_statistic(
            mira_key,
            x,
            t,
            num_regions=MIRA_REGIONS,
            center_anchor=anchor if observed else None,
            anchor_half_width=o.mira_half_width,
            normalization=o.mira_normalization,
            distance=o.mira_distance,
        )
    else:  # a point estimate: MIRA is undefined, recorded as NaN rather than left out
        out["mira_statistic"] = jnp.asarray(jnp.nan, f.dtype)
    return {k: jnp.where(bad, jnp.nan, v) for k, v in out.items()}


def observation_values(task: Task, samples, truth, y_obs) -> dict:
    """`diagnostics.observation_values` for a task: `num_invalid` (members outside `task.valid`, non-finite

    ones included) and `obs_misfit` (NaN when any member is invalid); the forward map sees the
    true field `truth` (valid by construction) in place of an invalid member.
    """
    return diagnostics.observation_values(
        task.forward, samples, y_obs, task.noise_std, valid=task.valid, fallback=truth
    )


def diagnostic_values(task: Task, samples, truth, names: Sequence[str], state_model=None) -> dict:
    """Optional per-case diagnostics (NaN if any sample is non-finite).

    ``"pde_residual"``: relative PDE residual rms(r(x, u)) / rms(r(x, 0)) of the
    task physics (r(x, 0) is the source term), with u the state of each sample
    from `state_model` (the sampler's learned surrogate when it has one) or the
    task physics: `pde_residual` is its mean over samples, `pde_residual_mean`
    that of the pair (sample mean of x, sample mean of u). Both are NaN when a
    member (or the sample mean) is outside `task.valid`; the physics is only
    evaluated inside it.
    ``"alpha"``: GRF smoothness exponent (`diagnostics.estimate_grf_alpha`) of
    every sample and channel: `alpha` (mean), `alpha_std`, and `alpha_truth` of
    the true field, for comparison.
    """
    out = {}
    if "pde_residual" in names:
        state = task.physics if state_model is None else state_model
        valid, safe = diagnostics.valid_members(task.valid, samples, truth)
        u = jax.vmap(state)(safe)

        def rel(x, v):
            scale = jnp.sqrt(jnp.mean(jnp.square(task.physics.residual(x, jnp.zeros_like(v)))))
            return diagnostics.pde_residual(task.physics.residual, x, v, scale=scale)

        out["pde_residual"] = jnp.mean(jnp.where(valid, jax.vmap(rel)(safe, u), jnp.nan))
        mean = samples.mean(axis=0)
        ok = jnp.all(valid) & task.valid(mean)
        value = rel(jnp.where(ok, mean, truth.astype(mean.dtype)), u.mean(axis=0))
        out["pde_residual_mean"] = jnp.where(ok, value, jnp.nan)
    if "alpha" in names:
        basis, tau = grf_alpha_spec(task.prior)

        def alpha(x):  # (C, H, W) -> (C,)
            return jax.vmap(lambda f: diagnostics.estimate_grf_alpha(f, tau=tau, basis=basis))(x)

        a = jax.vmap(alpha)(samples)
        out["alpha"], out["alpha_std"] = jnp.mean(a), jnp.std(a)
        out["alpha_truth"] = jnp.mean(alpha(truth))
    bad = ~jnp.all(jnp.isfinite(samples))
    return {k: jnp.where(bad, jnp.nan, v) for k, v in out.items()}


def grf_alpha_spec(prior) -> tuple[str, float]:
    """(basis, tau) for `estimate_grf_alpha` of a GRF-type prior (ValueError otherwise)."""
    bases = {"cosine": "dct", "sine": "dst"}
    basis = getattr(prior, "basis", None)
    if basis not in bases or not (hasattr(prior, "tau") or hasattr(prior, "tau_range")):
        raise ValueError(
            f"diagnostics: 'alpha' needs a GRF prior with a cosine or sine basis, got {type(prior).__name__}"
            + (f" ({basis} basis)" if basis else "")
        )
    tau = float(prior.tau) if hasattr(prior, "tau") else 0.5 * sum(prior.tau_range)
    return bases[basis], tau
