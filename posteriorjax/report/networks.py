"""`## Networks` of a summary: every trained network the records used, with its own scores.

A record of a learned sampler carries its networks (`Record.networks`, `sweep.networks.
network_record`): kind, directory, parameter count, training steps, and the network's scores on
its own with their floor (`training.scores`: a generative prior against exact prior draws beside
the Monte Carlo floor of two exact sets, the surrogate's per-channel error, a conditional
network's held-out error). One table per task, one row per network, so a bad learned posterior
row can be told apart from a bad network. Records without networks (other samplers, workdirs
written before they were recorded) add no rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def _number(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "NaN"
    return f"{value:.3g}"


def scores_cell(scores: Mapping | None, floor: Mapping | None) -> str:
    """``name value (floor)`` per score, ``; ``-separated; ``not scored`` without scores."""
    if not scores:
        return "not scored"
    floor = floor or {}
    parts = []
    for name in sorted(scores):
        text = f"{name} {_number(scores[name])}"
        if name in floor:
            text += f" ({_number(floor[name])})"
        parts.append(text)
    return "; ".join(parts)


def network_rows(records: Sequence[Mapping]) -> dict[str, list[dict]]:
    """{task: [one row per network directory: its record entry plus the samplers using it]}."""
    out: dict[str, dict[str, dict]] = {}
    for r in records:
        for option, net in (r.get("networks") or {}).items():
            row = out.setdefault(r["task"], {}).setdefault(net["network"], {**net, "used_by": set()})
            row["used_by"].add(f"{r['sampler']}.{option}")
    return {task: [rows[name] for name in sorted(rows)] for task, rows in sorted(out.items())}


def network_table(records: Sequence[Mapping]) -> str:
    """The `## Networks` section, after a blank line (empty string when no record names a network)."""
    rows = network_rows(records)
    if not rows:
        return ""
    out = [
        "",
        "## Networks",
        "",
        "Each trained network scored on its own (`scores.json` in its directory): a generative "
        "prior's unconditional samples against exact prior draws, the Monte Carlo floor (two "
        "independent exact sets of the same size) in parentheses; the surrogate's held-out "
        "relative L2 per state channel and observation RMSE in noise stds; a conditional "
        "network's held-out relative L2 of its sample mean.",
        "",
    ]
    for task, trows in rows.items():
        out += [f"### {task}", "", "| network | kind | used by | parameters | steps | scores (floor) |"]
        out.append("|---|---|---|---|---|---|")
        for row in trows:
            count = row.get("num_parameters")
            out.append(
                f"| {row['network']} | {row['kind']} | {', '.join(sorted(row['used_by']))} | "
                f"{'-' if count is None else f'{count:,}'} | {row.get('training_steps') or '-'} | "
                f"{scores_cell(row.get('scores'), row.get('floor'))} |"
            )
        out.append("")
    return "\n".join(out)
