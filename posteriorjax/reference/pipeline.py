"""`run(config, workdir)`: pools, references, validation for one task — the library side of
`python -m experiments.reference`.

Every reference is built by `registry.load_or_build` (the sweep's builders and checksummed
storage) for all cases at once. Keys follow the registry's rule: the stream of reference
`name` is `registry.stream(key(seed), name)`; the eps-rule references of the two-ensemble
check use their own pools (`pool_a`, `pool_b`) and the importance reference shares pool a.
Workdir layout: ``cases.npz``, one directory per reference (``eps_a/``, ``eps_b/``,
``importance/``, ``exact/``, ``mcmc/``: `store.save_references`), the pools under
``references/pools/``, ``report.json``, ``config.json``. Everything resumes: finished pool
chunks and saved references are reused (after their task-config and settings check).
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.random as jr
import numpy as np

from posteriorjax import files, tasks
from posteriorjax.reference import exact, registry, store, validate


def _task(config):
    return tasks.get(config.task, **dict(config.task_options))


def _specs(config) -> dict[str, tuple[dict, str, str | None]]:
    """{label: (registry section, key stream name, pool stream name)} of every enabled reference."""
    chunk, augment = int(config.pool.chunk_size), bool(config.pool.augment)
    pool = {"pool_size": int(config.pool.num_chunks) * chunk * (4 if augment else 1), "pool_chunk": chunk}
    pool["augment"] = augment
    out = {}
    if config.eps_rule.enabled:
        eps = {"eps": float(config.eps_rule.eps), "sigma": float(config.eps_rule.sigma), **pool}
        for name in ("a", "b") if config.validation.two_ensemble else ("a",):
            section = {"method": "rejection", "num_samples": int(config.eps_rule.num), **eps}
            out[f"eps_{name}"] = (section, f"eps_rule_{name}", f"pool_{name}")
    if config.importance.enabled:
        section = {"method": "importance", "num_samples": int(config.importance.num), **pool}
        out["importance"] = (
            {**section, "per_point": bool(config.importance.per_point)},
            "importance",
            "pool_a",
        )
    if config.exact.enabled:
        out["exact"] = ({"method": "exact", "num_samples": int(config.exact.num)}, "exact", None)
    if config.mcmc.enabled:
        m = config.mcmc
        section = {
            "method": "pcn",
            "num_samples": int(m.num_chains) * int(m.num_draws),
            "mcmc_method": m.method,
        }
        section.update(num_chains=int(m.num_chains), burn_in=int(m.burn_in), thin=int(m.thin))
        out["mcmc"] = (section, "mcmc", None)
    return {k: (registry.section(v, f"config ({k})"), key, pool) for k, (v, key, pool) in out.items()}


def _references(config, task, cases, workdir: Path) -> dict[str, tuple]:
    """{label: (samples (K, M, ...), weights (K, M), report)} of every enabled reference, built or loaded."""
    root, out = jr.key(int(config.seed)), {}
    for label, (spec, key_name, pool_name) in _specs(config).items():
        identity = json.dumps(
            {"reference": spec, "seed": int(config.seed), "key": key_name, "pool": pool_name}
        )
        out[label] = registry.load_or_build(
            spec,
            task,
            cases,
            registry.stream(root, key_name),
            workdir / label,
            workdir=workdir,
            settings=identity,
            pool_key=None if pool_name is None else registry.stream(root, pool_name),
            progress=bool(config.progress),
        )
    return out


def _case(config, task, cases, refs: dict, i: int) -> dict:
    """The report of case `i`: each reference's info, agreement with the exact posterior, GT1/GT2."""
    y = np.asarray(cases.y_obs[i])
    case = {
        k: store.Reference(s[i], w[i], r["method"], int(config.seed), r["cases"][i])
        for k, (s, w, r) in refs.items()
    }
    entry = {"case": i, **{k: ref.info for k, ref in case.items() if k != "exact"}}
    if "exact" in case:
        mean, std = exact.posterior(task, y)
        entry["agreement"] = {
            k: validate.exact_agreement(r, mean, std) for k, r in case.items() if k != "exact"
        }
    if config.validation.two_ensemble and "eps_a" in case:
        key = jr.fold_in(registry.stream(jr.key(int(config.seed)), "prior_ensemble"), i)
        ensembles = {
            "prior": np.asarray(jax.vmap(task.prior.sample)(jr.split(key, int(config.eps_rule.num))))
        }
        if "mcmc" in case:
            ensembles["mcmc"] = case["mcmc"].samples
        entry["two_ensemble"] = validate.two_ensemble_ratios(
            ensembles, case["eps_a"], case["eps_b"], task=task
        )
    return entry


def run(config, workdir) -> dict:
    """Build the pools and every enabled reference for `config.cases.num` cases; returns the report."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    files.atomic_write_json(workdir / "config.json", config.to_dict())
    task = _task(config)
    cases = task.cases(config.cases.seed, config.cases.num)
    files.write_arrays(workdir / "cases.npz", {k: np.asarray(v) for k, v in cases._asdict().items()})
    refs = _references(config, task, cases, workdir)
    report = {
        "task": task.config_dict(),
        "task_hash": task.config_hash(),
        "references": {k: {n: v for n, v in r.items() if n != "cases"} for k, (_, _, r) in refs.items()},
        "cases": [_case(config, task, cases, refs, i) for i in range(config.cases.num)],
    }
    ratios = [c["two_ensemble"]["ratios"] for c in report["cases"] if "two_ensemble" in c]
    if ratios:
        report["worst_ratios"] = {m: max(r[m] for r in ratios) for m in ratios[0]}
    files.atomic_write_json(workdir / "report.json", report)
    print(json.dumps({k: v for k, v in report.items() if k != "cases"}, indent=1, default=str))
    return report
