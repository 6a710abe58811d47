"""Use a Flax model wherever an Equinox model is expected.

`from_linen(module, params)` and `from_nnx(model)` return Equinox modules whose array
leaves are the Flax parameters (so optax, EMA, orbax checkpoints and `eqx.filter_*`
see them) and whose Flax structure is static. The call signature is the project's:
`__call__(x, *args, key=None)`; a key becomes the linen ``"dropout"`` RNG stream.
"""

from __future__ import annotations

import importlib
from typing import Any

import equinox as eqx
import jax


def _flax(name: str):
    """`flax.<name>`, imported on first use: flax is the optional `[flax]` extra."""
    try:
        return importlib.import_module(f"flax.{name}")
    except ModuleNotFoundError as e:
        if e.name not in ("flax", f"flax.{name}"):
            raise
        raise ImportError(
            "posteriorjax.nn.flax_adapter needs flax, which is not installed: "
            "pip install 'posteriorjax[flax]' (or pip install flax)"
        ) from e


class FlaxLinen(eqx.Module):
    """A `flax.linen.Module` with its variables: `apply(variables, x, *args, rngs=...)`.

    The shapes are the wrapped module's: a network of the project maps one field
    `(C_in, H, W) -> (C_out, H, W)` (`posteriorjax.nn`); the adapter passes `x` through as is.
    """

    module: Any = eqx.field(static=True)
    variables: Any

    def __call__(self, x: jax.Array, *args, key=None, **kwargs) -> jax.Array:
        rngs = None if key is None else {"dropout": key}
        return self.module.apply(self.variables, x, *args, rngs=rngs, **kwargs)


class FlaxNNX(eqx.Module):
    """A `flax.nnx.Module` split into a static graph definition and a state pytree.

    The shapes are the wrapped module's: a network of the project maps one field
    `(C_in, H, W) -> (C_out, H, W)` (`posteriorjax.nn`); the adapter passes `x` through as is.
    """

    graphdef: Any = eqx.field(static=True)
    state: Any

    def __call__(self, x: jax.Array, *args, key=None, **kwargs) -> jax.Array:
        nnx = _flax("nnx")
        if key is not None:
            raise ValueError("key: stochastic NNX modules carry their own Rngs; expected key=None")
        return nnx.merge(self.graphdef, self.state)(x, *args, **kwargs)


def from_linen(module, variables=None, *, key=None, example=None) -> FlaxLinen:
    """Wrap a linen module; pass its `variables`, or a `key` and an `example` input to initialize them."""
    linen = _flax("linen")
    if not isinstance(module, linen.Module):
        raise ValueError(f"module: expected a flax.linen.Module, got {type(module).__name__}")
    if variables is None:
        if key is None or example is None:
            raise ValueError("variables: expected variables, or both key and example to initialize them")
        variables = module.init(key, example)
    return FlaxLinen(module, variables)


def from_nnx(model) -> FlaxNNX:
    """Wrap a `flax.nnx.Module` (its current state is copied into the wrapper)."""
    nnx = _flax("nnx")
    if not isinstance(model, nnx.Module):
        raise ValueError(f"model: expected a flax.nnx.Module, got {type(model).__name__}")
    graphdef, state = nnx.split(model)
    return FlaxNNX(graphdef, state)
