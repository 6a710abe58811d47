"""Benchmarks: our throughput beside a baseline measured in the same run.

    python scripts/benchmark.py [--only NAME ...] [--json FILE] [--device]

`--only spectral metrics` runs the benchmarks named so, or, for a word that names none,
every benchmark whose name contains it (`spectral_conv`, `spectral_grf`, `metrics`).

Each module in `scripts/bench/` exposes `BENCHMARKS = {name: fn}` where
`fn(args) -> list[record]` (see `bench/common.py`). `--device` runs the sizes
meant for an accelerator; without it the sizes fit a 2-core CPU.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from pathlib import Path

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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", default=None, help="benchmark names to run (default: all)")
    parser.add_argument("--json", default=None, help="write the records to this JSON file")
    parser.add_argument("--device", action="store_true", help="accelerator-sized problems")
    parser.add_argument(
        "--list", action="store_true", help="list the benchmark names (those --only selects) and exit"
    )
    args = parser.parse_args(argv)

    available = collect()
    names = sorted(available) if not args.only else select(args.only, available)
    unknown = [n for n in args.only or () if not select([n], available)]
    if unknown:
        parser.error(f"--only: unknown benchmark(s) {unknown}; available: {sorted(available)}")
    if args.list:
        print("\n".join(names))
        return

    import jax

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
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2))


if __name__ == "__main__":
    parallel.reserve_cpu_threads()  # before JAX starts (several CPU devices; see parallel)
    main()
