"""Provenance of a sweep as the reader sees it: the `summary.md` header (study, config hash, date,
machine, cases x samples, each task's reference and its settings), read from the workdir's
`config.json`, `provenance.json` (written by `posteriorjax.files.provenance`) and `references.json`."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import jax

from posteriorjax import files


def summary_header(workdir, records: Sequence[dict]) -> str:
    """The header of `summary.md`: study, config hash, date, machine, cases x samples, references.

    Reads `config.json`, `provenance.json` and `references.json` of `workdir` when present.
    """
    workdir = Path(workdir)

    def read(name):
        path = workdir / name
        return json.loads(path.read_text()) if path.exists() else None

    config, prov, refs = read("config.json"), read("provenance.json") or {}, read("references.json") or {}
    name = (config or {}).get("name") or workdir.name
    digest = "-"
    if config is not None:
        digest = files.json_digest(config, 12)
    date = prov.get("date_utc") or files.utc_now()
    machine = prov.get("machine") or files.machine()
    lines = [
        f"# Study `{name}`\n",
        f"- config `config.json`, sha256 `{digest}`; run {date}",
        f"- machine: {machine['platform']}, {machine['cpu_count']} CPU core(s); JAX devices: "
        + ", ".join(f"{v} x {k}" for k, v in sorted(_count(prov.get("devices") or _devices()).items())),
    ]
    for task in sorted({r["task"] for r in records}):
        recs = [r for r in records if r["task"] == task]
        cases, seeds = len({r["case"] for r in recs}), len({r["seed"] for r in recs})
        samples = "/".join(str(n) for n in sorted({int(r["num_samples"]) for r in recs}))
        ref = describe_reference(refs.get(task))
        lines.append(
            f"- `{task}`: {cases} case(s) x {seeds} seed(s) x {samples} samples per configuration; "
            f"reference: {ref}"
        )
    return "\n".join(lines) + "\n"


def describe_reference(report: Mapping | None) -> str:
    """One line on a task's reference (`references.json` entry): method, settings, per-case diagnostics."""
    if not report:
        return "unknown (no references.json)"
    method, st, cases = report["method"], dict(report.get("settings") or {}), report.get("cases") or []

    def spread(key, fmt="{:.3g}"):
        vals = [c[key] for c in cases if isinstance(c.get(key), (int, float))]
        if not vals:
            return None
        lo, hi = min(vals), max(vals)
        return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}–{fmt.format(hi)}"

    def pool():
        size = spread("pool_size", "{:,}") or f"{st.get('pool_size', '?'):,}"
        return f"prior pool of {size} candidates" + (" (rotation-augmented)" if st.get("augment") else "")

    if method == "exact":
        return f"exact posterior, {st.get('num_samples', '?')} draws per case"
    if method == "rejection":
        sigma = st.get("sigma") or 0.0
        text = (
            f"published eps rule on a {pool()}: MAE <= eps = {st.get('eps', '?'):g}, K = "
            f"{st.get('num_samples', '?')} kept, weights exp(-MAE² / 2 sigma²) with sigma = "
            + (f"{sigma:g}" if sigma else "eps / 3")
        )
        accepted = spread("accepted", "{:,}")
        return text + (f"; accepted per case {accepted}" if accepted else "")
    if method == "importance":
        text = f"Bayesian importance weights over a {pool()}, resampled to {st.get('num_samples', '?')}"
        ess = spread("ess", "{:.1f}")
        return text + (f"; importance ESS per case {ess}" if ess else "")
    if method == "pcn":
        text = (
            f"{st.get('mcmc_method', 'pcn')} chains: {st.get('num_chains', '?')} chains, "
            f"{st.get('num_samples', '?')} draws, burn-in {st.get('burn_in', '?')}, "
            f"thin {st.get('thin', '?')}"
        )
        extra = [
            f"{label} {v}"
            for label, v in (
                ("acceptance", spread("acceptance", "{:.2f}")),
                ("max rank R-hat", spread("rhat_max", "{:.3f}")),
                ("min bulk ESS", spread("ess_bulk_min", "{:.0f}")),
                ("min tail ESS", spread("ess_tail_min", "{:.0f}")),
            )
            if v
        ]
        return text + ("; per case " + ", ".join(extra) if extra else "")
    return f"{method} {st}"


def _count(devices) -> dict:
    """`{"cpu": 2}` from device strings such as `cpu:0`, `cuda:1`."""
    out: dict = defaultdict(int)
    for device in devices:
        out[str(device).split(":")[0]] += 1
    return dict(out)


def _devices() -> list[str]:
    return [d.platform for d in jax.devices()]
