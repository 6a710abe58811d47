"""Sizing: what a sweep will cost, before anything is trained, sampled or pooled (`plan.dry_run`).

* `counts`: the (task, sampler) programs and their configurations (cases x hyperparameter
  grid x sampler seeds), and the calibration stage's (`calibrate`) validation configurations;
* `network_sizes`: every network the study trains, built abstractly (`abstract_network`:
  `eqx.filter_eval_shape`, no parameter allocated), with its parameter count;
* `program_costs`: per pair, the FLOPs of one configuration counted from its jaxpr
  (`jaxpr_flops`, loops multiplied by their trip counts) and, when compiled, XLA's per-device
  memory (`program.peak_bytes` of `compiled.memory_analysis()`) and XLA's own FLOP count
  (`compiled.cost_analysis()`, which counts a while loop's body once, so it is a lower bound for
  iterative samplers); all on abstract inputs (`jax.ShapeDtypeStruct`);
* `throughputs` / `hours`: the expected compute time at the matmul roofline of each device kind
  with a recorded benchmark (`results/benchmarks/*.json`, `scripts/bench/roofline.py`);
* `pilot_fill`: whether an eps-rule reference can keep its K members, from a small pilot pool.
"""

from __future__ import annotations

import importlib
import json
import math
import re
import time
from collections.abc import Mapping
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.extend import core

from posteriorjax import diffusion, nn, parallel, samplers, tasks, training
from posteriorjax.nn.pdeobs import parameter_count
from posteriorjax.reference import pool, registry, rejection
from posteriorjax.samplers import precision
from posteriorjax.sweep import networks, program, statistics
from posteriorjax.sweep.pair import balanced_chunk
from posteriorjax.sweep.settings import SamplerEntry, Settings
from posteriorjax.tasks.base import Task

EPS_METHODS = ("rejection", "published_eps", "eps_k1000")
BENCHMARKS = Path(__file__).resolve().parents[2] / "results" / "benchmarks"


def _abstract(tree):
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype), tree)


def _is_abstract(leaf) -> bool:
    return isinstance(leaf, jax.ShapeDtypeStruct)


def _abstract_arrays(tree):
    """`tree` with its arrays replaced by `jax.ShapeDtypeStruct`s (other leaves kept)."""
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype) if eqx.is_array(a) else a, tree)


# ----------------------------------------------------------------------------
# Counts


def calibration_configurations(s: Settings, entry: SamplerEntry) -> int:
    """Validation configurations of an entry's calibration stage (0 without `calibrate`)."""
    cal = getattr(entry, "calibrate", None)
    if cal is None:
        return 0
    other = math.prod(len(v) for k, v in entry.axes.items() if k != cal.hparam)
    return cal.num_cases * len(cal.grid) * other * len(s.seeds)


def counts(s: Settings) -> dict:
    """{"programs": (task, sampler) pairs, "configurations": their total, "calibration_configurations",
    "pairs": {"task/label": configurations}}; a pair's configurations = cases x grid x seeds."""
    pairs, calibration = {}, 0
    for task_name, entry in s.pairs():
        pairs[f"{task_name}/{entry.label}"] = (
            s.num_cases * math.prod(len(v) for v in entry.axes.values()) * len(s.seeds)
        )
        calibration += calibration_configurations(s, entry)
    return {
        "programs": len(pairs),
        "configurations": sum(pairs.values()),
        "calibration_configurations": calibration,
        "pairs": pairs,
    }


# ----------------------------------------------------------------------------
# Networks, built abstractly


def abstract_network(task_name: str, task_options: Mapping, spec, scale: str, num_steps=None):
    """The model `networks.network` would train, as a pytree of `jax.ShapeDtypeStruct` leaves.

    Built from the same training config (`networks.network_config`) by `training.run.build_model`
    under `eqx.filter_eval_shape`: no parameter is allocated and nothing is trained. The state
    normalizer's statistics (a prior-and-solve estimate in training) are placeholders here: they
    are static floats, so shapes and parameter counts do not depend on them. A kind with trained
    `inputs` gets them built the same way (as zeros: its wrapper fingerprints their values).
    """
    training_run = importlib.import_module("posteriorjax.training.run")  # `training.run` is the function

    cfg, _ = networks.network_config(task_name, task_options, spec, scale, num_steps)
    kind = training.kinds.get(spec.kind)
    task = tasks.get(cfg.task, **dict(cfg.task_options))
    x_norm = nn.field_normalizer(task)
    c_u = task.state_shape[0]
    u_norm = nn.Normalizer((0.0,) * c_u, (1.0,) * c_u) if kind.uses_state else None
    if kind.edm:
        scale_ = cfg.diffusion.get("data_scale", 1.0)
        x_norm = x_norm.rescaled(scale_)
        u_norm = None if u_norm is None else u_norm.rescaled(scale_)
    inputs = {
        role: abstract_network(task_name, task_options, s, scale, num_steps)
        for role, s in networks.input_specs(spec).items()
    }
    inputs = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype) if _is_abstract(a) else a, inputs)
    d = cfg.diffusion
    noise = diffusion.noise.get(d.noise, **training_run.NOISE_OPTIONS[d.noise](d))

    def build(key):
        return training_run.build_model(
            spec.kind,
            cfg.model.name,
            dict(cfg.model.options),
            task,
            x_norm=x_norm,
            u_norm=u_norm,
            key=key,
            sigma_data=d.sigma_data,
            noise=noise,
            inputs=inputs or None,
        )

    return eqx.filter_eval_shape(build, jr.key(int(cfg.model.seed)))


def _network_jobs(s: Settings):
    """(owner, task name, task options, spec) of every network the study trains."""
    for task_name, entry in s.pairs():
        options = {**s.tasks[task_name], **entry.task_options}
        for option, spec in entry.networks.items():
            yield f"{task_name}/{entry.label}.{option}", task_name, options, spec
    for task_name, spec in s.reference_networks.items():
        yield f"{task_name}/reference", task_name, dict(s.tasks[task_name]), spec


def network_sizes(s: Settings) -> tuple[dict, dict]:
    """({"task/kind-hash": {kind, model, parameters, used_by}}, {(owner): abstract model}).

    One entry per distinct training config (the workdir's `networks/<task>/<kind>-<hash>`);
    `parameters`: real scalars in the inexact arrays (`nn.pdeobs.parameter_count`; complex count
    two), the pretraining chain and trained inputs listed as their own entries."""
    sizes, models, built = {}, {}, {}

    def visit(owner, task_name, options, spec):
        for role, sub in networks.input_specs(spec).items():
            visit(f"{owner}<{role}", task_name, options, sub)
        if spec.pretrain is not None:
            visit(f"{owner}<pretrain", task_name, options, spec.pretrain)
        cfg, digest = networks.network_config(task_name, options, spec, s.training_scale, s.training_steps)
        name = f"{task_name}/{spec.kind}-{digest}"
        if name not in built:
            built[name] = abstract_network(task_name, options, spec, s.training_scale, s.training_steps)
            sizes[name] = {
                "kind": spec.kind,
                "model": str(cfg.model.name),
                "parameters": int(parameter_count(built[name])),
                "train_steps": int(cfg.train.num_steps),
                "used_by": [],
            }
        sizes[name]["used_by"].append(owner)
        return built[name]

    for owner, task_name, options, spec in _network_jobs(s):
        models[owner] = visit(owner, task_name, options, spec)
    return sizes, models


# ----------------------------------------------------------------------------
# FLOPs from a jaxpr


def _size(aval) -> int:
    return int(math.prod(getattr(aval, "shape", ())))


def _sub_jaxprs(params):
    for value in params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, core.ClosedJaxpr):
                yield v.jaxpr
            elif isinstance(v, core.Jaxpr):
                yield v


def jaxpr_flops(jaxpr) -> tuple[float, int]:
    """(FLOPs, while loops of unknown trip count) of a jaxpr, counted per equation.

    dot_general: 2 x output size x contracted size; conv_general_dilated: 2 x output size x
    (kernel window x input features per group); fft: 5 N log2 N per complex transform of N
    points (2.5 N log2 N for real input or output); any other primitive: one FLOP per output
    element. `scan` multiplies its body by its length (so `lax.map`, `fori_loop` with static
    bounds and the samplers' step loops count every step); `cond` takes its costliest branch;
    `while` counts its body once and is reported, its trip count unknown until run time.
    """
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total, unknown = 0.0, 0
    for eqn in jaxpr.eqns:
        name, params = eqn.primitive.name, eqn.params
        out = sum(_size(v.aval) for v in eqn.outvars)
        if name == "scan":
            body, n = jaxpr_flops(params["jaxpr"])
            total, unknown = total + params["length"] * body, unknown + n
        elif name == "while":
            body, n1 = jaxpr_flops(params["body_jaxpr"])
            cond, n2 = jaxpr_flops(params["cond_jaxpr"])
            total, unknown = total + body + cond, unknown + 1 + n1 + n2
        elif name == "cond":
            branches = [jaxpr_flops(b) for b in params["branches"]]
            total += max(b[0] for b in branches)
            unknown += max(b[1] for b in branches)
        elif name == "dot_general":
            (lhs_contract, _), _ = params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += 2.0 * out * math.prod(lhs[i] for i in lhs_contract)
        elif name == "conv_general_dilated":
            rhs = eqn.invars[1].aval.shape
            spec = params["dimension_numbers"].rhs_spec  # (out features, in features, *spatial)
            window = math.prod(rhs[i] for i in spec[2:]) * rhs[spec[1]]
            total += 2.0 * out * window
        elif name == "fft":
            lengths = tuple(params["fft_lengths"])
            n = math.prod(lengths)
            batch = _size(eqn.invars[0].aval) / max(math.prod(eqn.invars[0].aval.shape[-len(lengths) :]), 1)
            real = "R" in str(params["fft_type"])
            total += (2.5 if real else 5.0) * n * math.log2(max(n, 2)) * batch
        else:
            subs = list(_sub_jaxprs(params))
            if subs:  # pjit, custom_jvp/vjp, remat, shard_map, ...: their bodies
                for sub in subs:
                    f, n = jaxpr_flops(sub)
                    total, unknown = total + f, unknown + n
            else:
                total += out
    return total, unknown


# ----------------------------------------------------------------------------
# Programs on abstract inputs


def abstract_data(task: Task, num_cases: int, reference_size: int, seed: int) -> dict:
    """`statistics.program_data`'s arrays as `jax.ShapeDtypeStruct`s, for `num_cases` cases and a
    reference of `reference_size` members (nothing drawn: the TARP points' shape by `eval_shape`)."""
    f32, k, shape = jnp.float32, int(num_cases), tuple(task.unknown_shape)
    points = jax.eval_shape(lambda: statistics.tarp_reference_fields(task, seed, 1))
    d = math.prod(points.shape[1:])
    sds = jax.ShapeDtypeStruct
    return {
        "y_obs": sds((k, int(task.num_observations)), f32),
        "x_true": sds((k, *shape), f32),
        "ref_samples": sds((k, int(reference_size), *shape), f32),
        "ref_weights": sds((k, int(reference_size)), f32),
        "tarp_shift": sds((d,), f32),
        "tarp_scale": sds((d,), f32),
        "tarp_points": sds((k, d), points.dtype),
    }


def _abstract_sampler(plan, task_name: str, entry: SamplerEntry, nets: Mapping):
    """(sampler, grid) of a pair; a sampler with networks is built under `eqx.filter_eval_shape`
    from their abstract pytrees (its arrays `ShapeDtypeStruct`s), the others concretely (`plan.pair`)."""
    if not entry.networks:
        return plan.pair(task_name, entry, {})
    task = plan.sampler_task(task_name, entry)

    def build(nets):
        return samplers.get(entry.sampler, task, **entry.options, **nets)

    try:
        sampler = eqx.filter_eval_shape(build, dict(nets))
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        # the builder reads parameter values (a fingerprint of its networks):
        zeros = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype) if _is_abstract(a) else a, dict(nets))
        sampler = _abstract_arrays(build(zeros))  # built on zeros, then made abstract again
    s = plan.settings
    grid = program.expand(s.num_cases, entry.axes, s.seeds, sampler.defaults)
    return sampler, grid


def program_cost(
    plan,
    task_name: str,
    entry: SamplerEntry,
    nets: Mapping,
    *,
    compile: bool,
    mesh=None,
    cache: dict | None = None,
) -> dict:
    """The cost of one pair's program on abstract inputs (module docstring).

    Returns {"flops_per_configuration", "flops_per_sample", "unbounded_loops", "chunk",
    "reference_size"} and, with `compile`, {"memory_bytes", "xla_flops_per_sample",
    "compile_s"}; `cache` (a dict) keeps one compile per distinct program (task, sampler
    options, network shapes, chunk, hyperparameter names).
    """
    s, mesh = plan.settings, parallel.data_mesh() if mesh is None else mesh
    task = plan.tasks[task_name]
    sampler, grid = _abstract_sampler(plan, task_name, entry, nets)
    with precision.scope(sampler):  # a float64 sampler traces in x64, as in `run_pair`
        size = int(s.references[task_name]["num_samples"])
        data = abstract_data(task, s.num_cases, size, s.seed)
        chunk = balanced_chunk(grid.size, s.chunk_size, mesh.devices.size, s.batch_size)
        configs = _abstract(grid.take(np.zeros(chunk, int)))
        dynamic, static = eqx.partition(sampler, lambda a: _is_abstract(a) or eqx.is_array(a))
        dynamic = _abstract_arrays(dynamic)

        def one(dynamic, data, config):
            built = eqx.combine(dynamic, static)
            fn = program.case_program(
                task,
                built,
                s.num_samples,
                seed=s.seed,
                diagnostics=s.diagnostics,
                calibration_options=s.calibration,
            )
            return fn(data, config)

        single = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), configs)
        flops, unknown = jaxpr_flops(jax.make_jaxpr(one)(dynamic, data, single))
        out = {
            "flops_per_configuration": flops,
            "flops_per_sample": flops / s.num_samples,
            "unbounded_loops": unknown,
            "chunk": chunk,
            "reference_size": size,
        }
        if not compile:
            return out
        key = json.dumps(
            [
                task_name,
                s.tasks[task_name],
                entry.sampler,
                entry.options,
                entry.task_options,
                str(jax.tree.map(lambda a: (a.shape, str(a.dtype)), dynamic)),
                chunk,
                sorted(grid.hparams),
            ],
            sort_keys=True,
            default=str,
        )
        cache = {} if cache is None else cache
        if key not in cache:
            t0 = time.perf_counter()

            def chunk_fn(dynamic, data, configs):
                return program.checked_chunk_program(lambda d, c: one(dynamic, d, c), mesh, s.batch_size)(
                    data, configs
                )

            compiled = jax.jit(chunk_fn).lower(dynamic, data, configs).compile()
            cost = compiled.cost_analysis()
            cost = cost[0] if isinstance(cost, (list, tuple)) else cost
            cache[key] = {
                "memory_bytes": program.peak_bytes(compiled),
                "xla_flops_per_sample": float((cost or {}).get("flops", float("nan")))
                / (chunk * s.num_samples),
                "compile_s": round(time.perf_counter() - t0, 2),
            }
        return {**out, **cache[key]}


# ----------------------------------------------------------------------------
# Throughput and hours


def throughputs(directory: Path = BENCHMARKS) -> dict[str, dict]:
    """{device: {"flops_per_s", "source"}}: the matmul roofline (`scripts/bench/roofline.py`,
    record "roofline matmul <n>", GFLOP/s) of the newest benchmark file of each device, the
    device named by the file (`<device>_<YYYY-MM-DD>[_suffix].json`, e.g. cpu, gpu_h200)."""
    found: dict[str, tuple[str, str, float]] = {}
    for path in sorted(Path(directory).glob("*.json")):
        m = re.match(r"(.+?)_(\d{4}-\d{2}-\d{2})(_.*)?\.json$", path.name)
        if m is None:
            continue
        device, date = m.group(1), m.group(2)
        if m.group(3) and "no-avx" in m.group(3):
            continue  # a deliberately restricted run, not the device's throughput
        try:
            records = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for r in records if isinstance(records, list) else []:
            if re.fullmatch(r"roofline matmul \d+", str(r.get("name"))) and r.get("unit") == "GFLOP/s":
                if device not in found or (date, path.name) >= found[device][:2]:
                    found[device] = (date, path.name, float(r["ours"]) * 1e9)
    return {dev: {"flops_per_s": v[2], "source": f"results/benchmarks/{v[1]}"} for dev, v in found.items()}


def hours(total_flops: float, rates: Mapping[str, dict], devices: int = 1) -> dict[str, float]:
    """{device: hours} = total FLOPs / (matmul roofline x devices): a lower bound (peak throughput)."""
    return {dev: total_flops / (r["flops_per_s"] * devices) / 3600.0 for dev, r in rates.items()}


# ----------------------------------------------------------------------------
# Pilot pool: can an eps-rule reference fill?


def tail_fit(mae) -> tuple[float, float]:
    """(a, b) of log F(m) = a + b log m fitted to the lower tail of the empirical CDF of `mae (n,)`.

    F(m_(i)) = i / n at the i-th smallest value, least squares over the smallest
    J = max(10, n // 50) positive values. Near 0 the fraction of a prior pool within distance m of
    an observation falls as a power of m (b is an effective dimension), which this extrapolates
    below the pilot's smallest value.
    """
    m = np.sort(np.asarray(mae, np.float64))
    m = m[m > 0]
    n = len(np.asarray(mae))
    j = min(max(10, n // 50), len(m))
    if j < 3:
        raise ValueError(f"mae: expected at least 3 positive values to fit a tail, got {len(m)}")
    b, a = np.polyfit(np.log(m[:j]), np.log(np.arange(1, j + 1) / n), 1)
    return float(a), float(b)


def pilot_fill(task: Task, rc: Mapping, y_obs, key, num_draws: int) -> dict:
    """Whether the eps rule of section `rc` keeps K members per case, from a pilot pool.

    `num_draws` prior draws (x 4 rotations when `rc["augment"]`, as the pool does) pushed
    through the forward model (`pool.draw_candidates`, noise-free observations); per case the
    pilot acceptance rate p = #{MAE <= eps} / n (MAE as `rejection.mean_absolute_error`) gives
    the expected count p x N in the configured pool of N candidates (chunks rounded up as
    `registry` builds it), against K (`eps_k1000`: 1000). A case with no pilot candidate under
    eps has p < 3 / n (95 %, rule of three), so its count is below 3 N / n; its estimate is then
    extrapolated from the lower tail of the pilot's MAE distribution (`tail_fit`, labelled
    ``"tail fit"``). `eps_needed`: the K / N quantile of the MAEs, the eps a pool of N must accept
    to keep K (what `eps_k1000` widens to): the pilot's quantile when K / N >= 1 / n, else the tail
    fit's. Verdict: "fills" when every case's expected count reaches K; "will not fill (expected k
    of K)" with the worst case's k when one does not (from its pilot rate, or from the tail fit
    when even the rule-of-three bound is below K, or the fit's estimate is), naming the worst
    case and how many cases fall short.
    """
    method = rc["method"]
    eps = float(rc["eps"]) if method == "rejection" else registry.published_eps(task)
    need = registry.EPS_K1000 if method == "eps_k1000" else int(rc["num_samples"])
    augment = bool(rc["augment"])
    per_chunk = int(rc["pool_chunk"]) * (4 if augment else 1)
    size = math.ceil(int(rc["pool_size"]) / per_chunk) * per_chunk
    draw = jax.jit(lambda k, i: pool.draw_candidates(task, k, i, augment=augment)[2])
    batch = min(int(num_draws), 256)
    ys = [
        np.asarray(draw(jr.fold_in(key, j), jnp.arange(batch))) for j in range(math.ceil(num_draws / batch))
    ]
    y_pool = np.concatenate(ys)[: int(num_draws) * (4 if augment else 1)]
    n = y_pool.shape[0]
    mae = rejection.mean_absolute_error(y_pool[:, None, :], np.asarray(y_obs, np.float64))  # (n, K)
    bound, q = 3.0 * size / n, need / size
    cases = []
    for c in range(mae.shape[1]):
        rate = float(np.mean(mae[:, c] <= eps))
        a, b = tail_fit(mae[:, c])
        if rate > 0:
            expected, source = rate * size, "pilot rate"
        else:
            expected, source = min(math.exp(a + b * math.log(eps)), 3.0 / n) * size, "tail fit"
        if q * n >= 1:
            needed, needed_from = float(np.quantile(mae[:, c], q)), "pilot quantile"
        else:
            needed, needed_from = math.exp((math.log(q) - a) / b), "tail fit"
        cases.append(
            {
                "pilot_rate": rate,
                "expected": expected,
                "expected_from": source,
                "expected_below": None if rate > 0 else bound,
                "eps_needed": needed,
                "eps_needed_from": needed_from,
                "tail_exponent": b,
            }
        )
    worst = min(range(len(cases)), key=lambda c: cases[c]["expected"])
    k = cases[worst]["expected"]
    fills = all(c["expected"] >= need for c in cases)
    if fills:
        verdict = "fills"
    else:
        how = "" if cases[worst]["expected_from"] == "pilot rate" else f", by a tail fit below {bound:.3g}"
        short = sum(c["expected"] < need for c in cases)
        where = f"case {worst}; {short} of {len(cases)} cases short"
        verdict = f"will not fill (expected {k:.3g} of {need}{how}; {where})"
    return {
        "verdict": verdict,
        "fills": fills,
        "eps": eps,
        "K": need,
        "pool_size": size,
        "pilot_candidates": int(n),
        "worst_expected": k,
        "worst_case": worst,
        "cases": cases,
        "widened": method == "eps_k1000",
    }


# ----------------------------------------------------------------------------
# The whole study


def size(plan, *, compile: bool = True, pilot_draws: int = 2048, mesh=None, log=None) -> dict:
    """The `sizing` section of `plan.dry_run` for a built `plan.Plan` (module docstring).

    Returns {"counts", "networks", "programs": {"task/label": cost, or {"error"} for a pair whose
    program cannot be built or traced}, "total_flops" (of the pairs that can),
    "hours": {device: h}, "throughputs", "references": {task: pilot_fill or a reason}}.
    `log(line)` receives a one-line summary per program and reference as they finish.
    """
    s = plan.settings
    log = log or (lambda line: None)
    sizes, models = network_sizes(s)
    programs, cache, total = {}, {}, 0.0
    for task_name, entry in s.pairs():
        label = f"{task_name}/{entry.label}"
        nets = {option: models[f"{label}.{option}"] for option in entry.networks}
        try:
            cost = program_cost(plan, task_name, entry, nets, compile=compile, mesh=mesh, cache=cache)
        except (ValueError, TypeError) as e:  # a pair that cannot be built or traced: say so, go on
            programs[label] = {"error": f"{type(e).__name__}: {e}"}
            log(f"[size] {label}: cannot be built: {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        configurations = s.num_cases * math.prod(len(v) for v in entry.axes.values()) * len(s.seeds)
        configurations += calibration_configurations(s, entry)
        cost["configurations"] = configurations
        cost["flops"] = cost["flops_per_configuration"] * configurations
        total += cost["flops"]
        programs[label] = cost
        memory = cost.get("memory_bytes")
        log(
            f"[size] {label}: {cost['flops_per_sample']:.3g} FLOP/sample"
            + ("" if memory is None else f", {memory / 2**20:.1f} MiB/device")
            + (
                f" (a lower bound: {cost['unbounded_loops']} while loop(s) counted once)"
                if cost["unbounded_loops"]
                else ""
            )
        )
    rates = throughputs()
    references = {}
    for task_name, task in plan.tasks.items():
        rc = s.references[task_name]
        if task_name in plan.given:
            references[task_name] = {"verdict": "given (read from a cases file)"}
        elif rc["method"] in EPS_METHODS and pilot_draws == 0:
            references[task_name] = {"verdict": "not estimated (no pilot pool: --dry_run_pilot=0)"}
        elif rc["method"] in EPS_METHODS:
            key = registry.stream(jr.key(s.seed), "dry_run_pilot")
            y_obs = np.asarray(plan.cases(task_name).y_obs)
            references[task_name] = pilot_fill(task, rc, y_obs, key, pilot_draws)
        else:
            references[task_name] = {"verdict": f"not an eps rule ({rc['method']}): no pilot estimate"}
        log(f"[reference] {task_name}: {rc['method']}: {references[task_name]['verdict']}")
    return {
        "counts": counts(s),
        "networks": sizes,
        "programs": programs,
        "total_flops": total,
        "throughputs": rates,
        "hours": hours(total, rates),
        "references": references,
    }
