"""FunDPS (Yao et al. 2025): guided sampling of a joint (unknown, state) function-space diffusion prior.

Two profiles, both on `guided.GuidedDiffusion` with the denoised state channel u_hat as the
predicted state (in oracle mode the exact physics of the denoised unknown):

``profile="published"`` — the PosteriorBench evaluation code (`posteriorbench/methods/fundps.py`,
`configs/evaluations/fundps_<dataset>.yaml`), detail by detail:
  * trajectory in the published units (data normalized to std 0.5, EDM sigma_data 0.5);
    sigma_max -> sigma_min on a rho = 7 Karras schedule, 500 Heun steps (Euler last);
    sigma 0.002 -> 80 (Darcy, CCS, LTMI), 0.01 -> 10 (Poisson);
  * initial latent and training noise: the RBF kernel exp(-d / (2 0.05^2)) + 0.01^2 nugget
    (`diffusion.RBFNoise`);
  * loss L = sum_obs (norm(u_hat) - norm(y))^2 / n_obs, norm(v) = 0.5 (v - mean) / std with the
    state's training statistics, u_hat from the denoiser at the Heun *corrector* point
    D(x_E, sigma_{i+1}), the gradient taken w.r.t. x_i;
  * x_{i+1} = Heun(x_i) - lambda c_i grad L, c_i = 1 if sigma_i > 1 else sigma_i (published units),
    no correction on the last step; lambda = 4000 / 1600 / 300 / 3000 (Darcy / Poisson / CCS / LTMI).

``profile="ours"`` (default) — our function-space variant, not the paper's: GRF noise (the prior's
basis in oracle mode), sigma 0.002 -> 80 in unit-std units, the relative error
||obs(u_hat) - y|| / ||y|| at D(x_i, sigma_i) weighted by lambda c_i on every step, and the
gradient preconditioned by the noise covariance, x_{i+1} = Heun(x_i) - lambda c_i C_n grad L:
the probability-flow drift of the posterior under noise N(0, C_n) carries C_n grad log p(y | x),
so subtracting the Euclidean gradient is right only for white noise (under our smooth GRF noise
every mode would be contracted alike and the rough components A^T r injects survive).

``precision``: ``"float64"`` integrates as `posteriorbench/methods/fundps.py` does
(`_PDESolverDPS.generate_single_batch`): float64 sigma schedule, state, Heun arithmetic, loss on
the denoised state cast to float64 and guidance gradient; the RBF latent drawn in float32 and
cast; the network in float32 (EDMPrecond casts x and sigma, the loop casts D back).
``"float32"``: all of it in float32. `samplers.precision` has the rule and the default.

Hyperparameter ``guidance`` (lambda >= 0). Cost per sample: 2N - 1 denoiser evaluations and N
backward passes.
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
    profile: str = "ours",
    num_steps: int = 500,
    sigma_min: float | None = None,
    sigma_max: float | None = None,
    guidance_weight: float | None = None,
    noise: str | None = None,
    precision: str | None = None,
) -> guided.GuidedDiffusion:
    """`model`: a joint (unknown, state) `EDMDenoiser`; `noise` (default: the profile's, ``"rbf"``
    published / ``"grf"`` ours) must be the noise the prior was trained with; `precision`
    (``"float32"`` | ``"float64"``; default `samplers.precision.PUBLISHED` published, float32 ours)."""
    guided.check_profile(profile, "fundps")
    precision = precisions.resolve(precision, profile, "fundps")
    num_steps = checks.positive_int("num_steps", num_steps)
    published = profile == "published"
    if published:
        values = {}
        if None in (guidance_weight, sigma_min, sigma_max):
            instead = "profile='ours', or guidance_weight, sigma_min and sigma_max"
            values = tuned.published(task, "fundps", instead)
    else:
        values = {
            "guidance": guided.guidance_weight(task, guidance_weight, "fundps", published=False),
            "sigma_min": 0.002,
            "sigma_max": 80.0,
        }
    p = build_prior(task, prior, model, joint=True, noise=noise or ("rbf" if published else "grf"))
    readout = guidance.build_readout(task, p, "joint")
    if published:
        loss = guided.MaskedMSE(guided.PUBLISHED_DATA_SCALE / guided.state_std(task, p))
        schedule, at = guided.FunDPSScale(skip_last=True), "corrector"
        preconditioner, data_scale = guided.Identity(), guided.PUBLISHED_DATA_SCALE
    else:
        loss, schedule, at = guided.RelativeNorm(), guided.FunDPSScale(), "denoised"
        preconditioner, data_scale = guided.NoiseCovariance(p.noise), 1.0
    correction = guided.Correction(guided.ObservationObjective(readout, loss), schedule, "guidance", at)
    weight = values["guidance"] if guidance_weight is None else float(guidance_weight)
    return guided.GuidedDiffusion(
        task,
        {"guidance": weight},
        p,
        (correction,),
        preconditioner,
        profile,
        num_steps,
        float(values["sigma_min"] if sigma_min is None else sigma_min),
        float(values["sigma_max"] if sigma_max is None else sigma_max),
        units=guided.units(p, data_scale),
        precision=precision,
        discrete_values=tuned.profile_discrete_values(task, profile),
    )


register("fundps", build, networks={"model": "joint"})
