"""Parse: a sweep config -> frozen `Settings` (the schema; defaults live on the dataclasses).

`Settings.parse(config)` checks every field of the schema that needs no task (errors name
the key, what was expected and what was given); the checks that need a built task (task
options, reference method, diagnostics on the prior) are `plan.Plan`'s, which builds each
task once.

Schema (defaults in brackets):
  seed, seeds (sampler seeds), num_cases, num_samples, chunk_size, batch_size, overwrite;
  tasks: {task_name: {task options}};
  reference: `reference_config(...)` (method exact | pcn | rejection | published_eps |
             eps_k1000 | importance), the reference of every task not named in `references`;
  references [{}]: {task_name: reference_config(...)}, a task's own reference section, in
             place of `reference` (a whole section: keys it omits take `reference_config`'s
             defaults, not `reference`'s values). `Settings.references` holds the effective
             section of every task; the cached reference of a task is checked against it;
             a section's `surrogate` (method surrogate_rejection) is a network spec of kind
             `surrogate`, parsed into `Settings.reference_networks` and trained like a
             sampler's network for the task;
  samplers: {label: {sampler [label], options [{}], axes [{}], networks [{}],
             task_options [{}], tasks [all tasks], calibrate [None]}}; `calibrate`:
             {hparam, grid, num_cases [4], rule ["rank_mean"], relative [False]}
             (`CalibrateSettings`), the hyperparameter chosen on validation cases before
             the pair runs (`calibrate`); a network spec is a kind
             (prior | joint | surrogate | inverse) or {kind, task_options [{}], num_steps [None],
             training [{}], pretrain [None]} (`networks.parse_spec`);
  training: {scale ["tiny"] | "full", num_steps [None]};
  diagnostics [()]: subset of ("pde_residual", "alpha");
  save_samples [2]: store samples of configurations with case < save_samples;
  figures [True]: render figures at the end;
  calibration [{}]: over-case calibration options (`CalibrationSettings`);
  cases_files [{}]: {task_name: path | {path, **options}}, the task's cases and reference
             posterior read from a file (`sweep.given.load`: an exported cases file or a
             PosteriorBench DatasetDict directory) in place of `Task.cases(seed, num_cases)`
             and `reference`; the first `num_cases` cases of the file are used.
A network is trained for the sampler's task (the sweep task's options updated by
the sampler's `task_options`), updated by the spec's `task_options`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from posteriorjax import samplers, training
from posteriorjax.checks import as_dict, integer_at_least, path_component, positive_int
from posteriorjax.metrics import mira
from posteriorjax.metrics import registry as metric_registry
from posteriorjax.reference import registry
from posteriorjax.sweep.networks import NetworkSpec, parse_spec

DIAGNOSTICS = ("pde_residual", "alpha")
SAMPLER_KEYS = ("sampler", "options", "axes", "networks", "task_options", "tasks", "calibrate")
# a sampler entry's defaults: the entry's label names the sampler; `tasks` None = every task
SAMPLER_DEFAULTS = {
    "options": {},
    "axes": {},
    "networks": {},
    "task_options": {},
    "tasks": None,
    "calibrate": None,
}
# selection rules of a calibration stage besides a metric name: the mean over the five posterior
# metrics of each grid value's rank
CALIBRATE_RULES = ("rank_mean",)
__all__ = [
    "CalibrateSettings",
    "CalibrationSettings",
    "SamplerEntry",
    "Settings",
    "TrainingSettings",
]


def _unknown(where: str, given: Mapping, allowed) -> None:
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; expected a subset of {sorted(allowed)}")


def _with_defaults(cls, values: Mapping, where: str) -> dict:
    """`values` over the field defaults of dataclass `cls` (unknown keys are an error)."""
    names = [f.name for f in dataclasses.fields(cls)]
    _unknown(where, values, names)
    defaults = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    return {**defaults, **values}


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
    """`config.training`: the scale networks train at and an optional step count for all of them."""

    scale: str = "tiny"
    num_steps: int | None = None

    @classmethod
    def parse(cls, section) -> TrainingSettings:
        if isinstance(section, cls):
            return section
        values = _with_defaults(cls, as_dict(section), "config.training")
        if values["scale"] not in training.kinds.SCALES:
            raise ValueError(
                f"config.training.scale: expected one of {training.kinds.SCALES}, got {values['scale']!r}"
            )
        steps = values["num_steps"]
        steps = None if steps is None else positive_int("config.training.num_steps", steps)
        return cls(values["scale"], steps)


@dataclasses.dataclass(frozen=True)
class CalibrationSettings:
    """`config.calibration`: the over-case statistics' options (`program.calibration_statistics`).

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
    (measured on `model_comparison:tiny`, d = 256, N = 32: docs/metrics.md, "Which
    normalization").
    """

    mira_centres: str = "uniform"
    mira_half_width: float = mira.PAPER_HALF_WIDTH
    mira_normalization: str = "with_truth"
    mira_distance: str = "l2"
    tarp_reference: str = "prior"
    tarp_half_width: float = 0.5

    @classmethod
    def parse(cls, section=None) -> CalibrationSettings:
        if isinstance(section, cls):
            return section
        values = as_dict(section)
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            expected = sorted(f.name for f in dataclasses.fields(cls))
            raise ValueError(f"config.calibration: unknown key(s) {unknown}; expected {expected}")
        values = _with_defaults(cls, values, "config.calibration")
        for name, choices in (
            ("mira_centres", ("uniform", "observation")),
            ("tarp_reference", ("prior", "observation")),
        ):
            if values[name] not in choices:
                raise ValueError(
                    f"config.calibration.{name}: expected one of {choices}, got {values[name]!r}"
                )
        for name in ("mira_half_width", "tarp_half_width"):
            if not float(values[name]) > 0:
                raise ValueError(
                    f"config.calibration.{name}: expected > 0 (data units), got {values[name]!r}"
                )
            values[name] = float(values[name])
        mira.options(normalization=values["mira_normalization"], distance=values["mira_distance"])
        return cls(**values)

    @property
    def observed(self) -> bool:
        """Whether a centre or reference point depends on the observation (needs m(y))."""
        return self.mira_centres == "observation" or self.tarp_reference == "observation"


CALIBRATION_DEFAULTS = dataclasses.asdict(CalibrationSettings())


def calibration_settings(section=None) -> dict:
    """`CalibrationSettings.parse(section)` as a dict (keys of `CALIBRATION_DEFAULTS`)."""
    return dataclasses.asdict(CalibrationSettings.parse(section))


@dataclasses.dataclass(frozen=True)
class CalibrateSettings:
    """`config.samplers.<label>.calibrate`: choose a hyperparameter on validation cases (`calibrate`).

    hparam: a numeric hyperparameter of the sampler (a key of its `defaults`: FunDPS's
    ``guidance``, DDIS's ``step_size``, ...), not one of the entry's `axes`; grid: the values
    tried (absolute, or with `relative` multiples of the sampler's default on the task);
    num_cases: validation cases, drawn disjoint from the test cases (`calibrate.validation_cases`);
    rule: ``"rank_mean"`` (the lowest mean over the five posterior metrics of the value's rank
    among the grid by its over-case mean) or a metric name (the lowest over-case mean of it).
    """

    hparam: str
    grid: tuple[float, ...]
    num_cases: int = 4
    rule: str = "rank_mean"
    relative: bool = False

    @classmethod
    def parse(cls, where: str, raw) -> CalibrateSettings:
        values = as_dict(raw)
        if "hparam" not in values or "grid" not in values:
            raise ValueError(f"{where}: expected the keys 'hparam' and 'grid', got {sorted(values)}")
        values = _with_defaults(cls, values, where)
        if not (isinstance(values["hparam"], str) and values["hparam"]):
            raise ValueError(f"{where}.hparam: expected a hyperparameter name, got {values['hparam']!r}")
        try:
            grid = tuple(float(v) for v in values["grid"])
        except (TypeError, ValueError):
            raise ValueError(
                f"{where}.grid: expected a sequence of numbers, got {values['grid']!r}"
            ) from None
        if len(grid) < 2 or len(set(grid)) != len(grid) or not all(map(math.isfinite, grid)):
            raise ValueError(f"{where}.grid: expected at least two distinct finite values, got {grid}")
        rules = CALIBRATE_RULES + tuple(metric_registry.TABLE)
        if values["rule"] not in rules:
            raise ValueError(f"{where}.rule: expected one of {rules}, got {values['rule']!r}")
        if not isinstance(values["relative"], bool):
            raise ValueError(f"{where}.relative: expected True or False, got {values['relative']!r}")
        num = positive_int(f"{where}.num_cases", values["num_cases"])
        return cls(values["hparam"], grid, num, values["rule"], values["relative"])


@dataclasses.dataclass(frozen=True)
class SamplerEntry:
    """One `config.samplers.<label>` entry (`calibrate`: None or a `CalibrateSettings`)."""

    label: str
    sampler: str
    options: dict
    axes: dict
    networks: dict[str, NetworkSpec]
    task_options: dict
    tasks: tuple[str, ...]
    calibrate: CalibrateSettings | None = None

    @classmethod
    def parse(cls, label: str, raw, task_names, scale: str) -> SamplerEntry:
        where = f"config.samplers.{label}"
        raw = as_dict(raw)
        unknown = sorted(set(raw) - set(SAMPLER_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; expected a subset of {SAMPLER_KEYS}")
        raw = {**SAMPLER_DEFAULTS, "sampler": label, **{k: v for k, v in raw.items() if v is not None}}
        name = raw["sampler"]
        if name not in samplers.names():
            raise ValueError(f"{where}: unknown sampler {name!r}; registered: {samplers.names()}")
        allowed = samplers.options(name)
        options = as_dict(raw["options"])
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ValueError(
                f"{where}.options: sampler {name!r} has no option(s) {unknown}; options: {allowed}"
            )
        axes = {k: tuple(v) for k, v in as_dict(raw["axes"]).items()}
        for axis, values in axes.items():
            if len(values) == 0:
                raise ValueError(f"{where}.axes.{axis}: axis has no values")
        on = tuple(task_names) if raw["tasks"] is None else tuple(raw["tasks"])
        unknown = sorted(set(on) - set(task_names))
        if unknown:
            raise ValueError(f"{where}.tasks: unknown task(s) {unknown}; the config has {sorted(task_names)}")
        networks = {}
        for option, spec in as_dict(raw["networks"]).items():
            if option not in allowed:
                raise ValueError(
                    f"{where}.networks: sampler {name!r} has no option {option!r} to receive a network; "
                    f"options: {allowed}"
                )
            if option in options:
                raise ValueError(f"{where}.networks.{option}: also given in options; give it once")
            networks[option] = parse_spec(
                f"{where}.networks.{option}", spec, scale, (on or tuple(task_names))[0]
            )
        calibrate = raw["calibrate"]
        if calibrate is not None:
            calibrate = CalibrateSettings.parse(f"{where}.calibrate", calibrate)
            if calibrate.hparam in axes:
                raise ValueError(
                    f"{where}.calibrate.hparam: {calibrate.hparam!r} is also an axis of the entry; the "
                    "calibration chooses its value, so give it in one place"
                )
        return cls(label, name, options, axes, networks, as_dict(raw["task_options"]), on, calibrate)


@dataclasses.dataclass(frozen=True)
class Settings:
    """The typed sweep config (the schema: this module's docstring)."""

    seed: int
    seeds: tuple[int, ...]
    num_cases: int
    num_samples: int
    chunk_size: int
    batch_size: int
    overwrite: bool
    tasks: dict[str, dict]
    reference: dict
    samplers: tuple[SamplerEntry, ...]
    references: dict[str, dict] = dataclasses.field(default_factory=dict)
    overridden: tuple[str, ...] = ()  # the tasks with their own `config.references` section
    training: TrainingSettings = TrainingSettings()
    diagnostics: tuple[str, ...] = ()
    save_samples: int = 2
    figures: bool = True
    calibration: CalibrationSettings = CalibrationSettings()
    cases_files: dict[str, Any] = dataclasses.field(default_factory=dict)
    reference_networks: dict[str, NetworkSpec] = dataclasses.field(default_factory=dict)

    @property
    def training_scale(self) -> str:
        return self.training.scale

    @property
    def training_steps(self) -> int | None:
        return self.training.num_steps

    @classmethod
    def parse(cls, config) -> Settings:
        """Validate a sweep config's schema and convert it (ValueError naming the field; no compute)."""
        names = {f.name for f in dataclasses.fields(cls)}
        # a config may carry other top-level fields (e.g. a study's linked knobs): not the schema's
        values = _with_defaults(cls, {k: v for k, v in as_dict(config).items() if k in names}, "config")
        missing = sorted(k for k in names if k not in values)
        if missing:
            raise ValueError(f"config: missing field(s) {missing}")
        task_map = as_dict(values["tasks"])
        if not task_map:
            raise ValueError("config.tasks: expected at least one task")
        sampler_map = as_dict(values["samplers"])
        if not sampler_map:
            raise ValueError("config.samplers: expected at least one sampler")
        _path_names("config.tasks", task_map)
        _path_names("config.samplers", sampler_map)
        for field in ("num_cases", "num_samples", "chunk_size", "batch_size"):
            positive_int(f"config.{field}", values[field])
        seeds = tuple(int(s) for s in values["seeds"])
        if not seeds:
            raise ValueError("config.seeds: expected at least one sampler seed, got none")
        training = TrainingSettings.parse(values["training"])
        diag = tuple(values["diagnostics"])
        bad = sorted(set(diag) - set(DIAGNOSTICS))
        if bad:
            raise ValueError(
                f"config.diagnostics: unknown diagnostic(s) {bad}; expected a subset of {DIAGNOSTICS}"
            )
        entries = tuple(SamplerEntry.parse(k, v, task_map, training.scale) for k, v in sampler_map.items())
        reference, references = _references(values["reference"], values["references"], task_map)
        overridden = tuple(n for n in task_map if n in as_dict(values["references"]))
        reference_networks = _reference_networks(references, overridden, training.scale)
        cases_files = as_dict(values["cases_files"])
        unknown = sorted(set(cases_files) - set(task_map))
        if unknown:
            raise ValueError(
                f"config.cases_files: unknown task(s) {unknown}; the config has {sorted(task_map)}"
            )
        return cls(
            seed=int(values["seed"]),
            seeds=seeds,
            num_cases=int(values["num_cases"]),
            num_samples=int(values["num_samples"]),
            chunk_size=int(values["chunk_size"]),
            batch_size=int(values["batch_size"]),
            overwrite=bool(values["overwrite"]),
            tasks=task_map,
            reference=reference,
            samplers=entries,
            references=references,
            overridden=overridden,
            training=training,
            diagnostics=diag,
            save_samples=integer_at_least("config.save_samples", values["save_samples"], 0),
            figures=bool(values["figures"]),
            calibration=CalibrationSettings.parse(values["calibration"]),
            cases_files=cases_files,
            reference_networks=reference_networks,
        )

    def reference_where(self, task_name: str) -> str:
        """The config key of `task_name`'s reference section (for error messages)."""
        return f"config.references.{task_name}" if task_name in self.overridden else "config.reference"

    def pairs(self) -> list[tuple[str, SamplerEntry]]:
        """Every (task name, sampler entry) the study runs, tasks in config order."""
        return [(t, e) for t in self.tasks for e in self.samplers if t in e.tasks]


def _path_names(where: str, section: Mapping) -> None:
    """Check the keys of `section` (task names, sampler labels) as file names under the workdir.

    They name files and folders (`samples/<task>/<label>.npz`, ...): each must be a
    plain file-name component (`checks.path_component`), and no two may differ only
    in case (they would overwrite each other on a case-insensitive file system).
    """
    seen: dict[str, str] = {}
    for name in section:
        path_component(f"{where}: key", name)
        if name.lower() in seen:
            raise ValueError(
                f"{where}: keys {seen[name.lower()]!r} and {name!r} differ only in case; their files would "
                f"overwrite each other on a case-insensitive file system"
            )
        seen[name.lower()] = name


def _references(default, overrides, task_map) -> tuple[dict, dict[str, dict]]:
    """(the default section, {task: its effective section}) filled with the registry's defaults."""
    reference = registry.section(as_dict(default), "config.reference")
    overrides = as_dict(overrides)
    unknown = sorted(set(overrides) - set(task_map))
    if unknown:
        raise ValueError(f"config.references: unknown task(s) {unknown}; the config has {sorted(task_map)}")
    sections = {n: registry.section(as_dict(overrides[n]), f"config.references.{n}") for n in overrides}
    return reference, {n: sections.get(n, reference) for n in task_map}


def _reference_networks(references: Mapping, overridden, scale: str) -> dict[str, NetworkSpec]:
    """{task: the parsed `surrogate` network spec} of the reference sections that name one."""
    out = {}
    for name, rc in references.items():
        if rc["surrogate"] is None:
            continue
        where = f"config.references.{name}" if name in overridden else "config.reference"
        spec = parse_spec(f"{where}.surrogate", rc["surrogate"], scale, name)
        if spec.kind != "surrogate":
            raise ValueError(
                f"{where}.surrogate.kind: a reference surrogate maps the unknown to the state; "
                f"expected kind 'surrogate', got {spec.kind!r}"
            )
        out[name] = spec
    return out


def settings(config: Any) -> Settings:
    """`Settings.parse(config)`: the typed config (schema checks only; `plan.Plan` checks the tasks)."""
    return Settings.parse(config)
