"""Spectral kernels: the automatic path (truncated-DFT matmuls where they win) vs today's FFT path.

* ``spectral_conv``: forward + VJP (gradient of sum(y^2) w.r.t. the layer and its input)
  of one `nn.SpectralConv` on a vmapped batch, the path `nn.layers.spectral_path` picks
  against `path="fft"` (rfft2 / irfft2), at the tiny training config (6 modes, width 16)
  on 16^2 to 128^2 and at the full-size shapes (FNO flow_fno / surrogate / inverse on the
  12.5 %-padded 144^2 grid, the UNO levels at 128^2). Both paths are timed at every shape
  (a shape where the FFT is picked reads 1.0); the record holds the chosen path, the
  matmul path's speed-up over the FFT's (`matmul_over_fft`, what a backend's selector
  threshold is set from) and the two paths' largest output difference relative to the
  output's largest magnitude.
* ``conv_paths``: the same measurement at nine more shapes (`PROBES`: grids 12^2 to 256^2,
  modes up to n/2, 16-64 channels), with which the CPU selector's threshold was set.
* ``spectral_grf``: cosine-basis GRF sampling, C^(1/2) xi = T^-1 (s . T xi) on a batch of
  white fields: the library's draw (`rng.normal`, the unrolled Threefry hash on the CPU)
  and automatic transform (`random_fields.forward_transform`, DCT-II matrices) against
  `jax.random.normal` and `jax.scipy.fft.dctn` / `idctn` (`method="fft"`), the path
  before both; `spectral_grf_transform` times the transforms alone on given white noise,
  `spectral_grf_normal` the draw alone (the same bits on both sides).
Ratios are ours / baseline in throughput (higher is better), timed in alternation.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from bench.common import best_times_interleaved, record
from posteriorjax import random_fields, rng
from posteriorjax.nn.layers import SpectralConv, spectral_cost, spectral_path

# (label, n_in, n_out, modes, c_in, c_out)
TINY = [(f"tiny {n}", n, n, 6, 16, 16) for n in (16, 32, 64, 128)]
FULL = [
    ("fno flow_fno 144", 144, 144, 32, 64, 64),
    ("fno surrogate 144", 144, 144, 16, 48, 48),
    ("fno inverse 144", 144, 144, 32, 128, 128),
    ("uno down0 128->64", 128, 64, 16, 64, 128),
    ("uno down1 64->32", 64, 32, 8, 128, 256),
    ("uno down2 32->16", 32, 16, 4, 256, 512),
    ("uno mid 16", 16, 16, 4, 512, 512),
    ("uno up0 16->32", 16, 32, 4, 1024, 256),
    ("uno up1 32->64", 32, 64, 8, 512, 128),
    ("uno up2 64->128", 64, 128, 16, 256, 64),
]
# (n, modes, channels, batch) of `conv_paths`
PROBES = [
    (12, 6, 16, 8), (16, 6, 16, 8), (16, 8, 16, 8), (32, 16, 16, 8), (64, 16, 16, 8),
    (64, 16, 64, 2), (64, 32, 16, 8), (128, 32, 32, 2), (256, 32, 16, 2),
]  # fmt: skip


def _apply(op, x, out_size, path):
    return jax.vmap(lambda v: op(v, out_size, path=path))(x)


def _conv_fns(op, out_size, path):
    # gradient w.r.t. the weights (training) and the input (guidance differentiates through it);
    # jax.jit on the layer's pytree: eqx.filter_jit's per-call partitioning (~0.1 ms) is
    # Python overhead, not the layer's
    fwd_vjp = eqx.filter_value_and_grad(lambda ox: jnp.sum(_apply(*ox, out_size, path) ** 2))
    return jax.jit(lambda o, x: fwd_vjp((o, x)))


def _conv_record(name, n, s, m, ci, co, batch, repeats):
    """Forward + VJP of one layer shape on both paths; "ours" is the path the selector picks.

    Both paths are timed at every shape, so a backend's selector thresholds can be read off
    one run (`matmul_over_fft` beside the shape's `cost_ratio`, `nn.layers.spectral_cost`).
    """
    op = SpectralConv(ci, co, (m, m), key=jr.key(0))
    x = jr.normal(jr.key(1), (batch, ci, n, n))
    chosen = spectral_path((n, n), (s, s), (m, m), ci, co)
    paths = ("matmul", "fft")
    times = best_times_interleaved([_conv_fns(op, (s, s), p) for p in paths], op, x, repeats=repeats)
    t = dict(zip(paths, times, strict=True))
    y_mm, y_fft = (_apply(op, x, (s, s), p) for p in paths)
    difference = float(jnp.max(jnp.abs(y_mm - y_fft)) / jnp.max(jnp.abs(y_fft)))
    mm, fft = spectral_cost((n, n), (s, s), (m, m), ci, co)
    return record(
        name,
        "evals/s",
        batch / t[chosen],
        batch / t["fft"],
        "rfft2/irfft2 path",
        batch=batch,
        n=n,
        out=s,
        modes=m,
        c_in=ci,
        c_out=co,
        path=chosen,
        cost_ratio=mm / fft,
        matmul_over_fft=t["fft"] / t["matmul"],
        max_abs_difference_over_max=difference,
    )


def bench_conv(args):
    device = getattr(args, "device", False)
    records = []
    for label, n, s, m, ci, co in TINY + FULL:
        tiny = label.startswith("tiny")
        batch = (32 if device else 8) if tiny else (16 if device else 2)
        repeats = 20 if tiny else 3
        records.append(_conv_record(f"spectral_conv fwd+vjp {label}", n, s, m, ci, co, batch, repeats))
    return records


def bench_paths(args):
    """`conv_paths`: the selector's probe shapes (square, same grid in and out) beyond the
    benchmark's own: small grids with modes near n/2 and large grids at cost ratios 5-16,
    from which the CPU threshold (`nn.layers.MATMUL_COST_RATIO`) was set."""
    scale = 4 if getattr(args, "device", False) else 1
    return [
        _conv_record(f"conv_paths fwd+vjp {n} modes {m} ch {c}", n, n, m, c, c, batch * scale, 10)
        for n, m, c, batch in PROBES
    ]


def bench_grf(args):
    device = getattr(args, "device", False)
    records = []
    batch = 256 if device else 32
    for n in (32, 64, 128):
        s = random_fields.grf_mode_std(n, 2.0, 3.0, "cosine")

        def sample(key, method, s=s, n=n, batch=batch):
            draw = rng.normal if method == "auto" else jr.normal
            xi = draw(key, (batch, 1, n, n))
            c = random_fields.forward_transform(xi, "cosine", method=method) * s
            return random_fields.inverse_transform(c, "cosine", method=method)

        def transform(xi, method, s=s):
            c = random_fields.forward_transform(xi, "cosine", method=method) * s
            return random_fields.inverse_transform(c, "cosine", method=method)

        fns = [jax.jit(lambda k, m=m: sample(k, m)) for m in ("auto", "fft")]
        t_mm, t_fft = best_times_interleaved(fns, jr.key(0), repeats=20)
        xi = jr.normal(jr.key(1), (batch, 1, n, n))
        fns = [jax.jit(lambda v, m=m: transform(v, m)) for m in ("auto", "fft")]
        t_mm_t, t_fft_t = best_times_interleaved(fns, xi, repeats=5)
        fns = [jax.jit(lambda k, f=f, n=n: f(k, (batch, 1, n, n))) for f in (rng.normal, jr.normal)]
        t_ours, t_jax = best_times_interleaved(fns, jr.key(0), repeats=5)
        base = "jax.scipy.fft dctn/idctn"
        records += [
            record(
                f"spectral_grf cosine {n}",
                "samples/s",
                batch / t_mm,
                batch / t_fft,
                "jax.random.normal + jax.scipy.fft dctn/idctn",
                batch=batch,
                n=n,
            ),
            record(
                f"spectral_grf_transform cosine {n}",
                "samples/s",
                batch / t_mm_t,
                batch / t_fft_t,
                base,
                batch=batch,
                n=n,
                note="T^-1 (s T xi) on given white noise (no random draw)",
            ),
            record(
                f"spectral_grf_normal {n}",
                "samples/s",
                batch / t_ours,
                batch / t_jax,
                "jax.random.normal",
                batch=batch,
                n=n,
                note="the white-noise draw alone; bit-identical outputs",
            ),
        ]
    return records


BENCHMARKS = {"spectral_conv": bench_conv, "spectral_grf": bench_grf, "conv_paths": bench_paths}
