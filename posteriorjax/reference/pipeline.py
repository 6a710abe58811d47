"""`run(config, workdir)`: pools, references, validation for one task — the library side of
`python -m experiments.reference`.

Workdir layout: ``pool_a/`` (and ``pool_b/`` for the two-ensemble check),
``cases.npz``, ``case_XXX/<method>/`` references (`store.save_reference`),
``report.json``, ``config.json``. Everything resumes: finished pool chunks and
saved references are reused (after their task-config check).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import jax.random as jr
import numpy as np

from posteriorjax import tasks
from posteriorjax.reference import exact, mcmc, pool, rejection, store, validate


def _task(config):
    return tasks.get(config.task, **dict(config.task_options))


def _reference(directory, task, build, *args, **kwargs):
    """Load the reference saved in `directory`, or build it with `build(*args, **kwargs)` and save it."""
    directory = Path(directory)
    if (directory / store.MANIFEST).exists():
        return store.load_reference(directory, task)
    ref = build(*args, **kwargs)
    store.save_reference(directory, ref, task)
    return ref


def run(config, workdir) -> dict:
    """Build the pools and every enabled reference for `config.cases.num` cases; returns the report."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    store.atomic_write_json(workdir / "config.json", config.to_dict())
    task = _task(config)
    cases = task.cases(config.cases.seed, config.cases.num)
    store.write_arrays(workdir / "cases.npz", {k: np.asarray(v) for k, v in cases._asdict().items()})
    report = {"task": task.config_dict(), "task_hash": task.config_hash(), "cases": []}

    pools = {}
    names = ("a", "b") if config.validation.two_ensemble else ("a",)
    for offset, name in enumerate(names):
        start = time.perf_counter()
        pools[name] = pool.build(
            task, workdir / f"pool_{name}", seed=config.seed + offset, num_chunks=config.pool.num_chunks,
            chunk_size=config.pool.chunk_size, augment=config.pool.augment,
            store_state=config.pool.store_state, progress=config.progress,
        )  # fmt: skip
        report[f"pool_{name}"] = {"size": pools[name].size, "seconds": time.perf_counter() - start}

    for i in range(config.cases.num):
        y = np.asarray(cases.y_obs[i])
        case_dir = workdir / f"case_{i:03d}"
        entry = {"case": i}
        refs = {}
        if config.eps_rule.enabled:
            sigma = config.eps_rule.sigma if config.eps_rule.sigma > 0 else None
            for name, p in pools.items():
                refs[f"eps_{name}"] = _reference(
                    case_dir / f"eps_rule_{name}", task, rejection.eps_rule, p, y,
                    seed=config.seed + 100 * i + ord(name), eps=config.eps_rule.eps,
                    num=config.eps_rule.num, sigma=sigma,
                )  # fmt: skip
                entry[f"eps_rule_{name}"] = refs[f"eps_{name}"].info
        if config.importance.enabled:
            refs["importance"] = _reference(
                case_dir / "importance", task, rejection.importance, pools["a"], y,
                task.noise.variance(y.shape[0]) ** 0.5, seed=config.seed + i,
                num=config.importance.num, per_point=config.importance.per_point,
            )  # fmt: skip
            entry["importance"] = refs["importance"].info
        if config.exact.enabled:
            mean, std = exact.posterior(task, y)
            draws = np.asarray(exact.sample(jr.fold_in(jr.key(config.seed), i), task, y, config.exact.num))
            refs["exact"] = store.Reference(
                draws, np.full(len(draws), 1.0 / len(draws)), "exact", config.seed
            )
            store.save_reference(case_dir / "exact", refs["exact"], task)
            entry["agreement"] = {
                k: validate.exact_agreement(r, mean, std) for k, r in refs.items() if k != "exact"
            }
        if config.mcmc.enabled:
            res = mcmc.run(
                jr.fold_in(jr.key(config.seed + 1), i), task, y, num_chains=config.mcmc.num_chains,
                num_draws=config.mcmc.num_draws, burn_in=config.mcmc.burn_in, thin=config.mcmc.thin,
                method=config.mcmc.method,
            )  # fmt: skip
            samples = np.asarray(res.samples).reshape((-1,) + task.unknown_shape)
            refs["mcmc"] = store.Reference(
                samples, np.full(len(samples), 1.0 / len(samples)), config.mcmc.method, config.seed
            )
            store.save_reference(case_dir / "mcmc", refs["mcmc"], task)
            entry["mcmc"] = vars(mcmc.diagnose(res))
        if config.validation.two_ensemble and "eps_a" in refs:
            ensembles = {
                "prior": np.asarray(task.cases(config.seed + 10_000 + i, config.eps_rule.num).x_true)
            }
            if "mcmc" in refs:
                ensembles["mcmc"] = refs["mcmc"].samples
            entry["two_ensemble"] = validate.two_ensemble_ratios(
                ensembles, refs["eps_a"], refs["eps_b"], task=task
            )
        report["cases"].append(entry)
    ratios = [c["two_ensemble"]["ratios"] for c in report["cases"] if "two_ensemble" in c]
    if ratios:
        report["worst_ratios"] = {m: max(r[m] for r in ratios) for m in ratios[0]}
    store.atomic_write_json(workdir / "report.json", report)
    print(json.dumps({k: v for k, v in report.items() if k != "cases"}, indent=1, default=str))
    return report
