"""The metric registry: one entry per metric the suite records, in the order it records them.

An entry (`Metric`) says what the metric computes (`fn`, pure and jit/vmap-able, one case in,
one array out), what it needs (`needs`: ``"reference"`` the reference posterior ensemble with
its weights, ``"truth"`` the true unknown, ``"observation"`` forward model, data and noise,
``"domain"`` the physics' validity test or an observation), the smallest ensembles it is
defined for (`min_samples`, `min_reference`), the ensemble ranks it applies to (`ndims`), its
direction (`better`: ``"lower"``, ``"target"`` with `target`, or None for counts, flags,
curves and diagnostics that are not ranked), whether non-finite samples turn it into NaN
(`masked`; counts and flags never are) and its `header` in tables and figures.

`suite.compute` evaluates every entry that `applies` to a case. The reports derive their
lists from here: `TABLE` (the main table's columns, `results.TABLE_METRICS`), `RANKED`
(every lower-is-better score the curves and optima rank, `records.LOWER_IS_BETTER`),
`POSTERIOR` (the ranked scores against the reference posterior: the figures' posterior
panels and the reference two-ensemble check) and `HEADERS`.

The entries live in `REGISTRY` (a `posteriorjax.registry.Registry`; `METRICS` is the same
object), in the order the suite records them. To add a metric: write its function in the metric
module it belongs to (`posterior`, `scoring`, `calibration`, `diagnostics`), register its entry
below (`register(Metric(...))`; a plugin module calls the same `register`), and add its name to
`TABLE` or `RANKED` to show it in the reports; `tests/test_metrics_registry.py` then exercises
every registered entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks
from posteriorjax.metrics import calibration, diagnostics, posterior, scoring
from posteriorjax.registry import Registry

DEFAULT_SPECTRAL_DC = "auto"
CONFORMAL_LEVEL = 0.9
# interval scale factors q of the split-conformal grid (q = 1: the ensemble's own interval)
CONFORMAL_SCALES = tuple(float(v) for v in np.round(np.geomspace(0.25, 16.0, 25), 4))
NEEDS = ("reference", "truth", "observation", "domain")
DIRECTIONS = ("lower", "target", None)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """One case as the metrics see it.

    `raw`: the generated ensemble `(N, ...)` as sampled. `samples`, `reference`, `truth`: the
    ensemble, the reference posterior `(M, ...)` and the true unknown (or None) after the
    task's evaluation transform. `weights`: reference weights `(M,)` or None (uniform);
    `sample_weights`: the generated members' weights `(N,)` (summing to 1) or None (uniform).
    The other fields are `suite.compute`'s options of the same names.
    """

    raw: jax.Array
    samples: jax.Array
    reference: jax.Array
    weights: jax.Array | None = None
    truth: jax.Array | None = None
    field_stats: Any = None
    directions: Any = None
    spectral_dc: Any = DEFAULT_SPECTRAL_DC
    forward: Callable | None = None
    y_obs: jax.Array | None = None
    noise_std: Any = None
    valid: Callable | None = None
    fallback: jax.Array | None = None
    levels: Any = calibration.DEFAULT_LEVELS
    sample_weights: jax.Array | None = None

    def available(self) -> frozenset:
        """The `NEEDS` this case supplies."""
        have = {"reference"}
        if self.truth is not None:
            have.add("truth")
        if self.forward is not None and self.y_obs is not None and self.noise_std is not None:
            have.add("observation")
        if self.valid is not None or "observation" in have:
            have.add("domain")
        return frozenset(have)


@dataclasses.dataclass(frozen=True)
class Metric:
    """One metric of the suite (see the module docstring for the fields).

    `fn(inputs)` maps one case (`Inputs`: samples `(N, ...)`, reference `(M, ...)`) to an array:
    a scalar `()` for a score, a curve such as `(K,)` over the coverage levels.
    """

    name: str
    fn: Callable[[Inputs], jax.Array]
    header: str
    needs: frozenset = frozenset({"reference"})
    min_samples: int = 1
    min_reference: int = 1
    ndims: tuple[int, ...] | None = None
    better: str | None = "lower"
    target: float | None = None
    masked: bool = True
    weighted: bool = False  # takes the generated members' weights (`Inputs.sample_weights`)

    def __post_init__(self):
        if not set(self.needs) <= set(NEEDS):
            raise ValueError(f"needs: expected a subset of {NEEDS}, got {sorted(self.needs)}")
        checks.in_choices("better", self.better, DIRECTIONS)
        if (self.better == "target") != (self.target is not None):
            raise ValueError(f"target: expected a value exactly when better='target', got {self.target!r}")

    def applies(self, inputs: Inputs) -> bool:
        """Whether this metric is defined for the case (its needs, ensemble sizes and rank)."""
        x, y = inputs.samples, inputs.reference
        return (
            self.needs <= inputs.available()
            and x.shape[0] >= self.min_samples
            and y.shape[0] >= self.min_reference
            and (self.ndims is None or x.ndim in self.ndims)
        )


# ----------------------------------------------------------------------------
# Metric functions: one case (`Inputs`) -> array


def _swd(c: Inputs):
    return posterior.sliced_wasserstein(
        c.samples,
        c.reference,
        c.weights,
        weights=c.sample_weights,
        field_stats=c.field_stats,
        directions=c.directions,
    )


def _dc_excluded(c: Inputs):
    if c.spectral_dc == "auto":
        _, _, s_ref = posterior.spectral_errors(c.samples, c.reference, c.weights, weights=c.sample_weights)
        return posterior.dc_is_roundoff(s_ref).astype(jnp.int32)
    return jnp.asarray(not c.spectral_dc).astype(jnp.int32)


def _conformal_inside(c: Inputs):
    """Per scale q, the fraction of elements inside the q-scaled central interval."""
    score = calibration.interval_scores(c.samples, c.truth, CONFORMAL_LEVEL)
    scales = jnp.asarray(CONFORMAL_SCALES, c.samples.dtype)
    return jnp.mean(score.reshape(1, -1) <= scales[:, None], axis=1)


def _conformal_widths(c: Inputs):
    """Per scale q, the mean width of the q-scaled central interval."""
    scales = jnp.asarray(CONFORMAL_SCALES, c.samples.dtype)
    q = scales.reshape((-1,) + (1,) * c.truth.ndim)
    lo, hi = calibration.conformal_intervals(c.samples, CONFORMAL_LEVEL, q)
    return jnp.mean((hi - lo).reshape(scales.shape[0], -1), axis=1)


def _obs_misfit(c: Inputs):
    values = diagnostics.observation_values(
        c.forward, c.raw, c.y_obs, c.noise_std, valid=c.valid, fallback=c.fallback
    )
    return values["obs_misfit"]


def _num_invalid(c: Inputs):
    valid = diagnostics.finite_member if c.valid is None else c.valid
    return jnp.sum(~jax.vmap(valid)(c.raw)).astype(jnp.int32)


_NONE = frozenset()
_TRUTH = frozenset({"truth"})


def _count(name, fn, header, needs=_NONE, **kwargs) -> Metric:
    """A count or flag: no direction, never masked."""
    return Metric(name, fn, header, needs, better=None, masked=False, **kwargs)


def _member_rel_l2(c: Inputs):
    return posterior.relative_l2(c.samples, c.truth)


def _rel_l2_one_reference(c: Inputs):
    """Mean over members of ||x_i - r_0|| / ||r_0||: the pointwise relative L2 error against ONE
    reference sample, the first member r_0 of the stored reference ensemble (PosteriorBench Sec. 4.3,
    the x axis of Fig. 4; the eps rule keeps a uniformly random subset of the accepted candidates,
    so r_0 is one of them; exact and MCMC references: one posterior draw; importance references,
    stored by decreasing weight: the highest-weight member)."""
    return jnp.mean(posterior.relative_l2(c.samples, c.reference[0]))


def _pooled(c: Inputs):
    """The case as a one-case batch `(1, N, ...)`, `(1, ...)`: every member's values pooled."""
    return c.samples[None], c.truth[None]


REGISTRY: Registry[Metric] = Registry("metric", Metric)
METRICS = REGISTRY


def register(metric: Metric) -> Metric:
    """Add `metric` under `metric.name`, after the registered ones (the suite's order); returns it."""
    return REGISTRY.register(getattr(metric, "name", None), metric)


def names() -> list[str]:
    """The registered metric names, in the suite's order."""
    return REGISTRY.names()


def get(name: str) -> Metric:
    """The registered metric `name` (ValueError listing the registered ones otherwise)."""
    return REGISTRY.get(name)


for _metric in (
    _count("num_samples", lambda c: jnp.asarray(c.samples.shape[0]), "Samples"),
    _count("num_nonfinite", lambda c: checks.count_nonfinite(c.raw), "Non-finite"),
    Metric(
        "mean_error",
        lambda c: posterior.mean_error(c.samples, c.reference, c.weights, weights=c.sample_weights),
        "Mean",
        weighted=True,
    ),
    Metric(
        "std_error",
        lambda c: posterior.std_error(c.samples, c.reference, c.weights, weights=c.sample_weights),
        "Std",
        min_samples=2,
        min_reference=2,
        weighted=True,
    ),
    Metric(
        "mmd",
        lambda c: posterior.mmd(c.samples, c.reference, c.weights, weights=c.sample_weights),
        "MMD",
        weighted=True,
    ),
    Metric("swd", _swd, "SWD", ndims=(2, 4), weighted=True),
    Metric(
        "spectral_error",
        lambda c: posterior.spectral_error(
            c.samples, c.reference, c.weights, weights=c.sample_weights, include_dc=c.spectral_dc
        ),
        "Spectral",
        ndims=(4,),
        weighted=True,
    ),
    Metric(
        "spectral_error_published",
        lambda c: posterior.spectral_error(
            c.samples, c.reference, c.weights, weights=c.sample_weights, include_dc=True
        ),
        "Spectral (DC kept)",
        ndims=(4,),
        weighted=True,
    ),
    _count("spectral_dc_excluded", _dc_excluded, "DC excluded", ndims=(4,)),
    Metric("rel_l2_mean", lambda c: posterior.mean_relative_l2(c.samples, c.truth), "RelL2(mean)", _TRUTH),
    Metric("rel_l2_samples", lambda c: jnp.mean(_member_rel_l2(c)), "RelL2(samples)", _TRUTH),
    Metric("rel_l2_best", lambda c: jnp.min(_member_rel_l2(c)), "RelL2(best)", _TRUTH),
    Metric("rel_l2_one_reference", _rel_l2_one_reference, "RelL2(one ref.)"),
    Metric("crps", lambda c: jnp.mean(scoring.crps(c.samples, c.truth)), "CRPS", _TRUTH),
    Metric("energy_score", lambda c: scoring.energy_score(c.samples, c.truth), "Energy score", _TRUTH),
    Metric("marginal_w1", lambda c: calibration.marginal_wasserstein(*_pooled(c)), "Marginal W1", _TRUTH),
    Metric(
        "variance_ratio",
        lambda c: calibration.variance_decomposition(*_pooled(c))["predicted_ratio"],
        "Var ratio",
        _TRUTH,
        better="target",
        target=1.0,
    ),
    Metric(
        "histogram_ratio_error",
        lambda c: calibration.histogram_ratio_error(*_pooled(c)),
        "Hist. ratio err",
        _TRUTH,
    ),
    Metric("conformal_inside", _conformal_inside, "Conformal inside", _TRUTH, min_samples=2, better=None),
    Metric("conformal_widths", _conformal_widths, "Conformal width", _TRUTH, min_samples=2, better=None),
    Metric(
        "crps_fair",
        lambda c: jnp.mean(scoring.crps(c.samples, c.truth, estimator="fair")),
        "CRPS (fair)",
        _TRUTH,
        min_samples=2,
    ),
    Metric(
        "coverage",
        lambda c: calibration.coverage(c.samples, c.truth, c.levels),
        "Coverage",
        _TRUTH,
        min_samples=2,
        better=None,
    ),
    Metric(
        "coverage_error",
        lambda c: calibration.calibration_error(calibration.coverage(c.samples, c.truth, c.levels), c.levels),
        "Coverage error",
        _TRUTH,
        min_samples=2,
    ),
    # data consistency: about 1 for a sample the data allow, not ranked (see `diagnostics.observation_misfit`)
    Metric("obs_misfit", _obs_misfit, "Obs. misfit", frozenset({"observation"}), better=None),
    _count("num_invalid", _num_invalid, "Invalid", frozenset({"domain"})),
):
    register(_metric)

# the main table's columns, in order
TABLE: tuple[str, ...] = ("mean_error", "std_error", "mmd", "swd", "spectral_error", "crps", "rel_l2_mean")
# every score the curves and optima rank (lower is better): the table's columns first
RANKED: tuple[str, ...] = TABLE + ("crps_fair", "energy_score", "rel_l2_samples", "coverage_error")
# the ranked scores against the reference posterior (not the truth)
POSTERIOR: tuple[str, ...] = tuple(n for n in RANKED if METRICS[n].needs == frozenset({"reference"}))


class _Headers(Mapping):
    """{metric name: its table header}, read from the registry (so a plugin's metrics are in it)."""

    def __getitem__(self, name: str) -> str:
        if name not in REGISTRY:
            raise KeyError(name)
        return REGISTRY[name].header

    def __iter__(self):
        return iter(REGISTRY.names())

    def __len__(self) -> int:
        return len(REGISTRY)


HEADERS: Mapping[str, str] = _Headers()


def applicable(inputs: Inputs) -> tuple[Metric, ...]:
    """The entries defined for one case, in registry order."""
    return tuple(m for m in REGISTRY.values() if m.applies(inputs))


def compute(inputs: Inputs) -> dict:
    """Every applicable metric of one case -> `{name: array}`; masked ones NaN if any member is non-finite.

    With `inputs.sample_weights` (a weighted ensemble), the `weighted` metrics use the weights
    (PosteriorBench's weighted definitions) and every other masked metric, which has no
    weighted form here (scores against the truth, coverage, the data misfit), is NaN.
    """
    bad = checks.count_nonfinite(inputs.raw) > 0
    out = {}
    for m in applicable(inputs):
        value = m.fn(inputs)
        if inputs.sample_weights is not None and m.masked and not m.weighted:
            value = jnp.full_like(value, jnp.nan, dtype=jnp.result_type(value, float))  # no weighted form
        out[m.name] = jnp.where(bad, jnp.nan, value) if m.masked else value
    return out
