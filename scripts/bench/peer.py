"""Peer benchmark: PosteriorBench's PyTorch FunDPS loop beside our published FunDPS, same network.

The network on both sides is the neuralop FNO (16 modes, width 32, 4 layers; lifting and
projection ratio 2, soft-gated channel MLPs) inside EDM preconditioning with sigma_data 0.5,
the noise level entering as an 8-channel `time_embedding` of c_noise = log(sigma) / 4
concatenated to the input: neuraloperator's `FNO` in torch, `nn.NeuralopFNO` here, 1,193,442
real parameters each (asserted; torch counts a complex weight once). Weights are random: the
workloads' costs do not depend on them. torch runs eagerly on the CPU, with its default
threads (one per core), in the same process as JAX.

Workloads (64 x 64, 8 samples; `--device`: 128 x 128, 32 samples):
  peer_fundps_loop     20 FunDPS steps (Heun, guidance at the corrector point through the input
                       VJP; `posteriorbench/methods/fundps.py` `_PDESolverDPS.generate_single_batch`,
                       transcribed below with one sparse-sensor observation and the RBF latent
                       drawn by the dense Cholesky factor, as published) against
                       `samplers.get("fundps", task, profile="published", ...)`;
  peer_net_vjp         network forward + VJP w.r.t. the input (each guided step's reverse pass);
  peer_net_forward     network forward alone;
  fundps_scaling       (no torch) our sampler against grid size and sample count, time and
                       compiled FLOPs per step (`bench_scaling`).
At 128 x 128 the published latent's dense Cholesky factor is a 16384^2 float64 matrix (2 GiB,
about 1.5 TFLOP to factor, done once before the timing).
Units: calls/s, so `ratio` = ours / torch eager (> 1: we are faster). Interleaved rounds, best
call (`best_times_interleaved`). The compiled programs' FLOPs (`cost_analysis`) are recorded.
torch and neuraloperator come with the ``bench`` extra; without them the benchmark prints why
and records nothing.
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from bench.common import best_times_interleaved, record
from posteriorjax import nn, samplers, tasks, training

FNO = dict(modes=16, width=32, layers=4)
TIME_CHANNELS = 8
SIGMA_DATA = 0.5  # the published EDM preconditioning
PARAMETERS = 1_193_442
STEPS = 20


def import_torch():
    """`(torch, neuralop.models.FNO)`, or None when either is not installed (the ``bench`` extra)."""
    try:
        import torch
        from neuralop.models import FNO as TorchFNO
    except ImportError:
        return None
    return torch, TorchFNO


def _sizes(args):
    return (128, 32) if args.device else (64, 8)


def _ours(n: int):
    """Our published FunDPS on the Poisson task at `n`^2 with the neuralop FNO denoiser."""
    task = tasks.get("poisson", resolution=n)
    x_norm, u_norm = nn.field_normalizer(task), nn.state_statistics(task, 16)
    options = dict(style="neuralop", **FNO, time_channels=TIME_CHANNELS)
    den = training.build_model(
        "joint", "fno", options, task, x_norm=x_norm, u_norm=u_norm, key=jr.key(0), sigma_data=SIGMA_DATA
    )
    count = sum(a.size for a in jax.tree.leaves(den.net) if isinstance(a, jax.Array))
    if count != PARAMETERS:
        raise AssertionError(f"our FNO has {count} parameters, expected {PARAMETERS}")
    return task, den


def _torch_side(torch, TorchFNO, n: int, num_obs: int):
    """The torch denoiser and the published FunDPS loop on it (one sparse observation)."""
    torch.manual_seed(0)
    fno = TorchFNO(
        n_modes=(FNO["modes"], FNO["modes"]),
        in_channels=2 + TIME_CHANNELS,
        out_channels=2,
        hidden_channels=FNO["width"],
        n_layers=FNO["layers"],
    )
    count = sum(2 * p.numel() if p.is_complex() else p.numel() for p in fno.parameters())
    if count != PARAMETERS:
        raise AssertionError(f"neuralop FNO has {count} real parameters, expected {PARAMETERS}")
    fno.eval()
    half = TIME_CHANNELS // 2
    freqs = torch.exp(-math.log(2000.0) / (half - 1) * torch.arange(half, dtype=torch.float32))

    def denoise(x, sigma):
        """EDM preconditioning (float64 trajectory, float32 network) of `training_fundps`."""
        sd = SIGMA_DATA
        c_skip = sd**2 / (sigma**2 + sd**2)
        c_out = sigma * sd / math.sqrt(sigma**2 + sd**2)
        c_in = 1 / math.sqrt(sd**2 + sigma**2)
        arg = math.log(sigma) / 4 * 2000.0 * freqs
        emb = torch.cat([torch.sin(arg), torch.cos(arg)])[None, :, None, None]
        inp = torch.cat([(c_in * x).to(torch.float32), emb.expand(x.shape[0], -1, *x.shape[2:])], 1)
        return c_skip * x + c_out * fno(inp).to(torch.float64)

    # the RBF noise sampler: exp(-d / (2 0.05^2)) on the unit square, eps^2 = 1e-4 nugget,
    # drawn through its dense Cholesky factor (computed once, as when the sampler is built)
    g = torch.stack(torch.meshgrid(*(torch.arange(n, dtype=torch.float64) / n,) * 2, indexing="ij"), -1)
    d = torch.cdist(g.reshape(-1, 2), g.reshape(-1, 2))
    chol = torch.linalg.cholesky(torch.exp(-d / (2 * 0.05**2)) + 1e-4 * torch.eye(n * n, dtype=torch.float64))
    rng = np.random.default_rng(0)
    mask = torch.zeros(1, n, n, dtype=torch.float64)
    idx = rng.choice(n * n, num_obs, replace=False)
    mask.view(-1)[torch.as_tensor(idx)] = 1.0
    gt = torch.as_tensor(rng.standard_normal((1, 1, n, n)))
    mean, std, weight = 0.1, 0.7, 1600.0  # the state's statistics; the Poisson guidance weight
    sigma_min, sigma_max, rho = 0.01, 10.0, 7.0

    def loop(batch: int, steps: int = STEPS):
        latents = (chol @ torch.randn(n * n, batch * 2, dtype=torch.float64)).T.reshape(batch, 2, n, n)
        i = torch.arange(steps, dtype=torch.float64)
        sig = (
            sigma_max ** (1 / rho) + i / (steps - 1) * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))
        ) ** rho
        sig = torch.cat([sig, torch.zeros(1, dtype=torch.float64)]).tolist()
        x_next = latents * sig[0]
        for k in range(steps):
            s, s_next = sig[k], sig[k + 1]
            x_cur = x_next.detach().clone().requires_grad_(True)
            x_den = denoise(x_cur, s)
            d_cur = (x_cur - x_den) / s
            x_next = x_cur + (s_next - s) * d_cur
            update = torch.zeros_like(x_cur)
            if k < steps - 1:
                x_den = denoise(x_next, s_next)
                x_next = x_cur + (s_next - s) * (0.5 * d_cur + 0.5 * (x_next - x_den) / s_next)
                state = x_den[:, 1:2] * std + mean  # normalizer.denormalize
                pred = 0.5 * (state - mean) / std  # FieldSparseObservation: normalize_channel
                loss = torch.sum(((pred - gt) * mask) ** 2, dim=(-2, -1)) / num_obs
                coef = 1.0 if s > 1.0 else s
                update = weight * coef * torch.autograd.grad(loss[:, 0].sum(), x_cur)[0]
            x_next = x_next - update
            if x_next.isnan().any():
                raise FloatingPointError(f"torch FunDPS: NaN at step {k}")
        return x_next.detach()

    def net_vjp(x, sigma):
        x = x.detach().requires_grad_(True)
        y = denoise(x, sigma)
        return torch.autograd.grad(y, x, torch.ones_like(y))[0]

    def net_forward(x, sigma):
        with torch.no_grad():
            return denoise(x, sigma)

    return loop, net_vjp, net_forward


def compiled(fn, *args):
    """`(the compiled program of fn(*args), its FLOPs from XLA's cost analysis)`."""
    program = jax.jit(fn).lower(*args).compile()
    cost = program.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return program, float(cost.get("flops", float("nan")))


def bench_peer(args):
    found = import_torch()
    if found is None:
        print("peer: skipped (torch and neuraloperator not installed: pip install '.[bench]')")
        return []
    torch, TorchFNO = found
    n, num = _sizes(args)
    task, den = _ours(n)
    sampler = samplers.get("fundps", task, profile="published", model=den, num_steps=STEPS)
    h = sampler.hparams()
    y = task.cases(0, 1).y_obs[0]
    loop, net_vjp, net_forward = _torch_side(torch, TorchFNO, n, int(y.shape[0]))
    # the machine's 1-minute load average: ratios from a loaded CPU are not an idle machine's
    config = dict(resolution=n, num_samples=num, steps=STEPS, parameters=PARAMETERS, load=os.getloadavg()[0])
    records = []

    # XLA's cost analysis counts a while loop's body once: the sampler program's FLOPs are one
    # guided step's (two denoiser evaluations and the VJP through both) plus the setup
    ours_loop, flops = compiled(lambda k: sampler.sample_traced(k, y, num, h), jr.key(1))
    # one call each (ours compiled ahead): a torch loop takes seconds to minutes on a loaded 2-core CPU
    t_ours, t_torch = best_times_interleaved(
        [ours_loop, lambda _: loop(num)], jr.key(1), repeats=1, warmup=0, calls=1
    )
    records.append(
        record(
            f"peer_fundps_loop_{n}",
            "loops/s",
            1 / t_ours,
            1 / t_torch,
            "PosteriorBench FunDPS (torch eager)",
            flops_per_step=flops,
            **config,
        )
    )

    sigma = 1.0
    x = jr.normal(jr.key(2), (num, 2, n, n))
    xt = torch.as_tensor(np.asarray(x, np.float64))

    def vjp(v):
        out, pull = jax.vjp(jax.vmap(lambda u: den(u, sigma)), v)
        return pull(jnp.ones_like(out))[0]

    (vjp, f_vjp), (forward, f_fwd) = compiled(vjp, x), compiled(jax.vmap(lambda u: den(u, sigma)), x)
    fns = [vjp, lambda _: net_vjp(xt, sigma), forward, lambda _: net_forward(xt, sigma)]
    t = best_times_interleaved(fns, x, repeats=5)
    for name, flops, (a, b) in [("vjp", f_vjp, t[:2]), ("forward", f_fwd, t[2:])]:
        records.append(
            record(
                f"peer_net_{name}_{n}",
                "calls/s",
                1 / a,
                1 / b,
                f"neuralop FNO {name} (torch eager)",
                flops=flops,
                **config,
            )
        )
    return records


def bench_scaling(args):
    """Our published FunDPS against grid size (32^2, 64^2, 128^2 at 8 samples) and sample count
    (8, 32, 128 at 64^2): steps per second of a 3-step run (two guided Heun steps and the
    unguided Euler step), the FLOPs of one guided step (`cost_analysis`, which counts the loop
    body once) and a lower bound on the rate reached (the Euler step's work left out)."""
    del args
    steps, records = 3, []
    for n, num in [(32, 8), (64, 8), (128, 8), (64, 32), (64, 128)]:
        task, den = _ours(n)
        sampler = samplers.get("fundps", task, profile="published", model=den, num_steps=steps)
        h, y = sampler.hparams(), task.cases(0, 1).y_obs[0]
        program, flops = compiled(
            lambda k, s=sampler, h=h, y=y, num=num: s.sample_traced(k, y, num, h), jr.key(1)
        )
        (t,) = best_times_interleaved([program], jr.key(1), repeats=2, calls=1)
        records.append(
            record(
                f"fundps_scaling_{n}_{num}",
                "steps/s",
                steps / t,
                None,
                "-",
                flops_per_step=flops,
                gflops_per_s=flops * (steps - 1) / t / 1e9,
                resolution=n,
                num_samples=num,
                load=os.getloadavg()[0],
            )
        )
    return records


BENCHMARKS = {"peer": bench_peer, "fundps_scaling": bench_scaling}
