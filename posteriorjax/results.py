"""Sweep records -> tables (CSV, the Markdown main table, calibration over cases) and provenance.

A record is one configuration of a sweep (see `sweep.run_pair`): task,
sampler, case, seed, hyperparameters and a dict of metrics. The main table has
one row per (task, sampler, hyperparameter setting) and, per metric, the mean
± std (ddof 1) over cases and seeds; the best and second-best rows of every
lower-is-better column are marked in bold and italics, the published layout.
Rows with any non-finite sample show their metrics as NaN, never averaged;
the last columns count non-finite members and members outside the physics'
domain (`num_invalid`: their data misfit is NaN, see `sweep.observation_values`).

The calibration table aggregates the per-case statistics every record carries
(`mira_statistic`, `tarp_credibility`) over the cases and seeds of a row into
the MIRA score with its calibrated band and the TARP expected-coverage curve
(`calibration_rows`, `calibration_table`). `write_tables` writes both.
"""

from __future__ import annotations

import csv
import importlib.metadata
import io
import json
import math
import platform
import subprocess
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import jax
import numpy as np

# columns of the main table: (metric key, header); all lower-is-better
TABLE_METRICS: tuple[tuple[str, str], ...] = (
    ("mean_error", "Mean"),
    ("std_error", "Std"),
    ("mmd", "MMD"),
    ("swd", "SWD"),
    ("spectral_error", "Spectral"),
    ("crps", "CRPS"),
    ("rel_l2_mean", "RelL2(mean)"),
)


def _row_key(record: dict) -> tuple:
    return (record["task"], record["sampler"], tuple(sorted(record["hparams"].items())))


def aggregate(records: Sequence[dict], metrics: Sequence[str]) -> list[dict]:
    """Mean, std (ddof 1) and count over cases and seeds per (task, sampler, hparams).

    Also the summed counts of non-finite members (`nonfinite`) and of members
    outside the physics' domain (`invalid`, `Task.valid`), and the mean wall time.
    """
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[_row_key(r)].append(r)
    rows = []
    for (task, sampler, hparams), recs in groups.items():
        row = {"task": task, "sampler": sampler, "hparams": dict(hparams), "count": len(recs)}
        row["nonfinite"] = int(sum(r["metrics"].get("num_nonfinite", 0) or 0 for r in recs))
        row["invalid"] = int(sum(r["metrics"].get("num_invalid", 0) or 0 for r in recs))
        row["time_s"] = float(np.mean([r["wall_time_s"] for r in recs]))
        for m in metrics:
            vals = [r["metrics"].get(m) for r in recs]
            arr = np.asarray([np.nan if v is None else v for v in vals], np.float64)
            if arr.size == 0 or not np.all(np.isfinite(arr)):
                row[m] = (math.nan, math.nan)
            else:
                row[m] = (float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0)
        rows.append(row)
    return rows


def hparam_label(hparams: Mapping[str, float]) -> str:
    """``"a=1, b=0.5"`` (sorted by name), or ``"-"`` for no hyperparameters."""
    return ", ".join(f"{k}={v:g}" for k, v in sorted(hparams.items())) or "-"


def main_table(records: Sequence[dict], metrics=TABLE_METRICS) -> str:
    """The Markdown summary: per task, samplers x metrics, best **bold**, second *italic*."""
    keys = [k for k, _ in metrics]
    rows = aggregate(records, keys)
    out = []
    for task in sorted({r["task"] for r in rows}):
        trows = sorted(
            (r for r in rows if r["task"] == task), key=lambda r: (r["sampler"], hparam_label(r["hparams"]))
        )
        ranks = {}
        for k in keys:
            finite = sorted({r[k][0] for r in trows if math.isfinite(r[k][0])})
            ranks[k] = finite[:2]
        out.append(f"### {task}\n")
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
                + f" | {r['time_s']:.3g} | {r['nonfinite']} | {r['invalid']} |"
            )
        out.append("")
    return "\n".join(out)


def calibration_rows(records: Sequence[dict]) -> list[dict]:
    """Over-case calibration per (task, sampler, hparams), from each record's per-case statistics.

    MIRA: `mira` = mean of the records' `mira_statistic` over the L conditions
    (cases x seeds), with the calibrated mean and variance of one statistic
    from `mira.expected_moments(N - 1)`, `mira_se` = sqrt(var / L) and
    `mira_z` = (mira - mean) / se. TARP: the expected-coverage curve
    `calibration.expected_coverage(f, K)` of the records' `tarp_credibility`
    with K = max(L // 10, 1) bins (`calibration.tarp`'s default) and its
    `tarp_summary` (`tarp_atc`, `tarp_area`, `tarp_ks`). A group with a missing
    or non-finite statistic (a diverged sampler) reports NaN for that metric.
    """
    import jax.numpy as jnp

    from posteriorjax.metrics import calibration, mira

    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[_row_key(r)].append(r)
    rows = []
    for (task, sampler, hparams), recs in groups.items():
        recs = sorted(recs, key=lambda r: (r["case"], r["seed"]))
        n = int(recs[0]["num_samples"])
        row = {"task": task, "sampler": sampler, "hparams": dict(hparams), "num_conditions": len(recs)}
        row["num_samples"] = n
        stats = [r["metrics"].get("mira_statistic") for r in recs]
        mean, var = mira.expected_moments(n - 1)
        se = math.sqrt(var / len(recs))
        score = math.nan
        if all(v is not None and math.isfinite(v) for v in stats):
            score = float(np.mean(np.asarray(stats, np.float64)))
        row.update(mira=score, mira_expected=mean, mira_se=se, mira_z=(score - mean) / se)
        f = [r["metrics"].get("tarp_credibility") for r in recs]
        bins = max(len(recs) // 10, 1)
        row["tarp_bins"] = bins
        if all(v is not None and math.isfinite(v) for v in f):
            ecp, alpha = calibration.expected_coverage(jnp.asarray(f, jnp.float32), bins)
            summary = calibration.tarp_summary(ecp, alpha)
            row["tarp_ecp"] = np.asarray(ecp).tolist()
            row["tarp_alpha"] = np.asarray(alpha).tolist()
            row.update({f"tarp_{k}": float(v) for k, v in summary.items()})
        else:
            row["tarp_ecp"], row["tarp_alpha"] = None, np.linspace(0.0, 1.0, bins + 1).tolist()
            row.update(tarp_atc=math.nan, tarp_area=math.nan, tarp_ks=math.nan)
        rows.append(row)
    return rows


def calibration_table(rows: Sequence[dict]) -> str:
    """Markdown table of `calibration_rows`: MIRA with its calibrated band, TARP ATC and KS, per task.

    The MIRA band is expected mean ± 2 standard errors of a calibrated sampler;
    the column marks scores outside it with a dagger. ATC > 0 is under-confident,
    < 0 over-confident or biased; KS is the largest distance of the ECP curve to the diagonal.
    With fewer than 20 cases the ECP curve has one bin (only its end points), so ATC and KS
    carry no information and are shown as "-".
    """
    out = []
    for task in sorted({r["task"] for r in rows}):
        trows = sorted(
            (r for r in rows if r["task"] == task), key=lambda r: (r["sampler"], hparam_label(r["hparams"]))
        )
        out.append(f"### {task}\n")
        out.append("| sampler | hparams | L | MIRA | calibrated (±2 se) | z | TARP ATC | TARP KS |")
        out.append("|---|---|---|---|---|---|---|---|")
        for r in trows:
            lo, hi = r["mira_expected"] - 2 * r["mira_se"], r["mira_expected"] + 2 * r["mira_se"]
            score = "NaN"
            if math.isfinite(r["mira"]):
                score = f"{r['mira']:.4f}" + ("" if lo <= r["mira"] <= hi else " †")
            z = f"{r['mira_z']:.2f}" if math.isfinite(r["mira_z"]) else "NaN"
            atc = f"{r['tarp_atc']:.3f}" if math.isfinite(r["tarp_atc"]) else "NaN"
            ks = f"{r['tarp_ks']:.3f}" if math.isfinite(r["tarp_ks"]) else "NaN"
            if r.get("tarp_bins", 2) < 2:
                atc = ks = "-"
            out.append(
                f"| {r['sampler']} | {hparam_label(r['hparams'])} | {r['num_conditions']} | {score} | "
                f"{r['mira_expected']:.4f} ± {2 * r['mira_se']:.3f} | {z} | {atc} | {ks} |"
            )
        out.append("")
    return "\n".join(out)


def write_tables(workdir, records: Sequence[dict]) -> str:
    """Write `results.csv`, `calibration.json` and `summary.md` (both tables) to `workdir`; return summary."""
    from posteriorjax.reference import store

    workdir = Path(workdir)
    (workdir / "results.csv").write_text(to_csv(records))
    calib = calibration_rows(records)
    store.atomic_write_json(workdir / "calibration.json", calib)
    summary = main_table(records) + "\n## Calibration over cases\n\n" + calibration_table(calib)
    if (workdir / "references.json").exists():
        summary += "\n" + reference_table(json.loads((workdir / "references.json").read_text()))
    (workdir / "summary.md").write_text(summary + "\n")
    return summary


def reference_table(references: Mapping) -> str:
    """`## Reference posteriors`: the method, its rule and settings per task (from `references.json`)."""
    out = ["## Reference posteriors", "", "| task | method | rule | settings |", "|---|---|---|---|"]
    for task, report in references.items():
        settings = ", ".join(f"{k}={v}" for k, v in report.get("settings", {}).items())
        out.append(f"| {task} | {report['method']} | {report.get('rule', '')} | {settings} |")
    return "\n".join(out) + "\n"


def to_csv(records: Sequence[dict]) -> str:
    """One row per record; scalar metrics as columns (vector metrics JSON-encoded)."""
    hp_keys = sorted({k for r in records for k in r["hparams"]})
    m_keys = sorted({k for r in records for k in r["metrics"]})
    base = ["task", "sampler", "case", "seed", "num_samples", "wall_time_s", "compile_time_s", "evaluation"]
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(base + [f"hp.{k}" for k in hp_keys] + m_keys)
    for r in records:
        metrics = [r["metrics"].get(k) for k in m_keys]
        metrics = [json.dumps(v) if isinstance(v, list) else ("" if v is None else v) for v in metrics]
        writer.writerow([r.get(k) for k in base] + [r["hparams"].get(k) for k in hp_keys] + metrics)
    return buf.getvalue()


def provenance(seeds: dict) -> dict:
    """Package versions, devices, git revision and seeds of a run."""
    versions = {}
    for pkg in ("posteriorjax", "jax", "jaxlib", "equinox", "numpy", "optax", "diffrax", "lineax"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rev = None
    return {
        "versions": versions,
        "python": platform.python_version(),
        "devices": [str(d) for d in jax.devices()],
        "process_count": jax.process_count(),
        "git_revision": rev,
        "seeds": seeds,
    }
