"""The calibration stage (`sweep.calibrate`): validation cases disjoint from the test cases, the
selection rule, and a tiny sweep that calibrates a hyperparameter before its test pair."""

import json
import types

import ml_collections
import numpy as np
import pytest

from posteriorjax import sweep, tasks
from posteriorjax.reference import heldout
from posteriorjax.reference import store as artifact_store
from posteriorjax.report import stage
from posteriorjax.sweep import calibrate
from posteriorjax.sweep.settings import settings


def _config(calibrate_section, **fields):
    c = ml_collections.ConfigDict()
    c.seed, c.seeds, c.num_cases, c.num_samples = 0, (0,), 2, 4
    c.chunk_size, c.batch_size, c.overwrite = 8, 4, False
    c.tasks = {"poisson_fixed": {"resolution": 16}}
    c.reference = sweep.reference_config("exact", num_samples=16)
    c.references = {}
    c.samplers = {
        "esmda": {"options": {"alphas": (2.0, 2.0), "ensemble_size": 8}, "calibrate": calibrate_section}
    }
    c.save_samples, c.figures = 0, True
    for k, v in fields.items():
        setattr(c, k, v)
    return c


def test_validation_cases_never_coincide_with_test_cases():
    task = tasks.get("poisson_fixed", resolution=16)
    test, val = task.cases(0, 3), calibrate.validation_cases(task, 0, 4)
    # disjoint key indices and ids: test cases 0..2, validation cases from VALIDATION_START
    assert not set(range(3)) & set(calibrate.validation_indices(4))
    assert min(calibrate.validation_indices(4)) == calibrate.VALIDATION_START > 3
    ids = tuple(f"poisson_fixed_{i}" for i in range(3))  # `Plan.case_ids`
    assert not set(ids) & set(calibrate.validation_ids("poisson_fixed", 4))
    # and different draws: no validation truth or observation equals a test one
    for a in np.asarray(val.x_true):
        assert all(not np.array_equal(a, b) for b in np.asarray(test.x_true))
    # validation case i is the task's case VALIDATION_START + i
    again = task.cases(0, 2, start=calibrate.VALIDATION_START + 2)
    np.testing.assert_array_equal(np.asarray(again.y_obs), np.asarray(val.y_obs)[2:])
    with pytest.raises(ValueError, match="config.num_cases"):
        calibrate.check_disjoint(calibrate.VALIDATION_START + 1)


def test_rank_mean_and_metric_rules_pick_the_argmin_of_their_score():
    nan = float("nan")
    curve = {
        "mean_error": [1.0, 2.0, 3.0],
        "std_error": [3.0, 2.0, 1.0],
        "mmd": [2.0, 1.0, 3.0],
        "swd": [2.0, 1.0, 3.0],
        "spectral_error": [nan, 1.0, 2.0],  # non-finite ranks last
    }
    score, best = calibrate.select(curve, "rank_mean")
    # ranks: (1,2,3), (3,2,1), (2,1,3), (2,1,3), (3,1,2) -> means 11/5, 7/5, 12/5
    assert score == pytest.approx([11 / 5, 7 / 5, 12 / 5]) and best == 1
    assert calibrate.select(curve, "std_error") == ([3.0, 2.0, 1.0], 2)
    assert calibrate.select({"mmd": [1.0, 1.0]}, "mmd")[1] == 0  # ties: the first grid value
    tied = {m: [1.0, 1.0, 2.0] for m in calibrate.POSTERIOR_METRICS}
    assert calibrate.select(tied, "rank_mean") == ([1.5, 1.5, 3.0], 0)
    with pytest.raises(ValueError, match="non-finite"):
        calibrate.select({"mmd": [nan, nan]}, "mmd")


def test_a_weight_with_a_diverged_member_scores_non_finite():
    """A member that diverged (`num_nonfinite`) makes its grid value non-finite on every metric, even
    where a published binary projection left its metrics finite."""

    def record(weight, mean, diverged=0):
        metrics = {"mean_error": mean, "num_nonfinite": diverged}
        return types.SimpleNamespace(hparams={"guidance": weight}, metrics=metrics)

    records = [record(1.0, 0.5), record(1.0, 0.7), record(3.0, 0.2), record(3.0, 0.3, diverged=2)]
    curve = calibrate.curves(records, "guidance", (1.0, 3.0), ["mean_error"])["mean_error"]
    np.testing.assert_allclose(curve, [0.6, np.nan])
    records[-1].metrics["num_nonfinite"] = 0
    curve = calibrate.curves(records, "guidance", (1.0, 3.0), ["mean_error"])["mean_error"]
    np.testing.assert_allclose(curve, [0.6, 0.25])


@pytest.mark.parametrize(
    "section, match",
    [
        ({"hparam": "noise_inflation", "grid": (1.0,)}, "at least two distinct"),
        ({"hparam": "noise_inflation", "grid": (1.0, 2.0), "rule": "best"}, "rule"),
        ({"hparam": "noise_inflation", "grid": (1.0, 2.0), "num_cases": 0}, "num_cases"),
        ({"grid": (1.0, 2.0)}, "'hparam' and 'grid'"),
        ({"hparam": "noise_inflation", "grid": (1.0, 2.0), "extra": 1}, "unknown key"),
    ],
)
def test_calibrate_section_errors_name_the_key(section, match):
    with pytest.raises(ValueError, match=match) as err:
        settings(_config(section))
    assert "config.samplers.esmda.calibrate" in str(err.value)


def test_calibrated_hyperparameter_is_not_also_an_axis():
    c = _config({"hparam": "noise_inflation", "grid": (1.0, 2.0)})
    c.samplers.esmda.axes = {"noise_inflation": (1.0,)}
    with pytest.raises(ValueError, match="also an axis"):
        settings(c)


def test_tiny_sweep_calibrates_on_validation_cases_then_runs_the_test_at_the_choice(tmp_path):
    """ES-MDA's noise inflation chosen on two validation cases of `poisson_fixed` (exact reference)
    by the lowest mean posterior-mean error; the test pair then runs at that value only."""
    section = {"hparam": "noise_inflation", "grid": (1.0, 30.0), "num_cases": 2, "rule": "mean_error"}
    records = sweep.run(_config(section), tmp_path, progress=False)
    result = json.loads((tmp_path / "calibration" / "poisson_fixed" / "esmda.json").read_text())
    assert not (tmp_path / "calibration" / "poisson_fixed" / "esmda.png").exists()  # the report draws it
    _, paths = stage.write(tmp_path, progress=False)
    assert tmp_path / "calibration" / "poisson_fixed" / "esmda.png" in paths
    # the chosen value is the argmin of the stored score, which is the stored curve of the rule's metric
    assert result["score"] == result["curve"]["mean_error"]
    assert result["chosen"] == result["values"][int(np.argmin(result["score"]))]
    assert result["values"] == [1.0, 30.0] and all(np.isfinite(result["curve"]["mean_error"]))
    # calibration never saw a test case: disjoint ids, key indices and observations
    assert result["test_ids"] == ["poisson_fixed_0", "poisson_fixed_1"]
    assert not set(result["validation_ids"]) & set(result["test_ids"])
    assert not set(result["validation_key_indices"]) & set(result["test_key_indices"])
    _, val = artifact_store.load_references(tmp_path / "calibration" / "references" / "poisson_fixed")
    held_out = heldout.directory(tmp_path / "references" / "poisson_fixed", heldout.HELDOUT)
    _, test = artifact_store.load_references(held_out)  # the set the test rows are scored on
    for y in val["y_obs"]:
        assert all(not np.allclose(y, t) for t in test["y_obs"])
    # the test sweep ran at the chosen value only, on the test cases
    assert len(records) == 2 and {r["case"] for r in records} == {0, 1}
    assert {r["hparams"]["noise_inflation"] for r in records} == {result["chosen"]}
    # a rerun reuses the stored calibration
    stamp = (tmp_path / "calibration" / "poisson_fixed" / "esmda.json").stat().st_mtime_ns
    sweep.run(_config(section), tmp_path, progress=False)
    assert (tmp_path / "calibration" / "poisson_fixed" / "esmda.json").stat().st_mtime_ns == stamp


def test_a_hyperparameter_the_sampler_lacks_is_named(tmp_path):
    section = {"hparam": "mixing", "grid": (1.0, 2.0), "num_cases": 1}
    with pytest.raises(ValueError, match=r"calibrate.hparam: sampler 'esmda' has no numeric hyperparameter"):
        sweep.run(_config(section, figures=False), tmp_path, progress=False)


def test_main_table_calibrates_guided_samplers_below_the_published_scale_only():
    from configs import main_table

    for arg, factors in (("tiny", (0.25, 1.0, 4.0)), ("medium", (0.1, 0.3, 1.0, 3.0, 10.0))):
        parsed = settings(main_table.get_config(arg)).samplers
        entries = {e.label: e.calibrate for e in parsed}
        # every entry of a calibrated sampler (published, `_ours` and `_oracle` rows alike), no other
        expected = {e.label for e in parsed if e.sampler in main_table.CALIBRATED}
        assert {k for k, v in entries.items() if v is not None} == expected >= set(main_table.CALIBRATED)
        assert entries["ddis"].hparam == "step_size" and entries["fundps"].hparam == "guidance"
        assert entries["fundps"].grid == factors and entries["fundps"].relative
    full = settings(main_table.get_config("")).samplers
    assert all(e.calibrate is None for e in full)  # the published values, as published


def test_an_interrupted_calibration_resumes_at_its_first_unfinished_chunk(tmp_path, monkeypatch):
    """The validation records accumulate chunk by chunk in `<label>.<digest>.jsonl`; a rerun
    after an interruption computes only the missing configurations and reaches the same curve."""
    section = {"hparam": "noise_inflation", "grid": (1.0, 30.0), "num_cases": 2, "rule": "mean_error"}
    config = _config(section, chunk_size=2, figures=False)
    sweep.run(config, tmp_path, progress=False)
    directory = tmp_path / "calibration" / "poisson_fixed"
    first = json.loads((directory / "esmda.json").read_text())
    (partial,) = directory.glob("esmda.*.jsonl")
    lines = partial.read_text().splitlines()
    assert len(lines) == 4  # 2 validation cases x 2 grid values
    # the run stopped after its first chunk of 2 configurations, before the choice was written
    partial.write_text("\n".join(lines[:2]) + "\n")
    (directory / "esmda.json").unlink()
    computed = []
    real = calibrate.run_pair

    def counting(task, sampler, cases, reference, grid, **kw):
        computed.append(len(set(grid.ids()) - kw["skip"]))
        return real(task, sampler, cases, reference, grid, **kw)

    monkeypatch.setattr(calibrate, "run_pair", counting)
    sweep.run(config, tmp_path, progress=False)
    assert computed == [2]
    again = json.loads((directory / "esmda.json").read_text())
    assert again["curve"] == first["curve"] and again["chosen"] == first["chosen"]
    assert len(partial.read_text().splitlines()) == 4
    # another identity (here the grid) accumulates in another file, never reusing these records
    other = _config({**section, "grid": (1.0, 10.0)}, chunk_size=2, figures=False)
    sweep.run(other, tmp_path / "other", progress=False)
    assert {p.name for p in (tmp_path / "other" / "calibration" / "poisson_fixed").glob("*.jsonl")} != {
        partial.name
    }
