"""Task demo: draw cases of the registered tasks, time batched forward solves, check residuals and misfit.

`python -m experiments.demo --config=configs/demo.py`; the README's main job is the quickstart
sweep (`configs/quickstart.py`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from posteriorjax import tasks


def summarize(task: tasks.Task, num_cases: int, seed: int) -> dict:
    """Draw cases, time batched forward solves, and check residual and misfit."""
    cases = task.cases(seed, num_cases)
    solve = jax.jit(jax.vmap(task.solve))
    start = time.perf_counter()
    jax.block_until_ready(solve(cases.x_true))
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    u = jax.block_until_ready(solve(cases.x_true))
    solve_s = time.perf_counter() - start
    residual = jax.vmap(task.physics.residual)(cases.x_true, u)
    # ||f - A(x) u|| / ||f||: the residual at u = 0 is f
    rel_residual = jnp.linalg.norm(residual.reshape(num_cases, -1), axis=1) / jnp.linalg.norm(
        jax.vmap(task.physics.residual)(cases.x_true, jnp.zeros_like(u)).reshape(num_cases, -1), axis=1
    )
    misfit = jax.vmap(task.misfit)(cases.x_true, cases.y_obs)
    return {
        "task": task.name,
        "unknown": list(task.unknown_shape),
        "observations": task.num_observations,
        "solves_per_s": num_cases / solve_s,
        "compile_s": compile_s,
        "max_rel_residual": float(rel_residual.max()),
        "mean_misfit_at_truth": float(misfit.mean()),
        "config_hash": task.config_hash(),
    }


def run(config, workdir: str | None = None) -> list[dict]:
    rows = [
        summarize(tasks.get(name, resolution=config.resolution), config.num_cases, config.seed)
        for name in config.tasks
    ]
    header = "| task | unknown | obs | solves/s | compile s | max rel. residual | misfit at truth |"
    lines = [header, "|" + "---|" * 7]
    for r in rows:
        lines.append(
            f"| {r['task']} | {'x'.join(map(str, r['unknown']))} | {r['observations']} | "
            f"{r['solves_per_s']:.0f} | {r['compile_s']:.1f} | {r['max_rel_residual']:.1e} | "
            f"{r['mean_misfit_at_truth']:.2f} |"
        )
    table = "\n".join(lines)
    print(table)
    if workdir:
        path = Path(workdir)
        path.mkdir(parents=True, exist_ok=True)
        (path / "summary.md").write_text(table + "\n")
        (path / "summary.json").write_text(json.dumps(rows, indent=2))
    return rows
