"""Observation-pattern transfer: nine pattern-specific models trained as one vmapped program.

`transfer.models.fit_views` trains the nine view models of one architecture and family as
one program (stacked parameters, one optimizer state per model, one `lax.scan` over steps);
the baseline trains the same nine models one after another (`fit_views` with one view at a
time, `views=[v]`: the same init keys, data order and results). Both are timed after their
compilation, in the same run, on random fields of the family's shape (the training cost does
not depend on the values). Unit: model-steps per second (9 x steps / wall time).
CPU: tiny FNO at 32 x 32, 64 records, batch 8; `--device`: the published FNO (width 32,
12 modes, 4 layers) and the tiny CNO and Transolver at 64 x 64, 256 records.
"""

from __future__ import annotations

import functools

import jax
import jax.random as jr
import numpy as np

from bench.common import best_time, record
from posteriorjax.studies.transfer import data, models


def _dataset(n: int, num_train: int) -> data.Dataset:
    rng = np.random.default_rng(0)
    total = num_train + 8
    target = rng.standard_normal((total, 1, n, n)).astype(np.float32)
    return data.Dataset(
        "darcy_field",
        n,
        0,
        np.arange(total, dtype=np.int64),
        np.arange(total, dtype=np.int64) % 3,
        (np.arange(total) >= num_train).astype(np.int64),
        rng.standard_normal((total, 1, n, n)).astype(np.float32),
        target,
        target,
        target,
    )


def _cases(args):
    if args.device:
        base = dict(n=64, num_train=256, steps=100, batch_size=8)
        return [
            ("fno", dict(scale="full"), base),
            ("cno", dict(scale="tiny"), base),
            ("transolver", dict(scale="tiny"), base),
        ]
    return [("fno", dict(scale="tiny"), dict(n=32, num_train=64, steps=40, batch_size=8))]


def _time_case(name: str, config: dict, size: dict) -> dict:
    n, num_train, steps = size["n"], size["num_train"], size["steps"]
    dataset = _dataset(n, num_train)
    train = dataset.train
    rng = np.random.default_rng(1)
    masks = rng.random((len(data.VIEWS), num_train, n, n)) < 0.5
    inputs = np.stack([data.masked_inputs(train.observed, m) for m in masks])
    cfg = dict(config, steps=steps, batch_size=size["batch_size"], chunk=steps)
    key = jr.key(0)
    fit = functools.partial(models.fit_views, key, name, config=cfg, dataset=dataset)

    def vmapped():
        return fit(inputs, train.target)

    def sequential():
        return [fit(inputs[v : v + 1], train.target, views=[v]) for v in range(len(data.VIEWS))]

    t_vmap = best_time(vmapped, repeats=2)
    t_seq = best_time(sequential, repeats=2)
    # the two programs train the same models
    joint = models.predict(vmapped(), inputs[0, :8])
    alone = models.predict(sequential()[4], inputs[0, :8])
    np.testing.assert_allclose(np.asarray(alone[0]), np.asarray(joint[4]), rtol=1e-3, atol=1e-4)
    model_steps = len(data.VIEWS) * steps
    return record(
        f"transfer_nine_views_{name}",
        "model-steps/s",
        model_steps / t_vmap,
        model_steps / t_seq,
        "nine sequential trainings",
        n=n,
        records=num_train,
        steps=steps,
        batch=size["batch_size"],
        scale=config["scale"],
        platform=jax.devices()[0].platform,
        vmapped_s=t_vmap,
        sequential_s=t_seq,
    )


def bench_nine_views(args):
    return [_time_case(name, config, size) for name, config, size in _cases(args)]


BENCHMARKS = {"transfer_nine_views": bench_nine_views}
