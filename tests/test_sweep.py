import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import jax.random as jr
import ml_collections
import numpy as np
import pytest

from posteriorjax import parallel, random_fields, sweep, tasks
from posteriorjax.metrics import suite
from posteriorjax.reference import registry
from posteriorjax.reference import store as artifact_store
from posteriorjax.reference.registry import DEFAULTS as REFERENCE_DEFAULTS
from posteriorjax.report import stage, tables
from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.sweep import migrate, pair
from posteriorjax.sweep import samples as sweep_samples
from posteriorjax.sweep.networks import NetworkSpec, network_config
from posteriorjax.sweep.program import case_program, expand
from posteriorjax.sweep.samples import save_samples
from posteriorjax.sweep.settings import settings
from posteriorjax.sweep.statistics import program_data, tarp_normalization
from posteriorjax.sweep.store import (
    Record,
    ResultsFile,
    assemble,
    canonical_number,
    done_everywhere,
    jsonable,
    prepare_workdir,
    read_records,
)

RES = 8


class FlipPrior(AbstractSampler):
    """Test sampler: Darcy prior draws, the first `flip` members negated (outside the solver's domain).

    A stand-in for a learned sampler whose raw permeability samples can be non-positive.
    """

    def _sample(self, key, y_obs, num_samples, hparams):
        x = jax.vmap(self.task.prior.sample)(jr.split(key, num_samples))
        sign = jnp.where(jnp.arange(num_samples) < hparams["flip"], -1.0, 1.0)
        return x * sign[:, None, None, None] + 0.0 * y_obs.sum()


def _setup():
    task = tasks.get("darcy", resolution=RES, num_sensors=6)
    sampler = FlipPrior(task, {"flip": 0.0})
    cases = task.cases(0, 2)
    ref = jnp.stack([random_fields.sample_batch(task.prior, jr.key(i), 12) for i in range(2)])
    weights = jnp.full((2, 12), 1.0 / 12)
    return task, sampler, cases, (ref, weights)


@pytest.fixture(scope="module")
def setup():
    return _setup()


def test_expand_is_the_full_product_and_validates():
    grid = expand(2, {"shrink": [0.0, 1.0, 3.0]}, [0, 5], {"shrink": 0.0, "other": 2.0})
    assert grid.size == 2 * 3 * 2
    assert set(zip(grid.case.tolist(), grid.hparams["shrink"].tolist(), grid.seed.tolist(), strict=True)) == {
        (c, s, d) for c in (0, 1) for s in (0.0, 1.0, 3.0) for d in (0, 5)
    }
    np.testing.assert_array_equal(grid.hparams["other"], 2.0)
    assert len(set(grid.ids())) == grid.size
    with pytest.raises(ValueError, match="no values"):
        expand(2, {"shrink": []}, [0], {"shrink": 0.0})
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        expand(2, {"guidance": [1.0]}, [0], {"shrink": 0.0})


GRID_AXES = {"flip": [0.0, 2.0]}
SEEDS = [0, 1]
KWARGS = dict(num_samples=6, seed=0, batch_size=2, diagnostics=("pde_residual",))
COMPARED = ("mean_error", "mmd", "swd", "crps", "mira_statistic", "tarp_credibility", "obs_misfit")


def _full_run(task, sampler, cases, reference):
    grid = expand(2, GRID_AXES, SEEDS, sampler.defaults)
    return grid, sweep.run_pair(task, sampler, cases, reference, grid, chunk_size=4, **KWARGS)


@pytest.fixture(scope="module")
def full(setup):
    """The sweep the engine tests check: Darcy, 2 cases x flip {0, 2} x seeds {0, 1}, chunks of 4.

    Chunks (and per-device shares) that are multiples of `batch_size` keep `lax.map` to one
    compiled body (a remainder batch would compile the whole program a second time).
    """
    return _full_run(*setup)


def _assert_same(a, b, rtol):
    for name in COMPARED + ("num_invalid", "pde_residual"):
        va, vb = a[name], b[name]
        if va is None or vb is None:  # NaN is stored as None
            assert va is None and vb is None, name
        elif name == "pde_residual":  # ~1e-5: the float32 CG tolerance, so compare absolutely
            np.testing.assert_allclose(va, vb, atol=1e-6, err_msg=name)
        else:
            np.testing.assert_allclose(va, vb, rtol=rtol, err_msg=name)


def test_one_program_equals_per_configuration_loop(setup, full):
    task, sampler, cases, reference = setup
    grid, records = full
    assert len(records) == grid.size == 8
    assert len({r["compile_time_s"] for r in records}) == 1  # one compilation for the whole axis
    one = jax.jit(case_program(task, sampler, 6, seed=0, diagnostics=("pde_residual",)))
    data = program_data(task, cases, reference, seed=0)
    for i, rec in enumerate(records):
        config = {"case": grid.case[i], "seed": grid.seed[i], "hparams": {"flip": grid.hparams["flip"][i]}}
        expected = {k: jsonable(v) for k, v in one(data, config).items()}
        _assert_same(rec["metrics"], expected, rtol=2e-5)


class NaNMembers(AbstractSampler):
    """Test sampler: Darcy prior draws, the first `num_nan` members NaN (a diverged run)."""

    def _sample(self, key, y_obs, num_samples, hparams):
        x = jax.vmap(self.task.prior.sample)(jr.split(key, num_samples))
        diverged = jnp.arange(num_samples) < hparams["num_nan"]
        return jnp.where(diverged[:, None, None, None], jnp.nan, x) + 0.0 * y_obs.sum()


def test_published_projection_keeps_diverged_members_counted(setup):
    """Under the published Darcy projection a NaN member comes out as the all-3 field (scored, as
    published), and `num_nonfinite` still counts it; without the projection the scores are NaN."""
    task, _, cases, reference = setup
    data = program_data(task, cases, reference, seed=0)
    config = {"case": 0, "seed": 0, "hparams": {"num_nan": jnp.asarray(2.0)}}
    projected = NaNMembers(task, {"num_nan": 0.0}, discrete_values=(3.0, 12.0))
    raw = NaNMembers(task, {"num_nan": 0.0})
    out = jax.jit(case_program(task, projected, 6, seed=0))(data, config)
    assert int(out["num_nonfinite"]) == 2 and int(out["num_invalid"]) == 0
    assert np.isfinite(float(out["mean_error"])) and np.isfinite(float(out["obs_misfit"]))
    samples = projected.sample_traced(jr.key(0), data["y_obs"][0], 6, {"num_nan": jnp.asarray(2.0)})
    np.testing.assert_array_equal(samples[:2], 3.0)
    out = jax.jit(case_program(task, raw, 6, seed=0))(data, config)
    assert int(out["num_nonfinite"]) == 2 and np.isnan(float(out["mean_error"]))


def test_invalid_members_are_counted_not_fatal(full):
    """Negative Darcy permeabilities: NaN misfit and PDE residual, the right count, other metrics kept."""
    grid, records = full
    for r in records:
        m, flipped = r["metrics"], r["hparams"]["flip"] == 2.0
        assert m["num_invalid"] == (2 if flipped else 0) and m["num_nonfinite"] == 0
        for name in ("obs_misfit", "pde_residual", "pde_residual_mean"):
            assert (m[name] is None) == flipped, (name, r["config_id"])
        for name in COMPARED[:-1] + ("std_error", "spectral_error", "rel_l2_mean", "coverage_error"):
            assert m[name] is not None and np.isfinite(m[name]), (name, r["config_id"])
    for r in records:
        if r["hparams"]["flip"] == 0.0:  # valid members: the exact physics states solve the PDE
            assert r["metrics"]["obs_misfit"] > 0 and r["metrics"]["pde_residual"] < 1e-3
    rows = {
        line.split("|")[2].strip(): line
        for line in tables.main_table(records).splitlines()
        if line.startswith("|") and "flip=" in line  # table rows, not the best-configuration lines
    }
    assert rows["flip=2"].endswith("| 0 | 8 |") and rows["flip=0"].endswith("| 0 | 0 |")  # 2 cases x 2 seeds


def test_resume_with_another_chunk_size_completes_without_duplicates(setup, full, tmp_path):
    """Kill mid-sweep, resume with chunks of 2 instead of 4: exactly the uninterrupted records."""
    task, sampler, cases, reference = setup
    grid, records = full
    path = tmp_path / "results.jsonl"
    ResultsFile(path, "c").append(records[:4])  # the first chunk finished before the kill ...
    with open(path, "a") as f:
        f.write(records[4].to_json()[:40])  # ... and the second was torn mid-write
    resumed = ResultsFile(path, "c")
    assert len(resumed.records) == 4
    nets = {"model": {"kind": "prior", "network": "prior-0123456789ab", "scores": {"mmd": 0.5}}}
    new = sweep.run_pair(
        task, sampler, cases, reference, grid, results=resumed, chunk_size=2, networks=nets, **KWARGS
    )
    assert len(new) == grid.size - 4 and len({r["compile_time_s"] for r in new}) == 1
    stored = [json.loads(line) for line in path.read_text().splitlines()]
    # records of a sampler with networks carry them; the lines before stay as they were
    assert [r.get("networks") for r in stored] == [None] * 4 + [nets] * (grid.size - 4)
    assert sorted(r["config_id"] for r in stored) == sorted(r["config_id"] for r in records)
    by_id = {r["config_id"]: r for r in records}
    for r in stored:  # the chunk size changes nothing
        _assert_same(r["metrics"], by_id[r["config_id"]]["metrics"], rtol=1e-6)


def _old_id(grid, i, numpy2):
    """A config id as written before canonical ids: values in numpy 2's or numpy 1's repr."""
    vals = [(n, str(grid.hparams[n][i])) for n in sorted(grid.hparams)]  # str: the same in numpy 1 and 2
    body = ";".join(f"{n}=np.float32({v})" if numpy2 else f"{n}={v}" for n, v in vals)
    return f"case={grid.case[i]};seed={grid.seed[i]};" + body


def test_config_ids_are_canonical_numbers():
    grid = expand(1, {"guidance": [0.1, 2.0, 1e-5]}, [3], {"guidance": 1.0, "inflation": 1.0})
    assert grid.ids() == [
        f"case=0;seed=3;guidance={g};inflation=1.0" for g in ("0.1", "2.0", "1e-05")
    ]  # no numpy repr (`np.float32(0.1)`), no float32 noise (0.10000000149011612)
    for numpy2 in (True, False):
        assert [migrate.migrate_config_id(_old_id(grid, i, numpy2)) for i in range(3)] == grid.ids()
    with pytest.raises(ValueError, match="value: expected a scalar"):
        canonical_number(np.zeros(2))


def test_an_unreadable_sample_file_is_left_to_the_healing_reader(tmp_path):
    """The earlier-format check lists a readable sample file with numpy-repr ids and skips a
    truncated one (the sweep's healing sets that aside and recomputes it) instead of raising."""
    old, torn = tmp_path / "samples" / "t" / "old.npz", tmp_path / "samples" / "t" / "torn.npz"
    old.parent.mkdir(parents=True)
    np.savez(old, samples=np.zeros((1, 2)), config_id=np.asarray(["np.int64(3)"]))
    np.savez(torn, samples=np.zeros((64, 64)), config_id=np.asarray(["3"]))
    torn.write_bytes(torn.read_bytes()[:200])
    assert migrate.earlier_formats(tmp_path) == [f"{old}: config ids in numpy's repr"]


def test_workdir_with_old_ids_is_refused_then_migrated_without_recomputing(
    setup, full, tmp_path, monkeypatch
):
    """Records and stored samples with numpy-repr ids: the reader leaves the ids as written (they
    match no configuration), `sweep.migrate` lists and rewrites both, then nothing is recomputed."""
    task, sampler, cases, reference = setup
    grid, records = full
    path = tmp_path / "results.jsonl"
    scored = {"reference": {"set": "heldout", "method": "exact", "sha256": "0"}}  # not pre-split
    old = [
        {**r, "config_id": _old_id(grid, r["index"], numpy2=r["index"] % 2 == 0), "scored": scored}
        for r in records
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    n_old = sum(o["config_id"] != r["config_id"] for o, r in zip(old, records, strict=True))
    assert n_old >= len(old) // 2  # numpy 2's repr at least; numpy 1's str is mostly canonical already
    assert migrate.earlier_formats(tmp_path) == [f"{path}: {n_old} record(s) with config ids in numpy's repr"]
    assert [r.config_id for r in read_records(path)] == [o["config_id"] for o in old]  # as written
    with pytest.raises(ValueError, match=r"(?s)earlier version.*python -m experiments\.migrate --workdir="):
        sweep.run(_tiny_config(), tmp_path, progress=False)  # refused before anything is built
    assert not (tmp_path / "config.json").exists()
    done = migrate.migrate_results(path, "c")
    assert done["rewritten"] == len(old) and done["set_aside"] == 0
    assert (tmp_path / migrate.ASIDE).read_text() == "".join(json.dumps(r) + "\n" for r in old)
    assert migrate.earlier_formats(tmp_path) == []
    resumed = ResultsFile(path, "c")
    assert resumed.done((task.name, sampler.name)) == set(grid.ids())
    assert [r.config_id for r in resumed.records] == [r["config_id"] for r in records]
    new = sweep.run_pair(task, sampler, cases, reference, grid, results=resumed, chunk_size=4, **KWARGS)
    assert new == []
    assert len(path.read_text().splitlines()) == grid.size
    # stored samples of case 0 under old ids: kept (sampling would fail here) and rewritten with new ids
    samples, wanted = tmp_path / "samples" / "t" / "s.npz", [i for i in range(grid.size) if grid.case[i] == 0]
    samples.parent.mkdir(parents=True)
    stored = np.random.default_rng(0).normal(size=(len(wanted), 6, 1, RES, RES)).astype(np.float32)
    np.savez(samples, samples=stored, config_id=np.asarray([_old_id(grid, i, True) for i in wanted]))
    assert migrate.earlier_formats(tmp_path) == [f"{samples}: config ids in numpy's repr"]
    assert migrate.migrate_samples(samples) and not migrate.migrate_samples(samples)
    monkeypatch.setattr(
        sweep_samples, "sample_program", lambda *a, **k: pytest.fail("recomputed stored samples")
    )
    save_samples(samples, sampler, cases, grid, num_samples=6, seed=0, max_case=1, batch_size=2)
    with np.load(samples) as z:
        assert z["config_id"].tolist() == [grid.ids()[i] for i in wanted]
        np.testing.assert_array_equal(z["samples"], stored)


def _tiny_config(**overrides):
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.seeds = (0,)
    config.num_cases = 2
    config.num_samples = 4
    config.chunk_size = 4
    config.batch_size = 2
    config.overwrite = False
    config.tasks = {"poisson_fixed": {"resolution": RES, "num_sensors": 6}}
    config.reference = sweep.reference_config("exact", num_samples=8)
    config.samplers = {"prior": {"options": {}, "axes": {}}}
    for name, value in overrides.items():
        config[name] = value  # replaces a section (update() would merge into it)
    return config


def test_bad_configs_fail_before_compute(tmp_path):
    cases = [
        (dict(tasks={"nope": {}}), "unknown task"),
        (dict(samplers={"nope": {}}), "unknown sampler"),
        (dict(reference=ml_collections.ConfigDict({"method": "oracle"})), "reference.method"),
        (dict(reference=sweep.reference_config("rejection", eps=-1.0)), "reference.eps"),
        (dict(reference=sweep.reference_config("pcn", mcmc_method="hmc")), "reference.mcmc_method"),
        (dict(samplers={"prior": {"axis": {}}}), r"samplers.prior: unknown key"),
        (dict(samplers={"dps": {"networks": {"model": "posterior"}}}), r"networks.model.kind"),
        (dict(samplers={"dps": {"networks": {"denoiser": "prior"}}}), "no option 'denoiser'"),
        (dict(samplers={"dps": {"networks": {"model": {"kind": "prior", "num_steps": 0}}}}), "num_steps"),
        (
            dict(samplers={"dps": {"networks": {"model": {"kind": "prior", "pretrain": {"kind": "joint"}}}}}),
            r"networks.model.pretrain.kind: expected the fine-tuned network's 'prior'",
        ),
        (
            dict(
                samplers={
                    "dps": {"networks": {"model": {"kind": "prior", "training": {"diffusion": {"nois": 1}}}}}
                }
            ),
            r"networks.model.training: 'diffusion.nois' is not a setting",
        ),
        (
            dict(
                samplers={
                    "dps": {"networks": {"model": {"kind": "prior", "training": {"train": {"num_steps": 3}}}}}
                }
            ),
            r"'train.num_steps' is set by the network spec's num_steps",
        ),
        (
            dict(samplers={"dps": {"networks": {"model": {"kind": "prior", "training": {"train": 3}}}}}),
            r"'train' is not a setting",
        ),
        (dict(samplers={"prior": {"tasks": ("darcy",)}}), r"samplers.prior.tasks: unknown task"),
        (dict(samplers={"prior": {"task_options": {"resolution": 16}}}), "unknown shape"),
        (dict(samplers={"prior": {"task_options": {"num_sensors": 7}}}), "observations"),
        (dict(samplers={"prior": {"axes": {"shrink": ()}}}), "no values"),
        (dict(diagnostics=("pde_residual", "curl")), "config.diagnostics"),
        (dict(tasks={"darcy": {"resolution": RES, "num_sensors": 6}}, diagnostics=("alpha",)), "needs a GRF"),
        (dict(training={"scale": "huge"}), "training.scale"),
        (dict(save_samples=-1), "save_samples"),
        (dict(references={"darcy": sweep.reference_config("pcn")}), r"config.references: unknown task"),
        (
            dict(references={"poisson_fixed": {"method": "pcn", "eps": 1.0, "nope": 1}}),
            "references.poisson_fixed",
        ),
        (dict(references={"poisson_fixed": sweep.reference_config("pcn", num_samples=10)}), "num_chains"),
        (
            dict(tasks={"darcy": {"resolution": RES, "num_sensors": 6}}),
            r"config.reference.method: 'exact' needs",
        ),
    ]
    for overrides, match in cases:
        with pytest.raises(ValueError, match=match):
            sweep.validate(_tiny_config(**overrides))
    s = settings(
        _tiny_config(samplers={"dps": {"options": {"prior": "learned"}, "networks": {"model": "joint"}}})
    )
    (entry,) = s.samplers
    assert entry.networks == {"model": NetworkSpec("joint", {}, None)}
    assert entry.tasks == ("poisson_fixed",)
    assert (s.training_scale, s.training_steps, s.diagnostics, s.save_samples, s.figures) == (
        "tiny",
        None,
        (),
        2,
        True,
    )
    # sampler-level errors (unknown axis, a builder refusing the task) come before the workdir is touched
    for samplers, match in (
        ({"prior": {"axes": {"guidance": (1.0,)}}}, r"samplers.prior \(task 'poisson_fixed'\): axes"),
        ({"eci": {"options": {"prior": "oracle"}}}, r"samplers.eci \(task 'poisson_fixed'\): prior"),
    ):
        with pytest.raises(ValueError, match=match):
            sweep.run(_tiny_config(samplers=samplers), tmp_path / "never", progress=False)
    assert not (tmp_path / "never").exists()
    config = _tiny_config()
    prepare_workdir(tmp_path, config)
    other = _tiny_config(num_samples=5)
    with pytest.raises(ValueError, match="different config"):
        prepare_workdir(tmp_path, other)
    prepare_workdir(tmp_path, config)  # the same config resumes


def test_study_progress_eta_counts_every_stage(console_log):
    """ETA = configurations left x mean run time + a compilation per pair to start + each other
    stage (references, training, storing samples) at its mean time for every run still to come."""
    from posteriorjax import console

    bar = console.StudyProgress(pairs=3, total=6, done=0)
    bar.add("reference", 4.0, of=2)  # one of two tasks' references built, 4 s
    bar.start_pair("a / x", 2, 2)
    bar.add("train", 6.0, of=3)
    bar.chunk(2, compile_s=10.0, run_s=2.0)
    # 4 configurations x 1 s + 2 pairs x 10 s compile + 1 reference x 4 s + 2 trainings x 6 s
    assert bar.eta() == console.duration(4 + 20 + 4 + 12)
    with bar.stage("samples", "storing the samples of 1 configuration(s)", of=3):
        pass
    shown = console_log.stream.getvalue()
    assert "[pair 1/3] a / x: storing the samples of 1 configuration(s)" in shown
    assert "[pair 1/3] a / x: samples in 0 s | study 2/6 | ETA 40 s" in shown
    assert "| compile 10 s, run 2 s, reference 4 s, train 6 s | ETA 40 s" in shown


def test_run_writes_tables_samples_and_resumes(tmp_path, monkeypatch, console_log):
    """A misspecified sampler, diagnostics, stored samples, cached references, the report stage
    after it (tables, the figures hook), resume; the console under CI: a line per stage, the
    study's progress with an ETA, no third-party INFO."""
    rendered = []
    monkeypatch.setattr(stage.report_figures, "render", lambda workdir, **_: rendered.append(workdir) or [])
    config = _tiny_config(
        samplers={
            "prior": {},
            # the sampler's model has a smoother prior than the one the cases come from
            "smooth": {"sampler": "prior", "task_options": {"alpha": 4.0}, "tasks": ("poisson_fixed",)},
        },
        diagnostics=("pde_residual", "alpha"),
        save_samples=1,
    )
    first = sweep.run(config, tmp_path)
    assert not (tmp_path / "summary.md").exists()  # the sweep stores records; the report is a stage
    stage.write(tmp_path)
    assert rendered == [tmp_path]  # `figures` defaults to the stored config's (True)
    shown = console_log.stream.getvalue().splitlines()
    assert shown and all("/posteriorjax/" in line or line.startswith(("WARNING", "ERROR")) for line in shown)
    assert any("[reference] poisson_fixed: exact" in line for line in shown)
    progress = [line for line in shown if "[pair " in line and "ETA" in line]
    assert "[pair 1/2] poisson_fixed / prior: 2/2 configurations | study 2/4 | compile" in progress[0]
    assert "ETA unknown" not in progress[0] and progress[-1].endswith("ETA 0 s")
    assert "[pair 2/2] poisson_fixed / smooth: 2/2 configurations | study 4/4" in progress[-2]
    # storing samples is a stage of its own: announced, timed and counted in the ETA
    storing = "[pair 1/2] poisson_fixed / prior: storing the samples of 1 configuration(s)"
    assert any(storing in line for line in shown)
    assert "[pair 2/2] poisson_fixed / smooth: samples in " in progress[-1]
    assert {p.name for p in tmp_path.iterdir()} >= {
        "results.jsonl",
        "results.csv",
        "summary.md",
        "config.json",
        "provenance.json",
        "references.json",
        "calibration.json",
        "references",
        "samples",
    }
    summary = (tmp_path / "summary.md").read_text()
    assert "| prior |" in summary and "| smooth |" in summary and "Calibration over cases" in summary
    assert "## Reference posteriors" in summary and "| poisson_fixed | exact | exact Gaussian" in summary
    assert len(first) == 4
    by = {(r["sampler"], r["case"]): r["metrics"] for r in first}
    for m in by.values():
        assert m["pde_residual"] < 1e-3 and m["pde_residual_mean"] < 1e-3  # exact physics states
        assert 0.0 <= m["tarp_credibility"] <= 1.0 and 0.0 <= m["mira_statistic"] <= 1.0
    # the smoother sampler prior is seen in the recovered GRF exponent; the truth is the same
    for case in (0, 1):
        assert by[("smooth", case)]["alpha"] > by[("prior", case)]["alpha"] + 0.5
        assert by[("smooth", case)]["alpha_truth"] == by[("prior", case)]["alpha_truth"]
    manifest, ref = artifact_store.load_references(tmp_path / "references" / "poisson_fixed.heldout")
    assert ref["ref_samples"].shape == (2, 8, 1, RES, RES) and ref["ref_weights"].shape == (2, 8)
    assert ref["x_true"].shape == (2, 1, RES, RES) and ref["y_obs"].shape == (2, 6)
    assert manifest["method"] == "exact" and len(manifest["task_hash"]) == 16
    assert sweep.store.read_reference(tmp_path, "poisson_fixed")["ref_samples"].shape == (2, 8, 1, RES, RES)
    stored = np.load(tmp_path / "samples" / "poisson_fixed" / "smooth.npz")
    assert stored["samples"].shape == (1, 4, 1, RES, RES)
    assert stored["case"].tolist() == [0] and stored["config_id"].tolist() == [first[2]["config_id"]]
    assert set(stored.files) == {"samples", "case", "seed", "config_id"}  # no hyperparameters
    again = sweep.run(config, tmp_path)
    rerun = console_log.stream.getvalue().splitlines()[len(shown) :]
    assert "[pair 2/2] poisson_fixed / smooth: all 2 configurations on disk" in "\n".join(rerun)
    assert len(again) == len(first) == 4
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 4
    np.testing.assert_array_equal(np.load(tmp_path / "samples" / "poisson_fixed" / "smooth.npz")["samples"],
                                  stored["samples"])  # fmt: skip


def test_run_builds_each_sampler_on_its_tasks_and_model(tmp_path, monkeypatch):
    """`tasks` restricts a sampler's pairs; `task_options` change the sampler's task, not the cases."""
    calls = []

    def fake_run_pair(task, sampler, cases, reference, grid, **kwargs):
        calls.append((kwargs["labels"]["sampler"], task.config_dict(), sampler.task.config_dict()))
        return []

    def fake_reference(rc, task, cases, key, directory, **kwargs):
        methods[task.name] = (rc["method"], rc["num_samples"], rc["eps"], directory.name)
        return np.zeros((2, 8, 1, RES, RES)), np.full((2, 8), 1 / 8), {"task": task.config_dict()}

    methods = {}

    built = []
    real_get = tasks.get

    def counted_get(name, **options):
        built.append(json.dumps([name, options], sort_keys=True))
        return real_get(name, **options)

    monkeypatch.setattr(sys.modules["posteriorjax.sweep.run"], "run_pair", fake_run_pair)
    monkeypatch.setattr(registry, "load_or_build", fake_reference)
    monkeypatch.setattr(tasks, "get", counted_get)
    config = _tiny_config(
        tasks={
            "poisson_fixed": {"resolution": RES, "num_sensors": 6},
            "poisson_fixed_lowres": {"resolution": RES},
            "darcy": {"resolution": RES, "num_sensors": 6},
        },
        # a task's own reference section replaces config.reference (exact) for that task only
        references={"darcy": sweep.reference_config("rejection", num_samples=16, eps=1e-3)},
        samplers={
            "prior": {},
            "noisy": {"sampler": "prior", "task_options": {"noise_std": 0.1}, "tasks": ("poisson_fixed",)},
        },
        save_samples=0,
        figures=False,
    )
    sweep.run(config, tmp_path, progress=False)
    # the plan builds each task (three true ones, one misspecified variant) exactly once per run
    assert len(built) == len(set(built)) == 4
    assert sorted((label, true["task"]) for label, true, _ in calls) == [
        ("noisy", "poisson_fixed"),
        ("prior", "darcy"),
        ("prior", "poisson_fixed"),
        ("prior", "poisson_fixed_lowres"),
    ]
    for label, true, model in calls:
        assert true["noise_std"] == 1e-4
        assert model == ({**true, "noise_std": 0.1} if label == "noisy" else true)
    assert set(json.loads((tmp_path / "references.json").read_text())) == {
        "poisson_fixed",
        "poisson_fixed_lowres",
        "darcy",
    }
    assert methods == {  # the held-out sets the rows are scored on
        "poisson_fixed": ("exact", 8, 3e-4, "poisson_fixed.heldout"),
        "poisson_fixed_lowres": ("exact", 8, 3e-4, "poisson_fixed_lowres.heldout"),
        "darcy": ("rejection", 16, 1e-3, "darcy.heldout"),
    }
    s = settings(config)
    assert s.references["darcy"] == {
        **REFERENCE_DEFAULTS,
        "method": "rejection",
        "num_samples": 16,
        "eps": 1e-3,
    }
    assert s.references["poisson_fixed"] == s.reference


def test_stored_samples_are_the_scored_ones(setup, full, tmp_path):
    """`save_samples` recomputes exactly the samples the program scored (same keys), without duplicates."""
    task, sampler, cases, reference = setup
    grid, records = full
    path = tmp_path / "s.npz"
    assert save_samples(path, sampler, cases, grid, num_samples=6, seed=0, max_case=1, batch_size=2) == 4
    stored = np.load(path)
    assert stored["samples"].shape == (4, 6, 1, RES, RES)
    assert stored["case"].tolist() == [0, 0, 0, 0]
    assert sorted(stored["hparam_flip"].tolist()) == [0.0, 0.0, 2.0, 2.0]
    by_id = {r["config_id"]: r for r in records}
    for j, cid in enumerate(stored["config_id"]):
        x = jnp.asarray(stored["samples"][j])
        expected = suite.compute(
            x, reference[0][0], reference[1][0], cases.x_true[0], evaluation_field=task.evaluation_field
        )
        np.testing.assert_allclose(by_id[str(cid)]["metrics"]["mmd"], expected["mmd"], rtol=1e-4)
    # a second call keeps the file as it is (nothing recomputed, nothing duplicated)
    save_samples(path, sampler, cases, grid, num_samples=6, seed=0, max_case=1, batch_size=2)
    again = np.load(path)
    assert again["config_id"].tolist() == stored["config_id"].tolist()


def test_assemble_merges_process_files_once(tmp_path):
    """Multi-host: process files are merged into results.jsonl in grid order, each record once."""

    def rec(i, sampler="a"):
        return Record("t", sampler, f"case={i}", i, i, 0, {}, 4, {}, 0.1, 1.0)

    ResultsFile(tmp_path / "results.p0.jsonl", "c").append([rec(0), rec(2), rec(4)])
    ResultsFile(tmp_path / "results.p1.jsonl", "c").append([rec(1), rec(3), rec(0, "b")])
    with open(tmp_path / "results.p1.jsonl", "a") as f:
        f.write(rec(5).to_json()[:20])  # a torn line of a killed process
    store = ResultsFile(tmp_path / "results.jsonl", "c")
    store.append([rec(1)])  # assembled before the kill
    new = assemble(tmp_path, store, ("t", "a"))
    assert [r["index"] for r in new] == [0, 2, 3, 4]
    stored = read_records(tmp_path / "results.jsonl")
    assert sorted(r["index"] for r in stored) == [0, 1, 2, 3, 4]
    assert assemble(tmp_path, store, ("t", "a")) == []
    assert done_everywhere(tmp_path, ("t", "a")) == {f"case={i}" for i in range(5)}


def test_same_numbers_on_four_devices(full):
    """The sharded program on 4 fake CPU devices reproduces the 1-device records."""
    grid, records = full
    script = textwrap.dedent(
        f"""
        import json, sys
        import jax
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_sweep import _full_run, _setup
        _, recs = _full_run(*_setup())
        print(json.dumps({{"devices": jax.device_count(), "records": [r["metrics"] for r in recs]}}))
        """
    )
    flags = "--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0"  # as conftest
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    parallel.reserve_cpu_threads(env)  # 4 device programs need a spare pool thread (see parallel)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["devices"] == 4
    for a, b in zip(out["records"], records, strict=True):
        _assert_same(a, b["metrics"], rtol=1e-5)


def test_network_config_follows_the_spec():
    """Training config of a network spec: the sampler task's options, overrides, steps, a stable hash."""
    spec = NetworkSpec("inverse", {}, None)
    cfg, h0 = network_config("poisson_fixed", {"resolution": 16, "num_sensors": 6}, spec, "tiny")
    assert cfg.kind == "inverse" and cfg.model.options.width == 16  # the tiny network
    assert cfg.task_options.to_dict() == {"resolution": 16, "num_sensors": 6}
    assert cfg.train.num_steps == 300
    assert network_config("poisson_fixed", {"resolution": 16, "num_sensors": 6}, spec, "tiny")[1] == h0
    cfg, h1 = network_config("poisson_fixed", {"resolution": 16, "num_sensors": 6}, spec, "tiny", 20)
    assert cfg.train.num_steps == 20 and h1 != h0
    other = NetworkSpec("inverse", {"resolution": 32, "alpha": 2.5}, 40)
    cfg, h2 = network_config("poisson_fixed", {"resolution": 16, "num_sensors": 6}, other, "full", 20)
    assert cfg.task_options.to_dict() == {"resolution": 32, "num_sensors": 6, "alpha": 2.5}
    assert cfg.train.num_steps == 40 and cfg.model.options.width == 128 and h2 not in (h0, h1)
    # fine-tuning: the pretraining chain is part of the hash, its kind inherited
    spec = {"kind": "inverse", "pretrain": {"task_options": {"resolution": 8}}}
    config = _tiny_config(samplers={"mcd": {"sampler": "mc_dropout", "networks": {"model": spec}}})
    entry = settings(config).samplers[0]
    tuned = entry.networks["model"]
    assert tuned.pretrain == NetworkSpec("inverse", {"resolution": 8})
    _, h3 = network_config("poisson_fixed", {"resolution": 16, "num_sensors": 6}, tuned, "tiny")
    assert h3 not in (h0, h1, h2)
    deeper = dataclasses.replace(tuned, pretrain=dataclasses.replace(tuned.pretrain, num_steps=7))
    assert network_config("poisson_fixed", {"resolution": 16}, deeper, "tiny")[1] != h3
    # training overrides reach the config and the hash, and the pretraining run inherits them
    spec = {
        "kind": "inverse",
        "training": {"model": {"options": {"width": 24}}},
        "pretrain": {"num_steps": 5},
    }
    config = _tiny_config(samplers={"mcd": {"sampler": "mc_dropout", "networks": {"model": spec}}})
    white = settings(config).samplers[0].networks["model"]
    assert white.pretrain == NetworkSpec("inverse", {}, 5, None, {"model.options.width": 24})
    cfg, h4 = network_config("poisson_fixed", {"resolution": 16}, white.pretrain, "tiny")
    assert cfg.model.options.width == 24 and cfg.train.num_steps == 5
    assert (
        h4
        != network_config(
            "poisson_fixed", {"resolution": 16}, dataclasses.replace(white.pretrain, training={}), "tiny"
        )[1]
    )


def test_observation_noise_enters_only_a_noisy_kinds_network_identity():
    """Two tasks differing only in `noise_std` share a prior's, joint's or surrogate's network (trained
    on noise-free draws: its config keeps no noise option, so its hash is the one without it) and
    not the inverse network's (trained on noisy observations)."""
    bare = {"resolution": 16}
    quiet, loud = {**bare, "noise_std": 1e-4}, {**bare, "noise_std": 1e-2}
    for kind in ("prior", "joint", "surrogate"):
        spec = NetworkSpec(kind, {})
        (cfg_q, h_q), (cfg_l, h_l) = (network_config("poisson_fixed", o, spec, "tiny") for o in (quiet, loud))
        assert h_q == h_l == network_config("poisson_fixed", bare, spec, "tiny")[1], kind
        assert cfg_q.task_options.to_dict() == cfg_l.task_options.to_dict() == bare, kind
        # a noise set in the network spec's own task options is dropped alike
        noisy_spec = NetworkSpec(kind, {"noise_std": 0.5})
        assert network_config("poisson_fixed", quiet, noisy_spec, "tiny")[1] == h_q, kind
    spec = NetworkSpec("inverse", {})
    (cfg_q, h_q), (cfg_l, h_l) = (network_config("poisson_fixed", o, spec, "tiny") for o in (quiet, loud))
    assert h_q != h_l and cfg_l.task_options.to_dict() == loud
    # a noisy kind's identity is what it was: the task options as given
    assert network_config("poisson_fixed", bare, spec, "tiny")[1] not in (h_q, h_l)


def test_network_spec_task_training_applies_per_task():
    """`task_training` overrides reach only their task's config and hash; a pretraining run inherits
    them; an explicit warm-up survives the spec's step count; a bad key names the task."""
    spec = {
        "kind": "inverse",
        "num_steps": 50,
        "training": {"train": {"warmup_steps": 40}},
        "task_training": {"darcy": {"model": {"options": {"width": 24}}}},
        "pretrain": {"num_steps": 5},
    }
    parsed = settings(
        _tiny_config(samplers={"mcd": {"sampler": "mc_dropout", "networks": {"model": spec}}})
    ).samplers[0]
    model = parsed.networks["model"]
    assert model.task_training == {"darcy": {"model.options.width": 24}}
    assert model.pretrain.task_training == model.task_training
    darcy, h_darcy = network_config("darcy", {"resolution": 16}, model, "tiny")
    poisson, _ = network_config("poisson", {"resolution": 16}, model, "tiny")
    assert darcy.model.options.width == 24 and poisson.model.options.width == 16
    assert darcy.train.warmup_steps == 40 and darcy.train.num_steps == 50  # not capped at 50 // 5
    plain = dataclasses.replace(model, task_training={})
    assert network_config("darcy", {"resolution": 16}, plain, "tiny")[1] != h_darcy
    # a step count from the sweep (not the spec) caps the warm-up as before
    pretrain, _ = network_config("darcy", {"resolution": 16}, model.pretrain, "tiny", 10)
    assert pretrain.train.num_steps == 5
    capped = dataclasses.replace(model, num_steps=None)
    assert network_config("darcy", {"resolution": 16}, capped, "tiny", 10)[0].train.warmup_steps == 2
    bad = {**spec, "task_training": {"darcy": {"model": {"options": {"wdth": 3}}, "nope": 1}}}
    with pytest.raises(ValueError, match=r"task_training\.darcy"):
        settings(_tiny_config(samplers={"mcd": {"sampler": "mc_dropout", "networks": {"model": bad}}}))


@pytest.mark.slow
def test_networks_are_trained_once_shared_and_reused(tmp_path, console_log):
    """Two samplers asking for the same network share one training run; a rerun only loads it.

    Console: no third-party INFO lines (orbax's checkpoint messages are dropped), one line per
    stage (CI), and the study's progress with an ETA.
    """
    config = _tiny_config(
        tasks={"poisson_fixed": {"resolution": 16, "num_sensors": 6}},
        samplers={
            "mcd": {"sampler": "mc_dropout", "networks": {"model": "inverse"}},
            "mcd_again": {"sampler": "mc_dropout", "networks": {"model": {"kind": "inverse"}}},
        },
        training={"scale": "tiny", "num_steps": 20},
        save_samples=0,
        figures=False,
    )
    first = sweep.run(config, tmp_path)
    shown = console_log.stream.getvalue().splitlines()
    assert any("/orbax/" in path for path in console_log.dropped)  # orbax did talk ...
    assert shown and all("/posteriorjax/" in line or line.startswith(("WARNING", "ERROR")) for line in shown)
    assert not any("/orbax/" in line or "/jax/" in line for line in shown)  # ... and none of it is shown
    assert any("train inverse-" in line and "20 of 20 steps to do" in line for line in shown)
    assert any("train inverse-" in line and "20 steps in" in line for line in shown)
    progress = [line for line in shown if "[pair " in line and "ETA" in line]
    assert "[pair 1/2] poisson_fixed / mcd: 2/2 configurations | study 2/4 | compile" in progress[0]
    assert "[pair 2/2] poisson_fixed / mcd_again: 2/2 configurations | study 4/4" in progress[-1]
    assert progress[-1].endswith("ETA 0 s") and "ETA unknown" not in progress[0]
    (net,) = (tmp_path / "networks" / "poisson_fixed").iterdir()
    assert net.name.startswith("inverse-") and len(net.name) == len("inverse-") + 12
    trained = json.loads((net / "config.json").read_text())
    assert trained["train"]["num_steps"] == 20
    assert trained["task_options"] == {"resolution": 16, "num_sensors": 6}
    log = (net / "metrics.jsonl").read_text()
    assert json.loads(log.splitlines()[-1])["step"] == 20
    by = {}
    for r in first:
        by.setdefault(r["sampler"], []).append(r["metrics"]["mmd"])
    np.testing.assert_allclose(by["mcd"], by["mcd_again"], rtol=1e-6)  # the same network and keys
    for r in first:  # every record names the network and its own scores
        (net_record,) = r["networks"].values()
        assert net_record["kind"] == "inverse" and net_record["network"] == net.name
        assert net_record["training_steps"] == 20 and 0 < net_record["scores"]["mean_relative_l2"] < 2
    summary, _ = stage.write(tmp_path, progress=False)
    assert f"| {net.name} | inverse | mcd.model, mcd_again.model |" in summary
    again = sweep.run(config, tmp_path, progress=False)
    assert len(again) == len(first) == 4
    assert (net / "metrics.jsonl").read_text() == log  # loaded, not trained again


def test_networks_stage_trains_only_the_networks(tmp_path):
    """`stage="networks"` trains every network and samples nothing; the study then only loads them."""
    config = _tiny_config(
        tasks={"poisson_fixed": {"resolution": 16, "num_sensors": 6}},
        samplers={"mcd": {"sampler": "mc_dropout", "networks": {"model": "inverse"}}},
        training={"scale": "tiny", "num_steps": 10},
        save_samples=0,
        figures=False,
    )
    assert sweep.run(config, tmp_path, progress=False, stage="networks") == []
    (net,) = (tmp_path / "networks" / "poisson_fixed").iterdir()
    log = (net / "metrics.jsonl").read_text()
    assert json.loads(log.splitlines()[-1])["step"] == 10
    assert not (tmp_path / "results.jsonl").exists() or not (tmp_path / "results.jsonl").read_text()
    assert not (tmp_path / "references").exists()
    assert len(sweep.run(config, tmp_path, progress=False)) == 2
    assert (net / "metrics.jsonl").read_text() == log  # loaded, not trained again
    with pytest.raises(ValueError, match="stage"):
        sweep.run(config, tmp_path, stage="references")


MULTIHOST_WORKER = textwrap.dedent(
    """
    import json, sys
    import jax
    pid, port, workdir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2, process_id=pid)
    sys.path.insert(0, sys.argv[4])
    from test_sweep import _multihost_config
    from posteriorjax import sweep
    records = sweep.run(_multihost_config(), workdir, progress=False)
    print(json.dumps({"devices": jax.device_count(), "records": len(records)}))
    """
)


def _multihost_config():
    return _tiny_config(seeds=(0, 1), save_samples=1, figures=False)


def _launch_two_processes(workdir):
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = str(s.getsockname()[1])
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    args = [str(workdir), os.path.dirname(__file__)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MULTIHOST_WORKER, str(i), port, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


@pytest.mark.slow
def test_two_processes_write_their_shards_and_resume(tmp_path):
    """Two CPU processes (one device each): per-process files, assembly by process 0, resume."""
    single = sweep.run(_multihost_config(), tmp_path / "single", progress=False)
    workdir = tmp_path / "multi"
    outs = _launch_two_processes(workdir)
    assert [o["devices"] for o in outs] == [2, 2] and [o["records"] for o in outs] == [4, 0]
    p0, p1 = (read_records(workdir / f"results.p{k}.jsonl") for k in (0, 1))
    assert len(p0) == len(p1) == 2  # each process wrote only what its device computed
    stored = read_records(workdir / "results.jsonl")
    assert [r["config_id"] for r in stored] == [r["config_id"] for r in single]
    for a, b in zip(stored, single, strict=True):
        np.testing.assert_allclose(a["metrics"]["mmd"], b["metrics"]["mmd"], rtol=1e-5)
    # a kill: process 1 lost its last record and left a torn line, process 0 had assembled one record
    lines = (workdir / "results.p1.jsonl").read_text().splitlines()
    (workdir / "results.p1.jsonl").write_text(lines[0] + "\n" + lines[1][:30])
    (workdir / "results.jsonl").write_text(stored[0].to_json() + "\n")
    _launch_two_processes(workdir)
    resumed = read_records(workdir / "results.jsonl")
    assert [r["config_id"] for r in resumed] == [r["config_id"] for r in single]
    for a, b in zip(resumed, single, strict=True):
        np.testing.assert_allclose(a["metrics"]["mmd"], b["metrics"]["mmd"], rtol=1e-5)


def test_tarp_normalization_is_fixed_per_channel():
    """`task.field_stats` broadcast over channels; without them, statistics of fixed prior draws."""
    import dataclasses

    task = tasks.get("poisson_fixed", resolution=RES, num_sensors=6)
    shift, scale = tarp_normalization(task)
    np.testing.assert_allclose(shift, [task.field_stats[0]])
    np.testing.assert_allclose(scale, [task.field_stats[1]], rtol=1e-6)
    shift, scale = tarp_normalization(dataclasses.replace(task, field_stats=None))
    assert abs(shift[0]) < 0.2 * task.field_stats[1] and 0.8 < scale[0] / task.field_stats[1] < 1.2
    with pytest.raises(ValueError, match="field_stats"):
        tarp_normalization(dataclasses.replace(task, field_stats=((0.0, 1.0), 1.0)))


@pytest.mark.parametrize(
    "todo, chunk_size, devices, batch_size, chunk",
    [
        (10, 8, 1, 2, 2),  # 5 calls of 2, none repeated (2 of 6 would repeat 2)
        (20, 8, 1, 2, 4),  # 5 calls of 4, not 3 of 8 with 4 repeated
        (16, 8, 1, 2, 8),
        (10, 8, 1, 1, 5),
        (13, 8, 1, 2, 2),  # an odd count: one repeat, the fewest possible in whole batches
        (9, 4, 2, 1, 2),  # a multiple of the 2 devices: 5 x 2 (one repeat), not 3 x 4 (three)
        (9, 4, 2, 2, 4),  # a share of 2 per device: one whole batch each
        (3, 8, 1, 4, 3),  # a share below one batch: padded to the devices only
        (1, 8, 4, 2, 4),
        (0, 8, 1, 2, 1),
    ],
)
def test_balanced_chunk_repeats_the_fewest_configurations(todo, chunk_size, devices, batch_size, chunk):
    assert pair.balanced_chunk(todo, chunk_size, devices, batch_size) == chunk
    assert chunk % devices == 0
