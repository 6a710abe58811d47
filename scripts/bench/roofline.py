"""Roofline: what the machine's main kernels achieve, measured in the same run as the rest.

* matmul GFLOP/s: one float32 `n x n` product (2 n^3 flops), n = 1024 (4096 with `--device`),
  and the 64-wide products of the truncated-DFT and DCT matrices (a `(B n, n) x (n, n)`
  GEMM, n = 64, the shape the spectral paths run) — the matmul peak the FFT rows compare with;
* FFT GFLOP/s: `rfft2` + `irfft2` of a batch of float32 fields at 64^2 and 128^2, counted as
  2 x 2.5 N log2 N flops per field (N = H W; the usual 5 N log2 N of a complex FFT, halved
  for real input); ratio = achieved / the large-matmul peak of this run;
* elementwise GB/s: `a * x + y` on float32 arrays (3 arrays of 4 bytes per element moved)
  that fit in cache (1 MiB each) and that do not (64 MiB each);
* sort Melem/s: 409,600 float32 values by `jnp.sort`, by `lax.sort` of integer keys
  (`ordering.sort(method="keys")`) and by the sorting network (`method="network"`, what the
  metric suite's pooled sort takes on a CPU); ratio = each / `jnp.sort`.
Each record's `ours` is the achieved rate; `baseline` is the matmul peak where a ratio to it is
meaningful, else None.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import jax.random as jr

from bench.common import best_time, best_times_interleaved, record


def run(args) -> list[dict]:
    device = getattr(args, "device", False)
    hp = jax.lax.Precision.HIGHEST
    records = []

    n = 4096 if device else 1024
    a = jr.normal(jr.key(0), (n, n))
    t = best_time(jax.jit(lambda p, q: jnp.matmul(p, q, precision=hp)), a, a, repeats=5)
    peak = 2 * n**3 / t / 1e9
    records.append(record(f"roofline matmul {n}", "GFLOP/s", peak, None, "-", n=n))

    rows = (4096 if device else 512) * 64
    x, m = jr.normal(jr.key(1), (rows, 64)), jr.normal(jr.key(2), (64, 64))
    t = best_time(jax.jit(lambda p, q: jnp.matmul(p, q, precision=hp)), x, m, repeats=5)
    gf = 2 * rows * 64 * 64 / t / 1e9
    records.append(record("roofline matmul 64-wide", "GFLOP/s", gf, peak, f"matmul {n}", rows=rows, n=64))

    for h in (64, 128):
        batch = (4096 if device else 256) if h == 64 else (1024 if device else 64)
        f = jr.normal(jr.key(3), (batch, h, h))
        fn = jax.jit(lambda v, h=h: jnp.fft.irfft2(jnp.fft.rfft2(v), s=(h, h)))
        t = best_time(fn, f, repeats=5)
        flops = batch * 2 * 2.5 * h * h * math.log2(h * h)
        records.append(
            record(f"roofline rfft2+irfft2 {h}", "GFLOP/s", flops / t / 1e9, peak, f"matmul {n}", batch=batch)
        )

    for label, size in (("cache", 1 << 18), ("memory", 1 << 24)):  # float32 elements per array
        v = jr.normal(jr.key(4), (3, size))
        t = best_time(jax.jit(lambda p: 1.5 * p[0] * p[1] + p[2]), v, repeats=7)
        records.append(
            record(f"roofline elementwise {label}", "GB/s", 4 * 4 * size / t / 1e9, None, "-", elements=size)
        )

    from posteriorjax.metrics import ordering

    s = jr.normal(jr.key(5), (409_600,))
    sorts = [jax.jit(functools.partial(ordering.sort, method=m)) for m in ("keys", "network")]
    t_keys, t_network, t_jnp = best_times_interleaved([*sorts, jax.jit(jnp.sort)], s, repeats=5)
    for name, t in (("roofline sort 409600", t_keys), ("roofline sort_network 409600", t_network)):
        records.append(record(name, "Melem/s", s.size / t / 1e6, s.size / t_jnp / 1e6, "jnp.sort"))
    return records


BENCHMARKS = {"roofline": run}
