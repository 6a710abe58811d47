"""The error split: a learned sampler's error = its own (the sampler with the exact prior) + the prior's.

On a task whose prior score is exact (a fixed-hyperparameter GRF prior, `poisson_fixed`), a
score-based sampler can run twice: with its trained prior (label ``L``) and with the exact
prior score (label ``L + ORACLE_SUFFIX``, option ``prior="oracle"``, no prior network; a
surrogate forward model stays learned; `oracle_twin` builds that entry). The oracle row's error
is the sampler's own: what the method leaves when the prior is perfect. The difference learned -
oracle is what the trained prior adds.

Each side is read at its best configuration per metric (lowest mean over cases and seeds), so
the two rows may sit at different guidance weights: a learned prior is not expected to share
the oracle's optimum.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence

ORACLE_SUFFIX = "_oracle"


def oracle_twin(entry: Mapping) -> dict:
    """The oracle twin of a sweep sampler entry (`config.samplers.<label>`): the same sampler,
    options, axes and other networks (a surrogate forward model stays: it is the sampler's own
    machinery) with ``prior="oracle"`` in place of its trained prior (the ``model`` network)."""
    networks = dict(entry.get("networks") or {})
    if "model" not in networks:
        raise ValueError(
            f"entry: expected a learned sampler entry with a 'model' network, got {dict(entry)!r}"
        )
    twin = copy.deepcopy(dict(entry))
    twin["options"] = {**dict(twin.get("options") or {}), "prior": "oracle"}
    twin["networks"] = {k: v for k, v in twin["networks"].items() if k != "model"}
    return twin


def pairs(rows: Sequence[Mapping]) -> list[tuple[str, str, str]]:
    """(task, learned label, oracle label) of every learned label whose oracle twin is in `rows`
    (records or aggregated rows: anything with "task" and "sampler")."""
    present = {(r["task"], r["sampler"]) for r in rows}
    return sorted(
        (task, label, label + ORACLE_SUFFIX)
        for task, label in present
        if not label.endswith(ORACLE_SUFFIX) and (task, label + ORACLE_SUFFIX) in present
    )


def _best(rows: Sequence[dict], metric: str) -> tuple[float, dict | None]:
    finite = [r for r in rows if math.isfinite(r[metric][0])]
    if not finite:
        return math.nan, None
    row = min(finite, key=lambda r: r[metric][0])
    return row[metric][0], row["hparams"]


def split_rows(rows: Sequence[dict], metrics: Sequence[str]) -> list[dict]:
    """Per (task, learned label) with an oracle twin among the aggregated `rows` (`report.tables.
    aggregate`: metric -> (mean, std)): {metric: {"learned", "sampler" (the oracle twin's: the
    sampler's own error), "prior" (learned - sampler), "at" (the two best hparams)}}."""
    out = []
    for task, learned, oracle in pairs(rows):
        mine = [r for r in rows if r["task"] == task and r["sampler"] == learned]
        theirs = [r for r in rows if r["task"] == task and r["sampler"] == oracle]
        entry = {"task": task, "sampler": learned, "oracle": oracle, "metrics": {}}
        for m in metrics:
            (lv, lh), (ov, oh) = _best(mine, m), _best(theirs, m)
            entry["metrics"][m] = {"learned": lv, "sampler": ov, "prior": lv - ov, "at": (lh, oh)}
        out.append(entry)
    return out
