"""Exchange: the benchmark as files, for samplers written in any framework.

`export.export(config, workdir)` writes each task's cases, truths and public reference posterior
(`.npz` and `.h5`, README.json beside them; the held-out reference stays in the workdir,
`reference.heldout`); `score.evaluate(workdir, task, samples)` reads a sampler's samples, weighted
or not (`readers.read_ensemble`), scores them on the held-out set and appends the sweep's records
to `results.jsonl`; `leaderboard.table` ranks every row of a workdir per task; `load`
(`sweep.given.load`, which the sweep's `cases_files` read, kept here as part of this package's
API) reads given cases: an export, or PosteriorBench rows; `interop.Forward` is a task's
forward map and VJP on NumPy arrays.
"""

from posteriorjax.exchange.export import export
from posteriorjax.exchange.interop import Forward
from posteriorjax.exchange.readers import Ensemble, read_ensemble, read_samples
from posteriorjax.exchange.score import evaluate
from posteriorjax.sweep.given import GivenCases, load, with_sensors

__all__ = [
    "Ensemble",
    "Forward",
    "GivenCases",
    "evaluate",
    "export",
    "load",
    "read_ensemble",
    "read_samples",
    "with_sensors",
]
