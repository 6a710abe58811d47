"""posteriorjax.exchange: export, file readers, given cases, PosteriorBench rows, file-in scoring.

Default tests share one exported tiny study (poisson_fixed at 8 x 8, 3 cases, exact reference)
and one compiled scoring program; the round trip against the sweep's own `exact` rows runs a
sweep and is `slow`.
"""

import hashlib
import json

import h5py
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from posteriorjax import exchange, files, sweep
from posteriorjax.exchange import readers
from posteriorjax.exchange import score as exchange_score
from posteriorjax.metrics import registry
from posteriorjax.reference import heldout
from posteriorjax.sweep import given as given_cases
from posteriorjax.sweep import store
from posteriorjax.sweep.plan import Plan
from posteriorjax.sweep.settings import settings

TASK, RES, K, N = "poisson_fixed", 8, 3, 8


def _config(**overrides):
    c = ml_collections.ConfigDict()
    c.seed, c.seeds, c.num_cases, c.num_samples = 0, (0,), K, N
    c.chunk_size, c.batch_size, c.overwrite = 4, 2, False
    c.tasks = {TASK: {"resolution": RES, "num_sensors": 12}}
    c.reference = sweep.reference_config("exact", num_samples=16)
    c.references, c.samplers = {}, {"exact": {}}
    c.training, c.diagnostics, c.save_samples, c.figures = {"scale": "tiny"}, (), K, False
    c.update(overrides)
    return c


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    wd = tmp_path_factory.mktemp("exchange")
    config = _config()
    directory = exchange.export(config, wd)[TASK]
    plan = Plan.build(settings(config))
    return {"wd": wd, "dir": directory, "config": config, "plan": plan, "task": plan.tasks[TASK]}


def _ids():
    return [f"{TASK}_{i}" for i in range(K)]


def _samples(study, seed=0):
    ref = files.read_array_file(study["dir"] / "reference.npz")["ref_samples"]
    return np.asarray(ref[:, seed : seed + N])  # (K, N, 1, H, W), reference draws


def _write_generated(root, per_case, weights=None):
    for case_id, s in per_case.items():
        (root / case_id).mkdir(parents=True)
        with h5py.File(root / case_id / "generated.h5", "w") as f:
            f.create_dataset("f", data=s[:, 0])
            f.create_dataset("w", data=np.full(len(s), 1 / len(s)) if weights is None else weights)
            f.attrs.update({"case_id": case_id, "target_field": "f"})


def test_export_writes_the_same_content_as_npz_and_h5(study):
    d, task, plan = study["dir"], study["task"], study["plan"]
    for name in ("cases", "truth", "reference"):
        a, b = files.read_array_file(d / f"{name}.npz"), files.read_array_file(d / f"{name}.h5")
        assert sorted(a) == sorted(b)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{name}.{k}")
    c, t = files.read_array_file(d / "cases.npz"), files.read_array_file(d / "truth.npz")
    assert "x_true" not in c and list(c["case_ids"]) == _ids()  # truth apart: a blind evaluation
    np.testing.assert_array_equal(t["x_true"], plan.cases(TASK).x_true)
    np.testing.assert_array_equal(c["y_obs"], plan.cases(TASK).y_obs)
    # sensors: index [row, col] reproduces the observation; position = grid point of the index
    idx = c["sensor_index"]
    np.testing.assert_allclose(t["u_true"][:, 0, idx[:, 0], idx[:, 1]], np.asarray(jnp.stack(
        [task.observation(u) for u in t["u_true"]])), rtol=0, atol=0)  # fmt: skip
    h = 1.0 / (RES + 1)  # Dirichlet interior nodes
    np.testing.assert_allclose(c["sensor_position"], (idx + 1) * h, rtol=1e-12)
    readme = json.loads((d / "README.json").read_text())
    assert readme["grid"]["boundary"] == "dirichlet" and "-lap(phi) = f" in readme["physics"]["equation"]
    assert readme["files"]["reference"]["ref_samples"] == [K, 16, 1, RES, RES]
    assert (
        readme["noise"]["std"] == pytest.approx(1e-4) and readme["observation"]["type"] == "MaskObservation"
    )


def test_exported_cases_load_as_given_cases_with_their_sensors(study):
    task = study["task"]
    g = given_cases.load(study["dir"] / "cases.h5", task)
    assert g.ids == tuple(_ids())
    np.testing.assert_array_equal(
        np.asarray(g.task.observation.indices), np.asarray(task.observation.indices)
    )
    np.testing.assert_array_equal(g.cases.y_obs, study["plan"].cases(TASK).y_obs)
    np.testing.assert_allclose(g.ref_weights.sum(1), 1.0, rtol=1e-6)
    # sensors given in another order: the operator is the same, y is permuted back
    idx = files.read_array_file(study["dir"] / "cases.npz")["sensor_index"]
    perm = np.random.default_rng(0).permutation(len(idx))
    y = given_cases.reorder_observations(g.cases.y_obs[:, perm], idx[perm], (RES, RES))
    np.testing.assert_array_equal(y, g.cases.y_obs)
    other = settings(_config(tasks={TASK: {"resolution": 16, "num_sensors": 12}}))
    with pytest.raises(ValueError, match="another resolution"):
        given_cases.load(study["dir"] / "cases.npz", Plan.build(other).tasks[TASK])


def test_every_format_reads_the_same_samples(study, tmp_path):
    x, ids = _samples(study), _ids()
    np.savez(tmp_path / "keyed.npz", **dict(zip(ids, x, strict=True)))
    np.savez(tmp_path / "stacked.npz", samples=x, case_ids=np.asarray(ids), task=TASK)
    np.save(tmp_path / "stacked.npy", x)
    with h5py.File(tmp_path / "keyed.h5", "w") as f:
        for i, s in zip(ids, x, strict=True):
            f.create_dataset(i, data=s[:, 0])  # (N, H, W): one channel
        f.attrs.update({"task": TASK, "method": "mine"})  # metadata, not cases
    _write_generated(tmp_path / "pb", dict(zip(ids, x, strict=True)))
    for name in ("keyed.npz", "stacked.npz", "keyed.h5", "pb"):  # by case id, in any order
        got = readers.read_samples(tmp_path / name, ids[::-1], (1, RES, RES), task=TASK)
        np.testing.assert_array_equal(got, x[::-1], err_msg=name)
    np.testing.assert_array_equal(readers.read_samples(tmp_path / "stacked.npy", ids, (1, RES, RES)), x)


def test_pt_files_load_with_weights_only(study, tmp_path):
    torch = pytest.importorskip("torch")
    x, ids = _samples(study), _ids()
    torch.save({i: torch.from_numpy(s) for i, s in zip(ids, x, strict=True)}, tmp_path / "s.pt")
    np.testing.assert_array_equal(readers.read_samples(tmp_path / "s.pt", ids, (1, RES, RES)), x)


def test_bad_sample_files_are_clear_errors(study, tmp_path):
    x, ids, shape = _samples(study), _ids(), (1, RES, RES)

    def fails(name, match, **arrays):
        np.savez(tmp_path / name, **arrays)
        with pytest.raises(ValueError, match=match):
            readers.read_samples(tmp_path / name, ids, shape, task=TASK)

    fails(
        "missing.npz", rf"no samples for case\(s\) \['{TASK}_2'\]", **dict(zip(ids[:2], x[:2], strict=True))
    )
    dup = np.asarray([ids[0], ids[0], ids[1]])
    fails("dup.npz", rf"case\(s\) \['{TASK}_0'\] appear more than once", samples=x, case_ids=dup)
    fails("shape.npz", rf"case '{TASK}_1': expected shape \(N, 1, 8, 8\), got \(8, 1, 8, 9\)",
          **{**dict(zip(ids, x, strict=True)), ids[1]: np.zeros((N, 1, RES, RES + 1))})  # fmt: skip
    fails("task.npz", "holds samples of task 'darcy'", samples=x, case_ids=np.asarray(ids), task="darcy")
    fails("other.npz", r"case id\(s\) \['darcy_0'", **{"darcy_0": x[0], **dict(zip(ids, x, strict=True))})
    text = {**dict(zip(ids, x, strict=True)), ids[0]: np.asarray(["a"])}
    fails("text.npz", "expected a real array", **text)
    np.save(tmp_path / "pickled.npy", np.asarray([x[0], None], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="object .pickled. array"):
        readers.read_samples(tmp_path / "pickled.npy", ids, shape)
    np.savez(tmp_path / "pickled.npz", **{ids[0]: np.asarray([None], dtype=object)})
    with pytest.raises(ValueError, match="object .pickled. array"):
        readers.read_samples(tmp_path / "pickled.npz", ids, shape)
    _write_generated(tmp_path / "pb", dict(zip(ids, x, strict=True)), weights=np.arange(1.0, N + 1))
    with pytest.raises(ValueError, match="holds weighted members; read_ensemble"):  # never dropped
        readers.read_samples(tmp_path / "pb", ids, shape)
    bad = {
        "negative": (-np.ones(N), "weights >= 0, got 8 negative"),
        "zero": (np.zeros(N), "weights with a positive sum, got all zero"),
        "nan": (np.full(N, np.nan), "finite weights, got 8 non-finite"),
        "short": (np.ones(N - 1), "8 real weights .one per member., got float64 .7,."),
    }
    for label, (w, match) in bad.items():
        _write_generated(tmp_path / label, dict(zip(ids, x, strict=True)), weights=w)
        with pytest.raises(ValueError, match=rf"{label}/{TASK}_0/generated.h5: w: expected {match}"):
            readers.read_ensemble(tmp_path / label, ids, shape)
    fails("weights.npz", rf"weights of case '{TASK}_1': expected weights >= 0",
          **dict(zip(ids, x, strict=True)), **{f"w:{ids[1]}": -np.ones(N)})  # fmt: skip
    fails("wshape.npz", r"weights: expected shape \(K=3, N\), got \(8,\)",
          samples=x, case_ids=np.asarray(ids), weights=np.ones(N))  # fmt: skip
    fails("wcase.npz", r"case id\(s\) \['darcy_0'\] are not cases",
          **dict(zip(ids, x, strict=True)), **{"w:darcy_0": np.ones(N)})  # fmt: skip
    for dtype in ("int32", "bool"):
        fails(f"{dtype}.npz", f"expected floating-point fields, got dtype {dtype}",
              samples=x.astype(dtype), case_ids=np.asarray(ids))  # fmt: skip


def _pb_dataset(path, study):
    """A DatasetDict in PosteriorBench's schema, written from our cases: 0.5-scaled storage,
    their Poisson sign (lap(phi) = f: phi negated) and the sensors in a shuffled order."""
    datasets = pytest.importorskip("datasets")
    t = files.read_array_file(study["dir"] / "truth.npz")
    r = files.read_array_file(study["dir"] / "reference.npz")
    idx = files.read_array_file(study["dir"] / "cases.npz")["sensor_index"]
    (ma, sa), (mu, su) = given_cases.STATS["poisson"]["a"], given_cases.STATS["poisson"]["u"]
    coords = idx[np.random.default_rng(1).permutation(len(idx))]
    rows = {
        "a_ref": [0.5 * (a - ma) / sa for a in t["x_true"].astype(np.float64)],
        "u_ref": [0.5 * (-u - mu) / su for u in t["u_true"].astype(np.float64)],
        "metadata": [{"sensor_coords": coords.tolist()}] * K,
        "posterior_samples_a": [0.5 * (s - ma) / sa for s in r["ref_samples"].astype(np.float64)],
        "posterior_weights": [3.0 * w for w in r["ref_weights"]],  # normalized on load
    }
    split = {k: v[:2] for k, v in rows.items()}, {k: v[2:] for k, v in rows.items()}
    datasets.DatasetDict(
        {"test": datasets.Dataset.from_dict(split[1]), "validation": datasets.Dataset.from_dict(split[0])}
    ).save_to_disk(str(path))
    return path


def test_posteriorbench_rows_convert_to_our_conventions(study, tmp_path):
    path = _pb_dataset(tmp_path / "PosteriorDataset_hf", study)
    g = given_cases.load(path, study["task"])
    plan, ref = study["plan"], files.read_array_file(study["dir"] / "reference.npz")
    assert g.ids == ("poisson_1", "poisson_2", "poisson_3")  # validation first, then test
    np.testing.assert_allclose(g.cases.x_true, plan.cases(TASK).x_true, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.cases.u_true, plan.cases(TASK).u_true, rtol=1e-4, atol=1e-9)
    # y: the noise-free state at the sensors, in our operator's (row-major) order
    np.testing.assert_allclose(
        g.cases.y_obs, jnp.stack([study["task"].observation(u) for u in g.cases.u_true])
    )
    np.testing.assert_allclose(g.ref_samples, ref["ref_samples"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.ref_weights, ref["ref_weights"], rtol=1e-6)
    kept = given_cases.load(path, study["task"], poisson_sign="neg_lap")
    np.testing.assert_allclose(kept.cases.u_true, -g.cases.u_true, rtol=1e-6)
    with pytest.raises(ValueError, match="poisson and darcy"):
        given_cases.dataset_of(sweep.plan._task("ltmi", {}, "t"))


def test_interop_forward_and_vjp_on_numpy_arrays(study):
    task, rng = study["task"], np.random.default_rng(0)
    f = exchange.Forward(task)
    x, v = rng.normal(size=(2, *task.unknown_shape)), rng.normal(size=(2, task.num_observations))
    y = f(x)
    assert isinstance(y, np.ndarray) and y.shape == (2, task.num_observations)
    np.testing.assert_allclose(f(x[0]), task.forward(jnp.asarray(x[0], jnp.float32)), rtol=1e-5, atol=1e-8)
    y1, jtv = f.vjp(x, v)
    # the forward map is linear: <J x, v> = <x, J^T v> (the adjoint identity)
    np.testing.assert_allclose(np.sum(y1 * v, axis=1), np.sum(x * jtv, axis=(1, 2, 3)), rtol=1e-4)
    y_obs = y[0] + 1e-4
    loss, grad = f.misfit_grad(x[0], y_obs)
    r = (y[0] - y_obs) / 1e-4**2
    np.testing.assert_allclose(grad, f.vjp(x[0], r)[1], rtol=1e-4, atol=1e-3 * np.abs(grad).max())
    np.testing.assert_allclose(loss, 0.5 * np.sum(((y[0] - y_obs) / 1e-4) ** 2), rtol=1e-3)
    with pytest.raises(ValueError, match="expected"):
        f(np.zeros((RES, RES)))


@pytest.fixture(scope="module")
def scored(study):
    """One evaluation on given (exported) cases, case 1 holding two NaN members."""
    x = _samples(study)
    x[1, :2] = np.nan
    path = study["wd"] / "nan.npz"
    np.savez(path, samples=x, case_ids=np.asarray(_ids()))
    original = exchange_score._score_all
    with pytest.MonkeyPatch.context() as mp:  # keep the scoring program's arguments for its test
        mp.setattr(exchange_score, "_score_all", lambda *a: _SCORED.setdefault("args", a) and original(*a))
        cases_file = study["dir"] / "cases.npz"
        records = exchange.evaluate(study["wd"], TASK, path, name="nan", cases_file=cases_file)
    return records


_SCORED = {}


def test_scoring_program_holds_no_host_callback(scored):
    """Its checks are outputs (`deferred.functionalize`): the persistent cache can store it."""
    text = exchange_score._score_all.lower(*_SCORED["args"]).as_text()
    assert "callback" not in text and "posteriorjax_check" not in text


def test_nan_members_are_counted_not_averaged(scored):
    assert [r.case for r in scored] == [0, 1, 2] and [r.config_id for r in scored][0] == "case=0;seed=0;"
    assert scored[1].metrics["num_invalid"] == 2 and scored[1].metrics["swd"] is None
    assert scored[1].metrics["tarp_credibility"] is None
    assert scored[0].metrics["num_invalid"] == 0 and scored[0].metrics["swd"] is not None


def test_scored_records_verify_as_the_sweeps_do(study, scored):
    """Records from a file carry the workdir's config hash and a digest: `experiments.report` accepts them."""
    assert store.verify_workdir(study["wd"]) == []


def test_records_name_the_cases_file_they_were_scored_on(study, scored):
    digest = hashlib.sha256((study["dir"] / "cases.npz").read_bytes()).hexdigest()[:16]
    assert {r.cases for r in scored} == {f"cases.npz sha256:{digest}"}
    summary = (study["wd"] / "summary.md").read_text()
    assert f"nan on `cases.npz sha256:{digest}`" in summary
    assert "cases" in (study["wd"] / "results.csv").read_text().splitlines()[0].split(",")
    with pytest.raises(ValueError, match="cases_file: expected an existing file or folder"):
        exchange.evaluate(
            study["wd"], TASK, study["wd"] / "nan.npz", name="other", cases_file=study["dir"] / "no.npz"
        )


def test_bad_input_never_loses_earlier_records(study, scored, tmp_path):
    results = study["wd"] / "results.jsonl"
    before = results.read_text()
    np.savez(tmp_path / "short.npz", **dict(zip(_ids()[:2], _samples(study)[:2], strict=True)))
    with pytest.raises(ValueError, match="no samples for case"):
        exchange.evaluate(study["wd"], TASK, tmp_path / "short.npz", name="short")
    with pytest.raises(ValueError, match="already holds records of sampler 'nan'"):
        exchange.evaluate(study["wd"], TASK, study["wd"] / "nan.npz", name="nan")
    with pytest.raises(ValueError, match="has tasks"):
        exchange.evaluate(study["wd"], "darcy", study["wd"] / "nan.npz")
    for label in ("../outside", "/tmp/abs", "a/b"):  # the label names a file under samples/<task>/
        with pytest.raises(ValueError, match="name: expected a plain file-name component"):
            exchange.evaluate(study["wd"], TASK, study["wd"] / "nan.npz", name=label)
    assert results.read_text() == before
    assert [r.sampler for r in store.read_records(results)] == ["nan"] * K


def test_posteriorbench_cases_score_through_the_suite(study, scored, tmp_path):
    path = _pb_dataset(tmp_path / "pb", study)
    x = _samples(study, seed=1)
    _write_generated(tmp_path / "pred", {f"poisson_{i + 1}": s for i, s in enumerate(x)})
    records = exchange.evaluate(study["wd"], TASK, tmp_path / "pred", name="pb", cases_file=path)
    assert [r.case for r in records] == [0, 1, 2]
    for r in records:  # reference draws scored against the reference: finite, calibrated-looking
        assert r.metrics["num_invalid"] == 0 and np.isfinite(r.metrics["swd"])
        assert 0.0 <= r.metrics["tarp_credibility"] <= 1.0


@pytest.mark.slow
def test_round_trip_equals_the_sweeps_exact_rows(study, tmp_path):
    """Export, then score the sweep's own exact-sampler samples from files: the same records."""
    wd = tmp_path / "wd"
    rows = sweep.run(_config(), wd, progress=False)
    exchange.export(_config(), wd)
    z = files.read_array_file(wd / "samples" / TASK / "exact.npz")
    ids = [f"{TASK}_{c}" for c in z["case"]]
    np.savez(tmp_path / "exact.npz", **dict(zip(ids, z["samples"], strict=True)))
    with h5py.File(tmp_path / "exact.h5", "w") as f:
        f.create_dataset("samples", data=z["samples"])
        f.create_dataset("case_ids", data=np.asarray(ids, dtype="S"))
    _write_generated(tmp_path / "pb", dict(zip(ids, z["samples"], strict=True)))
    paths = {"npz": tmp_path / "exact.npz", "h5": tmp_path / "exact.h5", "pb": tmp_path / "pb"}
    try:
        import torch

        torch.save(torch.from_numpy(z["samples"]), tmp_path / "exact.pt")
        paths["pt"] = tmp_path / "exact.pt"
    except ModuleNotFoundError:
        pass
    for label, path in paths.items():
        records = exchange.evaluate(wd, TASK, path, name=f"exact_{label}")
        for a, b in zip(rows, records, strict=True):
            assert (a.config_id, a.case, a.num_samples, a.evaluation) == (
                b.config_id,
                b.case,
                b.num_samples,
                b.evaluation,
            )
            # a file's records add the public-set scores, the held-out halves' log ratios and the ESS
            extra = {"ess"} | {f"public_{m}" for m in heldout.PUBLIC_METRICS}
            extra |= {f"split_{m}" for m in heldout.GAP_METRICS}
            assert set(b.metrics) == set(a.metrics) | extra
            for k, v in a.metrics.items():
                np.testing.assert_allclose(b.metrics[k], v, rtol=2e-4, atol=1e-6, err_msg=f"{label}: {k}")
    # the same study on the exported cases (given, not drawn): the sweep's own records again, but
    # scored on the exported (public) reference beside the cases file, as the file's public_* scores
    given = sweep.run(_config(cases_files={TASK: str(wd / "exchange" / TASK / "cases.npz")}),
                      tmp_path / "given", progress=False)  # fmt: skip
    reference_based = {m.name for m in registry.REGISTRY.values() if m.needs == frozenset({"reference"})}
    for a, b, f in zip(rows, given, records, strict=True):
        assert b.scored["reference"]["set"] == "given"
        for k, v in a.metrics.items():
            if k in heldout.PUBLIC_METRICS:
                v = f.metrics[f"public_{k}"]
            elif k in reference_based or k.startswith(("tarp", "mira")):
                continue
            np.testing.assert_allclose(b.metrics[k], v, rtol=2e-4, atol=1e-6, err_msg=f"given: {k}")


def test_evaluate_reports_each_stage(study, scored, console_log):
    """With `progress` (the `evaluate` command), a line as each stage starts and as it ends."""
    import re

    path = study["wd"] / "again.npz"
    np.savez(path, samples=_samples(study, seed=1), case_ids=np.asarray(_ids()))
    exchange.evaluate(study["wd"], TASK, path, name="again", progress=True)
    stages = [
        "reading the study",
        f"reading the samples of {K} case(s) from {path}",
        f"the reference posterior of {TASK} (read from the workdir, or built)",
        f"scoring {K} case(s) x {N} samples (compiling the scoring program, then running it)",
        "writing the records, the stored samples and the tables",
    ]
    shown = re.findall(r"\[evaluate (\d)/5\] (.*)", console_log.stream.getvalue())
    expected = [(str(i), line) for i, stage in enumerate(stages, 1) for line in (stage, f"{stage}: done in ")]
    assert len(shown) == len(expected)
    assert all(i == j and text.startswith(line) for (i, text), (j, line) in zip(shown, expected, strict=True))
