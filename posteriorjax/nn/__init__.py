"""Neural operators and networks (Equinox) and a Flax adapter.

Every network maps one field `(C_in, H, W) -> (C_out, H, W)` with the call
`net(x, t=None, *, key=None)`: `t` is the noise-level input of diffusion backbones
(None for plain regressors), `key` switches dropout on (training, MC dropout).
`get(name, key, in_channels=, out_channels=, **options)` builds one by name. The published
PosteriorBench backbones: ``ddpmpp`` (EDM `SongUNet`, DiffusionPDE's prior), ``ddpmpp_uno``
(FunDPS `SongUNO`, ``ddpmpp-uno``), ``fno`` with ``style="neuralop"`` (neuralop's FNO: Fun-DDPS
surrogate, ECI velocity with ``time_channels``, MC-dropout inverse) and ``fno_pad`` (DDIS's
reflect-padded FNO); `nn.published` lists their published configurations.
"""

from __future__ import annotations

from posteriorjax.nn.cno import CNO, aa_activation
from posteriorjax.nn.ddpmpp import SongUNet, SongUNO, TuckerSpectralConv
from posteriorjax.nn.deeponet import DeepONet
from posteriorjax.nn.dit import DiT
from posteriorjax.nn.embeddings import FourierEmbedding, NoiseEmbedding, sinusoidal_embedding
from posteriorjax.nn.fae import FunctionAutoencoder
from posteriorjax.nn.flax_adapter import FlaxLinen, FlaxNNX, from_linen, from_nnx
from posteriorjax.nn.fno import FNO
from posteriorjax.nn.layers import ChannelMLP, Dropout, Pointwise, SpectralConv, spectral_resample
from posteriorjax.nn.neuralop_fno import NeuralopFNO
from posteriorjax.nn.normalized import (
    InverseNet,
    Normalizer,
    Surrogate,
    field_normalizer,
    state_statistics,
)
from posteriorjax.nn.pdeobs import MODELS as _PDEOBS_MODELS
from posteriorjax.nn.transolver import GNOT, Transolver, grid_tokens
from posteriorjax.nn.unet import UNet
from posteriorjax.nn.uno import UNO


def _fno(in_channels: int, out_channels: int, *, key, style: str = "ours", **options):
    """``fno``: our `FNO` (``style="ours"``) or neuralop's (`NeuralopFNO`, ``style="neuralop"``)."""
    if style == "ours":
        return FNO(in_channels, out_channels, key=key, **options)
    if style == "neuralop":
        return NeuralopFNO(in_channels, out_channels, key=key, **options)
    raise ValueError(f"style: expected 'ours' or 'neuralop', got {style!r}")


def _fno_pad(in_channels: int, out_channels: int, *, key, **options):
    """``fno_pad``: DDIS's FNO_pad, the neuralop FNO on the reflect-padded input (`NeuralopFNO`)."""
    return NeuralopFNO(in_channels, out_channels, reflect_pad=True, key=key, **options)


_MODELS = {
    "fno": _fno,
    "fno_pad": _fno_pad,
    "ddpmpp": SongUNet,
    "ddpmpp_uno": SongUNO,
    "uno": UNO,
    "unet": UNet,
    "deeponet": DeepONet,
    "cno": CNO,
    "transolver": Transolver,
    "gnot": GNOT,
    "fae": FunctionAutoencoder,  # FunDiff function autoencoder (nn.fae)
    "dit": DiT,  # FunDiff latent DiT (nn.dit); maps token sets, not fields
    **_PDEOBS_MODELS,  # the seven PDE-OBS networks (nn.pdeobs), as "pdeobs_<name>"
}


def names() -> list[str]:
    """The registered network names, sorted: what `get` accepts."""
    return sorted(_MODELS)


def get(name: str, key, *, in_channels: int, out_channels: int, **options):
    """Build network `name` (one of `names()`) with `options` passed to its constructor."""
    if name not in _MODELS:
        raise ValueError(f"name: unknown network {name!r}; available: {names()}")
    try:
        return _MODELS[name](in_channels, out_channels, key=key, **options)
    except TypeError as err:
        raise ValueError(f"options: invalid options {sorted(options)} for network {name!r}: {err}") from err


__all__ = [
    "FNO",
    "NeuralopFNO",
    "SongUNet",
    "SongUNO",
    "TuckerSpectralConv",
    "UNO",
    "UNet",
    "DeepONet",
    "CNO",
    "Transolver",
    "GNOT",
    "aa_activation",
    "grid_tokens",
    "FunctionAutoencoder",
    "DiT",
    "FlaxLinen",
    "FlaxNNX",
    "from_linen",
    "from_nnx",
    "ChannelMLP",
    "Dropout",
    "Pointwise",
    "SpectralConv",
    "spectral_resample",
    "FourierEmbedding",
    "NoiseEmbedding",
    "sinusoidal_embedding",
    "get",
    "names",
    "InverseNet",
    "Normalizer",
    "Surrogate",
    "field_normalizer",
    "state_statistics",
]
