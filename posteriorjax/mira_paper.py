"""The MIRA paper's synthetic experiments at CPU scale (Sharief et al., Sec. 5.1, App. E).

Each `exp_*` function takes its config section (a dict) and a seed and returns
a list of table rows (dicts); `run(config)` runs the sections named in
`config.experiments` and `table(rows)` renders Markdown. The paper's values
are quoted where its text states them (`paper` column); its tables are only
captions in the text we have, so most comparisons are to the stated ordering.

- sec5_1: 2-d toy of Lemos et al. (2023): theta ~ U([-5, 5]^2), log sigma_i ~
  U(-5, -1), candidate N(theta, Sigma); truth from N(theta, Sigma) (correct),
  N(theta, 3 Sigma) (over-confident), N(theta, 0.5 Sigma) (under-confident),
  or a shifted candidate (biased). MIRA and TARP (KS, |ATC|) side by side, and
  the centre-support variants of App. E.5(7) (U[-10, 10], N(-5, 1)).
- e4: y ~ N(0, 1), x ~ N(y, 0.1^2); the exact posterior vs the prior returned
  as the posterior; uniform centres vs c = x* + U(-0.05, 0.05) (data units).
- e3_4: 50-d factorized Laplace (unit variance) truths vs N(0, I_50)
  candidates, N = 100; the power of "candidates" and "with_truth"
  normalizations over repeated data sets, with the null (Gaussian truths) beside it.
- e2_2: 20-component Gaussian mixtures in d dimensions shifted along the
  diagonal by l; MIRA vs the log Bayes factor log p_shifted(y*) - log p_true(y*)
  averaged over the true samples (App. E.2.2; E.5(1) varies d).
"""

from __future__ import annotations

import math
import time

import jax.numpy as jnp
import jax.random as jr
import numpy as np
from scipy import special, stats

from posteriorjax.metrics import calibration, mira


def default_config() -> dict:
    """Every section at CPU scale (minutes in all on 2 cores)."""
    return {
        "seed": 0,
        "experiments": ("sec5_1", "e4", "e3_4", "e2_2"),
        "sec5_1": {"num_conditions": 1000, "num_samples": 500},
        "e4": {"num_conditions": 1000, "num_samples": 1000, "half_width": 0.05},
        "e3_4": {"dim": 50, "num_samples": 100, "num_conditions": (200, 500), "repeats": 10},
        "e2_2": {"dims": (2, 100), "components": 20, "shifts": (0.0, 0.1, 0.5, 1.0, 2.0),
                 "num_conditions": 500, "num_samples": 400, "spread": 3.0},
    }  # fmt: skip


def _mira_row(res, **extra) -> dict:
    return {
        **extra,
        "mira": float(res.score),
        "boot_se": float(res.bootstrap_std),
        "z_boot": float(res.z_bootstrap),
        "expected": float(res.expected_mean),
    }


def _tarp_numbers(key, samples, truth) -> dict:
    ecp, alpha = calibration.tarp(key, samples, truth, num_alpha_bins=50)
    s = calibration.tarp_summary(ecp, alpha)
    return {"tarp_ks": float(s["ks"]), "tarp_abs_atc": abs(float(s["atc"]))}


def exp_sec5_1(cfg: dict, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    num, n = cfg["num_conditions"], cfg["num_samples"]
    theta = rng.uniform(-5.0, 5.0, size=(num, 2))
    sigma = np.exp(rng.uniform(-5.0, -1.0, size=(num, 2)))
    cand = theta[:, None] + sigma[:, None] * rng.normal(size=(num, n, 2))
    z = rng.normal(size=(num, 2))
    bias = np.sign(theta) * stats.norm.isf(1.0 - np.abs(theta) / 5.0) * sigma
    scenarios = {
        "correct": (cand, theta + sigma * z, "~2/3"),
        "over-confident": (cand, theta + np.sqrt(3.0) * sigma * z, "< 2/3"),
        "under-confident": (cand, theta + np.sqrt(0.5) * sigma * z, "> 2/3"),
        "biased": (cand - bias[:, None], theta + sigma * z, "< 2/3"),
    }
    rows = []
    key = jr.key(seed)
    supports = {
        "U(0,1)": ("uniform", None),
        "U(-10,10)": ("uniform", (-10.0, 10.0)),
        "N(-5,1)": ("normal", (-5.0, 1.0)),
    }
    for name, (s, t, paper) in scenarios.items():
        s, t = jnp.asarray(s, jnp.float32), jnp.asarray(t, jnp.float32)
        for label, (centres, params) in supports.items():
            res = mira.mira(key, s, t, centres=centres, centre_params=params)
            quoted = paper if label == "U(0,1)" else "insensitive to p(c)"
            row = _mira_row(res, scenario=name, centres=label, paper=quoted)
            if label == "U(0,1)":
                row.update(_tarp_numbers(jr.fold_in(key, 1), s, t))
            rows.append(row)
    return rows


def exp_e4(cfg: dict, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    num, n = cfg["num_conditions"], cfg["num_samples"]
    y = rng.normal(size=(num, 1))
    x = y + 0.1 * rng.normal(size=(num, 1))
    exact = x[:, None] / 1.01 + math.sqrt(0.01 / 1.01) * rng.normal(size=(num, n, 1))
    prior = rng.normal(size=(num, n, 1))
    rows, key = [], jr.key(seed)
    paper = {("prior", "uniform"): "2/3 (blind)", ("prior", "x-dependent"): "0.54"}
    refs_obs = calibration.observation_references(jr.fold_in(key, 2), jnp.asarray(x), 0.5)
    refs_prior = jnp.asarray(rng.normal(size=(num, 1)))
    for name, s in (("exact", exact), ("prior", prior)):
        for centres, anchors, refs in (("uniform", None, refs_prior), ("x-dependent", x, refs_obs)):
            res = mira.mira(key, s, y, center_anchors=anchors, anchor_half_width=cfg["half_width"])
            ecp, alpha = calibration.tarp(key, s, y, references=refs, normalize=None, num_alpha_bins=50)
            rows.append(
                _mira_row(
                    res, estimator=name, centres=centres, paper=paper.get((name, centres), "~2/3"),
                    tarp_ks=float(calibration.tarp_summary(ecp, alpha)["ks"]),
                )
            )  # fmt: skip
    return rows


def exp_e3_4(cfg: dict, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    d, n, reps = cfg["dim"], cfg["num_samples"], cfg["repeats"]
    rows = []
    for num in cfg["num_conditions"]:
        for truth_law in ("gaussian (null)", "laplace"):
            data = []
            for _ in range(reps):
                cand = rng.normal(size=(num, n, d)).astype(np.float32)
                if truth_law == "laplace":
                    truth = rng.laplace(scale=1.0 / math.sqrt(2.0), size=(num, d))
                else:
                    truth = rng.normal(size=(num, d))
                data.append((cand, truth.astype(np.float32)))
            for norm in ("candidates", "with_truth"):
                scores, zs = [], []
                for r, (cand, truth) in enumerate(data):
                    res = mira.mira(jr.key(seed + r), cand, truth, normalization=norm, num_bootstrap=300)
                    scores.append(float(res.score))
                    zs.append(float(res.z_bootstrap))
                rows.append(
                    {
                        "L": num, "truth": truth_law, "normalization": norm,
                        "mira": float(np.mean(scores)), "z_boot_mean": float(np.mean(zs)),
                        "reject_rate": float(np.mean(np.asarray(zs) < -2.0)),
                        "paper": "detected" if truth_law == "laplace" else "-",
                    }
                )  # fmt: skip
    return rows


def _gmm(rng, d, k, spread):
    means = spread * rng.normal(size=(k, d))
    scales = rng.uniform(0.5, 1.5, size=(k,))
    return means, scales


def _gmm_sample(rng, means, scales, shape):
    idx = rng.integers(0, means.shape[0], size=shape)
    return means[idx] + scales[idx][..., None] * rng.normal(size=shape + (means.shape[1],))


def _gmm_logpdf(y, means, scales):
    d = means.shape[1]
    sq = ((y[:, None, :] - means[None]) ** 2).sum(-1)
    logk = -0.5 * sq / scales**2 - d * np.log(scales) - 0.5 * d * np.log(2 * np.pi)
    return special.logsumexp(logk, axis=1) - np.log(means.shape[0])


def exp_e2_2(cfg: dict, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for d in cfg["dims"]:
        means, scales = _gmm(rng, d, cfg["components"], cfg["spread"])
        truth = _gmm_sample(rng, means, scales, (cfg["num_conditions"],))
        for shift in cfg["shifts"]:
            shifted = means + shift  # translation along the diagonal (1, ..., 1)
            cand = _gmm_sample(rng, shifted, scales, (cfg["num_conditions"], cfg["num_samples"]))
            cand, t = cand.astype(np.float32), truth.astype(np.float32)
            res = mira.mira(jr.key(seed), cand, t, num_bootstrap=300)
            log_bf = float(np.mean(_gmm_logpdf(truth, shifted, scales) - _gmm_logpdf(truth, means, scales)))
            rows.append(_mira_row(res, dim=d, shift=shift, log_bf=log_bf, paper="2/3 -> 1/2 with the shift"))
    return rows


EXPERIMENTS = {"sec5_1": exp_sec5_1, "e4": exp_e4, "e3_4": exp_e3_4, "e2_2": exp_e2_2}


def run(config: dict) -> dict:
    """`{name: {"rows": [...], "wall_s": float}}` for every section in `config["experiments"]`."""
    unknown = sorted(set(config["experiments"]) - set(EXPERIMENTS))
    if unknown:
        raise ValueError(
            f"experiments: unknown section(s) {unknown}; expected a subset of {sorted(EXPERIMENTS)}"
        )
    out = {}
    for name in config["experiments"]:
        t0 = time.perf_counter()
        rows = EXPERIMENTS[name](dict(config[name]), int(config["seed"]))
        out[name] = {"rows": rows, "wall_s": time.perf_counter() - t0}
    return out


def _cell(v):
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 100 else f"{v:.3g}"
    return str(v)


def table(result: dict) -> str:
    """Markdown: one table per section, columns in the rows' order."""
    out = []
    for name, part in result.items():
        rows = part["rows"]
        cols = list(rows[0])
        out.append(f"### {name} ({part['wall_s']:.0f} s)\n")
        out.append("| " + " | ".join(cols) + " |")
        out.append("|" + "---|" * len(cols))
        out.extend("| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |" for r in rows)
        out.append("")
    return "\n".join(out)
