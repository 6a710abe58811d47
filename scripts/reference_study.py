"""Reference-posterior measurements: Darcy GT1/GT2 consistency, eps-rule and importance references
against the exact Poisson posterior, and pCN convergence. Every command resumes from its workdir
and prints (and writes as JSON) the numbers the README quotes.

    python scripts/reference_study.py COMMAND --flag=value ...

Commands (the first positional argument; absl flags, lists comma-separated; a flag the command does
not take is an error, `--helpfull` lists each flag's default per command):

    # time-boxed, resumable pair of rotation-augmented pools (equal size: alternating chunks)
    nice -n 10 python scripts/reference_study.py pools --task=darcy --resolution=32 \
        --workdir=/tmp/study/darcy32 --num_chunks=40 --chunk_size=2048 --seconds=600
    # acceptance, GT1/GT2 at the published eps (if it fills K) and at the smallest eps that does
    nice -n 10 python scripts/reference_study.py darcy --resolution=32 --workdir=/tmp/study/darcy32 --k=100
    # the same for the hierarchical Poisson task (pools built with --task=poisson)
    nice -n 10 python scripts/reference_study.py poisson_gt --resolution=32 --workdir=/tmp/study/p32 --k=1000
    # the same for LTMI (eps = 0.03)
    nice -n 10 python scripts/reference_study.py ltmi --resolution=32 --workdir=/tmp/study/ltmi32
    # the medium CCS reference of configs/main_table.py:medium (surrogate trained as the sweep does)
    nice -n 10 python scripts/reference_study.py ccs --workdir=/tmp/study/ccs --cases=3
    # eps-rule and importance references against exact pathwise samples (poisson_fixed 32 x 32)
    nice -n 10 python scripts/reference_study.py poisson --workdir=/tmp/study/poisson32
    # pCN relative mean/std error against the exact posterior as the chains grow
    nice -n 10 python scripts/reference_study.py pcn --resolution=32 --num_sensors=128 --noise_std=1e-4
    # KL(posterior || prior) of poisson_fixed cases at several noise levels
    python scripts/reference_study.py info --noise=1e-4,1e-3

Pools live under ``WORKDIR/pool_a`` and ``WORKDIR/pool_b`` (`reference.pool`), results in
``WORKDIR/<command>.json``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import jax  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from posteriorjax import files, parallel, samplers, tasks  # noqa: E402
from posteriorjax.reference import exact, mcmc, pool, rejection, store, validate  # noqa: E402

PUBLISHED_EPS = 3e-4
K = 100


def _task(name: str, resolution: int, **options):
    return tasks.get(name, resolution=resolution, **options)


def _write(workdir: Path, name: str, result: dict) -> None:
    files.atomic_write_json(workdir / f"{name}.json", result)
    print(json.dumps(result, indent=1, default=str))


# -- pools -----------------------------------------------------------------------------------------


def build_pools(
    task, workdir: Path, *, num_chunks: int, chunk_size: int, seconds: float, step: int = 4, augment=True
):
    """Grow pools `a` (seed 0) and `b` (seed 1) alternately, `step` chunks each, until `seconds` pass.

    Both pools always hold the same number of chunks after a round, so GT1 and GT2 have equal budget.
    Returns `{"a": Pool, "b": Pool, "seconds": time spent, "candidates_per_s": throughput}`.
    """
    start, made = time.perf_counter(), 0
    pools = {}
    while True:
        for offset, name in enumerate("ab"):
            directory = workdir / f"pool_{name}"
            before = pool.Pool.open(directory).size if (directory / files.MANIFEST).exists() else 0
            pools[name] = pool.build(
                task,
                workdir / f"pool_{name}",
                seed=offset,
                num_chunks=num_chunks,
                chunk_size=chunk_size,
                augment=augment,
                store_state=False,
                store_unknown=False,
                progress=False,
                max_new_chunks=step,
            )
            made += pools[name].size - before
        elapsed = time.perf_counter() - start
        print(f"pools: a {pools['a'].size:,} b {pools['b'].size:,} candidates, {elapsed:.0f} s", flush=True)
        if elapsed > seconds or (pools["a"].complete and pools["b"].complete):
            break
    return {"a": pools["a"], "b": pools["b"], "seconds": elapsed, "candidates_per_s": made / elapsed}


NO_ROTATION = ("ltmi", "ccs")  # published: rotation augmentation for Darcy and Poisson only


def cmd_pools(args) -> None:
    task = _task(args.task, args.resolution)
    workdir = Path(args.workdir)
    out = build_pools(
        task,
        workdir,
        num_chunks=args.num_chunks,
        chunk_size=args.chunk_size,
        seconds=args.seconds,
        augment=args.task not in NO_ROTATION,
    )
    log = workdir / "pools_log.json"
    history = json.loads(log.read_text()) if log.exists() else []
    history.append(
        {
            "task": args.task,
            "resolution": args.resolution,
            "size_a": out["a"].size,
            "size_b": out["b"].size,
            "seconds": out["seconds"],
            "new_candidates_per_s": out["candidates_per_s"],
        }
    )
    files.atomic_write_json(log, history)
    print(json.dumps(history[-1], indent=1))


# -- eps-rule acceptance ---------------------------------------------------------------------------


def tail_extrapolation(mae, eps: float, *, num: int = K, counts=(10, 30, 100, 300, 1000)) -> dict:
    """Lower-tail power law of the MAE distribution, F(e) = P(MAE <= e) ~ c e^d, fitted on log-log

    at the order statistics e_(k), k in `counts`, and evaluated at `eps`: the acceptance rate the
    pool would show at `eps` and the pool size that fills K there (an extrapolation when the pool
    accepts nothing at `eps`).
    """
    mae = np.sort(np.asarray(mae, np.float64))
    ks = np.array([k for k in counts if k <= mae.size])
    e = mae[ks - 1]
    slope, intercept = np.polyfit(np.log(e), np.log(ks / mae.size), 1)
    rate = float(np.exp(intercept + slope * np.log(eps)))
    return {"tail_exponent": float(slope), "rate_at_eps": rate, "pool_for_K": num / rate}


def acceptance(mae, eps: float = PUBLISHED_EPS, num: int = K) -> dict:
    """Acceptance at `eps` and the pool a reference of `num` members needs there."""
    mae = np.asarray(mae, np.float64)
    accepted = int(np.sum(mae <= eps))
    out = {
        "pool_size": int(mae.size),
        "accepted": accepted,
        "rate": accepted / mae.size,
        "min_mae": float(mae.min()),
        "eps_fill_K": float(np.sort(mae)[min(num, mae.size) - 1]),
    }
    if accepted >= 1:
        out["pool_for_K"] = num * mae.size / accepted
    out["extrapolated"] = tail_extrapolation(mae, eps, num=num)
    return out


def eps_reference(p, mae, *, eps: float, seed: int, num: int = K) -> store.Reference:
    """`rejection.eps_select` on precomputed MAE (no second pass over the pool), then the gather."""
    idx, w, rate = rejection.eps_select(np.random.default_rng(seed), mae, eps=eps, num=num)
    info = {"eps": eps, "pool_size": int(np.size(mae)), "acceptance_rate": rate}
    return store.Reference(p.gather(idx), w, "eps_rule", seed, info)


# -- Darcy: GT1 / GT2 --------------------------------------------------------------------------------


def sampler_ensembles(key, task, y, *, pcn_steps: int) -> dict:
    """The ensembles scored against GT1 and GT2: prior draws, ES-MDA (published profile), pCN chains."""
    k_prior, k_esmda, k_pcn = jr.split(key, 3)
    prior = jax.vmap(task.prior.sample)(jr.split(k_prior, K))
    esmda = samplers.get("esmda", task, ensemble_size=128)
    pcn = samplers.get("pcn", task, burn_in=pcn_steps // 2, num_steps=pcn_steps - pcn_steps // 2)
    return {
        "prior": np.asarray(prior),
        "esmda": np.asarray(esmda.sample(k_esmda, y, K, esmda.hparams())),
        f"pcn_{pcn_steps}": np.asarray(pcn.sample(k_pcn, y, K, pcn.hparams())),
    }


def cmd_darcy(args) -> None:
    _gt_study(_task("darcy", args.resolution), f"darcy{args.resolution}", PUBLISHED_EPS, args)


def cmd_poisson_gt(args) -> None:
    """The hierarchical Poisson task (noise 1e-4, published eps 3e-4), rotation-augmented pools."""
    _gt_study(_task("poisson", args.resolution), f"poisson{args.resolution}", PUBLISHED_EPS, args)


def cmd_ltmi(args) -> None:
    """LTMI: the published eps = 3 x noise std (0.03), un-augmented pools."""
    task = _task("ltmi", args.resolution)
    eps = 3.0 * float(np.max(np.asarray(task.noise.variance(task.num_observations)) ** 0.5))
    _gt_study(task, f"ltmi{args.resolution}", eps, args)


def _gt_study(task, name: str, published_eps: float, args) -> None:
    """Acceptance, Kish ESS and GT1/GT2 worst ratios of eps-rule references from pools a and b."""
    workdir = Path(args.workdir)
    pools = {name: pool.Pool.open(workdir / f"pool_{name}", task) for name in "ab"}
    n = min(p.size for p in pools.values())
    if any(p.size != n for p in pools.values()):
        raise ValueError(f"pools: expected equal sizes, got {[p.size for p in pools.values()]}")
    cases = task.cases(args.case_seed, args.cases)
    result = {"task": task.name, "resolution": args.resolution, "pool_size_each": n, "cases": []}
    y_cases = np.asarray(cases.y_obs, np.float64)
    start = time.perf_counter()  # one pass over each pool for all cases: (N, cases)
    mae_all = {
        k: rejection.pool_statistic(p, lambda yc: rejection.mean_absolute_error(yc[:, None], y_cases))
        for k, p in pools.items()
    }
    result["scan_seconds"] = time.perf_counter() - start
    for i in range(args.cases):
        y = np.asarray(cases.y_obs[i])
        mae = {k: m[:, i] for k, m in mae_all.items()}
        entry = {"case": i}
        entry["published"] = {k: acceptance(m, published_eps) for k, m in mae.items()}
        ens = sampler_ensembles(jr.fold_in(jr.key(args.seed), i), task, y, pcn_steps=args.pcn_steps)
        accepted = min(int(np.sum(m <= published_eps)) for m in mae.values())
        for num in args.k:
            levels = {"published": published_eps} if accepted >= num else {}
            levels["fill_K"] = max(float(np.sort(m)[num - 1]) for m in mae.values())
            for label, eps in levels.items():
                refs = [
                    eps_reference(pools[k], mae[k], eps=eps, seed=1000 * i + j, num=num)
                    for j, k in enumerate("ab")
                ]
                ratios = validate.two_ensemble_ratios(ens, *refs, task=task)
                ess = [r.ess() for r in refs]
                entry[f"ratios_K{num}_{label}"] = {"K": num, "eps": eps, "ess": ess, **ratios}
        result["cases"].append(entry)
        print(json.dumps(entry, indent=1, default=str), flush=True)
    labels = sorted({k for c in result["cases"] for k in c if k.startswith("ratios_")})
    result["worst"] = {
        label: {
            m: max(c[label]["ratios"][m] for c in result["cases"] if label in c)
            for m in validate.RATIO_METRICS
        }
        for label in labels
    }
    result["published_eps"] = published_eps
    _write(workdir, name, result)


# -- CCS: the surrogate-accelerated reference at the medium scale -----------------------------------


def cmd_ccs(args) -> None:
    """The main table's medium CCS reference (`configs/main_table.py:medium`): its surrogate trained
    as the sweep trains it, the surrogate's held-out error, two validated `surrogate_rejection`
    references from independent surrogate pools (GT1, GT2) with their re-simulation error budgets,
    and the GT1/GT2 ratios of prior draws and of a third surrogate reference (the ensemble nearest
    the posterior), for the published uniform weights and for the validated L_sim / L_sur ones."""
    from configs import main_table
    from posteriorjax.reference import registry
    from posteriorjax.reference import surrogate as sur
    from posteriorjax.sweep import networks

    workdir = Path(args.workdir)
    options = main_table.MEDIUM_TASKS["ccs"]
    task = tasks.get("ccs", **options)
    rc = dict(main_table.medium_config().references.ccs)
    rc["pool_size"], rc["num_samples"] = args.pool_size, args.k[0]
    rc = registry.section(rc, "ccs")
    spec = networks.parse_spec("surrogate", rc["surrogate"], "tiny", "ccs")
    times = {}
    start = time.perf_counter()
    model = networks.network(workdir, "ccs", options, spec, "tiny", progress=False)
    times["surrogate_training_with_data"] = time.perf_counter() - start
    start = time.perf_counter()
    held = sur.held_out_error(task, model, jr.key(99), 64)
    times["held_out_64"] = time.perf_counter() - start
    result = {
        "task": task.config_dict(),
        "pool_size_each": rc["pool_size"],
        "K": rc["num_samples"],
        "held_out": {k: v for k, v in held.items() if k not in ("rmse_per_cell", "mae_per_cell")},
        "held_out_rmse_per_cell_max": float(np.max(held["rmse_per_cell"])),
        "cases": [],
    }
    cases = task.cases(args.case_seed, args.cases)
    refs = {}
    for j, name in enumerate("ab"):
        start = time.perf_counter()
        samples, weights, info = registry.build(
            rc, task, cases, jr.key(10 + j), workdir, pool_key=jr.key(j), surrogate=model
        )
        times[f"reference_{name}"] = time.perf_counter() - start
        refs[name] = (samples, weights, info)
    # the ensemble nearest the posterior (pCN's role on Darcy, unaffordable through the simulator here):
    # K members by the same rejection from a third surrogate pool, not re-simulated
    start = time.perf_counter()
    fast = sur.surrogate_task(task, model)
    third = pool.build(
        fast,
        workdir / "pool_c",
        seed=2,
        num_chunks=math.ceil(rc["pool_size"] / rc["pool_chunk"]),
        chunk_size=rc["pool_chunk"],
        store_state=False,
        store_unknown=False,
        progress=False,
    )
    times["third_pool"] = time.perf_counter() - start
    std = sur.noise_std(task)
    for i in range(args.cases):
        entry = {"case": i, **{f"info_{n}": refs[n][2][i] for n in "ab"}}
        start = time.perf_counter()
        y = np.asarray(cases.y_obs[i])
        log_l = rejection.pool_statistic(third, lambda yc, y=y: sur.log_likelihood(yc, y, std))
        idx, _ = sur.select(np.random.default_rng(100 + i), log_l, num=rc["num_samples"])
        ens = {
            "prior": np.asarray(jax.vmap(task.prior.sample)(jr.split(jr.fold_in(jr.key(args.seed), i), K))),
            "surrogate_reference_c": np.asarray(third.gather(idx)),
        }
        entry["ensemble_seconds"] = time.perf_counter() - start
        for label, validated in (("published_uniform", False), ("validated", True)):
            pair = []
            for n in "ab":
                samples, weights, info = refs[n]
                w = weights[i] if validated else np.full(len(weights[i]), 1.0 / len(weights[i]))
                pair.append(store.Reference(samples[i], w, "surrogate_rejection", 0, {}))
            ratios = validate.two_ensemble_ratios(ens, *pair, task=task)
            entry[f"ratios_{label}"] = {"ess": [r.ess() for r in pair], **ratios}
        result["cases"].append(entry)
        print(json.dumps(entry, indent=1, default=str), flush=True)
    result["worst"] = {
        label: {
            m: max(c[f"ratios_{label}"]["ratios"][m] for c in result["cases"]) for m in validate.RATIO_METRICS
        }
        for label in ("published_uniform", "validated")
    }
    result["seconds"] = times
    _write(workdir, "ccs_medium", result)


# -- Poisson: eps rule and importance against the exact posterior ------------------------------------


def _prefix_moments(p, cases_y, noise_stds, sizes) -> dict:
    """Importance-weighted mean/std for every case, noise std and pool prefix, in one pass over x.

    Returns `{(case, noise): [(size, mean (C,H,W), std, ess), ...]}`. Running log-sum-exp scaling keeps
    every prefix's weights finite.
    """
    state = {}
    out = {(c, s): [] for c in range(len(cases_y)) for s in noise_stds}
    for first, arrays in p.iter_chunks():
        x = np.asarray(arrays["x"], np.float64).reshape(len(arrays["x"]), -1)
        yc = np.asarray(arrays["y"], np.float64)
        for c, y in enumerate(cases_y):
            for s in noise_stds:
                lw = rejection.gaussian_log_weights(yc, y, s)
                m, s0, s1, s2, q = state.get((c, s), (-np.inf, 0.0, 0.0, 0.0, 0.0))
                m_new = max(m, lw.max())
                scale = np.exp(m - m_new) if np.isfinite(m) else 0.0
                w = np.exp(lw - m_new)
                state[(c, s)] = (
                    m_new,
                    s0 * scale + w.sum(),
                    s1 * scale + w @ x,
                    s2 * scale + w @ x**2,
                    q * scale**2 + np.sum(w**2),
                )
        size = first + p.per_chunk
        if size in sizes:
            for key, (_, s0, s1, s2, q) in state.items():
                mean = s1 / s0
                std = np.sqrt(np.maximum(s2 / s0 - mean**2, 0.0))
                out[key].append((size, mean, std, s0**2 / q))
    return out


def cmd_poisson(args) -> None:
    task = _task("poisson_fixed", args.resolution)
    workdir = Path(args.workdir)
    start = time.perf_counter()
    p = pool.build(
        task,
        workdir / "pool",
        seed=0,
        num_chunks=args.num_chunks,
        chunk_size=args.chunk_size,
        augment=True,
        store_state=False,
        progress=False,
    )
    build_seconds = time.perf_counter() - start
    sizes = [p.per_chunk * 2**j for j in range(20) if p.per_chunk * 2**j <= p.size]
    cases = task.cases(args.case_seed, args.cases)
    result = {"resolution": args.resolution, "pool_size": p.size, "build_seconds": build_seconds, "cases": []}
    exact_draws = {}
    for i in range(args.cases):
        y = np.asarray(cases.y_obs[i])
        post = exact.condition(task, y)
        key = jr.fold_in(jr.key(args.seed), i)
        draws = np.asarray(post.sample(key, task, args.exact_samples))
        exact_draws[i] = (post, draws)
        entry = {"case": i, "eps_rule": []}

        def agree(ref, post=post, draws=draws):
            return validate.exact_agreement(ref, post.mean, post.std, exact_samples=draws, task=task)

        # Monte Carlo floor of a K = 100 ensemble, and the prior as the no-information end
        exact_k = np.asarray(post.sample(jr.fold_in(key, 1), task, K))
        prior_k = np.asarray(jax.vmap(task.prior.sample)(jr.split(jr.fold_in(key, 2), K)))
        uniform = np.full(K, 1.0 / K)
        entry["exact_K"] = agree(store.Reference(exact_k, uniform, "exact", 0))
        entry["prior_K"] = agree(store.Reference(prior_k, uniform, "prior", 0))
        mae_all = rejection.pool_statistic(p, lambda yc, y=y: rejection.mean_absolute_error(yc, y))
        for n in sizes:
            mae = mae_all[:n]
            row = {"pool_size": n, "published": acceptance(mae)}
            for label, eps in (("published", PUBLISHED_EPS), ("fill_K", float(np.sort(mae)[K - 1]))):
                if np.sum(mae <= eps) >= K:
                    row[f"agreement_{label}"] = {"eps": eps, **agree(eps_reference(p, mae, eps=eps, seed=i))}
            entry["eps_rule"].append(row)
        result["cases"].append(entry)
        print(json.dumps(entry, indent=1, default=str), flush=True)

    noise_stds = [float(s) for s in args.importance_noise]
    ys = {}
    for s in noise_stds:  # the pool's noise-free observations serve every noise level of the same sensors
        noisy = _task("poisson_fixed", args.resolution, noise_std=s)
        ys[s] = (noisy, noisy.cases(args.case_seed, args.cases).y_obs)
    moments = {}
    for s in noise_stds:
        moments.update(_prefix_moments(p, [np.asarray(y) for y in ys[s][1]], [s], sizes))
    importance = []
    for (c, s), rows in sorted(moments.items()):
        noisy, y_obs = ys[s]
        mean, std = exact.posterior(noisy, np.asarray(y_obs[c]))
        for size, mu, sd, ess in rows:
            importance.append(
                {
                    "case": c,
                    "noise_std": s,
                    "pool_size": size,
                    "ess": float(ess),
                    "mean_rel_error": float(np.linalg.norm(mu - mean.ravel()) / np.linalg.norm(mean)),
                    "std_rel_error": float(np.linalg.norm(sd - std.ravel()) / np.linalg.norm(std)),
                }
            )
    result["importance"] = importance
    _write(workdir, "poisson", result)


# -- pCN against the exact posterior ----------------------------------------------------------------


def cmd_pcn(args) -> None:
    task = tasks.get(
        "poisson_fixed", resolution=args.resolution, num_sensors=args.num_sensors, noise_std=args.noise_std
    )
    y = np.asarray(task.cases(args.case_seed, 1).y_obs[0])
    mean, std = exact.posterior(task, y)
    lam = exact.misfit_spectrum(task)
    spectrum = {
        "lambda_max": float(lam[0]),
        "lambda_sum": float(lam.sum()),
        "informed_directions": float(np.sum(lam / (1 + lam))),
        "mean_norm_over_std_norm": float(np.linalg.norm(mean) / np.linalg.norm(std)),
    }
    print(json.dumps(spectrum), flush=True)
    rows = []
    for steps in args.steps:
        burn_in = steps // 2
        thin = max((steps - burn_in) // args.draws, 1)
        start = time.perf_counter()
        res = mcmc.run(
            jr.key(args.seed),
            task,
            y,
            num_chains=args.chains,
            num_draws=args.draws,
            burn_in=burn_in,
            thin=thin,
            method=args.method,
        )
        x = np.asarray(jax.block_until_ready(res.samples))
        seconds = time.perf_counter() - start
        flat = x.reshape(-1, *task.unknown_shape)
        diag = mcmc.diagnose(res)
        row = {
            "steps": burn_in + args.draws * thin,
            "burn_in": burn_in,
            "thin": thin,
            "seconds": seconds,
            "mean_rel_error": float(np.linalg.norm(flat.mean(0) - mean) / np.linalg.norm(mean)),
            "std_rel_error": float(np.linalg.norm(flat.std(0) - std) / np.linalg.norm(std)),
            "step_size_median": float(np.median(np.asarray(res.step))),
            **vars(diag),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    name = f"pcn_{args.method}_{args.resolution}_{args.num_sensors}_{args.noise_std:g}"
    out = {"config": {k: v for k, v in vars(args).items() if k != "fn"}, "spectrum": spectrum, "runs": rows}
    _write(Path(args.workdir), name, out)


# -- how informative the observation is ------------------------------------------------------------


def cmd_info(args) -> None:
    """KL(posterior || prior) and the misfit spectrum of `poisson_fixed` cases at several noise levels."""
    rows = []
    for s in args.noise:
        task = tasks.get(
            "poisson_fixed", resolution=args.resolution, num_sensors=args.num_sensors, noise_std=s
        )
        lam = exact.misfit_spectrum(task)
        cases = task.cases(args.case_seed, args.cases)
        kl = [exact.condition(task, np.asarray(y)).kl_from_prior() for y in cases.y_obs]
        rows.append(
            {
                "noise_std": s,
                "lambda_max": float(lam[0]),
                "informed_directions": float(np.sum(lam / (1 + lam))),
                "kl_nats": kl,
                "log10_pool_exp_kl": [k / np.log(10) for k in kl],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    name = f"info_{args.resolution}_{args.num_sensors}"
    _write(
        Path(args.workdir), name, {"config": {k: v for k, v in vars(args).items() if k != "fn"}, "rows": rows}
    )


# -- command line ----------------------------------------------------------------------------------

# flag -> (absl definer, help); the values per command come from COMMANDS
FLAG_SPECS = {
    "task": (flags.DEFINE_string, "registered task of the pools"),
    "resolution": (flags.DEFINE_integer, "grid points per axis"),
    "workdir": (flags.DEFINE_string, "directory of the pools and the result JSON"),
    "num_chunks": (flags.DEFINE_integer, "pool chunks to build (at most)"),
    "chunk_size": (flags.DEFINE_integer, "candidates per pool chunk"),
    "pool_size": (flags.DEFINE_integer, "candidates per surrogate pool"),
    "seconds": (flags.DEFINE_float, "time box of the pool build"),
    "cases": (flags.DEFINE_integer, "benchmark cases"),
    "case_seed": (flags.DEFINE_integer, "seed of the cases"),
    "seed": (flags.DEFINE_integer, "seed of the samplers / references"),
    "pcn_steps": (flags.DEFINE_integer, "pCN steps of the sampler ensembles"),
    "k": (flags.DEFINE_list, "reference sizes, comma-separated (published: 100)"),
    "exact_samples": (flags.DEFINE_integer, "exact posterior draws per case"),
    "importance_noise": (flags.DEFINE_list, "noise stds of the importance references, comma-separated"),
    "num_sensors": (flags.DEFINE_integer, "point sensors of poisson_fixed"),
    "noise_std": (flags.DEFINE_float, "noise std of poisson_fixed"),
    "method": (flags.DEFINE_string, f"MCMC method, one of {mcmc.METHODS}"),
    "chains": (flags.DEFINE_integer, "MCMC chains"),
    "draws": (flags.DEFINE_integer, "kept draws per chain"),
    "steps": (flags.DEFINE_list, "total MCMC steps to try, comma-separated"),
    "noise": (flags.DEFINE_list, "noise stds, comma-separated"),
}
# list flags -> element type
LIST_TYPES = {"k": int, "importance_noise": str, "steps": int, "noise": float}
REQUIRED = object()
# command -> (function, help, {flag: default}); a flag a command does not list is an error there
COMMANDS = {
    "pools": (cmd_pools, "grow the two augmented pools of a task (time-boxed, resumable)", dict(
        task="darcy", resolution=32, workdir=REQUIRED, num_chunks=40, chunk_size=2048, seconds=600.0)),
    "darcy": (cmd_darcy, "acceptance and GT1/GT2 ratios from the two Darcy pools", dict(
        resolution=32, workdir=REQUIRED, cases=2, case_seed=1234, seed=0, pcn_steps=2000, k=[K])),
    "poisson_gt": (cmd_poisson_gt, "GT1/GT2 ratios from the two hierarchical-Poisson pools", dict(
        resolution=32, workdir=REQUIRED, cases=2, case_seed=1234, seed=0, pcn_steps=2000, k=[K])),
    "ltmi": (cmd_ltmi, "acceptance and GT1/GT2 ratios from the two LTMI pools (eps = 0.03)", dict(
        resolution=32, workdir=REQUIRED, cases=2, case_seed=1234, seed=0, pcn_steps=200, k=[K])),
    "ccs": (cmd_ccs, "the medium CCS surrogate reference: held-out error, error budget, GT1/GT2", dict(
        workdir=REQUIRED, cases=3, case_seed=1234, seed=0, pool_size=16_384, k=[K])),
    "poisson": (cmd_poisson, "eps-rule and importance references against the exact posterior", dict(
        resolution=32, workdir=REQUIRED, num_chunks=32, chunk_size=2048, cases=3, case_seed=1234, seed=0,
        exact_samples=1000, importance_noise=["1e-4", "1e-3", "1e-2"])),
    "pcn": (cmd_pcn, "pCN (or MALA) mean/std error against the exact posterior vs steps", dict(
        resolution=32, num_sensors=128, noise_std=1e-4, method="pcn", chains=32, draws=50,
        steps=[1000, 10000, 100000], case_seed=0, seed=0, workdir="/tmp/reference_study")),
    "info": (cmd_info, "KL(posterior || prior) of poisson_fixed cases (pool size ~ exp(KL))", dict(
        resolution=32, num_sensors=128, noise=[1e-4, 1e-3, 1e-2, 3e-2], cases=3, case_seed=1234,
        workdir="/tmp/reference_study")),
}  # fmt: skip


def define_flags(flag_values=flags.FLAGS) -> None:
    """Define every command's flags (default None: each command has its own defaults)."""
    for name, (define, help_text) in FLAG_SPECS.items():
        uses = ", ".join(f"{c}: {d[name]!r}" for c, (_, _, d) in COMMANDS.items() if name in d)
        define(
            name, None, f"{help_text} ({uses.replace(repr(REQUIRED), 'required')})", flag_values=flag_values
        )


def command_args(argv, flag_values=flags.FLAGS) -> SimpleNamespace:
    """The arguments of the command `argv[1]` (absl's positional arguments): every flag the command
    takes, given or at the command's default; a flag it does not take, or a missing required one,
    is a `app.UsageError`."""
    if len(argv) != 2 or argv[1] not in COMMANDS:
        raise app.UsageError(f"expected one command of {sorted(COMMANDS)} before the flags, got {argv[1:]}")
    command = argv[1]
    _, _, defaults = COMMANDS[command]
    stray = sorted(n for n in FLAG_SPECS if flag_values[n].present and n not in defaults)
    if stray:
        raise app.UsageError(
            f"{command}: takes no flag(s) {['--' + n for n in stray]}; it takes {sorted(defaults)}"
        )
    out = {"command": command}
    for name, default in defaults.items():
        value = flag_values[name].value if flag_values[name].present else default
        if value is REQUIRED:
            raise app.UsageError(f"{command}: --{name} is required")
        if name in LIST_TYPES and flag_values[name].present:
            try:
                value = [LIST_TYPES[name](v) for v in value]
            except ValueError:
                raise app.UsageError(
                    f"--{name}: expected comma-separated {LIST_TYPES[name].__name__} values, got {value}"
                ) from None
        out[name] = value
    if "method" in out and out["method"] not in mcmc.METHODS:
        raise app.UsageError(f"--method: expected one of {mcmc.METHODS}, got {out['method']!r}")
    return SimpleNamespace(**out)


def main(argv) -> None:
    args = command_args(argv)
    COMMANDS[args.command][0](args)


if __name__ == "__main__":
    parallel.reserve_cpu_threads()  # before JAX starts (several CPU devices; see parallel)
    define_flags()
    app.run(main)
