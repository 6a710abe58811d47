"""Reference-posterior benchmarks.

* ``reference_pool``: candidate throughput of a prior pool chunk (prior draw +
  forward solve + observation, vmapped and jitted; forward solves per second,
  without rotation augmentation) for Darcy and Poisson at 64 x 64 (128 x 128 with
  `--device`), beside the same candidates with a SciPy solve per sample (spsolve for
  Darcy, `scipy.fft.dstn` for Poisson) in a Python loop; and the wall time of a
  2-million-candidate pool with 4x rotation augmentation (5 x 10^5 solves; the
  published pool size) on this machine from the timed augmented chunk program (the one
  `pool.build` runs, rotations included), beside the baseline's solves alone.
* ``reference_build``: wall time to build one K = 100 eps-rule reference for
  `poisson_fixed` at 32 x 32 from a pool on disk (MAE over every stored
  observation, selection, gather) and the exact pathwise posterior (100 samples),
  with the time per 10^6 pool candidates of the rejection scan.
"""

from __future__ import annotations

import tempfile
import time

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import scipy.fft
import scipy.sparse.linalg

from bench.common import best_time, record
from bench.elliptic import darcy_matrix
from posteriorjax import tasks
from posteriorjax.reference import exact, pool, rejection

POOL_CANDIDATES = 2_000_000


def _pool_fn(task, batch, augment=False):
    idx = jnp.arange(batch)
    fn = jax.jit(lambda key: pool.draw_candidates(task, key, idx, augment=augment))
    return lambda: fn(jr.key(0))


def bench_pool(args) -> list[dict]:
    n = 128 if args.device else 64
    batch = 4096 if args.device else 256
    out = []
    for name in ("darcy", "poisson"):
        task = tasks.get(name, resolution=n)
        t = best_time(_pool_fn(task, batch), repeats=3)
        t_aug = best_time(_pool_fn(task, batch, augment=True), repeats=3)
        xs = np.asarray(jax.vmap(task.prior.sample)(jr.split(jr.key(1), 16)), np.float64)
        sensors = np.asarray(task.observation.mask).ravel()
        if name == "darcy":
            h = 1.0 / (n + 1)

            def base(xs=xs, h=h, sensors=sensors):
                rhs = np.ones(n * n)
                return [scipy.sparse.linalg.spsolve(darcy_matrix(x[0], h), rhs)[sensors] for x in xs]

            base_name = "scipy spsolve per sample (f64)"
        else:
            k = np.arange(1, n + 1)
            lam = (2 - 2 * np.cos(np.pi * k / (n + 1))) * (n + 1) ** 2
            lam = lam[:, None] + lam[None, :]

            def base(xs=xs, lam=lam, sensors=sensors):
                out = []
                for x in xs:
                    s = scipy.fft.dstn(x[0], type=1, norm="ortho")
                    out.append(scipy.fft.idstn(s / lam, type=1, norm="ortho").ravel()[sensors])
                return out

            base_name = "scipy.fft.dstn per sample (f64)"
        tb = best_time(base, repeats=3)
        out.append(
            record(f"pool_{name}_{n}", "candidates/s", batch / t, len(xs) / tb, base_name, batch=batch)
        )
        # the program a pool build runs: B solves and their 90/180/270-degree rotations, 4 B
        # candidates; the baseline's rotations are taken as free
        chunks = POOL_CANDIDATES / (4 * batch)
        cost = record(
            f"pool_2M_{name}_{n}",
            "s (2M cand, 4x rot)",
            chunks * t_aug,
            None,
            "-",
            solves_per_chunk=batch,
            chunks=chunks,
            baseline_s=POOL_CANDIDATES / 4 * tb / len(xs),
        )
        out.append(cost)
    return out


def bench_build(args) -> list[dict]:
    task = tasks.get("poisson_fixed", resolution=32)
    y = np.asarray(task.cases(0, 1).y_obs[0])
    chunks, size = (8, 8192) if args.device else (4, 4096)
    with tempfile.TemporaryDirectory() as d:
        start = time.perf_counter()
        p = pool.build(
            task,
            d,
            seed=0,
            num_chunks=chunks,
            chunk_size=size,
            augment=True,
            store_state=False,
            progress=False,
        )
        t_pool = time.perf_counter() - start
        mae = rejection.pool_statistic(p, lambda yc: rejection.mean_absolute_error(yc, y))
        eps = float(np.sort(mae)[199])  # the eps that accepts 200 candidates
        t_ref = best_time(lambda: rejection.eps_rule(p, y, seed=0, eps=eps, num=100).samples, repeats=3)
        t_scan = best_time(
            lambda: rejection.pool_statistic(p, lambda yc: rejection.mean_absolute_error(yc, y))
        )
        n_pool = p.size
    t_exact = best_time(lambda: exact.sample(jr.key(0), task, y, 100), repeats=2)
    return [
        record("reference_pool_build_pf32", "candidates/s", n_pool / t_pool, None, "-", size=n_pool),
        record("reference_eps_rule_pf32", "s/reference", t_ref, None, "-", pool=n_pool),
        record("reference_scan_per_1e6", "s/1e6 candidates", t_scan * 1e6 / n_pool, None, "-"),
        record("reference_exact_pf32", "s/100 samples", t_exact, None, "-"),
    ]


BENCHMARKS = {"reference_pool": bench_pool, "reference_build": bench_build}
