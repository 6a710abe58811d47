"""The report stage of a study: a sweep workdir's tables and figures, drawn from what it stores.

`sweep.run` computes and stores records, references, samples and provenance only; its entry
points (`python -m experiments.sweep`, `posteriorjax sweep`, `exchange.evaluate`) then call
`write(workdir)`, which reads `results.jsonl` and writes `results.csv`, `calibration.json` and
`summary.md` (`tables.write_tables`) and every figure whose inputs exist (`figures.render`);
`python -m experiments.report` calls it on a finished workdir, which redraws the same report.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from absl import logging as absl_logging

from posteriorjax.report import figures as report_figures
from posteriorjax.report import tables
from posteriorjax.sweep.store import read_records


def write(
    workdir, *, figures: bool | None = None, noise_workdirs: Sequence = (), progress: bool = True
) -> tuple[str, list[Path]]:
    """Write the tables of `workdir` and, with `figures`, its figures; return (the Markdown
    summary, the figure paths).

    `figures`: None takes the workdir config's `figures` (`config.json`, default True).
    `noise_workdirs`: sweeps of the same study at other noise levels, pooled into the
    optimum-vs-noise figures (`figures.render`). With `progress` the summary is printed to
    stdout (the study's result) and the figure stage is logged. A workdir without
    `results.jsonl` is a FileNotFoundError naming the command that writes one.
    """
    workdir = Path(workdir)
    path = workdir / "results.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"workdir: expected a sweep workdir holding results.jsonl, but {path} does not exist "
            "(run `python -m experiments.sweep --config=... --workdir=DIR` first)"
        )
    if figures is None:
        config_path = workdir / "config.json"
        config = json.loads(config_path.read_text()) if config_path.exists() else {}
        figures = bool(config.get("figures", True))
    summary = tables.write_tables(workdir, read_records(path))
    if progress:
        print(summary, flush=True)
    paths = []
    if figures:
        if progress:
            absl_logging.info("[figures] drawing the figures of %s", workdir)
        paths = report_figures.render(workdir, noise_workdirs=noise_workdirs)
        if progress:
            absl_logging.info("[figures] %d figure(s) in %s", len(paths), workdir / "figures")
    return summary, paths
