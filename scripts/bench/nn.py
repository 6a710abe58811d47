"""Network benchmarks: denoiser evaluations per second and training steps per second.

FNO: our jitted, vmapped EDM denoiser beside a NumPy implementation of the same FNO forward
pass (numpy.fft, einsum; outputs checked equal). U-Net: the vmapped batch beside a Python loop
of per-sample jitted calls. Training: jitted DSM steps per second of `training.make_step` (no
baseline). Batch 32 at 64 x 64 with `--device`; batch 8 at 32 x 32 and small widths on a CPU.
``fno_pad``: DDIS's medium surrogate with its per-point tail on the crop against the full-grid
form it replaced (`bench_fno_pad`). ``uno_spectral``: the medium FunDPS UNO prior with its
`TuckerSpectralConv` layers on the automatic path (truncated-DFT matmuls on the CPU) against the
FFT path (`bench_uno_spectral`).
"""

from __future__ import annotations

import os
from unittest import mock

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from bench.common import best_time, best_times_interleaved, record, times_interleaved
from posteriorjax import diffusion, nn, training
from posteriorjax.nn import ddpmpp, neuralop_fno, published
from posteriorjax.training.checkpoints import init_state
from posteriorjax.training.losses import DiffusionLoss


def _sizes(args):
    if args.device:
        return dict(
            batch=32, n=64, fno=dict(modes=16, width=64, layers=4, embed_dim=128), unet=(64, 128, 128)
        )
    return dict(batch=8, n=32, fno=dict(modes=8, width=16, layers=4, embed_dim=32), unet=(16, 32, 32))


def _numpy_fno(net: nn.FNO, x: np.ndarray, t: float) -> np.ndarray:
    """NumPy forward pass of an (undropped, unpadded) noise-conditioned FNO on one field."""
    p = jax.tree.map(np.asarray, eqx.filter(net, eqx.is_array))

    def lin(layer, v):
        return np.einsum("oi,i...->o...", layer.weight, v) + layer.bias.reshape(-1, *([1] * (v.ndim - 1)))

    gelu = lambda v: np.asarray(jax.nn.gelu(v))  # noqa: E731  (the tanh approximation, as in JAX)
    h, w = x.shape[-2:]
    yy, xx = np.meshgrid(np.arange(h) / h, np.arange(w) / w, indexing="ij")
    pos = np.stack(
        [np.sin(2 * np.pi * yy), np.cos(2 * np.pi * yy), np.sin(2 * np.pi * xx), np.cos(2 * np.pi * xx)]
    )
    v = lin(p.lift, np.concatenate([x, pos]))
    half = net.embed.dim // 2
    freqs = (np.e**4 * 100) ** (-np.arange(half) / half)
    e = np.concatenate([np.cos(t * freqs), np.sin(t * freqs)])
    e = lin(p.embed.fc2, np.asarray(jax.nn.silu(lin(p.embed.fc1, e))))
    emb = np.asarray(jax.nn.silu(e))
    for i, (k_op, w_op) in enumerate(zip(p.spectral, p.skips, strict=True)):
        m1, m2 = net.spectral[i].modes
        f = np.fft.rfft2(v)
        wgt = k_op.weight_re + 1j * k_op.weight_im
        out = np.zeros((wgt.shape[1], h, w // 2 + 1), complex)
        out[:, :m1, :m2] = np.einsum("oixy,ixy->oxy", wgt[0], f[:, :m1, :m2])
        out[:, h - m1 :, :m2] = np.einsum("oixy,ixy->oxy", wgt[1], f[:, h - m1 :, :m2])
        y = np.fft.irfft2(out, s=(h, w)) + lin(w_op, v) + lin(p.films[i], emb)[:, None, None]
        v = gelu(y) if i < len(p.spectral) - 1 else y
    return lin(p.project.fc2, gelu(lin(p.project.fc1, v)))


def bench_denoiser(args):
    s = _sizes(args)
    b, n = s["batch"], s["n"]
    key = jr.key(0)
    x = jr.normal(key, (b, 1, n, n))
    records = []
    fno = nn.FNO(1, 1, key=key, **s["fno"])
    den = diffusion.EDMDenoiser(fno, nn.Normalizer([0.0], [1.0]))
    # the network an argument of the program, not constants XLA could fold (peer.compiled)
    batched = eqx.filter_jit(lambda d, v: jax.vmap(lambda u: d(u, 1.0))(v))
    t = best_time(batched, den, x)
    _, _, c_in, c_noise = diffusion.preconditioning(1.0)
    xin = np.asarray(c_in * x)
    ref = _numpy_fno(fno, xin[0], float(c_noise))
    got = np.asarray(fno(jnp.asarray(xin[0]), c_noise))
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)
    t_np = best_time(lambda: [_numpy_fno(fno, xin[i], float(c_noise)) for i in range(b)], repeats=2)
    records.append(record("denoiser_fno", "evals/s", b / t, b / t_np, "NumPy FNO forward", batch=b, n=n))
    unet = nn.UNet(1, 1, channels=s["unet"], embed_dim=s["fno"]["embed_dim"], key=key)
    den = diffusion.EDMDenoiser(unet, nn.Normalizer([0.0], [1.0]))
    single = eqx.filter_jit(lambda d, v: d(v, 1.0))
    t = best_time(batched, den, x)
    t_loop = best_time(lambda: [single(den, x[i]) for i in range(b)], repeats=3)
    records.append(record("denoiser_unet", "evals/s", b / t, b / t_loop, "per-sample jit loop", batch=b, n=n))
    return records


class _Source(eqx.Module):
    shape: tuple = eqx.field(static=True)

    def __call__(self, key):
        return jr.normal(key, self.shape)


def bench_train(args):
    s = _sizes(args)
    b, n = s["batch"], s["n"]
    key = jr.key(0)
    records = []
    nets = {
        "fno": nn.FNO(1, 1, key=key, **s["fno"]),
        "unet": nn.UNet(1, 1, channels=s["unet"], embed_dim=s["fno"]["embed_dim"], key=key),
    }
    for name, net in nets.items():
        den = diffusion.EDMDenoiser(net, nn.Normalizer([0.0], [1.0]))
        cfg = training.TrainConfig(num_steps=100, batch_size=b, progress=False)
        opt = training.make_optimizer(cfg)
        state = init_state(den, opt, 0)
        step = training.make_step(
            eqx.filter(den, eqx.is_inexact_array, inverse=True),
            DiffusionLoss(diffusion.GRFNoise()),
            opt,
            cfg.ema_decay,
        )
        source = _Source((b, 1, n, n))

        def run(state=state, step=step, source=source):
            for _ in range(5):
                _, loss = step(state, source)
            return loss

        t = best_time(run, repeats=3)
        records.append(record(f"train_step_{name}", "steps/s", 5 / t, None, "-", batch=b, n=n))
    return records


def _fno_pad_full_grid(net, x):
    """`NeuralopFNO.__call__` before the early crop (every layer on the padded grid), no time input."""
    h, w = x.shape[-2:]
    if net.reflect_pad:
        x = jnp.pad(x, ((0, 0), (h // 2, h // 2), (w // 2, w // 2)), mode="reflect")
    x = jnp.concatenate([x, neuralop_fno.grid_embedding(x.shape[-2:], x.dtype)])
    v = net.lift(x)
    hh, ww = v.shape[-2:]
    v = jnp.pad(v, ((0, 0), (0, round(net.padding * hh)), (0, round(net.padding * ww))))
    n = len(net.spectral)
    for i in range(n):
        z = (
            net.spectral[i](v)
            + net.biases[i][:, None, None]
            + jnp.einsum("oi,ihw->ohw", net.skip_weights[i], v)
        )
        z = neuralop_fno.gelu(z) if i < n - 1 else z
        z = net.mlps[i](z) + net.gates[i][:, None, None] * v
        v = neuralop_fno.gelu(z) if i < n - 1 else z
    y = net.project(v[:, :hh, :ww])
    return y[:, h // 2 : h // 2 + h, w // 2 : w // 2 + w] if net.reflect_pad else y


def bench_fno_pad(args):
    """DDIS's ``fno_pad`` surrogate, medium scale (16 modes, width 16, 4 layers, 32^2 reflect-padded
    to 64^2), batch 32: forward and forward + parameter gradient, the per-point tail on the crop
    (ours) against the full-grid form (baseline), interleaved; outputs checked equal."""
    b, n = (128, 64) if args.device else (32, 32)
    key = jr.key(0)
    net = nn.get("fno_pad", key, in_channels=1, out_channels=1, modes=16, width=16, layers=4)
    x = jr.normal(key, (b, 1, n, n))
    ours = lambda m, x: jax.vmap(m)(x)  # noqa: E731
    full = lambda m, x: jax.vmap(lambda u: _fno_pad_full_grid(m, u))(x)  # noqa: E731
    np.testing.assert_allclose(ours(net, x), full(net, x), rtol=1e-5, atol=1e-5)
    load = _load_average()
    records = []
    for what, make in (
        ("forward", lambda f: eqx.filter_jit(f)),
        ("forward_grad", lambda f: eqx.filter_jit(eqx.filter_grad(lambda m, x: jnp.mean(f(m, x) ** 2)))),
    ):
        fast, slow = make(ours), make(full)
        t_ours, t_full = best_times_interleaved([fast, slow], net, x, repeats=5)
        records.append(
            record(
                f"fno_pad_{what}",
                "batches/s",
                1 / t_ours,
                1 / t_full,
                "full-grid form",
                batch=b,
                n=n,
                load=load,
            )
        )
    return records


def _compiled_on_path(fn, path: str, *args):
    """`jax.jit(fn)` compiled ahead of time for `args` with every `TuckerSpectralConv` on `path`
    (``"auto"``: the layer's own choice); the executable keeps the path after the patch is gone."""
    call = ddpmpp.TuckerSpectralConv.__call__
    forced = lambda self, x, out_size=None: call(self, x, out_size, path=path)  # noqa: E731
    with mock.patch.object(ddpmpp.TuckerSpectralConv, "__call__", forced):
        # a fresh function: jit's trace cache, keyed on the function, would return the other path
        return jax.jit(lambda *a: fn(*a)).lower(*args).compile()


def _fft_ops(compiled) -> int:
    """FFT instructions in a compiled program's optimized HLO (which path its layers took)."""
    return sum(" fft(" in line for line in compiled.as_text().splitlines())


def bench_uno_spectral(args):
    """The medium FunDPS UNO prior (`published.get("fundps_prior", "medium")`, 88 Tucker spectral
    layers) as an EDM denoiser on 32^2, its spectral layers on the automatic path (ours; the CPU
    picks the truncated-DFT matmuls at every level) against the FFT path (baseline), interleaved:
    forward + input VJP of a batch of 64 without dropout (a guided sampler's step) and forward +
    parameter gradient of a batch of 32 with dropout keys (a training step). Outputs and gradients
    checked equal; the record holds each round's ratio (`round_ratios`) beside the best-time ratio
    and the 1-minute load before and after the rounds."""
    b_guided, b_train, n, repeats = (256, 128, 64, 5) if args.device else (64, 32, 32, 9)
    channels = 2  # the joint (coefficient, state) prior of the learned FunDPS rows
    name, options = published.get("fundps_prior", "medium")
    net = nn.get(name, jr.key(0), in_channels=channels, out_channels=channels, **options)
    den = diffusion.EDMDenoiser(net, nn.Normalizer([0.0] * channels, [1.0] * channels), sigma_data=0.5)
    params, static = eqx.partition(den, eqx.is_inexact_array)
    convs = [
        m
        for m in jax.tree.leaves(net, is_leaf=lambda m: isinstance(m, ddpmpp.TuckerSpectralConv))
        if isinstance(m, ddpmpp.TuckerSpectralConv)
    ]

    def guided(p, x, sigma):
        d = eqx.combine(p, static)

        def one(v, s):  # D and the gradient of |D(v)|^2 / 2 w.r.t. v, the guidance's reverse pass
            y, pull = jax.vjp(lambda u: d(u, s), v)
            return y, pull(y)[0]

        return jax.vmap(one)(x, sigma)

    def train(p, x, sigma, keys):
        def loss(p):
            d = eqx.combine(p, static)
            y = jax.vmap(lambda v, s, k: d(v, s, key=k))(x, sigma, keys)
            return jnp.mean((y - x) ** 2)

        return jax.grad(loss)(p)

    records = []
    for what, fn, b, extra in (
        ("forward_vjp", guided, b_guided, ()),
        ("forward_grad", train, b_train, (jr.split(jr.key(3), b_train),)),
    ):
        x = jr.normal(jr.key(1), (b, channels, n, n))
        sigma = jnp.exp(jr.uniform(jr.key(2), (b,), minval=-3.0, maxval=3.0))
        ours, fft = (_compiled_on_path(fn, path, params, x, sigma, *extra) for path in ("auto", "fft"))
        got, ref = (jax.tree.leaves(f(params, x, sigma, *extra)) for f in (ours, fft))
        # each leaf to float32 rounding of its own scale; a leaf whose sum cancels to ~0 (a bias
        # gradient of the 1e-5-scaled output layer) to that of the largest leaf
        scale = max(float(jnp.max(jnp.abs(r))) for r in ref)
        for a, r in zip(got, ref, strict=True):
            np.testing.assert_allclose(a, r, atol=2e-5 * float(jnp.max(jnp.abs(r))) + 1e-6 * scale)
        load = _load_average()
        rounds = times_interleaved([ours, fft], params, x, sigma, *extra, repeats=repeats)
        t_ours, t_fft = (min(r[i] for r in rounds) for i in range(2))
        config = dict(batch=b, n=n, load=[load, _load_average()], layers=len(convs))
        config["fft_ops"] = [_fft_ops(ours), _fft_ops(fft)]  # in the two programs
        config["round_ratios"] = [r[1] / r[0] for r in rounds]
        records.append(
            record(f"uno_spectral_{what}", "batches/s", 1 / t_ours, 1 / t_fft, "FFT path", **config)
        )
    return records


def _load_average() -> float | None:
    """The 1-minute load average (the machine is shared; recorded beside the timings)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


BENCHMARKS = {
    "nn_denoiser": bench_denoiser,
    "nn_train": bench_train,
    "nn_fno_pad": bench_fno_pad,
    "nn_uno_spectral": bench_uno_spectral,
}
