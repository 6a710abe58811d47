"""Observation geometry of the interface tasks and controlled local inverse problems.

    python -m experiments.geometry --config=configs/geometry.py --workdir=/tmp/geometry
    python -m experiments.geometry --config=configs/geometry.py:tiny --workdir=/tmp/geometry_tiny

Full scale (64 x 64, refinement check at 32 x 32, 1600/500/800 split, 5 seeds):
several minutes on one CPU core. `tiny` (16 x 16, refinement at 12, 160/50/80,
2 seeds): ~25 s of CPU time. Writes `summary.md` (retained/below-threshold table,
finite-difference check, ridge/TSVD NRMSE and selective scores), `results.json`
and `figures/curves_*.png` (recovery yield Y and below-threshold abstention Z
against claim coverage, with the random reference). Retained/below-threshold
dimensions measured at 64 x 64 (32 x 32 in brackets), tau = 0.05:
potential 12/5 (12/5); meltpool steady 8/9 (8/9); meltpool 2 frames 9/8 (8/9);
transport final frame only 4/13 (5/12); transport 12 frames 7/10 (15/2).
"""

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    # (task, frames); frames = None for the steady potential task
    config.configurations = (
        ("interface_potential", -1),
        ("interface_meltpool", 0),
        ("interface_meltpool", 2),
        ("interface_transport", 0),
        ("interface_transport", 12),
    )
    config.resolution = 64
    config.refine_resolution = 32
    config.tau = 0.05
    config.delta = 0.3
    config.fd_steps = (1e-2, 3e-3, 1e-3, 3e-4)
    config.controlled = ml_collections.ConfigDict()
    config.controlled.num_train = 1600
    config.controlled.num_val = 500
    config.controlled.num_test = 800
    config.controlled.num_seeds = 5
    config.controlled.latent_dim = 4
    config.controlled.residual_std = 0.05
    config.controlled.ridge = 1e-2
    config.seed = 0
    if arg == "tiny":
        config.configurations = (("interface_potential", -1), ("interface_transport", 2))
        config.resolution = 16
        config.refine_resolution = 12
        config.controlled.num_train = 160
        config.controlled.num_val = 50
        config.controlled.num_test = 80
        config.controlled.num_seeds = 2
    elif arg not in (None, ""):
        raise ValueError(f"config argument: expected '' or 'tiny', got {arg!r}")
    return config
