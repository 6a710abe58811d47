"""Observation geometry of the interface tasks, controlled local inverse problems, learned estimators.

    python -m experiments.geometry --config=configs/geometry.py --workdir=/tmp/geometry
    python -m experiments.geometry --config=configs/geometry.py:tiny --workdir=/tmp/geometry_tiny

Full scale (64 x 64, refinement check at 32 x 32, 1600/500/800 split, 5 seeds;
learned estimators: 4 configurations x 4 families x 5 seeds x 5 members, 3000
steps; the transport partition at 32/64/128): hours on one CPU core, minutes on
a GPU (transport F12 at 64², 25 members per family on one H200: MLP 25 s,
GRU 14 s, DeepONet 99 s, FNO 190 s including data and compilation). `tiny`
(16 x 16, refinement at 12, 160/50/80, 2 seeds; learned: transport F2, 160/60/80,
2 seeds x 3 members, 300 steps; no convergence study): 2 min on one idle CPU
core (measured 2 m 0 s wall, 1 m 56 s user). Writes `summary.md`
(retained/below-threshold table, finite-difference check, ridge/TSVD NRMSE and
selective scores, learned-estimator and confidence-ranking tables, transport
partition vs resolution), `results.json`, `figures/curves_*.png` (ridge/TSVD)
and `figures/learned_*.png` (recovery yield Y and below-threshold abstention Z
against claim coverage per confidence rule, with the random reference).

Retained/below-threshold dimensions measured at 64 x 64 (32 x 32 in brackets),
tau = 0.05: potential 12/5 (12/5); meltpool steady 8/9 (8/9); meltpool 2 frames
9/8 (8/9); transport (second-order MUSCL advection) final frame only 3/14 (4/13);
transport 12 frames 6/11 (14/3). With the task's interface width of one grid
spacing the transport partition reaches its sharp-interface limit 3/14 only at
128² (12 frames: 14/3, 6/11, 4/13, 3/14, 3/14 at 32, 64, 96, 128, 192); at a
fixed physical width 2/65 it is 4/13 at every resolution (final frame) and
14/3 -> 13/4 from 128² on (12 frames).
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
    # learned estimators (posteriorjax.estimators), trained at config.resolution
    config.learned = ml_collections.ConfigDict()
    config.learned.configurations = (
        ("interface_potential", -1),
        ("interface_transport", 2),
        ("interface_transport", 8),
        ("interface_transport", 12),
    )
    config.learned.estimators = ("mlp", "gru", "fno", "deeponet")
    config.learned.num_train = 1600
    config.learned.num_calibration = 500
    config.learned.num_test = 800
    config.learned.num_seeds = 5
    config.learned.num_members = 5
    config.learned.level = 0.9  # conformal coverage level
    config.learned.num_steps = 3000
    config.learned.batch_size = 64
    config.learned.learning_rate = 1e-3
    config.learned.weight_decay = 1e-4
    config.learned.options = ml_collections.ConfigDict()
    config.learned.options.mlp = dict(width=256, depth=3)
    config.learned.options.gru = dict(hidden=128)
    config.learned.options.fno = dict(modes=12, width=32, layers=4, projection=64)
    config.learned.options.deeponet = dict(width=32, conv_layers=4, basis=64, trunk_depth=3)
    # transport partition vs resolution and advection scheme (empty resolutions: skipped)
    config.convergence = ml_collections.ConfigDict()
    config.convergence.configurations = (("interface_transport", 0), ("interface_transport", 12))
    config.convergence.schemes = ("muscl", "upwind")
    config.convergence.resolutions = (32, 64, 128)
    # physical interface widths (units of L); 0: the task default of one grid spacing
    config.convergence.interface_widths = (0.0, 2 / 65)
    if arg == "tiny":
        config.configurations = (("interface_potential", -1), ("interface_transport", 2))
        config.resolution = 16
        config.refine_resolution = 12
        config.controlled.num_train = 160
        config.controlled.num_val = 50
        config.controlled.num_test = 80
        config.controlled.num_seeds = 2
        config.learned.configurations = (("interface_transport", 2),)
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
        config.convergence.resolutions = ()
    elif arg not in (None, ""):
        raise ValueError(f"config argument: expected '' or 'tiny', got {arg!r}")
    return config
