"""Every experiment config loads at `tiny`, rejects an unknown argument, and sweep configs validate.

No compute beyond building the tasks that `sweep.validate` checks.
"""

import importlib
import json
from pathlib import Path

import pytest

from posteriorjax import plugins, sweep
from posteriorjax.sweep.settings import settings as parse_settings

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
# modules that hold helpers, not a `get_config`
HELPERS = {"__init__", "base"}
# configs that ignore their argument (owned by the sweep engine's own tests)
ARG_AGNOSTIC = {"sweep_tiny"}
NAMES = sorted(p.stem for p in CONFIG_DIR.glob("*.py") if p.stem not in HELPERS)
SWEEP_KEYS = {"tasks", "reference", "samplers"}
# configs of out-of-tree samplers/tasks: the plugin module they need (`--plugins`)
PLUGINS = {"plugin_example": "examples.plugin_sampler"}


def _load(name):
    return importlib.import_module(f"configs.{name}")


def _is_sweep(config) -> bool:
    return SWEEP_KEYS <= set(config.keys())


@pytest.mark.parametrize("name", NAMES)
def test_config_loads_at_tiny_and_validates(name):
    config = _load(name).get_config("tiny")
    json.loads(config.to_json_best_effort())  # serializable, as the sweep's config.json
    if _is_sweep(config):
        plugins.load(PLUGINS.get(name))
        try:
            sweep.validate(config)
        finally:
            plugins.unload(PLUGINS.get(name, ""))
        assert name == "sweep_tiny" or config.training.scale == "tiny"


@pytest.mark.parametrize("name", sorted(set(NAMES) - ARG_AGNOSTIC))
def test_config_rejects_an_unknown_argument(name):
    with pytest.raises(ValueError, match="config argument"):
        _load(name).get_config("huge")


STUDIES = (
    "main_table",
    "guidance_calibration",
    "noise_levels",
    "resolution",
    "ood_prior_range",
    "pointwise_vs_distributional",
    "pointwise_vs_distributional_guidance",
    "calibration_protocol",
    "model_comparison",
    "quickstart",
)


@pytest.mark.parametrize("name", STUDIES)
def test_study_configs_are_sweeps(name):
    assert name in NAMES
    for arg in ("", "tiny"):
        config = _load(name).get_config(arg)
        assert _is_sweep(config)
        assert config.training.scale == ("tiny" if arg == "tiny" or name == "quickstart" else "full")


def test_full_scale_matches_the_published_study():
    main = _load("main_table").get_config("")
    assert set(main.tasks) == {"darcy", "poisson", "ccs", "ltmi"}
    assert main.tasks.darcy.resolution == 128 and main.num_cases == 50 and main.num_samples == 100
    assert main.samplers.eci.get("tasks") is None  # every task: points, columns or block averages
    published = {"fundps", "funddps", "ddis", "diffusionpde", "esmda", "eci"}
    assert {k for k, v in main.samplers.items() if v.options.get("profile") == "published"} == published
    parsed = parse_settings(main)
    assert parsed.references["ccs"]["method"] == "surrogate_rejection"
    surrogate = parsed.reference_networks["ccs"]
    assert surrogate.kind == "surrogate" and surrogate.training["data.pool_size"] == 12_000
    assert {n: parsed.references[n]["method"] for n in ("darcy", "poisson", "ltmi")} == dict.fromkeys(
        ("darcy", "poisson", "ltmi"), "published_eps"
    )
    specs = {e.label: e.networks for e in parsed.samplers}
    for name, noise in (("fundps", "rbf"), ("funddps", "rbf"), ("ddis", "rbf"), ("diffusionpde", "white")):
        training = specs[name]["model"].training
        assert training["diffusion.noise"] == noise and training["diffusion.data_scale"] == 0.5
        assert training["diffusion.sigma_data"] == 0.5
    assert specs["diffusionpde"]["model"].training["model.name"] == "ddpmpp"  # test_main_table_networks
    eci = specs["eci"]["model"]
    assert eci.kind == "flow" and eci.training["diffusion.noise"] == "matern"
    assert eci.training["diffusion.data_scale"] == 0.5
    kinds = {"model": "fundiff_dit", "target": "fundiff_fae_target", "condition": "fundiff_fae_condition"}
    assert {option: spec.kind for option, spec in specs["fundiff"].items()} == kinds
    gc = _load("guidance_calibration")
    config = gc.get_config("")
    assert gc.thresholds(False) == (3e-4, 4e-4, 5e-4, 6e-4, 7e-4, 8e-4)
    guidance = config.samplers.fundps.axes.guidance
    assert min(guidance) == 0.0 and max(guidance) == 1000.0
    ood = _load("ood_prior_range").get_config("")
    alphas = {k: dict(v.networks.model.get("task_options", {})) for k, v in ood.samplers.items()}
    assert alphas == {
        "funddps_single": {"alpha_range": (2.25, 2.25)},
        "funddps_narrow": {"alpha_range": (1.875, 2.625)},
        "funddps_full": {},  # the task's own prior, alpha in [1.5, 3.0]
    }
    assert tuple(ood.diagnostics) == ("pde_residual", "alpha")
    res = _load("resolution").get_config("")
    trained = {v.networks.model.task_options.resolution for v in res.samplers.values()}
    assert trained == {64, 128} and res.tasks.darcy.resolution == 128  # the arms: tests/test_studies.py


@pytest.mark.parametrize("name", ["guidance_calibration", "noise_levels"])
def test_noise_level_and_reference_threshold_stay_linked(name):
    """The override of the study's noise field moves the task noise and the eps threshold together."""
    config = _load(name).get_config("tiny")
    field = "noise_threshold" if name == "guidance_calibration" else "noise_std"
    config[field] = 6e-3 if field == "noise_threshold" else 2e-3
    eps = config.reference.eps
    assert config.tasks.poisson.noise_std == pytest.approx(eps / 3)
    assert eps == pytest.approx(6e-3)
    settings = parse_settings(config)
    assert settings.tasks["poisson"]["noise_std"] == pytest.approx(2e-3)


def test_model_comparison_misspecifies_one_thing_at_a_time():
    config = _load("model_comparison").get_config("tiny")
    overrides = {label: dict(entry.task_options) for label, entry in config.samplers.items()}
    assert overrides["exact_correct"] == {}
    assert overrides["exact_prior_misspecified"] == {"alpha": 3.0}
    assert overrides["exact_noise_misspecified"] == {"noise_std": 4e-4}


def test_reference_validation_is_a_two_ensemble_reference_config():
    config = _load("reference_validation").get_config("")
    expected = set(_load("reference.darcy").get_config("").keys())
    assert set(config.keys()) == expected
    assert config.validation.two_ensemble and config.eps_rule.enabled
    assert config.eps_rule.eps == 3e-4 and config.eps_rule.num == 100


@pytest.mark.slow
@pytest.mark.parametrize("name", ["darcy", "poisson_fixed"])
def test_tiny_reference_configs_run_end_to_end(name, tmp_path):
    import json

    from posteriorjax.reference import pipeline

    config = _load(f"reference.{name}").get_config("tiny")
    config.progress = False
    pipeline.run(config, tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["cases"]
    for case in report["cases"]:
        assert case["eps_a"]["accepted"] >= config.eps_rule.num, case["eps_a"]


def test_main_table_dry_runs_with_the_published_references_and_a_medium_scale():
    """`sweep.dry_run` (experiments.sweep --dry_run) builds every task of the full and medium main
    tables and resolves each reference method against its task, computing nothing."""
    from configs import main_table
    from posteriorjax.tasks import ccs

    full = sweep.dry_run(_load("main_table").get_config(""))["tasks"]
    assert {n: t["reference"]["method"] for n, t in full.items()} == main_table.PUBLISHED_REFERENCE
    assert full["darcy"]["reference"]["eps"] == pytest.approx(3e-4)
    assert full["ltmi"]["reference"]["eps"] == pytest.approx(0.03)
    assert full["ccs"]["reference"]["surrogate"]["data"]["pool_size"] == 12_000
    assert full["ccs"]["unknown_shape"] == (1, 64, 200) and "eci" in full["ccs"]["samplers"]
    assert {n: t["reference"]["settings"]["pool_size"] for n, t in full.items()} == dict.fromkeys(
        full, 2_000_000
    )
    medium = sweep.dry_run(_load("main_table").get_config("medium:darcy,poisson,poisson_fixed,ltmi,ccs"))
    tasks = medium["tasks"]
    assert set(tasks) == {"darcy", "poisson", "poisson_fixed", "ccs", "ltmi"}
    assert medium["training_scale"] == "medium"
    assert tasks["ccs"]["unknown_shape"] == (1, ccs.MEDIUM["nz"], ccs.MEDIUM["nr"])
    assert tasks["ltmi"]["unknown_shape"] == (2, 32, 32) and tasks["darcy"]["unknown_shape"] == (1, 32, 32)
    assert {n: t["reference"]["method"] for n, t in tasks.items()} == main_table.MEDIUM_REFERENCE
    pools = {n: t["reference"]["settings"]["pool_size"] for n, t in tasks.items() if n != "poisson_fixed"}
    assert pools == main_table.MEDIUM_POOLS
    ccs_ref = tasks["ccs"]["reference"]
    assert ccs_ref["settings"]["validate"] and ccs_ref["surrogate"]["data"]["pool_size"] == 512
    assert ccs_ref["surrogate"]["hash"] != full["ccs"]["reference"]["surrogate"]["hash"]
    assert (
        tasks["darcy"]["reference"]["settings"]["augment"]
        and not tasks["ltmi"]["reference"]["settings"]["augment"]
    )


def test_sweep_dry_run_flag_prints_the_plan_without_a_workdir():
    """The entry point in its own process (absl flags are process-global: other tests import
    entry points defining the same flag names)."""
    import subprocess
    import sys

    config = f"--config={CONFIG_DIR / 'main_table.py'}:tiny"
    out = subprocess.run(
        [sys.executable, "-m", "experiments.sweep", config, "--dry_run", "--dry_run_sizing=false"],
        capture_output=True, text=True, cwd=CONFIG_DIR.parent, timeout=600, check=True,
    )  # fmt: skip
    plan = json.loads(out.stdout)
    assert set(plan["tasks"]) == {"darcy", "poisson"} and plan["num_cases"] == 2
    assert plan["tasks"]["darcy"]["reference"]["method"] == "importance"
