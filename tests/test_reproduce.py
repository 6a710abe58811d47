"""`experiments.reproduce` (`scripts/reproduce.sh`): the steps of every study, their state read from
the workdirs (`--status`), and a run that skips finished steps. No study runs here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from configs import guidance_calibration, noise_levels
from experiments import reproduce
from posteriorjax.sweep.store import prepare_workdir

ROOT = Path(__file__).resolve().parents[1]


def _record(case, g):
    return {"task": "poisson", "sampler": "fundps", "config_id": f"case={case};seed=0;guidance={g}",
            "index": 0, "case": case, "seed": 0, "hparams": {"guidance": g}, "num_samples": 16,
            "metrics": {"mmd": 0.1}, "wall_time_s": 1.0, "compile_time_s": 0.0}  # fmt: skip


def _records(path: Path, num: int) -> None:
    """The first `num` records of the tiny calibration grid (2 cases x 5 weights) in `path`."""
    grid = [(c, g) for c in range(2) for g in guidance_calibration.TINY_GUIDANCE]
    (path / "results.jsonl").write_text("".join(json.dumps(_record(c, g)) + "\n" for c, g in grid[:num]))


def _sweep_workdir(path: Path, eps: float, num_records: int, finished: bool) -> None:
    """A guidance-calibration workdir as a sweep leaves it: its config, `num_records` records."""
    config = guidance_calibration.get_config("tiny")
    config.noise_threshold = eps
    prepare_workdir(path, config)  # config.json as the sweep writes it
    _records(path, num_records)
    if finished:
        (path / "summary.md").write_text("# done\n")


def test_steps_cover_every_study_once_in_order(tmp_path):
    plan = reproduce.steps("tiny", tmp_path)
    assert [s.study for s in plan][0] == "quickstart" and plan[-1].study == "model_comparison"
    assert len({s.workdir for s in plan}) == len(plan)
    eps = [s.workdir.name for s in plan if s.study == "guidance_calibration" and s.kind == "sweep"]
    assert eps == [f"eps={e!r}" for e in guidance_calibration.thresholds(True)]
    (vshape,) = [s for s in plan if s.study == "pointwise_vs_distributional"]
    assert vshape.kind == "report" and vshape.needs == (tmp_path / "main_table",)  # the main table's records
    only = reproduce.steps("full", tmp_path, ("pointwise_vs_distributional",))
    assert [(s.kind, s.workdir.name) for s in only] == [
        ("sweep", "main_table"),
        ("report", "pointwise_vs_distributional.md"),
    ]
    assert "--config=configs/main_table.py" in only[0].args
    with pytest.raises(ValueError, match="studies: unknown"):
        reproduce.steps("tiny", tmp_path, ("nope",))
    with pytest.raises(ValueError, match="scale: expected"):
        reproduce.steps("huge", tmp_path)


def test_medium_runs_the_main_table_one_task_a_sweep_its_vshape_and_table_3(tmp_path):
    plan = reproduce.steps("medium", tmp_path)
    main, vshape = tmp_path / "main_table", tmp_path / "pointwise_vs_distributional"
    ood = tmp_path / "ood_prior_range"
    tasks = ("darcy", "poisson", "poisson_fixed")
    assert [(s.study, s.kind, s.workdir) for s in plan] == [
        *(("main_table", "sweep", main / t) for t in tasks),
        ("pointwise_vs_distributional", "report", vshape / "pointwise_vs_distributional.md"),
        ("ood_prior_range", "sweep", ood),
        ("ood_prior_range", "report", ood / "ood_prior_range.md"),
    ]
    assert [s.args[1] for s in plan[:3]] == [f"--config=configs/main_table.py:medium:{t}" for t in tasks]
    assert plan[3].needs == tuple(main / t for t in tasks)
    assert f"--workdir={main / 'darcy'},{main / 'poisson'},{main / 'poisson_fixed'}" in plan[3].args
    assert plan[4].args[1] == "--config=configs/ood_prior_range.py:medium" and plan[5].needs == (ood,)
    assert reproduce.steps("medium", tmp_path, ("main_table",)) == plan[:3]
    variant = reproduce.steps("medium", tmp_path, ("noise_levels_medium_oracle",))
    assert variant[0].args[1] == "--config=configs/noise_levels.py:medium_oracle"
    with pytest.raises(ValueError, match="no medium form"):
        reproduce.steps("medium", tmp_path, ("resolution",))
    assert "waiting" in reproduce.status(plan[:4]).splitlines()[-2]


def test_the_sweeps_of_a_noise_study_share_one_networks_folder(tmp_path):
    plan = reproduce.steps("tiny", tmp_path, ("noise_levels", "resolution"))
    sweeps = [s for s in plan if s.study == "noise_levels" and s.kind == "sweep"]
    assert len(sweeps) >= 3 and {s.networks for s in sweeps} == {tmp_path / "noise_levels" / "networks"}
    assert all(s.networks is None for s in plan if s.study == "resolution")  # one workdir: its own
    first, second = sweeps[:2]
    reproduce.share_networks(first)
    trained = first.workdir / "networks" / "poisson" / "prior-abc"  # as a sweep would write it
    trained.mkdir(parents=True)
    reproduce.share_networks(second)
    reproduce.share_networks(second)  # a rerun keeps the link
    assert (second.workdir / "networks" / "poisson" / "prior-abc").is_dir()
    assert (first.networks / "poisson" / "prior-abc").is_dir()
    own = sweeps[-1].workdir / "networks"  # an earlier run's own folder is kept
    (own / "poisson").mkdir(parents=True)
    reproduce.share_networks(sweeps[-1])
    assert not own.is_symlink() and not (own / "poisson" / "prior-abc").exists()


def test_status_of_an_empty_root(tmp_path):
    plan = reproduce.steps("tiny", tmp_path / "root")
    text = reproduce.status(plan)
    lines = text.splitlines()
    assert lines[-1] == f"{len(plan)} of {len(plan)} step(s) still to run"
    states = [reproduce.state(s, {p.workdir: p for p in plan})[0] for s in plan]
    assert set(states) == {"not started", "waiting"}
    assert all(st == "waiting" for st, s in zip(states, plan, strict=True) if s.kind == "report")
    assert not (tmp_path / "root").exists()  # nothing written


def test_status_of_a_partly_filled_root(tmp_path):
    root = tmp_path / "root"
    plan = reproduce.steps("tiny", root, ("reference_validation", "guidance_calibration"))
    by_dir = {s.workdir: s for s in plan}
    sweeps = [s for s in plan if s.kind == "sweep"]
    eps = guidance_calibration.thresholds(True)
    _sweep_workdir(sweeps[0].workdir, eps[0], 10, finished=True)  # 2 cases x 5 weights: all there
    _sweep_workdir(sweeps[1].workdir, eps[1], 3, finished=False)  # interrupted
    _sweep_workdir(sweeps[2].workdir, eps[2], 10, finished=False)  # records written, tables not yet
    (root / "reference_validation" / "darcy").mkdir(parents=True)
    (root / "reference_validation" / "darcy" / "report.json").write_text("{}")
    (root / "reference_validation" / "poisson").mkdir(parents=True)  # begun
    got = {s.workdir: reproduce.state(s, by_dir) for s in plan}
    assert got[sweeps[0].workdir] == ("done", "10/10 records")
    assert got[sweeps[1].workdir] == ("partial", "3/10 records")
    assert got[sweeps[2].workdir] == ("partial", "10/10 records")
    assert got[sweeps[3].workdir] == ("not started", "")
    assert got[root / "reference_validation" / "darcy"] == ("done", "")
    assert got[root / "reference_validation" / "poisson"] == ("partial", "")
    report = [s for s in plan if s.kind == "report"][0]
    assert got[report.workdir] == ("waiting", "for 5 step(s)")
    assert reproduce.status(plan).splitlines()[-1] == f"{len(plan) - 2} of {len(plan)} step(s) still to run"
    for s in sweeps[1:]:  # every sweep finished: the report can run
        if s.workdir.exists():
            _records(s.workdir, 10)
            (s.workdir / "summary.md").write_text("# done\n")
        else:
            _sweep_workdir(s.workdir, eps[sweeps.index(s)], 10, finished=True)
    assert reproduce.state(report, by_dir) == ("not started", "")


def test_run_skips_done_steps_and_stops_on_a_failed_one(tmp_path, capsys):
    done = tmp_path / "done.md"
    done.write_text("x")
    ok = reproduce.Step("a", "report", tmp_path / "a.md", ("json.tool", "--help"))
    skipped = reproduce.Step("b", "report", done, ("json.tool", "/nonexistent"))
    reproduce.run([skipped, ok], tmp_path)
    out = capsys.readouterr().out
    assert "skip (done) b report" in out and "json.tool --help" in out
    assert (tmp_path / "timings.txt").read_text().startswith(f"a report {tmp_path / 'a.md'}: ")
    bad = reproduce.Step("c", "report", tmp_path / "c.md", ("json.tool", str(tmp_path / "missing.json")))
    with pytest.raises(SystemExit, match="rerun the same command to resume"):
        reproduce.run([bad], tmp_path)


def test_the_script_passes_its_arguments_and_status_runs_nothing(tmp_path):
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "reproduce.sh"), "tiny", str(tmp_path / "r"), "resolution",
         "--status"], capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "2 of 2 step(s) still to run" and "resolution" in out.stdout
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("name", "study", "levels", "flag"), [
    ("guidance_calibration_medium_oracle", "guidance_calibration",
     guidance_calibration.thresholds_medium_oracle(), "noise_threshold"),
    ("noise_levels_medium_oracle", "noise_levels", noise_levels.noise_levels_medium_oracle(), "noise_std"),
])  # fmt: skip
def test_a_medium_oracle_variant_runs_only_when_named(tmp_path, name, study, levels, flag):
    """A variant: one sweep per noise level of its config (whatever the scale), then its study's
    report; never part of the default plan."""
    assert all(s.study not in reproduce.VARIANTS for s in reproduce.steps("tiny", tmp_path))
    prefix = "eps" if flag == "noise_threshold" else "noise"
    for scale in reproduce.SCALES:
        *sweeps, report = reproduce.steps(scale, tmp_path, (name,))
        assert len(sweeps) == 6
        assert [s.workdir for s in sweeps] == [tmp_path / name / f"{prefix}={v!r}" for v in levels]
        for s, v in zip(sweeps, levels, strict=True):
            assert s.kind == "sweep" and s.args[1] == f"--config=configs/{study}.py:medium_oracle"
            assert s.args[3] == f"--config.{flag}={v!r}" and s.networks is None
        assert report.kind == "report" and report.study == name
        assert report.workdir == tmp_path / name / f"{study}.md"
        assert f"--study={study}" in report.args and report.needs == tuple(s.workdir for s in sweeps)
