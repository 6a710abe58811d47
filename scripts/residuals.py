"""Discrete-consistency report: mean normalized PDE residual per family.

    python scripts/residuals.py [--n=128] [--per_regime=4] [--families=darcy,heat,...] [--json=FILE]

For each of the seven observation-pattern families (PDE-OBS) this draws
`--per_regime` smooth-GRF conditions per regime (low / medium / high), solves in
float64, and evaluates the normalized residual of the PDE-OBS quality report,
rms(residual) / sum_i rms(term_i), on

  * the float64 solution, and
  * the same solution rounded to float32 ("stored", as the published data are,
    which is what the published generation residuals measure).

Residuals (see each module's `residual`):
  heat                 replay u_{h+1} - exp(alpha lap dt) u_h (exact scheme -> round-off)
  reaction_diffusion,  time-centred (u_{h+1} - u_h)/dt - F((u_h + u_{h+1})/2) over the
  burgers,             15 frames (dt = T/14): an O(dt^2) truncation of the frame
  navier_stokes        sampling, nonzero even for an exact trajectory
  darcy, poisson,      f - A u with the module's own discrete operator
  helmholtz

Because the time-centred residual of 15 frames is dominated by the O(dt^2)
truncation of the frame spacing (it falls 4x per halving of dt for an exact
trajectory), it is also evaluated on a dense audit trajectory with `--audit`
(default 20) times more frames over the same [0, T] ("audit" column; float64).

For the time-dependent families it also reports the replay residual, the heat
check applied to every family: each stored interval of one sample per regime is
re-integrated from frame h with 4x more steps and compared with frame h + 1,
normalized by rms(u_{h+1}) + rms(replayed) -- the solver's own time-stepping
consistency, free of the frame-sampling truncation above. The published means
(PDE-OBS) are printed alongside. Takes a few minutes on a 2-core CPU at n = 128.
"""

from __future__ import annotations

import json
import sys
import time
import types
from pathlib import Path

import jax
from absl import app, flags

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from posteriorjax import console, parallel  # noqa: E402
from posteriorjax.grids import Grid  # noqa: E402
from posteriorjax.physics import burgers, heat, spectral  # noqa: E402
from posteriorjax.physics import navier_stokes as ns  # noqa: E402
from posteriorjax.physics import reaction_diffusion as rd  # noqa: E402

PUBLISHED = {
    "heat": 1.3e-8,
    "reaction_diffusion": 3.4e-5,
    "burgers": 1.3e-2,
    "darcy": 1.1e-5,
    "poisson": 1.7e-5,
    "helmholtz": 1.8e-5,
    "navier_stokes": None,
}
REGIMES = ("low", "medium", "high")
SEED = 20260804


def smooth_grf(key, n: int) -> jax.Array:
    """PDE-OBS smooth GRF (l = 0.22), `(n, n)`, from `posteriorjax.random_fields` when present."""
    try:
        from posteriorjax.random_fields import SmoothGRF
    except ImportError:
        m = np.fft.fftfreq(n, d=1.0 / n)
        filt = np.exp(-2 * (np.pi * 0.22) ** 2 * (m[:, None] ** 2 + m[None, :] ** 2))
        filt[0, 0] = 0.0
        g = jnp.fft.ifft2(jnp.fft.fft2(jr.normal(key, (n, n))) * filt).real
        return (g - g.mean()) / (g - g.mean()).std()
    return SmoothGRF(n).sample(key)[0]


# ----------------------------------------------------------------------------
# Time-dependent families: (solve(u0, p, **kw), normalized_residual(frames, p), u0 scale)


def _time_families(n: int):
    """name -> params, u0 scales, T, step bound, solve(u0, p, T, frames, steps), residual."""
    grid = Grid(n, bc="periodic")
    burgers_dt = burgers.time_step(grid, max_speed=burgers.DEFAULT_MAX_SPEED, cfl=burgers.DEFAULT_CFL)
    ns_dt = ns.time_step(grid, max_speed=ns.DEFAULT_MAX_SPEED, cfl=ns.DEFAULT_CFL)
    return grid, {
        "heat": dict(
            params=(0.005, 0.02, 0.08),
            scale=(1.0, 1.0, 1.0),
            T=0.25,
            dt=None,
            solve=lambda u, p, T, F, s: heat.solve(u, grid, alpha=p, final_time=T, num_frames=F),
            residual=lambda f, p: heat.normalized_residual(f, grid, alpha=p, final_time=0.25),
        ),
        "reaction_diffusion": dict(
            params=(0.5, 1.5, 4.0),
            scale=(0.8, 0.8, 0.8),
            T=0.8,
            dt=rd.DEFAULT_MAX_DT,
            solve=lambda u, p, T, F, s: rd.solve(u, grid, r=p, final_time=T, num_frames=F, steps_per_frame=s),
            residual=lambda f, p: rd.normalized_residual(f, grid, r=p, final_time=0.8),
        ),
        "burgers": dict(
            params=(0.04, 0.015, 0.004),
            scale=(1.0, 1.0, 1.0),
            T=0.35,
            dt=burgers_dt,
            solve=lambda u, p, T, F, s: burgers.solve(
                u, grid, nu=p, final_time=T, num_frames=F, steps_per_frame=s
            ),
            residual=lambda f, p: burgers.normalized_residual(f, grid, nu=p, final_time=0.35),
        ),
        "navier_stokes": dict(
            params=(0.02, 0.008, 0.0025),
            scale=(2.0, 3.0, 4.0),
            T=0.4,
            dt=ns_dt,
            solve=lambda u, p, T, F, s: ns.solve(
                u, grid, nu=p, final_time=T, num_frames=F, steps_per_frame=s
            ),
            residual=lambda f, p: ns.normalized_residual(f, grid, nu=p, final_time=0.4),
        ),
    }


def time_dependent(name: str, n: int, per_regime: int, key, audit: int) -> dict:
    grid, families = _time_families(n)
    fam = families[name]
    T, frame_dt = fam["T"], fam["T"] / 14
    steps = None if fam["dt"] is None else spectral.steps_for(frame_dt, fam["dt"])
    num_audit = 14 * audit + 1
    audit_steps = None if fam["dt"] is None else spectral.steps_for(T / (num_audit - 1), fam["dt"])
    out = {"float64": [], "float32_stored": [], "replay": [], "audit": [], "per_regime": {}}
    for i, (regime, p, scale) in enumerate(zip(REGIMES, fam["params"], fam["scale"], strict=True)):
        keys = jr.split(jr.fold_in(key, i), per_regime)
        u0 = scale * jax.vmap(lambda k: smooth_grf(k, n))(keys)
        frames = jax.jit(jax.vmap(lambda u, p=p: fam["solve"](u, p, T, 15, steps)))(u0)
        res = jax.jit(jax.vmap(lambda f, p=p: fam["residual"](f, p)))
        r64 = np.asarray(res(frames))
        r32 = np.asarray(res(frames.astype(jnp.float32).astype(jnp.float64)))
        # dense audit trajectory: `audit` times more frames over the same [0, T]
        dense = jax.jit(jax.vmap(lambda u, p=p: fam["solve"](u, p, T, num_audit, audit_steps)))(u0)
        ra = np.asarray(jax.jit(jax.vmap(lambda f, p=p: fam["residual"](f, p)))(dense))
        del dense
        # replay every stored interval of the first sample with 4x finer steps
        fine = None if steps is None else 4 * steps
        first = frames[0]
        replay = jax.jit(jax.vmap(lambda u, p=p, s=fine: fam["solve"](u, p, frame_dt, 2, s)[-1]))
        replayed = replay(first[:-1])
        rep = float(spectral.normalized_residual(first[1:] - replayed, first[1:], replayed))
        out["float64"] += r64.tolist()
        out["float32_stored"] += r32.tolist()
        out["replay"].append(rep)
        out["audit"] += ra.tolist()
        out["per_regime"][regime] = {
            "param": p,
            "float64": float(r64.mean()),
            "float32_stored": float(r32.mean()),
            "replay_vs_4x_steps": rep,
            "dense_audit": float(ra.mean()),
            "steps": None if steps is None else 14 * steps,
        }
    return out


# ----------------------------------------------------------------------------
# Elliptic families (Dirichlet interior nodes), using the modules' `residual`


def _darcy_forcing(grid: Grid) -> jax.Array:
    y, x = grid.mesh()
    f = np.sin(2 * np.pi * x) * np.sin(2 * np.pi * y) + 0.2 * np.sin(4 * np.pi * x + 0.3) * np.sin(
        2 * np.pi * y
    )
    return jnp.asarray(f - f.mean())


def elliptic(name: str, n: int, per_regime: int, key) -> dict | None:
    try:
        if name == "darcy":
            from posteriorjax.physics import darcy as module
        elif name == "poisson":
            from posteriorjax.physics import poisson as module
        else:
            from posteriorjax.physics import helmholtz as module
    except ImportError as err:
        print(f"  skipped {name}: posteriorjax.physics.{name} not available ({err})")
        return None
    grid = Grid(n, bc="dirichlet")
    params = {"darcy": (2.0, 8.0, 32.0), "poisson": (0.5, 1.0, 2.0), "helmholtz": (0.5, 1.0, 2.0)}[name]
    forcing = _darcy_forcing(grid)

    def one(b, p):
        if name == "darcy":
            b = 2 * (b - b.min()) / (b.max() - b.min()) - 1
            a = jnp.exp(0.5 * jnp.log(p) * b)
            u = module.solve(a, grid, f=forcing)
            return module.residual(a, u, grid, f=forcing), jnp.broadcast_to(forcing, u.shape), (a, u)
        if name == "poisson":
            f = p * b
            u = module.solve(f, grid)
            return module.residual(f, u, grid), f, (f, u)
        u = module.solve(b, grid, p)
        return module.residual(b, u, grid, p), b, (b, u)

    def normalized(r, f):
        return spectral.rms(r) / (spectral.rms(f - r) + spectral.rms(f))

    out = {"float64": [], "float32_stored": [], "per_regime": {}}
    for i, (regime, p) in enumerate(zip(REGIMES, params, strict=True)):
        keys = jr.split(jr.fold_in(key, i), per_regime)
        b = jax.vmap(lambda k: smooth_grf(k, n))(keys)
        r, f, (cond, u) = jax.jit(jax.vmap(lambda x, p=p: one(x, p)))(b)
        r64 = np.asarray(jax.vmap(normalized)(r, f))

        def stored(c, v, p=p):
            c32, v32 = (z.astype(jnp.float32).astype(jnp.float64) for z in (c, v))
            if name == "darcy":
                return module.residual(c32, v32, grid, f=forcing), forcing
            if name == "poisson":
                return module.residual(c32, v32, grid), c32
            return module.residual(c32, v32, grid, p), c32

        r32 = np.asarray(jax.vmap(lambda c, v: normalized(*stored(c, v)))(cond, u))
        out["float64"] += r64.tolist()
        out["float32_stored"] += r32.tolist()
        out["per_regime"][regime] = {
            "param": p,
            "float64": float(r64.mean()),
            "float32_stored": float(r32.mean()),
        }
    return out


FAMILIES = ("heat", "reaction_diffusion", "burgers", "navier_stokes", "darcy", "poisson", "helmholtz")
_N = flags.DEFINE_integer("n", 128, "Grid points per side.")
_PER_REGIME = flags.DEFINE_integer("per_regime", 4, "Samples per parameter regime.")
_FAMILIES = flags.DEFINE_list("families", list(FAMILIES), "PDE families to report (comma-separated).")
_JSON = flags.DEFINE_string("json", None, "Also write the report to this JSON file.")
_AUDIT = flags.DEFINE_integer("audit", 20, "Frame density of the dense audit trajectory (x 14 intervals).")


def main(argv) -> None:
    del argv
    console.setup_logging()
    args = types.SimpleNamespace(
        n=_N.value,
        per_regime=_PER_REGIME.value,
        families=_FAMILIES.value,
        json=_JSON.value,
        audit=_AUDIT.value,
    )
    unknown = sorted(set(args.families) - set(FAMILIES))
    if unknown:
        raise app.UsageError(f"--families: unknown {unknown}; expected names from {list(FAMILIES)}")
    key = jr.key(SEED)
    report = {}
    header = (
        f"{'family':<20} {'float64':>10} {'float32':>10} {'audit':>9} {'published':>10} {'replay':>9}"
        "  per regime (float32)"
    )
    print(header)
    print("-" * len(header))
    for i, name in enumerate(args.families):
        start = time.perf_counter()
        k = jr.fold_in(key, i)
        if name in ("darcy", "poisson", "helmholtz"):
            res = elliptic(name, args.n, args.per_regime, k)
        else:
            res = time_dependent(name, args.n, args.per_regime, k, args.audit)
        if res is None:
            continue
        summary = {
            "mean_float64": float(np.mean(res["float64"])),
            "mean_float32_stored": float(np.mean(res["float32_stored"])),
            "published": PUBLISHED[name],
            "replay_vs_4x_steps": float(np.mean(res["replay"])) if res.get("replay") else None,
            "dense_audit": float(np.mean(res["audit"])) if res.get("audit") else None,
            "audit_frames": 14 * args.audit + 1,
            "per_regime": res["per_regime"],
            "n": args.n,
            "samples": len(res["float64"]),
            "seconds": time.perf_counter() - start,
        }
        report[name] = summary
        pub = "-" if summary["published"] is None else f"{summary['published']:.2g}"
        rep = summary["replay_vs_4x_steps"]
        rep = "-" if rep is None else f"{rep:.1e}"
        aud = summary["dense_audit"]
        aud = "-" if aud is None else f"{aud:.2e}"
        regimes = " / ".join(f"{v['float32_stored']:.2g}" for v in res["per_regime"].values())
        print(
            f"{name:<20} {summary['mean_float64']:>10.2e} {summary['mean_float32_stored']:>10.2e} {aud:>9} "
            f"{pub:>10} {rep:>9}  {regimes}",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    parallel.reserve_cpu_threads()  # before JAX starts (several CPU devices; see parallel)
    app.run(main)
