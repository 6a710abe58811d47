"""Observations: operators (`operators`: pure pytrees mapping a state to a flat vector), the
observation patterns (`patterns`: PDE-OBS masks, presets, point sensors, mixtures) and the noise
models (`noise`). The public names of the three modules are importable from here."""

from posteriorjax.observations.noise import GaussianNoise
from posteriorjax.observations.operators import (
    AbstractObservation,
    AveragePool,
    ColumnObservation,
    MaskObservation,
)
from posteriorjax.observations.patterns import PRESET_TOLERANCE, mixture, names, pattern, point_sensors

__all__ = [
    "PRESET_TOLERANCE",
    "AbstractObservation",
    "AveragePool",
    "ColumnObservation",
    "GaussianNoise",
    "MaskObservation",
    "mixture",
    "names",
    "pattern",
    "point_sensors",
]
