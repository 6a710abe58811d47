"""Observation-pattern transfer: views and masks, validity, C/D and ratios, baselines, end to end."""

import json

import jax.random as jr
import ml_collections
import numpy as np
import pytest

from posteriorjax.studies.transfer import baselines, data, pipeline, protocol

N = 32
M = 16  # grid of the baseline tests
# realized counts at 32 x 32: random 0.5/0.65/0.8/0.2/0.35 of 1024 (half up); H, V: 16 lines;
# BL: a 22 x 22 hole; LI: 10 rows + 10 columns; BD: band of width 5 (the equal-count groups)
COUNTS = {
    "R50": 512, "H": 512, "V": 512, "CL": 512, "BL": 540, "LI": 540, "BD": 540, "R65": 666, "R80": 819,
    "random20": 205, "random35": 358, "random50": 512, "random65": 666, "random80": 819,
}  # fmt: skip


def synthetic(records, family="darcy_field", n=N, channels=1, seed=0, split=None) -> data.Dataset:
    """A dataset of random fields with the given record ids (masks only depend on the ids)."""
    records = np.asarray(records, np.int64)
    rng = np.random.default_rng(seed)
    m = len(records)
    forecast = family in data.FORECAST
    state = rng.standard_normal((m, 4 if forecast else 1, n, n)).astype(np.float32)
    observed, target = (state[:, :1], state[:, 1:]) if forecast else (state, state)
    return data.Dataset(
        family,
        n,
        20260804,
        records,
        records // data.RECORD_BLOCK % 3,
        np.zeros(m, np.int64) if split is None else np.asarray(split, np.int64),
        rng.standard_normal((m, 1, n, n)).astype(np.float32),
        state,
        observed,
        target,
    )


@pytest.fixture(scope="module")
def ids():
    return data.record_ids(1, np.array([0, 0, 1, 1, 2, 2]), np.array([0, 1, 0, 1, 0, 1]))


def test_record_ids_are_stable_and_distinct(ids):
    assert ids.tolist() == [3 * 2**24, 3 * 2**24 + 1, 4 * 2**24, 4 * 2**24 + 1, 5 * 2**24, 5 * 2**24 + 1]
    train = data.record_ids(0, np.array([0, 1, 2]), np.array([0, 0, 0]))
    assert not set(train) & set(ids)


def test_exact_counts_per_view(ids):
    ds = synthetic(ids)
    for view, count in COUNTS.items():
        masks = data.view_masks(ds, view)
        assert masks.shape == (len(ids), N, N) and masks.dtype == bool
        np.testing.assert_array_equal(masks.sum(axis=(1, 2)), count, err_msg=view)
        if view not in ("BD",):  # the boundary band is deterministic; every other view varies per record
            assert len({m.tobytes() for m in masks}) > 1, view
        x = data.view_inputs(ds, view)
        assert x.shape == (len(ids), 2, N, N) and x.dtype == np.float32
        np.testing.assert_array_equal(x[:, 1] > 0, masks)
        np.testing.assert_array_equal(x[:, 0], np.where(masks, ds.observed[:, 0], 0.0))
    # density views are drawn separately: 20 % is not nested in 35 %
    lo, hi = data.view_masks(ds, "random20"), data.view_masks(ds, "random35")
    assert np.any(lo & ~hi)
    # the mixture takes one of the nine views per record
    mix = data.view_masks(ds, data.MIXTURE)
    for i in range(len(ids)):
        assert any(np.array_equal(mix[i], data.view_masks(ds.select([i]), v)[0]) for v in data.VIEWS)
    with pytest.raises(ValueError, match="view"):
        data.view_masks(ds, "R90")


def test_same_record_same_mask_across_datasets(ids):
    a = synthetic(ids, seed=0)
    b = synthetic(ids[::-1][:4], seed=1)  # other order, subset, other fields
    for view in (*data.VIEWS, *data.DENSITY_VIEWS, data.MIXTURE):
        ma, mb = data.view_masks(a, view), data.view_masks(b, view)
        for j, r in enumerate(b.record):
            np.testing.assert_array_equal(mb[j], ma[list(a.record).index(r)], err_msg=view)


@pytest.mark.slow
def test_make_dataset_records_are_stable_across_split_sizes():
    small = data.make_dataset("heat_field", 16, 4, 3, 0)
    big = data.make_dataset("heat_field", 16, 6, 3, 0)
    common = np.intersect1d(small.record, big.record)
    assert common.size == 7
    for r in common:
        np.testing.assert_allclose(
            small.state[small.record == r], big.state[big.record == r], rtol=1e-6, atol=1e-6
        )


# ----------------------------------------------------------------------------
# Protocol


def test_relative_l2_full_and_hidden():
    target = np.zeros((2, 1, 2, 2))
    target[0, 0] = [[3.0, 0.0], [0.0, 4.0]]
    target[1, 0] = [[1.0, 1.0], [1.0, 1.0]]
    pred = target.copy()
    pred[0, 0, 1, 1] = 0.0  # error 4 on a field of norm 5
    pred[1, 0, 0, 0] = 2.0  # error 1 on a field of norm 2
    np.testing.assert_allclose(protocol.relative_l2(pred, target), [0.8, 0.5])
    hidden = np.array([[[False, False], [False, True]], [[False, True], [True, True]]])
    np.testing.assert_allclose(protocol.relative_l2(pred, target, hidden=hidden), [1.0, 0.0])


def test_summary_on_a_hand_built_matrix():
    e = np.full((9, 9), 0.4)
    np.fill_diagonal(e, 0.1)
    e[0, 1] = 1.2  # R50-trained model on H
    e[4, 4] = 0.2
    s = protocol.summarize(e)
    d = (8 * 0.1 + 0.2) / 9
    c = (71 * 0.4 + 1.2) / 72
    assert s.D == pytest.approx(d) and s.C == pytest.approx(c) and s.ratio == pytest.approx(c / d)
    assert s.transfer[0, 1] == pytest.approx(12.0) and s.transfer[3, 4] == pytest.approx(2.0)
    np.testing.assert_allclose(np.diag(s.transfer), 1.0)
    assert s.cross_max == pytest.approx(1.2) and s.cross_median == pytest.approx(0.4)
    layout = protocol.layout_comparison(e)
    assert layout[0]["worse"] == 12 and layout[0]["total"] == 12
    assert layout[1]["total"] == 6 and layout[1]["median_ratio"] == pytest.approx(
        4.0
    )  # 0.4/0.2 (x2), 0.4/0.1 (x4)
    mix = protocol.mixed_ratios(np.full(9, 0.2), e)
    np.testing.assert_allclose(mix["ratio"], np.where(np.arange(9) == 4, 1.0, 2.0))
    assert mix["geometric_mean"] == pytest.approx(2 ** (8 / 9))
    assert mix["transferred_max"][1] == pytest.approx(12.0)
    assert mix["beats_median_transfer"] == 9
    sweep = protocol.density_sweep(dict(zip(data.DENSITY_VIEWS, [0.5, 0.3, 0.1, 0.2, 0.05], strict=True)))
    np.testing.assert_allclose(sweep["ratio_to_r50"], [5.0, 3.0, 1.0, 2.0, 0.5])
    assert sweep["denser_lower"] == 1 and sweep["denser_total"] == 2
    with pytest.raises(ValueError, match="matrix"):
        protocol.summarize(np.where(np.eye(9, dtype=bool), np.nan, e))
    # counts that are not equal are said so (the 32 x 32 layouts of the `posteriorjax` scheme)
    counts = dict(R50=512, H=512, V=512, CL=512, BL=540, LI=518, BD=540)
    flagged = protocol.layout_comparison(e, counts=counts)
    assert [g["equal_count"] for g in flagged] == [True, False] and flagged[1]["cells"]["LI"] == [518]


def _blocks(expected, error=0.1):
    rec = np.asarray(expected)
    return {
        (v, w): protocol.Block(rec, np.full(rec.size, error if v == w else 2 * error), np.full(rec.size, 0.3))
        for v in data.VIEWS
        for w in data.VIEWS
    }


@pytest.mark.parametrize(
    "defect, reason",
    [("missing", "missing"), ("duplicated", "duplicated"), ("nan", "non-finite"), ("absent", "not computed")],
)
def test_invalid_blocks_are_rejected(defect, reason):
    expected = np.arange(10, 20)
    blocks = _blocks(expected)
    assert protocol.summarize(protocol.error_matrix(blocks, expected)).ratio == pytest.approx(2.0)
    rec, err = blocks[("H", "V")].record.copy(), blocks[("H", "V")].error.copy()
    if defect == "missing":
        rec, err = rec[:-1], err[:-1]
    elif defect == "duplicated":
        rec[3] = rec[4]
    elif defect == "nan":
        err[2] = np.nan
    if defect == "absent":
        del blocks[("H", "V")]
    else:
        blocks[("H", "V")] = protocol.Block(rec, err, np.full(rec.size, 0.3))
    with pytest.raises(protocol.InvalidBlockError, match=f"train H / test V.*{reason}"):
        protocol.error_matrix(blocks, expected)
    loose = protocol.error_matrix(blocks, expected, strict=False)
    assert np.isnan(loose[1, 2]) and np.isfinite(np.delete(loose.ravel(), 9 + 2)).all()
    assert reason in protocol.invalid_blocks(blocks, expected)[("H", "V")]


# ----------------------------------------------------------------------------
# Baselines


def test_rbf_is_exact_when_everything_is_observed(ids):
    ds = synthetic(ids, n=M, split=np.zeros(len(ids)))
    full = data.masked_inputs(ds.observed, np.ones((len(ids), M, M), bool))
    models = baselines.fit_views(
        jr.key(0),
        "rbf",
        np.stack([full, full]),
        ds.target,
        config={"fit_records": 2, "length_scales": (0.1,)},
        dataset=ds,
    )
    pred = np.asarray(baselines.predict(models, full))
    assert pred.shape == (2, len(ids), 1, M, M)
    np.testing.assert_array_equal(pred[0], ds.target)


def test_rbf_interpolates_a_smooth_field():
    y, x = np.meshgrid(np.arange(M), np.arange(M), indexing="ij")
    field = np.sin(2 * np.pi * x / M) * np.cos(2 * np.pi * y / M)
    mask = np.zeros((M, M), bool)
    mask[::2, ::2] = True
    rec = np.stack([field * mask, mask]).astype(np.float32)
    out = np.asarray(baselines.rbf_interpolate(rec, 2.0, ridge=1e-4, periodic=True, rtol=1e-6, max_steps=500))
    assert np.linalg.norm(out - field) / np.linalg.norm(field) < 0.02


@pytest.mark.parametrize("family", ["poisson_field", "burgers_field"])
def test_gappy_pod_recovers_a_low_rank_field(family):
    rng = np.random.default_rng(0)
    forecast = family in data.FORECAST
    c = 4 if forecast else 1
    modes = rng.standard_normal((3, c * M * M))
    coeff = rng.standard_normal((41, 3))
    state = (coeff @ modes).reshape(41, c, M, M).astype(np.float32)
    ds = synthetic(np.arange(41), family=family, n=M, channels=c)
    ds = data.Dataset(
        family, M, ds.mask_seed, ds.record, ds.regime, np.r_[np.zeros(40), 1].astype(np.int64),
        ds.condition, state, state[:, :1], state[:, 1:] if forecast else state,
    )  # fmt: skip
    train, test = ds.train, ds.test
    inputs = np.stack([data.view_inputs(train, v) for v in ("R50", "BL")])
    config = {"ranks": (3,), "noises": (1e-7,), "fit_records": 4}
    models = baselines.fit_views(jr.key(0), "gappy_pod", inputs, train.target, config=config, dataset=ds)
    pred = np.asarray(baselines.predict(models, data.view_inputs(test, "BD")))
    err = protocol.relative_l2(pred[1], test.target)
    assert pred.shape == (2, 1, c - 1 if forecast else 1, M, M) and err[0] < 1e-3


def test_baselines_reject_bad_input(ids):
    ds = synthetic(ids)
    x = data.view_inputs(ds, "R50")
    with pytest.raises(ValueError, match="inputs"):
        baselines.fit_views(jr.key(0), "rbf", x, ds.target, dataset=ds)
    with pytest.raises(ValueError, match="model_name"):
        baselines.fit_views(jr.key(0), "kriging", x[None], ds.target, dataset=ds)
    with pytest.raises(ValueError, match="config"):
        baselines.fit_views(jr.key(0), "rbf", x[None], ds.target, config={"length": 1.0}, dataset=ds)


# ----------------------------------------------------------------------------
# End to end


@pytest.fixture(scope="module")
def heat_run(tmp_path_factory):
    """The pipeline once on heat_field (16 x 16, 24/6 records, gappy POD with MIX)."""
    workdir = tmp_path_factory.mktemp("transfer")
    config = ml_collections.ConfigDict(
        dict(
            families=("heat_field",),
            models=("gappy_pod",),
            mixed_models=("gappy_pod",),
            resolution=16,
            num_train=24,
            num_test=6,
            seed=0,
            mask_seed=20260804,
            model_config={"gappy_pod": {"ranks": (4, 8), "noises": (1e-3,), "fit_records": 6}},
        )
    )
    return config, workdir, pipeline.run(config, workdir)


@pytest.mark.slow
def test_make_dataset_records_splits_and_cache(heat_run):
    config, workdir, _ = heat_run
    assert len(list((workdir / "data").glob("heat_field_*.npz"))) == 1
    ds = data.make_dataset("heat_field", 16, 24, 6, 0, cache_dir=workdir / "data")  # from the cache
    assert ds.state.shape == (30, 4, 16, 16) and ds.target.shape == (30, 3, 16, 16)
    np.testing.assert_array_equal(ds.split, [0] * 24 + [1] * 6)
    np.testing.assert_array_equal(ds.regime, [0] * 8 + [1] * 8 + [2] * 8 + [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(ds.record[24:], data.record_ids(1, [0, 0, 1, 1, 2, 2], [0, 1, 0, 1, 0, 1]))
    np.testing.assert_array_equal(ds.observed[:, 0], ds.state[:, 0])
    np.testing.assert_array_equal(ds.target, ds.state[:, 1:])
    assert np.isfinite(ds.state).all() and len(np.unique(ds.record)) == 30
    with pytest.raises(ValueError, match="family"):
        data.make_dataset("wave_field", 16, 4, 3, 0)


@pytest.mark.slow
def test_pipeline_runs_and_resumes(heat_run):
    config, workdir, out = heat_run
    res = out["analysis"][("heat_field", "gappy_pod")]
    assert res["matrix"].shape == (9, 9) and np.isfinite(res["matrix"]).all() and not res["invalid"]
    assert np.isfinite(res["summary"].ratio) and "density" in res and "mixed" in res
    figures = ("heatmaps.png", "density.png", "mixed.png")
    for name in ("summary.md", "results.json", *(f"figures/{f}" for f in figures)):
        assert (workdir / name).exists(), name
    block_file = workdir / "blocks" / "heat_field__gappy_pod.json"
    stamp = block_file.stat().st_mtime_ns
    pipeline.run(config, workdir)
    assert block_file.stat().st_mtime_ns == stamp  # finished block skipped
    stored = json.loads(block_file.read_text())
    # the nine single-view models and MIX, each scored on the nine views and the two density-only
    # views (random 20 %, 35 %), and MIX also on the unseen protocol (line 30 + random 20)
    assert set(stored["blocks"]) == {
        f"{v}|{w}" for v in (*data.VIEWS, "MIX") for w in (*data.VIEWS, "random20", "random35")
    } | {"MIX|line30_random20"}
    assert len(stored["expected"]) == 6


def test_per_frame_scores_and_horizon_matrices():
    rng = np.random.default_rng(0)
    target = rng.standard_normal((5, 3, 4, 4))
    pred = target + rng.standard_normal((5, 3, 4, 4)) * np.array([0.1, 0.2, 0.4])[None, :, None, None]
    masks = rng.random((5, 4, 4)) < 0.5
    block = protocol.score_block(np.arange(5), pred, target, masks)
    for c in range(3):
        num = np.linalg.norm((pred - target)[:, c].reshape(5, -1), axis=1)
        np.testing.assert_allclose(
            block.frames[:, c], num / np.linalg.norm(target[:, c].reshape(5, -1), axis=1)
        )
    blocks = {(v, w): block for v in data.VIEWS for w in data.VIEWS}
    m2 = protocol.error_matrix(blocks, np.arange(5), metric="frame2")
    np.testing.assert_allclose(m2, block.frames[:, 2].mean())
    with pytest.raises(ValueError, match="metric"):
        protocol.error_matrix(blocks, np.arange(5), metric="frames")


def test_pipeline_on_synthetic_records_runs_and_resumes(tmp_path, monkeypatch):
    """The whole protocol on a synthetic low-rank family (the solver-generated data: slow tier)."""
    rng = np.random.default_rng(1)
    records = np.r_[
        data.record_ids(0, np.repeat([0, 1, 2], 6), np.tile(np.arange(6), 3)),
        data.record_ids(1, [0, 1, 2], [0, 0, 0]),
    ]
    state = (rng.standard_normal((21, 4)) @ rng.standard_normal((4, 16 * 16))).reshape(21, 1, 16, 16)
    ds = synthetic(records, family="poisson_field", n=16, split=np.r_[np.zeros(18), np.ones(3)])
    ds = data.Dataset(
        "poisson_field",
        16,
        ds.mask_seed,
        ds.record,
        ds.regime,
        ds.split,
        ds.condition,
        state.astype(np.float32),
        state.astype(np.float32),
        state.astype(np.float32),
    )
    calls = []

    def make_dataset(family, resolution, num_train, num_test, seed, **kwargs):
        calls.append(family)
        return ds

    monkeypatch.setattr(data, "make_dataset", make_dataset)
    config = ml_collections.ConfigDict(
        dict(
            families=("poisson_field",),
            models=("gappy_pod",),
            mixed_models=("gappy_pod",),
            resolution=16,
            num_train=18,
            num_test=3,
            seed=0,
            mask_seed=20260804,
            model_config={"gappy_pod": {"ranks": (4,), "noises": (1e-6,), "fit_records": 4}},
        )
    )
    out = pipeline.run(config, tmp_path)
    res = out["analysis"][("poisson_field", "gappy_pod")]
    assert res["matrix"].shape == (9, 9) and not res["invalid"]
    assert res["matrix"].max() < 1e-3  # rank-4 records, rank-4 basis: every view recovers them
    assert "density" in res and "mixed" in res and np.isfinite(res["summary"].ratio)
    for name in (
        "summary.md",
        "results.json",
        "figures/heatmaps.png",
        "figures/density.png",
        "figures/mixed.png",
        "figures/heatmaps_mix.png",
        "figures/mix_density.png",
    ):
        assert (tmp_path / name).exists(), name
    assert "| poisson_field |" in (tmp_path / "summary.md").read_text()
    # the equal-count groups really are: 16 x 16, R50 = H = V = CL = 128, BL = LI = BD = 112 cells
    cells = [(g["equal_count"], sorted({tuple(c) for c in g["cells"].values()})) for g in res["layout"]]
    assert cells == [(True, [(128,)]), (True, [(112,)])]
    assert "| 112 each |" in (tmp_path / "summary.md").read_text()
    block_file = tmp_path / "blocks" / "poisson_field__gappy_pod.json"
    stamp = block_file.stat().st_mtime_ns
    pipeline.run(config, tmp_path)
    assert calls == ["poisson_field"] and block_file.stat().st_mtime_ns == stamp  # resumed: nothing redone
    stored = json.loads(block_file.read_text())
    # 81 cells, every row at random20/35, MIX on the nine views, two densities and line 30 / random 20
    assert len(stored["blocks"]) == 81 + 18 + 9 + 3 and stored["expected"] == records[18:].tolist()
    assert set(res["mix_unseen"]) == {"random20", "random35", "line30_random20"}
    assert len(res["density_all"]) == 9 and (tmp_path / "cells.md").exists()
    text = (tmp_path / "summary.md").read_text()
    assert "Table 65" in text and "Classical baselines per test view" in text


def test_block_hash_follows_the_forecast_protocol_and_resolved_defaults():
    from configs import observation_patterns
    from posteriorjax.studies.transfer import pipeline

    config = observation_patterns.get_config("tiny")
    assert config.forecast_mode == "rollout"
    before = {
        (f, m): pipeline.block_hash(config, f, m)
        for f in ("darcy_field", "heat_field")
        for m in ("fno", "gappy_pod")
    }
    assert pipeline.model_settings(config, "heat_field", "fno")["forecast_mode"] == "rollout"
    assert "forecast_mode" not in pipeline.model_settings(config, "darcy_field", "fno")
    config.forecast_mode = "joint_variant"
    after = {k: pipeline.block_hash(config, *k) for k in before}
    assert after[("heat_field", "fno")] != before[("heat_field", "fno")]
    for k in (("darcy_field", "fno"), ("darcy_field", "gappy_pod"), ("heat_field", "gappy_pod")):
        assert after[k] == before[k]
