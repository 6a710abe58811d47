"""CO2 injection (IMPES on an (r, z) grid): conservation, bounds, analytic limits, derivatives, bad input.

Small grids and short horizons; float64 where tolerances are tight.
"""

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest

from posteriorjax.physics import co2

GRID = co2.RadialGrid(6, 24, outer_radius=1.0e4, first_cell=5.0)
CONFIG = co2.CO2Config(years=1.0, pressure_steps=4)


def _perm(seed, shape, mean=100.0, spread=0.7):
    return np.exp(np.random.default_rng(seed).normal(np.log(mean), spread, shape))


@pytest.fixture(scope="module")
def heterogeneous_run():
    with jax.enable_x64(True):
        k = _perm(0, GRID.shape)
        phi = np.random.default_rng(1).uniform(0.1, 0.3, GRID.shape)
        sol = co2.simulate(k, phi, grid=GRID, config=CONFIG)
        mass = float(co2.co2_mass(sol.saturation, phi, grid=GRID, config=CONFIG))
        return k, phi, jax.tree.map(np.asarray, sol), mass


def test_grid_geometry_matches_the_published_layout():
    g = co2.RadialGrid()
    r = g.faces()
    assert r[-1] == pytest.approx(1.0e5) and r[1] - r[0] == pytest.approx(3.8)
    assert g.growth == pytest.approx(1.035, abs=1e-3)
    assert 470 < r[50] < 510  # the monitoring well column starts ~0.49 km out
    assert g.volumes().sum() == pytest.approx(np.pi * (1e10 - 0.01) * 135.0, rel=1e-12)


def test_mass_balance(heterogeneous_run):
    _, _, sol, mass = heterogeneous_run
    injected = CONFIG.rate * 1e9 * CONFIG.years
    assert sol.saturation[:, -1].max() == 0.0  # nothing left through the far boundary
    assert abs(mass / injected - 1) < 1e-6


def test_saturation_bounds(heterogeneous_run):
    _, _, sol, _ = heterogeneous_run
    s = sol.saturation
    assert s.min() >= -1e-12 and s.max() <= 1 - CONFIG.swr + 1e-12
    assert s.max() > CONFIG.sgc  # the plume is mobile
    assert np.all(sol.substeps >= 1)


def test_homogeneous_single_phase_pressure_is_thiem(x64):
    """Brine only, no gravity: every layer carries Q/nz and Phi follows Q mu/(2 pi K H) ln(R/r)."""
    cfg = co2.CO2Config(gravity=0.0)
    k = 150.0
    phi = np.asarray(co2.pressure(np.full(GRID.shape, k), np.zeros(GRID.shape), grid=GRID, config=cfg))
    np.testing.assert_allclose(
        phi, np.broadcast_to(phi[0], phi.shape), rtol=1e-12
    )  # radially symmetric layers
    rc = GRID.centres()
    thiem = cfg.volume_rate * cfg.mu_w / (2 * np.pi * k * co2.MILLIDARCY * GRID.thickness) * np.log(1e4 / rc)
    np.testing.assert_allclose(phi[0], thiem, rtol=1e-10)


def test_homogeneous_layers_without_gravity_are_identical_and_gravity_lifts_the_plume(x64):
    k = np.full(GRID.shape, 200.0)
    flat = np.asarray(co2.solve(k, grid=GRID, config=co2.CO2Config(years=1.0, pressure_steps=4, gravity=0.0)))
    np.testing.assert_allclose(flat, np.broadcast_to(flat[0], flat.shape), atol=1e-12)
    lifted = np.asarray(co2.solve(k, grid=GRID, config=CONFIG))
    mass_by_layer = (lifted * GRID.volumes()).sum(axis=1)
    assert np.all(np.diff(mass_by_layer) < 0)  # buoyancy: more CO2 in every higher layer


def _welge(cfg):
    s = np.linspace(1e-6, 1 - cfg.swr, 200001)
    f = np.asarray(cfg.fractional_flow(s))
    front = np.argmax(f / s)
    df = np.gradient(f, s)
    return s, df, s[front], f[front] / s[front]


def test_radial_buckley_leverett_front(x64):
    """1-D radial displacement (no gravity): profile vs the Welge/Buckley-Leverett solution in pore volume."""
    grid = co2.RadialGrid(2, 300, outer_radius=3000.0, first_cell=0.5)
    cfg = co2.CO2Config(years=0.5, pressure_steps=2, gravity=0.0)
    sat = np.asarray(co2.solve(np.full(grid.shape, 100.0), 0.2, grid=grid, config=cfg))[0]
    r = grid.faces()
    pore = 0.2 * np.pi * (r[1:] ** 2 - r[0] ** 2) * grid.thickness  # pore volume inside the outer face
    pv_mid = pore - 0.5 * 0.2 * grid.volumes()[0]
    injected = cfg.volume_rate * cfg.duration
    s, df, s_front, df_front = _welge(cfg)
    # exact: S(V) solves f'(S) = V / injected behind the front (S > s_front), 0 beyond V = df_front * injected
    behind = s >= s_front
    exact = np.interp(pv_mid / injected, df[behind][::-1], s[behind][::-1], right=0.0)
    exact[pv_mid > df_front * injected] = 0.0
    vol = 0.2 * grid.volumes()[0]
    rel_l1 = np.sum(np.abs(sat - exact) * vol) / np.sum(exact * vol)
    assert rel_l1 < 0.08
    front_numeric = np.interp(0.5 * s_front, sat[::-1], pv_mid[::-1])
    assert front_numeric == pytest.approx(df_front * injected, rel=0.05)


def test_reverse_mode_gradient_matches_finite_differences(x64):
    grid = co2.RadialGrid(3, 6, outer_radius=2000.0, first_cell=20.0)
    cfg = co2.CO2Config(years=0.05, pressure_steps=2, substeps=60)
    weights = np.random.default_rng(3).normal(size=grid.shape)

    def loss(logk):
        return jnp.sum(weights * co2.solve(jnp.exp(logk), 0.2, grid=grid, config=cfg))

    logk = jnp.log(jnp.asarray(_perm(4, grid.shape, 300.0, 0.3)))
    assert float(jnp.abs(co2.solve(jnp.exp(logk), grid=grid, config=cfg)).max()) > 0.1
    jax.test_util.check_grads(loss, (logk,), order=1, modes=("rev",), eps=1e-5, atol=1e-6, rtol=1e-4)


def test_jacfwd_of_the_adaptive_run_matches_central_differences(x64):
    grid = co2.RadialGrid(3, 6, outer_radius=2000.0, first_cell=20.0)
    cfg = co2.CO2Config(years=0.05, pressure_steps=2)

    def forward(logk):
        return co2.solve(jnp.exp(logk), 0.2, grid=grid, config=cfg)[:, :3].ravel()

    logk = jnp.log(jnp.asarray(_perm(5, grid.shape, 300.0, 0.3)))
    jac = jax.jacfwd(forward)(logk)
    direction = jnp.asarray(np.random.default_rng(6).normal(size=grid.shape))
    eps = 1e-6
    fd = (forward(logk + eps * direction) - forward(logk - eps * direction)) / (2 * eps)
    np.testing.assert_allclose(jnp.tensordot(jac, direction, axes=2), fd, rtol=1e-4, atol=1e-7)


def test_jit_and_vmap_agree(x64):
    grid = co2.RadialGrid(3, 8, outer_radius=2000.0, first_cell=10.0)
    cfg = co2.CO2Config(years=0.05, pressure_steps=2)
    ks = jnp.asarray(_perm(7, (2, *grid.shape)))
    batched = jax.jit(jax.vmap(lambda k: co2.solve(k, grid=grid, config=cfg)))(ks)
    for i in range(2):
        np.testing.assert_allclose(batched[i], co2.solve(ks[i], grid=grid, config=cfg), atol=1e-12)


@pytest.mark.parametrize(
    "perm, porosity, match",
    [
        (-1.0, 0.2, "perm"),
        (np.nan, 0.2, "perm"),
        (100.0, 0.0, "porosity"),
        (100.0, 1.5, "porosity"),
    ],
)
def test_bad_inputs_are_named(perm, porosity, match):
    k = np.full(GRID.shape, 100.0)
    k[1, 2] = perm
    with pytest.raises(ValueError, match=match):
        co2.simulate(k, porosity, grid=GRID, config=CONFIG)


def test_bad_shapes_and_configs_are_named():
    with pytest.raises(ValueError, match="perm: expected shape"):
        co2.solve(np.ones((3, 3)), grid=GRID)
    with pytest.raises(ValueError, match="swr"):
        co2.CO2Config(swr=0.7, sgc=0.4)
    with pytest.raises(ValueError, match="substeps"):
        co2.CO2Config(substeps=0)
    with pytest.raises(ValueError, match="nr"):
        co2.RadialGrid(4, 1)


def test_traced_bad_permeability_and_cfl_violation_raise():
    k = np.full(GRID.shape, 100.0)
    with pytest.raises(Exception, match="perm"):
        jax.jit(lambda k: co2.solve(k, grid=GRID, config=CONFIG))(jnp.asarray(k).at[0, 0].set(-1.0))
    with pytest.raises(Exception, match="CFL"):
        co2.solve(k, grid=GRID, config=co2.CO2Config(years=1.0, pressure_steps=4, substeps=2))
    with pytest.raises(Exception, match="max_substeps"):
        co2.solve(k, grid=GRID, config=co2.CO2Config(years=1.0, pressure_steps=1, max_substeps=3))


@pytest.mark.slow
def test_full_scale_run_conserves_mass_and_reaches_the_monitor():
    """The published configuration: 64 x 200 cells, 30 years (minutes on a CPU)."""
    from posteriorjax import random_fields

    grid = co2.RadialGrid()
    prior = random_fields.AnisotropicLogNormal(grid.depths(), grid.centres())
    k = prior.sample(jax.random.key(0))[0]
    sol = co2.simulate(k, 0.2, grid=grid, config=co2.CO2Config())
    mass = float(co2.co2_mass(sol.saturation, 0.2, grid=grid))
    assert abs(mass / (0.36e9 * 30) - 1) < 1e-3  # float32
    assert float(sol.saturation.max()) <= 1 - co2.CO2Config().swr + 1e-3


# ----------------------------------------------------------------------------
# Sequential-implicit transport against the IMPES reference


IMPLICIT = co2.CO2Config(years=1.0, pressure_steps=4, transport="implicit")


def _extent(sat, grid, porosity, fraction=0.95):
    """Per-layer radius (m) holding `fraction` of the layer's CO2 (interpolated between faces)."""
    r = grid.faces()
    mass = porosity * sat * grid.volumes()
    cumulative = np.concatenate([np.zeros((grid.nz, 1)), np.cumsum(mass, axis=1)], axis=1)
    return np.array([np.interp(fraction * c[-1], c, r) for c in cumulative])


def _main_layers(sat, grid, porosity, share=0.05):
    mass = (porosity * sat * grid.volumes()).sum(axis=1)
    return mass >= share * mass.sum()


@pytest.fixture(scope="module")
def implicit_run(heterogeneous_run):
    with jax.enable_x64(True):
        k, phi, _, _ = heterogeneous_run
        sol = co2.simulate(k, phi, grid=GRID, config=IMPLICIT)
        mass = float(co2.co2_mass(sol.saturation, phi, grid=GRID, config=IMPLICIT))
        return jax.tree.map(np.asarray, sol), mass


def test_implicit_transport_agrees_with_impes(heterogeneous_run, implicit_run):
    """Backward Euler at 4 steps a year vs ~650 explicit substeps per step: rel. L2 < 10 % (6.6 %
    measured), and the 95 %-mass radius of every layer holding >= 5 % of the CO2 within 15 %
    (up to 13 %: backward Euler smears the front outward)."""
    _, phi, reference, _ = heterogeneous_run
    sol, _ = implicit_run
    s, s_ref = sol.saturation, reference.saturation
    assert np.linalg.norm(s - s_ref) / np.linalg.norm(s_ref) < 0.10
    layers = _main_layers(s_ref, GRID, phi)  # layers holding >= 5 % of the CO2
    assert layers.sum() >= 3
    np.testing.assert_allclose(_extent(s, GRID, phi)[layers], _extent(s_ref, GRID, phi)[layers], rtol=0.15)
    assert s.min() >= 0.0 and s.max() <= 1 - IMPLICIT.swr
    assert np.all(sol.substeps >= 1) and np.all(sol.newton_iterations >= 1)


def test_implicit_transport_conserves_mass_to_rounding(implicit_run):
    _, mass = implicit_run
    assert abs(mass / (IMPLICIT.rate * 1e9 * IMPLICIT.years) - 1) < 1e-12


@pytest.mark.slow
def test_implicit_transport_converges_to_impes_with_smaller_steps(heterogeneous_run, x64):
    """16 implicit steps a year (4 per pressure step): rel. L2 < 3 % (2.0 %), fronts within 6 % (4.8 %)."""
    k, phi, reference, _ = heterogeneous_run
    cfg = co2.CO2Config(years=1.0, pressure_steps=4, transport="implicit", substeps=4)
    s, s_ref = np.asarray(co2.solve(k, phi, grid=GRID, config=cfg)), reference.saturation
    assert np.linalg.norm(s - s_ref) / np.linalg.norm(s_ref) < 0.03
    layers = _main_layers(s_ref, GRID, phi)
    np.testing.assert_allclose(_extent(s, GRID, phi)[layers], _extent(s_ref, GRID, phi)[layers], rtol=0.06)


@pytest.mark.slow
def test_jvp_of_the_implicit_run_matches_central_differences(x64):
    """Tangents through the Newton solves come from the implicit function theorem (`_implicit_root`)."""
    grid = co2.RadialGrid(3, 6, outer_radius=2000.0, first_cell=20.0)
    cfg = co2.CO2Config(years=0.05, pressure_steps=2, transport="implicit")

    def forward(logk):
        return co2.solve(jnp.exp(logk), 0.2, grid=grid, config=cfg)

    logk = jnp.log(jnp.asarray(_perm(5, grid.shape, 300.0, 0.3)))
    direction = jnp.asarray(np.random.default_rng(6).normal(size=grid.shape))
    _, tangent = jax.jvp(forward, (logk,), (direction,))
    eps = 1e-6
    fd = (forward(logk + eps * direction) - forward(logk - eps * direction)) / (2 * eps)
    assert float(jnp.abs(fd).max()) > 1e-3
    np.testing.assert_allclose(tangent, fd, rtol=1e-4, atol=1e-7)


@pytest.mark.slow
def test_reverse_mode_of_the_static_implicit_run_matches_jvp(x64):
    grid = co2.RadialGrid(3, 6, outer_radius=2000.0, first_cell=20.0)
    cfg = co2.CO2Config(years=0.05, pressure_steps=2, transport="implicit", substeps=2)
    weights = jnp.asarray(np.random.default_rng(3).normal(size=grid.shape))

    def loss(logk):
        return jnp.sum(weights * co2.solve(jnp.exp(logk), 0.2, grid=grid, config=cfg))

    logk = jnp.log(jnp.asarray(_perm(4, grid.shape, 300.0, 0.3)))
    direction = jnp.asarray(np.random.default_rng(7).normal(size=grid.shape))
    grad = jax.grad(loss)(logk)
    np.testing.assert_allclose(jnp.vdot(grad, direction), jax.jvp(loss, (logk,), (direction,))[1], rtol=1e-8)


def test_implicit_options_are_checked():
    with pytest.raises(ValueError, match="transport"):
        co2.CO2Config(transport="fully_explicit")
    with pytest.raises(ValueError, match="max_change"):
        co2.CO2Config(max_change=0.0)
    with pytest.raises(ValueError, match="newton_max_iter"):
        co2.CO2Config(newton_max_iter=0)


@pytest.mark.slow
def test_implicit_newton_failure_is_an_error():
    k = np.full(GRID.shape, 100.0)
    with pytest.raises(Exception, match="Newton"):
        co2.solve(
            k,
            grid=GRID,
            config=co2.CO2Config(
                years=1.0, pressure_steps=1, transport="implicit", newton_max_iter=1, max_halvings=0
            ),
        )


def test_mmatrix_inverse_keeps_relative_accuracy_where_float32_cholesky_breaks_down():
    """A path-graph Laplacian of unit conductances grounded by 1e-9 per node (the radial / vertical
    conductance ratio of the outer cells of coarse grids): float32 Cholesky returns NaN, the
    row-sum-preserving elimination every entry of the inverse to float32 accuracy."""
    n, ground = 8, 1e-9
    off = -(np.eye(n, k=1) + np.eye(n, k=-1))
    g = np.full(n, ground)
    a = np.diag(g - off.sum(axis=1)) + off
    exact = np.linalg.inv(a)  # float64; entries ~ 1 / (n ground)
    assert np.isnan(np.asarray(jax.jit(jnp.linalg.cholesky)(jnp.asarray(a, jnp.float32)))).any()
    inv = np.asarray(
        jax.jit(co2._mmatrix_inverse)(jnp.asarray(off, jnp.float32), jnp.asarray(g, jnp.float32))
    )
    assert inv.dtype == np.float32
    np.testing.assert_allclose(inv, exact, rtol=1e-5)


@pytest.fixture(scope="module")
def cholesky_breaking_draw():
    """Draw 33 of split(key(0), 256) of the CCS prior on an 8 x 24 grid (permeability 0.9-517 mD):
    the float32 Cholesky block solve gave NaN pressure and a silent all-zero saturation on it."""
    import jax.random as jr

    from posteriorjax import tasks

    task = tasks.get("ccs", nz=8, nr=24, years=0.5, pressure_steps=2, wells=(0, 10))
    k = np.asarray(jax.jit(task.prior.sample)(jr.split(jr.key(0), 256)[33])[0], np.float64)
    assert 0.5 < k.min() < 1.0 and 500 < k.max() < 550  # the draw of the report
    run32 = jax.tree.map(
        np.asarray, co2.simulate(k.astype(np.float32), grid=task.grid, config=task.physics.config)
    )
    return k, task, run32


def test_float32_run_on_the_draw_that_broke_the_cholesky_solve(cholesky_breaking_draw):
    _, _, run32 = cholesky_breaking_draw
    assert run32.pressure.dtype == np.float32 and np.isfinite(run32.pressure).all()
    assert np.isfinite(run32.saturation).all() and run32.saturation.max() > 0.5


@pytest.mark.slow
def test_float32_run_on_that_draw_agrees_with_float64(cholesky_breaking_draw):
    """Pressure within 1e-2 (relative L2) of float64, saturation to 1e-4 (measured 8e-4 and 5e-6)."""
    k, task, run32 = cholesky_breaking_draw
    with jax.enable_x64(True):
        run64 = jax.tree.map(np.asarray, co2.simulate(k, grid=task.grid, config=task.physics.config))
    assert np.linalg.norm(run32.pressure - run64.pressure) / np.linalg.norm(run64.pressure) < 1e-2
    assert run64.saturation.max() > 0.5
    np.testing.assert_allclose(run32.saturation, run64.saturation, atol=1e-4)
