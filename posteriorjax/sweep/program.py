"""Program: the pure JAX program of one (task, sampler) pair.

For one pair, every configuration -- a case index, a value of each numeric hyperparameter
axis and a sampler seed -- is one entry of a single flattened axis (`ConfigGrid`, `expand`).
`case_program` samples *and scores* a configuration; `chunk_program` `lax.map`s it over a
device's share of a chunk (memory bounded by `batch_size`) and `shard_map`s it over the 1-D
data mesh of all devices. Keys: `stream_keys(seed)` splits the sweep seed into named streams
(sampler, reference, TARP, MIRA); the sampler key of a configuration is
`fold_in(fold_in(sampler_stream, case), sampler_seed)` and the calibration statistics of a
case use `fold_in(stream, case)`, so results do not depend on chunking, ordering or the
number of devices.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import PartitionSpec

from posteriorjax import checks, deferred, parallel
from posteriorjax.metrics import suite
from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.sweep import statistics
from posteriorjax.sweep.settings import CalibrationSettings
from posteriorjax.sweep.store import canonical_number
from posteriorjax.tasks.base import Task


@dataclasses.dataclass(frozen=True)
class ConfigGrid:
    """The flattened configuration axis: `case (K,)`, `seed (K,)`, `hparams {name: (K,)}`."""

    case: np.ndarray
    seed: np.ndarray
    hparams: dict[str, np.ndarray]

    @property
    def size(self) -> int:
        return int(self.case.shape[0])

    def ids(self) -> list[str]:
        """A stable identifier per configuration: `case=C;seed=S;name=value;...` (names sorted).

        Values are written by `canonical_number`, so the ids do not depend on numpy's repr.
        """
        names = sorted(self.hparams)
        return [
            f"case={c};seed={s};" + ";".join(f"{n}={canonical_number(self.hparams[n][i])}" for n in names)
            for i, (c, s) in enumerate(zip(self.case.tolist(), self.seed.tolist(), strict=True))
        ]

    def take(self, index) -> dict:
        """The configurations `index` as the program's input pytree."""
        index = np.asarray(index)
        return {
            "case": self.case[index],
            "seed": self.seed[index],
            "hparams": {k: v[index] for k, v in self.hparams.items()},
        }


def expand(
    num_cases: int, axes: Mapping[str, Iterable[float]], seeds: Iterable[int], defaults: Mapping
) -> ConfigGrid:
    """Product of cases x axis values x seeds, flattened (cases vary slowest).

    `axes` names hyperparameters that vary; every other hyperparameter takes
    its value from `defaults`. An axis with no values or an unknown name is an error.
    """
    unknown = sorted(set(axes) - set(defaults))
    if unknown:
        raise ValueError(f"axes: unknown hyperparameter(s) {unknown}; the sampler has {sorted(defaults)}")
    axes = {k: [float(v) for v in vals] for k, vals in axes.items()}
    empty = [k for k, v in axes.items() if not v]
    if empty:
        raise ValueError(f"axes: axis {empty} has no values")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds: expected at least one sampler seed, got none")
    if num_cases < 1:
        raise ValueError(f"num_cases: expected >= 1, got {num_cases}")
    names = sorted(axes)
    rows = list(itertools.product(range(num_cases), *(axes[n] for n in names), seeds))
    cols = list(zip(*rows, strict=True))
    hparams = {k: np.full(len(rows), float(v), np.float32) for k, v in defaults.items()}
    for j, n in enumerate(names):
        hparams[n] = np.asarray(cols[1 + j], np.float32)
    return ConfigGrid(np.asarray(cols[0], np.int32), np.asarray(cols[-1], np.int32), hparams)


def config_key(sampler_stream, case, sampler_seed):
    """The sampler key of one configuration: `fold_in(fold_in(stream, case), seed)`."""
    return jr.fold_in(jr.fold_in(sampler_stream, case), sampler_seed)


def _state_model(sampler):
    """The sampler's learned surrogate of the physics, when it guides through one (else None)."""
    readout = getattr(sampler, "readout", None)
    if readout is not None and getattr(readout, "forward", None) == "surrogate":
        return readout.surrogate
    return None


def case_program(
    task: Task,
    sampler: AbstractSampler,
    num_samples: int,
    *,
    seed: int,
    metric_options: Mapping | None = None,
    diagnostics: Sequence[str] = (),
    calibration_options: Mapping | CalibrationSettings | None = None,
) -> Callable:
    """`one(data, config) -> metrics`: sample and score one configuration (pure).

    `task` is the true task (cases, reference and scoring); the sampler may be
    built on a misspecified copy of it. `data` comes from `statistics.program_data` (same
    `seed`). Metrics: `suite.compute`'s, `observation_values`,
    `calibration_statistics` (with `calibration_options`) and the requested `diagnostic_values`,
    of the samples as the sampler returns them (`AbstractSampler.finish`); `num_nonfinite` counts
    the members non-finite before a published binary projection, which maps a NaN to a level.
    """
    score = score_program(
        task,
        seed=seed,
        metric_options=metric_options,
        diagnostics=diagnostics,
        calibration_options=calibration_options,
        state_model=_state_model(sampler),
    )
    keys = statistics.stream_keys(seed)

    def one(data, config):
        case = config["case"]
        key = config_key(keys["sampler"], case, config["seed"])
        raw = sampler.sample_traced(key, data["y_obs"][case], num_samples, config["hparams"], finish=False)
        out = score(data, case, sampler.finish(raw))
        if sampler.discrete_values is not None and "num_nonfinite" in out:
            # the published projection maps a NaN to a level: count the members that diverged
            out["num_nonfinite"] = checks.count_nonfinite(raw).astype(out["num_nonfinite"].dtype)
        return out

    return one


def score_program(
    task: Task,
    *,
    seed: int,
    metric_options: Mapping | None = None,
    diagnostics: Sequence[str] = (),
    calibration_options: Mapping | CalibrationSettings | None = None,
    state_model=None,
) -> Callable:
    """`score(data, case, samples (N, C, H, W), weights=None) -> metrics`: what `case_program`
    records of its samples.

    Shared by the sweep and the file-in evaluator (`posteriorjax.exchange`), so samples scored
    from a file get the very record a sampler run inside the sweep gets. `weights (N,)` (summing
    to 1): a weighted ensemble; the posterior metrics use them (`suite.compute`'s
    `sample_weights`) and every statistic without a weighted form (observation values,
    calibration statistics, diagnostics) is NaN.
    """
    options = dict(metric_options or {})
    calib = CalibrationSettings.parse(calibration_options)
    keys = statistics.stream_keys(seed)

    def score(data, case, samples, weights=None):
        y_obs, truth = data["y_obs"][case], data["x_true"][case]
        ref_samples, ref_weights = data["ref_samples"][case], data["ref_weights"][case]
        kwargs = dict(evaluation_field=task.evaluation_field, field_stats=task.field_stats, **options)
        out = suite.compute(samples, ref_samples, ref_weights, truth, sample_weights=weights, **kwargs)
        from_suite = set(out)  # weighted by the suite itself
        # metrics the ensemble sizes exclude (N = 1: std_error, crps_fair, coverage ...) as NaN,
        # never a silently dropped key (shapes are static: decided at trace time)
        small = suite.too_small(samples, ref_samples, ref_weights, truth, kwargs=kwargs, present=set(out))
        out.update({k: jnp.asarray(v, samples.dtype) for k, v in small.items() if k != "undefined"})
        out.update(statistics.observation_values(task, samples, truth, y_obs))
        anchor = statistics.observation_anchor(task, ref_samples, ref_weights) if calib.observed else None
        out.update(
            statistics.calibration_statistics(
                task,
                samples,
                truth,
                shift=data["tarp_shift"],
                scale=data["tarp_scale"],
                tarp_point=data["tarp_points"][case],
                mira_key=statistics.mira_case_key(keys["mira"], case),
                anchor=anchor,
                options=calib,
                tarp_key=jr.fold_in(jr.split(keys["tarp"])[1], case),
            )
        )
        if diagnostics:
            out.update(statistics.diagnostic_values(task, samples, truth, diagnostics, state_model))
        if weights is not None:  # statistics computed as if unweighted: no weighted form
            nan = {k: jnp.full_like(v, jnp.nan, dtype=jnp.result_type(v, float)) for k, v in out.items()}
            out = {k: out[k] if k in from_suite else nan[k] for k in out}
        return out

    return score


def sample_program(sampler: AbstractSampler, num_samples: int, *, seed: int) -> Callable:
    """`samples(data, configs (S,)) -> (S, N, C, H, W)`: the samples `case_program` scores, same keys."""
    keys = statistics.stream_keys(seed)

    def one(data, config):
        key = config_key(keys["sampler"], config["case"], config["seed"])
        return sampler.sample_traced(key, data["y_obs"][config["case"]], num_samples, config["hparams"])

    return one


def chunk_program(one: Callable, mesh, batch_size: int) -> Callable:
    """`(data, configs (chunk,)) -> metrics (chunk,)`: lax.map per device, shard_map over the mesh."""
    spec = PartitionSpec(parallel.AXIS)

    def local(data, configs):
        return jax.lax.map(lambda c: one(data, c), configs, batch_size=batch_size)

    return jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(), spec), out_specs=spec, check_vma=False)


def checked_chunk_program(one: Callable, mesh, batch_size: int) -> Callable:
    """`sweep_chunk(data, configs (chunk,)) -> (failure, metrics (chunk,))`: `chunk_program` with its
    run-time checks (hyperparameter domains, reference weights, physical inputs: `checks.error_if`)
    as the output `failure` instead of host callbacks (`deferred.functionalize`), so the compiled
    program can be written to the persistent compilation cache. Pass `failure` to `raise_failure`.
    """
    checked = deferred.functionalize(chunk_program(one, mesh, batch_size))

    def sweep_chunk(data, configs):
        return checked(data, configs)

    return sweep_chunk


def raise_failure(failure, where: str) -> None:
    """Raise `checks.CheckFailed` (a ValueError) ``"<where>: <message>, got <value>"`` when a
    run-time check of a `checked_chunk_program` call failed (on any device of any process)."""
    if jax.process_count() > 1:
        failure = jax.tree.map(lambda a: multihost_utils.process_allgather(a, tiled=True), failure)
    deferred.raise_failure(failure, where)


def check_inputs(sampler: AbstractSampler, grid: ConfigGrid, reference: tuple, where: str) -> None:
    """The checks of a pair's concrete inputs, eagerly on the host before anything compiles:
    every configuration's hyperparameters against the sampler's domains (`check_hparams`) and
    each case's reference weights `(K, M)` (`checks.weights`). ValueError naming `where`, the
    hyperparameter or case and the offending value. (The program checks them again at run time.)
    """
    try:
        sampler.check_hparams({k: np.asarray(v) for k, v in grid.hparams.items()})
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from e
    weights = np.asarray(reference[1])
    for case, w in enumerate(weights):
        try:
            checks.weights(w, w.shape[0], "ref_weights", np.float32)
        except ValueError as e:
            raise ValueError(f"{where}: case {case}: {e}") from e


def local_rows(metrics: dict) -> tuple[list[int], dict[str, np.ndarray]]:
    """Positions in the chunk and values of the rows this process's devices hold."""
    if jax.process_count() == 1:
        host = jax.device_get(metrics)
        return list(range(len(next(iter(host.values()))))), host
    positions, values = None, {}
    for name, leaf in metrics.items():
        parts = {}
        for shard in leaf.addressable_shards:
            start = shard.index[0].start or 0
            parts[start] = np.asarray(shard.data)
        starts = sorted(parts)
        values[name] = np.concatenate([parts[s] for s in starts])
        rows = [s + j for s in starts for j in range(len(parts[s]))]
        positions = rows if positions is None else positions
    return positions, values


# ----------------------------------------------------------------------------
# Memory: XLA's estimate of a compiled program against the device


MEMORY_LIMIT_ENV = "POSTERIORJAX_MEMORY_LIMIT_BYTES"


def peak_bytes(compiled) -> int | None:
    """Peak device memory (bytes) of a compiled program from `compiled.memory_analysis()`, or None
    when the backend gives no analysis: its peak, or arguments + outputs + temporaries - aliased."""
    compiled = getattr(compiled, "compiled", compiled)  # an `eqx.filter_jit` program wraps jax's
    stats = compiled.memory_analysis()
    if stats is None:
        return None
    total = (
        stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        + stats.temp_size_in_bytes
        - stats.alias_size_in_bytes
    )
    return int(max(total, getattr(stats, "peak_memory_in_bytes", 0) or 0))


def device_memory(limit: int | None = None) -> tuple[int, str]:
    """(bytes one device may use, where that number comes from): `limit` when given, else
    $POSTERIORJAX_MEMORY_LIMIT_BYTES, else the accelerator's `memory_stats()["bytes_limit"]`,
    else (CPU) the machine's physical memory."""
    if limit is not None:
        return int(limit), "memory_limit_bytes"
    if os.environ.get(MEMORY_LIMIT_ENV):
        return int(os.environ[MEMORY_LIMIT_ENV]), f"${MEMORY_LIMIT_ENV}"
    stats = jax.local_devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"]), f"{jax.local_devices()[0].device_kind} bytes_limit"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "physical memory"


def check_memory(compiled, what: str, *, batch_size: int, num_samples: int, limit: int | None = None) -> None:
    """MemoryError, before anything runs, when XLA's estimate of `compiled` exceeds the device memory.

    The message gives the estimate, the available bytes and the settings that shrink the
    program: `batch_size` (configurations evaluated at once per device) and `num_samples`.
    """
    need = peak_bytes(compiled)
    have, source = device_memory(limit)
    if need is not None and need > have:
        raise MemoryError(
            f"memory: {what} needs about {need:.3g} bytes per device (XLA's estimate of the compiled "
            f"program), more than the {have:.3g} bytes available ({source}); lower batch_size "
            f"(now {batch_size}) or num_samples (now {num_samples})"
        )
