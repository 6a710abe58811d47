"""Sweep engine: cases x hyperparameters x seeds as one compiled, sharded program per pair.

Read in order: `settings` (parse: the config schema as frozen dataclasses), `plan` (every
task, sampler and grid built once), `program` and `statistics` (the pure JAX program: grid,
keys, case and chunk programs, TARP/MIRA statistics), `store` (typed records, the one reader
and grouping key, atomic writers, multi-host assembly), `run` (orchestration). `networks`
holds the network specs and their training; references come from `reference.registry`.

The package exports its entry points only (`run`, `dry_run`, `validate`, `run_pair`, and
`reference_config` / `calibration_settings` for configs); everything else is imported from its
module (`posteriorjax.sweep.store.read_records`).
"""

from posteriorjax.reference.registry import config as reference_config
from posteriorjax.sweep.pair import run_pair
from posteriorjax.sweep.plan import dry_run, validate
from posteriorjax.sweep.run import STAGES, run
from posteriorjax.sweep.settings import calibration_settings

__all__ = ["STAGES", "calibration_settings", "dry_run", "reference_config", "run", "run_pair", "validate"]
