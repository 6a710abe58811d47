"""Score your own sampler: export a study, sample it in NumPy, evaluate the file, report.

    python docs/tutorials/score_your_own_sampler.py --workdir=/tmp/byo

The loop of "Bring your own sampler" in four steps, from Python instead of the command line
(`experiments.export`, `experiments.evaluate` and `experiments.report` call the same
functions):

1. `exchange.export(config, workdir)` writes the study's cases, truths and reference
   posterior to `workdir/exchange/<task>/` (`.npz`, and `.h5` with h5py).
2. Your sampler reads `cases.npz` and writes `(K, N, C, H, W)` samples with their case ids.
   Here: a NumPy Gaussian sampler for the linear `poisson_fixed` task. It builds the forward
   matrix J column by column through `exchange.Forward` (the task's forward map on NumPy
   arrays), puts an independent Gaussian prior N(m, s^2 I) on every cell (m, s: the exported
   prior statistics `field_mean`, `field_std`) and draws from the Gaussian posterior
   N(mu, S), S = (J^T J / sigma^2 + I / s^2)^-1, mu = S (J^T y / sigma^2 + m / s^2). It is a
   real sampler of a misspecified model: the task's prior is a smooth Gaussian random field,
   not white noise, so it should score between the prior and the exact posterior.
3. `exchange.evaluate(workdir, task, path, name=...)` scores the file with the sweep's own
   program and appends its records to `workdir/results.jsonl`.
4. `report.stage.write(workdir)` writes `results.csv`, `summary.md` and the figures and
   returns the table.

The study is `configs/sweep_tiny.py` at a smaller size (2 cases, 16 x 16, written out in
`study_config`); `--samples` sets the ensemble size. Running the sweep of that config in the
same workdir afterwards (`posteriorjax.sweep.run(study_config(), workdir)`, then
`report.stage.write(workdir)`) puts the built-in sampler beside `numpy_gauss` in the same table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

TASK = "poisson_fixed"


def study_config(num_cases: int = 2, resolution: int = 16, reference_samples: int = 64):
    """`configs/sweep_tiny.py` at a smaller size: one task, its exact posterior as the reference.

    The sweep's built-in `prior` sampler is the study's one entry (a study names at least one);
    the export and the evaluation do not run it.
    """
    import ml_collections

    from posteriorjax import sweep

    config = ml_collections.ConfigDict()
    config.seed = 0
    config.seeds = (0,)
    config.num_cases = num_cases
    config.num_samples = 16
    config.chunk_size = 8
    config.batch_size = 2
    config.overwrite = False
    config.tasks = {TASK: {"resolution": resolution}}
    config.reference = sweep.reference_config("exact", num_samples=reference_samples)
    config.samplers = {"prior": {}}
    config.diagnostics = ("pde_residual", "alpha")
    config.save_samples = 1
    config.figures = False  # the report below draws them
    return config


def gaussian_sampler(cases: dict, forward, num_samples: int, seed: int = 0) -> np.ndarray:
    """Draws of N(mu, S) per case (step 2 above); returns samples `(K, num_samples, C, H, W)`.

    `cases`: the arrays of the exported `cases.npz`; `forward`: a callable mapping a batch of
    fields `(B, C, H, W)` to noise-free observations `(B, M)` (linear here, so J's columns are
    the responses to unit fields).
    """
    y_obs = np.asarray(cases["y_obs"], np.float64)  # (K, M)
    sigma = float(np.asarray(cases["noise_std"]))
    m, s = float(np.asarray(cases["field_mean"])), float(np.asarray(cases["field_std"]))
    shape = cases["observation_mask"].shape  # (H, W); one channel
    d = int(np.prod(shape))
    basis = np.eye(d, dtype=np.float32).reshape(d, 1, *shape)
    offset = np.asarray(forward(0 * basis[:1]), np.float64)  # F(0): zero for a linear map
    jac = (np.asarray(forward(basis), np.float64) - offset).T  # (M, d)
    precision = jac.T @ jac / sigma**2 + np.eye(d) / s**2
    chol = np.linalg.cholesky(precision)  # S = (L L^T)^-1
    rng = np.random.default_rng(seed)
    out = []
    for y in y_obs:
        mu = np.linalg.solve(precision, jac.T @ y / sigma**2 + m / s**2)
        z = rng.standard_normal((d, num_samples))
        draws = mu[:, None] + np.linalg.solve(chol.T, z)  # covariance L^-T L^-1 = S
        out.append(draws.T.reshape(num_samples, 1, *shape))
    return np.stack(out).astype(np.float32)


def main(workdir, *, num_samples: int = 16, figures: bool = True) -> str:
    """Run the four steps in `workdir`; returns the report's Markdown table."""
    from posteriorjax import exchange, tasks
    from posteriorjax.report import stage

    workdir = Path(workdir)
    config = study_config()

    # 1. export: cases, truths and the reference posterior as files
    directories = exchange.export(config, workdir)
    cases = dict(np.load(directories[TASK] / "cases.npz"))
    print(f"exported {len(cases['case_ids'])} cases of {TASK} to {directories[TASK]}")

    # 2. your sampler, outside the package's samplers: NumPy in, NumPy out
    forward = exchange.Forward(tasks.get(TASK, **config.tasks[TASK]))
    start = time.perf_counter()
    samples = gaussian_sampler(cases, forward, num_samples)
    seconds = (time.perf_counter() - start) / len(samples)
    path = workdir / "numpy_gauss.npz"
    np.savez(path, samples=samples, case_ids=cases["case_ids"])

    # 3. evaluate: the sweep's scoring program, records appended to results.jsonl
    exchange.evaluate(workdir, TASK, path, name="numpy_gauss", wall_time_s=seconds)

    # 4. report: results.csv, summary.md and (optionally) the figures
    table, paths = stage.write(workdir, figures=figures, progress=False)
    if figures:
        print(f"{len(paths)} figure(s) in {workdir / 'figures'}")
    print(table)
    return table


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="study workdir (created; an existing one resumes)")
    parser.add_argument("--samples", type=int, default=16, help="ensemble size of the NumPy sampler")
    args = parser.parse_args()
    main(args.workdir, num_samples=args.samples)
