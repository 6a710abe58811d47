"""The shared training configuration of every `configs/train/<task>_<kind>.py`.

It lives in the library (`posteriorjax.training_config`), since the sweep builds its networks from
the same defaults; this module keeps the configs' import path.
"""

from posteriorjax.training_config import FULL_MODELS, FULL_STEPS, GENERATIVE, TINY_MODELS, config

__all__ = ["FULL_MODELS", "FULL_STEPS", "GENERATIVE", "TINY_MODELS", "config"]
