"""Plan: every task, case set, sampler and configuration grid of a study, each built once.

`Plan.build(settings)` builds the tasks (and the misspecified variants samplers ask for)
and runs the checks that need them; `prepare()` builds every sampler that needs no trained
network with its grid (before any compute, so a bad entry fails before the workdir is
touched); `pair(task_name, entry, networks)` hands out the sampler and grid of a pair,
building a trained sampler once its networks exist.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
from absl import logging as absl_logging
from jax.experimental import multihost_utils

from posteriorjax import samplers, tasks
from posteriorjax.reference import heldout, registry
from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.sweep import calibrate, networks, program, statistics
from posteriorjax.sweep import given as given_cases
from posteriorjax.sweep import sizing as sizing_module
from posteriorjax.sweep.settings import SamplerEntry, Settings, settings
from posteriorjax.sweep.store import reference_directory
from posteriorjax.tasks.base import Cases, Task


def checked(pair: tuple[str, str], build: Callable):
    """`build()`, with a ValueError naming the sampler entry and task it was for."""
    try:
        return build()
    except ValueError as e:
        raise ValueError(f"config.samplers.{pair[1]} (task {pair[0]!r}): {e}") from e


@dataclasses.dataclass
class Plan:
    """The built objects of a study, keyed by task name and (task name, sampler label)."""

    settings: Settings
    tasks: dict[str, Task]
    variants: dict[str, Task] = dataclasses.field(default_factory=dict)
    samplers: dict[tuple[str, str], AbstractSampler] = dataclasses.field(default_factory=dict)
    grids: dict[tuple[str, str], program.ConfigGrid] = dataclasses.field(default_factory=dict)
    trained: dict[str, Any] = dataclasses.field(default_factory=dict)  # networks by spec
    _cases: dict[str, Cases] = dataclasses.field(default_factory=dict)
    given: dict[str, Any] = dataclasses.field(default_factory=dict)  # `given.GivenCases` by task

    @classmethod
    def build(cls, s: Settings) -> Plan:
        """Build every task of `s` once and check what needs them (ValueError naming the field)."""
        plan = cls(
            s, {name: _task(name, options, f"config.tasks.{name}") for name, options in s.tasks.items()}
        )
        for name, value in s.cases_files.items():
            plan.given[name] = _given(name, value, plan.tasks[name], s.num_cases)
            plan.tasks[name] = plan.given[name].task  # observing the file's sensors
        for name, task in plan.tasks.items():
            if "alpha" in s.diagnostics:
                try:
                    statistics.grf_alpha_spec(task.prior)
                except ValueError as e:
                    raise ValueError(f"config.diagnostics: task {name!r}: {e}") from e
        for task_name, entry in s.pairs():
            plan.sampler_task(task_name, entry)
        for name, task in plan.tasks.items():
            if name not in plan.given:  # a given reference needs no method
                registry.check_task(task, s.references[name], s.reference_where(name))
        return plan

    def sampler_task(self, task_name: str, entry: SamplerEntry) -> Task:
        """The task `entry`'s sampler is built on: the true task, or its `task_options` variant."""
        if not entry.task_options:
            return self.tasks[task_name]
        options = {**self.settings.tasks[task_name], **entry.task_options}
        key = json.dumps([task_name, options], sort_keys=True, default=str)
        if key not in self.variants:
            where = f"config.samplers.{entry.label}.task_options"
            variant, true = _task(task_name, options, where), self.tasks[task_name]
            if task_name in self.given:
                variant = eqx.tree_at(lambda t: t.observation, variant, true.observation)
            if (variant.unknown_shape, variant.num_observations) != (
                true.unknown_shape,
                true.num_observations,
            ):
                raise ValueError(
                    f"{where}: the sampler's task {task_name!r} has unknown shape "
                    f"{variant.unknown_shape} and {variant.num_observations} observations; the true task "
                    f"has {true.unknown_shape} and {true.num_observations}"
                )
            self.variants[key] = variant
        return self.variants[key]

    def cases(self, task_name: str) -> Cases:
        """The benchmark cases of a task (`Task.cases(seed, num_cases)`), drawn once."""
        if task_name in self.given:
            return self.given[task_name].cases
        if task_name not in self._cases:
            self._cases[task_name] = self.tasks[task_name].cases(self.settings.seed, self.settings.num_cases)
        return self._cases[task_name]

    def case_ids(self, task_name: str) -> tuple[str, ...]:
        """The ids of a task's cases: the file's, or `<task>_<i>` for case i drawn from the seed."""
        if task_name in self.given:
            return self.given[task_name].ids
        return tuple(f"{task_name}_{i}" for i in range(self.settings.num_cases))

    def prepare(self) -> Plan:
        """Build every sampler that needs no trained network, and its grid (errors name the entry)."""
        for task_name, entry in self.settings.pairs():
            if not entry.networks:
                self.pair(task_name, entry, {})
        return self

    def pair(
        self, task_name: str, entry: SamplerEntry, networks: Mapping
    ) -> tuple[AbstractSampler, program.ConfigGrid]:
        """(sampler, grid) of a pair, built on first use; `networks`: {option: trained model}."""
        pair = (task_name, entry.label)
        if pair not in self.samplers:
            task, options = self.sampler_task(task_name, entry), {**entry.options, **networks}
            sampler = checked(pair, lambda: samplers.get(entry.sampler, task, **options))
            s = self.settings
            self.grids[pair] = checked(
                pair, lambda: program.expand(s.num_cases, entry.axes, s.seeds, sampler.defaults)
            )
            self.samplers[pair] = sampler
        return self.samplers[pair], self.grids[pair]

    def reference(
        self,
        task_name: str,
        workdir: Path,
        *,
        lead: bool,
        progress: bool,
        which: str = "heldout",
        validation: int = 0,
    ):
        """(samples, weights, report) of a task's reference set `which` (`reference.heldout`: the
        held-out set every row is scored on, or the public set `exchange.export` writes), by
        `registry.load_or_build`, cached in `workdir/references/<task>/` (public) and
        `<task>.heldout/`: process 0 builds it, the others then load it.
        Given cases have one reference, the file's (`report["set"] == "given"`).

        `validation` > 0: the reference of that many validation cases (`calibrate.validation_cases`,
        disjoint from the test cases; `which` does not apply), cached in
        `workdir/calibration/references/<task>/`; its case keys are the `"validation"` stream of
        the reference key, its pool the public reference's.
        """
        if task_name in self.given:
            if validation:
                raise ValueError(
                    f"config.cases_files.{task_name}: a task whose cases come from a file has no drawn "
                    "validation cases to calibrate on"
                )
            g = self.given[task_name]
            return g.ref_samples, g.ref_weights, {"method": "given", "source": g.source, "set": heldout.GIVEN}
        s, task = self.settings, self.tasks[task_name]
        rc, cases = s.references[task_name], self.cases(task_name)
        plain = {"reference": dict(rc), "seed": s.seed, "num_cases": s.num_cases}
        root, pool_key = statistics.stream_keys(s.seed)["reference"], None
        directory = reference_directory(workdir, task_name)
        if validation:
            which = "validation"
            cases = calibrate.validation_cases(task, s.seed, validation)
            plain.update(num_cases=validation, split="validation", start=calibrate.VALIDATION_START)
            key, pool_key = registry.stream(root, "validation"), jax.random.split(root)[0]
            directory = Path(workdir) / "calibration" / "references" / task_name
        else:
            if which == heldout.HELDOUT:  # the public set keeps the identity every cache had before
                plain["set"] = heldout.HELDOUT
            key = heldout.key(root, which)
            directory = heldout.directory(directory, which)
        surrogate, spec = None, s.reference_networks.get(task_name)
        if spec is not None:  # trained (or loaded) on every process, like a sampler's network
            surrogate = self.reference_network(task_name, workdir, progress)
            options = s.tasks[task_name]
            plain["surrogate_network"] = networks.network_config(
                task_name, options, spec, s.training_scale, s.training_steps
            )[1]
        identity = json.dumps(plain, sort_keys=True)
        build = dict(
            workdir=workdir,
            settings=identity,
            overwrite=s.overwrite,
            surrogate=surrogate,
            pool_key=pool_key,
        )
        if lead:
            if progress:
                absl_logging.info("[reference] %s: %s (%s set)", task_name, rc["method"], which)
            out = registry.load_or_build(rc, task, cases, key, directory, **build, progress=progress)
        sync(f"sweep-reference-{task_name}-{which}")
        if not lead:
            out = registry.load_or_build(rc, task, cases, key, directory, **build)
        return (*out[:2], {**out[2], "set": which})

    def reference_network(self, task_name: str, workdir: Path, progress: bool):
        """The trained surrogate of a task's reference (`settings.reference_networks`)."""
        spec = self.settings.reference_networks[task_name]
        return self._network(task_name, self.settings.tasks[task_name], spec, workdir, progress)

    def networks(self, task_name: str, entry: SamplerEntry, workdir: Path, progress: bool) -> dict:
        """{option: trained model} of an entry (`networks.network`); one shared by entries is trained once."""
        options = {**self.settings.tasks[task_name], **entry.task_options}
        return {
            option: self._network(task_name, options, spec, workdir, progress)
            for option, spec in entry.networks.items()
        }

    def network_records(self, task_name: str, entry: SamplerEntry, workdir: Path) -> dict:
        """{option: `networks.network_record`} of an entry's trained networks (after `networks`;
        every process reads what process 0 stored)."""
        sync(f"sweep-network-records-{task_name}-{entry.label}")
        options, s = {**self.settings.tasks[task_name], **entry.task_options}, self.settings
        return {
            option: networks.network_record(
                workdir, task_name, options, spec, s.training_scale, num_steps=s.training_steps
            )
            for option, spec in entry.networks.items()
        }

    def _network(self, task_name: str, options: Mapping, spec, workdir: Path, progress: bool):
        """The trained network of `spec` for the task with `options` (trained once per study)."""
        s = self.settings
        key = json.dumps([task_name, options, dataclasses.asdict(spec)], sort_keys=True, default=str)
        if key not in self.trained:
            self.trained[key] = networks.network(
                workdir,
                task_name,
                options,
                spec,
                s.training_scale,
                num_steps=s.training_steps,
                progress=progress,
            )
        return self.trained[key]


def sync(name: str) -> None:
    """A barrier of every process (no-op with one)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def _task(name: str, options: Mapping, where: str) -> Task:
    try:
        return tasks.get(name, **options)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: cannot build task {name!r} with options {dict(options)}: {e}") from e


def _given(name: str, value, task: Task, num_cases: int):
    path, options = given_cases.entry(value)
    try:
        return given_cases.load(path, task, **options).head(num_cases, "config.num_cases")
    except (TypeError, ValueError) as e:
        raise ValueError(f"config.cases_files.{name}: {e}") from e


def validate(config) -> None:
    """Check a sweep config before any compute (ValueError naming the field): its schema
    (`settings.Settings.parse`) and everything that needs its tasks (`Plan.build`)."""
    Plan.build(settings(config))


def dry_run(config, *, sizing: bool = False, compile: bool = True, pilot_draws: int = 2048, log=None) -> dict:
    """What a sweep config would build and cost, with no pool, training or sampling.

    Validates the config (`validate`: schema, tasks built, reference methods checked against their
    task), then resolves per task: its options, unknown shape and observation count; its reference
    (method, rule, the settings the method reads, the eps it would use for the eps-rule methods,
    and for a surrogate method the surrogate's kind and training-config hash); the sampler entries
    that run on it. Returns `{"tasks": {name: {...}}, "num_cases", "num_samples", "training_scale"}`
    and, with `sizing`, `"sizing"` (`sizing.size`: program and configuration counts, the networks'
    parameter counts, each program's FLOPs and, with `compile`, its XLA memory, the expected hours
    per benchmarked device, and per eps-rule reference a fill verdict from a pilot pool of
    `pilot_draws` prior draws); each task's entry then also has `"fill"`, that verdict.
    """
    s = settings(config)
    plan = Plan.build(s)
    out = {}
    for name, task in plan.tasks.items():
        rc = s.references[name]
        ref = {k: v for k, v in registry.report(task, rc, []).items() if k in ("method", "rule", "settings")}
        if rc["method"] in ("published_eps", "eps_k1000"):
            ref["eps"] = registry.published_eps(task)
        spec = s.reference_networks.get(name)
        if spec is not None:
            scale, steps = s.training_scale, s.training_steps
            cfg, digest = networks.network_config(name, s.tasks[name], spec, scale, steps)
            ref["surrogate"] = {"kind": spec.kind, "hash": digest, "data": dict(cfg.data)}
        out[name] = {
            "options": dict(s.tasks[name]),
            "unknown_shape": tuple(task.unknown_shape),
            "num_observations": int(task.num_observations),
            "reference": ref,
            "samplers": [entry.label for t, entry in s.pairs() if t == name],
        }
    result = {
        "tasks": out,
        "num_cases": s.num_cases,
        "num_samples": s.num_samples,
        "training_scale": s.training_scale,
    }
    if sizing:
        result["sizing"] = sizing_module.size(plan, compile=compile, pilot_draws=pilot_draws, log=log)
        for name in out:
            out[name]["fill"] = result["sizing"]["references"][name]["verdict"]
    return result
