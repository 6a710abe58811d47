import json
import math
import struct
from pathlib import Path

import matplotlib.collections
import matplotlib.colors
import matplotlib.image
import numpy as np
import pytest
from absl import flags
from test_records import record  # the hand-made sweep record both test modules build on

from posteriorjax import files, tasks
from posteriorjax.metrics import calibration
from posteriorjax.report import figures, tables

LEVELS = calibration.DEFAULT_LEVELS
GUIDANCE = (0.0, 1.0, 10.0, 100.0)
NUM_CASES, NUM_SAMPLES, SHAPE = 3, 6, (2, 8, 8)
TOY_METRICS = ("mean_error", "std_error", "mmd", "swd", "spectral_error", "crps", "rel_l2_mean", "crps_fair")
NOISE_METRICS = ("mean_error", "crps")
# registered tasks whose stored fields are drawn in physical coordinates with their observation:
# point sensors, well columns on the radial grid, a dense mask (BL: one hole); pooling blocks below
FIELD_TASKS = {
    "darcy": dict(resolution=8, num_sensors=5),
    "ccs": dict(nz=8, nr=24, years=0.5, pressure_steps=2, wells=(0, 10)),
    "darcy_field": dict(resolution=32, pattern="BL"),
}


def toy_metrics(g, case, names):
    """Metrics with a V in log10(1 + g): the optimum of `mean_error` is at g = 10."""
    u = math.log10(1.0 + g)
    out = {m: float((u - 1.0 - 0.1 * i) ** 2 + 0.1 + 0.01 * case) for i, m in enumerate(names)}
    if "rel_l2_mean" in out:
        out["rel_l2_mean"] = float(1.0 / (1.0 + g) + 0.05)
    out["num_nonfinite"] = 0
    return out


def calibration_metrics(rng):
    return {
        "coverage": np.clip(np.asarray(LEVELS) + rng.normal(0, 0.05, len(LEVELS)), 0, 1).tolist(),
        "coverage_error": float(rng.uniform(0, 0.1)),
        "tarp_credibility": float(rng.uniform()),
        "mira_statistic": float(rng.uniform(0.55, 0.75)),
    }


def diverged_metrics():
    out = {m: None for m in TOY_METRICS + ("coverage_error", "tarp_credibility", "mira_statistic")}
    return out | {"coverage": [None] * len(LEVELS), "num_nonfinite": NUM_SAMPLES}


def noise_records(label, shift):
    """Sampler `good` at one noise level: the optimum guidance moves up with `shift` (decades)."""
    return [
        record(label, "good", case, {"guidance": g}, toy_metrics(g / 10**shift, case, NOISE_METRICS))
        for case in range(NUM_CASES)
        for g in GUIDANCE
    ]


def write_reference(directory: Path, **arrays) -> None:
    """A task's stored reference set as the sweep keeps it (`sweep.store.read_reference` reads it):
    `references.npz` and a manifest with its checksum."""
    checksum = files.write_arrays(directory / "references.npz", arrays)
    files.atomic_write_json(
        directory / files.MANIFEST, {"kind": "references", "checksums": {"references.npz": checksum}}
    )


def make_workdir(root: Path) -> Path:
    """A synthetic sweep workdir: task `toy` (samplers `good` with a guidance axis, `diverged` with
    non-finite samples) and two more noise levels of `toy` by label, sampler `good` only."""
    rng = np.random.default_rng(0)
    records = []
    for case in range(NUM_CASES):
        for g in GUIDANCE:
            m = toy_metrics(g, case, TOY_METRICS) | calibration_metrics(rng)
            if g == GUIDANCE[-1] and case == NUM_CASES - 1:  # one diverged configuration
                m = diverged_metrics()
            records.append(record("toy", "good", case, {"guidance": g}, m))
        records.append(record("toy", "diverged", case, {"step": 0.1}, diverged_metrics()))
    records += noise_records("toy@noise=0.1", 1.0) + noise_records("toy@noise=0.01", 2.0)
    root.mkdir(parents=True, exist_ok=True)
    (root / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = {
        "tasks": {"toy": {"noise_std": 1.0}, "toy@noise=0.1": {}, "toy@noise=0.01": {}, **FIELD_TASKS},
        "seeds": [0],
    }
    (root / "config.json").write_text(json.dumps(config))
    # stored fields: the first two cases
    m = 10
    weights = rng.uniform(0.1, 1.0, (NUM_CASES, m))
    write_reference(
        root / "references" / "toy",
        ref_samples=rng.normal(size=(NUM_CASES, m, *SHAPE)).astype(np.float32),
        ref_weights=(weights / weights.sum(axis=1, keepdims=True)).astype(np.float32),
        x_true=rng.normal(size=(NUM_CASES, *SHAPE)).astype(np.float32),
        y_obs=rng.normal(size=(NUM_CASES, 5)).astype(np.float32),
    )
    (root / "samples" / "toy").mkdir(parents=True)
    cases = np.repeat(np.arange(2), len(GUIDANCE))
    guid = np.tile(np.asarray(GUIDANCE, np.float32), 2)
    np.savez(
        root / "samples" / "toy" / "good.npz",
        samples=rng.normal(size=(cases.size, NUM_SAMPLES, *SHAPE)).astype(np.float32),
        case=cases,
        config_id=np.asarray([f"case={c};seed=0;guidance={g!r}" for c, g in zip(cases, guid, strict=True)]),
        hparam_guidance=guid,
    )
    bad = rng.normal(size=(1, NUM_SAMPLES, *SHAPE)).astype(np.float32)
    bad[:, 1:3] = np.nan
    bad[0, 4, 0, 0, 0] = np.inf
    np.savez(
        root / "samples" / "toy" / "diverged.npz",
        samples=bad,
        case=np.asarray([1]),
        config_id=np.asarray(["case=1;seed=0;step=0.1"]),
        hparam_step=np.full(1, 0.1, np.float32),
    )
    for name, options in FIELD_TASKS.items():  # one case, one setting, no records
        shape = tasks.get(name, **options).unknown_shape

        def draw(*lead, shape=shape):
            return rng.lognormal(size=(*lead, *shape)).astype(np.float32)

        write_reference(
            root / "references" / name,
            ref_samples=draw(1, 5), ref_weights=np.full((1, 5), 0.2, np.float32), x_true=draw(1),
        )  # fmt: skip
        (root / "samples" / name).mkdir()
        np.savez(
            root / "samples" / name / "s.npz", samples=draw(1, 4), case=np.zeros(1, int),
            config_id=np.asarray(["case=0;seed=0"]),
        )  # fmt: skip
    return root


def png_size(path: Path) -> tuple[int, int]:
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    image = matplotlib.image.imread(path)  # decodes the whole file
    assert image.shape[:2] == (height, width)
    return width, height


def panels(n, width, height, max_columns=figures.MAX_COLUMNS):
    ncols = min(n, max_columns)
    nrows = -(-n // ncols)
    return ncols * width, nrows * height + figures.TITLE


def expected_sizes():
    """Figure sizes (inches) from the layouts the figure docstrings state."""
    tile, cbar, left = figures.TILE, figures.COLORBAR, figures.LEFT

    def height(channels):
        return channels * (2 * tile + figures.AXIS_BAND) + figures.TITLE

    out = {}
    for task, sampler, case, members in (
        *[("toy", s, c, 4) for s, c in (("good", 0), ("good", 1), ("diverged", 1))],
        *[(name, "s", 0, 4) for name in FIELD_TASKS],
    ):
        out[f"samples_{task}_{sampler}_case{case}.png"] = (left + (members + 1) * tile + cbar, height(1))
        out[f"moments_{task}_{sampler}_case{case}.png"] = (left + 3 * tile + 2 * cbar, height(1))
    out = {k: (w, height(SHAPE[0]) if "_toy_" in k else h) for k, (w, h) in out.items()}
    curve_metrics = len(TOY_METRICS) + 1  # + coverage_error
    out["curves_toy_good_guidance.png"] = panels(curve_metrics, *figures.PANEL)
    for label in ("toy@noise=0.1", "toy@noise=0.01"):
        out[f"curves_{label.replace('@', '_')}_good_guidance.png"] = panels(
            len(NOISE_METRICS), *figures.PANEL
        )
    out["vshape_toy.png"] = panels(5, *figures.PANEL)
    out["coverage_toy.png"] = panels(2, figures.SQUARE, figures.SQUARE)
    # no tarp_toy.png: 3 cases are fewer than results.TARP_MIN_CONDITIONS (the table shows "-")
    out["mira_toy.png"] = (5.0, 4.0)  # three finite rows: clip(1.5 + 0.5 * 3, 5, 24)
    out["optimum_toy_good_guidance.png"] = (5.0, 3.6)
    return out


DRAWN: dict = {}  # figure objects of the `rendered` workdir, by file name


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    root = make_workdir(tmp_path_factory.mktemp("sweep"))
    save = figures.style.save
    figures.style.save = lambda fig, path: DRAWN.setdefault(Path(path).name, fig) and save(fig, path)
    try:
        return root, figures.render(root)
    finally:
        figures.style.save = save


def test_render_writes_every_figure_as_a_png_of_its_size(rendered):
    root, paths = rendered
    expected = expected_sizes()
    assert sorted(p.name for p in paths) == sorted(expected)
    for p in paths:
        assert p.parent == root / "figures"
        w, h = expected[p.name]
        width, height = png_size(p)
        assert abs(width - w * figures.DPI) <= 1 and abs(height - h * figures.DPI) <= 1, p.name


def _tile_mesh(ax) -> bool:
    """A field tile drawn in physical coordinates (its overlay lines are no plotted curve)."""
    return any(isinstance(c, matplotlib.collections.QuadMesh) for c in ax.collections)


def _inside(fig, png: Path) -> bool:
    """Everything drawn (the tight box, inches) lies inside the saved image."""
    tight = fig.get_tightbbox(fig.canvas.get_renderer())
    width, height = png_size(png)
    if (width, height) == tuple(round(v * figures.DPI) for v in fig.get_size_inches()):
        w, h = fig.get_size_inches()
        return tight.x0 >= -0.01 and tight.y0 >= -0.01 and tight.x1 <= w + 0.01 and tight.y1 <= h + 0.01
    return tight.width * figures.DPI <= width + 2 and tight.height * figures.DPI <= height + 2


def test_every_figure_kind_labelled_log_where_set_and_not_clipped(rendered, tmp_path, monkeypatch):
    paths, drawn, save = {p.name: p for p in rendered[1]}, dict(DRAWN), figures.style.save
    kinds = {name.split("_")[0] for name in paths}
    assert kinds == {"samples", "moments", "curves", "vshape", "coverage", "mira", "optimum"}
    for name, fig in drawn.items():
        assert _inside(fig, paths[name]), name
        plots = [ax for ax in fig.axes if ax.axison and ax.lines and not ax.images and not _tile_mesh(ax)]
        for ax in plots:
            assert ax.get_ylabel(), (name, ax.get_title())
            assert ax.get_xlabel() or name.startswith("mira"), (name, ax.get_title())
        if name.startswith(("samples", "moments")) and "_toy_" in name:  # unregistered: generic labels
            assert any("channel 1" in ax.get_ylabel() for ax in fig.axes), name
    # V-shape: the toy's finite rows span less than a decade (1.05 ... 0.14): linear; one outlier
    # two decades away: log axes, so the other points are not flattened against an edge
    assert {ax.get_xscale() for ax in drawn["vshape_toy.png"].axes if ax.axison} == {"linear"}
    outlier = [
        record("t", "s", c, {"g": g}, {"rel_l2_mean": e, "mean_error": 2 * e, "mmd": 0.5})
        for c in range(2) for g, e in ((1.0, 0.01), (2.0, 0.02), (3.0, 1.0))
    ]  # fmt: skip
    monkeypatch.setattr(
        figures.style, "save", lambda fig, path: drawn.setdefault(Path(path).name, fig) and save(fig, path)
    )
    figures.vshape_figure(tmp_path / "vshape_outlier.png", outlier)
    (mean_panel, mmd_panel) = [ax for ax in drawn["vshape_outlier.png"].axes if ax.axison]
    assert mean_panel.get_xscale() == mean_panel.get_yscale() == "log" and mmd_panel.get_yscale() == "linear"
    # MIRA with long row labels: the image grows to hold them instead of clipping them
    long = [
        record("t", f"sampler_with_a_long_name_{i}", c, {"guidance_weight_of_the_sampler": 10.0**i},
               {"mira_statistic": 0.6 + 0.01 * c})
        for i in range(3) for c in range(3)
    ]  # fmt: skip
    path = figures.mira_figure(tmp_path / "mira_long.png", long)
    fig = drawn["mira_long.png"]
    assert png_size(path)[1] > 4.0 * figures.DPI and _inside(fig, path)
    # MIRA with too few conditions to resolve the table's shift is marked; with enough it is not
    too_few = lambda fig: [t for ax in fig.axes for t in ax.texts if t.get_gid() == "too_few"]  # noqa: E731
    assert "L = 3 <" in too_few(drawn["mira_toy.png"])[0].get_text()
    needed = tables.mira_conditions_needed(3)
    enough = [record("t", "s", c, {}, {"mira_statistic": 0.6}, num_samples=3) for c in range(needed)]
    figures.mira_figure(tmp_path / "mira_enough.png", enough)
    assert not too_few(drawn["mira_enough.png"])
    # metric curves: guidance 0, 1, 10, 100 on a log axis (0 at the left edge)
    assert {ax.get_xscale() for ax in drawn["curves_toy_good_guidance.png"].axes if ax.axison} == {"log"}


def _overlay(ax):
    return [a for a in ax.get_children() if a.get_gid() == figures.OVERLAY]


def _tiles(fig):
    """The image tiles of a field figure (colourbars are narrower than half an inch)."""
    return [ax for ax in fig.axes if ax.axison and ax.get_position().width * fig.get_size_inches()[0] > 0.5]


def _tile(fig, title):
    return next(ax for ax in fig.axes if ax.get_title() == title)


def test_field_figures_in_physical_coordinates_with_names_units_and_the_observation(rendered):
    drawn = dict(DRAWN)
    built = {name: tasks.get(name, **options) for name, options in FIELD_TASKS.items()}
    for name, task in built.items():
        samples, moments = drawn[f"samples_{name}_s_case0.png"], drawn[f"moments_{name}_s_case0.png"]
        channel = task.channels[0]
        bars = [ax.get_ylabel().replace("\n", " ") for ax in samples.axes + moments.axes]
        assert f"{channel.name} [{channel.unit}]" in bars, (name, bars)
        assert f"mean of {channel.name} [{channel.unit}]" in bars, (name, bars)
        assert f"std difference [{channel.unit}]" in bars, (name, bars)
        truth = _tile(samples, "truth")
        assert len(_tiles(moments)) == 6 and all(_overlay(ax) for ax in _tiles(moments))
        assert len(_tiles(samples)) == 9 and [ax for ax in _tiles(samples) if _overlay(ax)] == [truth]
        assert truth.get_xlabel() and truth.get_ylabel() and truth.get_xticks().size >= 2
    # point sensors: one marker at the physical position of each observed point, (x, y) = grid points
    darcy = built["darcy"]
    p = darcy.grid.points()
    i, j = np.divmod(np.asarray(darcy.observation.indices), darcy.grid.n)
    (markers,) = _overlay(_tile(drawn["samples_darcy_s_case0.png"], "truth"))
    np.testing.assert_allclose(np.stack(markers.get_data(), 1), np.stack([p[j], p[i]], 1))
    # CCS: radius in m on a log axis, depth downward, dashed lines at the wells' cell centres
    ccs, truth = built["ccs"], _tile(drawn["samples_ccs_s_case0.png"], "truth")
    assert truth.get_xscale() == "log" and truth.get_xlabel() == "r [m]" and truth.get_ylabel() == "depth [m]"
    assert truth.get_ylim()[0] > truth.get_ylim()[1] and truth.get_xlim() == tuple(ccs.grid.faces()[[0, -1]])
    wells = [line.get_xdata()[0] for line in _overlay(truth)]
    np.testing.assert_allclose(wells, ccs.grid.centres()[[0, 10]])
    # log-normal draws spanning decades: logarithmic colour scale
    assert any(isinstance(ax.images[0].norm if ax.images else ax.collections[0].norm,
                          matplotlib.colors.LogNorm) for ax in [truth])  # fmt: skip
    # a dense mask (BL hole): the missed cells hatched; the caption says which
    samples = drawn["samples_darcy_field_s_case0.png"]
    (hatch,) = _overlay(_tile(samples, "truth"))
    assert hatch.hatches == ["////"] and any("misses" in t.get_text() for t in samples.texts)


def test_field_layouts_of_every_registered_kind():
    """Coefficient unknowns have no field layout; pooled 1 x 1 and full masks draw nothing."""
    from posteriorjax.tasks import interface

    assert figures.field_layout(interface.build("interface_meltpool", resolution=16)) is None
    lay = figures.field_layout(tasks.get("darcy_lowres", resolution=16))
    assert lay.blocks is None and lay.points is None and "every cell" in lay.caption
    with pytest.raises(ValueError, match=r"layout: expected fields of shape \(1, 16, 16\)"):
        figures.samples_figure("/dev/null", np.zeros((2, 1, 8, 8)), np.zeros((2, 1, 8, 8)), layout=lay)
    assert figures.task_layout("toy", {}) is None  # not a registered task
    # pooling 32 -> 16: 15 interior block edges per axis, 2 cells apart
    task = tasks.get("poisson_lowres", resolution=32)
    fig = figures.style.new(2, 2)
    ax = fig.add_subplot()
    figures.fields._overlay(ax, figures.field_layout(task))
    vlines, hlines = _overlay(ax)
    edges = [seg[0, 0] for seg in vlines.get_segments()]
    assert len(edges) == len(hlines.get_segments()) == 15
    np.testing.assert_allclose(np.diff(edges), 2 * task.grid.spacing)


def test_mira_figure_draws_the_calibration_tables_bootstrap_band(tmp_path, monkeypatch):
    """The grey box is the table's calibrated mean -+ 2 bootstrap se (not the wider single-region
    band, drawn dashed beside it), and the filled markers are the table's daggers."""
    rng = np.random.default_rng(3)
    recs = [
        record("t", s, c, {}, {"mira_statistic": float(rng.normal(mu, 0.03))}, num_samples=20)
        for s, mu in (("calibrated", 0.651), ("overconfident", 0.60)) for c in range(40)
    ]  # fmt: skip
    drawn, save = {}, figures.style.save
    keep = lambda fig, path: drawn.setdefault("f", fig) and save(fig, path)  # noqa: E731
    monkeypatch.setattr(figures.style, "save", keep)
    figures.mira_figure(tmp_path / "mira.png", recs)
    ax = drawn["f"].axes[0]
    rows = sorted(tables.calibration_rows(recs), key=lambda r: r["sampler"])
    boxes = [c for c in ax.collections if c.get_gid() == "mira_band"]
    single = [ln for ln in ax.lines if ln.get_gid() == "mira_single_region"]
    markers = [ln for ln in ax.lines if ln.get_gid() == "mira_score"]
    assert len(boxes) == len(markers) == 2 and len(single) == 4
    for i, r in enumerate(rows):
        y = boxes[i].get_paths()[0].vertices[:, 1]
        lo, hi = r["mira_expected"] - 2 * r["mira_se_boot"], r["mira_expected"] + 2 * r["mira_se_boot"]
        np.testing.assert_allclose([y.min(), y.max()], [lo, hi], rtol=1e-12)
        half = 2 * r["mira_se"]  # single-region: wider than the bootstrap's
        assert half > 2 * r["mira_se_boot"]
        np.testing.assert_allclose(sorted(ln.get_ydata()[0] for ln in single[2 * i : 2 * i + 2]),
                                   [r["mira_expected"] - half, r["mira_expected"] + half])  # fmt: skip
        filled = markers[i].get_markerfacecolor() != "white"
        assert filled == (not lo <= r["mira"] <= hi)
    assert [r["sampler"] for r in rows] == ["calibrated", "overconfident"]
    filled = [m.get_markerfacecolor() != "white" for m in markers]
    assert filled == [False, True]
    assert "† " in tables.calibration_table(rows).split("overconfident")[1].split("\n")[0]


def test_tarp_figure_only_with_enough_conditions(tmp_path):
    rng = np.random.default_rng(3)
    metrics = lambda: {"tarp_credibility": float(rng.uniform()), "mira_statistic": 0.6}  # noqa: E731
    for cases, drawn in (
        (tables.TARP_MIN_CONDITIONS - 1, False),
        (tables.TARP_MIN_CONDITIONS, True),
    ):
        w = tmp_path / f"w{cases}"
        w.mkdir()
        recs = [record("t", "s", c, {}, metrics()) for c in range(cases)]
        (w / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        assert ("tarp_t.png" in [p.name for p in figures.render(w)]) == drawn


def subset(source: Path, target: Path, keep) -> Path:
    """A workdir holding only the records of `source` for which `keep(record)` holds."""
    target.mkdir(parents=True)
    lines = [line for line in (source / "results.jsonl").read_text().splitlines() if keep(json.loads(line))]
    (target / "results.jsonl").write_text("\n".join(lines) + "\n")
    return target


def test_render_draws_only_what_its_inputs_allow(rendered, tmp_path):
    assert figures.render(tmp_path) == []
    # records alone (no config, no stored samples): the noise levels come from the labels
    bare = subset(rendered[0], tmp_path / "bare", lambda r: r["task"] != "toy")
    assert sorted(p.name for p in figures.render(bare)) == [
        "curves_toy_noise=0.01_good_guidance.png",
        "curves_toy_noise=0.1_good_guidance.png",
        "optimum_toy_good_guidance.png",
    ]


def test_noise_levels_from_several_workdirs(tmp_path):
    """One workdir per noise level (the studies' layout): the levels come from each config."""
    workdirs = []
    for i, sigma in enumerate((1.0, 0.1, 0.01)):
        w = tmp_path / f"w{i}"
        w.mkdir()
        (w / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in noise_records("toy", i)))
        (w / "config.json").write_text(json.dumps({"tasks": {"toy": {"noise_std": sigma}}}))
        workdirs.append(w)
    with pytest.raises(ValueError, match="same base task 'toy' and noise level 1.0"):
        figures.render(workdirs[0], noise_workdirs=[workdirs[0]])
    with pytest.raises(FileNotFoundError, match="noise_workdirs"):
        figures.render(workdirs[0], noise_workdirs=[tmp_path / "missing"])
    assert not list((workdirs[0] / "figures").glob("*.png"))  # errors come before any drawing
    names = [p.name for p in figures.render(workdirs[0], noise_workdirs=workdirs[1:])]
    assert names == ["curves_toy_good_guidance.png", "optimum_toy_good_guidance.png"]


def test_field_figures_on_non_finite_samples(tmp_path):
    rng = np.random.default_rng(2)
    samples = rng.normal(size=(5, 1, 8, 8))
    samples[0] = np.nan
    ref = rng.normal(size=(7, 1, 8, 8))
    for fn in (figures.samples_figure, figures.moments_figure):
        w, h = png_size(fn(tmp_path / f"{fn.__name__}.png", samples, ref))
        assert w > 100 and h > 100
    with pytest.raises(ValueError, match="samples: expected member shape"):
        figures.moments_figure(tmp_path / "x.png", samples[:, :, :4], ref)
    with pytest.raises(ValueError, match="ref_weights"):
        figures.samples_figure(tmp_path / "x.png", samples, ref, np.ones(7))


def test_representative_members_follow_the_weights():
    w = np.asarray([0.0, 0.5, 0.0, 0.5])
    np.testing.assert_array_equal(figures.representative_members(w, 4), [1, 1, 3, 3])


def test_report_entry_point(tmp_path, rendered, capsys):
    from experiments import report

    # the diverged sampler (non-finite metrics) and one guidance curve
    workdir = subset(rendered[0], tmp_path / "w", lambda r: r["sampler"] == "diverged" or "0.1" in r["task"])
    flags.FLAGS(["report", f"--workdir={workdir}"])
    try:
        report.main(["report"])
        printed = capsys.readouterr().out
        summary = (workdir / "summary.md").read_text()
        assert "### toy\n" in summary and "### toy@noise=0.1" in summary and "NaN" in summary
        assert "## Calibration over cases" in summary
        calib = json.loads((workdir / "calibration.json").read_text())
        assert {(r["task"], r["sampler"]) for r in calib} == {("toy", "diverged"), ("toy@noise=0.1", "good")}
        assert summary.strip() in printed
        header = (workdir / "results.csv").read_text().splitlines()[0]
        assert header.startswith("task,sampler,case") and "hp.guidance" in header
        figs = sorted(p.name for p in (workdir / "figures").glob("*.png"))
        assert figs == ["coverage_toy.png", "curves_toy_noise=0.1_good_guidance.png"]
        assert all(str(workdir / "figures" / p) in printed for p in figs)
        flags.FLAGS(["report", f"--workdir={tmp_path / 'empty'}"])
        with pytest.raises(FileNotFoundError, match="results.jsonl"):
            report.main(["report"])
    finally:
        flags.FLAGS.unparse_flags()


def test_calibration_choice_keeps_a_diverged_grid_value_from_flattening_the_rest(tmp_path, monkeypatch):
    """A calibration curve with a diverged (1e17) and non-finite values: log y where a curve spans
    decades, one x axis over the whole grid in every panel, an x marker per non-finite value."""
    nan = float("nan")
    curve = {
        "mean_error": [0.31, 0.21, 8e17, nan, nan],
        "std_error": [0.99, 0.58, nan, nan, nan],
        "mmd": [0.55, 0.44, nan, nan, nan],
        "swd": [1.5, 0.66, 2.5e19, nan, nan],
        "spectral_error": [0.13, 0.098, nan, nan, nan],
    }
    result = {
        "task": "t", "sampler": "s", "hparam": "guidance", "rule": "rank_mean", "chosen": 480.0,
        "values": [160.0, 480.0, 1600.0, 4800.0, 16000.0], "curve": curve, "score": [2.0, 1.0, 3.6, 4.2, 4.2],
    }  # fmt: skip
    drawn, save = {}, figures.style.save
    monkeypatch.setattr(
        figures.style, "save", lambda fig, path: drawn.setdefault("fig", fig) and save(fig, path)
    )
    path = figures.calibration_choice_figure(tmp_path / "s.png", result)
    panels = {ax.get_title(): ax for ax in drawn["fig"].axes if ax.axison}
    assert _inside(drawn["fig"], path)
    assert panels["Mean"].get_yscale() == panels["SWD"].get_yscale() == "log"
    assert panels["MMD"].get_yscale() == "linear"
    for ax in panels.values():
        assert ax.get_xscale() == "log" and ax.get_xlim()[0] < 160 and ax.get_xlim()[1] > 16000
    markers = [line for line in panels["Std"].lines if line.get_marker() == "x"]
    assert len(markers) == 1 and len(markers[0].get_xdata()) == 3
