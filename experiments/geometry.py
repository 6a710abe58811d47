"""Observation geometry of the interface tasks + controlled local inverse problems (ridge, TSVD).

    python -m experiments.geometry --config=configs/geometry.py[:tiny] --workdir=DIR

For each (task, frames) configuration: the whitened Jacobian geometry at the
prior mean (`metrics.geometry.analyze`), a finite-difference step sweep, and
the effective rank at a coarser grid. Then the controlled local inverse
problem of that configuration: coefficients c = mean + A z + r (A a fixed
smooth m x k loading, z ~ N(0, I_k), r ~ N(0, residual_std^2 I_m) full rank),
whitened observations y = Jw (c - mean) + N(0, I); ridge regression (fitted on
train) and truncated SVD on the retained directions; directional NRMSE on test;
sCRS under no abstention, validation gating (claim directions with validation
NRMSE <= delta) and oracle gating (claim retained); CRC-AUC, geometric AUROC
and D of the validation-error confidence (u = -validation NRMSE).
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from posteriorjax import tasks
from posteriorjax.metrics import geometry as geo
from posteriorjax.tasks import interface

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")


def build_task(name: str, frames: int, resolution: int):
    return (
        tasks.get(name, resolution=resolution)
        if frames < 0
        else tasks.get(name, resolution=resolution, frames=frames)
    )


def analyze_task(task, tau: float, fd_steps=None):
    fn, c0, cov = interface.observation_map(task)
    fn = jax.jit(fn)
    c0 = jnp.asarray(c0, jnp.float64)
    g = geo.analyze(fn, c0, noise_cov=cov, tau=tau)
    fd = geo.finite_difference_check(fn, c0, g.jacobian, steps=fd_steps) if fd_steps else None
    return g, np.asarray(cov, np.float64), fd


def _loading(m: int, k: int, rng) -> np.ndarray:
    """A smooth correlated loading `(m, k)`: random combinations decaying with the Fourier order."""
    order = np.concatenate([[0], np.arange(1, 9), np.arange(1, 9)])
    return rng.standard_normal((m, k)) / (1.0 + order[:, None]) ** 1.5


def controlled(g: geo.Geometry, cov: np.ndarray, cfg, seed: int, delta: float) -> dict:
    rng = np.random.default_rng(seed)
    m = g.V.shape[0]
    jw = g.jacobian / np.sqrt(cov)[:, None]
    loading = _loading(m, cfg.latent_dim, np.random.default_rng(1000 + seed))
    sizes = (cfg.num_train, cfg.num_val, cfg.num_test)
    n = sum(sizes)
    c = rng.standard_normal((n, cfg.latent_dim)) @ loading.T + cfg.residual_std * rng.standard_normal((n, m))
    y = c @ jw.T + rng.standard_normal((n, jw.shape[0]))
    c_tr, c_va, c_te = np.split(c, np.cumsum(sizes)[:-1])
    y_tr, y_va, y_te = np.split(y, np.cumsum(sizes)[:-1])
    # ridge with intercept
    ym, cm = y_tr.mean(0), c_tr.mean(0)
    yc = y_tr - ym
    w = np.linalg.solve(yc.T @ yc + cfg.ridge * len(yc) * np.eye(yc.shape[1]), yc.T @ (c_tr - cm))
    # TSVD on the retained directions (whitened pseudo-inverse)
    u, s, vt = np.linalg.svd(jw, full_matrices=False)
    keep = s / s[0] >= g.tau
    pinv = vt[keep].T @ np.diag(1 / s[keep]) @ u[:, keep].T
    estimators = {"ridge": lambda yy: (yy - ym) @ w + cm, "tsvd": lambda yy: yy @ pinv.T}
    out = {}
    for name, est in estimators.items():
        e_va = geo.directional_nrmse(geo.project(g, est(y_va)), geo.project(g, c_va))
        e_te = geo.directional_nrmse(geo.project(g, est(y_te)), geo.project(g, c_te))
        hit = geo.hits(g, e_te, delta)
        claimed_val = np.nan_to_num(e_va <= delta, nan=False)
        sel = geo.selection(-np.nan_to_num(e_va, nan=np.inf, posinf=1e300), g.retained, hit)
        out[name] = {
            "nrmse": float(np.sqrt(np.mean((est(y_te) - c_te) ** 2)) / np.std(c_te)),
            "directional_nrmse": e_te.tolist(),
            "hits": int(hit.sum()),
            "scrs_none": geo.scrs(np.ones(m, bool), g.retained, hit),
            "scrs_validation": geo.scrs(claimed_val, g.retained, hit),
            "scrs_oracle": geo.scrs(g.retained, g.retained, hit),
            "selection": sel,
        }
    return out


def _plot(path: Path, label: str, sel: geo.Selection) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    axes[0].plot(sel.coverage, sel.recovery_yield, label="validation-error ranking")
    axes[0].plot(sel.coverage, sel.recovery_yield_random, "--", label="random")
    axes[0].set(xlabel="claim coverage j/m", ylabel="recovery yield Y", title=label)
    if sel.abstention is not None:
        axes[1].plot(sel.coverage, sel.abstention, label="validation-error ranking")
        axes[1].plot(sel.coverage, sel.abstention_random, "--", label="random")
    axes[1].set(xlabel="claim coverage j/m", ylabel="below-threshold abstention Z")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _mean_score(scores) -> str:
    vals = [s.value for s in scores if s.defined]
    if not vals:
        return f"undefined ({scores[0].reason})"
    text = f"{np.mean(vals):.3f}"
    return text if len(vals) == len(scores) else f"{text} ({len(scores) - len(vals)} undefined)"


def run(config, workdir: str | None = None) -> dict:
    path = Path(workdir) if workdir else None
    if path:
        (path / "figures").mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(config.to_json(indent=2))
    geo_rows, ctl_rows, results = [], [], {}
    with jax.enable_x64(True):
        for name, frames in config.configurations:
            label = name if frames < 0 else f"{name} F{frames}"
            task = build_task(name, frames, config.resolution)
            g, cov, fd = analyze_task(task, config.tau, tuple(config.fd_steps))
            g_coarse, _, _ = analyze_task(build_task(name, frames, config.refine_resolution), config.tau)
            geo_rows.append(
                f"| {label} | {task.num_observations} | {g.num_retained} | {g.num_below} | {g.rank} | "
                f"{g_coarse.num_retained} | {min(fd['relative_error']):.1e} | "
                f"{max(fd['adjacent_change']):.1e} |"
            )
            per_seed = [
                controlled(g, cov, config.controlled, config.seed + s, config.delta)
                for s in range(config.controlled.num_seeds)
            ]
            results[label] = {"geometry": g.summary(), "coarse": g_coarse.summary(), "fd": fd}
            for est in ("ridge", "tsvd"):
                runs = [r[est] for r in per_seed]
                nrmse = np.array([r["nrmse"] for r in runs])
                sels = [r["selection"] for r in runs]
                ctl_rows.append(
                    f"| {label} | {est} | {nrmse.mean():.3f} ± {nrmse.std():.3f} | "
                    f"{np.mean([r['hits'] for r in runs]):.1f} | "
                    f"{_mean_score([r['scrs_none'] for r in runs])} | "
                    f"{_mean_score([r['scrs_validation'] for r in runs])} | "
                    f"{_mean_score([r['scrs_oracle'] for r in runs])} | "
                    f"{_mean_score([s.crc_auc for s in sels])} | "
                    f"{_mean_score([s.geometric_auroc for s in sels])} | "
                    f"{_mean_score([s.excess_abstention for s in sels])} |"
                )
                results[label][est] = {
                    "nrmse": nrmse.tolist(),
                    "hits": [r["hits"] for r in runs],
                    "scrs": {
                        k: [r[f"scrs_{k}"].value for r in runs] for k in ("none", "validation", "oracle")
                    },
                    "crc_auc": [s.crc_auc.value for s in sels],
                    "geometric_auroc": [s.geometric_auroc.value for s in sels],
                    "excess_abstention": [s.excess_abstention.value for s in sels],
                }
                if path:
                    _plot(
                        path / "figures" / f"curves_{label.replace(' ', '_')}_{est}.png",
                        f"{label} {est}",
                        sels[0],
                    )
    res, coarse = config.resolution, config.refine_resolution
    table1 = "\n".join(
        [
            f"| configuration | p | retained ({res}²) | below | exact rank | retained ({coarse}²) | "
            "FD rel. error (best step) | FD adjacent change (max) |",
            "|" + "---|" * 8,
            *geo_rows,
        ]
    )
    table2 = "\n".join(
        [
            "| configuration | estimator | coeff. NRMSE | hits | sCRS none | sCRS validation | sCRS oracle | "
            "CRC-AUC | geometric AUROC | D |",
            "|" + "---|" * 10,
            *ctl_rows,
        ]
    )
    text = (
        f"## Observation geometry (tau = {config.tau})\n\n{table1}\n\n"
        f"## Controlled local inverse problems\n\n{table2}\n"
    )
    print(text)
    if path:
        (path / "summary.md").write_text(text)
        (path / "results.json").write_text(json.dumps(results, indent=2, default=str))
    return results


def main(argv):
    del argv
    run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    flags.mark_flags_as_required(["config"])
    app.run(main)
