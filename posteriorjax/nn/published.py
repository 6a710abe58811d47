"""The published PosteriorBench backbones as `nn.get` (name, options) entries.

Sources (neuraloperator/PosteriorBench): `train_fundps.py` / `train_diffusionpde.py` (the ``arch``
presets), `training_fundps/networks.py` (`SongUNO`), `training_diffusionpde/networks.py`
(`SongUNet`), `training_funddps/surrogate.py`, `training_ddis/surrogate.py` (``FNO_pad``),
`training_eci/flow.py` (`ECIFNOVectorField`), `training_mcdropout/model.py`, and the Poisson /
Darcy configs `configs/training/*.yml`:

  fundps_prior        ``ddpmpp-uno``: cbase 64, cres [1, 2, 4, 4], 4 blocks, attention at 16,
                      dropout 0.13, fmult 0.5, rank 0.1, nn_resolution 64 (54.1 M parameters; the
                      config says "54M"); also the shared Fun-DDPS / DDIS target prior
  diffusionpde_prior  ``ddpmpp``: cbase 128, cres [2, 2, 2], 4 blocks, attention at 16 (none of
                      the 128 / 64 / 32 levels; the decoder's first block always has it),
                      dropout 0.13, img_resolution 128 (the published network also holds a
                      9 -> 128 augmentation-label map, unused here: we train without EDM's
                      augmentation pipe)
  funddps_surrogate   neuralop FNO 16 modes / 48 hidden / 4 layers, projection ratio 1, domain
                      padding 0.1 (one-sided)
  ddis_surrogate      ``fno_pad``: neuralop FNO 64 modes / 64 hidden / 4 layers (defaults
                      otherwise), reflect padding by half the grid
  eci_velocity        neuralop FNO 32 modes / 128 hidden / 6 layers, lifting and projection
                      ratio 4, domain padding 0.1, t as a 32-channel embedding concatenated
  mc_dropout_inverse  neuralop FNO 32 modes / 128 hidden / 6 layers, lifting ratio 2, projection
                      ratio 1, channel-MLP dropout 0.2, domain padding 0.1

Per task (`TASK_OPTIONS`): the Darcy FunDPS prior and shared target prior put attention at 8,
not 16 (`darcy_fundps_64_pretrain.yml`, `darcy_shared_target_prior_*.yml`: ``attn_resolutions:
[8]``; the Poisson ones ``[16]``).

`TINY` holds proportionally smaller versions of each that run on 16 x 16 grids. `scaled` gives
any backbone at a smaller scale by one rule (`SCALE_RULES`: the ``medium`` scale of the 32 x 32
CPU studies). The tiny table stays written by hand: the rule at 16 x 16 (x 16/128) would leave
the ``ddpmpp-uno`` prior four levels below an 8 x 8 network grid, the last at 1 x 1 with no
Fourier mode, and the Fun-DDPS surrogate 2 modes; the tiny networks keep each family (U-NO,
U-Net, FNO, padded FNO) with fewer levels, blocks and layers so that a CPU compiles and trains
one in about a minute (the compile times: docs/networks.md).
"""

from __future__ import annotations

_UNO_TINY = dict(model_channels=16, channel_mult=(1, 2), num_blocks=1, attn_resolutions=(8,))

# fmt: off
PUBLISHED: dict[str, tuple[str, dict]] = {
    "fundps_prior": (
        "ddpmpp_uno",
        dict(
            model_channels=64, channel_mult=(1, 2, 4, 4), num_blocks=4, attn_resolutions=(16,),
            dropout=0.13, fmult=0.5, rank=0.1, resolution=64,
        ),
    ),
    "diffusionpde_prior": (
        "ddpmpp",
        dict(
            model_channels=128, channel_mult=(2, 2, 2), num_blocks=4, attn_resolutions=(16,),
            dropout=0.13, resolution=128,
        ),
    ),
    "funddps_surrogate": (
        "fno", dict(style="neuralop", modes=16, width=48, layers=4, projection_ratio=1, padding=0.1)
    ),
    "ddis_surrogate": ("fno_pad", dict(modes=64, width=64, layers=4)),
    "eci_velocity": (
        "fno",
        dict(
            style="neuralop", modes=32, width=128, layers=6, lifting_ratio=4, projection_ratio=4,
            padding=0.1, time_channels=32,
        ),
    ),
    "mc_dropout_inverse": (
        "fno",
        dict(
            style="neuralop", modes=32, width=128, layers=6, lifting_ratio=2, projection_ratio=1,
            dropout=0.2, padding=0.1,
        ),
    ),
}

TINY: dict[str, tuple[str, dict]] = {
    "fundps_prior": ("ddpmpp_uno", dict(_UNO_TINY, dropout=0.13, fmult=0.5, rank=0.1, resolution=16)),
    "diffusionpde_prior": (
        "ddpmpp",
        dict(model_channels=8, channel_mult=(2, 2), num_blocks=1, attn_resolutions=(8,), dropout=0.13,
             resolution=16),
    ),
    "funddps_surrogate": (
        "fno", dict(style="neuralop", modes=8, width=16, layers=3, projection_ratio=1, padding=0.1)
    ),
    "ddis_surrogate": ("fno_pad", dict(modes=8, width=16, layers=3)),
    "eci_velocity": (
        "fno",
        dict(style="neuralop", modes=8, width=16, layers=3, lifting_ratio=4, projection_ratio=4,
             padding=0.1, time_channels=32),
    ),
    "mc_dropout_inverse": (
        "fno",
        dict(style="neuralop", modes=8, width=16, layers=3, lifting_ratio=2, projection_ratio=1,
             dropout=0.2, padding=0.1),
    ),
}
# fmt: on


# One rule shrinks a published backbone for a smaller grid: sizes tied to the grid (Fourier modes,
# the nominal and attention resolutions of the U-Nets, the function autoencoders' grid and patch
# sizes) follow the grid by `resolution / 128`; widths (channels and embedding dimensions) are
# divided by `width_divisor`; depths (blocks, layers, heads) and every ratio are kept. A scaled
# network therefore sees the same fraction of the spectrum and the same patch grid as the
# published one at 128 x 128.
SCALE_RULES: dict[str, dict] = {"medium": {"resolution": 32, "width_divisor": 4}}
PUBLISHED_RESOLUTION = 128
GRID_KEYS = ("modes", "resolution", "attn_resolutions", "grid_size", "patch_size")
WIDTH_KEYS = ("model_channels", "width", "embed_dim", "projection", "time_channels", "emb_dim", "dec_emb_dim")


def scaled(spec: tuple[str, dict], scale: str) -> tuple[str, dict]:
    """The backbone `spec` = (nn name, options), given at the published 128 x 128 scale, shrunk to
    `scale` (a key of `SCALE_RULES`) by the rule above; integer sizes round to the nearest, at least 1."""
    if scale not in SCALE_RULES:
        raise ValueError(f"scale: expected one of {sorted(SCALE_RULES)}, got {scale!r}")
    rule = SCALE_RULES[scale]
    grid = rule["resolution"] / PUBLISHED_RESOLUTION
    name, options = spec

    def resize(value, factor):
        if isinstance(value, tuple | list):
            return tuple(resize(v, factor) for v in value)
        return max(1, round(value * factor))

    out = {}
    for key, value in options.items():
        if key in GRID_KEYS:
            value = resize(value, grid)
        elif key in WIDTH_KEYS and value:
            value = resize(value, 1 / rule["width_divisor"])
        out[key] = value
    return name, out


# Per-task options of a backbone, at the published scale and at the tiny table's (the Darcy
# attention level is half the Poisson one in both); a `SCALE_RULES` scale shrinks the published ones.
TASK_OPTIONS: dict[str, dict[str, dict[str, dict]]] = {
    "darcy": {
        "fundps_prior": {"full": {"attn_resolutions": (8,)}, "tiny": {"attn_resolutions": (4,)}},
    },
}


def get(name: str, scale: str = "full", task: str | None = None) -> tuple[str, dict]:
    """(nn name, options) of the published backbone `name` (a key of `PUBLISHED`) at `scale`
    (``full``, ``tiny`` or a `SCALE_RULES` scale such as ``medium``), with the options that
    PosteriorBench's configs give `task` (`TASK_OPTIONS`; None or another task: the defaults)."""
    if scale not in ("full", "tiny", *SCALE_RULES):
        raise ValueError(f"scale: expected one of {('full', 'tiny', *SCALE_RULES)}, got {scale!r}")
    table = TINY if scale == "tiny" else PUBLISHED
    if name not in table:
        raise ValueError(f"name: expected one of {sorted(table)}, got {name!r}")
    model, options = table[name]
    variant = TASK_OPTIONS.get(task, {}).get(name, {})
    options = {**options, **variant.get("tiny" if scale == "tiny" else "full", {})}
    if scale in SCALE_RULES:
        return scaled((model, options), scale)
    return model, options
