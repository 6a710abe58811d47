"""Sweep engine: cases x hyperparameters x seeds as one compiled, sharded program.

For one (task, sampler) pair, every configuration -- a case index, a value of
each numeric hyperparameter axis and a sampler seed -- is one entry of a single
flattened axis. One function samples *and scores* a configuration; it is
`lax.map`-ped over a device's share of a chunk (memory bounded by
`batch_size`), `shard_map`-ped over the 1-D data mesh of all devices, and
compiled once ahead of time for the chunk shape. Chunks are written to
`results.jsonl` as they finish; a rerun skips configurations already on disk,
so an interrupted sweep resumes without recomputing or duplicating records.

Keys: `stream_keys(seed)` splits the sweep seed into named streams (sampler,
reference, TARP, MIRA). The sampler key of a configuration is
`fold_in(fold_in(sampler_stream, case), sampler_seed)`; the calibration
statistics of a case use `fold_in(stream, case)`. Results therefore do not
depend on chunking, ordering or the number of devices.

Besides the per-case metric suite, every record carries two per-case
statistics that only make sense over many cases (aggregated by `results`):
`tarp_credibility` (TARP, Lemos et al. 2023) and `mira_statistic` (MIRA,
Sharief et al.), see `calibration_statistics` and `calibration_settings`
(`config.calibration`: observation-dependent MIRA centres and TARP reference
points). By default the TARP reference point of a
case is a prior draw (`tarp_reference_fields`) and TARP's space is a fixed
per-channel standardization (`tarp_normalization`), both independent of the
cases, so the statistic is defined for any number of cases.

Sampler output is scored as it is, but the physics is evaluated only where it
is defined (`Task.valid`, e.g. a positive Darcy permeability): `num_invalid`
counts the members outside it, whose data misfit (and PDE residual) is NaN
instead of an error that would abort the whole chunk (`observation_values`).

`run(config, workdir)` drives a whole study: the config schema (documented on
`settings`) names tasks, samplers with their networks (trained or reused under
`workdir/networks/`), misspecified sampler tasks, a reference method per task
(a default and per-task overrides, cached in `workdir/references/`), optional
diagnostics and stored samples for figures.
With several processes (`jax.process_count() > 1`) each process writes the
records its devices computed to `results.p<k>.jsonl` and process 0 assembles
`results.jsonl` after every pair (the workdir must be shared by all processes).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from absl import logging as absl_logging
from jax.sharding import PartitionSpec

from posteriorjax import parallel
from posteriorjax.metrics import calibration, diagnostics, mira, suite
from posteriorjax.samplers.base import AbstractSampler

# the config schema, references and networks live in `sweep_setup`; re-exported as `sweep.<name>`
from posteriorjax.sweep_setup import (  # noqa: F401
    DIAGNOSTICS,
    NETWORK_KINDS,
    REFERENCE_DEFAULTS,
    REFERENCE_METHODS,
    REFERENCE_RULES,
    SAMPLER_KEYS,
    NetworkSpec,
    SamplerEntry,
    Settings,
    _grf_alpha_spec,
    _write_npz,
    load_or_build_reference,
    network,
    network_config,
    published_eps,
    reference_config,
    reference_path,
    settings,
    stream_keys,
    validate,
)
from posteriorjax.tasks.base import Cases, Task

MIRA_REGIONS = 100


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


def canonical_number(value) -> str:
    """`value` as it goes into a config id: an integer as `str(int)`, a float as Python's
    `repr(float)` of the shortest decimal that round-trips in the value's own dtype
    (`np.float32(0.1)` -> `0.1`, `np.float64(1e-5)` -> `1e-05`), whatever numpy's version."""
    a = np.asarray(value)
    if a.ndim != 0:
        raise ValueError(f"value: expected a scalar, got shape {a.shape}")
    if a.dtype.kind in "biu":
        return str(int(a))
    if a.dtype.kind != "f":
        raise ValueError(f"value: expected an integer or float, got dtype {a.dtype}")
    return repr(float(np.format_float_scientific(a[()], unique=True)))


_NUMPY_SCALAR_REPR = re.compile(r"np\.(?:float|int|uint)\d+\(([^()]*)\)")


def migrate_config_id(config_id: str) -> str:
    """A config id written before `canonical_number` (values in numpy's repr), in today's form.

    numpy >= 2 wrote `flip=np.float32(2.0)`, numpy 1 `flip=2.0`; both hold the shortest
    decimal of the value in its dtype, so unwrapping it and passing it through `repr(float)`
    gives `canonical_number`'s string. Ids already canonical are returned unchanged.
    """
    parts = []
    for part in _NUMPY_SCALAR_REPR.sub(r"\1", config_id).split(";"):
        name, sep, value = part.partition("=")
        if sep and name not in ("case", "seed"):
            try:
                value = repr(float(value))
            except ValueError:
                pass
        parts.append(name + sep + value)
    return ";".join(parts)


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


# ----------------------------------------------------------------------------
# The per-configuration program


def config_key(sampler_stream, case, sampler_seed):
    """The sampler key of one configuration: `fold_in(fold_in(stream, case), seed)`."""
    return jr.fold_in(jr.fold_in(sampler_stream, case), sampler_seed)


def mira_case_key(mira_stream, case):
    """Region key of a case; equals `mira.mira(mira_stream, ...)`'s key of condition `case`."""
    return jr.fold_in(jr.split(mira_stream)[0], case)


def tarp_reference_fields(task: Task, seed: int, num_cases: int) -> jax.Array:
    """TARP reference point of every case, `(num_cases, C', H, W)` (evaluated fields, data units).

    Case c's point is a prior draw, `task.evaluation_field(task.prior.sample(
    fold_in(tarp_stream, c)))` with `tarp_stream = stream_keys(seed)["tarp"]`.
    TARP's coverage theorem (Lemos et al. 2023, Thm. 3) holds for any reference
    distribution that is independent of the truth given the data: the prior
    qualifies, and unlike a point uniform in the box spanned by the truths of
    all cases it stays meaningful when there are few cases in many dimensions
    (the truths then span the box, the samples lie outside it and every
    credibility collapses to 0, even for the exact posterior).
    """
    return _prior_fields(task, stream_keys(seed)["tarp"], int(num_cases))


@eqx.filter_jit
def _prior_fields(task: Task, key, num: int) -> jax.Array:
    """`evaluation_field(prior.sample(fold_in(key, i)))` for i < num, `(num, C', H, W)`."""

    def one(i):
        return task.evaluation_field(task.prior.sample(jr.fold_in(key, i)))

    return jax.vmap(one)(jnp.arange(num))


TARP_STATS_DRAWS = 256


def tarp_normalization(task: Task) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel `(shift (C',), scale (C',))` of TARP's space (evaluated fields, data units).

    TARP distances are taken between (field - shift) / scale, per channel, for
    samples, truth and reference point alike. The map depends on the task only
    (never on the cases): `task.field_stats` (mean, std; scalars apply to every
    channel) when present, else the per-channel mean and std of
    `TARP_STATS_DRAWS` prior draws from the fixed key `jr.key(0)`. A zero std
    gives scale 1. Only the relative scale of the channels matters: for one
    channel the credibilities do not depend on the map.
    """
    shape = jax.eval_shape(task.evaluation_field, jax.ShapeDtypeStruct(task.unknown_shape, jnp.float32)).shape
    channels = shape[0]
    if task.field_stats is not None:
        shift, scale = (np.asarray(v, np.float64) for v in task.field_stats)
        for name, v in (("mean", shift), ("std", scale)):
            if v.ndim > 1 or v.size not in (1, channels):
                raise ValueError(
                    f"task.field_stats: expected a scalar or {channels} per-channel values for the {name}, "
                    f"got shape {v.shape}"
                )
        shift, scale = np.broadcast_to(shift, (channels,)), np.broadcast_to(scale, (channels,))
    else:
        draws = np.asarray(_prior_fields(task, jr.key(0), TARP_STATS_DRAWS), np.float64)
        shift, scale = draws.mean(axis=(0, 2, 3)), draws.std(axis=(0, 2, 3))
    scale = np.where(scale > 0, scale, 1.0)
    return shift.astype(np.float32), scale.astype(np.float32)


def program_data(task: Task, cases: Cases, reference: tuple, *, seed: int) -> dict[str, np.ndarray]:
    """Arrays every configuration reads: cases, reference and TARP's reference points and map.

    `tarp_shift`, `tarp_scale` `(d,)`: `tarp_normalization` broadcast over the
    d = C' H W values of an evaluated field; `tarp_points (K, d)`: the
    `tarp_reference_fields` of the K cases of sweep seed `seed`, normalized.
    """
    x_true = np.asarray(cases.x_true)
    num = x_true.shape[0]
    points = np.asarray(tarp_reference_fields(task, seed, num))
    shift, scale = tarp_normalization(task)
    shift = np.broadcast_to(shift[:, None, None], points.shape[1:]).reshape(-1)
    scale = np.broadcast_to(scale[:, None, None], points.shape[1:]).reshape(-1)
    ref_samples, ref_weights = reference
    return {
        "y_obs": np.asarray(cases.y_obs),
        "x_true": x_true,
        "ref_samples": np.asarray(ref_samples),
        "ref_weights": np.asarray(ref_weights),
        "tarp_shift": shift,
        "tarp_scale": scale,
        "tarp_points": ((points.reshape(num, -1) - shift) / scale).astype(points.dtype),
    }


CALIBRATION_DEFAULTS = {
    "mira_centres": "uniform",
    "mira_half_width": mira.PAPER_HALF_WIDTH,
    "mira_normalization": "with_truth",
    "mira_distance": "l2",
    "tarp_reference": "prior",
    "tarp_half_width": 0.5,
}


def calibration_settings(section=None) -> dict:
    """Validated over-case calibration options (`config.calibration`, keys of `CALIBRATION_DEFAULTS`).

    mira_centres: ``"uniform"`` (the paper's p(c) = U(0, 1)^d in the normalized
    space) or ``"observation"`` (App. E.4: c = m(y) + U(-h, h)^d, h =
    `mira_half_width` in data units); tarp_reference: ``"prior"`` (a prior draw
    per case) or ``"observation"`` (m(y) + U(-h, h)^d, h = `tarp_half_width`,
    data units). m(y) is the weighted mean of the case's reference posterior
    (evaluated fields), a function of the observation only, so a sampler that
    ignores y (e.g. returns the prior) is caught; neither centre nor reference
    depends on the sampler under test. mira_normalization, mira_distance: see
    `mira.options`. The sweep's normalization defaults to ``"with_truth"``, not
    the paper's ``"candidates"``: with fields of d >> N values the truth leaves
    the candidates' box in many dimensions and the paper's map biases the null
    (`model_comparison:tiny`, d = 256, N = 32: the exact posterior scores 0.618,
    z = -5.1 against its bootstrap se; see the README).
    """
    section = {} if section is None else dict(section.to_dict() if hasattr(section, "to_dict") else section)
    unknown = sorted(set(section) - set(CALIBRATION_DEFAULTS))
    if unknown:
        expected = sorted(CALIBRATION_DEFAULTS)
        raise ValueError(f"config.calibration: unknown key(s) {unknown}; expected {expected}")
    out = {**CALIBRATION_DEFAULTS, **section}
    for name in ("mira_centres", "tarp_reference"):
        choices = ("uniform", "observation") if name == "mira_centres" else ("prior", "observation")
        if out[name] not in choices:
            raise ValueError(f"config.calibration.{name}: expected one of {choices}, got {out[name]!r}")
    for name in ("mira_half_width", "tarp_half_width"):
        if not float(out[name]) > 0:
            raise ValueError(f"config.calibration.{name}: expected > 0 (data units), got {out[name]!r}")
        out[name] = float(out[name])
    mira.options(normalization=out["mira_normalization"], distance=out["mira_distance"])
    return out


def observation_anchor(task: Task, ref_samples, ref_weights) -> jax.Array:
    """m(y): the weighted mean of a case's reference samples `(M, C, H, W)`, evaluated, flat `(d,)`."""
    fields = jax.vmap(task.evaluation_field)(ref_samples)
    return jnp.tensordot(ref_weights.astype(fields.dtype), fields, axes=1).reshape(-1)


def calibration_statistics(
    task: Task, samples, truth, shift, scale, tarp_point, mira_key, anchor=None, options=None, tarp_key=None
) -> dict:
    """Per-case statistics of the over-case calibration metrics (NaN if any sample is non-finite).

    On the evaluated fields flattened to `d` values: `tarp_credibility` =
    `calibration.tarp_credibility` of the case in TARP's space
    ((field - `shift (d,)`) / `scale (d,)`) with reference point
    `tarp_point (d,)` (already in that space), and `mira_statistic` =
    `mira.condition_statistic` (mean over `MIRA_REGIONS` regions drawn from
    `mira_key`; needs N >= 2). `options` (`calibration_settings`) with
    observation-dependent centres or references needs `anchor (d,)` =
    `observation_anchor` (data units); the TARP reference is then
    `calibration.observation_references(tarp_key, anchor, tarp_half_width)`.
    """
    o = calibration_settings(options)
    n = samples.shape[0]
    x = jax.vmap(task.evaluation_field)(samples).reshape(n, -1)
    t = task.evaluation_field(truth).reshape(-1).astype(x.dtype)
    bad = ~jnp.all(jnp.isfinite(samples))
    xn, tn = (x - shift) / scale, (t - shift) / scale
    if o["tarp_reference"] == "observation":
        point = calibration.observation_references(tarp_key, anchor[None], o["tarp_half_width"])[0]
        tarp_point = (point - shift) / scale
    f = calibration.tarp_credibility(xn[None], tn[None], tarp_point[None].astype(x.dtype))[0]
    out = {"tarp_credibility": f}
    if n >= 2:
        observed = o["mira_centres"] == "observation"
        out["mira_statistic"] = mira.condition_statistic(
            mira_key,
            x,
            t,
            num_regions=MIRA_REGIONS,
            center_anchor=anchor if observed else None,
            anchor_half_width=o["mira_half_width"],
            normalization=o["mira_normalization"],
            distance=o["mira_distance"],
        )
    return {k: jnp.where(bad, jnp.nan, v) for k, v in out.items()}


def observation_values(task: Task, samples, truth, y_obs) -> dict:
    """`suite.observation_values` for a task: `num_invalid` (members outside `task.valid`, non-finite

    ones included) and `obs_misfit` (NaN when any member is invalid); the forward map sees the
    true field `truth` (valid by construction) in place of an invalid member.
    """
    return suite.observation_values(
        task.forward, samples, y_obs, task.noise_std, valid=task.valid, fallback=truth
    )


def diagnostic_values(task: Task, samples, truth, names: Sequence[str], state_model=None) -> dict:
    """Optional per-case diagnostics (NaN if any sample is non-finite).

    ``"pde_residual"``: relative PDE residual rms(r(x, u)) / rms(r(x, 0)) of the
    task physics (r(x, 0) is the source term), with u the state of each sample
    from `state_model` (the sampler's learned surrogate when it has one) or the
    task physics: `pde_residual` is its mean over samples, `pde_residual_mean`
    that of the pair (sample mean of x, sample mean of u). Both are NaN when a
    member (or the sample mean) is outside `task.valid`; the physics is only
    evaluated inside it.
    ``"alpha"``: GRF smoothness exponent (`diagnostics.estimate_grf_alpha`) of
    every sample and channel: `alpha` (mean), `alpha_std`, and `alpha_truth` of
    the true field, for comparison.
    """
    out = {}
    if "pde_residual" in names:
        state = task.physics if state_model is None else state_model
        valid, safe = suite.valid_members(task.valid, samples, truth)
        u = jax.vmap(state)(safe)

        def rel(x, v):
            scale = jnp.sqrt(jnp.mean(jnp.square(task.physics.residual(x, jnp.zeros_like(v)))))
            return diagnostics.pde_residual(task.physics.residual, x, v, scale=scale)

        out["pde_residual"] = jnp.mean(jnp.where(valid, jax.vmap(rel)(safe, u), jnp.nan))
        mean = samples.mean(axis=0)
        ok = jnp.all(valid) & task.valid(mean)
        value = rel(jnp.where(ok, mean, truth.astype(mean.dtype)), u.mean(axis=0))
        out["pde_residual_mean"] = jnp.where(ok, value, jnp.nan)
    if "alpha" in names:
        basis, tau = _grf_alpha_spec(task.prior)

        def alpha(x):  # (C, H, W) -> (C,)
            return jax.vmap(lambda f: diagnostics.estimate_grf_alpha(f, tau=tau, basis=basis))(x)

        a = jax.vmap(alpha)(samples)
        out["alpha"], out["alpha_std"] = jnp.mean(a), jnp.std(a)
        out["alpha_truth"] = jnp.mean(alpha(truth))
    bad = ~jnp.all(jnp.isfinite(samples))
    return {k: jnp.where(bad, jnp.nan, v) for k, v in out.items()}


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
    calibration_options: Mapping | None = None,
) -> Callable:
    """`one(data, config) -> metrics`: sample and score one configuration (pure).

    `task` is the true task (cases, reference and scoring); the sampler may be
    built on a misspecified copy of it. `data` comes from `program_data` (same
    `seed`). Metrics: `suite.compute`'s, `observation_values`,
    `calibration_statistics` (with `calibration_options`) and the requested `diagnostic_values`.
    """
    options = dict(metric_options or {})
    calib = calibration_settings(calibration_options)
    observed = calib["mira_centres"] == "observation" or calib["tarp_reference"] == "observation"
    keys = stream_keys(seed)
    state_model = _state_model(sampler)

    def one(data, config):
        case = config["case"]
        key = config_key(keys["sampler"], case, config["seed"])
        y_obs = data["y_obs"][case]
        truth = data["x_true"][case]
        samples = sampler._sample(key, y_obs, num_samples, sampler.check_hparams(config["hparams"]))
        out = suite.compute(
            samples,
            data["ref_samples"][case],
            data["ref_weights"][case],
            truth,
            evaluation_field=task.evaluation_field,
            field_stats=task.field_stats,
            **options,
        )
        out.update(observation_values(task, samples, truth, y_obs))
        out.update(
            calibration_statistics(
                task,
                samples,
                truth,
                data["tarp_shift"],
                data["tarp_scale"],
                data["tarp_points"][case],
                mira_case_key(keys["mira"], case),
                observation_anchor(task, data["ref_samples"][case], data["ref_weights"][case])
                if observed
                else None,
                calib,
                jr.fold_in(jr.split(keys["tarp"])[1], case),
            )
        )
        if diagnostics:
            out.update(diagnostic_values(task, samples, truth, diagnostics, state_model))
        return out

    return one


def sample_program(sampler: AbstractSampler, num_samples: int, *, seed: int) -> Callable:
    """`samples(data, configs (S,)) -> (S, N, C, H, W)`: the samples `case_program` scores, same keys."""
    keys = stream_keys(seed)

    def one(data, config):
        key = config_key(keys["sampler"], config["case"], config["seed"])
        hparams = sampler.check_hparams(config["hparams"])
        return sampler._sample(key, data["y_obs"][config["case"]], num_samples, hparams)

    return one


def chunk_program(one: Callable, mesh, batch_size: int) -> Callable:
    """`(data, configs (chunk,)) -> metrics (chunk,)`: lax.map per device, shard_map over the mesh."""
    spec = PartitionSpec(parallel.AXIS)

    def local(data, configs):
        return jax.lax.map(lambda c: one(data, c), configs, batch_size=batch_size)

    return jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(), spec), out_specs=spec, check_vma=False)


def _jsonable(value):
    arr = np.asarray(value)
    if arr.ndim == 0:
        v = arr.item()
        return None if isinstance(v, float) and not math.isfinite(v) else v
    return [_jsonable(v) for v in arr]


# ----------------------------------------------------------------------------
# Results on disk


def read_records(path: Path) -> list[dict]:
    """Complete records of a JSON-lines file; reading stops at a torn line (the file is not modified)."""
    path = Path(path)
    if not path.exists():
        return []
    good = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break
        if "config_id" in record:
            record["config_id"] = migrate_config_id(record["config_id"])
        good.append(record)
    return good


class ResultsFile:
    """Append-only JSON-lines records with crash-safe resume.

    Each chunk's records are appended in one write and fsync-ed. On open, a
    torn last line (from a kill mid-write) is dropped and the file rewritten
    atomically, so every stored line is a complete record; ids written in an
    older form (`migrate_config_id`) are rewritten the same way.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.records: list[dict] = []
        if self.path.exists():
            good = read_records(self.path)
            lines = self.path.read_text().splitlines()
            if lines != [json.dumps(r) for r in good]:
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text("".join(json.dumps(r) + "\n" for r in good))
                os.replace(tmp, self.path)
            self.records = good

    def done(self, pair: tuple[str, str]) -> set[str]:
        return {r["config_id"] for r in self.records if (r["task"], r["sampler"]) == pair}

    def append(self, records: list[dict]) -> None:
        with open(self.path, "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in records))
            f.flush()
            os.fsync(f.fileno())
        self.records.extend(records)


def process_results_path(workdir: Path, process: int) -> Path:
    return Path(workdir) / f"results.p{process}.jsonl"


def assemble(workdir: Path, store: ResultsFile, pair: tuple[str, str]) -> list[dict]:
    """Append to `store` the records of `pair` found in every `results.p<k>.jsonl` but not yet in it.

    New records go in grid order (`index`); duplicates (the same config id in
    several files, or already stored) are written once. Returns the new records.
    """
    have = store.done(pair)
    new = {}
    for path in sorted(Path(workdir).glob("results.p*.jsonl")):
        for r in read_records(path):
            if (r["task"], r["sampler"]) == pair and r["config_id"] not in have:
                new.setdefault(r["config_id"], r)
    records = sorted(new.values(), key=lambda r: r["index"])
    if records:
        store.append(records)
    return records


def _local_rows(metrics: dict) -> tuple[list[int], dict[str, np.ndarray]]:
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


def run_pair(
    task: Task,
    sampler: AbstractSampler,
    cases: Cases,
    reference: tuple[jax.Array, jax.Array],
    grid: ConfigGrid,
    *,
    num_samples: int,
    seed: int,
    chunk_size: int,
    batch_size: int,
    results: ResultsFile | None = None,
    skip: set[str] | None = None,
    labels: Mapping[str, str] | None = None,
    mesh=None,
    metric_options: Mapping | None = None,
    diagnostics: Sequence[str] = (),
    progress: Callable[[int, int, float, float], None] | None = None,
    calibration_options: Mapping | None = None,
) -> list[dict]:
    """Sample and score every configuration of `grid` for one (task, sampler) pair.

    Args:
      task: the true task (cases, reference, scoring); `sampler.task` may differ
        (a misspecified model) but must have the same unknown and observation shapes.
      cases: the benchmark cases (`x_true`, `y_obs` indexed by `grid.case`).
      reference: `(ref_samples (num_cases, M, C, H, W), ref_weights (num_cases, M))`.
      chunk_size: configurations per compiled call (rounded up to a multiple of
        the device count); results are written after each chunk.
      batch_size: configurations vmapped at once on a device (memory bound).
      results: where finished records go; with several processes, this process's own file.
      skip: config ids not to compute (default: those already in `results`).
      labels: `{"task": ..., "sampler": ...}` names recorded (default: registry-style names).
      diagnostics: names from `DIAGNOSTICS` computed per record.
      progress: called after each chunk with (configurations done, configurations to do,
        compile seconds of this chunk (0 after the first), run seconds of this chunk).
      calibration_options: `calibration_settings` of the over-case statistics.

    Returns:
      The records computed (by this process's devices) in this call, skipped ones excluded.
    """
    mesh = parallel.data_mesh() if mesh is None else mesh
    labels = {"task": task.name, "sampler": sampler.name, **(labels or {})}
    chunk = parallel.padded_size(max(1, min(chunk_size, grid.size)), mesh)
    ids = grid.ids()
    if skip is None:
        skip = results.done((labels["task"], labels["sampler"])) if results else set()
    todo = [i for i, cid in enumerate(ids) if cid not in skip]
    data = parallel.global_tree(program_data(task, cases, reference, seed=seed), parallel.replicated(mesh))
    one = case_program(
        task, sampler, num_samples, seed=seed, metric_options=metric_options, diagnostics=diagnostics,
        calibration_options=calibration_options,
    )  # fmt: skip
    program = eqx.filter_jit(chunk_program(one, mesh, batch_size))

    compiled, compile_s, out = None, 0.0, []
    for start in range(0, len(todo), chunk):
        index = np.asarray(todo[start : start + chunk])
        padded = np.concatenate([index, np.repeat(index[-1:], chunk - len(index))])
        configs = parallel.global_tree(grid.take(padded), parallel.batch_sharding(mesh))
        chunk_compile_s = 0.0
        if compiled is None:
            t0 = time.perf_counter()
            compiled = program.lower(data, configs).compile()
            compile_s = chunk_compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        metrics = jax.block_until_ready(compiled(data, configs))
        run_s = time.perf_counter() - t0
        wall = run_s / chunk
        rows, values = _local_rows(metrics)
        records = []
        for j, pos in enumerate(rows):
            if pos >= len(index):
                continue  # padding
            i = int(index[pos])
            records.append(
                {
                    "task": labels["task"],
                    "sampler": labels["sampler"],
                    "config_id": ids[i],
                    "index": i,
                    "case": int(grid.case[i]),
                    "seed": int(grid.seed[i]),
                    "hparams": {k: float(v[i]) for k, v in grid.hparams.items()},
                    "num_samples": num_samples,
                    "metrics": {k: _jsonable(v[j]) for k, v in values.items()},
                    "wall_time_s": wall,
                    "compile_time_s": compile_s,
                    "evaluation": task.evaluation_name,
                }
            )
        if results is not None and records:
            results.append(records)
        out.extend(records)
        if progress is not None:
            progress(min(start + chunk, len(todo)), len(todo), chunk_compile_s, run_s)
    return out


# ----------------------------------------------------------------------------
# Stored samples for figures


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
    file are kept, not recomputed. Written atomically. Returns S.
    """
    ids = grid.ids()
    wanted = [i for i in range(grid.size) if grid.case[i] < max_case]
    if not wanted:
        return 0
    have: dict[str, np.ndarray] = {}
    if path.exists():
        with np.load(path) as z:
            have = {migrate_config_id(str(c)): z["samples"][j] for j, c in enumerate(z["config_id"])}
    missing = [i for i in wanted if ids[i] not in have]
    if missing:
        one = sample_program(sampler, num_samples, seed=seed)
        data = {"y_obs": jnp.asarray(cases.y_obs)}
        fn = eqx.filter_jit(lambda d, c: jax.lax.map(lambda x: one(d, x), c, batch_size=batch_size))
        new = np.asarray(jax.device_get(fn(data, jax.tree.map(jnp.asarray, grid.take(missing)))))
        have.update({ids[i]: new[j] for j, i in enumerate(missing)})
    arrays = {
        "samples": np.stack([have[ids[i]] for i in wanted]),
        "case": grid.case[wanted].astype(np.int32),
        "seed": grid.seed[wanted].astype(np.int32),
        "config_id": np.asarray([ids[i] for i in wanted]),
    }
    arrays.update({f"hparam_{k}": v[wanted] for k, v in grid.hparams.items()})
    _write_npz(path, arrays)
    return len(wanted)


def prepare_workdir(workdir: Path, config) -> ResultsFile:
    """Create `workdir`, or resume it when it holds the same config; refuse a different one.

    With `overwrite` and a different config, results, stored samples and
    process files are discarded (networks, pools and references are kept:
    they are keyed or checked by their own settings).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "config.json"
    current = json.loads(config.to_json_best_effort(sort_keys=True))
    current.pop("overwrite", None)
    if config_path.exists():
        stored = json.loads(config_path.read_text())
        stored.pop("overwrite", None)
        if stored != current:
            if not config.overwrite:
                raise ValueError(
                    f"workdir: {workdir} holds results of a different config; use another workdir "
                    "or pass --config.overwrite=True to discard them"
                )
            for name in ("results.jsonl", "results.csv", "summary.md", "calibration.json"):
                (workdir / name).unlink(missing_ok=True)
            for path in workdir.glob("results.p*.jsonl"):
                path.unlink()
            shutil.rmtree(workdir / "samples", ignore_errors=True)
    tmp = config_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(current, indent=2, sort_keys=True))
    os.replace(tmp, config_path)
    return ResultsFile(workdir / "results.jsonl")


def _sync(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def run(config, workdir: str | os.PathLike, *, progress: bool = True) -> list[dict]:
    """Run every (task, sampler) pair of `config`; write results, tables, samples, provenance to `workdir`.

    Returns the records of `results.jsonl` (process 0; other processes return []).
    """
    from posteriorjax import results as results_lib
    from posteriorjax import samplers, tasks

    s = settings(config)
    calib = calibration_settings(config.get("calibration"))
    prebuilt = _build_samplers(s)
    workdir = Path(workdir)
    lead = jax.process_index() == 0
    multi = jax.process_count() > 1
    store = prepare_workdir(workdir, config) if lead else None
    own = ResultsFile(process_results_path(workdir, jax.process_index())) if multi else store
    _sync("sweep-prepare")
    if lead:
        prov = results_lib.provenance({"seed": s.seed, "sampler_seeds": list(s.seeds)})
        (workdir / "provenance.json").write_text(json.dumps(prov, indent=2))
    mesh = parallel.data_mesh()
    references_report, trained = {}, {}
    study = _study_progress(s, workdir, store, enabled=progress and lead)
    for task_name, task_options in s.tasks.items():
        task = tasks.get(task_name, **task_options)
        cases = task.cases(s.seed, s.num_cases)
        path = reference_path(workdir, task_name)
        build = dict(seed=s.seed, workdir=workdir, path=path, overwrite=s.overwrite)
        rc = s.references[task_name]
        if lead:
            if progress:
                absl_logging.info("[reference] %s: %s", task_name, rc["method"])
            ref_samples, ref_weights, report = load_or_build_reference(
                task, cases, rc, **build, progress=progress
            )
        _sync(f"sweep-reference-{task_name}")
        if not lead:
            ref_samples, ref_weights, report = load_or_build_reference(task, cases, rc, **build)
        references_report[task_name] = report
        for entry in s.samplers:
            if task_name not in entry.tasks:
                continue
            pair = (task_name, entry.label)
            sampler_options = {**task_options, **entry.task_options}
            sampler_task = tasks.get(task_name, **sampler_options)
            options = dict(entry.options)
            for option, spec in entry.networks.items():
                net_key = json.dumps(
                    [task_name, sampler_options, dataclasses.asdict(spec)], sort_keys=True, default=str
                )
                if net_key not in trained:
                    trained[net_key] = network(
                        workdir, task_name, sampler_options, spec, s.training_scale, s.training_steps,
                        progress=progress,
                    )  # fmt: skip
                options[option] = trained[net_key]
            if pair in prebuilt:
                sampler = prebuilt[pair]
            else:
                sampler = _checked(
                    pair, lambda e=entry, t=sampler_task, o=options: samplers.get(e.sampler, t, **o)
                )
            grid = _checked(
                pair, lambda e=entry, sm=sampler: expand(s.num_cases, e.axes, s.seeds, sm.defaults)
            )

            skip = store.done(pair) if not multi else _done_everywhere(workdir, pair)
            study.start_pair(f"{task_name} / {entry.label}", len(set(grid.ids()) - skip), grid.size)
            run_pair(
                task, sampler, cases, (ref_samples, ref_weights), grid, num_samples=s.num_samples,
                seed=s.seed, chunk_size=s.chunk_size, batch_size=s.batch_size, results=own, skip=skip,
                labels={"task": task_name, "sampler": entry.label}, mesh=mesh,
                diagnostics=s.diagnostics, progress=lambda done, _, c, r: study.chunk(done, c, r),
                calibration_options=calib,
            )  # fmt: skip
            _sync(f"sweep-pair-{task_name}-{entry.label}")
            if lead and multi:
                assemble(workdir, store, pair)
            if lead and s.save_samples:
                save_samples(
                    workdir / "samples" / task_name / f"{entry.label}.npz", sampler, cases, grid,
                    num_samples=s.num_samples, seed=s.seed, max_case=s.save_samples, batch_size=s.batch_size,
                )  # fmt: skip
    if not lead:
        return []
    from posteriorjax.reference import store as artifact_store

    artifact_store.atomic_write_json(workdir / "references.json", references_report)
    summary = results_lib.write_tables(workdir, store.records)
    if progress:
        print(summary, flush=True)  # the study's result, on stdout
    if s.figures:
        _render_figures(workdir, progress)
    return store.records


def _checked(pair: tuple[str, str], build: Callable):
    """`build()`, with a ValueError naming the sampler entry and task it was for."""
    try:
        return build()
    except ValueError as e:
        raise ValueError(f"config.samplers.{pair[1]} (task {pair[0]!r}): {e}") from e


def _build_samplers(s: Settings) -> dict[tuple[str, str], AbstractSampler]:
    """Every sampler that needs no trained network, built and its axes checked before any sweep compute."""
    from posteriorjax import samplers, tasks

    built = {}
    for task_name, task_options in s.tasks.items():
        for entry in s.samplers:
            if task_name not in entry.tasks or entry.networks:
                continue
            pair = (task_name, entry.label)
            task = tasks.get(task_name, **{**task_options, **entry.task_options})
            sampler = _checked(pair, lambda e=entry, t=task: samplers.get(e.sampler, t, **e.options))
            _checked(pair, lambda e=entry, sm=sampler: expand(s.num_cases, e.axes, s.seeds, sm.defaults))
            built[pair] = sampler
    return built


def _done_everywhere(workdir: Path, pair: tuple[str, str]) -> set[str]:
    """Config ids of `pair` in `results.jsonl` or any process file (the same set on every process)."""
    paths = [Path(workdir) / "results.jsonl", *sorted(Path(workdir).glob("results.p*.jsonl"))]
    return {r["config_id"] for p in paths for r in read_records(p) if (r["task"], r["sampler"]) == pair}


def _render_figures(workdir: Path, progress: bool) -> list[Any]:
    try:
        from posteriorjax import figures
    except ModuleNotFoundError as e:
        if e.name != "posteriorjax.figures":
            raise
        absl_logging.warning("posteriorjax.figures is not available; no figures rendered")
        return []
    paths = figures.render(workdir)
    if progress:
        absl_logging.info("[figures] %d figure(s) in %s", len(paths), workdir / "figures")
    return paths


def _study_progress(s: Settings, workdir: Path, store: ResultsFile | None, *, enabled: bool):
    """`console.StudyProgress` over every (task, sampler) pair of the study, resumed records counted."""
    from posteriorjax import console

    sizes, done = [], 0
    for task_name in s.tasks:
        for entry in s.samplers:
            if task_name in entry.tasks:
                sizes.append(s.num_cases * math.prod(len(v) for v in entry.axes.values()) * len(s.seeds))
                pair = (task_name, entry.label)
                done += len(store.done(pair) if store is not None else _done_everywhere(workdir, pair))
    return console.StudyProgress(len(sizes), sum(sizes), min(done, sum(sizes)), enabled=enabled)
