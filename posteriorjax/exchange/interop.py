"""Interop: a task's forward map and its vector-Jacobian product on NumPy arrays.

For guided samplers outside JAX (e.g. PyTorch): `Forward(task)` jit-compiles
`y = task.forward(x)` and its VJP once and takes and returns float32 NumPy arrays, so a
torch sampler calls `f(x.cpu().numpy())` (or shares device memory through DLPack:
`jax.dlpack.from_dlpack(tensor)`, `torch.from_dlpack(jax_array)`) without importing JAX
types. Shapes: `x (C, H, W)` or a batch `(B, C, H, W)`; `y (M,)` / `(B, M)`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax.tasks.base import Task


class Forward:
    """NumPy-in, NumPy-out forward map, VJP and misfit gradient of `task`.

    Each method takes one field `x (C, H, W)` (the task's `unknown_shape`) or a batch
    `(B, C, H, W)`, float32, and answers in kind: `y (M,)` or `(B, M)`, M the number of
    observations, in the units of the task's channels and observations.
    """

    def __init__(self, task: Task):
        self.task = task
        self._f = jax.jit(jax.vmap(task.forward))

        def vjp(x, v):
            y, back = jax.vjp(task.forward, x)
            return y, back(v)[0]

        def grad(x, y_obs):  # d/dx of 0.5 ||(F(x) - y_obs) / std||^2
            def loss(z):
                return 0.5 * jnp.sum(task.noise.whiten(task.forward(z) - y_obs) ** 2)

            return jax.value_and_grad(loss)(x)

        self._vjp, self._grad = jax.jit(jax.vmap(vjp)), jax.jit(jax.vmap(grad))

    def _batch(self, x, name="x"):
        x = np.asarray(x, np.float32)
        single = x.shape == tuple(self.task.unknown_shape)
        if not single and x.shape[1:] != tuple(self.task.unknown_shape):
            raise ValueError(f"{name}: expected {self.task.unknown_shape} or (B, *that), got {x.shape}")
        return (x[None] if single else x), single

    def _out(self, arrays, single):
        arrays = tuple(np.asarray(a) for a in arrays)
        return tuple(a[0] for a in arrays) if single else arrays

    def __call__(self, x) -> np.ndarray:
        """`y = observation(physics(x))`, noise free: `(C, H, W) -> (M,)`, `(B, C, H, W) -> (B, M)`."""
        xb, single = self._batch(x)
        return self._out((self._f(xb),), single)[0]

    def vjp(self, x, cotangent) -> tuple[np.ndarray, np.ndarray]:
        """`(y, J(x)^T v)` for a cotangent `v` shaped like y."""
        xb, single = self._batch(x)
        v = np.asarray(cotangent, np.float32).reshape(xb.shape[0], -1)
        return self._out(self._vjp(xb, v), single)

    def misfit_grad(self, x, y_obs) -> tuple[np.ndarray, np.ndarray]:
        """`(0.5 ||(F(x) - y_obs) / std||^2, its gradient in x)`: the negative log-likelihood + const."""
        xb, single = self._batch(x)
        y = np.broadcast_to(np.asarray(y_obs, np.float32), (xb.shape[0], self.task.num_observations))
        return self._out(self._grad(xb, y), single)
