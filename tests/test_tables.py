"""The summary tables read right: numeric order, best configurations, calibration daggers, time, CSV."""

import csv
import io
import math

import pytest

from posteriorjax.report import tables

METRICS = [k for k, _ in tables.TABLE_METRICS]


def record(sampler, case, hparams, values, *, task="t", wall_time_s=0.5, num_samples=16, **metrics):
    """A record whose table metrics are `values` (a number for all, or `{metric: number}`)."""
    table = {m: (values.get(m, 1.0) if isinstance(values, dict) else values) for m in METRICS}
    return {
        "task": task, "sampler": sampler, "case": case, "seed": 0, "hparams": dict(hparams),
        "num_samples": num_samples, "metrics": {**table, "num_samples": num_samples, **metrics},
        "wall_time_s": wall_time_s, "compile_time_s": 1.0, "evaluation": "identity",
    }  # fmt: skip


def _rows(table: str, task: str = "t") -> list[str]:
    """The data rows of one task's main table."""
    block = table.split(f"### {task}\n")[1]
    return [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| sampler")]


def test_hyperparameters_sort_numerically_in_every_table():
    recs = [
        record("dps", c, {"guidance": g, "step": s}, 1.0, mira_statistic=0.6)
        for g in (6400.0, 400.0, 1600.0, 25.0)
        for s in (0.5, 0.05)
        for c in range(2)
    ]
    expected = [f"guidance={g:g}, step={s:g}" for g in (25, 400, 1600, 6400) for s in (0.05, 0.5)]
    main = [line.split(" | ")[1] for line in _rows(tables.main_table(recs))]
    assert main == expected  # as strings: 1600 < 25 < 400 < 6400
    calibration = tables.calibration_table(tables.calibration_rows(recs, num_bootstrap=10))
    assert [line.split(" | ")[1] for line in _rows(calibration)] == expected


def test_best_configuration_per_sampler_is_the_lowest_mean_of_each_column():
    mean, std, mmd = "mean_error", "std_error", "mmd"
    values = {  # guidance -> per-case values; 1600 wins Mean and MMD, 400 wins Std, 6400 is NaN
        400.0: ({mean: 0.5, std: 0.1, mmd: 0.3}, {mean: 0.5, std: 0.1, mmd: 0.3}),
        1600.0: ({mean: 0.2, std: 0.4, mmd: 0.2}, {mean: 0.4, std: 0.4, mmd: 0.2}),
        6400.0: ({mean: 0.01, std: 0.01, mmd: 0.01}, {mean: math.nan, std: 0.01, mmd: 0.01}),
    }
    recs = [record("dps", c, {"guidance": g}, v[c]) for g, v in values.items() for c in range(2)]
    recs += [record("exact", c, {}, 0.05) for c in range(2)]  # one configuration: no line
    recs += [record("esmda", c, {"inflation": i}, 0.7) for i in (2.0, 1.0) for c in range(2)]  # a tie
    rows = [r for r in tables.aggregate(recs, METRICS) if r["sampler"] == "dps"]
    nan_metrics = {m for m in METRICS if not math.isfinite(rows[2][m][0])}
    assert nan_metrics == {mean}  # a NaN case makes the row NaN in that column only
    best = tables.best_configurations(tables.aggregate(recs, METRICS), METRICS)
    assert set(best) == {"dps", "esmda"}
    # 6400 wins Std and MMD; Mean is NaN there and 1600 (0.3) beats 400 (0.5); the other columns
    # tie at 1.0 and go to the first configuration in numeric order
    rest = [m for m in METRICS if m not in (mean, std, mmd)]
    assert best["dps"] == {(("guidance", 400.0),): rest, (("guidance", 1600.0),): [mean],
                           (("guidance", 6400.0),): [std, mmd]}  # fmt: skip
    assert best["esmda"] == {(("inflation", 1.0),): METRICS}
    table = tables.main_table(recs)
    h = dict(tables.TABLE_METRICS)
    assert (
        f"- dps: guidance=400 ({', '.join(h[m] for m in rest)}); guidance=1600 ({h[mean]}); "
        f"guidance=6400 ({h[std]}, {h[mmd]})"
    ) in table
    assert f"- esmda: inflation=1 ({', '.join(h[m] for m in METRICS)})" in table
    assert "- exact:" not in table and "PosteriorBench's metric-specific optimum" in table


@pytest.mark.parametrize("cases", [tables.MIRA_FLAG_MIN_CONDITIONS - 1, tables.MIRA_FLAG_MIN_CONDITIONS])
def test_mira_dagger_only_from_the_minimum_number_of_conditions(cases):
    """A score far outside the band (0.45 against 2/3) is flagged only with enough conditions."""
    recs = [record("collapsed", c, {}, 1.0, mira_statistic=0.45 + 0.001 * (c % 3)) for c in range(cases)]
    rows = tables.calibration_rows(recs, num_bootstrap=50)
    assert abs(rows[0]["mira_z_boot"]) > 10
    enough = cases >= tables.MIRA_FLAG_MIN_CONDITIONS
    assert tables.mira_flagged(rows[0]) == enough
    table = tables.calibration_table(rows)
    assert (f"| collapsed | - | {cases} | {rows[0]['mira']:.4f} † |" in table) == enough
    assert ("MIRA: † only from 20 conditions (L = 19: a bootstrap se of so few" in table) == (not enough)


def test_time_of_a_file_scored_sampler_is_a_dash_not_zero():
    recs = [record("file", c, {}, 1.0, wall_time_s=0.0) for c in range(2)]
    recs += [record("timed", c, {}, 1.0, wall_time_s=0.25) for c in range(2)]
    rows = {line.split(" | ")[0]: line for line in _rows(tables.main_table(recs))}
    assert rows["| file"].endswith("| — | 0 | 0 |") and rows["| timed"].endswith("| 0.25 | 0 | 0 |")
    assert "— where not measured (samples scored from a file)" in tables.main_table(recs)


def test_csv_has_each_column_once():
    recs = [record("dps", c, {"guidance": 400.0}, 1.0, coverage=[0.5, 0.9]) for c in range(2)]
    rows = list(csv.reader(io.StringIO(tables.to_csv(recs))))
    header = rows[0]
    assert len(header) == len(set(header)) and header.count("num_samples") == 1
    first = ["task", "sampler", "case", "seed", "num_samples", "wall_time_s", "compile_time_s", "evaluation"]
    assert header[:9] == [*first, "cases"]
    assert "hp.guidance" in header and "coverage" in header and "mean_error" in header
    assert all(len(r) == len(header) for r in rows) and rows[1][header.index("num_samples")] == "16"
