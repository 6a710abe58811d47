"""Diffusion posterior sampling on the unknown (``dps``): white noise, exact forward map.

N Heun steps of the EDM probability-flow ODE (Karras schedule, rho = 7) with, after each step,

    x_{i+1} <- Heun(x_i) - lambda c_i P grad_{x_i} ||obs(physics(x0_hat)) - y|| / ||y||,
    x0_hat = D(x_i, sigma_i),   c_i = 1 if sigma_i > 1 else sigma_i,

the norm form of DPS (Chung et al. 2023) with FunDPS's step scale, on an unknown-only prior.
P = C_n (`guided.NoiseCovariance`): the identity under white noise (the DPS default), the
function-space correction when a prior trained with GRF noise is used (``noise="grf"``).
There is no published PosteriorBench profile of DPS: this is our baseline. Hyperparameter
``guidance`` (lambda >= 0); default 4000 on ``darcy`` / ``darcy_lowres``, else 1600 (our values).
Cost per sample: 2N - 1 denoiser evaluations and N backward passes through denoiser and forward map.
"""

from __future__ import annotations

from posteriorjax import checks
from posteriorjax.samplers import guidance, guided
from posteriorjax.samplers.base import register
from posteriorjax.samplers.denoisers import build_prior


def build(
    task,
    *,
    prior: str = "learned",
    model=None,
    num_steps: int = 500,
    sigma_min: float = 0.002,
    sigma_max: float = 80.0,
    guidance_weight: float | None = None,
    noise: str = "white",
) -> guided.GuidedDiffusion:
    """`noise` must be the noise the prior was trained with (``"white"``, ``"grf"`` or ``"rbf"``)."""
    num_steps = checks.positive_int("num_steps", num_steps)
    p = build_prior(task, prior, model, joint=False, noise=noise)
    readout = guidance.build_readout(task, p, "exact")
    correction = guided.Correction(
        guided.ObservationObjective(readout, guided.RelativeNorm()),
        guided.FunDPSScale(),
        "guidance",
        "denoised",
    )
    weight = guided.guidance_weight(task, guidance_weight, "dps", published=False)
    return guided.GuidedDiffusion(
        task,
        {"guidance": weight},
        p,
        (correction,),
        guided.NoiseCovariance(p.noise),
        "ours",
        num_steps,
        float(sigma_min),
        float(sigma_max),
        units=guided.units(p, 1.0),
    )


register("dps", build, networks={"model": "prior"})
