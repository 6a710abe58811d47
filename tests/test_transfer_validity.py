"""Model validity in the transfer study: constant, diverged and untrained models mark their blocks."""

import json
import types

import ml_collections
import numpy as np
import pytest

from posteriorjax.studies.transfer import data, pipeline, protocol
from posteriorjax.training import health

N = 16


def test_training_problem_closed_cases():
    steps = np.arange(40, dtype=np.float64)
    assert health.training_problem(1.0 / (1.0 + steps)) is None  # learns
    assert health.training_problem(np.full(40, 0.7)).startswith("stayed at its initial loss")
    assert health.training_problem(0.7 * (1 + 1e-3 * steps)).startswith("stayed at its initial loss")
    grows = health.training_problem(np.linspace(1.0, 3.0, 40))
    assert grows.startswith("diverged: final training loss") and "limit 1.25" in grows
    assert (
        health.training_problem(np.r_[1.0, 0.5, np.nan, 0.2])
        == "diverged: non-finite training loss from step 2"
    )
    with pytest.raises(ValueError, match="losses: expected at least one"):
        health.training_problem([])


def test_a_constant_predictor_marks_its_block_and_leaves_every_mean():
    rng = np.random.default_rng(0)
    target = rng.standard_normal((5, 1, N, N))
    masks = rng.random((5, N, N)) < 0.5
    record = np.arange(5)
    good = protocol.score_block(record, target + 0.1 * rng.standard_normal(target.shape), target, masks)
    const = protocol.score_block(record, np.full_like(target, 0.3), target, masks)
    assert good.problem is None and np.all(good.spread > 0.9)
    np.testing.assert_allclose(const.spread, 0.0, atol=1e-12)
    assert const.problem.startswith("near-constant prediction: median spatial spread ratio")
    blocks = {(v, w): good for v in data.VIEWS for w in data.VIEWS}
    blocks[("H", "V")] = const
    with pytest.raises(protocol.InvalidBlockError, match="train H / test V: invalid block: near-constant"):
        protocol.error_matrix(blocks, record)
    matrix = protocol.error_matrix(blocks, record, strict=False)
    assert np.isnan(matrix[1, 2]) and np.isfinite(np.delete(matrix.ravel(), 11)).all()
    assert protocol.invalid_blocks(blocks, record) == {("H", "V"): const.problem}
    with pytest.raises(ValueError, match="matrix"):
        protocol.summarize(matrix)


def _records():
    rng = np.random.default_rng(1)
    records = np.r_[
        data.record_ids(0, np.repeat([0, 1, 2], 4), np.tile(np.arange(4), 3)),
        data.record_ids(1, [0, 1, 2], [0, 0, 0]),
    ]
    state = (rng.standard_normal((15, 3)) @ rng.standard_normal((3, N * N))).reshape(15, 1, N, N)
    state = state.astype(np.float32)
    split = np.r_[np.zeros(12), np.ones(3)].astype(np.int64)
    cond = rng.standard_normal((15, 1, N, N)).astype(np.float32)
    return data.Dataset(
        "poisson_field",
        N,
        20260804,
        records,
        records // data.RECORD_BLOCK % 3,
        split,
        cond,
        state,
        state,
        state,
    )


def _config(models, model_config):
    return ml_collections.ConfigDict(
        dict(
            families=("poisson_field",),
            models=models,
            mixed_models=(),
            resolution=N,
            num_train=12,
            num_test=3,
            seed=0,
            mask_seed=20260804,
            model_config=model_config,
        )
    )


def test_an_untrained_model_is_invalid_in_the_report(tmp_path, monkeypatch):
    ds = _records()
    monkeypatch.setattr(data, "make_dataset", lambda *a, **k: ds)
    frozen = dict(
        scale="tiny", steps=10, batch_size=12, learning_rate=1e-30, model=dict(width=4, modes=3, layers=1)
    )
    out = pipeline.run(_config(("fno",), {"fno": frozen}), tmp_path)
    res = out["analysis"][("poisson_field", "fno")]
    assert "summary" not in res and np.isnan(res["matrix"]).all()
    assert len(res["invalid_all"]) == 81 + 18  # the 9 x 9 matrix and the two extra densities
    assert all(r.startswith("stayed at its initial loss") for r in res["invalid_all"].values())
    text = (tmp_path / "summary.md").read_text()
    assert "| poisson_field | — (none, 0) | 16.58 | — | 1 (fno) |" in text
    assert "- poisson_field / fno: 99 block(s) stayed at its initial loss, training views R50, H, V" in text
    assert "Invalid blocks (excluded from every mean above)\n\nnone" not in text
    assert "| poisson_field | fno | R50 |" in text and "| no: stayed at its initial loss" in text


def test_a_constant_model_is_invalid_in_the_report(tmp_path, monkeypatch):
    """A learned model (here a stand-in) that trains well but predicts one value everywhere."""
    ds = _records()
    monkeypatch.setattr(data, "make_dataset", lambda *a, **k: ds)

    def fit_views(key, name, inputs, targets, *, config, dataset, return_losses=False):
        return "fitted", np.linspace(1.0, 0.1, 20)[:, None].repeat(inputs.shape[0], 1)

    def predict(fitted, inputs):
        return np.full((9, inputs.shape[0], 1, N, N), 0.25, np.float32)

    constant = types.SimpleNamespace(fit_views=fit_views, predict=predict)
    real = pipeline.backend
    monkeypatch.setattr(pipeline, "backend", lambda name: constant if name == "const" else real(name))
    monkeypatch.setattr(pipeline, "block_hash", lambda config, family, model: "h")
    config = _config(
        ("gappy_pod", "const"), {"gappy_pod": {"ranks": (3,), "noises": (1e-6,), "fit_records": 4}}
    )
    out = pipeline.run(config, tmp_path)
    const, pod = out["analysis"][("poisson_field", "const")], out["analysis"][("poisson_field", "gappy_pod")]
    assert "summary" in pod and not pod["invalid_all"]
    assert "summary" not in const and len(const["invalid_all"]) == 99
    assert all(r.startswith("near-constant prediction") for r in const["invalid_all"].values())
    assert all(t["problem"] is None for t in const["training"].values())  # its training looked fine
    text = (tmp_path / "summary.md").read_text()
    assert "| 1 (const) |" in text
    assert "- poisson_field / const: 99 block(s) near-constant prediction, training views R50" in text
    assert "(invalid)" in (tmp_path / "cells.md").read_text()
    # the family median uses the valid pair only
    assert out["family_median_cd"]["poisson_field"] == pytest.approx(pod["summary"].ratio)


def test_a_subset_of_models_gives_the_same_blocks_as_the_full_list(tmp_path, monkeypatch):
    """Each block's key is named by (family, model): running fno alone equals fno after gappy POD."""
    ds = _records()
    monkeypatch.setattr(data, "make_dataset", lambda *a, **k: ds)
    tiny = dict(scale="tiny", steps=3, batch_size=4)
    model_config = {
        "gappy_pod": {"ranks": (3,), "noises": (1e-6,), "fit_records": 4},
        "fno": tiny | {"model": dict(width=4, modes=3, layers=1)},
    }
    pipeline.run(_config(("gappy_pod", "fno"), model_config), tmp_path / "all")
    pipeline.run(_config(("fno",), model_config), tmp_path / "one")
    read = lambda d: json.loads((tmp_path / d / "blocks" / "poisson_field__fno.json").read_text())  # noqa: E731
    assert (
        read("one")["blocks"] == read("all")["blocks"] and read("one")["training"] == read("all")["training"]
    )
