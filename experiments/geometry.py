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

Learned estimators (`config.learned`, `posteriorjax.estimators`): for each
configuration, prior draws of the coefficients and noisy observations from the
task's forward map (train / calibration / test); per estimator family (MLP,
GRU over the observation history, FNO and DeepONet on rasterized sensors) all
seeds x ensemble members train as one vmapped program (float32); confidences per
direction from the calibration split (validation NRMSE, ensemble spread,
conformal width, oracle); test scores per seed: coefficient and directional
NRMSE, hits, sCRS under no abstention / validation / oracle gating, CRC-AUC,
geometric AUROC and D per confidence rule, and Y/Z curves (seed means) against
coverage with the random reference (`figures/learned_*.png`).

Transport partition convergence (`config.convergence`): retained/below-threshold
counts of the transport configurations at several resolutions and advection schemes.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from posteriorjax import estimators as est
from posteriorjax import parallel, tasks
from posteriorjax.metrics import geometry as geo
from posteriorjax.tasks import interface

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")


def build_task(name: str, frames: int, resolution: int, **overrides):
    if frames >= 0:
        overrides["frames"] = frames
    return tasks.get(name, resolution=resolution, **overrides)


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
    for name, estimate in estimators.items():
        e_va = geo.directional_nrmse(geo.project(g, estimate(y_va)), geo.project(g, c_va))
        e_te = geo.directional_nrmse(geo.project(g, estimate(y_te)), geo.project(g, c_te))
        hit = geo.hits(g, e_te, delta)
        claimed_val = np.nan_to_num(e_va <= delta, nan=False)
        sel = geo.selection(-np.nan_to_num(e_va, nan=np.inf, posinf=1e300), g.retained, hit)
        out[name] = {
            "nrmse": float(np.sqrt(np.mean((estimate(y_te) - c_te) ** 2)) / np.std(c_te)),
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


def _label(name: str, frames: int) -> str:
    return name if frames < 0 else f"{name} F{frames}"


def _mean_std(values) -> str:
    v = np.asarray(values, np.float64)
    return f"{np.mean(v):.3f} ± {np.std(v):.3f}"


def _median(values) -> float:
    v = np.asarray(values, np.float64)
    return float(np.median(v)) if v.size else float("nan")


def _plot_learned(path: Path, label: str, runs: list[dict]) -> None:
    """Seed-mean Y and Z curves of every confidence rule against claim coverage, with the random reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    rules = list(runs[0]["selection"])
    first = runs[0]["selection"][rules[0]]
    for rule in rules:
        sels = [r["selection"][rule] for r in runs]
        axes[0].plot(first.coverage, np.mean([s.recovery_yield for s in sels], axis=0), label=rule)
        if first.abstention is not None:
            axes[1].plot(first.coverage, np.mean([s.abstention for s in sels], axis=0), label=rule)
    axes[0].plot(
        first.coverage,
        np.mean([r["selection"][rules[0]].recovery_yield_random for r in runs], axis=0),
        "k--",
        label="random",
    )
    if first.abstention is not None:
        axes[1].plot(first.coverage, first.abstention_random, "k--", label="random")
    else:
        axes[1].text(0.5, 0.5, "no below-threshold directions", ha="center", transform=axes[1].transAxes)
    axes[0].set(xlabel="claim coverage j/m", ylabel="recovery yield Y", title=label)
    axes[1].set(xlabel="claim coverage j/m", ylabel="below-threshold abstention Z")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def learned(config, geometries: dict, path: Path | None = None) -> tuple[list[str], list[str], dict]:
    """Train and score the learned estimators on `config.learned.configurations` (see module doc).

    `geometries[(name, frames)]` is the `Geometry` of that configuration at
    `config.resolution`. Returns the rows of the estimator table, of the
    confidence-ranking table, and the per-seed results.
    """
    cfg = config.learned
    train_config = est.TrainConfig(cfg.num_steps, cfg.batch_size, cfg.learning_rate, cfg.weight_decay)
    base = jr.fold_in(jr.key(config.seed), 1)
    rows, rank_rows, results = [], [], {}
    for ci, (name, frames) in enumerate(cfg.configurations):
        label = _label(name, frames)
        g = geometries[(name, frames)]
        out = est.run_configuration(
            jr.fold_in(base, ci),
            build_task(name, frames, config.resolution),
            g,
            estimators=tuple(cfg.estimators),
            sizes=(cfg.num_train, cfg.num_calibration, cfg.num_test),
            num_seeds=cfg.num_seeds,
            num_members=cfg.num_members,
            options={k: dict(v) for k, v in cfg.options.items()},
            config=train_config,
            level=cfg.level,
            delta=config.delta,
        )
        results[label] = {}
        for estimator, res in out.items():
            runs = res["runs"]
            e = np.array([r["directional_nrmse"] for r in runs])
            rows.append(
                f"| {label} | {estimator} | {_mean_std([r['nrmse'] for r in runs])} | "
                f"{_median(e[:, g.retained]):.3f} | {_median(e[:, ~g.retained]):.3f} | "
                f"{np.mean([r['hits'] for r in runs]):.1f} / {g.num_retained} | "
                f"{_mean_score([r['scrs_none'] for r in runs])} | "
                f"{_mean_score([r['scrs_validation'] for r in runs])} | "
                f"{_mean_score([r['scrs_oracle'] for r in runs])} | "
                f"{float(np.mean(res['final_loss'])):.3f} |"
            )
            for rule in runs[0]["selection"]:
                sels = [r["selection"][rule] for r in runs]
                rank_rows.append(
                    f"| {label} | {estimator} | {rule} | {_mean_score([x.crc_auc for x in sels])} | "
                    f"{_mean_score([x.geometric_auroc for x in sels])} | "
                    f"{_mean_score([x.excess_abstention for x in sels])} |"
                )
            results[label][estimator] = {
                "nrmse": [r["nrmse"] for r in runs],
                "directional_nrmse": e.tolist(),
                "hits": [r["hits"] for r in runs],
                "scrs": {k: [r[f"scrs_{k}"].value for r in runs] for k in ("none", "validation", "oracle")},
                "confidence": {k: [r["confidence"][k].tolist() for r in runs] for k in est.CONFIDENCES},
                "selection": {
                    rule: {
                        score: [
                            {"value": getattr(r["selection"][rule], score).value,
                             "reason": getattr(r["selection"][rule], score).reason}
                            for r in runs
                        ]
                        for score in ("crc_auc", "geometric_auroc", "excess_abstention")
                    }
                    for rule in runs[0]["selection"]
                },
                "final_loss": res["final_loss"].tolist(),
            }  # fmt: skip
            if path:
                _plot_learned(
                    path / "figures" / f"learned_{label.replace(' ', '_')}_{estimator}.png",
                    f"{label} {estimator}",
                    runs,
                )
    return rows, rank_rows, results


def convergence(config) -> tuple[list[str], dict]:
    """Retained/below-threshold counts of `config.convergence.configurations` per advection scheme,
    interface width and resolution (width 0: the task default of one grid spacing)."""
    cfg = config.convergence
    rows, out = [], {}
    for name, frames in cfg.configurations:
        for width in cfg.interface_widths:
            for scheme in cfg.schemes:
                counts = []
                for n in cfg.resolutions:
                    overrides = {"scheme": scheme}
                    if width > 0:
                        overrides["width"] = width * (n + 1)  # in grid spacings h = 1 / (n + 1)
                    g, _, _ = analyze_task(build_task(name, frames, n, **overrides), config.tau)
                    counts.append(g.summary())
                label = f"{_label(name, frames)} | {f'{width:.4f}' if width > 0 else '1 h'} | {scheme}"
                out[label] = counts
                cells = " | ".join(f"{c['retained']}/{c['below_threshold']}" for c in counts)
                rows.append(f"| {label} | {cells} |")
    return rows, out


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
        learned_geometry = {
            (name, frames): analyze_task(build_task(name, frames, config.resolution), config.tau)[0]
            for name, frames in config.learned.configurations
        }
        conv_rows, results["convergence"] = (
            convergence(config) if config.convergence.resolutions else ([], {})
        )
    learn_rows, rank_rows, results["learned"] = learned(config, learned_geometry, path)
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
    table3 = "\n".join(
        [
            "| configuration | estimator | coeff. NRMSE | dir. NRMSE retained (median) | "
            "dir. NRMSE below (median) | hits / retained | sCRS none | sCRS validation | sCRS oracle | "
            "final train loss |",
            "|" + "---|" * 10,
            *learn_rows,
        ]
    )
    table4 = "\n".join(
        [
            "| configuration | estimator | confidence | CRC-AUC | geometric AUROC | D |",
            "|" + "---|" * 6,
            *rank_rows,
        ]
    )
    text = (
        f"## Observation geometry (tau = {config.tau})\n\n{table1}\n\n"
        f"## Controlled local inverse problems\n\n{table2}\n\n"
        f"## Learned estimators ({config.learned.num_seeds} seeds x {config.learned.num_members} members, "
        f"{config.learned.num_train}/{config.learned.num_calibration}/{config.learned.num_test})\n\n"
        f"{table3}\n\n### Confidence rankings\n\n{table4}\n"
    )
    if conv_rows:
        table5 = "\n".join(
            [
                "| configuration | interface width | scheme | "
                + " | ".join(f"{n}²" for n in config.convergence.resolutions)
                + " |",
                "|" + "---|" * (3 + len(config.convergence.resolutions)),
                *conv_rows,
            ]
        )
        text += f"\n## Transport partition vs resolution (retained/below)\n\n{table5}\n"
    print(text)
    if path:
        (path / "summary.md").write_text(text)
        (path / "results.json").write_text(json.dumps(results, indent=2, default=str))
    return results


def main(argv):
    del argv
    run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    parallel.reserve_cpu_threads()  # before JAX starts (several CPU devices; see parallel)
    parallel.enable_compilation_cache()  # persistent XLA cache, ~/.cache/posteriorjax/xla (see parallel)
    flags.mark_flags_as_required(["config"])
    app.run(main)
