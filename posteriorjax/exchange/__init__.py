"""Exchange: the benchmark as files, for samplers written in any framework.

`export.export(config, workdir)` writes each task's cases, truths and public reference posterior
(`.npz` and `.h5`, README.json beside them; the held-out reference stays in the workdir,
`reference.heldout`); `score.evaluate(workdir, task, samples)` reads a sampler's samples, weighted
or not (`readers.read_ensemble`), scores them on the held-out set and appends the sweep's records
to `results.jsonl`; `leaderboard.table` ranks every row of a workdir per task; `cases.load`
reads given cases (an export, or PosteriorBench rows through `posteriorbench`) for the sweep's
`cases_files`; `interop.Forward` is a task's forward map and VJP on NumPy arrays.
"""

from posteriorjax.exchange.cases import GivenCases, load, with_sensors
from posteriorjax.exchange.export import export
from posteriorjax.exchange.interop import Forward
from posteriorjax.exchange.readers import Ensemble, read_arrays, read_ensemble, read_samples
from posteriorjax.exchange.score import evaluate

__all__ = [
    "Ensemble",
    "Forward",
    "GivenCases",
    "evaluate",
    "export",
    "load",
    "read_arrays",
    "read_ensemble",
    "read_samples",
    "with_sensors",
]
