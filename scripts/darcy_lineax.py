"""Darcy's solve: its own PCG (`physics.linear.solve_spd`) against `lineax.CG` with the same preconditioner.

    python scripts/darcy_lineax.py --resolution=64 --batch=16 --max_steps=5000

Both solve -div(a grad u) = 1 on binary {3, 12} permeabilities, vmapped over `--batch` fields,
float32, rtol 1e-5, preconditioned by the constant-coefficient fast Poisson solve scaled by the
geometric mean of a; the gradient is that of sum(u * w) with respect to a (implicit derivatives:
`custom_linear_solve` here, lineax's own linear-solve derivative there). Prints the best and
median of 5 timed calls after compilation, the mean iterations per solve and the largest
relative difference of the solutions.
"""

import time

import jax
import jax.numpy as jnp
import jax.random as jr
import lineax as lx
import numpy as np
from absl import app, flags

from posteriorjax import console
from posteriorjax.grids import Grid
from posteriorjax.physics import darcy, linear

_RESOLUTION = flags.DEFINE_integer("resolution", 64, "Grid points per side.")
_BATCH = flags.DEFINE_integer("batch", 16, "Permeability fields solved at once (vmap).")
_MAX_STEPS = flags.DEFINE_integer("max_steps", 500, "lineax.CG step cap (the PCG cap is 500).")
_RTOL = 1e-5


def lineax_solution(a, grid, f, max_steps):
    struct = jax.ShapeDtypeStruct(f.shape, f.dtype)
    tags = lx.positive_semidefinite_tag
    operator = lx.FunctionLinearOperator(darcy.operator(a, grid), struct, tags=tags)
    pre = lx.FunctionLinearOperator(
        linear.poisson_preconditioner(grid, linear.geometric_mean(a)), struct, tags=tags
    )
    solver = lx.CG(rtol=_RTOL, atol=0.0, max_steps=max_steps)
    return lx.linear_solve(operator, f, solver, options={"preconditioner": pre}, throw=False)


def lineax_solve(a, grid, f, max_steps):
    return lineax_solution(a, grid, f, max_steps).value


def timed(fn, x) -> str:
    jax.block_until_ready(fn(x))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        jax.block_until_ready(fn(x))
        times.append(time.perf_counter() - start)
    return f"best {min(times) * 1e3:.1f} ms, median {np.median(times) * 1e3:.1f} ms"


def main(argv):
    del argv
    console.setup_logging()
    n, batch = _RESOLUTION.value, _BATCH.value
    grid = Grid(n, 1.0, "dirichlet")
    key = jr.key(0)
    a = jnp.where(jr.normal(key, (batch, n, n)) > 0, 12.0, 3.0)
    f, w = jnp.ones((n, n)), jr.normal(jr.fold_in(key, 1), (n, n))
    solvers = {
        "pcg": lambda a: darcy.solve(a, grid, 1.0, rtol=_RTOL),
        "lineax": lambda a: lineax_solve(a, grid, f, _MAX_STEPS.value),
    }
    for name, fn in solvers.items():
        print(f"{name} solve, {batch} x {n}^2: {timed(jax.jit(jax.vmap(fn)), a)}", flush=True)
        grad = jax.jit(jax.vmap(jax.grad(lambda a, fn=fn: jnp.sum(fn(a) * w))))
        try:
            print(f"{name} grad, {batch} x {n}^2: {timed(grad, a)}", flush=True)
        except Exception as e:  # lineax raises (through a callback) when its adjoint solve hits max_steps
            steps = "maximum number of solver steps was reached" in str(e)
            reason = f"adjoint CG hit max_steps={_MAX_STEPS.value}" if steps else type(e).__name__
            print(f"{name} grad failed: {reason}", flush=True)
    ours = jax.vmap(lambda a: darcy.solve_with_info(a, grid, 1.0, rtol=_RTOL)[1].iterations)(a)
    theirs = jax.vmap(lambda a: lineax_solution(a, grid, f, _MAX_STEPS.value).stats["num_steps"])(a)
    print(f"iterations per solve: pcg {float(jnp.mean(ours)):.1f}, lineax {float(jnp.mean(theirs)):.1f}")
    u = [jax.vmap(fn)(a) for fn in solvers.values()]
    print(f"max relative difference: {float(jnp.max(jnp.abs(u[0] - u[1])) / jnp.max(jnp.abs(u[0]))):.2e}")


if __name__ == "__main__":
    app.run(main)
