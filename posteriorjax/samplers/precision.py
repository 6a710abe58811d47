"""The integration precision of a sampler: ``"float32"`` or ``"float64"``, and where JAX enters float64.

The published FunDPS, Fun-DDPS and DDIS loops (PosteriorBench `posteriorbench/methods/fundps.py`,
`funddps.py`, `ddis.py`) integrate in float64: the sigma schedule is built in float64, the initial
latent and every later noise draw are drawn in float32 (`RBFKernel.sample`, torch's default dtype)
and cast to float64, and the state, the Heun / Euler / Langevin arithmetic and the guidance
gradient are float64. The networks stay float32: the EDM denoiser casts x and sigma to float32
on entry (`EDMPrecond.forward`) and the loop casts its output back (``.to(torch.float64)``);
the surrogates are called on float32 inputs. The published DiffusionPDE loop is float32 throughout
(its schedule is built in float32), so it has no float64 precision.

A sampler with ``precision="float64"`` does the same: its state dtype is float64, its noise is
drawn in `NOISE_DTYPE` and cast, and each network runs in the dtype of its own parameters
(`network_dtype`: float32 for every trained network; an exact oracle built under x64 runs in
float64). Float64 arrays need JAX's x64 mode while the program is traced; `scope(sampler)` enters
it for a sampler that asks for float64 and only then: the sweep traces, compiles and runs each
(task, sampler) pair inside it (`sweep.pair.run_pair`, the memory check and the dry run's sizing).
"""

from __future__ import annotations

import contextlib

import equinox as eqx
import jax
import jax.numpy as jnp

from posteriorjax import checks

PRECISIONS = ("float32", "float64")
NOISE_DTYPE = jnp.float32  # the published noise draws (torch's default dtype), cast to the state's
# The published profiles' default precision, per sampler whose published loop integrates in float64.
# The rule: float64 where float32 moves a posterior metric by more than its Monte Carlo error on a
# medium case. By that measurement (`scripts/precision.py`, with the exact prior; docs/studies/
# main-table.md, "Float32 against float64 integration") none of the three needs it.
PUBLISHED = {"fundps": "float32", "funddps": "float32", "ddis": "float32"}


def check(precision: str) -> str:
    """`precision` if it is one of `PRECISIONS`, else a ValueError naming the option."""
    checks.in_choices("precision", precision, PRECISIONS)
    return precision


def resolve(precision: str | None, profile: str, sampler: str) -> str:
    """`precision` (validated), or the default of `sampler`'s `profile`: `PUBLISHED[sampler]` for
    ``"published"``, float32 for ours."""
    if precision is None:
        return PUBLISHED[sampler] if profile == "published" else "float32"
    return check(precision)


def state_dtype(precision: str):
    """The dtype a sampler of `precision` integrates in; float64 needs x64 mode at trace time."""
    check(precision)
    if precision == "float32":
        return jnp.float32
    if not jax.config.jax_enable_x64:
        raise ValueError(
            "precision: 'float64' integrates in float64, which needs JAX's x64 mode while the sampler is "
            "traced: call it inside `precision.scope(sampler)` (or `jax.enable_x64(True)`); the sweep "
            "enters it for such a pair. Got x64 mode off"
        )
    return jnp.float64


def network_dtype(module, default):
    """The dtype `module` (a network, or an exact oracle) is evaluated in: the result type of its
    floating-point array leaves (float32 for a trained network), `default` if it has none."""
    leaves = [a for a in jax.tree.leaves(eqx.filter(module, eqx.is_inexact_array))]
    return jnp.result_type(*leaves) if leaves else jnp.dtype(default)


def needs_x64(sampler) -> bool:
    """Whether `sampler` asks for float64 integration (its ``precision`` field)."""
    return getattr(sampler, "precision", "float32") == "float64"


def scope(sampler):
    """Context in which `sampler`'s program is traced, compiled and run: `jax.enable_x64(True)` if
    it integrates in float64, else nothing (x64 mode stays as the caller set it)."""
    return jax.enable_x64(True) if needs_x64(sampler) else contextlib.nullcontext()
