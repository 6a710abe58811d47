"""Scores that cannot be gamed: held-out references, weighted ensembles, provenance, PosteriorBench parity.

One exported tiny study (poisson_fixed at 8 x 8, 3 cases, exact references of 64 members) is
shared; PosteriorBench's metric code is the NumPy transcription of its `evaluation/metrics.py`
in `scripts/bench/posteriorbench_metrics.py`.
"""

import json
import sys
from pathlib import Path

import jax
import jax.random as jr
import ml_collections
import numpy as np
import pytest

from posteriorjax import exchange, files, sweep
from posteriorjax.exchange import leaderboard, readers
from posteriorjax.exchange.export import write as export_write
from posteriorjax.metrics import posterior
from posteriorjax.reference import exact, heldout
from posteriorjax.sweep import given as given_cases
from posteriorjax.sweep import migrate, store
from posteriorjax.sweep.plan import Plan
from posteriorjax.sweep.settings import settings

TASK, RES, K, N, M = "poisson_fixed", 8, 3, 64, 64


# PosteriorBench's metric code, transcribed (NumPy, float64): the peer benchmark's baseline
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from bench.posteriorbench_metrics import evaluate as pb_evaluate  # noqa: E402
from bench.posteriorbench_metrics import normalize_weights as pb_normalize_weights  # noqa: E402
from bench.posteriorbench_metrics import spectral as pb_spectral  # noqa: E402


def ours(x, y, wx, wy, mean, std):
    """The suite's PosteriorBench metrics on `(N, 1, H, W)` float32 fields, as the sweep runs them."""
    x, y = np.asarray(x, np.float32)[:, None], np.asarray(y, np.float32)[:, None]
    wx, wy = np.asarray(wx, np.float32), np.asarray(wy, np.float32)
    return {
        "mean_error": float(posterior.mean_error(x, y, wy, weights=wx)),
        "std_error": float(posterior.std_error(x, y, wy, weights=wx)),
        "mmd": float(posterior.mmd(x, y, wy, weights=wx)),
        "swd": float(posterior.sliced_wasserstein(x, y, wy, weights=wx, field_stats=(mean, std))),
        "spectral_error_published": float(posterior.spectral_error(x, y, wy, weights=wx, include_dc=True)),
    }


def _smooth(rng, num, shape, length=4.0):
    """Smooth Matern-like GRF samples `(num, H, W)` (power ~ |k|^-6, not zero-mean). Task-like: a
    Gaussian low-pass would push the high bins below float32 resolution, where any two float32
    pipelines (and float64 on float32-stored values) disagree by their round-off."""
    ky, kx = np.fft.fftfreq(shape[0])[:, None], np.fft.fftfreq(shape[1])[None, :]
    filt = (1 + (2 * np.pi * length) ** 2 * (kx**2 + ky**2)) ** -1.5
    z = np.fft.ifft2(np.fft.fft2(rng.normal(size=(num, *shape))) * filt).real
    return 1.0 + z / z.std()


def _fields(kind, shape, seed):
    rng = np.random.default_rng(seed)
    if kind == "grf_task":  # the task's own zero-mean GRF prior (square)
        from posteriorjax import tasks

        prior = tasks.get(TASK, resolution=shape[0]).prior
        return np.asarray(jax.vmap(prior.sample)(jr.split(jr.key(seed), 24)))[:, 0], 0.0, 1.0
    x = _smooth(rng, 24, shape)
    if kind == "darcy":  # binary permeability {3, 12} of a thresholded smooth field
        return np.where(x > 1.0, 12.0, 3.0), 7.5, 4.5
    return x, 1.0, 1.0


@pytest.mark.parametrize(
    "kind, shape", [("grf_task", (32, 32)), ("smooth", (32, 32)), ("smooth", (24, 40)), ("darcy", (32, 32)),
                    ("darcy", (40, 24))],
)  # fmt: skip
def test_every_posteriorbench_metric_matches_its_code(kind, shape):
    """Mean, Std, MMD, SWD and Spectral (DC kept) within 1e-4 of the transcription, float32 inputs,
    uniform and weighted generated ensembles; the 64 x 64 task GRF, whose DC bin is round-off, too."""
    x, mean, std = _fields(kind, shape, 0)
    y, *_ = _fields(kind, shape, 1)
    x, y = x.astype(np.float32), y.astype(np.float32)
    rng = np.random.default_rng(2)
    for wx in (np.ones(len(x)), rng.uniform(0.1, 1.0, len(x))):
        wy = rng.uniform(0.5, 1.0, len(y))
        want = pb_evaluate(x, y, wx, wy, mean, std)
        got = ours(x, y, wx / wx.sum(), wy / wy.sum(), mean, std)
        for m in want:
            np.testing.assert_allclose(got[m], want[m], rtol=1e-4, err_msg=f"{kind} {shape}: {m}")


def test_spectral_dc_bin_of_zero_mean_fields_matches_float64():
    """The Poisson GRF is exactly zero-mean: bin 0 is round-off and crosses 1e-10 at 64 x 64. Our DC
    term (a compensated sum) agrees with the float64 evaluation; the plain float32 FFT sum did not."""
    x, *_ = _fields("grf_task", (64, 64), 0)
    y, *_ = _fields("grf_task", (64, 64), 1)
    u = np.ones(len(x))
    want = pb_spectral(x, y, u, u)
    got = float(posterior.spectral_error(x[:, None], y[:, None], include_dc=True))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    s = posterior.compensated_sum(np.asarray(x.reshape(len(x), -1), np.float32))
    np.testing.assert_allclose(
        np.asarray(s), x.reshape(len(x), -1).astype(np.float64).sum(1), rtol=1e-3, atol=1e-9
    )


# ----------------------------------------------------------------------------
# The exported study


def _config(**overrides):
    c = ml_collections.ConfigDict()
    c.seed, c.seeds, c.num_cases, c.num_samples = 0, (0,), K, N
    c.chunk_size, c.batch_size, c.overwrite = 4, 2, False
    c.tasks = {TASK: {"resolution": RES, "num_sensors": 12}}
    c.reference = sweep.reference_config("exact", num_samples=M)
    c.references, c.samplers = {}, {"exact": {}}
    c.training, c.diagnostics, c.save_samples, c.figures = {"scale": "tiny"}, (), 0, False
    c.update(overrides)
    return c


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    wd = tmp_path_factory.mktemp("heldout")
    config = _config()
    directory = exchange.export(config, wd)[TASK]
    plan = Plan.build(settings(config))
    ids = [f"{TASK}_{i}" for i in range(K)]
    task, cases = plan.tasks[TASK], plan.cases(TASK)
    draws = np.stack(
        [np.asarray(exact.sample(jr.key(100 + i), task, y, N)) for i, y in enumerate(cases.y_obs)]
    )
    public = files.read_array_file(directory / "reference.npz")["ref_samples"]
    rng = np.random.default_rng(0)
    pick = rng.integers(0, M, (K, N))
    cheat = np.take_along_axis(public, pick[:, :, None, None, None], 1)
    cheat = cheat + 0.05 * public.std(axis=1, keepdims=True) * rng.normal(size=cheat.shape)
    paths = {}
    for name, x in {"exact": draws, "cheat": cheat}.items():
        paths[name] = wd / f"{name}.npz"
        np.savez(paths[name], samples=x.astype(np.float32), case_ids=np.asarray(ids))
    records = {"exact": exchange.evaluate(wd, TASK, paths["exact"], name="exact")}
    with pytest.warns(UserWarning, match="cheat: scores on the public reference are better"):
        records["cheat"] = exchange.evaluate(wd, TASK, paths["cheat"], name="cheat")
    return {"wd": wd, "dir": directory, "plan": plan, "ids": ids, "draws": draws, "records": records}


def _means(records, prefix=""):
    return {m: float(np.mean([r.metrics[prefix + m] for r in records])) for m in heldout.PUBLIC_METRICS}


def test_the_heldout_set_is_disjoint_and_never_exported(study):
    plan, wd = study["plan"], study["wd"]
    h, hw, rep = plan.reference(TASK, wd, lead=True, progress=False)
    p, pw, _ = plan.reference(TASK, wd, lead=True, progress=False, which=heldout.PUBLIC)
    assert rep["set"] == heldout.HELDOUT and h.shape == p.shape and hw.shape == pw.shape
    assert not np.isin(h.reshape(-1)[:1000], p.reshape(-1)).any()  # independent draws
    exported = files.read_array_file(study["dir"] / "reference.npz")["ref_samples"]
    np.testing.assert_array_equal(exported, p)
    readme = json.loads((study["dir"] / "README.json").read_text())
    assert readme["reference_set"].startswith("public")
    assert (wd / "references" / f"{TASK}.heldout" / "manifest.json").is_file()


def test_resampling_the_public_reference_no_longer_wins_and_is_flagged(study):
    """Copying the exported draws with 5 % noise beats exact on the public set, not on the held-out one."""
    ex, ch = study["records"]["exact"], study["records"]["cheat"]
    public_ex, public_ch = _means(ex, "public_"), _means(ch, "public_")
    held_ex, held_ch = _means(ex), _means(ch)
    assert public_ch["mmd"] < public_ex["mmd"] and public_ch["swd"] < public_ex["swd"]  # the exploit
    for m in ("mean_error", "mmd", "swd"):
        assert held_ch[m] >= 0.9 * held_ex[m], m  # no longer a win on the held-out set
    gap_ch, gap_ex = heldout.gaps(held_ch, public_ch), heldout.gaps(held_ex, public_ex)
    limit_ch, limit_ex = heldout.record_threshold(ch), heldout.record_threshold(ex)
    assert set(heldout.flagged(gap_ch, limit_ch)) == set(heldout.GAP_METRICS) and min(gap_ch.values()) > 1.5
    assert not heldout.flagged(gap_ex, limit_ex)  # exact draws: within the two-reference spread
    with pytest.warns(UserWarning, match=r"above the threshold\): .*mmd"):
        exchange.evaluate(study["wd"], TASK, study["wd"] / "cheat.npz", name="cheat", replace=True)
    board = leaderboard.table(store.read_records(study["wd"] / "results.jsonl"))
    line = next(x for x in board.splitlines() if "| cheat |" in x)
    assert "⚠" in line and "Rule: ranked by the mean rank" in board


def test_the_gap_threshold_follows_the_spread_between_heldout_halves():
    """max(1.08, exp(3 s / sqrt(K))), s = rms(log half ratios) / sqrt(2): known values."""
    d = {m: [0.1, -0.1, 0.1] for m in heldout.GAP_METRICS}
    np.testing.assert_allclose(heldout.threshold(d, 3)["mmd"], np.exp(3 * 0.1 / np.sqrt(2) / np.sqrt(3)))
    assert heldout.threshold({m: [0.01, -0.01] for m in heldout.GAP_METRICS}, 2)["swd"] == 1.08
    assert heldout.threshold({"mmd": [None, 0.1]}, 2)["mmd"] == 1.08  # a NaN half: the published target
    assert heldout.flagged({"mmd": 1.2, "swd": 1.2}, {"mmd": 1.1, "swd": 1.3}) == {"mmd": 1.2}
    samples, weights = np.arange(2 * 5).reshape(2, 5, 1, 1, 1), np.full((2, 5), 0.2)
    (a, wa), (b, wb) = heldout.halves(samples, weights)
    assert a[:, :, 0, 0, 0].tolist() == [[0, 2, 4], [5, 7, 9]] and b.shape[1] == 2
    np.testing.assert_allclose(wa.sum(1), 1.0) and np.testing.assert_allclose(wb, 0.5)
    with pytest.raises(ValueError, match="at least 4 reference members"):
        heldout.halves(samples[:, :3], weights[:, :3])


def test_records_say_what_they_were_scored_on(study, tmp_path):
    r = study["records"]["exact"][0]
    assert r.scored["reference"]["set"] == "heldout" and r.scored["reference"]["method"] == "exact"
    h, hw, _ = study["plan"].reference(TASK, study["wd"], lead=True, progress=False)
    assert r.scored["reference"]["sha256"] == heldout.checksum(h, hw)
    samples = r.scored["samples"]
    assert samples["reader"] == "npz" and samples["dtype"] == "float32" and not samples["weighted"]
    assert samples["sha256"] == files.file_digest(study["wd"] / "exact.npz")
    assert r.metrics["ess"] == N
    # given cases: the cases file's path, checksum and ids; float64 samples accepted and stated
    path = study["wd"] / "f64.npz"
    np.savez(path, samples=study["draws"].astype(np.float64), case_ids=np.asarray(study["ids"]))
    (rec,) = exchange.evaluate(study["wd"], TASK, path, name="f64", cases_file=study["dir"] / "cases.npz")[:1]
    assert rec.scored["samples"]["dtype"] == "float64"
    assert rec.scored["cases_file"]["case_ids"] == study["ids"]
    assert rec.scored["cases_file"]["sha256"] == files.file_digest(study["dir"] / "cases.npz")
    # this workdir's own export as a cases file: still the held-out set (the exported one never scores)
    assert rec.scored["reference"] == r.scored["reference"] and "public_mmd" in rec.metrics
    line = next(x for x in (study["wd"] / "results.jsonl").read_text().splitlines() if '"f64"' in x)
    assert store.Record.from_dict(
        {k: v for k, v in json.loads(line).items() if k not in ("digest", "config_hash")}
    )
    # cases from elsewhere (here: another reference beside the same cases) score on their own reference
    other = tmp_path / "other"
    other.mkdir()
    for name in ("cases", "truth", "reference"):
        arrays = files.read_array_file(study["dir"] / f"{name}.npz")
        if name == "reference":
            arrays["ref_samples"] = arrays["ref_samples"][:, ::-1] * 1.01
        np.savez(other / f"{name}.npz", **arrays)
    (rec,) = exchange.evaluate(study["wd"], TASK, path, name="f64_other", cases_file=other / "cases.npz")[:1]
    assert rec.scored["reference"]["set"] == "given" and "public_mmd" not in rec.metrics


def test_weighted_metrics_are_posteriorbenchs_to_1e6(x64):
    """The weighted definitions (normalized weights, weighted moments, MMD V-statistic, weighted
    W1, weighted spectra) equal the transcription to 1e-6 on the same arrays in float64."""
    for kind, shape in (("grf_task", (32, 32)), ("darcy", (24, 40))):
        x, mean, std = _fields(kind, shape, 0)
        y, *_ = _fields(kind, shape, 1)
        rng = np.random.default_rng(4)
        wx, wy = rng.uniform(0.0, 1.0, len(x)), rng.uniform(0.0, 1.0, len(y))
        want = pb_evaluate(x, y, wx, wy, mean, std)
        xx, yy = np.asarray(x, np.float64)[:, None], np.asarray(y, np.float64)[:, None]
        wxn, wyn = readers.normalize_weights(wx, len(x), "wx"), readers.normalize_weights(wy, len(y), "wy")
        np.testing.assert_allclose(wxn, pb_normalize_weights(wx, len(x)), rtol=1e-15)
        got = {
            "mean_error": posterior.mean_error(xx, yy, wyn, weights=wxn),
            "std_error": posterior.std_error(xx, yy, wyn, weights=wxn),
            "mmd": posterior.mmd(xx, yy, wyn, weights=wxn),
            "swd": posterior.sliced_wasserstein(xx, yy, wyn, weights=wxn, field_stats=(mean, std)),
            "spectral_error_published": posterior.spectral_error(xx, yy, wyn, weights=wxn, include_dc=True),
        }
        for m, v in want.items():
            np.testing.assert_allclose(float(got[m]), v, rtol=1e-6, err_msg=f"{kind}: {m}")


def test_a_weighted_file_scores_as_posteriorbench(study):
    """A weighted file, scored as the sweep scores (float32), gives PosteriorBench's numbers on the same
    arrays (within float32 rounding: 1e-5; measured <= 2e-6) and records its Kish ESS; the metrics
    without a weighted form are NaN, never the unweighted value."""
    x = study["draws"].astype(np.float32)
    w = np.random.default_rng(3).uniform(0.0, 1.0, (K, N))
    path = study["wd"] / "weighted.npz"
    np.savez(path, samples=x, case_ids=np.asarray(study["ids"]), weights=w)
    records = exchange.evaluate(study["wd"], TASK, path, name="weighted")
    h, hw, _ = study["plan"].reference(TASK, study["wd"], lead=True, progress=False)
    stats = [float(v) for v in study["plan"].tasks[TASK].field_stats]
    for r in records:
        c = r.case
        wn = pb_normalize_weights(w[c], N)
        want = pb_evaluate(x[c, :, 0], h[c, :, 0], wn, hw[c], *stats)
        for m, v in want.items():
            np.testing.assert_allclose(r.metrics[m], v, rtol=1e-5, err_msg=m)
        np.testing.assert_allclose(r.metrics["ess"], 1 / np.sum(wn**2), rtol=1e-12)
        assert r.metrics["crps"] is None and r.metrics["tarp_credibility"] is None
        assert r.metrics["num_samples"] == N and r.scored["samples"]["weighted"]


def test_replace_rewrites_a_label_atomically_keeping_the_old_file(study):
    wd = study["wd"]
    with pytest.raises(ValueError, match="already holds records of sampler 'exact'.*--replace"):
        exchange.evaluate(wd, TASK, wd / "exact.npz", name="exact")
    before = (wd / "results.jsonl").read_text()
    with pytest.warns(UserWarning, match="the samples may have been fit to the exported reference"):
        new = exchange.evaluate(wd, TASK, wd / "cheat.npz", name="exact", replace=True)
    asides = sorted(wd.glob("results.jsonl.replaced*"))
    assert asides and asides[-1].read_text() == before
    rows = [r for r in store.read_records(wd / "results.jsonl") if r.sampler == "exact"]
    assert len(rows) == K and [r.metrics for r in rows] == [r.metrics for r in new]
    assert not store.verify_workdir(wd)


def test_pre_split_workdirs_are_refused_until_migrated(study, tmp_path):
    wd = tmp_path / "old"
    exchange.export(_config(), wd)
    old = store.Record(TASK, "old", "case=0;seed=0", 0, 0, 0, {}, N, {"mmd": 0.1}, 0.0, 0.0)
    store.ResultsFile(wd / "results.jsonl", store.workdir_config_hash(wd)).append([old])
    with pytest.raises(
        ValueError,
        match=r"(?s)earlier version.*experiments\.migrate.*1 record\(s\) scored before the held-out split",
    ):
        exchange.evaluate(wd, TASK, study["wd"] / "exact.npz", name="new")
    done = migrate.migrate(wd)
    assert done["results"]["set_aside"] == 1 and (wd / migrate.ASIDE).read_text().count('"old"') == 1
    assert store.read_records(wd / "results.jsonl") == [] and migrate.earlier_formats(wd) == []
    assert done["tasks"][TASK]["set"] == "heldout"
    assert exchange.evaluate(wd, TASK, study["wd"] / "exact.npz", name="new")


def test_missing_optional_readers_name_what_to_install(study, tmp_path, monkeypatch):
    x = study["draws"].astype(np.float32)
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(ModuleNotFoundError, match=r"posteriorjax\[exchange\]"):
        export_write(
            tmp_path / "x",
            study["plan"].tasks[TASK],
            study["ids"],
            study["plan"].cases(TASK),
            ref_samples=x,
            ref_weights=None,
        )
    with pytest.raises(ModuleNotFoundError, match=r"PosteriorBench predictions.*posteriorjax\[exchange\]"):
        (tmp_path / "pb" / study["ids"][0]).mkdir(parents=True)
        readers.read_ensemble(tmp_path / "pb", study["ids"], (1, RES, RES))
    monkeypatch.setitem(sys.modules, "torch", None)
    (tmp_path / "s.pt").write_bytes(b"")
    with pytest.raises(ModuleNotFoundError, match="pip install torch"):
        readers.read_ensemble(tmp_path / "s.pt", study["ids"], (1, RES, RES))
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ModuleNotFoundError, match=r"posteriorjax\[posteriorbench\]"):
        given_cases._datasets()
    w = np.full(x.shape[:2], 1.0 / N)
    task, cases = study["plan"].tasks[TASK], study["plan"].cases(TASK)
    out = export_write(tmp_path / "npz", task, study["ids"], cases, ref_samples=x, ref_weights=w, h5=False)
    assert out["reference"].suffix == ".npz" and not list((tmp_path / "npz").glob("*.h5"))
