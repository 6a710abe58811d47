"""The observation-pattern transfer experiment end to end, resumable per (family, model) block.

`run(config, workdir)`: for each family, the records (`data.make_dataset`,
cached under `workdir/data`), then for each model the nine per-view models
trained as one program on the training records under `data.VIEWS`, scored on
the test records under every view (the 9 x 9 blocks), every view's model
under the extra density views random20/35, and (for `config.mixed_models`)
one model trained on the balanced nine-view mixture, scored on the nine views,
the extra densities and the unseen protocol (line 30 / random 20). Each (family, model) result
is written to `workdir/blocks/{family}__{model}.json` (per-record ids and
errors of every block, timings, the configuration hash) as soon as it is
done; a rerun skips every block file whose hash matches. Finally
`report.write` builds the tables and figures from the block files.

Keys: block (family, model) trains from fold_in(fold_in(key(seed), crc32(family)),
crc32(model)), and a family's records depend on (family, resolution, split sizes, seed)
only, so a subset of families or models, or a run split over machines, gives the same
blocks. Validity: a learned model's training losses (`training.health.training_problem`)
and every block's prediction spread (`protocol.score_block`) decide whether its blocks are
valid; the block file records the reason (``problem``) and each model's initial and final
loss (``training``). Forecasting follows `config.forecast_mode` (``rollout``, PDE-OBS's
protocol, when unset; see `models`).

Model names resolve through an explicit registry: the classical baselines
(`baselines.MODELS`) and the learned models (`models.MODELS`); both provide
`fit_views(key, name, inputs, targets, *, config, dataset)` and
`predict(models, inputs)`.
"""

from __future__ import annotations

import dataclasses
import json
import time
import zlib
from pathlib import Path

import jax
import jax.random as jr
import numpy as np

from posteriorjax import files
from posteriorjax.studies.transfer import baselines, data, models, protocol, report
from posteriorjax.training import health

DENSITY_ONLY = ("random20", "random35")  # random50/65/80 reuse the R50/R65/R80 test views


def backend(name: str):
    """The module (`baselines` or `models`) that implements model `name`."""
    if name in baselines.MODELS:
        return baselines
    if name in models.MODELS + models.VARIANTS:
        return models
    raise ValueError(f"model: expected one of {available_models()}, got {name!r}")


def available_models() -> tuple[str, ...]:
    """Baselines, then the learned models and our variants."""
    return (*baselines.MODELS, *models.MODELS, *models.VARIANTS)


def _plain(value):
    return value.to_dict() if hasattr(value, "to_dict") else dict(value)


def model_settings(config, family: str, model: str) -> dict:
    """The settings `fit_views` gets for `model` on `family`: `config.model_config[model]`, and
    for a learned model the study's `forecast_mode` (``rollout``, PDE-OBS's protocol, when unset)."""
    settings = dict(_plain(config.model_config).get(model, {}))
    if backend(model) is not baselines and family in data.FORECAST:
        settings.setdefault("forecast_mode", config.get("forecast_mode", "rollout"))
    return settings


def block_hash(config, family: str, model: str) -> str:
    """SHA-256 (16 hex) of everything a (family, model) result depends on.

    A learned model enters with its resolved training settings (`models.fit_config`), so a
    change of a published default (the forecasting protocol, a weight decay) reruns its blocks.
    """
    model_config = model_settings(config, family, model)
    if backend(model) is not baselines:
        resolved = models.fit_config(model, model_config, forecast=family in data.FORECAST)
        model_config = {"resolved": dataclasses.asdict(resolved)}
    return files.json_digest(
        dict(
            family=family,
            model=model,
            resolution=config.resolution,
            num_train=config.num_train,
            num_test=config.num_test,
            seed=config.seed,
            mask_seed=config.mask_seed,
            mask_scheme=config.get("mask_scheme", "pdeobs"),
            model_config=model_config,
            mixed=model in config.mixed_models,
        ),
        16,
    )


def block_path(workdir: Path, family: str, model: str) -> Path:
    return Path(workdir) / "blocks" / f"{family}__{model}.json"


class _Views:
    """Test inputs and masks per view, built on first use."""

    def __init__(self, dataset: data.Dataset):
        self.dataset = dataset
        self._cache = {}

    def __call__(self, view: str):
        if view not in self._cache:
            masks = data.view_masks(self.dataset, view)
            self._cache[view] = (data.masked_inputs(self.dataset.observed, masks), masks)
        return self._cache[view]


def _score(test: data.Dataset, preds, masks, problems) -> list[protocol.Block]:
    preds = np.asarray(preds)
    return [
        protocol.score_block(test.record, p, test.target, masks, problem=q)
        for p, q in zip(preds, problems, strict=True)
    ]


def run_block(key, config, dataset: data.Dataset, model: str, *, train_inputs, test_views: _Views) -> dict:
    """Train and score one (family, model): the 9 x 9 blocks, the density views, and MIX if configured.

    The MIX model (for `config.mixed_models`) is the tenth model of the same vmapped program
    as the nine single-view models (its own init key, the same mini-batch order), so one
    compiled program trains all ten.
    """
    module = backend(model)
    model_config = model_settings(config, dataset.family, model)
    train, test = dataset.train, dataset.test
    mixed = model in config.mixed_models
    inputs_all = train_inputs()
    if mixed:
        inputs_all = np.concatenate([inputs_all, data.mixture_inputs(train)[None]])
    rows = (*data.VIEWS, data.MIXTURE) if mixed else data.VIEWS
    blocks = {}
    start = time.perf_counter()
    training = {}
    if module is baselines:
        fitted = module.fit_views(key, model, inputs_all, train.target, config=model_config, dataset=dataset)
    else:  # the training losses decide whether each trained model is valid
        fitted, losses = module.fit_views(
            key, model, inputs_all, train.target, config=model_config, dataset=dataset, return_losses=True
        )
        losses = np.asarray(losses, np.float64)
        window = max(1, losses.shape[0] // 10)
        for v, curve in zip(rows, losses.T, strict=True):
            training[v] = {
                "initial_loss": float(np.mean(curve[:window])),
                "final_loss": float(np.mean(curve[-window:])),
                "problem": health.training_problem(curve),
            }
    jax.block_until_ready(fitted)
    fit_seconds = time.perf_counter() - start
    problems = [training.get(v, {}).get("problem") for v in rows]
    start = time.perf_counter()
    for w in (*data.VIEWS, *DENSITY_ONLY, *(data.UNSEEN if mixed else ())):
        inputs, masks = test_views(w)
        for v, block in zip(rows, _score(test, module.predict(fitted, inputs), masks, problems), strict=True):
            if w in data.UNSEEN and v != data.MIXTURE:
                continue  # the unseen protocols are scored for the MIX model (PDE-OBS Table 65)
            blocks[f"{v}|{w}"] = protocol.encode_block(block)
    out = {"fit_seconds": fit_seconds, "predict_seconds": time.perf_counter() - start, "mixed": mixed}
    # observed cells per test view (every record of a view observes the same count, except
    # where a scheme cannot: then the distinct counts), for the equal-count layout contrasts
    out["view_counts"] = {w: sorted({int(c) for c in test_views(w)[1].sum(axis=(1, 2))}) for w in data.VIEWS}
    out["training"] = training
    out["blocks"] = blocks
    return out


def run(config, workdir: str | Path) -> dict:
    """Run (or resume) the whole protocol; returns `report.write`'s summary."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if jax.process_index() == 0:
        (workdir / "config.json").write_text(config.to_json(indent=2))
        (workdir / "provenance.json").write_text(
            json.dumps(files.provenance({"seed": config.seed, "mask_seed": config.mask_seed}), indent=2)
        )
    base = jr.key(config.seed)
    for family in config.families:
        todo = [
            m
            for m in config.models
            if not _is_done(block_path(workdir, family, m), block_hash(config, family, m))
        ]
        if not todo:
            print(f"[{family}] all {len(config.models)} models done", flush=True)
            continue
        start = time.perf_counter()
        dataset = data.make_dataset(
            family,
            config.resolution,
            config.num_train,
            config.num_test,
            config.seed,
            mask_seed=config.mask_seed,
            mask_scheme=config.get("mask_scheme", "pdeobs"),
            cache_dir=workdir / "data",
        )
        print(f"[{family}] data {time.perf_counter() - start:.1f} s", flush=True)
        train = dataset.train
        cache = {}

        def train_inputs(train=train, cache=cache):
            if "x" not in cache:
                cache["x"] = np.stack([data.view_inputs(train, v) for v in data.VIEWS])
            return cache["x"]

        test_views = _Views(dataset.test)
        for model in todo:
            key = jr.fold_in(jr.fold_in(base, zlib.crc32(family.encode())), zlib.crc32(model.encode()))
            result = run_block(key, config, dataset, model, train_inputs=train_inputs, test_views=test_views)
            result.update(
                family=family,
                model=model,
                config_hash=block_hash(config, family, model),
                expected=dataset.test.record.tolist(),
            )
            files.atomic_write_json(block_path(workdir, family, model), result)
            print(
                f"[{family}] {model}: fit {result['fit_seconds']:.1f} s, "
                f"predict {result['predict_seconds']:.1f} s",
                flush=True,
            )
    return report.write(workdir, config)


def _is_done(path: Path, digest: str) -> bool:
    if not path.exists():
        return False
    try:
        return json.loads(path.read_text()).get("config_hash") == digest
    except (OSError, json.JSONDecodeError):
        return False
