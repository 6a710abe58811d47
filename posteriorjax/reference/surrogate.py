"""Surrogate-accelerated references (the published CCS reference) and their error budget.

PosteriorBench (App. B.1) builds the CCS reference by rejection over a 2M-candidate prior pool
whose observations come from a neural-operator surrogate L_phi of the CO2 simulator, with the
per-point likelihood

    L(m) = exp(-||M (L_phi(m) - y_obs)||^2 / (2 sigma_obs^2 |M|))      (|M| observed cells)

as the acceptance probability (about 26,000 of 2M accepted per case, 1.3 %). Here:

* `SurrogatePhysics` puts a trained `surrogate` network (`nn.Surrogate`, x -> u) in a task's
  place of the simulator, so `reference.pool` builds the candidate pool through it;
* `select` applies the published rejection (accept j when U_j < L_j, U_j ~ U(0, 1), then keep
  K at random) or its importance form (systematic resample of the pool ∝ L_j);
* `error_budget` re-simulates the K kept members with the true simulator and reports what
  the surrogate changed: the observation error on the members, the estimated acceptance of
  the simulator's likelihood, and the five posterior metrics of the surrogate reference
  scored against the `validated` one, whose weights w_j ∝ L_sim(m_j) / L_sur(m_j) make the
  kept set a self-normalized importance sample of prior x L_sim (the members were drawn
  ∝ prior x L_sur);
* `held_out_error` is the surrogate's held-out error per output cell and per well column.
"""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import checks, files
from posteriorjax.metrics import suite
from posteriorjax.reference import rejection
from posteriorjax.tasks.base import AbstractPhysics, Task

RULES = ("rejection", "importance")
# the posterior metrics of the main table, as `metrics.suite.evaluate` names them
METRICS = ("mean_error", "std_error", "mmd", "swd", "spectral_error")


class SurrogatePhysics(AbstractPhysics):
    """A trained forward surrogate `model(x (C, H, W)) -> u (C_u, H, W)` in a task's physics slot."""

    model: Any
    simulator: AbstractPhysics

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.model(x)

    def valid(self, x: jax.Array) -> jax.Array:
        return self.simulator.valid(x)

    def residual(self, x: jax.Array, u: jax.Array) -> jax.Array:
        """The simulator's residual at the surrogate's state (how far the surrogate is from a solution)."""
        return self.simulator.residual(x, u)


def surrogate_task(task: Task, model) -> Task:
    """`task` with its physics replaced by `model` (same prior, observation, noise and config hash)."""
    if model is None or not callable(model):
        raise ValueError(f"surrogate: expected a trained surrogate network x -> u, got {model!r}")
    out = jax.eval_shape(model, jax.ShapeDtypeStruct(task.unknown_shape, jnp.float32))
    if tuple(out.shape) != tuple(task.state_shape):
        raise ValueError(
            f"surrogate: expected a network mapping {task.unknown_shape} to the state shape "
            f"{task.state_shape} of task {task.name!r}, got output shape {tuple(out.shape)}"
        )
    return eqx.tree_at(lambda t: t.physics, task, SurrogatePhysics(model, task.physics))


def fingerprint(task: Task, model) -> str:
    """A short hash naming a surrogate: its parameter values and its output on one fixed prior draw

    (so two networks with equal parameters but other static settings never share a pool)."""
    probe = np.ascontiguousarray(np.asarray(model(task.prior.sample(jr.key(0))), np.float64))
    return files.sha256(files.parameter_digest(model).encode() + probe.tobytes())[:16]


def noise_std(task: Task) -> np.ndarray:
    """Per-observation noise std `(M,)` of the task's Gaussian noise (float64)."""
    return np.asarray(task.noise.variance(task.num_observations), np.float64) ** 0.5 * np.ones(
        task.num_observations
    )


def log_likelihood(y, y_obs, std) -> np.ndarray:
    """The published per-point log-likelihood -||y_j - y_obs||^2 / (2 sigma^2 M), `(N,)` (float64)."""
    return rejection.gaussian_log_weights(y, np.asarray(y_obs, np.float64), std, per_point=True)


def select(rng: np.random.Generator, log_l, *, num: int, rule: str = "rejection"):
    """Indices `(num,)` of the kept members and the selection's info.

    ``"rejection"`` (published): accept j when U_j < L_j = exp(log_l_j) <= 1, keep `num` of the
    accepted at random (ValueError when fewer are accepted, naming the pool size needed);
    ``"importance"``: a systematic resample of size `num` with weights ∝ L_j.
    """
    checks.in_choices("rule", rule, RULES)
    num = checks.positive_int("num", num)
    log_l = np.asarray(log_l, np.float64)
    if rule == "importance":
        w, ess = rejection.normalize_log_weights(log_l)
        idx = rejection.systematic_resample(rng, w, num)
        return idx, {"rule": rule, "pool_size": int(log_l.size), "ess": ess, "max_weight": float(w.max())}
    if np.any(log_l > 0):
        raise ValueError("log_l: a log acceptance probability above 0 (the likelihood must be <= 1)")
    accepted = np.flatnonzero(rng.uniform(size=log_l.size) < np.exp(log_l))
    rate = accepted.size / log_l.size
    if accepted.size < num:
        need = f"about {math.ceil(num / rate):,}" if rate > 0 else f"more than {log_l.size * num:,}"
        raise ValueError(
            f"num: asked to keep K={num} but the surrogate likelihood accepted only {accepted.size} of "
            f"{log_l.size:,} candidates (rate {rate:.3g}); a pool of {need} candidates would be needed"
        )
    idx = np.sort(rng.choice(accepted, size=num, replace=False))
    return idx, {
        "rule": rule,
        "pool_size": int(log_l.size),
        "accepted": int(accepted.size),
        "acceptance_rate": rate,
    }


def simulate(task: Task, x, batch_size: int = 16) -> np.ndarray:
    """The true simulator's noise-free observations of `x (K, C, H, W)`: `(K, M)`, in batches."""
    fn = eqx.filter_jit(lambda xs: jax.vmap(lambda v: task.observation(task.physics(v)))(xs))
    x = np.asarray(x)
    return np.concatenate(
        [np.asarray(fn(jnp.asarray(x[i : i + batch_size]))) for i in range(0, len(x), batch_size)]
    )


def _validated_log_weights(log_l_sim, log_l_sur) -> np.ndarray:
    """log w_j = log L_sim(m_j) - log L_sur(m_j): re-weights draws ∝ prior x L_sur to prior x L_sim."""
    return np.asarray(log_l_sim, np.float64) - np.asarray(log_l_sur, np.float64)


def error_budget(task: Task, x, y_sur, y_sim, y_obs, *, rate: float | None = None) -> tuple[np.ndarray, dict]:
    """(validated weights `(K,)`, info) of K kept members `x` with surrogate / simulator observations.

    info: the members' surrogate observation RMSE (all and per well column of a
    `ColumnObservation`), relative to the noise std; `kept_accept_ratio`, the mean of
    L_sim / L_sur over the members (1: the simulator accepts them as often as the surrogate
    did); with the surrogate's acceptance `rate`, the simulator's estimated acceptance rate
    rate x mean(L_sim / L_sur) (E_prior L_sim = E_prior L_sur x E_accepted L_sim / L_sur);
    the Kish ESS of the validated weights; and `metrics`, the five posterior metrics of the
    surrogate reference (uniform over the members) scored against the validated one.
    """
    std = noise_std(task)
    y_sur, y_sim = np.asarray(y_sur, np.float64), np.asarray(y_sim, np.float64)
    log_sur, log_sim = log_likelihood(y_sur, y_obs, std), log_likelihood(y_sim, y_obs, std)
    ratio = np.exp(_validated_log_weights(log_sim, log_sur))
    w, ess = rejection.normalize_log_weights(_validated_log_weights(log_sim, log_sur))
    diff = y_sur - y_sim
    info = {
        "obs_rmse": float(np.sqrt(np.mean(diff**2))),
        "obs_rmse_over_noise": float(np.sqrt(np.mean((diff / std) ** 2))),
        "kept_accept_ratio": float(np.mean(ratio)),
        "validated_kish_ess": ess,
        "members": int(len(w)),
    }
    columns = getattr(task.observation, "columns", None)
    if columns is not None:
        per_well = np.sqrt(np.mean(diff.reshape(len(diff), len(columns), -1) ** 2, axis=(0, 2)))
        info["obs_rmse_per_well"] = {
            str(int(c)): float(e) for c, e in zip(np.asarray(columns), per_well, strict=True)
        }
    if rate is not None:
        info["acceptance_rate_simulator_estimate"] = float(rate * np.mean(ratio))
    scores = suite.evaluate(np.asarray(x), np.asarray(x), w, task=task)
    info["metrics"] = {m: float(np.asarray(scores[m])) for m in METRICS}
    return w, info


def held_out_error(task: Task, model, key, num: int = 64, batch_size: int = 16) -> dict:
    """The surrogate's held-out error on `num` fresh prior draws, simulated with the true physics.

    Returns `rmse_per_cell (C_u, H, W)` and `mae_per_cell` (state units), `relative_l2`
    (mean over draws of ||u_sur - u_sim|| / ||u_sim||), `obs_rmse` (noise-free observations)
    and, for a `ColumnObservation`, `rmse_per_well` {column: RMSE over its cells} and
    `relative_l2_per_well` {column: ||error|| / ||u|| over that column of every draw, pooled: a
    column that most draws leave dry has no per-draw relative error; NaN for a column that every
    draw leaves dry, which has none at all}.
    """
    num = checks.positive_int("num", num)
    keys = jr.split(key, num)
    draw = eqx.filter_jit(jax.vmap(lambda k: task.prior.sample(k)))
    both = eqx.filter_jit(jax.vmap(lambda v: (task.physics(v), model(v))))
    x = draw(keys)
    sim, sur = [], []
    for i in range(0, num, batch_size):
        u, p = both(x[i : i + batch_size])
        sim.append(np.asarray(u, np.float64))
        sur.append(np.asarray(p, np.float64))
    u, p = np.concatenate(sim), np.concatenate(sur)
    d = p - u
    flat = lambda a: a.reshape(len(a), -1)  # noqa: E731
    rel = np.linalg.norm(flat(d), axis=1) / np.maximum(np.linalg.norm(flat(u), axis=1), 1e-12)
    obs = jax.vmap(task.observation)
    y_d = np.asarray(obs(jnp.asarray(p)), np.float64) - np.asarray(obs(jnp.asarray(u)), np.float64)
    out = {
        "num": num,
        "rmse_per_cell": np.sqrt(np.mean(d**2, axis=0)),
        "mae_per_cell": np.mean(np.abs(d), axis=0),
        "relative_l2": float(np.mean(rel)),
        "obs_rmse": float(np.sqrt(np.mean(y_d**2))),
    }
    columns = getattr(task.observation, "columns", None)
    if columns is not None:
        cols = [int(c) for c in np.asarray(columns)]
        out["rmse_per_well"] = {str(c): float(np.sqrt(np.mean(d[..., c] ** 2))) for c in cols}
        out["relative_l2_per_well"] = {
            str(c): float(np.linalg.norm(d[..., c]) / norm)
            if (norm := np.linalg.norm(u[..., c])) > 0
            else math.nan
            for c in cols
        }
    return out
