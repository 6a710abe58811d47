"""Peer benchmark: PosteriorBench's PyTorch FunDPS and DDIS loops beside ours, same networks.

The network on both sides is the neuralop FNO (16 modes, width 32, 4 layers; lifting and
projection ratio 2, soft-gated channel MLPs) inside EDM preconditioning with sigma_data 0.5,
the noise level entering as an 8-channel `time_embedding` of c_noise = log(sigma) / 4
concatenated to the input: neuraloperator's `FNO` in torch, `nn.NeuralopFNO` here, 1,193,442
real parameters each (asserted; torch counts a complex weight once). Weights are random, and
ours enter the compiled programs as arguments (`compiled`) or moved off their initial values
(`_off_initial`): XLA would fold an untrained network's unit gates compiled in as constants.
torch runs eagerly on the CPU, with its default threads (one per core), in the same process as
JAX.

Workloads (64 x 64, 8 samples; `--device`: 128 x 128, 32 samples; `--peer_resolution=N`: N x N):
  peer_fundps_loop     20 FunDPS steps (Heun, guidance at the corrector point through the input
                       VJP; `posteriorbench/methods/fundps.py` `_PDESolverDPS.generate_single_batch`,
                       transcribed below with one sparse-sensor observation and the RBF latent
                       drawn by the dense Cholesky factor, as published) against
                       `samplers.get("fundps", task, profile="published", ...)`;
  peer_net_vjp         network forward + VJP w.r.t. the input (each guided step's reverse pass);
  peer_net_forward     network forward alone;
  peer_ddis_loop       `DDIS_LEVELS` annealing levels of the published DDIS on Poisson (each: the
                       prior's 5-step Heun solve, 35 Langevin steps through the ``fno_pad``
                       surrogate; `posteriorbench/methods/ddis.py` transcribed below) against
                       `samplers.get("ddis", task, profile="published", ...)`, both networks
                       neuralop FNOs of the size above (parameter counts asserted equal);
  peer_surrogate_vjp   the ``fno_pad`` surrogate's forward + input VJP (each Langevin step's
                       reverse pass; the reflect padding doubles the grid);
  peer_sweep           a small guidance study (2 cases x 3 weights): our sweep program, sampling and
                       scoring every configuration, against the torch FunDPS loop per
                       configuration scored by PosteriorBench's metric code (NumPy,
                       `posteriorbench_metrics.py`);
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

import functools
import math
import os
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from bench.common import best_times_interleaved, record
from posteriorjax import nn, samplers, tasks, training
from posteriorjax.nn.pdeobs import parameter_count

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


def _torch_for(name: str):
    """`import_torch()`, printing why benchmark `name` is skipped when it returns None."""
    found = import_torch()
    if found is None:
        print(f"{name}: skipped (torch and neuraloperator not installed: pip install '.[bench]')")
    return found


def _sizes(args):
    """(grid, samples): 64^2 and 8 samples on a CPU, 128^2 and 32 with `--device`; a
    `--peer_resolution` keeps the samples and sets the grid."""
    n, num = (128, 32) if args.device else (64, 8)
    return (getattr(args, "peer_resolution", None) or n), num


def _ours(n: int):
    """Our published FunDPS on the Poisson task at `n`^2 with the neuralop FNO denoiser."""
    task = tasks.get("poisson", resolution=n)
    x_norm, u_norm = nn.field_normalizer(task), nn.state_statistics(task, 16)
    options = dict(style="neuralop", **FNO, time_channels=TIME_CHANNELS)
    den = training.build_model(
        "joint", "fno", options, task, x_norm=x_norm, u_norm=u_norm, key=jr.key(0), sigma_data=SIGMA_DATA
    )
    count = parameter_count(den.net)
    if count != PARAMETERS:
        raise AssertionError(f"our FNO has {count} parameters, expected {PARAMETERS}")
    return task, den


def _torch_edm(torch, fno):
    """`denoise(x, sigma)`: EDM preconditioning of `fno` with sigma_data 0.5 (float64 trajectory,
    float32 network), the noise level an 8-channel time embedding of log(sigma) / 4 concatenated
    to the input (`training_fundps`)."""
    half = TIME_CHANNELS // 2
    freqs = torch.exp(-math.log(2000.0) / (half - 1) * torch.arange(half, dtype=torch.float32))

    def denoise(x, sigma):
        sd = SIGMA_DATA
        c_skip = sd**2 / (sigma**2 + sd**2)
        c_out = sigma * sd / math.sqrt(sigma**2 + sd**2)
        c_in = 1 / math.sqrt(sd**2 + sigma**2)
        arg = math.log(sigma) / 4 * 2000.0 * freqs
        emb = torch.cat([torch.sin(arg), torch.cos(arg)])[None, :, None, None]
        inp = torch.cat([(c_in * x).to(torch.float32), emb.expand(x.shape[0], -1, *x.shape[2:])], 1)
        return c_skip * x + c_out * fno(inp).to(torch.float64)

    return denoise


def _torch_rbf_factor(torch, n: int):
    """The published RBF noise's dense Cholesky factor `(n^2, n^2)` (float64): kernel
    exp(-d / (2 0.05^2)) on the unit square plus a 1e-4 nugget, computed once as when the
    sampler is built; a draw of B fields is (L z).T reshaped to (B, ..., n, n)."""
    g = torch.stack(torch.meshgrid(*(torch.arange(n, dtype=torch.float64) / n,) * 2, indexing="ij"), -1)
    d = torch.cdist(g.reshape(-1, 2), g.reshape(-1, 2))
    return torch.linalg.cholesky(torch.exp(-d / (2 * 0.05**2)) + 1e-4 * torch.eye(n * n, dtype=torch.float64))


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
    count = _torch_parameters(fno)
    if count != PARAMETERS:
        raise AssertionError(f"neuralop FNO has {count} real parameters, expected {PARAMETERS}")
    fno.eval()
    denoise = _torch_edm(torch, fno)
    chol = _torch_rbf_factor(torch, n)
    rng = np.random.default_rng(0)
    mask = torch.zeros(1, n, n, dtype=torch.float64)
    idx = rng.choice(n * n, num_obs, replace=False)
    mask.view(-1)[torch.as_tensor(idx)] = 1.0
    gt = torch.as_tensor(rng.standard_normal((1, 1, n, n)))
    mean, std, weight = 0.1, 0.7, 1600.0  # the state's statistics; the Poisson guidance weight
    sigma_min, sigma_max, rho = 0.01, 10.0, 7.0

    def loop(batch: int, steps: int = STEPS, weight: float = weight):
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


def _is_network_parameter(path, leaf) -> bool:
    """A filter spec leaf: an array under a `net` attribute (a network's parameters)."""
    return eqx.is_array(leaf) and any(getattr(k, "name", None) == "net" for k in path)


def compiled(fn, module, *args):
    """`(program, its FLOPs from XLA's cost analysis)`: `fn(module, *args)` compiled with the
    parameters of `module`'s networks as arguments of the program, `program(*args)` calling it.

    As arguments, not constants: XLA folds constant parameters, and an untrained network's
    zero biases and unit gates fold away, which a trained network's do not (before
    `nn.neuralop_fno.soft_gate`, the neuralop FNO's forward + VJP with its initial gates compiled
    in ran 1.7x as fast as with trained ones). The rest of `module`
    (observation operators, noise factors) stays compiled in, as in the sweep.
    """
    spec = jax.tree_util.tree_map_with_path(_is_network_parameter, module)
    params, static = eqx.partition(module, spec)
    program = jax.jit(lambda p, *a: fn(eqx.combine(p, static), *a)).lower(params, *args).compile()
    cost = program.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return functools.partial(program, params), float(cost.get("flops", float("nan")))


def bench_peer(args):
    found = _torch_for("peer_fundps")
    if found is None:
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
    ours_loop, flops = compiled(lambda s, k: s.sample_traced(k, y, num, h), sampler, jr.key(1))
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

    def vjp(d, v):
        out, pull = jax.vjp(jax.vmap(lambda u: d(u, sigma)), v)
        return pull(jnp.ones_like(out))[0]

    forward = lambda d, v: jax.vmap(lambda u: d(u, sigma))(v)  # noqa: E731
    (vjp, f_vjp), (forward, f_fwd) = compiled(vjp, den, x), compiled(forward, den, x)
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


# DDIS (`posteriorbench/methods/ddis.py`, `configs/evaluations/ddis_poisson.yaml`): each annealing
# level runs the prior's 5-step Heun solve (9 denoiser evaluations) and 35 Langevin steps through
# the surrogate; the timed loop runs `DDIS_LEVELS` levels, the cost of each repeating unchanged
DDIS_LEVELS = 2
DDIS = dict(langevin_steps=35, lr=7e-5, eta=0.25, tau=1e-3, weight=2.0, obs_scale=0.5)


def _torch_parameters(module) -> int:
    """Real parameters of a torch module (a complex weight counts twice, as ours stores it)."""
    return sum(2 * p.numel() if p.is_complex() else p.numel() for p in module.parameters())


def _ours_ddis(n: int):
    """Our published DDIS on Poisson at `n`^2: the prior denoiser and the ``fno_pad`` surrogate
    are neuralop FNOs of the `FNO` size (the published surrogate is 64 modes / 64 wide at 128^2)."""
    task = tasks.get("poisson", resolution=n)
    x_norm, u_norm = nn.field_normalizer(task), nn.state_statistics(task, 16)
    norms = dict(x_norm=x_norm, u_norm=u_norm)
    prior = training.build_model(
        "prior", "fno", dict(style="neuralop", **FNO, time_channels=TIME_CHANNELS), task,
        key=jr.key(0), sigma_data=SIGMA_DATA, **norms,
    )  # fmt: skip
    surrogate = training.build_model("surrogate", "fno_pad", dict(FNO), task, key=jr.key(1), **norms)
    return task, prior, surrogate


def _torch_ddis(torch, TorchFNO, n: int, num_obs: int, sizes: tuple[int, int]):
    """The published DDIS loop in torch (`DDISAdapter._sample_batch`, `_reverse_diffusion`,
    `_langevin_dynamics`) on neuralop FNOs; `sizes` (prior, surrogate) our real parameter counts,
    asserted equal."""
    torch.manual_seed(1)
    make = lambda cin: TorchFNO(  # noqa: E731
        n_modes=(FNO["modes"],) * 2, in_channels=cin, out_channels=1,
        hidden_channels=FNO["width"], n_layers=FNO["layers"],
    )  # fmt: skip
    prior_fno, surrogate_fno = make(1 + TIME_CHANNELS).eval(), make(1).eval()
    got = (_torch_parameters(prior_fno), _torch_parameters(surrogate_fno))
    if got != tuple(sizes):
        raise AssertionError(f"torch DDIS networks have {got} real parameters, ours {tuple(sizes)}")
    denoise = _torch_edm(torch, prior_fno)
    chol = _torch_rbf_factor(torch, n)
    rng = np.random.default_rng(0)
    mask = torch.zeros(1, 1, n, n, dtype=torch.float64)
    mask.view(-1)[torch.as_tensor(rng.choice(n * n, num_obs, replace=False))] = 1.0
    observed = torch.as_tensor(rng.standard_normal((1, 1, n, n)))
    x_std, u_mean, u_std = 0.27, 0.0, 0.7  # the normalizers' statistics (values do not change the cost)

    def surrogate(x):
        """FNO_pad: reflect-pad by half the grid, the FNO, crop (`training_ddis/surrogate.py`)."""
        py, px = x.shape[-2] // 2, x.shape[-1] // 2
        y = surrogate_fno(torch.nn.functional.pad(x, (px, px, py, py), mode="reflect"))
        return y[..., py:-py, px:-px]

    def karras(num, hi, lo):
        grid = np.linspace(0.0, 1.0, num)
        return np.append((hi ** (1 / 7) + grid * (lo ** (1 / 7) - hi ** (1 / 7))) ** 7, 0.0)

    def noise(batch):
        return (chol @ torch.randn(n * n, batch, dtype=torch.float64)).T.reshape(batch, 1, n, n)

    def clean(x, sigma_hi):
        steps = karras(5, sigma_hi, 1e-3)
        with torch.no_grad():
            for k, (s, s_next) in enumerate(zip(steps[:-1], steps[1:], strict=True)):
                d = (x - denoise(x, s)) / s
                proposal = x + (s_next - s) * d
                if k < len(steps) - 2:
                    d_next = (proposal - denoise(proposal, s_next)) / s_next
                    proposal = x + (s_next - s) * (0.5 * d + 0.5 * d_next)
                x = proposal
        return x

    def langevin(x0, sigma, level, levels):
        lr = DDIS["lr"] * (1 + level / levels * (0.01 - 1))
        x = x0.clone()
        for _ in range(DDIS["langevin_steps"]):
            x = x.detach().requires_grad_(True)
            loss = (x - x0).square().sum() / (2 * sigma**2)
            raw = (x * x_std / 0.5).to(torch.float32)  # ModelNormalizer.denormalize
            pred = DDIS["obs_scale"] * (surrogate(raw).to(x.dtype) - u_mean) / u_std
            mse = (((pred - observed) * mask) ** 2).sum() / mask.sum()
            loss = loss + DDIS["weight"] * mse / (2 * DDIS["tau"] ** 2)
            grad = torch.autograd.grad(loss, x)[0]
            with torch.no_grad():
                x = x - lr * grad + noise(x.shape[0]) * math.sqrt(2 * lr) * DDIS["eta"]
            if not torch.isfinite(x).all():
                raise FloatingPointError("torch DDIS: non-finite Langevin state")
        return x.detach()

    def loop(batch: int, levels: int = DDIS_LEVELS):
        sigmas = karras(levels, 10.0, 0.01)
        x = noise(batch) * sigmas[0]
        for level, (s, s_next) in enumerate(zip(sigmas[:-1], sigmas[1:], strict=True)):
            x = langevin(clean(x, s), s, level, levels) + noise(batch) * s_next
        return x

    def surrogate_vjp(x):
        x = x.detach().to(torch.float32).requires_grad_(True)
        y = surrogate(x)
        return torch.autograd.grad(y, x, torch.ones_like(y))[0]

    return loop, surrogate_vjp


def bench_peer_ddis(args) -> list[dict]:
    """DDIS's loop (`DDIS_LEVELS` annealing levels) and its surrogate's forward + input VJP."""
    found = _torch_for("peer_ddis")
    if found is None:
        return []
    torch, TorchFNO = found
    n, num = _sizes(args)
    task, prior, surrogate = _ours_ddis(n)
    sizes = (parameter_count(prior.net), parameter_count(surrogate.net))
    sampler = samplers.get(
        "ddis", task, profile="published", model=prior, surrogate=surrogate, num_steps=DDIS_LEVELS
    )
    if sampler.langevin_steps != DDIS["langevin_steps"]:
        raise AssertionError(
            f"our DDIS runs {sampler.langevin_steps} Langevin steps, torch's {DDIS['langevin_steps']}"
        )
    h, y = sampler.hparams(), task.cases(0, 1).y_obs[0]
    loop, surrogate_vjp = _torch_ddis(torch, TorchFNO, n, int(y.shape[0]), sizes)
    config = dict(resolution=n, num_samples=num, annealing_levels=DDIS_LEVELS, parameters=sizes,
                  langevin_steps=DDIS["langevin_steps"], load=os.getloadavg()[0])  # fmt: skip
    # XLA's cost analysis counts each loop body once: one Heun step of the prior (two denoiser
    # evaluations) and one Langevin step (a surrogate forward + VJP), plus the setup
    ours_loop, flops = compiled(lambda s, k: s.sample_traced(k, y, num, h), sampler, jr.key(1))
    t_ours, t_torch = best_times_interleaved(
        [ours_loop, lambda _: loop(num)], jr.key(1), repeats=1, warmup=0, calls=1
    )
    records = [
        record(f"peer_ddis_loop_{n}", "loops/s", 1 / t_ours, 1 / t_torch,
               "PosteriorBench DDIS (torch eager)", flops_heun_and_langevin_step=flops, **config)
    ]  # fmt: skip
    x = jr.normal(jr.key(2), (num, 1, n, n))
    xt = torch.as_tensor(np.array(x))  # a writable copy

    def vjp(sur, v):
        out, pull = jax.vjp(jax.vmap(sur.net), v)
        return pull(jnp.ones_like(out))[0]

    ours_vjp, f_vjp = compiled(vjp, surrogate, x)
    a, b = best_times_interleaved([ours_vjp, lambda _: surrogate_vjp(xt)], x, repeats=5)
    records.append(
        record(f"peer_surrogate_vjp_{n}", "calls/s", 1 / a, 1 / b, "neuralop FNO_pad vjp (torch eager)",
               flops=f_vjp, **config)
    )  # fmt: skip
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
            lambda s, k, h=h, y=y, num=num: s.sample_traced(k, y, num, h), sampler, jr.key(1)
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


# The sweep against PosteriorBench's per-configuration loop: 2 cases x 3 guidance weights (the
# published Poisson weight x 1/4, 1, 4), each configuration sampled and scored against 64 reference
# members per case (prior draws: the cost does not depend on which)
SWEEP_CASES, SWEEP_FACTORS, SWEEP_REFERENCE = 2, (0.25, 1.0, 4.0), 64


def _off_initial(module, key):
    """`module` with every parameter moved off its initial value (+ 0.01 N(0, 1)), as a trained
    network's are: a program that compiles it in (the sweep's does) can fold no unit gate or
    zero bias."""
    leaves, tree = jax.tree.flatten(eqx.filter(module, eqx.is_inexact_array))
    keys = jr.split(key, len(leaves))
    moved = [a + 0.01 * jr.normal(k, a.shape, a.dtype) for a, k in zip(leaves, keys, strict=True)]
    return eqx.combine(jax.tree.unflatten(tree, moved), module)


def bench_peer_sweep(args) -> list[dict]:
    """A small guidance study both ways: our sweep program (`sweep.run_pair`: every configuration
    sampled and scored by the whole metric suite in one compiled program) against PosteriorBench's
    way, its FunDPS loop in torch per configuration, each ensemble then scored by its NumPy
    metric code (`posteriorbench_metrics.evaluate`: mean and std error, MMD, SWD, spectral
    error). Ours computes more (CRPS, coverage, TARP and MIRA statistics besides), so the ratio is
    conservative. Times exclude our compilation (the records' `wall_time_s`)."""
    found = _torch_for("peer_sweep")
    if found is None:
        return []
    from bench import posteriorbench_metrics as pb
    from posteriorjax import sweep
    from posteriorjax.sweep.program import expand

    torch, TorchFNO = found
    n, num = _sizes(args)
    task, den = _ours(n)
    sampler = samplers.get(
        "fundps", task, profile="published", model=_off_initial(den, jr.key(5)), num_steps=STEPS
    )
    cases = task.cases(0, SWEEP_CASES)
    members = jax.vmap(task.prior.sample)(jr.split(jr.key(3), SWEEP_CASES * SWEEP_REFERENCE))
    reference = members.reshape(SWEEP_CASES, SWEEP_REFERENCE, *members.shape[1:])
    weights = jnp.full((SWEEP_CASES, SWEEP_REFERENCE), 1.0 / SWEEP_REFERENCE)
    published = sampler.defaults["guidance"]
    grid = expand(SWEEP_CASES, {"guidance": [published * f for f in SWEEP_FACTORS]}, [0], sampler.defaults)
    loop, _, _ = _torch_side(torch, TorchFNO, n, int(cases.y_obs.shape[1]))
    ref_np, (mean, std) = np.asarray(reference[:, :, 0], np.float64), task.field_stats
    uniform = np.ones(SWEEP_REFERENCE)

    def ours() -> float:
        records = sweep.run_pair(
            task, sampler, cases, (reference, weights), grid,
            num_samples=num, seed=0, chunk_size=grid.size, batch_size=grid.size,
        )  # fmt: skip
        return sum(r["wall_time_s"] for r in records)

    def theirs() -> float:
        t0 = time.perf_counter()
        for i in range(grid.size):
            x = loop(num, weight=float(grid.hparams["guidance"][i])).numpy()[:, 0]
            pb.evaluate(x, ref_np[int(grid.case[i])], np.ones(num), uniform, mean, std)
        return time.perf_counter() - t0

    t_ours, t_torch = [], []
    for _ in range(2):  # alternated rounds, best of each
        t_ours.append(ours())
        t_torch.append(theirs())
    config = dict(resolution=n, num_samples=num, steps=STEPS, cases=SWEEP_CASES,
                  guidance_factors=SWEEP_FACTORS, reference_members=SWEEP_REFERENCE,
                  ours_seconds=t_ours, torch_seconds=t_torch, load=os.getloadavg()[0])  # fmt: skip
    return [
        record(f"peer_sweep_{n}", "configs/s", grid.size / min(t_ours), grid.size / min(t_torch),
               "PosteriorBench FunDPS per config + its NumPy metrics", **config)
    ]  # fmt: skip


BENCHMARKS = {
    "peer_fundps": bench_peer,
    "peer_ddis": bench_peer_ddis,
    "peer_sweep": bench_peer_sweep,
    "fundps_scaling": bench_scaling,
}
