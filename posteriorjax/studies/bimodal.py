"""A synthetic many-to-one inverse problem with an analytic bimodal posterior.

The calibration-protocol study of "Pointwise metrics mislead": per element, a latent
z ~ N(mu, tau^2) is observed through the absolute value,

    x = |z| + sigma xi,     xi ~ N(0, 1),     z, x in R^d (elements independent),

so the sign of z is lost and, with |z| >> sigma, the posterior has two separated modes
near +-x. Completing the square on each half-line gives the posterior in closed form, a
two-component mixture of truncated normals with common variance v = tau^2 sigma^2 / (tau^2 + sigma^2):

    p(z | x) = w+ N(z; m+, v) 1[z > 0] / Phi(m+ / sqrt v) + w- N(z; m-, v) 1[z < 0] / Phi(-m- / sqrt v),
    m+- = (+-x tau^2 + mu sigma^2) / (tau^2 + sigma^2),
    w+- proportional to N(x; +-mu, tau^2 + sigma^2) Phi(+-m+- / sqrt v).

Five estimators are compared on held-out cases:

* ``point``: an MLP trained with the mean squared error (optax); it learns E[z | x], which
  sits between the modes. As an ensemble it is one member (zero-width intervals).
* ``point_mae``: the same MLP trained with the mean absolute error; it learns the
  posterior median, which sits in the heavier mode.
* ``mixture``: a mixture-density MLP (K Gaussian components per element) trained by the
  negative log-likelihood; sampled (the trained generative model).
* ``generative``: exact posterior sampling from the closed form above (the ideal sampler).
* ``generative_sharp``: a deliberately miscalibrated sampler, the exact draws contracted
  towards the centre m+- of their mode by `sharp_factor` (0.5: every mode half as wide).
  Mode choice, which dominates the CRPS, is exact, so it ties with ``generative`` on CRPS
  (within the CRPS standard error) while its central intervals are too narrow (coverage).

Metrics (`evaluate`): RMSE of one reconstruction per case (`rmse`: the point estimate, or the
first draw of a sampler) and of the ensemble mean (`rmse_mean`; for the exact posterior this is
the posterior mean, the MSE point estimator's target); CRPS (`metrics.scoring.crps`, the MAE
for one member); the population marginal's W1 distance to the true marginal
(`metrics.calibration.marginal_wasserstein`) and its law-of-total-variance decomposition
(`variance_decomposition`); the mean absolute error of central-interval coverage over
nominal levels (`calibration.coverage`; a point estimate covers nothing); and split-conformal
intervals at `level` calibrated on separate cases (width-normalized scores for ensembles,
absolute residuals for a point estimate).
By the law of total variance Var[z] = E[Var(z | x)] + Var(E[z | x]), so the point
estimator's marginal variance falls short of Var[z] by E[Var(z | x)], which `posterior_moments`
gives exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.scipy.special import log_ndtr
from jax.scipy.stats import norm

from posteriorjax import checks, training
from posteriorjax.metrics import calibration, scoring

MODELS = ("point", "point_mae", "mixture", "generative", "generative_sharp")


@dataclasses.dataclass(frozen=True)
class Problem:
    """z ~ N(mean, prior_std^2) per element, x = |z| + noise_std xi; `dim` elements."""

    dim: int = 2
    mean: float = 0.5
    prior_std: float = 1.0
    noise_std: float = 0.05

    def __post_init__(self):
        checks.positive_int("dim", self.dim)
        for name in ("prior_std", "noise_std"):
            checks.positive(name, getattr(self, name))

    @functools.partial(jax.jit, static_argnums=(0, 2))
    def simulate(self, key, num: int) -> tuple[jax.Array, jax.Array]:
        """`num` joint draws: `z (num, dim)`, `x (num, dim)`."""
        kz, kx = jr.split(key)
        z = self.mean + self.prior_std * jr.normal(kz, (num, self.dim))
        x = jnp.abs(z) + self.noise_std * jr.normal(kx, (num, self.dim))
        return z, x

    def _components(self, x):
        t2, s2 = self.prior_std**2, self.noise_std**2
        v = t2 * s2 / (t2 + s2)
        sd = math.sqrt(v)
        m_pos = (x * t2 + self.mean * s2) / (t2 + s2)
        m_neg = (-x * t2 + self.mean * s2) / (t2 + s2)
        marg = math.sqrt(t2 + s2)
        log_pos = norm.logpdf(x, self.mean, marg) + log_ndtr(m_pos / sd)
        log_neg = norm.logpdf(x, -self.mean, marg) + log_ndtr(-m_neg / sd)
        p_pos = jax.nn.sigmoid(log_pos - log_neg)
        return m_pos, m_neg, sd, p_pos

    @functools.partial(jax.jit, static_argnums=0)
    def posterior_moments(self, x) -> tuple[jax.Array, jax.Array]:
        """Exact posterior mean and variance of z given `x` (any shape, elementwise)."""
        m_pos, m_neg, sd, p_pos = self._components(jnp.asarray(x))
        # truncated-normal moments: mean m + sd lam, variance sd^2 (1 - lam (lam + a)), a = -m/sd
        a_pos, a_neg = -m_pos / sd, -m_neg / sd
        lam_pos = jnp.exp(norm.logpdf(a_pos) - log_ndtr(-a_pos))
        lam_neg = jnp.exp(norm.logpdf(a_neg) - log_ndtr(a_neg))
        mean_pos, mean_neg = m_pos + sd * lam_pos, m_neg - sd * lam_neg
        var_pos = sd**2 * (1 - lam_pos * (lam_pos - a_pos))
        var_neg = sd**2 * (1 - lam_neg * (lam_neg + a_neg))
        mean = p_pos * mean_pos + (1 - p_pos) * mean_neg
        second = p_pos * (var_pos + mean_pos**2) + (1 - p_pos) * (var_neg + mean_neg**2)
        return mean, second - mean**2

    @functools.partial(jax.jit, static_argnums=(0, 3))
    def sample_posterior(self, key, x, num: int) -> jax.Array:
        """`num` exact posterior draws `(num, *x.shape)` given `x`."""
        x = jnp.asarray(x)
        m_pos, m_neg, sd, p_pos = self._components(x)
        kc, kp, kn = jr.split(key, 3)
        shape = (num, *x.shape)
        positive = jr.uniform(kc, shape) < p_pos
        z_pos = m_pos + sd * jr.truncated_normal(kp, -m_pos / sd, jnp.inf, shape)
        z_neg = m_neg + sd * jr.truncated_normal(kn, -jnp.inf, -m_neg / sd, shape)
        return jnp.where(positive, z_pos, z_neg)


# ----------------------------------------------------------------------------
# Learned estimators


class PointEstimator(eqx.Module):
    """MLP `x (dim,) -> z_hat (dim,)` trained with the squared (`"mse"`) or absolute (`"mae"`) error."""

    mlp: eqx.nn.MLP
    objective: str = eqx.field(static=True)

    def __init__(self, key, dim: int, width: int, depth: int, objective: str = "mse"):
        if objective not in ("mse", "mae"):
            raise ValueError(f"objective: expected 'mse' or 'mae', got {objective!r}")
        self.mlp = eqx.nn.MLP(dim, dim, width, depth, activation=jax.nn.gelu, key=key)
        self.objective = objective

    def __call__(self, x):
        return self.mlp(x)

    def loss(self, x, z):
        err = self(x) - z
        return jnp.mean(err**2) if self.objective == "mse" else jnp.mean(jnp.abs(err))


class MixtureDensity(eqx.Module):
    """MLP `x (dim,) -> ` per-element K-component Gaussian mixture (logits, means, log-stds)."""

    mlp: eqx.nn.MLP
    dim: int = eqx.field(static=True)
    components: int = eqx.field(static=True)

    def __init__(self, key, dim: int, width: int, depth: int, components: int):
        self.mlp = eqx.nn.MLP(dim, 3 * dim * components, width, depth, activation=jax.nn.gelu, key=key)
        self.dim, self.components = dim, components

    def __call__(self, x):
        out = self.mlp(x).reshape(3, self.dim, self.components)
        return jax.nn.log_softmax(out[0], axis=-1), out[1], jnp.clip(out[2], -7.0, 3.0)

    def loss(self, x, z):
        logits, means, log_std = self(x)
        logp = norm.logpdf(z[:, None], means, jnp.exp(log_std))
        return -jnp.mean(jax.nn.logsumexp(logits + logp, axis=-1))

    def sample(self, key, x, num: int):
        """`num` draws `(num, dim)` from the predicted mixture at `x (dim,)`."""
        logits, means, log_std = self(x)
        kc, kn = jr.split(key)
        comp = jr.categorical(kc, logits, shape=(num, self.dim))
        mu = jnp.take_along_axis(means[None], comp[..., None], axis=-1)[..., 0]
        sd = jnp.exp(jnp.take_along_axis(log_std[None], comp[..., None], axis=-1)[..., 0])
        return mu + sd * jr.normal(kn, mu.shape)


def training_config(*, num_steps: int, batch_size: int, learning_rate: float) -> training.TrainConfig:
    """Adam (AdamW without decay) under a cosine decay to 1 % of `learning_rate`; no warm-up, no clipping."""
    return training.TrainConfig(
        num_steps=num_steps,
        batch_size=batch_size,
        learning_rate=learning_rate,
        warmup_steps=0,
        end_learning_rate_factor=0.01,
        weight_decay=0.0,
        clip_norm=0.0,
        progress=False,
    )


def fit(key, model, z, x, *, num_steps: int, batch_size: int, learning_rate: float):
    """Adam on `model.loss` over minibatches (one jitted `training.scan`) -> (model, losses (num_steps,))."""
    cfg = training_config(num_steps=num_steps, batch_size=batch_size, learning_rate=learning_rate)

    def loss(m, k):
        idx = jr.randint(k, (batch_size,), 0, z.shape[0])
        return jnp.mean(jax.vmap(m.loss)(x[idx], z[idx]))

    model, _, losses = eqx.filter_jit(training.scan)(
        model, loss, training.make_optimizer(cfg), jr.split(key, num_steps)
    )
    return model, losses


# ----------------------------------------------------------------------------
# Metrics and the study


def evaluate(samples, truth, cal_samples, cal_truth, *, level: float = 0.9) -> dict[str, float]:
    """The protocol's metrics for test `samples (L, N, d)` at `truth (L, d)`.

    `cal_samples (n, N, d)`, `cal_truth (n, d)`: separate calibration cases for the
    split-conformal intervals. N = 1 is a point estimate.
    """
    x = jnp.asarray(samples)
    t = jnp.asarray(truth, x.dtype)
    cal = jnp.asarray(cal_samples, x.dtype)
    cal_t = jnp.asarray(cal_truth, x.dtype)
    if x.ndim != 3 or t.shape != (x.shape[0], x.shape[2]):
        raise ValueError(f"samples/truth: expected (L, N, d) and (L, d), got {x.shape} and {t.shape}")
    if cal.ndim != 3 or cal.shape[1:] != x.shape[1:] or cal_t.shape != (cal.shape[0], x.shape[2]):
        raise ValueError(
            f"cal_samples/cal_truth: expected (n, {x.shape[1]}, {x.shape[2]}) and (n, {x.shape[2]}), "
            f"got {cal.shape} and {cal_t.shape}"
        )
    for name, a in (("samples", x), ("truth", t), ("cal_samples", cal), ("cal_truth", cal_t)):
        if not bool(jnp.all(jnp.isfinite(a))):
            raise ValueError(f"{name}: expected finite values")
    return {k: float(v) for k, v in _metrics(x, t, cal, cal_t, float(level)).items()}


@functools.partial(jax.jit, static_argnums=4)
def _metrics(x, t, cal, cal_t, level):
    members = jnp.moveaxis(x, 1, 0)  # (N, L, d): elements of all cases scored at once
    decomposition = calibration.variance_decomposition(x, t)
    point = x.shape[1] == 1
    cov_members = jnp.concatenate([members, members]) if point else members  # a point: zero-width intervals
    cov = calibration.coverage(cov_members, t)
    if point:
        q = calibration.conformal_quantile(jnp.abs(cal[:, 0] - cal_t), level)
        lo, hi = x[:, 0] - q, x[:, 0] + q
        scale = jnp.asarray(jnp.nan, x.dtype)
    else:
        scale = calibration.conformal_scale(cal, cal_t, level)
        lo, hi = calibration.conformal_intervals(members, level, scale)
    return {
        "rmse": jnp.sqrt(jnp.mean((x[:, 0] - t) ** 2)),
        "rmse_mean": jnp.sqrt(jnp.mean((x.mean(axis=1) - t) ** 2)),
        "crps": jnp.mean(scoring.crps(members, t)),
        "marginal_w1": calibration.marginal_wasserstein(x, t),
        "variance_ratio": decomposition["predicted_ratio"],
        "predicted_variance": decomposition["predicted"],
        "truth_variance": decomposition["truth"],
        "coverage_error": calibration.calibration_error(cov),
        "conformal_coverage": jnp.mean((lo <= t) & (t <= hi)),
        "conformal_width": jnp.mean(hi - lo),
        "conformal_scale": scale,
    }


def default_config() -> dict:
    """Every option of `run` with its default (the `synthetic` section of the calibration config)."""
    return {
        "seed": 0,
        "dim": 2,
        "mean": 0.5,
        "prior_std": 1.0,
        "noise_std": 0.05,
        "num_train": 8192,
        "num_calibration": 1000,
        "num_test": 1000,
        "num_samples": 64,
        "width": 64,
        "depth": 2,
        "components": 2,
        "num_steps": 2000,
        "batch_size": 256,
        "learning_rate": 3e-3,
        "level": 0.9,
        "sharp_factor": 0.5,
    }


def run(config: Mapping) -> dict:
    """Train the point and mixture estimators, sample all three models, score them.

    `config`: the keys of `default_config()` (all required). Returns
    `{"metrics": {model: {metric: value}}, "law_of_total_variance": {...}, "config": ...}`;
    the law-of-total-variance entry holds Var[z] of the test truth, E[Var(z | x)] from the
    exact posterior and the point estimator's marginal variance.
    """
    c = dict(config)
    missing = sorted(set(default_config()) - set(c))
    if missing:
        raise ValueError(f"config: missing key(s) {missing}; expected every key of bimodal.default_config()")
    problem = Problem(int(c["dim"]), float(c["mean"]), float(c["prior_std"]), float(c["noise_std"]))
    key = jr.key(int(c["seed"]))
    k_data, k_point, k_mix, k_fit_p, k_fit_m, k_s_mix, k_s_gen = jr.split(key, 7)
    k_mae, k_fit_mae = jr.split(jr.fold_in(key, 7))
    # one joint draw split into training, calibration and test cases (one compiled simulation)
    sizes = np.cumsum([int(c["num_train"]), int(c["num_calibration"]), int(c["num_test"])])
    z_all, x_all = problem.simulate(k_data, int(sizes[-1]))
    z_train, x_train = z_all[: sizes[0]], x_all[: sizes[0]]
    splits = {
        "cal": (z_all[sizes[0] : sizes[1]], x_all[sizes[0] : sizes[1]]),
        "test": (z_all[sizes[1] :], x_all[sizes[1] :]),
    }
    opts = dict(
        num_steps=int(c["num_steps"]),
        batch_size=int(c["batch_size"]),
        learning_rate=float(c["learning_rate"]),
    )
    dim, width, depth = problem.dim, int(c["width"]), int(c["depth"])
    point, _ = fit(k_fit_p, PointEstimator(k_point, dim, width, depth), z_train, x_train, **opts)
    point_mae, _ = fit(k_fit_mae, PointEstimator(k_mae, dim, width, depth, "mae"), z_train, x_train, **opts)
    mixture, _ = fit(
        k_fit_m, MixtureDensity(k_mix, dim, width, depth, int(c["components"])), z_train, x_train, **opts
    )
    n = int(c["num_samples"])

    @eqx.filter_jit
    def draw(model, x, k):
        keys = jr.split(k, x.shape[0])
        if model in ("point", "point_mae"):
            return jax.vmap(point if model == "point" else point_mae)(x)[:, None]
        if model == "mixture":
            return jax.vmap(lambda kk, xx: mixture.sample(kk, xx, n))(keys, x)
        draws = jax.vmap(lambda kk, xx: problem.sample_posterior(kk, xx, n))(keys, x)
        if model == "generative_sharp":
            m_pos, m_neg, _, _ = problem._components(x)
            centre = jnp.where(draws > 0, m_pos[:, None], m_neg[:, None])
            draws = centre + float(c["sharp_factor"]) * (draws - centre)
        return draws

    metrics = {}
    for model in MODELS:
        # the two exact-posterior models share their draws (the sharp one only contracts them)
        exact = model in ("generative", "generative_sharp")
        k = jr.fold_in(k_s_gen, 2) if exact else jr.fold_in(k_s_mix, 1)
        ens = draw(model, jnp.concatenate([splits["cal"][1], splits["test"][1]]), k)
        n_cal = splits["cal"][1].shape[0]
        metrics[model] = evaluate(
            ens[n_cal:], splits["test"][0], ens[:n_cal], splits["cal"][0], level=float(c["level"])
        )
    z_test, x_test = splits["test"]
    _, post_var = problem.posterior_moments(x_test)
    total = float(jnp.var(z_test))
    within = float(jnp.mean(post_var))
    ltv = {
        "truth_variance": total,
        "expected_posterior_variance": within,
        "predicted_point_variance": total - within,
        "point_variance": metrics["point"]["predicted_variance"],
    }
    return {"metrics": metrics, "law_of_total_variance": ltv, "config": c}


TABLE_COLUMNS = (
    ("rmse", "RMSE"),
    ("rmse_mean", "RMSE (mean)"),
    ("crps", "CRPS"),
    ("marginal_w1", "Marginal W1"),
    ("variance_ratio", "Var ratio"),
    ("coverage_error", "Coverage err."),
    ("conformal_coverage", "Conformal cov."),
    ("conformal_width", "Conformal width"),
)


def table(result: Mapping) -> str:
    """Markdown table of `run`'s result: models x metrics, and the law-of-total-variance check."""
    level = result["config"]["level"]
    lines = [
        "| model | " + " | ".join(h for _, h in TABLE_COLUMNS) + " |",
        "|---|" + "---:|" * len(TABLE_COLUMNS),
    ]
    for model, m in result["metrics"].items():
        lines.append(f"| {model} | " + " | ".join(f"{m[k]:.4f}" for k, _ in TABLE_COLUMNS) + " |")
    ltv = result["law_of_total_variance"]
    lines += [
        "",
        f"Lower is better except Var ratio (1 is faithful) and conformal coverage (nominal {level}).",
        "RMSE scores one reconstruction per case (the point estimate or one draw), RMSE (mean) the",
        "ensemble mean.",
        "",
        "Law of total variance: Var[z] = {:.4f}, E[Var(z|x)] = {:.4f}, so Var(E[z|x]) = {:.4f}; "
        "the point estimator's marginal variance is {:.4f}.".format(
            ltv["truth_variance"],
            ltv["expected_posterior_variance"],
            ltv["predicted_point_variance"],
            ltv["point_variance"],
        ),
    ]
    return "\n".join(lines)


def ranking(result: Mapping, metric: str, models=None) -> list[str]:
    """`models` (default all) best first by `metric` (lower is better; `variance_ratio` by |log ratio|)."""
    ms = {m: v for m, v in result["metrics"].items() if models is None or m in models}

    def score(model):
        v = ms[model][metric]
        return abs(np.log(v)) if metric == "variance_ratio" else v

    return sorted(ms, key=score)
