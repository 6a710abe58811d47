"""Observation operators, patterns and noise: counts, seeding contract, algebra, jit/vmap, errors."""

import math
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posteriorjax import observations as obs
from posteriorjax.grids import Grid

PRESETS = ("R50", "R65", "R80", "CL", "H", "V", "BL", "LI", "BD")
COUNTS = {
    128: {
        "R50": 8192,
        "R65": 10650,
        "R80": 13107,
        "CL": 8192,
        "H": 8192,
        "V": 8192,
        "BL": 8284,
        "LI": 8284,
        "BD": 8284,
    },
    64: {
        "R50": 2048,
        "R65": 2662,
        "R80": 3277,
        "CL": 2048,
        "H": 2048,
        "V": 2048,
        "BL": 2071,
        "LI": 2071,
        "BD": 2160,
    },
    32: {"R50": 512, "R65": 666, "R80": 819, "CL": 512, "H": 512, "V": 512, "BL": 540, "LI": 518, "BD": 540},
}
RANDOM_LAYOUTS = ("R50", "R65", "R80", "CL", "H", "V", "BL", "LI")


def _mask(o):
    return np.asarray(o.mask)


@pytest.mark.parametrize("n", sorted(COUNTS))
def test_preset_counts(n):
    grid = Grid(n)
    for name in PRESETS:
        o = obs.pattern(name, grid, seed=20260804, record=3)
        m = _mask(o)
        assert m.shape == (n, n)
        assert o.count == int(m.sum()) == COUNTS[n][name], name
        assert dict(o.realized)["count"] == o.count


def test_preset_layouts_128():
    grid = Grid(128)
    h = _mask(obs.pattern("H", grid, seed=1))
    assert np.all(h.all(axis=1) | ~h.any(axis=1)) and h.all(axis=1).sum() == 64
    v = _mask(obs.pattern("V", grid, seed=1))
    assert np.all(v.all(axis=0) | ~v.any(axis=0)) and v.all(axis=0).sum() == 64
    li = obs.pattern("LI", grid, seed=1)
    m = _mask(li)
    assert m.all(axis=1).sum() == 38 and m.all(axis=0).sum() == 38
    assert m.sum() == 38 * 128 * 2 - 38**2
    hole = ~_mask(obs.pattern("BL", grid, seed=1))
    rows, cols = np.flatnonzero(hole.any(axis=1)), np.flatnonzero(hole.any(axis=0))
    assert len(rows) == len(cols) == 90 and hole[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1].all()
    bd = _mask(obs.pattern("BD", grid, seed=1))
    assert not bd[19:-19, 19:-19].any() and bd.sum() == 128**2 - 90**2
    assert bd[:19].all() and bd[-19:].all() and bd[:, :19].all() and bd[:, -19:].all()


def test_seed_contract_matches_seedsequence():
    # positions come from SeedSequence(seed, spawn_key=(crc32(name), record)), never Python hash
    grid = Grid(32)
    for seed, record in [(0, 0), (20260804, 7)]:
        ss = np.random.SeedSequence(seed, spawn_key=(zlib.crc32(b"R50"), record))
        flat = np.random.default_rng(ss).permutation(32 * 32)[:512]
        expected = np.zeros(32 * 32, bool)
        expected[flat] = True
        np.testing.assert_array_equal(
            _mask(obs.pattern("R50", grid, seed=seed, record=record)).ravel(), expected
        )


def test_positions_depend_only_on_seed_record_name():
    grid = Grid(32)
    first = {name: _mask(obs.pattern(name, grid, seed=5, record=2)) for name in PRESETS}
    for name in reversed(PRESETS):  # other patterns and records built in between
        for record in (0, 1, 3):
            obs.pattern(name, grid, seed=5, record=record)
        np.testing.assert_array_equal(_mask(obs.pattern(name, grid, seed=5, record=2)), first[name])
    for name in RANDOM_LAYOUTS:
        assert not np.array_equal(_mask(obs.pattern(name, grid, seed=5, record=3)), first[name]), name
        assert not np.array_equal(_mask(obs.pattern(name, grid, seed=6, record=2)), first[name]), name
    # R-views are not nested: each preset name seeds its own positions
    r50, r65 = first["R50"], first["R65"]
    assert np.any(r50 & ~r65)


def test_factories():
    grid = Grid(32)
    assert obs.pattern("random", grid, seed=0, ratio=0.1).count == round(0.1 * 1024)
    assert obs.pattern("random", grid, seed=0, count=17).count == 17
    g = _mask(obs.pattern("grid", grid, seed=0, ratio=0.03))
    step = round(1 / math.sqrt(0.03))
    expected = np.zeros((32, 32), bool)
    expected[step // 2 :: step, step // 2 :: step] = True
    np.testing.assert_array_equal(g, expected)
    go = _mask(obs.pattern("grid", grid, seed=0, ratio=0.03, random_offset=True))
    (oy, ox) = np.argwhere(go)[0]
    assert (
        oy < step and ox < step and go[oy::step, ox::step].all() and go.sum() == go[oy::step, ox::step].size
    )
    blk = obs.pattern("block", grid, seed=0, size=10)
    assert blk.count == 1024 - 100
    both = _mask(obs.pattern("lines", grid, seed=0, num_lines=5, placement="even"))
    assert both.all(axis=1).sum() == 3 and both.all(axis=0).sum() == 2 and both.sum() == 3 * 32 + 2 * 32 - 6
    np.testing.assert_array_equal(np.flatnonzero(both.all(axis=1)), [5, 16, 26])
    band = obs.pattern("boundary", grid, seed=0, width=2, count=40)
    full_band = _mask(obs.pattern("boundary", grid, seed=0, width=2))
    assert band.count == 40 and not np.any(_mask(band) & ~full_band)
    cl = obs.pattern("clustered", grid, seed=0, count=300, clusters=3, spread=0.1)
    assert cl.count == 300
    assert obs.pattern("full", grid, seed=0).count == 1024
    assert obs.point_sensors(grid, 50, seed=1, record=4).count == 50
    assert obs.pattern("pool", grid, seed=0, factor=4).count == 64
    cols = obs.pattern("columns", grid, seed=0, num_columns=4)
    np.testing.assert_array_equal(np.asarray(cols.columns), [4, 12, 20, 28])


def test_mixture_is_deterministic_per_record():
    grid = Grid(16)
    names = ["R50", "H", ("random", {"count": 10})]
    chosen = []
    for record in range(12):
        o = obs.mixture(names, grid, seed=3, record=record)
        again = obs.mixture(names, grid, seed=3, record=record)
        np.testing.assert_array_equal(_mask(o), _mask(again))
        params = dict(o.params)
        direct = obs.pattern(
            o.name, grid, seed=3, record=record, **({"count": 10} if o.name == "random" else {})
        )
        np.testing.assert_array_equal(_mask(o), _mask(direct))
        chosen.append((o.name, params.get("count")))
    assert {c[0] for c in chosen} == {"R50", "H", "random"}
    only = {obs.mixture(names, grid, seed=3, record=r, weights=[0, 1, 0]).name for r in range(5)}
    assert only == {"H"}


def _field(seed, shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@jax.jit
def _roundtrip(op, u):
    """(to_grid(op(u)) with explicit and inferred leading axes, single field, u * mask, mask)."""
    m = op.mask
    return op.to_grid(op(u), leading=(3,)), op.to_grid(op(u)), op.to_grid(op(u[0])), u * m, m


def test_to_grid_inverts_mask_operators():
    grid = Grid(16)
    u = _field(0, (3, 16, 16))
    ops = [obs.pattern(n, grid, seed=0, record=1) for n in ("R50", "LI")]
    ops.append(obs.MaskObservation(np.random.default_rng(1).random((16, 16)) < 0.3))
    ops.append(obs.ColumnObservation((16, 16), [7, 2, 11]))
    for op in ops:
        explicit, inferred, single, expected, m = _roundtrip(op, u)
        assert m.dtype == jnp.bool_ and m.shape == (16, 16) and int(m.sum()) == op.count
        np.testing.assert_array_equal(explicit, expected)
        np.testing.assert_array_equal(inferred, expected)
        np.testing.assert_array_equal(single, expected[0])


def test_column_observation_order():
    u = _field(1, (2, 8, 6))
    op = obs.ColumnObservation((8, 6), [4, 1])
    y = jax.jit(lambda o, v: o(v))(op, u)
    np.testing.assert_array_equal(y, np.swapaxes(u[:, :, [4, 1]], -1, -2).reshape(-1))
    assert y.shape == (2 * op.count,) and op.count == 16


def test_average_pool():
    u = _field(2, (2, 3, 12, 12))
    op = obs.AveragePool(Grid(12), 3)
    y, back = jax.jit(lambda o, v: (o(v), o.to_grid(o(v), leading=(2, 3))))(op, u)
    coarse = u.reshape(2, 3, 4, 3, 4, 3).mean(axis=(3, 5))
    np.testing.assert_allclose(y, coarse.reshape(-1), rtol=1e-5, atol=1e-6)
    assert op.count == 16 and np.asarray(op.mask).all()
    np.testing.assert_allclose(
        back, np.repeat(np.repeat(coarse, 3, axis=-2), 3, axis=-1), rtol=1e-5, atol=1e-6
    )


def test_jit_and_vmap():
    grid = Grid(16)
    batch = _field(3, (4, 2, 16, 16))
    traces = []

    @jax.jit
    def apply(op, u):
        traces.append(None)
        per_state = jax.vmap(op)(u)  # batch of (2, H, W) states
        return per_state, op(u), jax.vmap(op.to_grid)(per_state)

    for op in (
        obs.pattern("R50", grid, seed=0),
        obs.AveragePool(grid, 4),
        obs.ColumnObservation(grid, [1, 5]),
    ):
        per_state, flat, grids = apply(op, batch)
        assert per_state.shape == (4, 2 * op.count)
        np.testing.assert_allclose(per_state.reshape(-1), flat, rtol=1e-6)
        np.testing.assert_allclose(grids, op.to_grid(flat, leading=(4, 2)), rtol=1e-6)
    # records of one pattern share a tree structure: no recompilation, stackable, vmappable
    before = len(traces)
    records = [obs.pattern("R50", grid, seed=0, record=r) for r in range(4)]
    outputs = [apply(op, batch)[0] for op in records]
    assert len(traces) == before
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *records)
    ys, masks = jax.jit(jax.vmap(lambda o, u: (o(u), o.mask)))(stacked, batch)
    np.testing.assert_allclose(ys, jnp.stack([out[i] for i, out in enumerate(outputs)]))
    np.testing.assert_array_equal(masks, np.stack([_mask(o) for o in records]))
    grad = jax.jit(jax.grad(lambda u: jnp.sum(records[0](u) ** 2)))(batch[0])
    np.testing.assert_allclose(grad, 2 * batch[0] * _mask(records[0]))


def test_gaussian_noise(key):
    std = jnp.array([0.5, 1.0, 2.0])
    noise = obs.GaussianNoise(std)
    r = jnp.array([0.3, -1.2, 4.0])
    expected = np.sum(
        -0.5 * (np.asarray(r) / np.asarray(std)) ** 2 - np.log(np.asarray(std)) - 0.5 * np.log(2 * np.pi)
    )
    np.testing.assert_allclose(noise.log_likelihood(r), expected, rtol=1e-6)
    np.testing.assert_allclose(noise.whiten(r), r / std)
    scalar = obs.GaussianNoise(0.1)
    x = scalar.sample(key, (20000,))
    assert x.shape == (20000,) and abs(float(jnp.std(x)) - 0.1) < 0.003
    assert noise.sample(key, (5, 3)).shape == (5, 3)
    np.testing.assert_allclose(scalar.variance(4), np.full(4, 0.01), rtol=1e-6)
    lls = jax.vmap(lambda s: obs.GaussianNoise(s).log_likelihood(r))(jnp.array([0.5, 1.0]))
    np.testing.assert_allclose(lls[1], obs.GaussianNoise(1.0).log_likelihood(r), rtol=1e-6)


@pytest.mark.parametrize(
    "build, argument",
    [
        (lambda: obs.pattern("sensors", Grid(8), seed=0, num_sensors=65), "num_sensors"),
        (lambda: obs.point_sensors(Grid(8), 100, seed=0), "num_sensors"),
        (lambda: obs.pattern("random", Grid(8), seed=0, count=65), "count"),
        (lambda: obs.pattern("R5O", Grid(8), seed=0), "name"),
        (lambda: obs.pattern("BD", Grid(4), seed=0), "grid"),
        (lambda: obs.pattern("BL", Grid(2), seed=0), "grid"),
        (lambda: obs.pattern("pool", Grid(10), seed=0, factor=3), "factor"),
        (lambda: obs.AveragePool((12, 10), 4), "factor"),
        (lambda: obs.pattern("R50", Grid(8), seed=0, ratio=0.1), "params"),
        (lambda: obs.pattern("random", Grid(8), seed=0, rato=0.1), "params"),
        (lambda: obs.pattern("random", Grid(8), seed=-1), "seed"),
        (lambda: obs.pattern("lines", Grid(8), seed=0, num_lines=9, orientation="horizontal"), "num_lines"),
        (lambda: obs.pattern("boundary", Grid(8), seed=0, width=5), "width"),
        (lambda: obs.ColumnObservation((8, 8), [1, 1]), "columns"),
        (lambda: obs.mixture([], Grid(8), seed=0), "names"),
        (lambda: obs.GaussianNoise(0.0), "std"),
        (lambda: obs.GaussianNoise(-1.0), "std"),
        (lambda: obs.GaussianNoise(float("nan")), "std"),
        (lambda: obs.GaussianNoise(jnp.array([1.0, jnp.inf])), "std"),
        (lambda: obs.pattern("R50", Grid(8), seed=0)(jnp.zeros((8, 7))), "u"),
        (lambda: obs.pattern("R50", Grid(8), seed=0).to_grid(jnp.zeros(31)), "y"),
        (lambda: obs.GaussianNoise(jnp.ones(3)).log_likelihood(jnp.zeros(4)), "residual"),
    ],
)
def test_errors_name_the_argument(build, argument):
    with pytest.raises(ValueError, match=rf"^{argument}\b") as info:
        build()
    if argument == "name":
        assert "R50" in str(info.value) and "random" in str(info.value)
