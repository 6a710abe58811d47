"""Leaderboard: one table per task ranking every row of a workdir, in-sweep and file-scored alike.

A row is a (sampler, hyperparameter setting) of the tables (`store.row_key`). Its scores are the
case means of PosteriorBench's five posterior metrics (`heldout.PUBLIC_METRICS`: Mean, Std, MMD,
SWD, Spectral; Table 2), on the set its records were scored on. Selection rule (stated in the
table's legend): rows are ranked by their mean rank over those five metrics (each metric ranks
the rows, lower is better, ties share the mean rank), ties broken by the mean error;
PosteriorBench reports the five side by side and no single one decides. Rows scored on the
public set (records written before the held-out split) are ranked apart, after every held-out
row, and marked. Beside each row: the held-out / public gap (worst ratio over Mean, Std, MMD
and SWD, `heldout.GAP_METRICS`, file
rows only: sweep samplers never see the public set), flagged above its threshold
(`heldout.record_threshold`),
the Kish ESS (mean over cases; N for unweighted ensembles) and the number of invalid members
(summed over cases).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from posteriorjax.reference import heldout
from posteriorjax.sweep import store

HEADERS = {"mean_error": "Mean", "std_error": "Std", "mmd": "MMD", "swd": "SWD", "spectral_error": "Spectral"}
RULE = (
    "ranked by the mean rank over Mean, Std, MMD, SWD and Spectral (case means on the held-out "
    "reference, lower is better, ties broken by Mean); rows scored on the public set before the "
    "held-out split are ranked after the held-out rows (set 'public*')"
)


def _mean(records: Sequence[Mapping], key: str) -> float:
    values = [r["metrics"].get(key) for r in records]
    if not values or any(v is None for v in values):
        return math.nan
    return float(np.mean(values))


def rows(records: Sequence[Mapping]) -> list[dict]:
    """One dict per (task, sampler, setting): scores, set, gap, ESS, invalid members, in rank order."""
    groups: dict[tuple, list] = {}
    for r in records:
        groups.setdefault(store.row_key(r) + (heldout.record_set(r),), []).append(r)
    out = []
    for (task, sampler, hp, which), recs in groups.items():
        scores = {m: _mean(recs, m) for m in heldout.PUBLIC_METRICS}
        public = {m: _mean(recs, f"public_{m}") for m in heldout.GAP_METRICS}
        gap = heldout.gaps(scores, public)
        limit = heldout.record_threshold(recs)
        high = heldout.flagged(gap, limit)
        ess = [r["metrics"].get("ess", r["num_samples"]) for r in recs]
        invalid = [r["metrics"].get("num_invalid") or 0 for r in recs]
        out.append(
            {
                "task": task,
                "sampler": sampler,
                "hparams": dict(hp),
                "set": which,
                "scores": scores,
                "gap": max(gap.values()) if gap else math.nan,
                "flagged": bool(high),
                "ess": float(np.mean(ess)),
                "invalid": int(np.sum(invalid)),
                "cases": len(recs),
            }
        )
    for task in {r["task"] for r in out}:
        _rank([r for r in out if r["task"] == task and r["set"] != heldout.PUBLIC])
        _rank([r for r in out if r["task"] == task and r["set"] == heldout.PUBLIC])
    public_last = {True: 1, False: 0}
    return sorted(out, key=lambda r: (r["task"], public_last[r["set"] == heldout.PUBLIC], r["rank_key"]))


def _rank(group: list[dict]) -> None:
    """Set `mean_rank` and `rank_key` of the rows of one task and set (NaN scores rank last)."""
    ranks = np.zeros(len(group))
    for m in heldout.PUBLIC_METRICS:
        values = np.array([r["scores"][m] for r in group])
        values = np.where(np.isfinite(values), values, np.inf)
        order = values.argsort(kind="stable").argsort().astype(float)
        for v in np.unique(values):  # ties share the mean rank
            order[values == v] = order[values == v].mean()
        ranks += order + 1
    for r, total in zip(group, ranks, strict=True):
        r["mean_rank"] = float(total / len(heldout.PUBLIC_METRICS))
        mean = r["scores"]["mean_error"]
        r["rank_key"] = (r["mean_rank"], mean if math.isfinite(mean) else math.inf)


def _fmt(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{v:.4g}"


def table(records: Sequence[Mapping]) -> str:
    """The leaderboard as Markdown: one table per task, `RULE` and the gap threshold in its legend."""
    all_rows, parts = rows(records), []
    for task in sorted({r["task"] for r in all_rows}):
        head = ["#", "Sampler", "Setting", "Set", *HEADERS.values(), "Mean rank", "Gap", "ESS", "Invalid"]
        lines = [f"### {task}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for i, r in enumerate((r for r in all_rows if r["task"] == task), 1):
            flag = " ⚠" if r["flagged"] else ""
            which = "public*" if r["set"] == heldout.PUBLIC else r["set"]
            setting = ", ".join(f"{k}={v:g}" for k, v in sorted(r["hparams"].items())) or "-"
            cells = [str(i), r["sampler"], setting, which, *(_fmt(r["scores"][m]) for m in HEADERS)]
            cells += [f"{r['mean_rank']:.2f}", _fmt(r["gap"]) + flag, f"{r['ess']:.1f}", str(r["invalid"])]
            lines.append("| " + " | ".join(cells) + " |")
        lines += [
            "",
            f"Rule: {RULE}. Gap: worst held-out / public ratio of Mean, Std, MMD, SWD (samples from a "
            "file only); "
            f"⚠ above {heldout.GAP_THRESHOLD} (the two-ensemble consistency target) or, when larger, "
            "three standard errors of the spread between the held-out set's halves: the samples fit "
            "the exported reference better than an independent reference of the same size allows. ESS: "
            "Kish effective sample size, mean over cases. Invalid: members outside the physics' "
            "domain, summed over cases.",
            "",
        ]
        parts.append("\n".join(lines))
    return "\n".join(parts)
