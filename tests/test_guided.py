"""The guided samplers' published profiles against direct NumPy transcriptions of the published updates.

Each test runs a few steps of one of our samplers (float64) with an EDM denoiser whose backbone is a
fixed linear map, so the published update (written out below from `posteriorbench/methods/
{fundps,funddps,diffusionpde}.py`, in the published 0.5-scaled units, with the gradient in
closed form) can be computed in NumPy from the same initial latent. A model normalized as ours
(data std 1) and one normalized as published (std 0.5, sigma_data 0.5) must both reproduce it.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import diffusion, nn, samplers, tasks, training
from posteriorjax.metrics import posterior as pm
from posteriorjax.reference import exact
from posteriorjax.samplers import denoisers, guided, precision

N_STEPS = 4
SIGMA_D = {1.0: 1.0, 0.5: 0.5}  # the model's sigma_data for its data scale
# relative tolerance of a few-step trajectory against its float64 transcription: float64 integration
# (with the float64 test network) reproduces it to round-off, float32 to float32 round-off
RTOL = {"float64": 1e-12, "float32": 1e-5}


class LinearNet(eqx.Module):
    """F(z, c_noise) = W z: a backbone whose EDM denoiser is linear in x."""

    w: jax.Array

    def __call__(self, z, c_noise, *, key=None):
        return (self.w @ z.reshape(-1)).reshape(z.shape)


def denoiser_matrix(w, sigma, sigma_data):
    """K with D(x, sigma) = K x for the EDM preconditioning around F = W (Karras et al. Eq. 7)."""
    s2 = sigma**2 + sigma_data**2
    c_skip, c_out, c_in = sigma_data**2 / s2, sigma * sigma_data / np.sqrt(s2), 1 / np.sqrt(s2)
    return c_skip * np.eye(w.shape[0]) + c_out * c_in * w


@pytest.fixture(scope="module")
def setup():
    with jax.enable_x64(True):
        task = tasks.get("poisson_fixed", resolution=8, num_sensors=6, noise_std=1e-3)
        y = np.asarray(task.cases(3, 1).y_obs[0], np.float64)
        obs = np.asarray(
            jax.jacfwd(lambda u: task.observation(u.reshape(1, 8, 8)))(jnp.zeros(64)), np.float64
        )
        phys = np.asarray(jax.jacfwd(lambda x: task.physics(x.reshape(1, 8, 8)).reshape(-1))(jnp.zeros(64)))
    rng = np.random.default_rng(0)
    return (
        task,
        y,
        obs,
        np.asarray(phys, np.float64),
        rng.normal(size=(128, 128)) * 0.05,
        rng.normal(size=(64, 64)) * 0.05,
    )


def edm_model(w, mean, std, data_scale):
    normalizer = nn.Normalizer(mean, std, data_scale)
    return diffusion.EDMDenoiser(LinearNet(jnp.asarray(w)), normalizer, SIGMA_D[data_scale])


def karras(n, smin, smax, rho=7.0):
    i = np.arange(n)
    s = (smax ** (1 / rho) + i / (n - 1) * (smin ** (1 / rho) - smax ** (1 / rho))) ** rho
    return np.concatenate([s, [0.0]])


class FixedLatent(eqx.Module):
    """A noise generator that returns one given draw `eps` (float32 values, as the published draws)."""

    eps: jax.Array

    def sample(self, key, shape, dtype=None):
        del key
        return self.eps.reshape(shape).astype(self.eps.dtype if dtype is None else dtype)


def with_latent(sampler, key):
    """`sampler` with its initial latent fixed to its RBF draw from the first key of `key`, and that
    draw (float64 values of float32 numbers): a compiled draw may differ from an eager one by an ulp."""
    with jax.enable_x64(True):
        shape = (sampler.prior.channels, 8, 8)
        eps = sampler.prior.noise.sample(jr.split(key, 1)[0], shape, precision.NOISE_DTYPE)
    return eqx.tree_at(lambda s: s.prior.noise, sampler, FixedLatent(eps)), np.asarray(eps, np.float64)


def ours(sampler, y, key, weight):
    sampler, eps = with_latent(sampler, key)
    with jax.enable_x64(True):
        x = sampler.sample(key, jnp.asarray(y), 1, sampler.hparams(guidance=weight))
    return np.asarray(x, np.float64).reshape(-1), eps.reshape(-1)


def net_pub(w, data_scale):
    """The published-units denoiser of our model: D_pub(X, s) = r D(X / r, s / r), r = 0.5 / data_scale."""
    r = 0.5 / data_scale
    return lambda x, s: denoiser_matrix(w, s / r, SIGMA_D[data_scale]) @ x


@pytest.mark.parametrize(("data_scale", "precision"), [(1.0, "float64"), (0.5, "float64"), (1.0, "float32")])
def test_fundps_published_step_equals_the_transcription(setup, data_scale, precision):
    task, y, obs, _, w, _ = setup
    mean, std = (0.1, 0.003), (0.3, 0.02)
    with jax.enable_x64(True):
        model = edm_model(w, mean, std, data_scale)
        s = samplers.get(
            "fundps", task, model=model, profile="published", num_steps=N_STEPS, precision=precision
        )
    lam = 30.0
    got, eps = ours(s, y, jr.key(1), lam)
    got0, _ = ours(s, y, jr.key(1), 0.0)
    # --- transcription of _PDESolverDPS.generate_single_batch (FunDPS), published units ---
    net = net_pub(w, data_scale)
    sig = karras(N_STEPS, 0.01, 10.0)  # Poisson's published sigma range
    x_next = eps * sig[0]
    for i, (sc, sn) in enumerate(zip(sig[:-1], sig[1:], strict=True)):
        x_cur = x_next.copy()
        x_n = net(x_cur, sc)
        d_cur = (x_cur - x_n) / sc
        x_next = x_cur + (sn - sc) * d_cur
        jac = np.eye(128)  # d x_N / d x_cur
        if i < N_STEPS - 1:
            euler_jac = np.eye(128) + (sn - sc) / sc * (np.eye(128) - net(np.eye(128), sc))
            x_n = net(x_next, sn)
            jac = net(euler_jac, sn)
            d_prime = (x_next - x_n) / sn
            x_next = x_cur + (sn - sc) * (0.5 * d_cur + 0.5 * d_prime)
        update = np.zeros(128)
        if i < N_STEPS - 1:
            u_pred = obs @ (x_n[64:] * std[1] / 0.5 + mean[1])
            resid = 0.5 * (u_pred - mean[1]) / std[1] - 0.5 * (y - mean[1]) / std[1]  # normalize_channel
            n_obs = len(y)
            # grad of sum(resid^2) / n_obs w.r.t. x_cur
            grad = jac[64:].T @ (obs.T @ (2 * resid * 0.5 / std[1] * std[1] / 0.5)) / n_obs
            coef = 1.0 if sc > 1.0 else sc
            update = coef * lam * grad
        x_next = x_next - update
    want = x_next[:64] * std[0] / 0.5 + mean[0]
    np.testing.assert_allclose(got, want, rtol=RTOL[precision], atol=RTOL[precision] * np.abs(want).max())
    assert np.abs(got - got0).max() > 1e-3 * np.abs(got0).max()  # the guidance acted


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_funddps_published_step_equals_the_transcription(setup, precision):
    task, y, obs, phys, _, w = setup
    mean, std, data_scale = (0.1,), (0.3,), 1.0
    with jax.enable_x64(True):
        s = samplers.get(
            "funddps", task, model=edm_model(w, mean, std, data_scale), forward="exact", profile="published",
            num_steps=N_STEPS, precision=precision,
        )  # fmt: skip
        std_u = float(nn.state_statistics(task).std[0])
    assert s.corrections[0].objective.loss.scale == pytest.approx(1.0 / std_u)
    lam = 3.0
    got, eps = ours(s, y, jr.key(2), lam)
    got0, _ = ours(s, y, jr.key(2), 0.0)
    # --- transcription of FunDDPSAdapter._sample_batch, published units ---
    net = net_pub(w, data_scale)
    sig = karras(N_STEPS, 0.002, 80.0)
    x_next = eps * sig[0]
    for i, (sc, sn) in enumerate(zip(sig[:-1], sig[1:], strict=True)):
        x_cur = x_next.copy()
        x_den = net(x_cur, sc)
        d_cur = (x_cur - x_den) / sc
        proposal = x_cur + (sn - sc) * d_cur
        if i < N_STEPS - 1:
            x_den2 = net(proposal, sn)
            proposal = x_cur + (sn - sc) * (0.5 * d_cur + 0.5 * (proposal - x_den2) / sn)
        a = x_den * std[0] / 0.5 + mean[0]  # normalizer.denormalize
        resid = (obs @ (phys @ a) - y) / std_u  # surrogate-normalized observation error
        # d loss / d x_cur through x_den = K(sc) x_cur, loss = sum(resid^2) / n_obs, no c_i
        grad = net(np.eye(64), sc).T @ (std[0] / 0.5 * phys.T @ obs.T @ (2 * resid / std_u)) / len(y)
        proposal = proposal - lam * grad
        x_next = proposal
    want = x_next * std[0] / 0.5 + mean[0]
    np.testing.assert_allclose(got, want, rtol=RTOL[precision], atol=RTOL[precision] * np.abs(want).max())
    assert np.abs(got - got0).max() > 1e-3 * np.abs(got0).max()


@pytest.mark.parametrize(("num_samples", "index", "b"), [(1, 0, 1), (12, 0, 10), (12, 11, 2)])
def test_diffusionpde_published_step_equals_the_transcription(setup, num_samples, index, b):
    """Sample `index` of `num_samples` drawn in published batches of 10: its guidance is divided
    by the size b of its batch (the last batch of 12 holds 2 samples)."""
    task, y, obs, _, w, _ = setup
    mean, std = (0.1, 0.003), (0.3, 0.02)
    n = 6  # 0.8 N = 4.8: steps 0..4 at full weight, step 5 at 0.1
    with jax.enable_x64(True):
        model = edm_model(w, mean, std, 1.0)
        s = samplers.get("diffusionpde", task, model=model, profile="published", num_steps=n)
        lam, key = 50.0, jr.key(3)
        s, eps = with_latent(s, key)  # every sample starts from eps
        eps = eps.reshape(-1)
        draws = [s.sample(key, jnp.asarray(y), num_samples, s.hparams(guidance=v)) for v in (lam, 0.0)]
        got, got0 = (np.asarray(x[index], np.float64).reshape(-1) for x in draws)
    # --- transcription of DiffusionPDEAdapter.generate / _sample_batch, published units: batches of
    # current_batch = min(10, num_samples - count); obs_loss = mean over the batch of ||diff||_2 ---
    net = net_pub(w, 1.0)
    sig = karras(n, 0.002, 80.0)
    x_next = eps * sig[0]
    for step, (sc, sn) in enumerate(zip(sig[:-1], sig[1:], strict=True)):
        x_cur = x_next.copy()
        denoised = net(x_cur, sc)
        d_cur = (x_cur - denoised) / sc
        proposal = x_cur + (sn - sc) * d_cur
        guided_denoised, jac = denoised, net(np.eye(128), sc)
        if step < n - 1:
            guided_denoised = net(proposal, sn)
            jac = net(np.eye(128) + (sn - sc) / sc * (np.eye(128) - net(np.eye(128), sc)), sn)
            proposal = x_cur + (sn - sc) * (0.5 * d_cur + 0.5 * (proposal - guided_denoised) / sn)
        u = guided_denoised[64:] * std[1] / 0.5 + mean[1]
        diff = obs @ u - y
        # this sample's share of the batch mean is ||diff|| / b
        grad_norm = jac[64:].T @ (std[1] / 0.5 * obs.T @ (diff / np.linalg.norm(diff))) / b
        weight = lam if step <= 0.8 * n else 0.1 * lam
        proposal = proposal - weight * grad_norm
        x_next = proposal
    want = x_next[:64] * std[0] / 0.5 + mean[0]
    tol = RTOL["float32"]  # the published DiffusionPDE loop is float32 throughout, and so is ours
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    assert np.abs(got - got0).max() > 1e-3 * np.abs(got0).max()


def test_batch_divisors_follow_the_published_batches():
    assert guided.batch_divisors(12, 10).tolist() == [10.0] * 10 + [2.0] * 2
    assert guided.batch_divisors(20, 10).tolist() == [10.0] * 20
    assert guided.batch_divisors(3, None).tolist() == [1.0] * 3
    with pytest.raises(ValueError, match="batch_size"):
        guided.batch_divisors(3, 0)


def test_fundps_ours_preconditions_by_the_noise_covariance(setup):
    """Our function-space variant: x_{i+1} = Heun - lambda c_i C_n grad L (one step, dense C_n)."""
    task, y, *_ = setup
    with jax.enable_x64(True):
        s = samplers.get(
            "fundps", task, prior="oracle", num_steps=1, sigma_min=0.5, sigma_max=2.0, precision="float64"
        )
        plain = eqx.tree_at(lambda t: t.preconditioner, s, guided.Identity())
        key = jr.key(4)
        a = np.asarray(s.sample(key, jnp.asarray(y), 1, s.hparams(guidance=50.0))).reshape(-1)
        b = np.asarray(plain.sample(key, jnp.asarray(y), 1, s.hparams(guidance=50.0))).reshape(-1)
        c = np.asarray(plain.sample(key, jnp.asarray(y), 1, s.hparams(guidance=0.0))).reshape(-1)
        cov = denoisers.dense_noise_covariance(s.prior.noise, (1, 8, 8))
    # one Euler step (sigma_1 = 0): the unguided part is shared; the corrections differ by C_n
    np.testing.assert_allclose(a - c, cov @ (b - c), rtol=1e-6, atol=1e-12)
    assert np.abs(b - c).max() > 0


def test_rbf_noise_matches_its_kernel():
    """Empirical covariance of the circulant-embedding draws equals the published kernel matrix."""
    with jax.enable_x64(True):
        noise = diffusion.RBFNoise(scale=0.2, nugget_std=0.1)
        n = 20000
        x = jax.vmap(lambda k: noise.sample(k, (1, 6, 5)))(jr.split(jr.key(0), n)).reshape(n, -1)
        kernel = noise.dense_covariance(6, 5)
        v = np.random.default_rng(1).normal(size=(6, 5))
        np.testing.assert_allclose(
            np.asarray(noise.covariance_apply(jnp.asarray(v))).ravel(), kernel @ v.ravel(), atol=1e-12
        )
    # the published matrix: exp(-cdist / (2 scale^2)) on (i / H, j / W), plus eps^2 on the diagonal
    yy, xx = np.meshgrid(np.arange(6) / 6, np.arange(5) / 5, indexing="ij")
    pts = np.stack([yy.ravel(), xx.ravel()], 1)
    published = np.exp(-np.linalg.norm(pts[:, None] - pts[None], axis=-1) / (2 * 0.2**2)) + 0.1**2 * np.eye(
        30
    )
    np.testing.assert_allclose(kernel, published, atol=1e-14)
    emp = np.cov(np.asarray(x).T)
    se = np.sqrt((kernel**2 + np.outer(np.diag(kernel), np.diag(kernel))) / n)  # Wishart entry std
    assert np.max(np.abs(emp - kernel) / se) < 5.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(scale=0.0), "scale"),
        (dict(scale=-1.0), "scale"),
        (dict(nugget_std=-0.1), "nugget_std"),
    ],
)
def test_rbf_noise_rejects_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        diffusion.RBFNoise(**kwargs)


def test_profiles_and_task_defaults_are_checked(setup):
    task, *_, w, _ = setup
    with pytest.raises(ValueError, match="profile"):
        samplers.get("fundps", task, prior="oracle", profile="paper")
    field = tasks.get("darcy_field", resolution=8)
    for name in ("fundps", "funddps", "diffusionpde"):
        with pytest.raises(ValueError, match="no published values for task 'darcy_field'.*pass"):
            samplers.get(name, field, model=None, profile="published")
    poisson = tasks.get("poisson", resolution=8, num_sensors=6)
    joint = edm_model(w, (0.0, 0.0), (0.3, 0.02), 1.0)
    published = samplers.get("diffusionpde", poisson, model=joint, profile="published", num_steps=2)
    assert published.defaults["guidance"] == 20000.0 and published.units == 0.5
    assert published.batch_mean == 10  # the batch-mean 1 / B, B = 10 (the last batch partial)
    assert samplers.get("diffusionpde", poisson, model=joint, num_steps=2).batch_mean == 1
    assert isinstance(published.prior.noise, diffusion.WhiteNoise)
    fundps = samplers.get("fundps", poisson, model=joint, profile="published", num_steps=2)
    assert (fundps.sigma_min, fundps.sigma_max, fundps.defaults["guidance"]) == (0.01, 10.0, 1600.0)
    assert isinstance(fundps.prior.noise, diffusion.RBFNoise) and isinstance(
        fundps.preconditioner, guided.Identity
    )
    assert fundps.corrections[0].objective.loss.scale == pytest.approx(0.5 / 0.02)
    # the published Fun-DDPS surrogate: FNO, 16 modes, 48 hidden channels, 4 layers
    name, options = training.kinds.get("surrogate").models["full"]
    assert (name, options["modes"], options["width"], options["layers"]) == ("fno", 16, 48, 4)
    darcy_task = tasks.get("darcy", resolution=8, num_sensors=6)
    darcy = samplers.get("fundps", darcy_task, model=joint, profile="published")
    assert (darcy.sigma_min, darcy.sigma_max, darcy.defaults["guidance"], darcy.num_steps) == (
        0.002,
        80.0,
        4000.0,
        500,
    )
    # `postprocess.discrete_values` of every published Darcy profile; none on Poisson or in ours
    for name in ("fundps", "diffusionpde"):
        assert samplers.get(name, darcy_task, model=joint, profile="published").discrete_values == (3.0, 12.0)
        assert samplers.get(name, darcy_task, model=joint).discrete_values is None
    assert (published.discrete_values, fundps.discrete_values) == (None, None)


# Oracle-prior proof on poisson_fixed 16^2 (24 sensors, noise 1e-3, 256 samples): each sampler at its
# best weight of `scripts/oracle_guided.py` (50 steps), against 256 exact posterior samples.
PROOF = {
    "fundps_ours": ("fundps", {}, 750.0, 0.12, 0.12),
    "fundps_published": ("fundps", {"profile": "published"}, 85.0, 0.15, 0.12),
    "dps": ("dps", {}, 56.2, 0.2, 0.25),
    "funddps_published": ("funddps", {"profile": "published", "forward": "exact"}, 5.6, 0.2, 0.25),
    "diffusionpde_published": ("diffusionpde", {"profile": "published"}, 3162.0, 0.15, 0.3),
}
FIVE = {
    "mean_error": pm.mean_error, "std_error": pm.std_error, "mmd": pm.mmd, "swd": pm.sliced_wasserstein,
    "spectral_error": pm.spectral_error,
}  # fmt: skip


@pytest.fixture(scope="module")
def oracle_problem():
    task = tasks.get("poisson_fixed", resolution=16, num_sensors=24, noise_std=1e-3)
    y = task.cases(7, 1).y_obs[0]
    ref = exact.sample(jr.key(99), task, y, 256)
    prior = jax.vmap(task.prior.sample)(jr.split(jr.key(2), 256))
    return task, y, ref, {k: float(f(prior, ref)) for k, f in FIVE.items()}


SLOW_PROOF = ("fundps_published", "dps", "funddps_published", "diffusionpde_published")


@pytest.mark.parametrize(
    "label", ["fundps_ours", *(pytest.param(k, marks=pytest.mark.slow) for k in SLOW_PROOF)]
)
def test_oracle_prior_proof_against_the_exact_posterior(oracle_problem, label):
    task, y, ref, prior_scores = oracle_problem
    name, options, weight, max_mean, max_std = PROOF[label]
    s = samplers.get(name, task, prior="oracle", num_steps=50, **options)
    xs = s.sample(jr.key(4), y, 256, s.hparams(guidance=weight))
    got = {k: float(f(xs, ref)) for k, f in FIVE.items()}
    assert got["mean_error"] <= max_mean and got["std_error"] <= max_std, got
    assert all(got[k] < prior_scores[k] for k in FIVE), (got, prior_scores)


@pytest.mark.slow
def test_exact_posterior_denoiser_through_the_integrator_reproduces_the_posterior(oracle_problem):
    """The integrator's own error: the exact posterior denoiser, no guidance, 50 steps."""
    task, y, ref, _ = oracle_problem
    s = guided.GuidedDiffusion(
        task, {}, denoisers.posterior_prior(task, y), (), guided.Identity(), "ours", 50, 0.002, 80.0
    )
    xs = s.sample(jr.key(3), y, 256, {})
    assert float(pm.mean_error(xs, ref)) <= 0.05 and float(pm.std_error(xs, ref)) <= 0.07


def test_ddis_published_pieces_equal_the_transcription(setup):
    """`_reverse_diffusion`, `_langevin_dynamics` (one step) and `_langevin_lr` of the published DDIS."""
    task, y, obs, phys, _, w = setup
    mean, std = (0.1,), (0.3,)
    with jax.enable_x64(True):
        s = samplers.get(
            "ddis",
            task,
            model=edm_model(w, mean, std, 1.0),
            forward="exact",
            profile="published",
            noise="white",
        )
        std_u = float(nn.state_statistics(task).std[0])
        rng = np.random.default_rng(5)
        x, z, x0, xi = (rng.normal(size=64) for _ in range(4))
        hp = {k: jnp.asarray(v, jnp.float64) for k, v in s.defaults.items()}  # exact, not float32 here
        got_clean = np.asarray(s.clean(jnp.asarray(x.reshape(1, 8, 8)), 3.0)).reshape(-1)
        got_step = s.langevin_step(*(jnp.asarray(v.reshape(1, 8, 8)) for v in (z, x0)), 2.0, lr=1e-3,
                                   xi=jnp.asarray(xi.reshape(1, 8, 8)), y_obs=jnp.asarray(y),
                                   hparams=hp)  # fmt: skip
        got_lr = [float(s.step_size_at(i, hp)) for i in (0, 37, 99)]
    assert (s.num_steps, s.langevin_steps, s.sigma_max, s.sigma_min) == (100, 35, 10.0, 0.01)
    assert {k: float(v) for k, v in hp.items()} == pytest.approx(
        {"step_size": 7e-5, "temperature": 0.25, "weight": 2.0, "tau": 1e-3}
    )
    net = net_pub(w, 1.0)
    # _reverse_diffusion: _daps_sigma_steps(5 steps, sigma_min 0.001, rho 7, sigma_max = sigma), Heun but last
    sig = karras(5, 0.001, 3.0)
    xn = x.copy()
    for index, (sc, sn) in enumerate(zip(sig[:-1], sig[1:], strict=True)):
        d_cur = (xn - net(xn, sc)) / sc
        proposal = xn + (sn - sc) * d_cur
        if index < len(sig) - 2:
            proposal = xn + (sn - sc) * (0.5 * d_cur + 0.5 * (proposal - net(proposal, sn)) / sn)
        xn = proposal
    np.testing.assert_allclose(got_clean, xn, rtol=1e-12, atol=1e-12)  # float64 pieces: round-off
    # _langevin_dynamics, one step: ||x - x0||^2 / (2 sigma^2) + w mse / (2 tau^2), then + eta sqrt(2 lr) xi
    a = z * std[0] / 0.5 + mean[0]
    resid = 0.5 * (obs @ (phys @ a) - y) / std_u  # normalize_output_channel at observation scale 0.5
    grad_mse = (std[0] / 0.5) * phys.T @ obs.T @ (2 * resid * 0.5 / std_u) / len(y)
    grad = (z - x0) / 2.0**2 + 2.0 * grad_mse / (2 * 1e-3**2)
    want = z - 1e-3 * grad + np.sqrt(2 * 1e-3) * 0.25 * xi
    np.testing.assert_allclose(
        np.asarray(got_step).reshape(-1), want, rtol=1e-12, atol=1e-12 * np.abs(want).max()
    )
    # _langevin_lr: lr (1 + ratio (lr_min_ratio - 1)), ratio = step / annealing_steps
    assert got_lr == pytest.approx([7e-5 * (1 + i / 100 * (0.01 - 1)) for i in (0, 37, 99)], rel=1e-6)


def ddis_published_curvature(resolution: int, num_sensors: int = 24) -> float:
    """lr * lambda_max of the published DDIS Langevin map's likelihood Hessian on `poisson_fixed`.

    For a linear forward map one published step is z <- z - lr (z - x0) / sigma^2 - lr H (z - z*)
    (+ noise), so z - step(z) minus its value at 0 is lr (1 / sigma^2 + H) v: power iteration on it
    with sigma = 1e8 (prior term negligible) gives lr lambda_max(H) of our sampler's own step.
    Gradient descent on the likelihood is stable only for lr lambda_max < 2.
    """
    task = tasks.get("poisson_fixed", resolution=resolution, num_sensors=num_sensors, noise_std=1e-3)
    s = samplers.get("ddis", task, prior="oracle", forward="exact", profile="published", noise="white")
    hp = s.hparams()
    zero = jnp.zeros(task.unknown_shape)
    y = jnp.zeros_like(task.observation(task.physics(zero)))

    def apply(v):  # lr (1 / sigma^2 + H) v
        step = lambda z: z - s.langevin_step(z, zero, 1e8, lr=hp["step_size"], xi=zero, y_obs=y, hparams=hp)  # noqa: E731
        return step(v) - step(zero)

    def power(_, v):
        av = apply(v)
        return av / jnp.linalg.norm(av)

    v = jax.jit(lambda v: jax.lax.fori_loop(0, 80, power, v))(jr.normal(jr.key(0), zero.shape))
    return float(jnp.linalg.norm(apply(v)))


def test_ddis_published_poisson_step_is_unstable_at_16_and_stable_at_32():
    """Why published DDIS (w = 2) is non-finite on 16^2 Poisson: the normalized-MSE Hessian in the
    trajectory's per-pixel coordinates scales as h^2 (the forward map's Jacobian is ~ h^2 G), so
    the published lr 7e-5 that is stable at 128^2 (lr lambda 0.09, README) overshoots at 16^2."""
    at16, at32 = ddis_published_curvature(16), ddis_published_curvature(32)
    assert at16 > 2 > at32, (at16, at32)
    assert 3 < at16 / at32 < 6, (at16, at32)  # (32 / 16)^2 = 4


DDIS_WEIGHTS = (0.0316, 0.0562, 0.1)  # around 2 x lr lambda(128^2) / lr lambda(16^2) = 0.03


@pytest.mark.slow
def test_ddis_published_at_its_best_weight_beats_the_prior_on_poisson(oracle_problem):
    """Published-profile DDIS with the exact prior score: non-finite at the published w = 2 on
    16^2; at its best weight of `DDIS_WEIGHTS` (by mean + std error) it beats the prior ensemble on
    all five metrics."""
    task, y, ref, prior_scores = oracle_problem
    s = samplers.get("ddis", task, prior="oracle", forward="exact", profile="published")
    assert float(s.defaults["weight"]) == 2.0
    assert not bool(jnp.all(jnp.isfinite(s.sample(jr.key(4), y, 16, s.hparams()))))
    rows = []
    for weight in DDIS_WEIGHTS:
        xs = s.sample(jr.key(4), y, 256, s.hparams(weight=weight))
        rows.append({k: float(f(xs, ref)) for k, f in FIVE.items()})
    best = min(rows, key=lambda r: r["mean_error"] + r["std_error"])
    assert all(best[k] < prior_scores[k] for k in FIVE), (rows, prior_scores)
    assert best["mean_error"] <= 0.15 and best["std_error"] <= 0.15, rows


def test_exact_readout_outside_the_physics_domain_is_nan_not_an_error():
    """A denoised Darcy estimate with a non-positive permeability: NaN state and gradient, no crash."""
    task = tasks.get("darcy", resolution=8, num_sensors=6)
    s = samplers.get(
        "dps", task, prior="learned", model=edm_model(np.zeros((64, 64)), (7.5,), (4.5,), 1.0), num_steps=2
    )
    readout = s.corrections[0].objective.readout

    def loss(x_n):
        return jnp.sum(readout(x_n))

    good, bad = jnp.zeros((1, 8, 8)), jnp.full((1, 8, 8), -3.0)  # physical 7.5 and -6
    value, grad = jax.jit(jax.value_and_grad(loss))(good)
    assert np.isfinite(float(value)) and bool(jnp.all(jnp.isfinite(grad)))
    value, grad = jax.jit(jax.value_and_grad(loss))(bad)
    assert np.isnan(float(value)) and bool(jnp.all(jnp.isnan(grad)))


def test_esmda_published_update_equals_the_transcription():
    """`ESMDAAdapter._assimilate` (one alpha) and `_observation_std`, written out in NumPy."""
    from posteriorjax.samplers import esmda

    rng = np.random.default_rng(7)
    n, d, m, alpha, c = 12, 30, 5, 2.0, 10.0
    state, pred, normals = rng.normal(size=(n, d)), rng.normal(size=(n, m)) * 0.1, rng.normal(size=(n, m))
    y = rng.normal(size=m) * 0.1
    with jax.enable_x64(True):
        std = np.asarray(esmda.observation_std(jnp.asarray(pred), c))
        s, p, obs, sd, z = map(jnp.asarray, (state, pred, y, std, normals))
        got = np.asarray(esmda.augmented_update(s, p, obs, std=sd, alpha=jnp.asarray(alpha), normals=z))
    want_std = np.maximum(c * np.std(pred, axis=0, ddof=1), 1e-6)
    np.testing.assert_allclose(std, want_std, rtol=1e-12)
    state_anom = (state - state.mean(axis=0, keepdims=True)).T / np.sqrt(n - 1)
    pred_anom = (pred - pred.mean(axis=0, keepdims=True)).T / np.sqrt(n - 1)
    system = pred_anom @ pred_anom.T + np.diag(alpha * want_std**2)
    system[np.diag_indices_from(system)] += 1e-8 * max(float(np.mean(np.diag(system))), 1.0)
    innovation = y[None, :] + np.sqrt(alpha) * want_std * normals - pred
    want = state + ((state_anom @ pred_anom.T) @ np.linalg.solve(system, innovation.T)).T
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_esmda_published_barely_moves_the_prior_on_poisson(oracle_problem):
    """c = 100 x the prior predictive std: the published Poisson ES-MDA stays at the prior."""
    task, y, ref, prior_scores = oracle_problem
    s = samplers.get("esmda", task, profile="published")
    assert (s.ensemble_size, s.alphas, float(s.defaults["obs_std_scale"])) == (512, (1.0,), 100.0)
    xs = s.sample(jr.key(8), y, 256, s.hparams())
    assert abs(float(pm.mean_error(xs, ref)) / prior_scores["mean_error"] - 1) < 0.1


class LinearVelocity(eqx.Module):
    """v(x, t) = W x + t b: a flow velocity linear in x with an explicit time dependence."""

    w: jax.Array
    b: jax.Array

    def __call__(self, x, t, *, key=None):
        return (self.w @ x.reshape(-1)).reshape(x.shape) + t * self.b


class ZeroNoise(eqx.Module):
    """eps = 0: makes a whole ECI trajectory deterministic (tests the published t grid)."""

    def sample(self, key, shape):
        return jnp.zeros(shape)


def eci_published_numpy(x, t, t_next, noises, w, b, y_n, mask):
    """One step of `ECIFlowModel.eci_sample` (`training_eci/flow.py`, `resample_step: 1`)."""
    for mix, eps in enumerate(noises):
        x1 = x + ((w @ x.reshape(-1)).reshape(x.shape) + t * b) * (1 - t)
        x1[1][mask] = y_n[mask]  # SparseValueConstraint.adjust on the state channel
        next_t = t if mix < len(noises) - 1 else t_next
        x = x1 * next_t + eps * (1 - next_t)
    return x


@pytest.fixture(scope="module")
def eci_problem(setup):
    from posteriorjax.samplers import eci

    task, y = setup[0], setup[1]
    rng = np.random.default_rng(3)
    w, b = rng.normal(size=(128, 128)) * 0.05, rng.normal(size=(2, 8, 8))
    normalizer = nn.Normalizer((0.1, 0.003), (0.3, 0.02), 0.5)

    def model(noise):
        with jax.enable_x64(True):
            net = LinearVelocity(jnp.asarray(w, jnp.float64), jnp.asarray(b, jnp.float64))
        return eci.FlowVelocity(net, normalizer, noise, 1)

    with jax.enable_x64(True):
        y_grid = np.asarray(task.observation.to_grid(jnp.asarray(y), leading=(1,)))[0]
    y_n = (y_grid - 0.003) * (0.5 / 0.02)
    return task, y, w, b, model, y_n, np.asarray(task.observation.mask)


@pytest.mark.parametrize("mixing", [1, 3])
def test_eci_published_step_equals_the_transcription(eci_problem, mixing):
    task, y, w, b, model, y_n, mask = eci_problem
    rng = np.random.default_rng(mixing)
    x, noises = rng.normal(size=(2, 8, 8)), rng.normal(size=(mixing, 2, 8, 8))
    s = samplers.get("eci", task, model=model(diffusion.MaternNoise()), profile="published", mixing=mixing)
    with jax.enable_x64(True):
        got = s.published_step(jnp.asarray(x), 0.25, 0.5, jnp.asarray(noises), jnp.asarray(y))
    want = eci_published_numpy(x.copy(), 0.25, 0.5, noises, w, b, y_n, mask)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-12)


def test_eci_published_trajectory_runs_the_t_grid_from_zero(eci_problem):
    """With eps = 0 the whole published trajectory is deterministic: t_n = n / N, n = 0 .. N - 1."""
    from posteriorjax.samplers import eci

    task, y, w, b, model, y_n, mask = eci_problem
    n_step, n_mix = 4, 2
    s = eci.ECISampler(task, {}, model(ZeroNoise()), n_step, n_mix, 0.0, "published")
    with jax.enable_x64(True):
        got = np.asarray(s.sample_joint(jr.key(0), jnp.asarray(y), 1))[0]
    x = np.zeros((2, 8, 8))
    for step in range(n_step):
        t, zeros = step / n_step, np.zeros((n_mix, 2, 8, 8))
        x = eci_published_numpy(x, t, t + 1 / n_step, zeros, w, b, y_n, mask)
    np.testing.assert_allclose(got, x, rtol=1e-6, atol=1e-12)
    assert s.evaluations_per_sample == n_step * n_mix


def test_eci_published_resample_step_equals_the_transcription(eci_problem):
    """`eci_sample` with `resample_step` 3: the base noise, initially the latent x_0 itself, is
    redrawn at every third mix counted over the whole trajectory (CCS / LTMI publish 5)."""
    task, y, w, b, model, y_n, mask = eci_problem
    n_step, n_mix, every = 4, 2, 3
    s = samplers.get(
        "eci", task, model=model(diffusion.MaternNoise()), profile="published", num_steps=n_step,
        mixing=n_mix, resample_step=every,
    )  # fmt: skip
    key = jr.key(5)
    with jax.enable_x64(True):
        got = np.asarray(s.sample_joint(key, jnp.asarray(y), 1))[0]
        k = jr.split(key, 1)[0]  # the sample's key; draw j of its base noise is fold_in(k, j)
        draws = [np.asarray(s.prior.noise.sample(jr.fold_in(k, j), (2, 8, 8))) for j in range(4)]
    noise, fresh = draws[0], iter(draws[1:])
    x, counter = noise.copy(), 0
    for step in range(n_step):
        t = step / n_step
        for mix in range(n_mix):
            counter += 1
            if counter % every == 0:
                noise = next(fresh)
            x1 = x + ((w @ x.reshape(-1)).reshape(x.shape) + t * b) * (1 - t)
            x1[1][mask] = y_n[mask]
            next_t = t if mix < n_mix - 1 else t + 1 / n_step
            x = x1 * next_t + noise * (1 - next_t)
    np.testing.assert_allclose(got, x, rtol=1e-6, atol=1e-12)
    assert [s.noise_draw(n, j) for n in range(n_step) for j in range(n_mix)] == [0, 0, 1, 1, 1, 2, 2, 2]


def test_eci_area_average_constraint_equals_the_transcription():
    """`AreaAverageConstraint.adjust`: each block of the state shifted by (observed - pooled)
    block mean, on a block-averaged (`AveragePool`) task."""
    from posteriorjax.samplers import eci

    task = tasks.get("poisson_fixed_lowres", resolution=32, noise_std=1e-3)  # 16 x 16 means of 2 x 2 blocks
    normalizer = nn.Normalizer((0.1, 0.003), (0.3, 0.02), 0.5)
    net = LinearVelocity(jnp.zeros((1, 1)), jnp.zeros(1))  # never called by `replace`
    velocity = eci.FlowVelocity(net, normalizer, diffusion.MaternNoise(), 1)
    s = samplers.get("eci", task, model=velocity, profile="published")
    assert (s.mixing, s.resample_step) == (1, 1)
    rng = np.random.default_rng(2)
    x1, y = rng.normal(size=(2, 32, 32)), 0.003 + 0.02 * rng.normal(size=256)
    with jax.enable_x64(True):
        got = np.asarray(s.replace(jnp.asarray(x1), jnp.asarray(y)))
    value = ((y - 0.003) * 0.5 / 0.02).reshape(16, 16)  # normalize_channel of the observed averages
    pooled = x1[1].reshape(16, 2, 16, 2).mean(axis=(1, 3))  # adaptive_avg_pool2d
    want = x1.copy()
    want[1] += np.kron(value - pooled, np.ones((2, 2)))  # interpolate(mode="nearest")
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    block = got[1].reshape(16, 2, 16, 2).mean(axis=(1, 3))
    np.testing.assert_allclose(block, value, atol=1e-12)  # the constraint holds exactly


def test_eci_flow_matching_loss_equals_the_transcription(eci_problem):
    """The published `get_loss`: x_t = t x_1 + (1 - t) eps, target x_1 - eps, mean squared error."""
    from posteriorjax.samplers import eci

    _, _, w, b, model, _, _ = eci_problem
    velocity = model(diffusion.MaternNoise(lengthscale=0.2))
    x1 = np.random.default_rng(7).normal(size=(2, 8, 8))
    key = jr.key(11)
    with jax.enable_x64(True):
        got = float(eci.flow_matching_loss(velocity, key, jnp.asarray(x1)))
        k_t, k_eps = jr.split(key)  # the same draws, taken as the published loop takes them
        t = float(jr.uniform(k_t, (), jnp.float64))
        eps = np.asarray(velocity.noise.sample(k_eps, x1.shape), np.float64)
    x_t = t * x1 + (1 - t) * eps
    v = (w @ x_t.reshape(-1)).reshape(x_t.shape) + t * b
    np.testing.assert_allclose(got, np.mean((v - (x1 - eps)) ** 2), rtol=1e-10)
    assert 0 < t < 1 and np.std(eps) > 0.5  # a real time and real noise, not a degenerate draw


def test_eci_published_profile_is_checked(eci_problem, setup):
    task, _, _, _, model, _, _ = eci_problem
    s = samplers.get("eci", task, model=model(diffusion.MaternNoise()), profile="published")
    assert (s.num_steps, s.mixing, s.resample_step, s.profile) == (200, 1, 1, "published")  # Poisson
    with pytest.raises(ValueError, match="resample_step: our ECI draws fresh noise every mix"):
        samplers.get("eci", task, model=None, resample_step=5)
    with pytest.raises(ValueError, match="t_min: the published ECI t grid starts at 0"):
        samplers.get("eci", task, model=model(diffusion.MaternNoise()), profile="published", t_min=1e-3)
    with pytest.raises(ValueError, match="model: the published ECI needs a trained FlowVelocity"):
        samplers.get("eci", task, model=None, profile="published")
    with pytest.raises(ValueError, match="model: the published ECI velocity is trained with MaternNoise"):
        samplers.get("eci", task, model=model(diffusion.GRFNoise()), profile="published")
    with pytest.raises(ValueError, match="profile: eci has profiles"):
        samplers.get("eci", task, model=model(diffusion.MaternNoise()), profile="paper")


def test_matern_noise_matches_its_kernel(x64):
    """The published ECI noise: exp(-d / l) on linspace(0, 1, n) per axis; covariance by FFT and by draws."""
    noise = diffusion.MaternNoise(lengthscale=0.3)
    h, w = 5, 6
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    pts = np.stack([yy.ravel(), xx.ravel()], axis=1)
    cov = np.exp(-np.linalg.norm(pts[:, None] - pts[None], axis=-1) / 0.3)
    v = np.random.default_rng(0).normal(size=(1, h, w))
    got = np.asarray(noise.covariance_apply(jnp.asarray(v))).ravel()
    np.testing.assert_allclose(got, cov @ v.ravel(), atol=1e-12)
    draws = jax.vmap(lambda k: noise.sample(k, (1, h, w)))(jr.split(jr.key(0), 5000)).reshape(5000, -1)
    assert np.max(np.abs(np.cov(np.asarray(draws).T) - cov)) < 0.1  # about 5 Wishart std at 5000 draws
    near_white = diffusion.MaternNoise()  # published lengthscale 1e-3: neighbour correlation ~0 at 16^2
    np.testing.assert_allclose(near_white.dense_covariance(4, 4), np.eye(16), atol=1e-12)
    with pytest.raises(ValueError, match="lengthscale"):
        diffusion.MaternNoise(lengthscale=0.0)
