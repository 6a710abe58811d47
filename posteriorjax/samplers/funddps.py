"""Fun-DDPS: decoupled function-space diffusion posterior sampling (``funddps``).

The prior is over the unknown only; the observation loss goes through a separate forward model
G of the denoised unknown: the learned FNO surrogate of the physics (``forward="surrogate"``,
as published: 16 modes, 48 channels, 4 layers) or the exact differentiable physics
(``forward="exact"``). Decoupling lets prior and forward model be trained (or replaced)
independently.

``profile="published"`` — `posteriorbench/methods/funddps.py`, `configs/evaluations/funddps_<dataset>.yaml`:
  trajectory in the published 0.5-scaled units, RBF-kernel noise (`diffusion.RBFNoise`),
  sigma 0.002 -> 80, rho = 7, 500 Heun steps; loss = sum_obs ((G(x0_hat) - y) / std_u)^2 / n_obs,
  the MSE in the surrogate's output normalization (mean, std; its `normalization_scale` is not
  in the public configs and defaults to 1 in the code, which we take), on x0_hat = D(x_i, sigma_i),
  **no c_i**, on every step (the last included): x_{i+1} = Heun(x_i) - lambda grad_{x_i} L;
  lambda = 1000 / 100 / 17.5 / 400 (Darcy / Poisson / CCS / LTMI).

``profile="ours"`` (default) — as our `fundps` variant: GRF noise, ||G(x0_hat) - y|| / ||y||
weighted by lambda c_i, preconditioned by C_n; default lambda 1000 on Darcy, 100 elsewhere.

``precision``: ``"float64"`` integrates as `posteriorbench/methods/funddps.py` does
(`FunDDPSAdapter._sample_batch`): float64 sigma schedule, state, Heun arithmetic and guidance
gradient; the RBF latent drawn in float32 and cast; the prior network in float32 (EDMPrecond casts
x and sigma, the loop casts D back) and the surrogate on the denoised state cast to float32 (its
MSE is then taken in float64 here, in float32 there: a difference at float32 rounding).
``"float32"``: all of it in float32. `samplers.precision` has the rule and the default.

Hyperparameter ``guidance`` (lambda). Cost per sample: 2N - 1 denoiser evaluations plus N
surrogate (or solver) forward/backward passes.
"""

from __future__ import annotations

from posteriorjax import checks
from posteriorjax.samplers import guidance, guided, tuned
from posteriorjax.samplers import precision as precisions
from posteriorjax.samplers.base import register
from posteriorjax.samplers.denoisers import build_prior


def build(
    task,
    *,
    prior: str = "learned",
    model=None,
    surrogate=None,
    forward: str = "surrogate",
    profile: str = "ours",
    num_steps: int = 500,
    sigma_min: float = 0.002,
    sigma_max: float = 80.0,
    guidance_weight: float | None = None,
    noise: str | None = None,
    precision: str | None = None,
) -> guided.GuidedDiffusion:
    """`model`: unknown-only `EDMDenoiser` (or ``prior="oracle"``); `surrogate`: `nn.Surrogate`;
    `noise` (default: the profile's, ``"rbf"`` published / ``"grf"`` ours) as the prior was trained;
    `precision` (``"float32"`` | ``"float64"``; default `samplers.precision.PUBLISHED` published,
    float32 ours)."""
    guided.check_profile(profile, "funddps")
    precision = precisions.resolve(precision, profile, "funddps")
    num_steps = checks.positive_int("num_steps", num_steps)
    if forward not in ("surrogate", "exact"):
        raise ValueError(f"forward: expected 'surrogate' or 'exact', got {forward!r}")
    published = profile == "published"
    weight = guided.guidance_weight(task, guidance_weight, "funddps", published=published)
    p = build_prior(task, prior, model, joint=False, noise=noise or ("rbf" if published else "grf"))
    readout = guidance.build_readout(task, p, forward, surrogate)
    if published:
        loss = guided.MaskedMSE(1.0 / guided.state_std(task, p, readout.surrogate))
        schedule, preconditioner, data_scale = (
            guided.Constant(),
            guided.Identity(),
            guided.PUBLISHED_DATA_SCALE,
        )
    else:
        loss, schedule = guided.RelativeNorm(), guided.FunDPSScale()
        preconditioner, data_scale = guided.NoiseCovariance(p.noise), 1.0
    correction = guided.Correction(
        guided.ObservationObjective(readout, loss), schedule, "guidance", "denoised"
    )
    return guided.GuidedDiffusion(
        task,
        {"guidance": weight},
        p,
        (correction,),
        preconditioner,
        profile,
        num_steps,
        float(sigma_min),
        float(sigma_max),
        units=guided.units(p, data_scale),
        precision=precision,
        discrete_values=tuned.profile_discrete_values(task, profile),
    )


register("funddps", build, networks={"model": "prior", "surrogate": "surrogate"})
