"""Timing helpers shared by the benchmark modules."""

from __future__ import annotations

import time

import jax

# OpenBLAS's worker threads (NumPy's and SciPy's BLAS) spin for about 0.1 s after a call and take
# the cores XLA's threads need: a batched Darcy solve timed right after NumPy products ran at half
# its rate (1.7-1.9k against 3.5k solves/s on the 2-core CPU, 2026-12-04). Every timing waits this
# long after its warm-up, so no program is timed in the wake of the one before it.
SETTLE_SECONDS = 0.2


def best_time(fn, *args, repeats: int = 5, warmup: int = 1) -> float:
    """Best wall time in seconds of `fn(*args)` over `repeats` runs (after warm-up/compile).

    JAX outputs are blocked on, so asynchronous dispatch is included in the time.
    """
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    time.sleep(SETTLE_SECONDS)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def record(name: str, unit: str, ours: float, baseline: float | None, baseline_name: str, **config) -> dict:
    """One benchmark record; `ratio` = ours / baseline for throughput units (higher is better)."""
    ratio = None if not baseline else ours / baseline
    return {
        "name": name,
        "unit": unit,
        "ours": ours,
        "baseline": baseline,
        "baseline_name": baseline_name,
        "ratio": ratio,
        "config": config,
    }


def best_times_interleaved(fns, *args, repeats: int = 5, warmup: int = 1, calls: int = 2) -> list[float]:
    """Best wall time of each `fn(*args)` with the functions run in alternation, round by round.

    On a shared machine the load drifts between rounds; alternating keeps the ratio of two
    implementations from depending on which one ran during a quiet spell. Within a round each
    function runs `calls` times back to back, each call timed: the first call after a switch
    finds the caches holding the other program's data (10-15 % slower for a 1 ms layer whose
    neighbour is an FFT program, even for two copies of the same function), so with one call
    per round the order of `fns` would bias the ratio.
    """
    rounds = times_interleaved(fns, *args, repeats=repeats, warmup=warmup, calls=calls)
    return [min(r[i] for r in rounds) for i in range(len(fns))]


def times_interleaved(fns, *args, repeats: int = 5, warmup: int = 1, calls: int = 2) -> list[list[float]]:
    """Per round, the best of `calls` wall times of each `fn(*args)`: `repeats` lists of `len(fns)`
    (the alternation of `best_times_interleaved`, whose minimum over rounds it is; the rounds give
    a ratio's spread)."""
    for fn in fns:
        for _ in range(warmup):
            jax.block_until_ready(fn(*args))
    time.sleep(SETTLE_SECONDS)
    rounds = []
    for _ in range(repeats):
        best = [float("inf")] * len(fns)
        for i, fn in enumerate(fns):
            for _ in range(calls):
                start = time.perf_counter()
                jax.block_until_ready(fn(*args))
                best[i] = min(best[i], time.perf_counter() - start)
        rounds.append(best)
    return rounds
