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

`TINY` holds proportionally smaller versions of each that run on 16 x 16 grids.
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


def get(name: str, scale: str = "full") -> tuple[str, dict]:
    """(nn name, options) of the published backbone `name` (a key of `PUBLISHED`) at `scale`."""
    table = {"full": PUBLISHED, "tiny": TINY}.get(scale)
    if table is None:
        raise ValueError(f"scale: expected 'full' or 'tiny', got {scale!r}")
    if name not in table:
        raise ValueError(f"name: expected one of {sorted(table)}, got {name!r}")
    model, options = table[name]
    return model, dict(options)
