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
  normalizations over repeated data sets, with the null (Gaussian truths)
  beside it, and L-C2ST (`metrics.lc2st`) on the same data sets.
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

from posteriorjax.metrics import calibration, lc2st, mira, posterior


def default_config() -> dict:
    """Every section at CPU scale (minutes in all on 2 cores)."""
    return {
        "seed": 0,
        "experiments": ("sec5_1", "e4", "e3_4", "e2_2", "e3_1", "e3_2", "e5"),
        "sec5_1": {"num_conditions": 1000, "num_samples": 500},
        "e4": {"num_conditions": 1000, "num_samples": 1000, "half_width": 0.05},
        "e3_4": {"dim": 50, "num_samples": 100, "num_conditions": (200, 500), "repeats": 10,
                 "lc2st": {"repeats": 2, "observations": 10, "num_null": 20, "width": 64, "depth": 2,
                           "steps": 300, "learning_rate": 1e-3}},
        "e2_2": {"dims": (2, 100), "components": 20, "shifts": (0.0, 0.1, 0.5, 1.0, 2.0),
                 "num_conditions": 500, "num_samples": 400, "spread": 3.0},
        "e3_1": {"num_conditions": 200, "num_samples": 500, "angle_deg": 40.0},
        "e3_2": {"dims": (2, 100), "suppressions": ((4.0, 0.8), (2.0, 0.4)), "num_conditions": 500,
                 "num_samples": 400},
        "e5": {"base": {"dim": 10, "components": 20, "spread": 3.0, "num_conditions": 500, "num_samples": 400,
                        "num_regions": 100},
               "shifts": (0.0, 0.5, 2.0),
               "vary": {"dim": (2, 100), "num_regions": (1, 20), "num_samples": (10, 100),
                        "num_conditions": (50,), "distance": ("l1", "chebyshev", "cosine", "minkowski"),
                        "centres": ("normal", "beta")}},
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
                    res,
                    estimator=name,
                    centres=centres,
                    paper=paper.get((name, centres), "~2/3"),
                    tarp_ks=float(calibration.tarp_summary(ecp, alpha)["ks"]),
                )
            )
    return rows


def exp_e3_4(cfg: dict, seed: int) -> list[dict]:
    """MIRA (both normalizations) and L-C2ST (`metrics.lc2st`) on 50-d Laplace truths vs N(0, I).

    Per (L, truth law), `repeats` data sets of L conditions: MIRA's mean score,
    mean bootstrap z and the fraction with z < -2. L-C2ST on the first
    `lc2st["repeats"]` of them: the L (truth, one candidate) pairs calibrate,
    each with a dummy observation x_i ~ N(0, 1) (the posterior does not depend
    on it), and the test runs at `lc2st["observations"]` fresh x_o with
    `num_samples` draws of q each (the paper's 100); columns: the mean
    statistic, mean p-value and the fraction of (data set, x_o) rejected at
    p < 0.05. The x_o of one data set share its classifiers.
    """
    rng = np.random.default_rng(seed)
    d, n, reps = cfg["dim"], cfg["num_samples"], cfg["repeats"]
    lc = dict(cfg["lc2st"])
    lc_reps, num_obs = lc.pop("repeats"), lc.pop("observations")
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
            base = {"L": num, "truth": truth_law}
            paper = "detected" if truth_law == "laplace" else "-"
            for norm in ("candidates", "with_truth"):
                scores, zs = [], []
                for r, (cand, truth) in enumerate(data):
                    res = mira.mira(jr.key(seed + r), cand, truth, normalization=norm, num_bootstrap=300)
                    scores.append(float(res.score))
                    zs.append(float(res.z_bootstrap))
                rows.append(
                    {
                        **base,
                        "test": f"MIRA {norm}",
                        "statistic": float(np.mean(scores)),
                        "z_boot_mean": float(np.mean(zs)),
                        "p_mean": "-",
                        "rejected": float(np.mean(np.asarray(zs) < -2.0)),
                        "paper": paper,
                    }
                )
            stats_, ps = [], []
            for r, (cand, truth) in enumerate(data[:lc_reps]):
                x = rng.normal(size=(num, 1))
                x_o = rng.normal(size=(num_obs, 1))
                theta_o = rng.normal(size=(num_obs, n, d))  # draws of q(. | x_o) = N(0, I)
                res = lc2st.lc2st(
                    jr.key(seed + 1000 + r), truth, x, cand[:, 0], theta_o=theta_o, x_o=x_o, **lc
                )
                stats_.append(np.asarray(res.statistic))
                ps.append(np.asarray(res.p_value))
            if stats_:
                p = np.concatenate(ps)
                rows.append(
                    {
                        **base,
                        "test": "L-C2ST",
                        "statistic": float(np.mean(np.concatenate(stats_))),
                        "z_boot_mean": "-",
                        "p_mean": float(p.mean()),
                        "rejected": float(np.mean(p < 0.05)),
                        "paper": "not detected" if truth_law == "laplace" else "-",
                    }
                )
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


def _swd(a, b, rng, num=64):
    """Sliced W1 between point sets `a (n, d)`, `b (n, d)` (equal sizes) on `num` random directions."""
    v = rng.normal(size=(num, a.shape[1]))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return float(np.mean(np.abs(np.sort(a @ v.T, axis=0) - np.sort(b @ v.T, axis=0))))


def _c2st_1nn(a, b):
    """Leave-one-out 1-nearest-neighbour two-sample accuracy of `a (n, d)` vs `b (m, d)` (0.5: alike)."""
    z = np.concatenate([a, b])
    labels = np.r_[np.zeros(len(a)), np.ones(len(b))]
    d = ((z[:, None] - z[None]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    return float(np.mean(labels[np.argmin(d, axis=1)] == labels))


def exp_e3_1(cfg: dict, seed: int) -> list[dict]:
    """Prior N(0, I_2), x | y ~ N(y, 0.5^2 I); posterior N(0.8 x, 0.2 I). Two-sample scores compare one
    candidate draw per condition with the L true samples (the joint-sample setting)."""
    rng = np.random.default_rng(seed)
    num, n = cfg["num_conditions"], cfg["num_samples"]
    y = rng.normal(size=(num, 2))
    x = y + 0.5 * rng.normal(size=(num, 2))
    mean, sd = 0.8 * x, math.sqrt(0.2)
    angle = math.radians(cfg["angle_deg"])
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    exact = mean[:, None] + sd * rng.normal(size=(num, n, 2))
    t2 = rng.standard_t(2, size=(num, n, 2))
    candidates = {
        "null (exact)": exact,
        "Student-t(2)": mean[:, None] + sd * t2,
        f"rotation {cfg['angle_deg']} deg about the origin": exact @ rot.T,
    }
    paper = {"null (exact)": "all pass", "Student-t(2)": "MIRA, C2ST, W detect; MMD weak"}
    rows = []
    for name, cand in candidates.items():
        res = mira.mira(jr.key(seed), cand.astype(np.float32), y.astype(np.float32), num_bootstrap=300)
        one = cand[:, 0]
        mmd = float(posterior.mmd(jnp.asarray(one), jnp.asarray(y)))
        rows.append(
            _mira_row(
                res,
                perturbation=name,
                paper=paper.get(name, "only MIRA detects"),
                mmd=mmd,
                swd=_swd(one, y, rng),
                c2st_1nn=_c2st_1nn(one, y),
            )
        )
    return rows


def _suppressed(rng, shape, cutoff, alpha):
    """N(0, 1) draws whose density beyond |z| > cutoff is scaled by alpha (per coordinate, by rejection)."""
    out = rng.normal(size=shape)
    redo = (np.abs(out) > cutoff) & (rng.uniform(size=shape) > alpha)
    while redo.any():
        out[redo] = rng.normal(size=int(redo.sum()))
        redo &= (np.abs(out) > cutoff) & (rng.uniform(size=shape) > alpha)
    return out


def exp_e3_2(cfg: dict, seed: int) -> list[dict]:
    """Truths N(theta, I_d), candidates with suppressed tails around theta ~ U(-5, 5)^d."""
    rng = np.random.default_rng(seed)
    num, n = cfg["num_conditions"], cfg["num_samples"]
    rows = []
    for d in cfg["dims"]:
        theta = rng.uniform(-5.0, 5.0, size=(num, d))
        truth = theta + rng.normal(size=(num, d))
        for cutoff, alpha in [(math.inf, 1.0)] + [tuple(v) for v in cfg["suppressions"]]:
            cand = theta[:, None] + _suppressed(rng, (num, n, d), cutoff, alpha)
            cand, t = cand.astype(np.float32), truth.astype(np.float32)
            res = mira.mira(jr.key(seed), cand, t, num_bootstrap=300)
            one, mmd = cand[:, 0], float(posterior.mmd(jnp.asarray(cand[:, 0]), jnp.asarray(truth)))
            label = "none" if alpha == 1.0 else f"cutoff {cutoff}, alpha {alpha}"
            rows.append(
                _mira_row(
                    res,
                    dim=d,
                    suppression=label,
                    mmd=mmd,
                    swd=_swd(one, truth, rng),
                    paper="2/3" if alpha == 1.0 else "MIRA detects; others do not",
                )
            )
    return rows


def exp_e5(cfg: dict, seed: int) -> list[dict]:
    """One factor at a time on the E.2.2 mixture (dimension, regions, N, L, distance, p(c))."""
    rng = np.random.default_rng(seed)
    base = dict(cfg["base"])
    rows = []
    settings = [("baseline", None)] + [(f, v) for f, values in cfg["vary"].items() for v in values]
    for factor, value in settings:
        c = dict(base)
        opts = {}
        if factor in ("dim", "num_regions", "num_samples", "num_conditions"):
            c[factor] = value
        elif factor == "distance":
            opts["distance"] = value
        elif factor == "centres":
            opts["centres"] = value
        means, scales = _gmm(rng, c["dim"], c["components"], c["spread"])
        truth = _gmm_sample(rng, means, scales, (c["num_conditions"],)).astype(np.float32)
        for shift in cfg["shifts"]:
            cand = _gmm_sample(rng, means + shift, scales, (c["num_conditions"], c["num_samples"]))
            res = mira.mira(
                jr.key(seed),
                cand.astype(np.float32),
                truth,
                num_regions=c["num_regions"],
                num_bootstrap=300,
                **opts,
            )
            rows.append(_mira_row(res, factor=factor, value=str(value), shift=shift, paper="ranks kept"))
    return rows


EXPERIMENTS = {
    "sec5_1": exp_sec5_1,
    "e4": exp_e4,
    "e3_4": exp_e3_4,
    "e2_2": exp_e2_2,
    "e3_1": exp_e3_1,
    "e3_2": exp_e3_2,
    "e5": exp_e5,
}


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
