"""PDE-OBS-identical masks: the seed derivation, the nine views, mask specs and balanced mixtures.

`_reference_mask` is a transcription of the public PDE-OBS derivation
(`schema.derive_seed`, `dataset._mask`, `masks.py` at commit 4610219d) written
from its description, independently of `posteriorjax.studies.transfer.masks`.
"""

import hashlib

import numpy as np
import pytest

from posteriorjax.grids import Grid
from posteriorjax.studies.transfer import data
from posteriorjax.studies.transfer import masks as M

MASK_SEED = 20260804
IDENTITY = "seed-20260804/darcy/dirichlet/smooth_grf/medium/000123"
# Table 5 of the paper / the campaign file: observed cells out of 128 x 128
TABLE5 = {"R50": 8192, "R65": 10650, "R80": 13107, "BL": 8284, "LI": 8284, "H": 8192, "V": 8192,
          "BD": 8284, "CL": 8192}  # fmt: skip
CAMPAIGN = {  # configs/campaign/all_pde_one_setting_10method_9x9.yaml, views.*.mask
    "R50": ("random_3pct", {"ratio": 0.50}),
    "R65": ("random_3pct", {"ratio": 0.65}),
    "R80": ("random_3pct", {"ratio": 0.80}),
    "BL": ("block_missing", {"missing_fraction": 0.49}),
    "LI": ("line_sensors", {"num_lines": 76, "orientation": "both"}),
    "H": ("line_sensors", {"num_lines": 64, "orientation": "horizontal"}),
    "V": ("line_sensors", {"num_lines": 64, "orientation": "vertical"}),
    "BD": ("boundary_sensors", {"width": 19}),
    "CL": ("clustered_sensors", {"ratio": 0.50}),
}


def _reference_seed(base, *parts):
    payload = str(base).encode() + b"".join(b"\x00" + str(p).encode() for p in parts)
    h = hashlib.blake2b(payload, digest_size=8, person=b"pdeobs-v1").digest()
    return int.from_bytes(h, "little") % 2**32


def _reference_mask(protocol, kwargs, n, identity):
    rng = np.random.default_rng(_reference_seed(MASK_SEED, "mask", identity, protocol))
    mask = np.zeros((n, n), bool)
    flat = mask.reshape(-1)
    if protocol == "random_3pct":
        flat[rng.choice(n * n, size=min(n * n, max(1, round(n * n * kwargs["ratio"]))), replace=False)] = True
    elif protocol == "block_missing":
        if "block_shape" in kwargs:
            side, other = kwargs["block_shape"]
            assert side == other
        else:
            side = max(1, min(n, round(n * kwargs["missing_fraction"] ** 0.5)))
        top, left = rng.integers(0, n - side + 1), rng.integers(0, n - side + 1)
        mask[:] = True
        mask[top : top + side, left : left + side] = False
    elif protocol == "line_sensors":
        k = kwargs["num_lines"]
        rows = {"horizontal": k, "vertical": 0, "both": (k + 1) // 2}[kwargs["orientation"]]
        cols = {"horizontal": 0, "vertical": k, "both": k // 2}[kwargs["orientation"]]
        if rows:
            mask[rng.choice(n, rows, replace=False)] = True
        if cols:
            mask[:, rng.choice(n, cols, replace=False)] = True
    elif protocol == "boundary_sensors":
        w = kwargs["width"]
        mask[:w], mask[-w:], mask[:, :w], mask[:, -w:] = True, True, True, True
    elif protocol == "clustered_sensors":
        yy, xx = np.mgrid[:n, :n]
        weight = np.zeros((n, n))
        for _ in range(4):
            cy, cx = rng.uniform(0, n - 1), rng.uniform(0, n - 1)
            weight += np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * (0.08 * n) ** 2))
        p = weight.reshape(-1) + np.finfo(np.float64).eps
        count = round(n * n * kwargs["ratio"])
        flat[rng.choice(n * n, count, replace=False, p=p / p.sum())] = True
    return np.flatnonzero(mask)


def test_derive_seed_is_blake2b_with_the_pdeobs_person():
    assert M.derive_seed(MASK_SEED, "mask", IDENTITY, "random_3pct") == _reference_seed(
        MASK_SEED, "mask", IDENTITY, "random_3pct"
    )
    assert M.derive_seed(7) != M.derive_seed(7, "")  # a part is separated by a NUL byte


@pytest.mark.parametrize("view", list(CAMPAIGN))
def test_every_view_equals_the_pdeobs_derivation(view):
    protocol, kwargs = M.view_protocol(view, (128, 128))
    assert (protocol, kwargs) == CAMPAIGN[view]
    for n in (128, 32):
        p, kw = M.view_protocol(view, (n, n))
        got = np.flatnonzero(M.record_mask(p, (n, n), mask_seed=MASK_SEED, identity=IDENTITY, **kw))
        np.testing.assert_array_equal(got, _reference_mask(p, kw, n, IDENTITY), err_msg=f"{view} at {n}")
        if n == 128:
            assert got.size == TABLE5[view]


def test_equal_count_groups_are_equal_at_every_even_resolution():
    for n in (4, 8, 16, 32, 48, 64, 128):
        counts = M.view_counts((n, n))
        for group in M.EQUAL_COUNT_GROUPS:
            assert len({counts[v] for v in group}) == 1, (n, {v: counts[v] for v in group})
        # and exactly per record, under the PDE-OBS seeding
        for view in ("BL", "LI", "BD", "H", "V"):
            p, kw = M.view_protocol(view, (n, n))
            got = M.record_mask(p, (n, n), mask_seed=MASK_SEED, identity=IDENTITY, **kw)
            assert got.sum() == counts[view]
    assert M.view_counts((32, 32))["LI"] == 540 and M.view_counts((64, 64))["BL"] == 2160
    assert M.view_protocol("BL", (64, 64)) == ("block_missing", {"block_shape": (44, 44)})
    for shape in ((33, 33), (32, 16), (2, 2)):
        with pytest.raises(ValueError, match="shape: view LI belongs to an equal-count group"):
            M.view_protocol("LI", shape)
    assert M.view_protocol("R50", (33, 33)) == ("random_3pct", {"ratio": 0.5})  # no group constraint


def test_factory_rules_of_pdeobs():
    rng = np.random.default_rng
    # boundary count: evenly spaced picks truncated (linspace dtype=int), not rounded
    band = np.flatnonzero(M.generate("boundary_sensors", (8, 8), 0, width=1))
    picked = np.flatnonzero(M.generate("boundary_sensors", (8, 8), 0, width=1, count=5))
    np.testing.assert_array_equal(picked, band[[0, 6, 13, 20, 27]])  # linspace(0, 27, 5) = 0, 6.75, ...
    # a non-square block from block_shape, and a rectangular grid rounding each side
    hole = ~M.generate("block_missing", (16, 16), 3, block_shape=(3, 7))
    assert hole.sum() == 21 and np.ptp(np.nonzero(hole)[0]) == 2 and np.ptp(np.nonzero(hole)[1]) == 6
    assert (~M.generate("block_missing", (20, 10), 3, missing_fraction=0.25)).sum() == 10 * 5
    # 500 sensors at 128 x 128 without arguments; regular grid offset step // 2
    assert M.generate("random", (128, 128), 0).sum() == 500
    grid = M.generate("grid", (12, 12), 0, ratio=1 / 9)
    assert grid[1::3, 1::3].all() and grid.sum() == 16
    # clustered: the centres are the generator's first two uniforms
    r = rng(5)
    centre = (r.uniform(0, 31), r.uniform(0, 31))
    m = M.generate("clustered", (32, 32), 5, ratio=0.05, clusters=1, spread=0.05)
    ys, xs = np.nonzero(m)
    assert abs(ys.mean() - centre[0]) < 3 and abs(xs.mean() - centre[1]) < 3
    with pytest.raises(ValueError, match="protocol"):
        M.generate("spiral", (8, 8), 0)


def test_random_views_of_one_record_are_nested_as_in_pdeobs():
    # PDE-OBS seeds by the protocol name only; above 10,000 cells NumPy's choice without
    # replacement is a partial tail shuffle, so at 128 x 128 R20 < R50 < R80 for one record
    def sets(n):
        return [
            M.record_mask("random", (n, n), mask_seed=1, identity=IDENTITY, ratio=r) for r in (0.2, 0.5, 0.8)
        ]

    big, small = sets(128), sets(32)
    assert not np.any(big[0] & ~big[1]) and not np.any(big[1] & ~big[2])
    assert np.any(small[0] & ~small[1])  # below 10,000 cells they are not nested


def test_mask_spec_grammar():
    spec = M.parse_spec("line 30 + random 20")
    assert spec.canonical_text() == "line_sensors(orientation=both) 30 + random_3pct 20"
    assert spec.cycle == (0, 1) and spec.is_mixture
    weighted = M.parse_spec("uniform 1 x2 + block 50")
    assert weighted.cycle == (0, 0, 1)
    assert weighted.components[1].resolved_kwargs((32, 32)) == {"missing_fraction": 0.5}
    explicit = M.parse_spec("line_sensors(num_lines=64, orientation=horizontal)")
    assert explicit.components[0].kwargs == (("num_lines", 64), ("orientation", "horizontal"))
    assert M.parse_spec("random20").components[0].percent == 20.0
    # percentages are observed fractions: band width and line counts are solved on the grid
    assert M.parse_spec("boundary 50.56").components[0].resolved_kwargs((128, 128)) == {"width": 19}
    assert M.parse_spec("line 50.56").components[0].resolved_kwargs((128, 128))["num_lines"] == 76
    # "uniform 20" seeds exactly as a plain random view with ratio 0.2
    alone = M.record_mask("random_3pct", (32, 32), mask_seed=3, identity=IDENTITY, ratio=0.2)
    np.testing.assert_array_equal(
        M.parse_spec("uniform 20").components[0].mask((32, 32), mask_seed=3, identity=IDENTITY), alone
    )
    for bad, match in (("spiral 20", "unknown"), ("random 20 + random 20", "duplicate"),
                       ("block 100", "percentage"), ("random(ratio=0.2) 20", "percentage"),
                       ("line (30", "parse|parenthes")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            M.parse_spec(bad)


def _dataset(records, family="helmholtz_field", n=16):
    m = len(records)
    z = np.zeros((m, 1, n, n), np.float32)
    records = np.asarray(records, np.int64)
    split = records // data.RECORD_BLOCK // 3
    return data.Dataset(family, n, MASK_SEED, records, records // data.RECORD_BLOCK % 3, split, z, z, z, z)


def test_mixture_counts_are_balanced_per_split_and_regime():
    regime = np.repeat([0, 1, 2], [40, 41, 43])
    index = np.concatenate([np.arange(40), np.arange(41), np.arange(43)])
    ds = _dataset(
        np.concatenate([data.record_ids(0, regime, index), data.record_ids(1, regime[:30], index[:30])])
    )
    component = data.mixture_components(ds)
    split = ds.split
    for s in (0, 1):
        for g in (0, 1, 2):
            counts = np.bincount(component[(split == s) & (ds.regime == g)], minlength=len(data.VIEWS))
            assert counts.max() - counts.min() <= 1, (s, g, counts)
    # each record's mixture mask is its component's single-view mask; same for the 2-component spec
    mix = data.view_masks(ds, data.MIXTURE)
    for i in (0, 50, 130):
        single = data.view_masks(ds.select([i]), data.VIEWS[component[i]])[0]
        np.testing.assert_array_equal(mix[i], single)
    halves = np.bincount(data.mixture_components(ds.train, "line30_random20"), minlength=2)
    assert abs(int(halves[0]) - int(halves[1])) <= 3  # at most one per regime
    # the PDE-OBS identity of a test record carries 2^24 + i
    assert data.pdeobs_identity("heat_field", int(data.record_ids(1, [2], [7])[0]), seed=5) == (
        f"seed-5/heat/periodic/smooth_grf/high/{2**24 + 7:06d}"
    )


def test_schemes_differ_and_ours_is_kept():
    grid = Grid(16, 1.0, "dirichlet")
    ours = data.record_mask("R50", grid, mask_seed=3, record=5, scheme="posteriorjax")
    theirs = data.record_mask("R50", grid, mask_seed=3, record=5, scheme="pdeobs", family="darcy_field")
    assert ours.sum() == theirs.sum() == 128 and not np.array_equal(ours, theirs)
    with pytest.raises(ValueError, match="scheme"):
        data.record_mask("R50", grid, mask_seed=3, record=5, scheme="other")
