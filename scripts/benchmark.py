"""Benchmarks: our throughput beside a baseline measured in the same run.

    python scripts/benchmark.py [--only=NAME,...] [--json=FILE] [--device] [--peer_resolution=N] [--list]

`--only=spectral,metrics` runs the benchmarks named so, or, for a word that names none,
every benchmark whose name contains it (`spectral_conv`, `spectral_grf`, `metrics`).
Names may also follow as positional arguments (`--only spectral metrics` reads as
`--only=spectral,metrics`).

Each module in `scripts/bench/` exposes `BENCHMARKS = {name: fn}` where
`fn(args) -> list[record]` (see `bench/common.py`; `args.device` is the `--device` flag).
`--device` runs the sizes meant for an accelerator; without it the sizes fit a 2-core CPU.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path
from types import SimpleNamespace

from absl import app, flags

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import bench  # noqa: E402

from posteriorjax import parallel  # noqa: E402


def collect() -> dict:
    found = {}
    for info in pkgutil.iter_modules(bench.__path__):
        if info.name == "common":
            continue
        module = importlib.import_module(f"bench.{info.name}")
        for name, fn in getattr(module, "BENCHMARKS", {}).items():
            if name in found:
                raise RuntimeError(f"benchmark {name!r} defined twice")
            found[name] = fn
    return found


def select(patterns, available) -> list[str]:
    """Benchmark names for `--only`: a pattern that is a name selects it, else every name containing it.

    Order: as given, names of one pattern sorted; each name once.
    """
    names = []
    for pattern in patterns:
        matches = [pattern] if pattern in available else sorted(n for n in available if pattern in n)
        names += [n for n in matches if n not in names]
    return names


def define_flags(flag_values=flags.FLAGS) -> None:
    flags.DEFINE_list(
        "only", [], "benchmark names or name parts to run (default: all)", flag_values=flag_values
    )
    flags.DEFINE_string("json", None, "write the records to this JSON file", flag_values=flag_values)
    flags.DEFINE_bool("device", False, "accelerator-sized problems", flag_values=flag_values)
    flags.DEFINE_integer(
        "peer_resolution", None, "grid of the peer benchmark (default 64, 128 with --device)",
        lower_bound=16, flag_values=flag_values,
    )  # fmt: skip
    flags.DEFINE_bool(
        "list", False, "list the benchmark names (those --only selects) and exit", flag_values=flag_values
    )


def main(argv, flag_values=flags.FLAGS) -> None:
    patterns = [*flag_values.only, *argv[1:]]  # positional names join --only
    available = collect()
    names = sorted(available) if not patterns else select(patterns, available)
    unknown = [n for n in patterns if not select([n], available)]
    if unknown:
        raise app.UsageError(f"--only: unknown benchmark(s) {unknown}; available: {sorted(available)}")
    if flag_values.list:
        print("\n".join(names))
        return
    args = SimpleNamespace(device=flag_values.device, peer_resolution=flag_values.peer_resolution)

    import jax

    from posteriorjax.reference.store import atomic_write_json

    print(f"devices: {jax.devices()}")
    records = []
    header = f"{'name':<40} {'unit':<18} {'ours':>12} {'baseline':>12} {'ratio':>8}  baseline"
    print(header)
    print("-" * len(header))
    for name in names:
        for rec in available[name](args):
            records.append(rec)
            base = "-" if rec["baseline"] is None else f"{rec['baseline']:.4g}"
            ratio = "-" if rec["ratio"] is None else f"{rec['ratio']:.2f}"
            print(
                f"{rec['name']:<40} {rec['unit']:<18} {rec['ours']:>12.4g} {base:>12} {ratio:>8}  "
                f"{rec['baseline_name']}",
                flush=True,
            )
        if flag_values.json:  # after each benchmark: a run stopped by a time limit keeps what it measured
            atomic_write_json(flag_values.json, records)


if __name__ == "__main__":
    parallel.reserve_cpu_threads()  # before JAX starts (several CPU devices; see parallel)
    define_flags()
    app.run(main)
