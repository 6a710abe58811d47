"""Timing helpers shared by the benchmark modules."""

from __future__ import annotations

import time

import jax


def best_time(fn, *args, repeats: int = 5, warmup: int = 1) -> float:
    """Best wall time in seconds of `fn(*args)` over `repeats` runs (after warm-up/compile).

    JAX outputs are blocked on, so asynchronous dispatch is included in the time.
    """
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
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
    for fn in fns:
        for _ in range(warmup):
            jax.block_until_ready(fn(*args))
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            for _ in range(calls):
                start = time.perf_counter()
                jax.block_until_ready(fn(*args))
                best[i] = min(best[i], time.perf_counter() - start)
    return best
