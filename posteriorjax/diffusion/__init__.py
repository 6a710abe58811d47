"""Function-space diffusion priors: noise schedules, noise generators, EDM preconditioning,
the denoising score-matching loss and unconditional sampling (see each module's docstring)."""

from __future__ import annotations

from posteriorjax.diffusion.loss import dsm_loss
from posteriorjax.diffusion.noise import GRFNoise, MaternNoise, RBFNoise, WhiteNoise
from posteriorjax.diffusion.precond import EDMDenoiser, Normalizer, preconditioning, regression_target, score
from posteriorjax.diffusion.sampling import euler_step, heun_step, sample, sample_ode
from posteriorjax.diffusion.schedules import karras_sigmas, log_normal_sigma

__all__ = [
    "dsm_loss",
    "GRFNoise",
    "MaternNoise",
    "RBFNoise",
    "WhiteNoise",
    "EDMDenoiser",
    "Normalizer",
    "preconditioning",
    "regression_target",
    "score",
    "euler_step",
    "heun_step",
    "sample",
    "sample_ode",
    "karras_sigmas",
    "log_normal_sigma",
]
