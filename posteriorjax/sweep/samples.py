"""Stored samples for figures: the samples of the first cases of every configuration (`.npz`)."""

from __future__ import annotations

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import deferred, files
from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.sweep.program import ConfigGrid, sample_program
from posteriorjax.tasks.base import Cases


def save_samples(
    path: Path,
    sampler: AbstractSampler,
    cases: Cases,
    grid: ConfigGrid,
    *,
    num_samples: int,
    seed: int,
    max_case: int,
    batch_size: int,
) -> int:
    """Store the samples of every configuration with `case < max_case` in `path` (`.npz`).

    Arrays: `samples (S, N, C, H, W)`, `case (S,)`, `seed (S,)`, `config_id (S,)`
    and `hparam_<name> (S,)` per hyperparameter, in grid order. Samples are
    recomputed with the keys of `case_program`; configurations already in the
    file are kept, not recomputed. Written atomically, its SHA-256 beside it (`files.write_arrays_checked`);
    a file failing that checksum (or unreadable) is set aside (`files.quarantine`) and
    recomputed. Returns S.
    """
    ids = grid.ids()
    wanted = [i for i in range(grid.size) if grid.case[i] < max_case]
    if not wanted:
        return 0
    have: dict[str, np.ndarray] = {}
    if path.exists():
        try:
            z = files.read_arrays_checked(path)
            have = {str(c): z["samples"][j] for j, c in enumerate(z["config_id"])}
        except files.CorruptFile as e:
            files.quarantine(path, e.reason)
    missing = [i for i in wanted if ids[i] not in have]
    if missing:
        one = sample_program(sampler, num_samples, seed=seed)
        data = {"y_obs": jnp.asarray(cases.y_obs)}
        # the hyperparameter checks as an output, not host callbacks: the program stays cacheable
        fn = eqx.filter_jit(
            deferred.functionalize(lambda d, c: jax.lax.map(lambda x: one(d, x), c, batch_size=batch_size))
        )
        failure, new = fn(data, jax.tree.map(jnp.asarray, grid.take(missing)))
        deferred.raise_failure(failure, f"samples {path.name}")
        new = np.asarray(jax.device_get(new))
        have.update({ids[i]: new[j] for j, i in enumerate(missing)})
    arrays = {
        "samples": np.stack([have[ids[i]] for i in wanted]),
        "case": grid.case[wanted].astype(np.int32),
        "seed": grid.seed[wanted].astype(np.int32),
        "config_id": np.asarray([ids[i] for i in wanted]),
    }
    arrays.update({f"hparam_{k}": v[wanted] for k, v in grid.hparams.items()})
    files.write_arrays_checked(path, arrays)
    return len(wanted)
