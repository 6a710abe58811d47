"""DiffusionPDE (Huang et al. 2024): joint (unknown, state) grid prior, observation + PDE-residual guidance.

N Heun steps of the EDM probability-flow ODE (Karras, rho = 7, sigma 0.002 -> 80, white-noise
start). Step i (0-based) takes the denoised joint state (x_hat, u_hat) at the Heun *corrector*
point D(x_E, sigma_{i+1}) (on the last step D(x_i, sigma_i)), as the released sampler, and

    i <= 0.8 N:  x_{i+1} = Heun(x_i) - zeta_obs / B grad_{x_i} L_obs
    i >  0.8 N:  x_{i+1} = Heun(x_i) - 0.1 zeta_obs / B grad_{x_i} L_obs - zeta_pde / B grad_{x_i} L_pde

with L_obs = ||obs(u_hat) - y||_2 (plain L2 norm in physical units, not squared) and
L_pde = ||R(x_hat, u_hat)||_2 / (H W) (`guided.ResidualNorm`), the gradients taken through the
Euler predictor and both denoiser calls.

``profile="published"`` — the PosteriorBench evaluation (`posteriorbench/methods/diffusionpde.py`,
`configs/evaluations/diffusionpde_<dataset>.yaml`, its modified, batched DiffusionPDE): trajectory
in the published 0.5-scaled units, 2000 steps, zeta_obs = 40000 / 20000 / 1000 / 400 (Darcy /
Poisson / CCS / LTMI), zeta_pde = 0, and the *batch-mean* loss: the published `_field_loss` is
the mean over a batch of B per-sample norms, so each sample's gradient is zeta / B with B the
size of the batch it is drawn in: the published `generate` draws `num_samples` in batches of
`batch_size` = 10 (its default), the last one partial (12 samples: ten at zeta / 10, two at
zeta / 2); ours draws them the same way (`guided.batch_divisors`), so the same zeta means the
same per-sample step as there. The
published backbone is a grid U-Net (`nn.UNet`, `ddpmpp`) trained with white noise.

``profile="ours"`` (default): the same update in unit-std units with B = 1 (per-sample
gradients; ``batch_size`` sets another B), zeta_obs = 40000 (Darcy) / 20000 (others). The
released DiffusionPDE inverse configurations weight the PDE term instead (zeta_pde = 100 Darcy /
1 Poisson, zeta_u = 5000 / 40); pass ``pde_weight`` (a vmappable hyperparameter) to run them.

Where ours departs, and why: the residual is our discretization's (cell-centred finite volumes
with harmonic faces for Darcy, including the 1/h^2 that the released Darcy loss omits,
DiffusionPDE issue #13; the Poisson sign convention of `physics.poisson`), divided by H W so it
is the published scaling at 128^2 and the same function of the residual's RMS elsewhere; the
sample is returned continuous (the published thresholding of the Darcy permeability at 7.5 is
the task's evaluation transform). In oracle mode the state is the exact physics of the denoised
unknown, so R = 0 and only the observation term acts.

Hyperparameters: ``guidance`` zeta_obs >= 0, ``pde_weight`` zeta_pde >= 0. Cost per sample:
2N - 1 denoiser evaluations and N backward passes through two of them.
"""

from __future__ import annotations

from posteriorjax import checks
from posteriorjax.samplers import guidance, guided, tuned
from posteriorjax.samplers.base import register
from posteriorjax.samplers.denoisers import build_prior

PUBLISHED_BATCH_SIZE = 10
PDE_FRACTION = 0.8
OBS_LATE_FACTOR = 0.1


def build(
    task,
    *,
    prior: str = "learned",
    model=None,
    profile: str = "ours",
    num_steps: int = 2000,
    sigma_min: float = 0.002,
    sigma_max: float = 80.0,
    noise: str = "white",
    guidance_weight: float | None = None,
    pde_weight: float = 0.0,
    batch_size: int | None = None,
) -> guided.GuidedDiffusion:
    """`model`: a joint (unknown, state) `EDMDenoiser` (a U-Net in the published method);
    `batch_size`: B of the batch-mean loss (default 10 published, 1 ours): samples are drawn in
    batches of B, the last one partial, each guided by zeta / (the size of its batch)."""
    guided.check_profile(profile, "diffusionpde")
    num_steps = checks.positive_int("num_steps", num_steps)
    published = profile == "published"
    batch = (PUBLISHED_BATCH_SIZE if published else 1) if batch_size is None else batch_size
    batch = checks.positive_int("batch_size", batch)
    weight = guided.guidance_weight(task, guidance_weight, "diffusionpde", published=published)
    p = build_prior(task, prior, model, joint=True, noise=noise)
    readout = guidance.build_readout(task, p, "joint")
    observation = guided.ObservationObjective(readout, guided.L2Norm())
    late_decay = guided.LateDecay(PDE_FRACTION, OBS_LATE_FACTOR)
    corrections = (
        guided.Correction(observation, late_decay, "guidance", "corrector"),
        guided.Correction(
            guided.ResidualNorm(readout),
            guided.LateOnly(PDE_FRACTION),
            "pde_weight",
            "corrector",
        ),
    )
    data_scale = guided.PUBLISHED_DATA_SCALE if published else 1.0
    defaults = {"guidance": weight, "pde_weight": float(pde_weight)}
    return guided.GuidedDiffusion(
        task,
        defaults,
        p,
        corrections,
        guided.Identity(),
        profile,
        num_steps,
        float(sigma_min),
        float(sigma_max),
        units=guided.units(p, data_scale),
        batch_mean=batch,
        discrete_values=tuned.profile_discrete_values(task, profile),
    )


register("diffusionpde", build, networks={"model": "joint"})
