"""Public and held-out references: the set a benchmark exports and the set it scores on.

Every task of a study has two references of the same method, settings and size, built from
keys of one root (the sweep's reference key `key`):

  * **public**: built with `key` itself, the set every workdir held before the split; it is
    what `exchange.export` writes to `reference.npz` / `.h5` (for tuning, plots and a user's
    own checks);
  * **held-out**: built with `registry.stream(key, "heldout")`, never exported; the sweep's
    rows and `exchange.evaluate` score against it. Pool-based methods draw it from their own
    pool (the first half of that key's split), as PosteriorBench's GT1 / GT2 pair is built
    from disjoint pools; `exact` draws independent exact posterior samples; `pcn` runs its own
    chains. The two sets are independent draws of the same construction.

A sampler that copies (or tunes on) the public set scores better on it than on the held-out
one; an honest sampler scores the same on both up to the reference's Monte Carlo error. The
gap of a metric m is the ratio `gap = m_heldout / m_public` of its case means. For an honest
sampler it is a ratio of the same metric against two independent equal-budget references,
exactly the two-ensemble ratio r_m of `validate.two_ensemble_ratios`, whose published target
for a validated reference is r_m < 1.08 for every non-spectral metric (PosteriorBench,
Table 6): `GAP_THRESHOLD`. A gap above it on any of `GAP_METRICS` (Mean, Std, MMD, SWD; the
spectral error is recorded against both sets but not checked: no target is published for it,
and its geometric mean over bins moves by far more between two honest references; the figures
are in docs/bring-your-own-sampler.md) says the samples fit the public set
better than an independent reference of the same construction allows, and is flagged.

That target presumes a reference large enough to pass the check; with a smaller one two honest
references differ by more (docs/bring-your-own-sampler.md, "What is held out, and why").
So the threshold also follows the Monte Carlo spread measured on the held-out set itself
(`threshold`): the samples are scored against its two halves (even and odd members), whose
per-case log ratios d_k = log(m_half1 / m_half2) are, for any sampler (it never saw either
half), draws of the two-reference spread at size M/2. With s = sqrt(mean_k d_k^2) / sqrt(2)
the spread of one case's log ratio at size M (Monte Carlo variance ~ 1/M) and K cases, the
threshold is max(1.08, exp(3 s / sqrt(K))): three standard errors of the log ratio of case
means.

Records say which set scored them (`tag`: the record's `scored["reference"]`). A workdir whose
records were scored before the split (no tag: they were scored on what is now the public set,
`pre_split`) is refused until it is migrated (`sweep.migrate`): those records are set aside and
the held-out set is built from the same root key, so a rerun re-scores them on it; nothing is
re-scored silently.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from posteriorjax import files
from posteriorjax.reference import registry

HELDOUT, PUBLIC, GIVEN = "heldout", "public", "given"
SETS = (HELDOUT, PUBLIC)
GAP_THRESHOLD = 1.08
# PosteriorBench's posterior metrics (Table 2), scored against both sets
PUBLIC_METRICS = ("mean_error", "std_error", "mmd", "swd", "spectral_error")
# the gap is checked on the non-spectral ones (the published two-ensemble target's metrics)
GAP_METRICS = ("mean_error", "std_error", "mmd", "swd")


def key(root, which: str):
    """The key of set `which` (`SETS`) from the reference's root key."""
    if which not in SETS:
        raise ValueError(f"which: expected one of {SETS}, got {which!r}")
    return root if which == PUBLIC else registry.stream(root, HELDOUT)


def directory(public_directory, which: str) -> Path:
    """Where set `which` is cached: the public set in `public_directory` (the cache every workdir
    had before the split), the held-out set beside it in `<name>.heldout`."""
    public_directory = Path(public_directory)
    if which not in SETS:
        raise ValueError(f"which: expected one of {SETS}, got {which!r}")
    return (
        public_directory
        if which == PUBLIC
        else public_directory.with_name(f"{public_directory.name}.heldout")
    )


def checksum(samples, weights) -> str:
    """SHA-256 (16 hex digits) of a reference's `samples (K, M, ...)` and `weights (K, M)` as float32
    C-order bytes: what a record names as the set it was scored on."""
    data = np.ascontiguousarray(np.asarray(samples, np.float32)).tobytes()
    data += np.ascontiguousarray(np.asarray(weights, np.float32)).tobytes()
    return files.sha256(data)[:16]


def tag(which: str, samples, weights, report: Mapping) -> dict:
    """A record's `scored["reference"]`: the set, its method and its `checksum`."""
    return {"set": which, "method": str(report.get("method")), "sha256": checksum(samples, weights)}


def record_set(record: Mapping) -> str:
    """The reference set that scored a record: its tag's, or `PUBLIC` for a record written before
    the split (scored on the set that is now exported)."""
    return str(dict(record.get("scored", {})).get("reference", {}).get("set", PUBLIC))


def pre_split(records: Sequence[Mapping], task: str | None = None) -> list:
    """The records (of `task`, or all) scored before the split: no reference tag."""
    return [
        r
        for r in records
        if (task is None or r["task"] == task) and "reference" not in dict(r.get("scored", {}))
    ]


def gaps(heldout: Mapping[str, float], public: Mapping[str, float]) -> dict[str, float]:
    """`{metric: m_heldout / m_public}` for the `GAP_METRICS` both give finite and positive."""
    out = {}
    for m in GAP_METRICS:
        a, b = heldout.get(m), public.get(m)
        if a is not None and b is not None and np.isfinite(a) and np.isfinite(b) and a > 0 and b > 0:
            out[m] = float(a / b)
    return out


def halves(samples, weights) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The even and odd members of a reference `samples (K, M, ...)`, `weights (K, M)`, each
    half's weights renormalized to sum to 1 per case (ValueError for M < 4 or a half of zero mass)."""
    samples, weights = np.asarray(samples), np.asarray(weights, np.float64)
    if samples.shape[1] < 4:
        raise ValueError(f"samples: expected at least 4 reference members to split, got {samples.shape[1]}")
    out = []
    for start in (0, 1):
        w = weights[:, start::2]
        total = w.sum(axis=1, keepdims=True)
        if np.any(total <= 0):
            raise ValueError("weights: a half of the reference has zero weight for some case")
        out.append((samples[:, start::2], (w / total).astype(np.float32)))
    return out[0], out[1]


def threshold(split: Mapping[str, Sequence[float]], num_cases: int) -> dict[str, float]:
    """Per metric of `GAP_METRICS`, `max(GAP_THRESHOLD, exp(3 s / sqrt(K)))` (module doc) from the
    per-case log ratios `split[m] (K,)` between the halves of the held-out set; `GAP_THRESHOLD`
    where they are missing or not finite."""
    out = {}
    for m in GAP_METRICS:
        d = np.asarray([np.nan if v is None else v for v in split.get(m, [])], np.float64)
        if d.size == 0 or not np.all(np.isfinite(d)):
            out[m] = GAP_THRESHOLD
            continue
        spread = float(np.sqrt(np.mean(d**2)) / np.sqrt(2.0))
        out[m] = max(GAP_THRESHOLD, float(np.exp(3.0 * spread / np.sqrt(num_cases))))
    return out


def split_ratios(half_a: Mapping[str, np.ndarray], half_b: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`{metric: log(m_half_a / m_half_b)}` per case `(K,)` for the `GAP_METRICS` (NaN where not positive)."""
    out = {}
    for m in GAP_METRICS:
        a, b = np.asarray(half_a[m], np.float64), np.asarray(half_b[m], np.float64)
        ok = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
        out[m] = np.where(ok, np.log(np.where(ok, a, 1.0) / np.where(ok, b, 1.0)), np.nan)
    return out


def flagged(gap: Mapping[str, float], limit: Mapping[str, float] | float = GAP_THRESHOLD) -> dict[str, float]:
    """The metrics of `gaps` above their threshold (`limit`: one value, or `threshold`'s per metric)."""
    if not isinstance(limit, Mapping):
        limit = dict.fromkeys(gap, float(limit))
    return {m: g for m, g in gap.items() if g > limit.get(m, GAP_THRESHOLD)}


def record_threshold(records: Sequence[Mapping]) -> dict[str, float]:
    """`threshold` of a row's records (their `split_<metric>` values; `GAP_THRESHOLD` without them)."""
    split = {m: [r["metrics"].get(f"split_{m}") for r in records] for m in GAP_METRICS}
    return threshold(split, len(records))


def set_aside(path: Path, name: str) -> Path:
    """Copy `path` to `<dir>/<name>` (or `<name>-<n>`, the first free n); the original stays."""
    aside, n = path.with_name(name), 0
    while aside.exists():
        n += 1
        aside = path.with_name(f"{name}-{n}")
    files.atomic_write_bytes(aside, path.read_bytes())
    os.utime(aside)
    return aside
