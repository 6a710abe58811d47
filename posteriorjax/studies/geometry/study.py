"""The observation-geometry study: the interface tasks' geometry, controlled local inverse
problems, learned estimators (`python -m experiments.geometry --config=configs/geometry.py[:tiny]`).

The controlled problems live in `controlled`, the learned families in
`posteriorjax.studies.estimators`; `run(config, workdir)` runs the sections of the config and
writes the reports (`summary.md`, `results.json`, `figures/`):

* Table 1 (`config.configurations`, the paper's reference configurations):
  observations p, coordinate-wise blind coefficients, retained / below-threshold
  counts at `config.resolution` and `config.refine_resolution`, exact rank, the
  first below-threshold normalized singular value, repeated nonzero singular
  values (whose basis is the LAPACK SVD's, recorded in `results.json`), the
  finite-perturbation ratio along v_m (`metrics.geometry.perturbation_ratio`,
  normalized by s_1 and absolute, at `config.perturbation_delta`), the central
  finite-difference check; beside the paper's counts. `figures/spectra.png`:
  the normalized spectra with tau.
* Table 2: ridge and TSVD on the controlled problems (`controlled.controlled`,
  coefficients at the task prior's std against the task's noise; the prior drawn once from
  `config.controlled.prior_seed`, the seeds redraw samples and noise), ID and OOD.
* Tables 3 / 4 (`config.learned`): every family on every learning configuration,
  ID and OOD, field NRMSE (the interface field chi rendered from the predicted
  coefficients against the true one; `estimators.field_nrmse`) and coefficient
  NRMSE (OOD: `tasks.interface.shifted_prior`), seed means with macro-averages
  over families and the linear ridge baseline (`estimators.ridge_baseline`, same
  splits); per confidence rule over all (configuration, family, split)
  combinations: pass count (no below-threshold claim at the rule's operating
  point and sCRS > 0), combinations with below-threshold claims, mean sCRS,
  CRC-AUC, geometric AUROC, D and D / D_geometric. Operating points (scale-free,
  calibration split only): validation: NRMSE_i <= delta; spread: member std /
  coordinate std <= delta; conformal: half-width / std <= z delta (z the
  standard normal quantile of the level: the half-width of a Gaussian residual
  of NRMSE delta); geometric: the retained directions; none: all; validation_global
  (`estimators.confidences`): RMSE_i / (RMS of the directions' calibration stds) <= delta. The raw readings
  (``*_raw``: the signals in the coordinates' own units) have no scale-free operating point
  and get ranking scores only.
  `figures/learned_*.png`: seed-mean Y and Z curves against the random reference (Figs. 5, 6).
* The Bayes-linear floor (`floor_table`): per learning configuration, the directional NRMSE
  of the exact posterior mean of the linearized problem, the hits and below-threshold claims
  an estimator at that floor would make, and the AUROC of its conformal widths.
* Tables 5 / 6 and the budget table (`conformal_tables`): the conformal-width rule per
  configuration and family (ID): geometric AUROC and D, D against the geometric reference
  R / (2m), and Z at the paper's budgets Q = 10/17 ... 16/17; `figures/budgets_conformal.png`
  (Fig. 7).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from scipy.stats import norm

from posteriorjax import tasks
from posteriorjax.metrics import geometry as geo
from posteriorjax.reference import registry
from posteriorjax.studies import estimators as est
from posteriorjax.studies.geometry import controlled
from posteriorjax.tasks import interface

# the paper's Table 1 (retained / below at 64², tau = 0.05) and Table 2 (sCRS), to print beside ours
PAPER_TABLE1 = {"Battery": "12 / 5", "Melt-pool": "9 / 8", "Flooding": "12 / 5 (s13 = 0.039)"}
PAPER_TABLE2 = {
    "Battery": "ridge OOD 0.669; val 0, oracle 1.00; TSVD+oracle 0.40",
    "Melt-pool": "ridge OOD 0.140; val 0, oracle 1.00; TSVD+oracle 0.875",
    "Flooding": "ridge OOD 0.054; val 0, oracle 1.00; TSVD+oracle 1.00",
}
# the paper's Table 5 (geometric AUROC of conformal-width rankings, ID) and Table 6 (conformal D and
# D / D_geometric, ID); only the values its text states
PAPER_TABLE5 = {"Battery M2": 0.909, "Battery M8": 0.769, "Melt-pool M12": 0.868, "Flooding M12": 0.589}
PAPER_TABLE6 = {
    "Battery M0": "0.029 (1.00)",
    "Battery M8": "(0.54)",
    "Melt-pool M12": "(0.74)",
    "Flooding M12": "0.063 (0.18)",
}
# the paper's Fig. 7 budgets: Z of conformal-width rankings at Q = 10/17 ... 16/17 (Flooding M12:
# 0.067 at 14/17 against the random 3/17)
BUDGETS = (10, 11, 12, 13, 14, 15, 16)
# rules with no scale-free operating point (`estimators.confidences`: the raw readings): ranked only
RANKING_ONLY = ("validation_raw", "spread_raw", "conformal_raw")
RULES = ("validation", "spread", "conformal", "oracle", "none", "validation_global", *RANKING_ONLY)
SCRS = ("none", "validation", "oracle")
SELECTION = ("crc_auc", "geometric_auroc", "excess_abstention")


def build_task(name: str, frames: int, resolution: int, **overrides):
    return tasks.get(name, resolution=resolution, frames=frames, **overrides)


def unpack(entry) -> tuple[str, str, int, dict]:
    """A configuration entry `(label, task, frames[, ((option, value), ...)])` as
    `(label, task, frames, task options)` (e.g. Battery M0: `num_sensors=0`)."""
    if len(entry) not in (3, 4):
        raise ValueError(f"configuration: expected (label, task, frames[, options]), got {entry!r}")
    label, name, frames, *rest = entry
    return label, name, int(frames), dict(rest[0]) if rest else {}


def analyze_task(task, tau: float):
    fn, c0, cov = interface.observation_map(task)
    fn = jax.jit(fn)
    c0 = jnp.asarray(c0, jnp.float64)
    return geo.analyze(fn, c0, noise_cov=cov, tau=tau), fn, c0, np.asarray(cov, np.float64)


def repeated(g: geo.Geometry, rtol: float = 1e-6) -> list[list[int]]:
    """Index pairs (i, i + 1) of nonzero singular values equal to `rtol` s_1."""
    s = g.singular_values
    return [[i, i + 1] for i in range(s.size - 1) if s[i + 1] > 0 and s[i] - s[i + 1] <= rtol * s[0]]


def _mean_score(scores) -> str:
    vals = [s.value for s in scores if s.defined]
    if not vals:
        return f"undefined ({scores[0].reason})"
    text = f"{np.mean(vals):.3f}"
    return text if len(vals) == len(scores) else f"{text} ({len(scores) - len(vals)} undefined)"


def _mean_std(values) -> str:
    v = np.asarray(values, np.float64)
    return f"{np.mean(v):.3f} ± {np.std(v):.3f}"


def _table(header: list[str], rows: list[str]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *rows])


def _plot_spectra(path: Path, spectra: dict, tau: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.4))
    for label, s in spectra.items():
        s = np.asarray(s)
        ax.semilogy(np.arange(1, s.size + 1), np.where(s > 0, s, np.nan), "o-", ms=3, label=label)
    ax.axhline(tau, color="k", ls="--", lw=1, label=f"tau = {tau}")
    ax.set(xlabel="direction i", ylabel="s_i / s_1 (zeros not drawn)", ylim=(1e-4, 1.5))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


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


def reference(config) -> tuple[str, dict, dict]:
    """Table 1 and the geometries of `config.configurations`."""
    rows, out, geoms = [], {}, {}
    for entry in config.configurations:
        label, name, frames, options = unpack(entry)
        task = build_task(name, frames, config.resolution, **options)
        g, fn, c0, cov = analyze_task(task, config.tau)
        g_coarse, *_ = analyze_task(build_task(name, frames, config.refine_resolution, **options), config.tau)
        fd = geo.finite_difference_check(fn, c0, g.jacobian, steps=tuple(config.fd_steps))
        ratio = geo.perturbation_ratio(fn, c0, g, noise_cov=cov, delta=config.perturbation_delta)
        blind = geo.coordinate_blind(g, cov)
        first_below = g.normalized[g.num_retained] if g.num_below else float("nan")
        rep = repeated(g)
        rows.append(
            f"| {label} ({name} F{frames}) | {task.num_observations} | {int(blind.sum())} | "
            f"{g.num_retained} / {g.num_below} | {PAPER_TABLE1.get(label, '–')} | {g.rank} | "
            f"{first_below:.3f} | {g_coarse.num_retained} / {g_coarse.num_below} | {len(rep)} | "
            f"{ratio['normalized']:.1e} / {ratio['ratio']:.1e} | {min(fd['relative_error']):.1e} |"
        )
        out[label] = {
            "task": name,
            "frames": frames,
            "geometry": g.summary(),
            "coarse": g_coarse.summary(),
            "coordinate_blind": blind.tolist(),
            "perturbation_ratio": ratio,
            "fd": fd,
            "repeated_singular_values": rep,
            "V": g.V.tolist(),
        }
        geoms[label] = (task, g, cov)
    header = [
        "configuration",
        "p",
        "coordinate-wise blind",
        f"retained / below ({config.resolution}²)",
        "paper",
        "exact rank",
        "first below s_i/s_1",
        f"retained / below ({config.refine_resolution}²)",
        "repeated s_i",
        f"ratio along v_m, /s_1 / abs. (delta {config.perturbation_delta:g})",
        "FD rel. error",
    ]
    return _table(header, rows), out, geoms


def controlled_table(config, geoms: dict, path: Path | None) -> tuple[str, dict]:
    cfg = config.controlled
    rows, out = [], {}
    for label, (task, g, cov) in geoms.items():
        per_seed = [
            controlled.controlled(
                g,
                cov,
                np.asarray(task.prior.std, np.float64),
                seed=config.seed + s,
                prior_seed=cfg.prior_seed,
                sizes=(cfg.num_train, cfg.num_val, cfg.num_test),
                latent_dim=cfg.latent_dim,
                residual=cfg.residual_std,
                ridge=cfg.ridge,
                ood_shift=cfg.ood_shift,
                ood_scale=cfg.ood_scale,
                delta=config.delta,
            )
            for s in range(cfg.num_seeds)
        ]
        out[label] = {}
        for name in ("ridge", "tsvd"):
            out[label][name] = {}
            for split in ("id", "ood"):
                runs = [r[name][split] for r in per_seed]
                sels = [r["selection"] for r in runs]
                rows.append(
                    f"| {label} | {name} | {split.upper()} | {_mean_std([r['nrmse'] for r in runs])} | "
                    f"{np.mean([r['hits'] for r in runs]):.1f} / {g.num_retained} | "
                    f"{np.mean([r['claimed_below'] for r in runs]):.1f} / {g.num_below} | "
                    + " | ".join(_mean_score([r[f"scrs_{k}"] for r in runs]) for k in SCRS)
                    + " | "
                    + " | ".join(_mean_score([getattr(s, k) for s in sels]) for k in SELECTION)
                    + " |"
                    + (f" {PAPER_TABLE2.get(label, '')} |" if (name, split) == ("ridge", "id") else " |")
                )
                out[label][name][split] = {
                    "nrmse": [r["nrmse"] for r in runs],
                    "hits": [r["hits"] for r in runs],
                    "claimed_below": [r["claimed_below"] for r in runs],
                    "scrs": {k: [r[f"scrs_{k}"].value for r in runs] for k in SCRS},
                }
    header = [
        "configuration",
        "estimator",
        "split",
        "coeff. NRMSE",
        "hits / retained",
        "val. claims below",
        "sCRS none",
        "sCRS validation",
        "sCRS oracle",
        "CRC-AUC",
        "geometric AUROC",
        "D",
        "paper",
    ]
    return _table(header, rows), out


def _interface_field(c, *, grid, width):
    return interface.indicator(c, grid, width)


def _claimed(rule: str, u: np.ndarray, delta: float, level: float) -> np.ndarray | None:
    """The rule's operating point (see module doc): bool claims `(m,)` from its confidence `u`
    (None for the ranking-only raw rules)."""
    if rule in RANKING_ONLY:
        return None
    if rule in ("validation", "spread", "validation_global"):
        return -u <= delta
    if rule == "conformal":
        return -u / 2 <= norm.ppf(0.5 + level / 2) * delta
    if rule == "oracle":
        return u > 0.5
    return np.ones(u.size, bool)


def conformal_tables(items: list, budgets=BUDGETS) -> tuple[str, str, str, dict]:
    """Tables 5 and 6 and the budget table (Fig. 7) from the conformal rule's ID combinations.

    `items`: `(configuration, family, split, claimed, scrs, Selection, Geometry)` per seed, as
    `learned` collects them. Table 5: seed-mean geometric AUROC and D = (R/m)(AUROC - 1/2) per
    configuration and family. Table 6: retained / below, seed-mean hits, D, the geometric reference
    D_geo = R / (2m) and D / D_geo. Budget table: seed-mean below-threshold abstention Z(j) at claim
    counts `budgets` (of m) against the random reference 1 - j/m. Undefined scores (no retained or
    no below-threshold direction) are left out of the means and counted.
    """
    groups: dict[tuple, list] = {}
    for label, family, split, _, _, sel, g in items:
        if split == "id":
            groups.setdefault((label, family), []).append((sel, g))
    rows5, rows6, rows7, out = [], [], [], {}
    for (label, family), runs in groups.items():
        g = runs[0][1]
        m, r = g.retained.size, g.num_retained
        auc = [s.geometric_auroc.value for s, _ in runs if s.geometric_auroc.defined]
        d = [s.excess_abstention.value for s, _ in runs if s.excess_abstention.defined]
        d_geo = r / (2 * m)
        mean = lambda v: _mean_std(v) if v else "undefined"  # noqa: E731
        rows5.append(
            f"| {label} | {family} | {r} / {g.num_below} | {mean(auc)} | {mean(d)} | "
            f"{PAPER_TABLE5.get(label, '–')} |"
        )
        ratio = f"{np.mean(d) / d_geo:.2f}" if d and d_geo > 0 else "undefined"
        rows6.append(
            f"| {label} | {family} | {r} / {g.num_below} | {np.mean([s.num_hits for s, _ in runs]):.1f} | "
            f"{mean(d)} | {d_geo:.3f} | {ratio} | {PAPER_TABLE6.get(label, '–')} |"
        )
        js = [j for j in budgets if j <= m]
        z = {j: [float(s.abstention[j]) for s, _ in runs if s.abstention is not None] for j in js}
        cells = [f"{np.mean(z[j]):.3f} ({1 - j / m:.3f})" if z[j] else "undefined" for j in js]
        rows7.append(f"| {label} | {family} | " + " | ".join(cells) + " |")
        out[f"{label} / {family}"] = {
            "geometric_auroc": auc,
            "excess_abstention": d,
            "d_geometric": d_geo,
            "hits": [s.num_hits for s, _ in runs],
            "budget_abstention": {str(j): z[j] for j in js},
        }
    t5 = _table(["configuration", "family", "retained / below", "geometric AUROC", "D", "paper AUROC"], rows5)
    t6 = _table(
        [
            "configuration",
            "family",
            "retained / below",
            "hits",
            "D (conformal)",
            "D_geometric",
            "D / D_geometric",
            "paper D (D / D_geometric)",
        ],
        rows6,
    )
    header7 = ["configuration", "family", *[f"Z({j}/m) (random)" for j in budgets]]
    return t5, t6, _table(header7, rows7), out


def _plot_budgets(path: Path, items: list) -> None:
    """Fig. 7: seed-mean below-threshold abstention of conformal-width rankings against coverage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[tuple, list] = {}
    for label, family, split, _, _, sel, _ in items:
        if split == "id" and sel.abstention is not None:
            groups.setdefault((label, family), []).append(sel)
    if not groups:
        return
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for (label, family), sels in groups.items():
        ax.plot(sels[0].coverage, np.mean([s.abstention for s in sels], axis=0), label=f"{label} {family}")
    first = next(iter(groups.values()))[0]
    ax.plot(first.coverage, first.abstention_random, "k--", label="random")
    ax.set(
        xlabel="claim coverage Q = j/m", ylabel="below-threshold abstention Z", title="conformal width, ID"
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def linearization_residual(fn, g: geo.Geometry, c0, noise_cov, *, prior_std, key, num: int = 20) -> float:
    """How far the map is from its linearization over the prior: sqrt(sum ||r||^2 / sum ||dy||^2),
    dy = Sigma^(-1/2) (H(c) - H(c0)), r = dy - Sigma^(-1/2) J (c - c0), over `num` prior draws
    c = c0 + prior_std * N(0, I) (0 for a linear map; near 1 when the Jacobian misses the response)."""
    c0 = np.asarray(c0, np.float64).reshape(-1)
    w = 1.0 / np.sqrt(np.broadcast_to(np.asarray(noise_cov, np.float64), (g.jacobian.shape[0],)))
    cs = c0 + np.asarray(prior_std) * np.asarray(jr.normal(key, (num, c0.size), jnp.float64))
    y0 = np.asarray(fn(jnp.asarray(c0)))
    dy = np.stack([(np.asarray(fn(jnp.asarray(c))) - y0) * w for c in cs])
    lin = ((cs - c0) @ g.jacobian.T) * w
    return float(np.sqrt(np.sum((dy - lin) ** 2) / np.sum(dy**2)))


def floor_table(config) -> tuple[str, dict]:
    """The Bayes-linear floor of every learned configuration (`metrics.geometry.linear_posterior_nrmse`).

    Per configuration: the directional NRMSE of the exact posterior mean of the problem
    linearized at the prior mean (the task's diagonal Gaussian prior, its noise), i.e. what an
    estimator trained on prior draws approaches; from it, the retained directions that can be
    hits (floor <= delta), the below-threshold directions a delta-gated calibration error would
    claim at the floor (floor <= delta), and the geometric AUROC of the conformal widths the
    exact posterior would have (2 z floor_i normalized; times the direction's prior std raw),
    and `linearization_residual` over 20 prior draws: the floor describes the learned problem
    only where that residual is small.
    """
    z = norm.ppf(0.5 + config.learned.level / 2)
    rows, out = [], {}
    for entry in config.learned.configurations:
        label, name, frames, options = unpack(entry)
        task = build_task(name, frames, config.resolution, **options)
        with jax.enable_x64(True):
            g, fn, c0, cov = analyze_task(task, config.tau)
            std = np.asarray(task.prior.std, np.float64).reshape(-1)
            nonlinear = linearization_residual(
                fn,
                g,
                c0,
                cov,
                prior_std=std,
                key=registry.stream(jr.key(config.seed), f"linearization/{label}"),
            )
        prior = std**2
        floor = geo.linear_posterior_nrmse(g, prior, cov)
        w = g.metric_sqrt @ g.V
        prior_std = np.sqrt(np.einsum("ji,j,ji->i", w, prior, w))
        below_ok = np.flatnonzero(~g.retained & (floor <= config.delta))
        auc = geo.auroc(-2 * z * floor, g.retained), geo.auroc(-2 * z * floor * prior_std, g.retained)
        rows.append(
            f"| {label} | {g.num_retained} / {g.num_below} | "
            f"{int(np.sum(g.retained & (floor <= config.delta)))} / {g.num_retained} | "
            f"{', '.join(f'{v:.3f}' for v in floor[~g.retained])} | {len(below_ok)} | "
            f"{auc[0]:.3f} | {auc[1]:.3f} | {nonlinear:.2f} |"
        )
        out[label] = {
            "floor": floor.tolist(),
            "retained": g.retained.tolist(),
            "prior_std": prior_std.tolist(),
            "below_within_delta": below_ok.tolist(),
            "linearization_residual": nonlinear,
        }
    header = [
        "configuration",
        "retained / below",
        f"possible hits (floor <= {config.delta})",
        "floor NRMSE of the below-threshold directions",
        f"below-threshold within {config.delta}",
        "AUROC, floor widths",
        "AUROC, raw floor widths",
        "linearization residual over the prior",
    ]
    return _table(header, rows), out


def learned(config, path: Path | None = None) -> tuple[str, str, str, str, str, tuple, dict]:
    """Tables 3-6 and the budget table (see module doc and `conformal_tables`), the same three
    tables for the raw conformal widths, per-seed results."""
    cfg = config.learned
    train_config = est.train_config(
        num_steps=cfg.num_steps,
        batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
    )
    # keyed by the configuration's label, so a subset (or a split run) gives the same numbers
    base = registry.stream(jr.key(config.seed), "learned")
    rows3, combos, results, invalid = [], {rule: [] for rule in RULES}, {}, []
    for entry in cfg.configurations:
        label, name, frames, options = unpack(entry)
        task = build_task(name, frames, config.resolution, **options)
        shift = {"prior_shift": cfg.ood_shift, "prior_scale": cfg.ood_scale}
        ood = build_task(name, frames, config.resolution, **options, **shift)
        with jax.enable_x64(True):
            g, *_ = analyze_task(task, config.tau)
        out = est.run_configuration(
            registry.stream(base, label),
            task,
            g,
            estimators=tuple(cfg.estimators),
            sizes=(cfg.num_train, cfg.num_calibration, cfg.num_test),
            num_seeds=cfg.num_seeds,
            num_members=cfg.num_members,
            options={k: dict(v) for k, v in cfg.options.items()},
            config=train_config,
            level=cfg.level,
            delta=config.delta,
            ood_task=ood,
            baseline=True,
            field=functools.partial(_interface_field, grid=task.grid, width=task.physics.width),
        )
        ridge = out.pop("baseline")["ridge"]
        results[label] = {"geometry": g.summary(), "ridge": ridge}
        macro = {"id": [], "ood": []}
        for family, res in out.items():
            # an invalid seed (a failed member, a near-constant ensemble) leaves every mean
            problems = [r["problem"] for r in res["runs"]]
            invalid += [f"- {label} / {family}: seed {s}: {p}" for s, p in enumerate(problems) if p]
            runs = [r for r in res["runs"] if not r["problem"]]
            seeds = f"{len(runs)} / {len(res['runs'])}"
            counts = f"{g.num_retained} / {g.num_below}"
            final_loss = res["final_loss"].tolist()
            if not runs:
                rows3.append(f"| {label} | {family} | {counts} | {seeds} |" + " invalid |" * 8)
                results[label][family] = {"problems": problems, "final_loss": final_loss}
                continue
            cells, rec = [], {}
            for split in ("id", "ood"):
                ev = runs if split == "id" else [r["ood"] for r in runs]
                nrmse = [r["nrmse"] for r in ev]
                fld = [r["field_nrmse"] for r in ev]
                val = [r["scrs_validation"].value or 0.0 for r in ev]
                ora = [r["scrs_oracle"].value or 0.0 for r in ev]
                macro[split].append((np.mean(fld), np.mean(nrmse), np.mean(val), np.mean(ora)))
                cells.append(
                    f"{_mean_std(fld)} | {_mean_std(nrmse)} | {np.mean(val):.3f} | {np.mean(ora):.3f}"
                )
                rec[split] = {
                    "nrmse": nrmse,
                    "field_nrmse": fld,
                    "scrs_validation": val,
                    "scrs_oracle": ora,
                    "hits": [r["hits"] for r in ev],
                    # per seed, per direction (the order of V): test NRMSE and each rule's confidence
                    "directional_nrmse": [np.asarray(r["directional_nrmse"]).tolist() for r in ev],
                    "confidence": {
                        rule: [np.asarray(run["confidence"][rule]).tolist() for run in runs]
                        for rule in runs[0]["confidence"]
                    },
                }
                for r, run in zip(ev, runs, strict=True):
                    conf = run["confidence"]
                    for rule in RULES:
                        u = np.asarray(conf[rule] if rule != "none" else np.ones(g.retained.size))
                        claimed = _claimed(rule, u, config.delta, cfg.level)
                        hit = geo.hits(g, r["directional_nrmse"], config.delta)
                        sel = geo.selection(u, g.retained, hit)
                        sc = None if claimed is None else geo.scrs(claimed, g.retained, hit)
                        combos[rule].append((label, family, split, claimed, sc, sel, g))
            rows3.append(f"| {label} | {family} | {counts} | {seeds} | {cells[0]} | {cells[1]} |")
            results[label][family] = rec | {"final_loss": final_loss, "problems": problems}
            if path:
                _plot_learned(
                    path / "figures" / f"learned_{label.replace(' ', '_')}_{family}.png",
                    f"{label} {family}",
                    runs,
                )
        valid_families = len(macro["id"])
        if valid_families:
            m_id, m_ood = np.mean(macro["id"], axis=0), np.mean(macro["ood"], axis=0)
            rows3.append(
                f"| {label} | **macro-average** (valid families) | {g.num_retained} / {g.num_below} | "
                f"{valid_families} / {len(out)} families | "
                + " | ".join(f"{v:.3f}" for v in (*m_id, *m_ood))
                + " |"
            )
        rows3.append(
            f"| {label} | ridge baseline | {g.num_retained} / {g.num_below} | – | {ridge['field_id']:.3f} | "
            f"{ridge['id']:.3f} | – | – | {ridge['field_ood']:.3f} | {ridge['ood']:.3f} | – | – |"
        )
    rows4 = []
    for rule, items in combos.items():
        # one combination = (configuration, family, split): seed means of its claims and scores
        keys = sorted({(a, b, c) for a, b, c, *_ in items})
        if not keys:
            rows4.append(f"| {rule} | 0 / 0 | – | – | " + " | ".join(["no valid runs"] * 4) + " |")
            continue
        passes = overclaims = 0
        scrs_m, crc, auc, d, dr = [], [], [], [], []
        for key in keys:
            sub = [it for it in items if it[:3] == key]
            if rule not in RANKING_ONLY:
                below = np.mean([np.sum(it[3] & ~it[6].retained) for it in sub])
                mean_scrs = np.mean([it[4].value or 0.0 for it in sub])
                overclaims += below > 0
                passes += below == 0 and mean_scrs > 0
                scrs_m.append(mean_scrs)
            for it in sub:
                sel, gg = it[5], it[6]
                if sel.crc_auc.defined:
                    crc.append(sel.crc_auc.value)
                if sel.geometric_auroc.defined:
                    auc.append(sel.geometric_auroc.value)
                if sel.excess_abstention.defined:
                    d.append(sel.excess_abstention.value)
                    dr.append(sel.excess_abstention.value / (gg.num_retained / (2 * gg.retained.size)))
        fixed = (
            f"{passes} / {len(keys)} | {overclaims} | {np.mean(scrs_m):.3f}"
            if rule not in RANKING_ONLY
            else "– (ranking only) | – | –"
        )
        rows4.append(
            f"| {rule} | {fixed} | "
            + " | ".join(_mean_std(v) if v else "undefined" for v in (crc, auc, d, dr))
            + " |"
        )
    t5, t6, t7, results["conformal"] = conformal_tables(combos["conformal"])
    raw = conformal_tables(combos["conformal_raw"])
    results["conformal_raw"] = raw[3]
    if path:
        _plot_budgets(path / "figures" / "budgets_conformal.png", combos["conformal"])
    t3 = _table(
        [
            "configuration",
            "family",
            "retained / below",
            "valid seeds",
            "ID field NRMSE",
            "ID coeff. NRMSE",
            "ID sCRS val.",
            "ID sCRS oracle",
            "OOD field NRMSE",
            "OOD coeff. NRMSE",
            "OOD sCRS val.",
            "OOD sCRS oracle",
        ],
        rows3,
    )
    t4 = _table(
        [
            "rule",
            "passes",
            "combinations with below-threshold claims",
            "mean sCRS",
            "CRC-AUC",
            "geometric AUROC",
            "D",
            "D / D_geometric",
        ],
        rows4,
    )
    results["invalid"] = invalid
    return t3, t4, t5, t6, t7, raw[:3], results


def run(config, workdir: str | None = None) -> dict:
    path = Path(workdir) if workdir else None
    if path:
        (path / "figures").mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(config.to_json(indent=2))
    results = {}
    with jax.enable_x64(True):
        t1, results["reference"], geoms = reference(config)
        t2, results["controlled"] = controlled_table(config, geoms, path)
    if path:
        spectra = {label: g.normalized for label, (_, g, _) in geoms.items()}
        _plot_spectra(path / "figures" / "spectra.png", spectra, config.tau)
    text = (
        f"## Table 1: observation geometry (tau = {config.tau}, m = 17)\n\n{t1}\n\n"
        f"## Table 2: controlled local inverse problems ({config.controlled.num_seeds} seeds, "
        f"{config.controlled.num_train}/{config.controlled.num_val}/{config.controlled.num_test}, "
        f"OOD shift {config.controlled.ood_shift} std, scale x{config.controlled.ood_scale})\n\n{t2}\n"
    )
    if config.learned.configurations:
        t3, t4, t5, t6, t7, (r5, r6, r7), results["learned"] = learned(config, path)
        t_floor, results["floor"] = floor_table(config)
        lc = config.learned
        text += (
            f"\n## Table 3: learned estimators, ID and OOD ({lc.num_seeds} seeds x {lc.num_members} members, "
            f"{lc.num_train}/{lc.num_calibration}/{lc.num_test}, {lc.num_steps} steps)\n\n{t3}\n\n"
            f"## Table 4: direction-selection rules (all configurations x families x splits)\n\n{t4}\n\n"
            f"## Table 5: geometric AUROC of conformal-width rankings (ID)\n\n{t5}\n\n"
            "## Table 6: excess abstention D of conformal-width rankings against the geometric "
            f"reference (ID)\n\n{t6}\n\n"
            f"## Below-threshold abstention at fixed claim budgets (conformal width, ID; Fig. 7)\n\n{t7}\n\n"
            "## Tables 5, 6 and the budgets again, raw conformal widths (not divided by the direction's "
            "calibration std; the other reading of the paper, `estimators.confidences`)\n\n"
            f"{r5}\n\n{r6}\n\n{r7}\n\n"
            "## Bayes-linear floor (the exact posterior mean of the linearized problem; `floor_table`)"
            f"\n\n{t_floor}\n\n"
            "## Invalid seeds (excluded from every mean above; `posteriorjax.training.health`)\n\n"
            + ("\n".join(results["learned"]["invalid"]) or "none")
            + "\n"
        )
    print(text)
    if path:
        (path / "summary.md").write_text(text)
        (path / "results.json").write_text(json.dumps(results, indent=2, default=str))
    return results
