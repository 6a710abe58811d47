"""Workdirs that heal: each on-disk corruption is verified on read, set aside and rebuilt (or refused).

One tiny sweep workdir is built once and copied per test; each test corrupts one artifact,
reruns, and compares with the uninterrupted result, checking that the bad file was set aside.
"""

import json
import shutil
import sys
import warnings

import jax
import ml_collections
import numpy as np
import pytest

from experiments.report import check_workdir
from posteriorjax import files, nn, sweep, tasks, training
from posteriorjax.reference import pool
from posteriorjax.reference import store as artifact_store
from posteriorjax.sweep import program
from posteriorjax.sweep import store as record_store
from posteriorjax.training.data import TaskSource
from posteriorjax.training.losses import surrogate_loss


def _config(**overrides):
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.seeds = (0, 1)
    config.num_cases = 2
    config.num_samples = 4
    config.chunk_size = 2
    config.batch_size = 2
    config.overwrite = False
    config.tasks = {"poisson_fixed": {"resolution": 8, "num_sensors": 6}}
    config.reference = sweep.reference_config("exact", num_samples=8)
    config.samplers = {"prior": {"options": {}, "axes": {}}}
    config.save_samples = 1
    config.figures = False
    for name, value in overrides.items():
        config[name] = value
    return config


def _metrics(workdir):
    return {r.config_id: r.metrics for r in record_store.read_records(workdir / "results.jsonl")}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("healing") / "base"
    sweep.run(_config(), workdir, progress=False)
    return workdir


@pytest.fixture
def copy(base, tmp_path):
    workdir = tmp_path / "w"
    shutil.copytree(base, workdir)
    return workdir


def _rerun(workdir):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sweep.run(_config(), workdir, progress=False)
    return [str(w.message) for w in caught]


def _lines(workdir):
    return (workdir / "results.jsonl").read_text().splitlines()


def _write_lines(workdir, lines):
    (workdir / "results.jsonl").write_text("".join(line + "\n" for line in lines))


@pytest.mark.slow  # a tiny sweep and its rerun: ~20-40 s on a loaded 2-core CPU
def test_every_record_carries_a_digest_and_the_config_hash(base):
    config = json.loads((base / "config.json").read_text())
    for line in _lines(base):
        values = json.loads(line)
        assert values["config_hash"] == record_store.config_hash(config)
        assert values["digest"] == record_store.record_digest(values)
    assert record_store.verify_workdir(base) == []
    check_workdir(base)  # a clean workdir is reported


@pytest.mark.slow  # a tiny sweep and its rerun: ~20-40 s on a loaded 2-core CPU
@pytest.mark.parametrize(
    "corrupt, reason",
    [
        (lambda lines: lines[:-1] + [lines[-1][:30]], "not JSON"),  # torn last line (a kill mid-write)
        (lambda lines: lines[:1] + ["5"] + lines[1:], "not a record"),  # valid JSON, not a record
        (lambda lines: lines[:1] + [lines[1][:25] + "#" + lines[1][26:]] + lines[2:], "line 2"),  # garbled
    ],
    ids=["torn_last_line", "non_record_json", "garbled_middle_line"],
)
def test_bad_results_lines_are_set_aside_and_recomputed(base, copy, corrupt, reason):
    lines = _lines(base)
    _write_lines(copy, corrupt(lines))
    assert any(reason in p for p in record_store.verify_workdir(copy))
    with pytest.warns(UserWarning, match="bad line"):
        kept = record_store.read_records(copy / "results.jsonl")
    assert len(kept) == len(corrupt(lines)) - 1  # the valid records after the bad line are kept
    messages = _rerun(copy)
    assert any(
        "results.jsonl: line" in m and "copied aside as results.jsonl.corrupt-0" in m for m in messages
    )
    assert (copy / "results.jsonl.corrupt-0").exists()
    assert _metrics(copy) == _metrics(base)
    assert len(_lines(copy)) == len(lines)  # each configuration once
    assert record_store.verify_workdir(copy) == []


@pytest.mark.slow  # a tiny sweep and its rerun: ~20-40 s on a loaded 2-core CPU
def test_a_garbled_middle_line_recomputes_only_its_record(base, copy, monkeypatch):
    lines = _lines(base)
    _write_lines(copy, lines[:1] + [lines[1][:-5]] + lines[2:])
    calls = []
    run_pair = sweep.run_pair
    monkeypatch.setattr(
        sys.modules["posteriorjax.sweep.run"],
        "run_pair",
        lambda *a, **k: calls.append(k["skip"]) or run_pair(*a, **k),
    )
    _rerun(copy)
    (skip,) = calls
    assert len(skip) == len(lines) - 1  # 3 of 4 records kept, one recomputed
    assert _lines(copy)[:1] + _lines(copy)[1:3] == lines[:1] + lines[2:]


@pytest.mark.slow  # a tiny sweep and its rerun: ~20-40 s on a loaded 2-core CPU
def test_an_edited_metric_value_is_a_verification_error_and_repair_recomputes_it(base, copy):
    lines = _lines(base)
    values = json.loads(lines[2])
    name = next(k for k, v in values["metrics"].items() if isinstance(v, float))
    values["metrics"][name] *= 0.5
    _write_lines(copy, lines[:2] + [json.dumps(values)] + lines[3:])
    with pytest.raises(ValueError, match=r"(?s)fails verification.*line 3: digest mismatch.*--repair"):
        check_workdir(copy)
    with pytest.warns(UserWarning, match="digest mismatch"):
        check_workdir(copy, repair=True)
    assert _metrics(copy) == _metrics(base)
    assert (copy / "results.jsonl.corrupt-0").exists()


def _reference(workdir):
    return workdir / "references" / "poisson_fixed.heldout"  # the set the rows are scored on


@pytest.mark.slow  # a tiny sweep and its rerun: ~20-40 s on a loaded 2-core CPU
def test_a_resaved_reference_with_altered_samples_is_refused_then_rebuilt(base, copy):
    path = _reference(copy) / "references.npz"
    arrays = files.read_arrays(path)
    arrays["ref_samples"] = arrays["ref_samples"] * 1.01
    files.write_arrays(path, arrays)  # a valid .npz, not the one the manifest describes
    with pytest.raises(ValueError, match="reference .*checksum mismatch"):
        check_workdir(copy)
    messages = _rerun(copy)
    assert any("checksum mismatch" in m and "poisson_fixed.heldout.corrupt-0" in m for m in messages)
    np.testing.assert_array_equal(
        artifact_store.load_references(_reference(copy))[1]["ref_samples"],
        artifact_store.load_references(_reference(base))[1]["ref_samples"],
    )
    assert _metrics(copy) == _metrics(base)
    assert record_store.verify_workdir(copy) == []


@pytest.mark.slow  # a tiny sweep and its rerun: ~20-40 s on a loaded 2-core CPU
def test_a_truncated_reference_is_set_aside_and_rebuilt(base, copy):
    path = _reference(copy) / "references.npz"
    path.write_bytes(path.read_bytes()[:100])
    messages = _rerun(copy)
    aside = "set aside as poisson_fixed.heldout.corrupt-0"
    assert any("references.npz" in m and aside in m for m in messages)
    assert (copy / "references" / "poisson_fixed.heldout.corrupt-0" / "references.npz").exists()
    assert record_store.verify_workdir(copy) == []
    assert _metrics(copy) == _metrics(base)


@pytest.mark.slow  # a tiny sweep and its rerun: ~20-40 s on a loaded 2-core CPU
def test_truncated_samples_are_set_aside_and_recomputed(base, copy):
    path = copy / "samples" / "poisson_fixed" / "prior.npz"
    path.write_bytes(path.read_bytes()[:200])
    assert any("prior.npz" in p and "checksum mismatch" in p for p in record_store.verify_workdir(copy))
    messages = _rerun(copy)
    assert any("prior.npz" in m and "set aside as prior.npz.corrupt-0" in m for m in messages)
    got = files.read_arrays_checked(path)
    want = files.read_arrays_checked(base / "samples" / "poisson_fixed" / "prior.npz")
    np.testing.assert_array_equal(got["samples"], want["samples"])
    assert record_store.verify_workdir(copy) == []


def test_a_program_that_does_not_fit_stops_before_any_reference_is_built(tmp_path):
    with pytest.raises(MemoryError, match=r"poisson_fixed / prior needs about .* lower batch_size \(now 2\)"):
        sweep.run(_config(), tmp_path, progress=False, memory_limit_bytes=1000)
    assert not (tmp_path / "references").exists() and not (tmp_path / "results.jsonl").exists()


def test_peak_bytes_reads_the_compiled_program():
    compiled = jax.jit(lambda x: x * 2).lower(jax.ShapeDtypeStruct((1000,), np.float32)).compile()
    assert program.peak_bytes(compiled) >= 8000  # a 4000-byte argument and a 4000-byte output
    program.check_memory(compiled, "x", batch_size=1, num_samples=1, limit=10**6)
    with pytest.raises(MemoryError, match="num_samples"):
        program.check_memory(compiled, "x", batch_size=1, num_samples=1, limit=100)


# -- pools -----------------------------------------------------------------------------------------


def test_a_pool_chunk_with_a_bad_checksum_is_set_aside_and_rebuilt(tmp_path):
    task = tasks.get("poisson_fixed", resolution=8, num_sensors=6)
    args = dict(seed=0, num_chunks=3, chunk_size=4, progress=False)
    full = pool.build(task, tmp_path / "a", **args)
    want = full.load("y")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    chunk = tmp_path / "b" / "chunk_000001.npz"
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    with pytest.warns(UserWarning, match=r"chunk_000001.npz: chunk 1: .*checksum mismatch"):
        healed = pool.build(task, tmp_path / "b", **args)
    assert (tmp_path / "b" / "chunk_000001.npz.corrupt-0").exists()
    np.testing.assert_array_equal(healed.load("y"), want)
    np.testing.assert_array_equal(healed.load("x"), full.load("x"))


def test_an_interrupted_pool_build_resumes_to_the_same_pool(tmp_path):
    task = tasks.get("poisson_fixed", resolution=8, num_sensors=6)
    args = dict(seed=0, num_chunks=3, chunk_size=4, progress=False)
    want = pool.build(task, tmp_path / "a", **args).load("y")
    pool.build(task, tmp_path / "b", **args, max_new_chunks=1)  # killed after the first chunk
    np.testing.assert_array_equal(pool.build(task, tmp_path / "b", **args).load("y"), want)


# -- training --------------------------------------------------------------------------------------

CFG = training.TrainConfig(
    num_steps=6, batch_size=4, warmup_steps=2, log_every=1, eval_every=100, checkpoint_every=3, progress=False
)


@pytest.fixture(scope="module")
def trainer():
    task = tasks.get("poisson_fixed", resolution=8, num_sensors=6)
    x_norm, u_norm = nn.field_normalizer(task), nn.state_statistics(task, num_draws=8, seed=0)
    source = TaskSource(task, x_norm, u_norm, "surrogate", 4)
    net = nn.FNO(1, 1, modes=2, width=4, layers=1, projection=4, key=jax.random.key(0))
    return nn.Surrogate(net, x_norm, u_norm), source


def _params(model):
    import equinox as eqx

    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))]


@pytest.fixture(scope="module")
def trained(trainer, tmp_path_factory):
    """(workdir, final model) of an uninterrupted run."""
    model, source = trainer
    workdir = tmp_path_factory.mktemp("train") / "full"
    return workdir, training.fit(model, surrogate_loss, source, CFG, workdir)[0]


def test_a_corrupt_latest_checkpoint_is_set_aside_and_the_step_retrained(trainer, trained, tmp_path):
    model, source = trainer
    shutil.copytree(trained[0], tmp_path / "run")
    full = trained[1]
    for f in (tmp_path / "run" / "checkpoints" / "6" / "state").rglob("*"):
        if f.is_file():
            f.write_bytes(b"garbage")
    with pytest.warns(UserWarning, match=r"checkpoint 6 .* set aside as 6.corrupt-0"):
        again, _, state = training.fit(model, surrogate_loss, source, CFG, tmp_path / "run")
    assert int(state.step) == 6 and (tmp_path / "run" / "checkpoints" / "6.corrupt-0").is_dir()
    for a, b in zip(_params(full), _params(again), strict=True):
        np.testing.assert_array_equal(a, b)
    training.fit(model, surrogate_loss, source, CFG, tmp_path / "run")  # and again: no crash loop
    steps = [json.loads(x)["step"] for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow  # two more training compiles: ~15-30 s on a loaded 2-core CPU
def test_a_torn_metrics_line_is_skipped_on_resume(trainer, trained, tmp_path):
    model, source = trainer
    full = trained[1]
    training.fit(model, surrogate_loss, source, CFG, tmp_path / "b", stop_after=4)
    log = tmp_path / "b" / "metrics.jsonl"
    log.write_text(log.read_text() + '{"step": 5, "lo')  # killed mid-write
    with pytest.warns(UserWarning, match=r"metrics.jsonl: line 5 is not a metrics record"):
        resumed, _, _ = training.fit(model, surrogate_loss, source, CFG, tmp_path / "b")
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(_params(full), _params(resumed), strict=True):
        np.testing.assert_array_equal(a, b)
