"""Analysis of sweep records: optima, noise levels, calibration curves per row, reading a workdir."""

import json
import math

import numpy as np
import pytest

from posteriorjax.metrics import calibration, mira
from posteriorjax.report import records, tables
from posteriorjax.sweep.store import Record, ResultsFile, hparams_key, row_key

LEVELS = calibration.DEFAULT_LEVELS


def record(task, sampler, case, hparams, metrics, num_samples=6):
    cid = f"case={case};seed=0;" + ";".join(f"{k}={v!r}" for k, v in sorted(hparams.items()))
    return {
        "task": task,
        "sampler": sampler,
        "config_id": cid,
        "index": case,
        "case": case,
        "seed": 0,
        "hparams": dict(hparams),
        "num_samples": num_samples,
        "metrics": metrics,
        "wall_time_s": 0.01,
        "compile_time_s": 1.0,
        "evaluation": "identity",
    }


def hand_records():
    # mean_error: optimum at 10; at 100 one case is NaN (diverged) and the other would be the smallest
    table = {
        0.0: ([3.0, 3.2], [2.0, 2.0]),
        1.0: ([2.0, 2.2], [1.0, 1.0]),
        10.0: ([1.0, 1.2], [1.0, 1.0]),
        100.0: ([None, 0.1], [0.5, None]),
    }
    recs = []
    for g, (me, crps) in table.items():
        for case in range(2):
            recs.append(
                record(
                    "t",
                    "s",
                    case,
                    {"guidance": g, "other": 2.0},
                    {"mean_error": me[case], "crps": crps[case], "mmd": None},
                )
            )
    return recs


def test_optimal_hparams_ignores_nan_rows_and_breaks_ties_low():
    opt = records.optimal_hparams(hand_records(), "guidance", ["mean_error", "crps", "mmd"])
    assert opt["mean_error"] == 10.0  # not 100, whose row is NaN
    assert opt["crps"] == 1.0  # tie between 1 and 10, and 100 is NaN
    assert math.isnan(opt["mmd"])  # no finite row
    # default metrics: the lower-is-better metrics present
    assert set(records.optimal_hparams(hand_records(), "guidance")) == {"mean_error", "crps", "mmd"}


def test_optimal_hparams_rejects_ambiguous_records():
    recs = hand_records()
    with pytest.raises(ValueError, match="one \\(task, sampler\\)"):
        records.optimal_hparams(recs + [dict(recs[0], sampler="other")], "guidance")
    with pytest.raises(ValueError, match="only 'guidance' to vary"):
        records.optimal_hparams(recs + [dict(recs[0], hparams={"guidance": 1.0, "other": 3.0})], "guidance")
    with pytest.raises(ValueError, match="'weight'"):
        records.optimal_hparams(recs, "weight")
    with pytest.raises(ValueError, match="at least one record"):
        records.optimal_hparams([], "guidance")


def test_noise_level_rule():
    config = {"tasks": {"a": {"noise_std": 0.3}, "b@noise=0.1": {"noise_std": 0.2}}}
    assert records.noise_level("a", config) == 0.3
    assert records.noise_level("b@noise=0.1", config) == 0.2  # the config wins over the label
    assert records.noise_level("c@noise=1e-3") == 1e-3
    assert records.noise_level("c") is None
    assert records.base_task("c@noise=1e-3") == "c"
    with pytest.raises(ValueError, match="<task>@noise=<float>"):
        records.noise_level("c@noise=high")


def test_tarp_curve_equals_direct_computation():
    rng = np.random.default_rng(1)
    f = rng.uniform(size=37)
    f[:3] = [0.0, 0.5, 1.0]  # edges: f = alpha_k is not below alpha_k
    ecp, alpha = records.tarp_curve(f, 10)
    direct_alpha = np.linspace(0, 1, 11)
    direct = np.asarray([np.mean(f < a) for a in direct_alpha])
    direct[-1] = 1.0
    np.testing.assert_allclose(alpha, direct_alpha, atol=1e-6)
    np.testing.assert_allclose(ecp, direct, atol=1e-6)
    # per row from records: the same curve; rows with a null credibility are left out
    recs = [record("t", "s", i, {"g": 1.0}, {"tarp_credibility": float(v)}) for i, v in enumerate(f)]
    recs.append(record("t", "s", 0, {"g": 2.0}, {"tarp_credibility": None}))
    curves = records.tarp_curves(recs, 10)
    assert list(curves) == [("s", (("g", 1.0),))]
    np.testing.assert_allclose(curves["s", (("g", 1.0),)][0], direct, atol=1e-6)
    with pytest.raises(ValueError, match="credibilities"):
        records.tarp_curve([0.2, 1.5])


def test_mira_scores_and_band():
    stats = [0.6, 0.7, 0.65, 0.62]
    recs = [record("t", "s", i, {}, {"mira_statistic": v}, num_samples=9) for i, v in enumerate(stats)]
    (row,) = records.mira_scores(recs).values()
    mean, var = mira.expected_moments(8)
    assert row["score"] == pytest.approx(np.mean(stats))
    assert row["expected"] == pytest.approx(mean)
    assert row["high"] - row["expected"] == pytest.approx(2 * math.sqrt(var / 4))
    assert row["expected"] - row["low"] == pytest.approx(2 * math.sqrt(var / 4))


def test_coverage_curves_average_finite_rows():
    a, b = np.linspace(0, 1, len(LEVELS)), np.asarray(LEVELS)
    recs = [
        record("t", "s", 0, {}, {"coverage": a.tolist()}),
        record("t", "s", 1, {}, {"coverage": b.tolist()}),
        record("t", "bad", 0, {}, {"coverage": [None] * len(LEVELS)}),
    ]
    curves = records.coverage_curves(recs)
    assert list(curves) == [("s", ())]
    np.testing.assert_allclose(curves["s", ()], (a + b) / 2)
    with pytest.raises(ValueError, match="levels"):
        records.coverage_curves(recs, LEVELS[:3])


def test_load_records_skips_blank_lines_drops_a_torn_last_line_and_names_a_corrupt_one(tmp_path):
    recs = [record("t", "s", i, {"g": 1.0}, {"mean_error": 0.1 * i}) for i in range(3)]
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(recs[0]) + "\n\n" + "".join(json.dumps(r) + "\n" for r in recs[1:]))
    assert records.load_records(path) == recs
    assert all(isinstance(r, Record) for r in records.load_records(path))
    # a crash mid-write tears the last line: dropped, the file left as it is
    path.write_text(json.dumps(recs[0]) + "\n" + json.dumps(recs[1])[:20])
    assert records.load_records(path) == recs[:1]
    assert path.read_text().endswith(json.dumps(recs[1])[:20])
    # a torn line with records after it is corruption, not a crash: skipped with a warning naming
    # file and line, the records after it kept; the sweep's resume sets the file aside
    path.write_text(json.dumps(recs[0]) + "\n" + json.dumps(recs[1])[:20] + "\n" + json.dumps(recs[2]) + "\n")
    with pytest.warns(UserWarning, match=r"results.jsonl: line 2: not JSON"):
        assert records.load_records(path) == [recs[0], recs[2]]
    with pytest.warns(UserWarning, match=r"line 2: not JSON.*copied aside as results.jsonl.corrupt-0"):
        assert ResultsFile(path, "c").records == [recs[0], recs[2]]
    assert (tmp_path / "results.jsonl.corrupt-0").read_text().count("\n") == 3


def test_record_round_trip_and_schema_errors():
    rec = Record.from_dict(record("t", "s", 1, {"g": 0.5}, {"mean_error": 0.25, "coverage": [0.5, None]}))
    assert Record.from_json(rec.to_json()) == rec
    assert json.loads(rec.to_json()) == record(
        "t", "s", 1, {"g": 0.5}, {"mean_error": 0.25, "coverage": [0.5, None]}
    )
    assert list(json.loads(rec.to_json())) == list(rec)  # the key order of a results.jsonl line
    assert rec["case"] == rec.case == 1 and rec.get("evaluation") == "identity" and dict(rec)["task"] == "t"
    old = {k: v for k, v in record("t", "s", 0, {}, {}).items() if k != "evaluation"}
    assert Record.from_dict(old).evaluation == "identity"  # written before it was recorded
    numpy_id = {**record("t", "s", 0, {}, {}), "config_id": "case=0;seed=0;g=np.float32(2.0)"}
    assert Record.from_dict(numpy_id).config_id == numpy_id["config_id"]  # `sweep.migrate`'s job
    with pytest.raises(ValueError, match=r"missing \['index'\]"):
        Record.from_dict({k: v for k, v in record("t", "s", 0, {}, {}).items() if k != "index"})
    with pytest.raises(ValueError, match=r"unknown \['extra'\]"):
        Record.from_dict({**record("t", "s", 0, {}, {}), "extra": 1})
    with pytest.raises(ValueError, match=r"record.case: expected int, got '0'"):
        Record.from_dict({**record("t", "s", 0, {}, {}), "case": "0"})
    with pytest.raises(ValueError, match=r"record.num_samples: expected int, got True"):
        Record.from_dict({**record("t", "s", 0, {}, {}), "num_samples": True})


def test_one_grouping_key_for_tables_and_figures():
    """A float64 value and its float32 rounding are one row in the tables and in the figures' rows."""
    a = record("t", "s", 0, {"g": 0.1}, {"mean_error": 1.0})
    b = record("t", "s", 1, {"g": float(np.float32(0.1))}, {"mean_error": 3.0})
    c = record("t", "s", 1, {"g": 0.2}, {"mean_error": 5.0})
    assert row_key(a) == row_key(b) != row_key(c)
    assert hparams_key({"g": 0.1, "a": 1}) == (("a", 1.0), ("g", float(np.float32(0.1))))
    rows = tables.aggregate([a, b, c], ["mean_error"])
    assert sorted(r["mean_error"][0] for r in rows) == [2.0, 5.0] and [r["count"] for r in rows] == [2, 1]
    assert [len(v) for v in records.row_groups([a, b, c]).values()] == [2, 1]


def test_read_workdir_treats_missing_files_as_empty(tmp_path):
    assert records.read_workdir(tmp_path) == ([], {})
    rec = record("t", "s", 0, {}, {})
    (tmp_path / "results.jsonl").write_text(json.dumps(rec) + "\n")
    (tmp_path / "config.json").write_text(json.dumps({"seeds": [0]}))
    assert records.read_workdir(str(tmp_path)) == ([rec], {"seeds": [0]})


def test_noise_optima_per_base_task_and_setting():
    """Two noise levels of task `t` (one by config, one by label); `u` has one level and is left out.

    Both hyperparameters vary, so each is an axis per setting of the other.
    """

    def level(label, best):
        # mean_error is smallest at guidance == best, for both settings of `other`
        return [
            record(label, "s", case, {"guidance": g, "other": o}, {"mean_error": abs(g - best) + case + o})
            for case in range(2)
            for g in (0.0, 1.0, 10.0)
            for o in (1.0, 2.0)
        ]

    config = {"tasks": {"t": {"noise_std": 1.0}}}
    sources = [
        ("a", level("t", 1.0) + level("u@noise=0.5", 0.0), config),
        ("b", level("t@noise=0.1", 10.0), {}),
    ]
    table = records.noise_optima(sources)
    assert list(table) == [
        ("t", "s", "guidance", (("other", 1.0),)),
        ("t", "s", "guidance", (("other", 2.0),)),
        *[("t", "s", "other", (("guidance", g),)) for g in (0.0, 1.0, 10.0)],
    ]
    for (_, _, axis, _), optima in table.items():
        best = {1.0: 1.0, 0.1: 10.0} if axis == "guidance" else {1.0: 1.0, 0.1: 1.0}
        assert optima == {sigma: {"mean_error": v} for sigma, v in best.items()}
    with pytest.raises(ValueError, match="same base task 't' and noise level 1.0"):
        records.noise_optima(sources + [("c", level("t@noise=1", 0.0), {})])
