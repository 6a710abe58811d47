"""Observation geometry of the interface tasks, controlled local inverse problems, learned estimators.

    python -m experiments.geometry --config=configs/geometry.py --workdir=/tmp/geometry
    python -m experiments.geometry --config=configs/geometry.py:tiny --workdir=/tmp/geometry_tiny

Reference configurations (the paper's Table 1): Battery = `interface_potential`
(16 ring sensors + area and energy), Melt-pool = `interface_meltpool` with a
2-frame history (12 sensors x 3 snapshots), Flooding = `interface_transport`,
final frame, 13 sensors. Learning configurations (Tables 3-6): Battery M0 (the two
auxiliary channels alone, `num_sensors=0`: 1 retained / 16 below at 64², the paper's),
Battery M2 / M8 (load histories of 2, 8 earlier frames, 16 sensors + the auxiliary
channels), Melt-pool M12 and Flooding M12 (12 earlier frames). An entry is
(label, task, frames[, ((task option, value), ...)]). Full scale: 64², refinement check at 48² (the paper's),
controlled 1600/500/800 x 5 seeds, learned 1600/500/800, 5 seeds x 5 members,
3000 steps (hours on CPU; minutes per family on a GPU). `tiny`: 16², 20²,
controlled 160/50/80 x 2 seeds; learned Battery M0, M2 and Flooding M12, the six
families, 160/60/80, 2 seeds x 3 members, 300 steps. `reference`: Tables 1 and 2
at full scale only (no learned estimators). `medium`: 64² and the full splits, controlled
3 seeds; learned MLP and GRU only, 3 seeds x 3 members, 2000 steps. `medium_unipde`: `medium`
plus UniPDE and UniPDE-noalign (FNO and DeepONet at this scale need hours of the shared CPU:
`experiments.geometry_dryrun`). `medium_flood` / `medium_long` / `medium_long8`: Flooding M12 alone as in
`medium` (the same numbers: streams are keyed by name), MLP and GRU for 2000 / 8000 steps, the
MLP alone for 16000 (a training-length experiment; controlled problems 1 seed).
"""

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    # (label, task, history frames)
    config.configurations = (
        ("Battery", "interface_potential", 0),
        ("Melt-pool", "interface_meltpool", 2),
        ("Flooding", "interface_transport", 0),
    )
    config.resolution = 64
    config.refine_resolution = 48
    config.tau = 0.05
    config.delta = 0.3
    config.fd_steps = (1e-2, 3e-3, 1e-3, 3e-4)
    config.perturbation_delta = 1e-3
    config.seed = 0
    # controlled local inverse problems (posteriorjax.studies.geometry.controlled): coefficients at the task
    # prior's std (c - c0 = s (L z + residual_std r)), whitened noise N(0, I)
    config.controlled = ml_collections.ConfigDict()
    config.controlled.num_train = 1600
    config.controlled.num_val = 500
    config.controlled.num_test = 800
    config.controlled.num_seeds = 5  # repetitions redraw the samples and the noise ...
    config.controlled.prior_seed = 0  # ... the prior (the loading L) is the problem's, drawn once
    config.controlled.latent_dim = 4
    config.controlled.residual_std = 0.03
    config.controlled.ridge = 1e-2
    config.controlled.ood_shift = 0.5  # OOD: every coefficient's mean moved by 0.5 prior std ...
    config.controlled.ood_scale = 1.2  # ... and its spread widened 1.2x
    # learned estimators (posteriorjax.studies.estimators)
    config.learned = ml_collections.ConfigDict()
    config.learned.configurations = (
        ("Battery M0", "interface_potential", 0, (("num_sensors", 0),)),
        ("Battery M2", "interface_potential", 2),
        ("Battery M8", "interface_potential", 8),
        ("Melt-pool M12", "interface_meltpool", 12),
        ("Flooding M12", "interface_transport", 12),
    )
    config.learned.estimators = ("mlp", "gru", "fno", "deeponet", "unipde", "unipde_noalign")
    config.learned.num_train = 1600
    config.learned.num_calibration = 500
    config.learned.num_test = 800
    config.learned.num_seeds = 5
    config.learned.num_members = 5
    config.learned.level = 0.9  # conformal coverage level
    config.learned.ood_shift = 0.5  # OOD test split: tasks.interface.shifted_prior(shift, scale)
    config.learned.ood_scale = 1.2
    config.learned.num_steps = 3000
    config.learned.batch_size = 64
    config.learned.learning_rate = 1e-3
    config.learned.weight_decay = 1e-4
    config.learned.options = ml_collections.ConfigDict()
    config.learned.options.mlp = dict(width=256, depth=3)
    config.learned.options.gru = dict(hidden=128)
    config.learned.options.fno = dict(modes=12, width=32, layers=4, projection=64)
    config.learned.options.deeponet = dict(width=32, conv_layers=4, basis=64, trunk_depth=3)
    # our reading of the paper's UniPDE (estimators.UniPDEEstimator): shared channel encoder,
    # pooled latent, alignment weight (UniPDE-noalign: the same model without the term)
    config.learned.options.unipde = dict(width=128, depth=2, latent=64, align_weight=0.1)
    config.learned.options.unipde_noalign = dict(width=128, depth=2, latent=64)
    if arg == "tiny":
        config.resolution = 16
        config.refine_resolution = 20
        config.controlled.num_train = 160
        config.controlled.num_val = 50
        config.controlled.num_test = 80
        config.controlled.num_seeds = 2
        config.learned.configurations = (
            ("Battery M0", "interface_potential", 0, (("num_sensors", 0),)),
            ("Battery M2", "interface_potential", 2),
            ("Flooding M12", "interface_transport", 12),
        )
        config.learned.num_train = 160
        config.learned.num_calibration = 60
        config.learned.num_test = 80
        config.learned.num_seeds = 2
        config.learned.num_members = 3
        config.learned.num_steps = 300
        config.learned.options.mlp = dict(width=64, depth=2)
        config.learned.options.gru = dict(hidden=32)
        config.learned.options.fno = dict(modes=4, width=8, layers=2, projection=16)
        config.learned.options.deeponet = dict(width=8, conv_layers=2, basis=16, trunk_depth=2)
        config.learned.options.unipde = dict(width=32, depth=2, latent=16, align_weight=0.1)
        config.learned.options.unipde_noalign = dict(width=32, depth=2, latent=16)
    elif arg in ("medium", "medium_unipde"):  # 64²; the two cheap families (+ UniPDE, UniPDE-noalign)
        config.controlled.num_seeds = 3
        unipde = ("unipde", "unipde_noalign") if arg == "medium_unipde" else ()
        config.learned.estimators = ("mlp", "gru", *unipde)
        config.learned.num_seeds = 3
        config.learned.num_members = 3
        config.learned.num_steps = 2000
        config.learned.options.gru = dict(hidden=64)
    elif arg in ("medium_flood", "medium_long", "medium_long8"):  # Flooding M12, 1x / 4x / 8x the steps
        config.controlled.num_seeds = 1
        config.learned.configurations = (("Flooding M12", "interface_transport", 12),)
        config.learned.estimators = ("mlp",) if arg == "medium_long8" else ("mlp", "gru")
        config.learned.num_seeds = 3
        config.learned.num_members = 3
        config.learned.num_steps = {"medium_flood": 2000, "medium_long": 8000, "medium_long8": 16000}[arg]
        config.learned.options.gru = dict(hidden=64)
    elif arg == "reference":  # Tables 1 and 2 at full scale, no learned estimators
        config.learned.configurations = ()
    elif arg not in (None, ""):
        raise ValueError(
            "config argument: expected '', 'tiny', 'medium', 'medium_unipde', 'medium_flood', "
            f"'medium_long', 'medium_long8' or 'reference', got {arg!r}"
        )
    return config
