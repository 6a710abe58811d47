"""The protocols of PosteriorBench's studies beyond the main table, and their analyses.

Each config is checked against what the paper states (sampler, profile, networks, grids, noise
levels, reference); the analyses (`posteriorjax.report.studies`) run on synthetic records with
known answers. No training, no sampling.
"""

import json
import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from configs import base, guidance_calibration, main_table, noise_levels, ood_prior_range, resolution
from configs import pointwise_vs_distributional as vshape
from configs import pointwise_vs_distributional_guidance as vshape_guidance
from posteriorjax import tasks
from posteriorjax.metrics import registry
from posteriorjax.report import studies
from posteriorjax.sweep import sizing
from posteriorjax.sweep.settings import settings

ROOT = Path(__file__).resolve().parents[1]
POSTERIOR = ("mean_error", "std_error", "mmd", "swd", "spectral_error")


def _plain(x):
    """A ConfigDict or dict as plain JSON values (tuples as lists)."""
    return json.loads(json.dumps(x.to_dict() if hasattr(x, "to_dict") else x))


def _specs(config) -> dict:
    return {e.label: e for e in settings(config).samplers}


# ----------------------------------------------------------------------------
# Protocols


def test_guidance_calibration_is_fundps_on_poisson_over_the_published_thresholds_and_weights():
    """App. D.1 / Fig. 7: FunDPS (published), eps in {3..8} x 1e-4 = 3 sigma, lambda in [0, 1000]."""
    config = guidance_calibration.get_config("")
    assert list(config.samplers) == ["fundps"] and config.samplers.fundps.options.profile == "published"
    assert _plain(config.samplers.fundps.networks.model) == _plain(
        base.published_network("joint", "fundps_prior", "full")
    )
    guidance = config.samplers.fundps.axes.guidance
    assert min(guidance) == 0.0 and max(guidance) == 1000.0 and {25.0, 250.0, 1000.0} <= set(guidance)
    assert guidance_calibration.thresholds(False) == (3e-4, 4e-4, 5e-4, 6e-4, 7e-4, 8e-4)
    assert list(config.tasks) == ["poisson"] and config.tasks.poisson.resolution == 128
    for eps in guidance_calibration.thresholds(False):
        config.noise_threshold = eps
        assert config.reference.eps == eps and config.tasks.poisson.noise_std == pytest.approx(eps / 3)
    assert studies.STUDIES["guidance_calibration"] == ("sweeps", POSTERIOR)  # the five metrics of Fig. 8


def test_guidance_calibration_medium_oracle_is_the_published_grid_with_the_exact_prior_on_poisson_fixed():
    """Our variant: FunDPS (published profile, exact GRF prior score: the medium table's
    ``fundps_oracle`` row, uncalibrated) on `poisson_fixed` at 32 x 32 against its exact posterior,
    the published thresholds and weights, noise eps / 3; the published protocol is untouched."""
    default = _plain(guidance_calibration.get_config(""))
    config = guidance_calibration.get_config("medium_oracle")
    assert _plain(guidance_calibration.get_config("")) == default  # building the variant changes nothing
    assert list(config.tasks) == ["poisson_fixed"] and config.tasks.poisson_fixed.resolution == 32
    assert config.reference.method == "exact" and _plain(config.references) == {
        "poisson_fixed": _plain(config.reference)
    }
    assert list(config.samplers) == ["fundps_oracle"]
    entry = config.samplers.fundps_oracle
    assert entry.sampler == "fundps" and _plain(entry.networks) == {} and "calibrate" not in entry
    assert _plain(entry.options) == {"profile": "published", "prior": "oracle", "num_steps": 100}
    assert _plain(entry.axes) == {"guidance": list(guidance_calibration.PUBLISHED_GUIDANCE)}
    assert len(entry.axes.guidance) == 11 and max(entry.axes.guidance) == 1000.0
    medium = main_table.get_config("medium:poisson_fixed:fundps_oracle").samplers.fundps_oracle
    assert _plain(medium.options) == _plain(entry.options)  # the medium table's oracle row
    assert (config.num_cases, config.num_samples, config.training.scale) == (10, 64, "medium")
    assert guidance_calibration.thresholds_medium_oracle() == (3e-4, 4e-4, 5e-4, 6e-4, 7e-4, 8e-4)
    for eps in guidance_calibration.thresholds_medium_oracle():
        config.noise_threshold = eps
        assert config.tasks.poisson_fixed.noise_std == pytest.approx(eps / 3, rel=1e-12)
    (spec,) = settings(config).samplers
    assert spec.calibrate is None and spec.axes == {"guidance": guidance_calibration.PUBLISHED_GUIDANCE}
    # the published default: Poisson at 128 x 128, the eps rule, the trained joint prior
    assert list(default["tasks"]) == ["poisson"] and default["reference"]["method"] == "rejection"
    fundps = default["samplers"]["fundps"]
    assert fundps["networks"]["model"] and "prior" not in fundps["options"]
    with pytest.raises(ValueError, match="config argument"):
        guidance_calibration.get_config("medium")


def test_noise_levels_run_the_papers_guided_samplers_at_their_published_profiles_and_noise():
    config = noise_levels.get_config("")
    assert set(config.samplers) == {"fundps", "funddps", "ddis", "diffusionpde", "esmda", "mc_dropout"}
    published = {k for k, v in config.samplers.items() if v.options.get("profile") == "published"}
    assert published == {"fundps", "funddps", "ddis", "diffusionpde", "esmda"}  # MC dropout has none
    for name in ("fundps", "funddps", "ddis", "diffusionpde", "mc_dropout"):  # the published networks
        want = {
            o: base.published_network(k, b, "full") for o, (k, b) in base.PUBLISHED_NETWORKS[name].items()
        }
        assert _plain(config.samplers[name].networks) == _plain(want), name
    # x 1/4, 1, 4 of the published Poisson values (PosteriorBench's evaluation profiles)
    assert config.samplers.fundps.axes.guidance == (400.0, 1600.0, 6400.0)
    assert config.samplers.funddps.axes.guidance == (25.0, 100.0, 400.0)
    assert config.samplers.diffusionpde.axes.guidance == (5000.0, 20000.0, 80000.0)
    assert config.samplers.ddis.axes.weight == (0.5, 2.0, 8.0)
    # the paper's noise levels: sigma = eps / 3 over the calibration thresholds
    sigmas = noise_levels.noise_levels(False)
    assert sigmas == pytest.approx([e / 3 for e in guidance_calibration.thresholds(False)], rel=1e-8)
    config.noise_std = sigmas[3]
    assert config.tasks.poisson.noise_std == sigmas[3] and config.reference.eps == pytest.approx(6e-4)


def test_noise_levels_medium_oracle_runs_the_oracle_guided_samplers_and_esmda_on_poisson_fixed():
    """Our variant: the medium table's oracle rows (no network) and ES-MDA, uncalibrated, at x 1/4, x 1,
    x 4 of each Poisson value, on `poisson_fixed` 32 x 32 against its exact posterior, noise sigma."""
    default = _plain(noise_levels.get_config(""))
    config = noise_levels.get_config("medium_oracle")
    assert _plain(noise_levels.get_config("")) == default
    assert list(config.tasks) == ["poisson_fixed"] and config.tasks.poisson_fixed.resolution == 32
    assert config.reference.method == "exact"
    assert set(config.samplers) == {"fundps_oracle", "dps_oracle", "diffusionpde_oracle", "esmda"}
    medium = main_table.get_config("medium:poisson_fixed").samplers
    for label, entry in config.samplers.items():
        assert "calibrate" not in entry and _plain(entry.networks) == {}
        assert _plain(entry.options) == _plain(medium[label].options), label
    assert {k: tuple(v.axes.get("guidance", ())) for k, v in config.samplers.items()} == {
        "fundps_oracle": (400.0, 1600.0, 6400.0),  # published Poisson 1600
        "dps_oracle": (400.0, 1600.0, 6400.0),  # ours 1600: DPS has no published profile
        "diffusionpde_oracle": (5000.0, 20000.0, 80000.0),  # published Poisson 20000
        "esmda": (),
    }
    assert config.samplers.esmda.options.profile == "published"
    assert noise_levels.noise_levels_medium_oracle() == noise_levels.noise_levels(False)
    for sigma in noise_levels.noise_levels_medium_oracle():
        config.noise_std = sigma
        assert config.tasks.poisson_fixed.noise_std == sigma
    assert all(spec.calibrate is None for spec in settings(config).samplers)


@pytest.mark.parametrize(("module", "field", "grid"), [
    (noise_levels, "noise_std", noise_levels.noise_levels),
    (guidance_calibration, "noise_threshold", guidance_calibration.thresholds),
])  # fmt: skip
def test_noise_studies_plan_one_noise_free_network_for_every_noise_level(module, field, grid):
    """The networks each noise level's sweep would train (`sizing.network_sizes`, built abstractly):
    the priors and surrogates, trained on noise-free data, are the same directories at every level;
    the MC-dropout inverse network, trained on noisy observations, is one per level."""
    config = module.get_config("tiny")
    planned = []
    for level in grid(True):
        setattr(config, field, level)
        planned.append(set(sizing.network_sizes(settings(config))[0]))
    assert len(planned) >= 2
    kind = lambda name: name.split("/")[1].rsplit("-", 1)[0]  # noqa: E731  ("task/kind-hash")
    shared = set.intersection(*planned)
    assert shared and all(kind(n) in ("prior", "joint", "surrogate") for n in shared)
    own = [level - shared for level in planned]  # the noise-dependent ones
    assert all(kind(n) == "inverse" for level in own for n in level)
    assert [len(level) for level in own] == [module is noise_levels] * len(planned)


def test_ood_prior_range_trains_only_the_prior_on_three_alpha_ranges():
    """Table 3: Fun-DDPS (published), prior on alpha 2.25 / [1.875, 2.625] / [1.5, 3.0], one surrogate."""
    config = ood_prior_range.get_config("")
    assert set(config.tasks) == {"poisson"} and config.tasks.poisson.resolution == 128
    assert config.reference.eps == 3e-4 and config.reference.num_samples == 100
    alphas = {k: dict(v.networks.model.get("task_options", {})) for k, v in config.samplers.items()}
    assert alphas == {
        "funddps_single": {"alpha_range": (2.25, 2.25)},
        "funddps_narrow": {"alpha_range": (1.875, 2.625)},
        "funddps_full": {},  # the task's own prior, the main table's network
    }
    assert tasks.get("poisson", resolution=16).prior.alpha_range == ood_prior_range.ALPHA_RANGES["full"]
    specs = _specs(config)
    assert all(e.sampler == "funddps" and e.options == {"profile": "published"} for e in specs.values())
    surrogates = [e.networks["surrogate"] for e in specs.values()]
    assert all(s == surrogates[0] for s in surrogates) and not surrogates[0].task_options  # full range
    priors = [e.networks["model"] for e in specs.values()]
    assert all(p.kind == "prior" and p.training == priors[0].training for p in priors)
    assert priors[0].training["model.name"] == "ddpmpp_uno"  # the shared published target prior
    assert tuple(config.diagnostics) == ("pde_residual", "alpha")
    assert studies.STUDIES["ood_prior_range"] == ("workdir", ("rel_l2_one_reference", *POSTERIOR))


def test_ood_prior_range_medium_is_the_main_tables_poisson_funddps_at_its_calibrated_guidance():
    """`:medium`: the medium table's Poisson Fun-DDPS entry, cases and reference; every arm at the
    guidance that row calibrated (the committed calibration), only the prior's alpha range varies,
    and the full arm trains the row's own networks."""
    config, main = ood_prior_range.get_config("medium"), main_table.get_config("medium:poisson:funddps")
    row_dir = ROOT / "results/main_table_medium/poisson_learned_funddps"
    chosen = json.loads((row_dir / "calibration/poisson/funddps.json").read_text())
    assert ood_prior_range.MEDIUM_GUIDANCE == chosen["chosen"]
    specs, row = _specs(config), _specs(main)["funddps"]
    assert set(specs) == {"funddps_single", "funddps_narrow", "funddps_full"}
    for spec in specs.values():
        assert spec.calibrate is None and spec.sampler == "funddps"
        assert spec.options == row.options and spec.axes == {"guidance": (ood_prior_range.MEDIUM_GUIDANCE,)}
        assert spec.networks["surrogate"] == row.networks["surrogate"]
        assert spec.networks["model"].training == row.networks["model"].training
    assert specs["funddps_full"].networks == row.networks
    assert specs["funddps_narrow"].networks["model"].task_options == {"alpha_range": (1.875, 2.625)}
    for key in ("tasks", "reference", "references", "num_cases", "num_samples", "seed", "training"):
        assert config[key] == main[key], key
    assert tuple(config.diagnostics) == ("pde_residual", "alpha")


def test_resolution_arms_follow_the_published_multi_resolution_schedule():
    """Table 4: FunDPS and DiffusionPDE (published) trained at 64, 128, and 64 then 128; evaluated at 128."""
    config = resolution.get_config("")
    assert config.tasks.darcy.resolution == 128
    specs = _specs(config)
    assert set(specs) == {f"{s}@{a}" for s in ("fundps", "diffusionpde") for a in ("64", "128", "multi")}
    assert specs["diffusionpde@128"].options == {"profile": "published", "noise": "white"}
    assert specs["fundps@128"].options == {"profile": "published"}
    for name, steps in (("fundps", 468_750), ("diffusionpde", 468_750)):  # 15 M images / batch 32
        low, high, multi = (specs[f"{name}@{a}"].networks["model"] for a in ("64", "128", "multi"))
        assert (low.task_options, low.num_steps) == ({"resolution": 64}, steps)
        assert (high.task_options, high.num_steps) == ({"resolution": 128}, steps)
        assert (multi.task_options, multi.num_steps) == ({"resolution": 128}, steps // 3)  # to 15 M images
        assert (multi.pretrain.task_options, multi.pretrain.num_steps) == ({"resolution": 64}, 2 * steps // 3)
        assert multi.training["train.warmup_steps"] == 0  # EDM's ramp-up is behind at 10 M images
        assert multi.pretrain.training["train.warmup_steps"] == low.training["train.warmup_steps"] > 0
        same = {k: v for k, v in multi.training.items() if k != "train.warmup_steps"}
        assert same == {k: v for k, v in high.training.items() if k != "train.warmup_steps"}
    assert specs["fundps@128"].networks["model"].training["diffusion.noise"] == "rbf"
    assert specs["diffusionpde@128"].networks["model"].training["diffusion.noise"] == "white"
    assert studies.STUDIES["resolution"] == ("workdir", POSTERIOR)


def test_the_vshape_study_is_the_main_table_and_the_guidance_sweep_a_variant():
    for arg in ("", "tiny"):
        assert vshape.get_config(arg).to_json(sort_keys=True) == main_table.get_config(arg).to_json(
            sort_keys=True
        )
    variant = vshape_guidance.get_config("")
    assert all(len(next(iter(v.axes.values()))) >= 5 for v in variant.samplers.values() if v.axes)
    assert studies.POINTWISE == "rel_l2_one_reference"


# ----------------------------------------------------------------------------
# The pointwise metric against one reference sample


def test_rel_l2_one_reference_scores_against_the_first_reference_member_not_the_truth():
    ref = jnp.asarray([[3.0, 4.0], [0.0, 1.0], [7.0, 7.0]])  # r_0 = (3, 4), ||r_0|| = 5
    samples = jnp.asarray([[3.0, 4.0], [6.0, 8.0]])  # errors 0 and 5 -> relative 0 and 1
    truth = jnp.asarray([100.0, 0.0])
    out = registry.compute(registry.Inputs(samples, samples, ref, truth=truth))
    assert float(out["rel_l2_one_reference"]) == pytest.approx(0.5)
    assert registry.METRICS["rel_l2_one_reference"].needs == frozenset({"reference"})
    assert "rel_l2_one_reference" not in registry.RANKED  # not a posterior metric of the curves


# ----------------------------------------------------------------------------
# Analyses on synthetic records


def _record(task, sampler, case, metrics, hparams=None, seed=0):
    return {"task": task, "sampler": sampler, "case": case, "seed": seed, "hparams": hparams or {},
            "config_id": f"case={case}", "index": case, "num_samples": 8, "metrics": metrics,
            "wall_time_s": 1.0, "compile_time_s": 0.0}  # fmt: skip


def test_vshape_points_are_per_row_means_with_standard_errors():
    recs = []
    for task in ("darcy", "poisson"):
        for sampler, base_value in (("a", 1.0), ("b", 2.0)):
            for case, delta in enumerate((-1.0, 0.0, 1.0)):
                metrics = {m: base_value + delta for m in POSTERIOR}
                metrics["rel_l2_one_reference"] = 10 * base_value + delta
                recs.append(_record(task, sampler, case, metrics))
    points = studies.vshape_points(recs)
    assert [(p["task"], p["sampler"]) for p in points] == [
        ("darcy", "a"),
        ("darcy", "b"),
        ("poisson", "a"),
        ("poisson", "b"),
    ]
    for p in points:
        assert p["count"] == 3
        assert p["rel_l2_one_reference"] == pytest.approx(
            (20.0 if p["sampler"] == "b" else 10.0, 1 / math.sqrt(3))
        )
        assert p["mmd"][1] == pytest.approx(1 / math.sqrt(3))  # std 1 (ddof 1) / sqrt(3)
    table = studies.vshape_table(points)
    assert "RelL2(one ref.)" in table and "Spearman (low half)" in table
    for r in recs:
        del r["metrics"]["rel_l2_one_reference"]
    with pytest.raises(ValueError, match="rel_l2_one_reference"):
        studies.vshape_points(recs)


def test_spearman_detects_the_two_arms_of_a_v():
    x = np.arange(8.0)
    y = np.abs(x - 3.5)
    low = x <= np.median(x)
    assert studies.spearman(x[low], y[low]) == pytest.approx(-1.0)
    assert studies.spearman(x[~low], y[~low]) == pytest.approx(1.0)
    assert math.isnan(studies.spearman([1.0, 2.0], [2.0, 1.0]))


GRID = (0.0, 10.0, 100.0, 1000.0)


def _sweep_records(best: float, spread: float, num_cases: int = 4, metric_shift=None):
    """Per case and guidance value: metric = (log10(1 + g) - log10(1 + best_c))^2, best_c per case."""
    recs = []
    for case in range(num_cases):
        best_c = best * (1 + spread * (case - (num_cases - 1) / 2))
        for g in GRID:
            value = (math.log10(1 + g) - math.log10(1 + best_c)) ** 2
            metrics = {
                "mean_error": value,
                "std_error": (
                    math.log10(1 + g) - math.log10(1 + (best_c if metric_shift is None else metric_shift))
                )
                ** 2,
            }
            recs.append(_record("poisson", "fundps", case, metrics, {"guidance": g}))
    return recs


def test_optimum_and_its_standard_error_over_cases():
    same = studies.optimum_se(_sweep_records(100.0, 0.0), "guidance", "mean_error")
    assert same["optimum"] == 100.0 and same["optimum_se"] == 0.0 and same["value"] == pytest.approx(0.0)
    assert same["count"] == 4
    recs = _sweep_records(100.0, 0.0)
    for r in recs:  # two cases prefer 10, two prefer 1000: the argmin moves between resamples
        c, g = r["case"], r["hparams"]["guidance"]
        r["metrics"]["mean_error"] = (math.log10(1 + g) - (1.0 if c < 2 else 3.0)) ** 2 + 0.01 * c
    spread = studies.optimum_se(recs, "guidance", "mean_error", num_bootstrap=400)
    assert spread["optimum"] in GRID and spread["optimum_se"] > 100.0
    assert spread == studies.optimum_se(recs, "guidance", "mean_error", num_bootstrap=400)  # seeded


def test_noise_optima_grow_with_inverse_variance_and_differ_by_metric(tmp_path):
    sources = []
    for sigma, best in ((4e-4, 10.0), (2e-4, 100.0), (1e-4, 1000.0)):
        recs = _sweep_records(best, 0.0, metric_shift=0.0)
        sources.append((f"w{sigma}", recs, {"tasks": {"poisson": {"noise_std": sigma}}}))
    optima = studies.noise_optima_se(sources)
    ((key, levels),) = optima.items()
    assert key == ("poisson", "fundps", "guidance", ())
    assert {s: levels[s]["mean_error"]["optimum"] for s in levels} == {1e-4: 1000.0, 2e-4: 100.0, 4e-4: 10.0}
    assert {levels[s]["std_error"]["optimum"] for s in levels} == {0.0}  # another metric, another optimum
    table = studies.optima_table(levels)
    assert table.splitlines()[-1].split("|")[3].strip() == "+1.00"  # Spearman of Mean's optimum vs 1/sigma^2
    assert "1000 ± 0" in table
    # the same through the report entry, from one workdir per noise level
    for name, recs, config in sources:
        w = tmp_path / "study" / name
        w.mkdir(parents=True)
        (w / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        (w / "config.json").write_text(json.dumps(config))
    text, paths = studies.report("guidance_calibration", tmp_path / "study", tmp_path / "out")
    assert "## poisson / fundps: optimal guidance" in text and "+1.00" in text
    assert [p.name for p in paths] == ["optimum_poisson_fundps_guidance.png"] and paths[0].is_file()
    assert (tmp_path / "out" / "guidance_calibration.md").read_text() == text


def test_vshape_and_table_reports_from_a_workdir(tmp_path):
    recs = []
    for task in ("darcy", "poisson"):
        for k, sampler in enumerate(("a", "b", "c")):
            for case in range(2):
                metrics = {m: 1.0 + k + 0.1 * case for m in POSTERIOR}
                metrics["rel_l2_one_reference"] = 0.2 * (k + 1) + 0.01 * case
                recs.append(_record(task, sampler, case, metrics))
    w = tmp_path / "main"
    w.mkdir()
    (w / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (w / "config.json").write_text(json.dumps({"tasks": {"darcy": {}, "poisson": {}}}))
    text, paths = studies.report("pointwise_vs_distributional", w)
    assert [p.name for p in paths] == ["vshape.png"] and paths[0].is_file()
    assert text.count("| darcy |") == 3 and "0.2050 ± 0.0050" in text
    text, paths = studies.report("ood_prior_range", w)
    assert not paths and "RelL2(one ref.)" in text.splitlines()[2]
    with pytest.raises(ValueError, match="study: expected one of"):
        studies.report("main_table", w)
    with pytest.raises(FileNotFoundError, match="results.jsonl"):
        studies.report("noise_levels", w)


def test_vshape_reads_a_main_table_run_in_parts(tmp_path):
    """Parts of one table in several workdirs: their rows together, a row two parts hold (the
    ``prior`` every part runs) read once, from the first part, and the report says so."""

    def part(name, rows):
        w = tmp_path / name
        w.mkdir()
        recs = []
        for task, sampler, shift in rows:
            for case in range(2):
                metrics = {m: 1.0 + shift + 0.1 * case for m in POSTERIOR}
                metrics["rel_l2_one_reference"] = 0.5 + shift
                recs.append(_record(task, sampler, case, metrics))
        (w / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        (w / "config.json").write_text(json.dumps({"tasks": {}}))
        return w

    a = part("a", [("darcy", "prior", 0.0), ("darcy", "fundps", -0.5)])
    b = part("b", [("darcy", "prior", 9.0), ("poisson", "prior", 1.0), ("poisson", "fundps", 0.5)])
    records, notes = studies.parts_records([a, b])
    assert len(records) == 8 and notes == [f"darcy / prior (-): also in {b}, taken from {a}"]
    darcy_prior = [r for r in records if (r["task"], r["sampler"]) == ("darcy", "prior")]
    assert {r["metrics"]["mean_error"] for r in darcy_prior} == {1.0, 1.1}  # part a's, not b's
    text, paths = studies.report("pointwise_vs_distributional", [a, b])
    assert paths == [a / "vshape.png"] and (a / "pointwise_vs_distributional.md").is_file()
    assert text.count("| darcy |") == 2 and text.count("| poisson |") == 2 and "taken from" in text
    with pytest.raises(ValueError, match="ood_prior_range reads one workdir"):
        studies.report("ood_prior_range", [a, b])
    with pytest.raises(ValueError, match="at least one"):
        studies.parts_records([])


def test_the_entry_point_lists_the_report_studies():
    """`experiments/studies.py` writes the names out (its --help imports no JAX); read, not imported
    (an entry point's flags live on absl's one registry, which another entry point's test shares)."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[1] / "experiments" / "studies.py").read_text())
    values = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and node.targets[0].id in ("STUDIES", "POINTWISE")
    }
    assert set(values["STUDIES"]) == set(studies.STUDIES) and values["POINTWISE"] == studies.POINTWISE
