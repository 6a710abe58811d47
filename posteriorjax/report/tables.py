"""Sweep records -> tables (CSV, the Markdown main table, calibration over cases) and provenance.

A record is one configuration of a sweep (see `sweep.run_pair`): task,
sampler, case, seed, hyperparameters and a dict of metrics. The main table has
one row per (task, sampler, hyperparameter setting) and, per metric, the mean
± std (ddof 1) over cases and seeds; the best and second-best rows of every
lower-is-better column are marked in bold and italics, the published layout.
Rows with any non-finite sample show their metrics as NaN, never averaged;
the last columns count non-finite members and members outside the physics'
domain (`num_invalid`: their data misfit is NaN, see `sweep.statistics.observation_values`).

The calibration table aggregates the per-case statistics every record carries
(`mira_statistic`, `tarp_credibility`) over the cases and seeds of a row into
the MIRA score with its calibrated band and the TARP expected-coverage curve
(`calibration_rows`, `calibration_table`). `write_tables` writes both under a header
(`summary_header`: study, config hash, date, machine, cases x samples, each task's
reference and its settings), with the trained networks' own scores (`networks.network_table`)
after the posterior table; every table has a one-line legend.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import files
from posteriorjax.metrics import calibration, mira, registry
from posteriorjax.report import split
from posteriorjax.report.networks import network_table
from posteriorjax.report.provenance import summary_header
from posteriorjax.sweep.store import hparams_key, row_key

# columns of the main table: (metric key, header); all lower-is-better (`metrics.registry.TABLE`)
TABLE_METRICS: tuple[tuple[str, str], ...] = tuple((k, registry.HEADERS[k]) for k in registry.TABLE)


def aggregate(records: Sequence[dict], metrics: Sequence[str]) -> list[dict]:
    """Mean, std (ddof 1) and count over cases and seeds per (task, sampler, hparams).

    Also the summed counts of non-finite members (`nonfinite`) and of members
    outside the physics' domain (`invalid`, `Task.valid`), and the mean wall time.
    """
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[row_key(r)].append(r)
    rows = []
    for (task, sampler, hparams), recs in groups.items():
        row = {"task": task, "sampler": sampler, "hparams": dict(hparams), "count": len(recs)}
        row["nonfinite"] = int(sum(r["metrics"].get("num_nonfinite", 0) or 0 for r in recs))
        row["invalid"] = int(sum(r["metrics"].get("num_invalid", 0) or 0 for r in recs))
        row["time_s"] = _measured_time(recs)
        for m in metrics:
            vals = [r["metrics"].get(m) for r in recs]
            arr = np.asarray([np.nan if v is None else v for v in vals], np.float64)
            if arr.size == 0 or not np.all(np.isfinite(arr)):
                row[m] = (math.nan, math.nan)
            else:
                row[m] = (float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0)
        rows.append(row)
    return rows


def _measured_time(records: Sequence[dict]) -> float:
    """Mean wall time (s) of the records that measured one; NaN when none did.

    Samples scored from a file (`exchange.evaluate`) record 0 unless the caller gave the
    sampler's time (`--wall_time_s`): 0 means "not measured", never "instantaneous".
    """
    times = [r["wall_time_s"] for r in records if r["wall_time_s"] > 0]
    return float(np.mean(times)) if times else math.nan


def row_order(row: Mapping) -> tuple:
    """Sort key of a table row: sampler, then hyperparameters by name and numeric value."""
    return (row["sampler"], hparams_key(row["hparams"]))


def hparam_label(hparams: Mapping[str, float]) -> str:
    """``"a=1, b=0.5"`` (sorted by name), or ``"-"`` for no hyperparameters."""
    return ", ".join(f"{k}={v:g}" for k, v in sorted(hparams.items())) or "-"


def main_table(records: Sequence[dict], metrics=TABLE_METRICS) -> str:
    """The Markdown summary: per task, samplers x metrics, best **bold**, second *italic*.

    Rows in sampler order, hyperparameters in numeric order (`row_order`); after each task's
    table, a sampler's best configuration per metric (`best_configuration_lines`).
    """
    keys = [k for k, _ in metrics]
    rows = aggregate(records, keys)
    out = []
    for task in sorted({r["task"] for r in rows}):
        trows = sorted((r for r in rows if r["task"] == task), key=row_order)
        ranks = {}
        for k in keys:
            finite = sorted({r[k][0] for r in trows if math.isfinite(r[k][0])})
            ranks[k] = finite[:2]
        out.append(f"### {task}\n")
        out.append(_main_legend(records, task) + "\n")
        out.append(
            "| sampler | hparams | "
            + " | ".join(h for _, h in metrics)
            + " | time/config (s) | non-finite | invalid |"
        )
        out.append("|---|---|" + "---|" * len(metrics) + "---|---|---|")
        for r in trows:
            cells = []
            for k in keys:
                mean, std = r[k]
                if not math.isfinite(mean):
                    cells.append("NaN")
                    continue
                text = f"{mean:.4g} ± {std:.2g}"
                if ranks[k] and mean == ranks[k][0]:
                    text = f"**{text}**"
                elif len(ranks[k]) > 1 and mean == ranks[k][1]:
                    text = f"*{text}*"
                cells.append(text)
            out.append(
                f"| {r['sampler']} | {hparam_label(r['hparams'])} | "
                + " | ".join(cells)
                + f" | {_fmt(r['time_s'], '.3g', missing='—')} | {r['nonfinite']} | {r['invalid']} |"
            )
        out.append("")
        out.extend(best_configuration_lines(trows, metrics))
    return "\n".join(out)


def split_table(records: Sequence[dict], metrics=TABLE_METRICS) -> str:
    """Markdown error split (`report.split`): per learned sampler with an oracle twin, each metric
    as learned = the sampler's own (the twin's) + the trained prior's; "" if there is no twin."""
    rows = split.split_rows(aggregate(records, [k for k, _ in metrics]), [k for k, _ in metrics])
    if not rows:
        return ""
    out = [
        "Each cell: learned = the sampler's own error (its oracle twin, run with the exact prior "
        "score) + the trained prior's (the difference); each side at its best configuration for "
        "that metric.\n",
        "| task | sampler | " + " | ".join(h for _, h in metrics) + " |",
        "|---|---|" + "---|" * len(metrics),
    ]
    for row in rows:
        cells = []
        for k, _ in metrics:
            v = row["metrics"][k]
            finite = math.isfinite(v["learned"]) and math.isfinite(v["sampler"])
            cells.append(f"{v['learned']:.4g} = {v['sampler']:.4g} + {v['prior']:.4g}" if finite else "NaN")
        out.append(f"| {row['task']} | {row['sampler']} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def best_configurations(rows: Sequence[dict], metrics: Sequence[str]) -> dict[str, dict[tuple, list[str]]]:
    """`{sampler: {hparams_key: [metrics]}}`: per sampler with at least two configurations, the
    configuration of lowest mean over cases and seeds of every metric (`aggregate` rows of one task).

    The rule is PosteriorBench's metric-specific optimum, lambda*_m = argmin_lambda m (Sec. 4.6:
    the best guidance weight differs between metrics, so there is one per metric), applied
    within each sampler as the main table's bold marks are applied across samplers: every
    metric is lower-is-better, a NaN row is never best, ties go to the first configuration in
    numeric order. A sampler whose rows are all NaN in a metric has no best for it.
    """
    by_sampler: dict[str, list[dict]] = defaultdict(list)
    for r in sorted(rows, key=row_order):
        by_sampler[r["sampler"]].append(r)
    out = {}
    for sampler, srows in by_sampler.items():
        if len(srows) < 2:
            continue
        best: dict[tuple, list[str]] = {}
        for m in metrics:
            finite = [r for r in srows if math.isfinite(r[m][0])]
            if finite:
                winner = min(finite, key=lambda r: r[m][0])  # min keeps the first of equal means
                best.setdefault(hparams_key(winner["hparams"]), []).append(m)
        out[sampler] = best
    return out


def best_configuration_lines(trows: Sequence[dict], metrics=TABLE_METRICS) -> list[str]:
    """The main table's "best configuration" lines: one per sampler with several configurations."""
    headers = dict(metrics)
    best = best_configurations(trows, [k for k, _ in metrics])
    if not best:
        return []
    out = [
        "Best configuration per sampler: the lowest mean over cases of each column (PosteriorBench's "
        "metric-specific optimum, argmin over the sampler's grid; a NaN row is never best), the "
        "columns it wins in brackets.",
        "",
    ]
    for sampler, winners in best.items():
        text = "; ".join(
            f"{hparam_label(dict(key))} ({', '.join(headers[m] for m in ms)})"
            for key, ms in sorted(winners.items())
        )
        out.append(f"- {sampler}: {text or 'no finite row'}")
    out.append("")
    return out


def _cases(record: Mapping) -> str:
    """Which cases a record was scored on (`Record.cases`; "study" where the line has no key)."""
    return record.get("cases", "study")


def _main_legend(records: Sequence[dict], task: str) -> str:
    recs = [r for r in records if r["task"] == task]
    cases, seeds = len({r["case"] for r in recs}), len({r["seed"] for r in recs})
    evaluation = sorted({r.get("evaluation", "identity") for r in recs})
    scored = ", ".join(evaluation)
    scored = "Fields as sampled" if scored == "identity" else f"Fields scored after `{scored}`"
    given = sorted({(r["sampler"], _cases(r)) for r in recs if _cases(r) != "study"})
    if given:  # samples scored from files on cases other than the study's
        scored += ". Scored on other cases than the study's: " + ", ".join(f"{s} on `{c}`" for s, c in given)
    return (
        f"Lower is better in every column; mean ± std over {cases} case(s) x {seeds} seed(s), best "
        "**bold**, second *italic*. Against the reference posterior: Mean, Std = relative L2 error of "
        "the ensemble mean / pointwise std; MMD, SWD = distances of the ensembles (field units); "
        "Spectral = geometric-mean relative error of the radial power spectrum. Against the truth: CRPS "
        f"(field units), RelL2(mean). {scored}; non-finite / invalid = members counted over the row; "
        "time/config: mean wall time of a configuration, — where not measured (samples scored from a file)."
    )


CALIBRATION_BOOTSTRAP = 1000


def calibration_rows(records: Sequence[dict], *, num_bootstrap: int = CALIBRATION_BOOTSTRAP) -> list[dict]:
    """Over-case calibration per (task, sampler, hparams), from each record's per-case statistics.

    MIRA: `mira` = mean of the records' `mira_statistic` over the L conditions
    (cases x seeds), with the calibrated mean and variance of one statistic
    from `mira.expected_moments(N - 1)`; `mira_se_boot` = std of the score
    over `num_bootstrap` resamples of the L conditions with replacement (the
    MIRA paper's uncertainty, Sec. 3.4) and `mira_se` = sqrt(var / L) (one
    region per condition: conservative); `mira_z_boot`, `mira_z` the z of
    each. TARP: the expected-coverage curve `calibration.expected_coverage(f,
    K)` of the records' `tarp_credibility` with K = max(L // 10, 1) bins
    (`calibration.tarp`'s default), its `tarp_summary` (`tarp_ks` primary,
    `tarp_atc`, `tarp_area`), the 2.5 / 97.5 % bootstrap percentiles of the
    curve (`tarp_ecp_lo`, `tarp_ecp_hi`) and of KS (`tarp_ks_lo`, `tarp_ks_hi`),
    and `tarp_ks_p`: the p-value of the KS test of the randomized
    credibilities (N f + V) / (N + 1), V ~ U(0, 1), against U(0, 1) (exact
    under calibration, no binning). Bootstraps draw from a fixed generator
    (seed 0), so the rows are reproducible. A group with a missing or
    non-finite statistic (a diverged sampler) reports NaN for that metric.
    Split conformal over held-out cases (records with `conformal_inside`,
    `metrics.suite`): the first half of the row's records (by case, seed)
    calibrates, the second half tests; `conformal_scale` is the smallest q of
    `metrics.registry.CONFORMAL_SCALES` whose pooled calibration coverage reaches the
    level (a grid, so conservative by at most one step), `conformal_coverage`
    and `conformal_width` its pooled coverage and mean width on the test half,
    and `conformal_raw_coverage` the test coverage of the unscaled interval.
    """
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[row_key(r)].append(r)
    rows = []
    for (task, sampler, hparams), recs in groups.items():
        recs = sorted(recs, key=lambda r: (r["case"], r["seed"]))
        n, num = int(recs[0]["num_samples"]), len(recs)
        rng = np.random.default_rng(0)
        idx = rng.integers(0, num, size=(num_bootstrap, num))
        row = {"task": task, "sampler": sampler, "hparams": dict(hparams), "num_conditions": num}
        row["num_samples"] = n
        row.update(_mira_columns([r["metrics"].get("mira_statistic") for r in recs], n, idx))
        row.update(_tarp_columns([r["metrics"].get("tarp_credibility") for r in recs], n, idx, rng))
        row.update(_split_conformal(recs))
        rows.append(row)
    return rows


def _finite(values: Sequence) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def _mira_columns(stats: Sequence, n: int, idx: np.ndarray) -> dict:
    """The MIRA score of L per-condition statistics, its expected value and both standard errors."""
    mean, var = mira.expected_moments(n - 1)
    se = math.sqrt(var / len(stats))
    score = boot = math.nan
    if _finite(stats):
        values = np.asarray(stats, np.float64)
        score, boot = float(values.mean()), float(values[idx].mean(axis=1).std())
    return dict(
        mira=score,
        mira_expected=mean,
        mira_se=se,
        mira_z=(score - mean) / se,
        mira_se_boot=boot,
        mira_z_boot=(score - mean) / boot if boot > 0 else math.nan,
    )


def _tarp_columns(f: Sequence, n: int, idx: np.ndarray, rng: np.random.Generator) -> dict:
    """TARP's expected-coverage curve of L credibilities, its summary, bootstrap band and KS test."""
    num, bins = len(f), max(len(f) // 10, 1)
    if not _finite(f):
        return dict(
            tarp_bins=bins,
            tarp_ecp=None,
            tarp_alpha=np.linspace(0.0, 1.0, bins + 1).tolist(),
            tarp_ecp_lo=None,
            tarp_ecp_hi=None,
            tarp_atc=math.nan,
            tarp_area=math.nan,
            tarp_ks=math.nan,
            tarp_ks_lo=math.nan,
            tarp_ks_hi=math.nan,
            tarp_ks_p=math.nan,
        )
    f = np.asarray(f, np.float64)
    ecp, alpha = calibration.expected_coverage(jnp.asarray(f, jnp.float32), bins)
    cols = {"tarp_bins": bins, "tarp_ecp": np.asarray(ecp).tolist(), "tarp_alpha": np.asarray(alpha).tolist()}
    cols.update({f"tarp_{k}": float(v) for k, v in calibration.tarp_summary(ecp, alpha).items()})
    boot_ecp = _bootstrap_ecp(f[idx], bins)
    lo, hi = calibration.tarp_band(boot_ecp)
    cols["tarp_ecp_lo"], cols["tarp_ecp_hi"] = np.asarray(lo).tolist(), np.asarray(hi).tolist()
    ks = np.asarray(calibration.tarp_summary(boot_ecp, alpha)["ks"])
    cols["tarp_ks_lo"], cols["tarp_ks_hi"] = (float(v) for v in np.percentile(ks, [2.5, 97.5]))
    u = (np.round(f * n) + rng.uniform(size=num)) / (n + 1)
    cols["tarp_ks_p"] = float(calibration.ks_uniform(jnp.asarray(u, jnp.float32))[1])
    return cols


def _split_conformal(recs: Sequence[dict]) -> dict:
    """`calibration_rows`' split-conformal entries of one row (empty without per-case grids)."""

    inside = [r["metrics"].get("conformal_inside") for r in recs]
    widths = [r["metrics"].get("conformal_widths") for r in recs]
    if len(recs) < 2 or any(v is None for v in inside + widths):
        return {}
    inside, widths = np.asarray(inside, np.float64), np.asarray(widths, np.float64)
    half = len(recs) // 2
    nan = {"conformal_scale": math.nan, "conformal_coverage": math.nan, "conformal_width": math.nan}
    raw = float(inside[half:, registry.CONFORMAL_SCALES.index(1.0)].mean())
    out = {"conformal_level": registry.CONFORMAL_LEVEL, "conformal_raw_coverage": raw, **nan}
    if not (np.all(np.isfinite(inside)) and np.all(np.isfinite(widths))):
        out["conformal_raw_coverage"] = math.nan
        return out
    reach = np.nonzero(inside[:half].mean(axis=0) >= registry.CONFORMAL_LEVEL)[0]
    if reach.size:
        j = int(reach[0])
        out["conformal_scale"] = registry.CONFORMAL_SCALES[j]
        out["conformal_coverage"] = float(inside[half:, j].mean())
        out["conformal_width"] = float(widths[half:, j].mean())
    return out


def _bootstrap_ecp(f, bins: int):
    """`calibration.expected_coverage` of every row of `f (B, L)` -> `(B, bins + 1)`."""
    return jax.vmap(lambda v: calibration.expected_coverage(v, bins)[0])(jnp.asarray(f, jnp.float32))


def _fmt(v, spec=".3f", missing="NaN"):
    return format(v, spec) if math.isfinite(v) else missing


def calibration_table(rows: Sequence[dict]) -> str:
    """Markdown table of `calibration_rows`: MIRA with its bootstrap band, TARP KS with its band, per task.

    The MIRA band is the calibrated mean ± 2 bootstrap standard errors of the
    row's score; the column marks scores outside it with a dagger (`mira_flagged`: only from
    `MIRA_FLAG_MIN_CONDITIONS` conditions, the legend says why otherwise); z (boot) and
    z (1-region) use the bootstrap and the analytic single-region se. TARP KS is
    the largest distance of the ECP curve to the diagonal with its 95 %
    bootstrap interval and the KS-test p-value (`calibration_rows`); the sign
    of ATC carries no confidence reading, so the table shows |ATC|. With fewer
    than 20 cases the ECP curve has one bin (only its end points), so the
    binned numbers carry no information and are shown as "-" (the p-value
    does not bin).
    """
    out = []
    for task in sorted({r["task"] for r in rows}):
        trows = sorted((r for r in rows if r["task"] == task), key=row_order)
        out.append(f"### {task}\n")
        out.append(_calibration_legend(trows) + "\n")
        out.append(
            "| sampler | hparams | L | MIRA | calibrated (±2 boot se) | z (boot) | z (1-region) "
            "| TARP KS [95%] | KS p | \\|ATC\\| |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in trows:
            boot = r.get("mira_se_boot", math.nan)
            score = "NaN"
            if math.isfinite(r["mira"]):
                score = f"{r['mira']:.4f}" + (" †" if mira_flagged(r) else "")
            ks = f"{_fmt(r['tarp_ks'])} [{_fmt(r['tarp_ks_lo'])}, {_fmt(r['tarp_ks_hi'])}]"
            atc = _fmt(abs(r["tarp_atc"]))
            if r.get("tarp_bins", 2) < 2:
                atc = ks = "-"
            out.append(
                f"| {r['sampler']} | {hparam_label(r['hparams'])} | {r['num_conditions']} | {score} | "
                f"{r['mira_expected']:.4f} ± {_fmt(2 * boot, '.4f')} | {_fmt(r['mira_z_boot'], '.2f')} | "
                f"{_fmt(r['mira_z'], '.2f')} | {ks} | {_fmt(r['tarp_ks_p'], '.3g')} | {atc} |"
            )
        out.append("")
    return "\n".join(out)


# a MIRA score shift the table should resolve: about the under-confident shift of the MIRA
# paper's Sec. 5.1 toy (our figures for it: docs/studies/mira-paper.md)
MIRA_RESOLVED_SHIFT = 0.02
TARP_MIN_CONDITIONS = 20  # 2 ECP bins (K = L // 10): fewer leave only the curve's end points
# the fewest conditions for a MIRA dagger: a bootstrap se of L values is itself uncertain by about
# 1 / sqrt(2 (L - 1)) (16 % at 20, 50 % at 3, where a z of 8 is common for a calibrated sampler);
# the same minimum as TARP's curve (docs/workdir.md states it for the reports)
MIRA_FLAG_MIN_CONDITIONS = TARP_MIN_CONDITIONS


def mira_flagged(row: Mapping) -> bool:
    """The calibration table's dagger: `row`'s MIRA score lies outside the calibrated mean ± 2
    bootstrap se, over at least `MIRA_FLAG_MIN_CONDITIONS` conditions (`calibration_rows` row)."""
    boot, score = row.get("mira_se_boot", math.nan), row["mira"]
    if row["num_conditions"] < MIRA_FLAG_MIN_CONDITIONS or not (math.isfinite(score) and math.isfinite(boot)):
        return False
    return not row["mira_expected"] - 2 * boot <= score <= row["mira_expected"] + 2 * boot


def mira_conditions_needed(num_samples: int, shift: float = MIRA_RESOLVED_SHIFT) -> int:
    """Conditions L for which the calibrated band (±2 se) is as narrow as `shift`: (2 sd / shift)²."""
    _, var = mira.expected_moments(num_samples - 1)
    return math.ceil((2.0 * math.sqrt(var) / shift) ** 2)


def _calibration_legend(trows: Sequence[dict]) -> str:
    text = (
        "L = conditions (cases x seeds). MIRA: the score, and a calibrated sampler's mean ± 2 bootstrap "
        f"standard errors († outside, from L = {MIRA_FLAG_MIN_CONDITIONS}); z = (score - mean) / se, with "
        "the bootstrap se and with the single-region one. TARP: KS (largest distance of the "
        "expected-coverage curve to the diagonal; "
        "0 is calibrated) with its 95 % bootstrap interval and a KS-test p-value; |ATC| (its sign is no "
        "reading of over- or under-confidence)."
    )
    little_l = min(r["num_conditions"] for r in trows)
    n = min(r["num_samples"] for r in trows)
    needed = mira_conditions_needed(n)
    notes = []
    if little_l < needed:
        band = 2 * max(r["mira_se"] for r in trows)  # the single-region se: a conservative band
        notes.append(
            f"MIRA: with L = {little_l} the band is ±{band:.3f}, too wide to resolve a shift of "
            f"{MIRA_RESOLVED_SHIFT} (about {needed} conditions at N = {n} would)"
        )
    if little_l < MIRA_FLAG_MIN_CONDITIONS:
        notes.append(
            f"MIRA: † only from {MIRA_FLAG_MIN_CONDITIONS} conditions (L = {little_l}: a bootstrap se of so "
            "few is too uncertain to flag a row)"
        )
    if little_l < TARP_MIN_CONDITIONS:
        notes.append(f"TARP: '-' = fewer than {TARP_MIN_CONDITIONS} conditions (L = {little_l}), one ECP bin")
    if notes:
        text += " **Too few cases**: " + "; ".join(notes) + "."
    return text


def write_tables(workdir, records: Sequence[dict]) -> str:
    """Write `results.csv`, `calibration.json` and `summary.md` (both tables) to `workdir`; return summary."""

    workdir = Path(workdir)
    (workdir / "results.csv").write_text(to_csv(records))
    calib = calibration_rows(records)
    files.atomic_write_json(workdir / "calibration.json", calib)
    summary = (
        summary_header(workdir, records)
        + "\n## Posterior matching\n\n"
        + main_table(records)
        + network_table(records)  # `## Networks`: their own scores, when records name some
        + "\n## Calibration over cases\n\n"
        + calibration_table(calib)
    )
    errors = split_table(records)
    if errors:
        summary += "\n## Error split: sampler and prior\n\n" + errors
    if (workdir / "references.json").exists():
        summary += "\n" + reference_table(json.loads((workdir / "references.json").read_text()))
    (workdir / "summary.md").write_text(summary + "\n")
    return summary


def reference_table(references: Mapping) -> str:
    """`## Reference posteriors`: the method, its rule and settings per task (from `references.json`)."""
    out = ["## Reference posteriors", "", "| task | method | rule | settings |", "|---|---|---|---|"]
    for task, report in references.items():
        settings = ", ".join(f"{k}={v}" for k, v in report.get("settings", {}).items())
        out.append(f"| {task} | {report.get('method', 'none')} | {report.get('rule', '')} | {settings} |")
    return "\n".join(out) + "\n"


def to_csv(records: Sequence[dict]) -> str:
    """One row per record; scalar metrics as columns (vector metrics JSON-encoded).

    Every column name appears once: a metric named as a record field (`num_samples`, the
    ensemble size the suite also reports) is the record's column.
    """
    hp_keys = sorted({k for r in records for k in r["hparams"]})
    base = ["task", "sampler", "case", "seed", "num_samples", "wall_time_s", "compile_time_s", "evaluation"]
    m_keys = sorted({k for r in records for k in r["metrics"]} - {*base, "cases"})
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(base + ["cases"] + [f"hp.{k}" for k in hp_keys] + m_keys)
    for r in records:
        metrics = [r["metrics"].get(k) for k in m_keys]
        metrics = [json.dumps(v) if isinstance(v, list) else ("" if v is None else v) for v in metrics]
        row = [r.get(k) for k in base] + [_cases(r)] + [r["hparams"].get(k) for k in hp_keys]
        writer.writerow(row + metrics)
    return buf.getvalue()
