"""Sweep engine: cases x hyperparameters x seeds as one compiled, sharded program per pair.

Read in order: `settings` (parse: the config schema as frozen dataclasses), `plan` (every
task, sampler and grid built once), `program` and `statistics` (the pure JAX program: grid,
keys, case and chunk programs, TARP/MIRA statistics), `store` (typed records, the one reader
and grouping key, atomic writers, multi-host assembly), `run` (orchestration). `networks`
holds the network specs and their training; references come from `reference.registry`.
"""

from posteriorjax.reference.registry import DEFAULTS as REFERENCE_DEFAULTS
from posteriorjax.reference.registry import METHODS as REFERENCE_METHODS
from posteriorjax.reference.registry import config as reference_config
from posteriorjax.reference.registry import published_eps
from posteriorjax.sweep.networks import NetworkSpec, common_config, network, network_config
from posteriorjax.sweep.pair import run_pair
from posteriorjax.sweep.plan import Plan, dry_run, validate
from posteriorjax.sweep.program import (
    ConfigGrid,
    case_program,
    chunk_program,
    config_key,
    expand,
    local_rows,
    sample_program,
)
from posteriorjax.sweep.run import STAGES, run
from posteriorjax.sweep.samples import save_samples
from posteriorjax.sweep.settings import (
    CALIBRATION_DEFAULTS,
    DIAGNOSTICS,
    SAMPLER_KEYS,
    CalibrationSettings,
    SamplerEntry,
    Settings,
    TrainingSettings,
    calibration_settings,
    settings,
)
from posteriorjax.sweep.statistics import (
    MIRA_REGIONS,
    TARP_STATS_DRAWS,
    calibration_statistics,
    diagnostic_values,
    mira_case_key,
    observation_anchor,
    observation_values,
    program_data,
    stream_keys,
    tarp_normalization,
    tarp_reference_fields,
)
from posteriorjax.sweep.store import (
    Record,
    ResultsFile,
    assemble,
    canonical_number,
    done_everywhere,
    hparams_key,
    jsonable,
    prepare_workdir,
    process_results_path,
    read_records,
    row_key,
)

__all__ = [
    "CALIBRATION_DEFAULTS", "DIAGNOSTICS", "MIRA_REGIONS", "REFERENCE_DEFAULTS",
    "REFERENCE_METHODS", "SAMPLER_KEYS", "TARP_STATS_DRAWS", "CalibrationSettings",
    "ConfigGrid", "NetworkSpec", "Plan", "Record", "ResultsFile", "SamplerEntry", "Settings",
    "TrainingSettings", "assemble", "calibration_settings", "calibration_statistics", "canonical_number",
    "case_program", "chunk_program", "common_config", "config_key", "diagnostic_values", "done_everywhere",
    "dry_run",
    "expand", "hparams_key", "jsonable", "local_rows", "mira_case_key", "network",
    "network_config", "observation_anchor", "observation_values", "prepare_workdir", "process_results_path",
    "program_data", "published_eps", "read_records", "reference_config", "row_key", "run", "run_pair",
    "STAGES", "sample_program", "save_samples", "settings", "stream_keys", "tarp_normalization",
    "tarp_reference_fields", "validate",
]  # fmt: skip
