"""The full main table's networks against PosteriorBench's training configs, transcribed here.

`PUBLISHED_YML` copies the fields of `configs/training/*.yml` (neuraloperator/PosteriorBench) that our
training config models, one entry per (sampler, task, network option) of the full main table; the
test resolves each network spec of `configs/main_table.py` into its training config
(`sweep.networks.network_config`) and compares it with what those fields mean in our settings.
A drift in either fails. `KNOWN_DEPARTURES` lists the fields we do not reproduce, each checked to be
what we do instead.
"""

import json
import math
from pathlib import Path

import pytest

from configs import base, main_table
from posteriorjax.sweep import networks
from posteriorjax.sweep.settings import settings

TRAIN_RECORDS = 45_000  # 50k records, validation_size 5000 (`darcy_fundps_64_pretrain.yml`: 50k samples)

# -- configs/training/<task>_fundps_128_finetune.yml, light_transport_fundps_64_full15.yml,
#    ccs_fundps_64x200_full15.yml (FunDPS joint prior; the FunDPS dataset's normalization_scale 0.5)
_UNO = dict(arch="ddpmpp-uno", cbase=64, cres=[1, 2, 4, 4], num_blocks=4, dropout=0.13, fmult=0.5, rank=0.1,
            nn_resolution=64, rbf_scale=0.05, normalization_scale=0.5, duration=15, batch=32, lr=1.0e-4,
            lr_rampup=5, ema=0.5)  # fmt: skip
# -- configs/training/<task>_diffusionpde_128.yml (+ the ``ddpmpp`` preset of train_diffusionpde.py:
#    SongUNet, 4 blocks, attention at 16, img_resolution = resolution)
_DDPMPP = dict(arch="ddpmpp", cbase=128, cres=[2, 2, 2], num_blocks=4, attn_resolutions=[16], dropout=0.13,
               nn_resolution=128, normalization_scale=0.5, duration=15, batch=32, lr=1.0e-3, lr_rampup=10,
               ema=0.05)  # fmt: skip
# -- configs/training/<task>_funddps_surrogate_128.yml
_FUNDDPS_SUR = dict(model="fno", n_modes=[16, 16], hidden_channels=48, projection_channel_ratio=1, n_layers=4,
                    domain_padding=0.1, normalization_scale=1.0, epochs=100, batch=32, lr=1.0e-3,
                    weight_decay=2.0e-2, scheduler="onecycle", warmup_fraction=0.1, div_factor=25,
                    final_div_factor=10000.0)  # fmt: skip
# -- configs/training/<task>_ddis_surrogate_128.yml
_DDIS_SUR = dict(model="fno_pad", n_modes=[64, 64], hidden_channels=64, n_layers=4, normalization_scale=1.0,
                 epochs=500, batch=40, lr=1.0e-4, scheduler="none")  # fmt: skip
# -- configs/training/<task>_eci_128.yml
_ECI = dict(n_modes=[32, 32], emb_channels=32, hidden_channels=128, n_layers=6, lifting_channel_ratio=4,
            projection_channel_ratio=4, domain_padding=0.1, base_noise="matern", normalization_scale=0.5,
            max_steps=58594, batch=256, lr=3.0e-4, weight_decay=0.0)  # fmt: skip
# -- configs/training/<task>_mcdropout_fno_drop020.yml
_MCD = dict(n_modes=[32, 32], hidden_channels=128, n_layers=6, lifting_channel_ratio=2,
            projection_channel_ratio=1, channel_mlp_dropout=0.2, domain_padding=0.1, normalization_scale=1.0,
            max_images=15_000_000, batch=64, lr=5.0e-4, weight_decay=2.0e-2, scheduler="onecycle",
            warmup_fraction=0.1, div_factor=25, final_div_factor=10000.0)  # fmt: skip

TASKS = ("darcy", "poisson", "ltmi", "ccs")
# attn_resolutions: darcy_fundps_* / darcy_shared_target_prior_*: [8]; poisson, light_transport, ccs: [16]
ATTN = {"darcy": [8], "poisson": [16], "ltmi": [16], "ccs": [16]}
PUBLISHED_YML = {}
for _t in TASKS:
    _uno = {**_UNO, "attn_resolutions": ATTN[_t]}
    PUBLISHED_YML[("fundps", _t, "model")] = _uno
    # <task>_shared_target_prior_128_finetune.yml (light_transport / ccs: *_funddps_prior_*,
    # *_ddis_prior_*): the same backbone and optimization on the unknown alone
    PUBLISHED_YML[("funddps", _t, "model")] = _uno
    PUBLISHED_YML[("ddis", _t, "model")] = _uno
    PUBLISHED_YML[("funddps", _t, "surrogate")] = _FUNDDPS_SUR
    PUBLISHED_YML[("ddis", _t, "surrogate")] = _DDIS_SUR
    PUBLISHED_YML[("diffusionpde", _t, "model")] = _DDPMPP
    PUBLISHED_YML[("eci", _t, "model")] = _ECI
    PUBLISHED_YML[("mc_dropout", _t, "model")] = _MCD
# ccs_funddps_surrogate_64x200.yml: n_modes [16, 32]; ccs_ddis_surrogate_64x200.yml:
# normalization_scale 0.5; ccs_mcdropout_fno_drop020.yml: n_modes [16, 64]
PUBLISHED_YML[("funddps", "ccs", "surrogate")] = {**_FUNDDPS_SUR, "n_modes": [16, 32]}
PUBLISHED_YML[("ddis", "ccs", "surrogate")] = {**_DDIS_SUR, "normalization_scale": 0.5}
PUBLISHED_YML[("mc_dropout", "ccs", "model")] = {**_MCD, "n_modes": [16, 64]}

KINDS = {"fundps": "joint", "funddps": "prior", "ddis": "prior", "diffusionpde": "joint", "eci": "flow",
         "mc_dropout": "inverse"}  # fmt: skip
SURROGATE_KIND = "surrogate"
# (sampler, task, option): {our config path: our value} where we depart from the yml (the reason beside it)
KNOWN_DEPARTURES = {
    # our FNO keeps one mode count for both axes: the CCS surrogates' 16 x 32 / 16 x 64 modes -> 16 / 32
    ("funddps", "ccs", "surrogate"): {"model.options.modes": 16},
    ("mc_dropout", "ccs", "model"): {"model.options.modes": 32},
}
# Not compared: our surrogates standardize to std 1 (normalization_scale 1.0), the CCS DDIS one is
# trained at 0.5; the epoch lengths of LTMI and CCS are converted with the Darcy / Poisson record
# count; the FunDPS / shared target priors' 10 Mimg pretraining at 64 x 64 (configs/base.py).


def _onecycle(y, steps):
    return {"train.warmup_steps": round(y["warmup_fraction"] * steps),
            "train.end_learning_rate_factor": 1 / (y["div_factor"] * y["final_div_factor"])}  # fmt: skip


def expected(sampler: str, option: str, y: dict) -> dict:
    """Our training-config values (dotted path -> value) that the yml fields `y` mean."""
    if "arch" in y:  # an EDM prior: Adam, linear lr ramp-up then constant, EMA half-life in images
        name = {"ddpmpp-uno": "ddpmpp_uno", "ddpmpp": "ddpmpp"}[y["arch"]]
        options = dict(model_channels=y["cbase"], channel_mult=tuple(y["cres"]), num_blocks=y["num_blocks"],
                       attn_resolutions=tuple(y["attn_resolutions"]), dropout=y["dropout"],
                       resolution=y["nn_resolution"])  # fmt: skip
        if name == "ddpmpp_uno":
            options.update(fmult=y["fmult"], rank=y["rank"])
        out = {"model.name": name, "model.options": options, "diffusion.data_scale": y["normalization_scale"],
               "diffusion.sigma_data": 0.5, "diffusion.p_mean": -1.2, "diffusion.p_std": 1.2,
               "diffusion.noise": "rbf" if name == "ddpmpp_uno" else "white",
               "train.batch_size": y["batch"], "train.learning_rate": y["lr"],
               "train.num_steps": round(y["duration"] * 1e6 / y["batch"]),
               "train.warmup_steps": round(y["lr_rampup"] * 1e6 / y["batch"]),
               "train.end_learning_rate_factor": 1.0, "train.weight_decay": 0.0, "train.clip_norm": 0.0,
               "train.ema_decay": 0.5 ** (y["batch"] / (y["ema"] * 1e6))}  # fmt: skip
        if "rbf_scale" in y:
            out["diffusion.rbf_scale"] = y["rbf_scale"]
        return out
    steps_per_epoch = math.ceil(TRAIN_RECORDS / y["batch"])
    common = {"train.batch_size": y["batch"], "train.learning_rate": y["lr"], "train.clip_norm": 0.0,
              "train.ema_decay": 0.0}  # fmt: skip
    neuralop = dict(style="neuralop", modes=y["n_modes"][0], width=y["hidden_channels"], layers=y["n_layers"])
    if sampler == "eci":
        options = dict(neuralop, lifting_ratio=y["lifting_channel_ratio"],
                       projection_ratio=y["projection_channel_ratio"], padding=y["domain_padding"],
                       time_channels=y["emb_channels"])  # fmt: skip
        return {**common, "model.name": "fno", "model.options": options, "diffusion.noise": y["base_noise"],
                "diffusion.data_scale": y["normalization_scale"], "train.num_steps": y["max_steps"],
                "train.weight_decay": y["weight_decay"], "train.warmup_steps": 0,
                "train.end_learning_rate_factor": 1.0}  # fmt: skip
    if sampler == "mc_dropout":
        steps = y["max_images"] // y["batch"]
        options = dict(neuralop, lifting_ratio=y["lifting_channel_ratio"],
                       projection_ratio=y["projection_channel_ratio"], dropout=y["channel_mlp_dropout"],
                       padding=y["domain_padding"])  # fmt: skip
        return {**common, "model.name": "fno", "model.options": options, "train.num_steps": steps,
                "train.weight_decay": y["weight_decay"], **_onecycle(y, steps)}  # fmt: skip
    steps = y["epochs"] * steps_per_epoch
    if y["model"] == "fno_pad":  # Adam, no scheduler
        options = dict(modes=y["n_modes"][0], width=y["hidden_channels"], layers=y["n_layers"])
        return {
            **common,
            "model.name": "fno_pad",
            "model.options": options,
            "train.num_steps": steps,
            "train.weight_decay": 0.0,
            "train.warmup_steps": 0,
            "train.end_learning_rate_factor": 1.0,
        }
    options = dict(neuralop, projection_ratio=y["projection_channel_ratio"], padding=y["domain_padding"])
    return {**common, "model.name": "fno", "model.options": options, "train.num_steps": steps,
            "train.weight_decay": y["weight_decay"], **_onecycle(y, steps)}  # fmt: skip


def _get(cfg, dotted):
    value = cfg
    for name in dotted.split("."):
        value = value[name]
    return value.to_dict() if hasattr(value, "to_dict") else value


def _plain(v):
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return tuple(v) if isinstance(v, list | tuple) else v


@pytest.fixture(scope="module")
def main():
    return settings(main_table.get_config(""))


@pytest.fixture(scope="module")
def resolved(main):
    out = {}
    for entry in main.samplers:
        for option, spec in entry.networks.items():
            for task in entry.tasks:
                cfg, digest = networks.network_config(task, main.tasks[task], spec, "full")
                out[(entry.label, task, option)] = (spec.kind, cfg, digest)
    return out


def test_every_published_network_of_the_full_main_table_is_transcribed(resolved):
    published = {k for k in resolved if k[0] in KINDS}
    assert published == set(PUBLISHED_YML)


@pytest.mark.parametrize("key", sorted(PUBLISHED_YML), ids=lambda k: "-".join(k))
def test_network_spec_matches_the_published_training_config(resolved, key):
    sampler, task, option = key
    kind, cfg, _ = resolved[key]
    assert kind == (SURROGATE_KIND if option == "surrogate" else KINDS[sampler])
    want = expected(sampler, option, PUBLISHED_YML[key])
    want.update(KNOWN_DEPARTURES.get(key, {}))
    if "model.options" in want and "model.options.modes" in want:
        want["model.options"]["modes"] = want.pop("model.options.modes")
    for path, value in want.items():
        got = _plain(_get(cfg, path))
        if isinstance(value, float):
            assert got == pytest.approx(value, rel=1e-12), path
        else:
            assert got == _plain(value), path


def test_samplers_asking_for_different_networks_train_different_directories(resolved):
    """DDIS and Fun-DDPS share the target prior but not the surrogate; FunDPS and DiffusionPDE both
    take a joint prior, of different backbones; the Darcy prior is not the Poisson one."""
    digest = {k: v[2] for k, v in resolved.items()}
    for task in TASKS:
        assert digest[("ddis", task, "model")] == digest[("funddps", task, "model")]
        assert digest[("ddis", task, "surrogate")] != digest[("funddps", task, "surrogate")]
        assert digest[("fundps", task, "model")] != digest[("diffusionpde", task, "model")]
    darcy = _get(resolved[("fundps", "darcy", "model")][1], "model.options")
    poisson = _get(resolved[("fundps", "poisson", "model")][1], "model.options")
    assert darcy == {**poisson, "attn_resolutions": (8,)}


BACKBONES = {  # (sampler, option): the `nn.published` backbone the configs above describe
    ("fundps", "model"): "fundps_prior", ("funddps", "model"): "fundps_prior",
    ("ddis", "model"): "fundps_prior",
    ("funddps", "surrogate"): "funddps_surrogate", ("ddis", "surrogate"): "ddis_surrogate",
    ("diffusionpde", "model"): "diffusionpde_prior", ("eci", "model"): "eci_velocity",
    ("mc_dropout", "model"): "mc_dropout_inverse",
}  # fmt: skip


@pytest.mark.parametrize("arg", ["medium", "tiny"])
def test_smaller_scales_keep_the_published_architectures_by_one_rule(arg):
    """Medium: `nn.published.get(name, "medium")` (the `SCALE_RULES` rule) per task; tiny: the tiny
    table; both trained with the scale's own optimizer settings."""
    from posteriorjax.nn import published

    parsed = settings(main_table.get_config(arg))
    assert parsed.training.scale == arg
    seen = set()
    for entry in parsed.samplers:
        for option, spec in entry.networks.items():
            if (entry.label, option) not in BACKBONES:
                continue
            seen.add((entry.label, option))
            for task in entry.tasks:
                cfg, _ = networks.network_config(task, parsed.tasks[task], spec, arg)
                name, options = published.get(BACKBONES[(entry.label, option)], arg, task)
                assert (cfg.model.name, _plain(cfg.model.options.to_dict())) == (name, _plain(options))
                scale_train = networks.common_config(task, spec.kind, arg).train
                assert cfg.train.learning_rate == scale_train.learning_rate
    assert seen == set(BACKBONES)


def test_medium_main_table_size_and_schedules():
    config = main_table.get_config("medium")
    assert set(config.tasks) == {"darcy", "poisson", "poisson_fixed"}
    assert set(main_table.get_config("medium:darcy,poisson,poisson_fixed,ltmi,ccs").tasks) == set(
        main_table.MEDIUM_TASKS
    )
    assert all(config.tasks[t].resolution == 32 for t in ("darcy", "poisson", "poisson_fixed"))
    assert config.num_cases >= 10 and config.num_samples >= 64
    labels = set(config.samplers)
    learned = set(main_table.SAMPLERS) | {f"{n}_ours" for n in main_table.OURS_VARIANTS}
    twins = {f"{k}_oracle" for k in learned if config.samplers[k].sampler in main_table.ORACLE_SPLIT}
    assert learned | twins == labels
    for twin in twins:  # the error split's oracle rows: no prior network, on poisson_fixed only
        entry = config.samplers[twin]
        assert entry.options["prior"] == "oracle" and "model" not in entry.networks
        assert tuple(entry.tasks) == ("poisson_fixed",)
    for label in labels:
        entry = config.samplers[label]
        if entry.sampler in ("fundps", "funddps", "dps", "diffusionpde", "ddis", "eci"):
            assert entry.options["num_steps"] >= 100, label
        want = "published" if label.removesuffix("_oracle") in base.PUBLISHED_OPTIONS else None
        assert entry.options.get("profile") == want, label


def test_entries_that_need_a_square_grid_skip_ccs():
    """GRF noise (DPS, the `_ours` rows) needs a square grid and the full FunDiff's 16 x 16 patches
    do not tile CCS's 64 x 200: those entries run on every other task (the dry run found them
    unbuildable on CCS)."""
    medium = "medium:darcy,poisson,poisson_fixed,ltmi,ccs"
    for arg, off in ((medium, ("dps", "esmda_ours", "fundps_ours", "eci_ours")), ("", ("dps", "fundiff"))):
        config = main_table.get_config(arg)
        for label in off:
            assert set(config.samplers[label].tasks) == set(config.tasks) - {"ccs"}, label
        assert config.samplers["fundps"].tasks is None  # published FunDPS runs on CCS too


def test_a_part_of_the_medium_table_is_the_same_entries():
    """`medium:TASKS:LABELS` keeps the listed tasks and entries unchanged (their networks, and so
    the trained network directories, are the whole table's); unknown names are errors."""
    whole = main_table.get_config("medium")
    part = main_table.get_config("medium:poisson_fixed:fundps,fundps_oracle")
    assert list(part.tasks) == ["poisson_fixed"] and list(part.samplers) == ["fundps", "fundps_oracle"]
    for label in part.samplers:
        assert part.samplers[label].to_dict() == whole.samplers[label].to_dict()
    assert "fundps_oracle" not in main_table.get_config("medium:darcy").samplers  # oracle: poisson_fixed only
    for arg, name in (("medium:poison", "tasks"), ("medium:darcy:fundsp", "samplers"), ("medium::", "tasks")):
        with pytest.raises(ValueError, match=name):
            main_table.get_config(arg)


def test_medium_networks_train_for_their_backbones_budget():
    """At the medium scale a network trains `kinds.medium_steps(its backbone)` steps, whether the
    backbone is its kind's default or a published one laid over it by the spec."""
    from posteriorjax import training

    parsed = settings(main_table.get_config("medium:poisson"))
    seen = {}
    for entry in parsed.samplers:
        for spec in entry.networks.values():
            cfg, _ = networks.network_config("poisson", parsed.tasks["poisson"], spec, "medium")
            seen[str(cfg.model.name)] = int(cfg.train.num_steps)
            assert cfg.train.warmup_steps <= cfg.train.num_steps // 5  # 250 steps: not all warm-up
    assert seen["ddpmpp_uno"] == 1500 and seen["ddpmpp"] == 250 and seen["fno_pad"] == 1500
    assert seen["fno"] == training.kinds.MEDIUM_STEPS
    assert training.config("poisson", "prior", "medium").train.num_steps == 1500  # the kind's U-NO
    assert training.config("poisson", "surrogate", "medium").train.num_steps == training.kinds.MEDIUM_STEPS


def _planned_medium_networks(task: str, before_ema_rampup: bool = False) -> set[str]:
    """The network directories `configs/main_table.py:medium:<task>` asks for (`network_config`'s
    hash); `before_ema_rampup`: the names computed without the ``train.ema_rampup`` setting, as
    they were for the networks trained before it existed."""
    from posteriorjax import files

    parsed = settings(main_table.get_config(f"medium:{task}"))
    planned = set()
    for entry in parsed.samplers:
        options = {**parsed.tasks[task], **entry.task_options}
        for spec in entry.networks.values():
            cfg, digest = networks.network_config(task, options, spec, "medium", parsed.training_steps)
            if before_ema_rampup:  # the digest of `network_config`, less the setting
                plain = cfg.to_dict()
                for key in (*networks.BOOKKEEPING, "ema_rampup"):
                    plain["train"].pop(key)
                plain.pop("scores")
                digest = files.json_digest(plain, 12)
            planned.add(f"{spec.kind}-{digest}")
    return planned


def _committed(folder: str) -> list[Path]:
    root = Path(__file__).resolve().parents[1] / "results" / "networks" / folder
    return sorted(p for p in root.glob("*/*") if (p / "config.json").is_file())


def test_the_committed_medium_networks_are_the_directories_the_table_asks_for():
    """Every trained network committed under `results/networks/medium/<task>/` is named as
    `configs/main_table.py:medium:<task>` computes it today (`network_config`'s hash): a change of
    what enters a network's identity that would rename a committed network fails here. The
    networks trained before the EMA's rampup (`results/networks/medium_ema_from_init/`, whose EMA
    started at the initial parameters) are named as the table computed them then, and their
    configs hold no rampup."""
    for folder, before in (("medium", False), ("medium_ema_from_init", True)):
        committed = _committed(folder)
        for task in sorted({p.parent.name for p in committed}):
            names = {p.name for p in committed if p.parent.name == task}
            assert names <= _planned_medium_networks(task, before), (folder, task)
    old = _committed("medium_ema_from_init")
    assert len(old) == 6  # the FunDPS joint priors (3), the ECI velocities (2), the Fun-DDPS / DDIS prior
    for p in old:
        train = json.loads((p / "config.json").read_text())["train"]
        assert "ema_rampup" not in train and train["ema_decay"] == 0.999, p.name
