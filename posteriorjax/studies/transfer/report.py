"""Tables and figures of the observation-pattern transfer experiment.

`write(workdir, config)` reads `workdir/blocks/*.json` (see `pipeline`) and writes

  * `summary.md`: per family the C/D summary (median over the learned models,
    the baselines separately) beside the published PDE-OBS medians; per
    (family, model) D, C, C/D, cross-cell median / 90th percentile / max, the
    hidden-only C/D; equal-count layout contrasts; the density sweep; the
    mixed-training ratios; invalid blocks with their reasons;
  * `results.json`: matrices (full and hidden-only), summaries, timings;
  * `figures/heatmaps.png`: every (family, model) 9 x 9 matrix on one shared
    logarithmic colour scale, matched cells outlined (per-family files too);
  * `figures/density.png`: error against test density of the R50-trained models;
  * `figures/mixed.png`: MIX / destination-trained ratios beside the range and
    median of the transferred single-view models.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from posteriorjax.studies.transfer import baselines, data, protocol

PUBLISHED_MEDIAN_CD = {
    "darcy_field": 13.45,
    "poisson_field": 16.58,
    "helmholtz_field": 28.61,
    "heat_field": 3.62,
    "reaction_diffusion_field": 3.36,
    "burgers_field": 3.63,
    "navier_stokes_field": 7.39,
}


# PDE-OBS Table 65 (MIX on protocols absent from training): error % mean and SD over 200 records
PUBLISHED_UNSEEN = {
    ("helmholtz_field", "fno"): ((14.22, 3.98), (4.34, 1.44), (11.50, 4.56)),
    ("helmholtz_field", "deeponet"): ((18.31, 4.18), (6.73, 1.97), (15.03, 5.82)),
    ("heat_field", "deeponet"): ((23.21, 9.93), (13.22, 5.92), (18.92, 8.73)),
    ("navier_stokes_field", "ufno"): ((8.39, 2.23), (1.74, 0.56), (6.27, 2.80)),
    ("poisson_field", "ufno"): ((15.30, 1.80), (4.47, 0.94), (12.49, 7.14)),
}
UNSEEN_VIEWS = ("random20", "random35", "line30_random20")
# PDE-OBS Table 64: geometric mean of R_MIX->w over the nine destinations
PUBLISHED_MIX_GEO = {
    ("helmholtz_field", "fno"): 2.07,
    ("helmholtz_field", "deeponet"): 2.56,
    ("heat_field", "deeponet"): 1.32,
    ("navier_stokes_field", "ufno"): 1.19,
    ("poisson_field", "ufno"): 0.46,
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def heatmaps(matrices: dict, path: Path, *, views=data.VIEWS, norm_range=None) -> tuple[float, float]:
    """Grid of 9 x 9 panels (rows: families, columns: models) on one shared log colour scale.

    `matrices` maps `(family, model) -> (V, V)` (NaN cells, invalid blocks,
    are grey). Matched (diagonal) cells are outlined. Returns the (vmin, vmax)
    of the scale, which `norm_range` can fix to share it across files.
    """
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle

    plt = _pyplot()
    families = list(dict.fromkeys(f for f, _ in matrices))
    models = list(dict.fromkeys(m for _, m in matrices))
    values = np.concatenate([np.ravel(m) for m in matrices.values()])
    values = values[np.isfinite(values) & (values > 0)]
    if norm_range is None:
        norm_range = (float(values.min()), float(values.max())) if values.size else (1e-3, 1.0)
    norm = LogNorm(*norm_range)
    fig, axes = plt.subplots(
        len(families), len(models), figsize=(2.3 * len(models) + 1, 2.3 * len(families)), squeeze=False
    )
    cmap = plt.get_cmap("viridis_r").with_extremes(bad="0.8")
    image = None
    for i, family in enumerate(families):
        for j, model in enumerate(models):
            ax = axes[i, j]
            ax.set_xticks([])
            ax.set_yticks([])
            matrix = matrices.get((family, model))
            if matrix is None:
                ax.set_axis_off()
                continue
            image = ax.imshow(np.ma.masked_invalid(matrix), norm=norm, cmap=cmap)
            for k in range(len(views)):
                ax.add_patch(Rectangle((k - 0.5, k - 0.5), 1, 1, fill=False, edgecolor="red", lw=1.2))
            if i == 0:
                ax.set_title(model, fontsize=9)
            if j == 0:
                ax.set_ylabel(family.replace("_field", ""), fontsize=9)
            if i == len(families) - 1:
                ax.set_xticks(range(len(views)), views, rotation=90, fontsize=6)
            if j == 0:
                rows = [*views, data.MIXTURE][: matrix.shape[0]]
                ax.set_yticks(range(len(rows)), rows, fontsize=6)
    if image is not None:
        label = "mean relative L2 (rows: train view, columns: test view)"
        fig.colorbar(image, ax=axes, shrink=0.6, label=label)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return norm_range


def density_figure(curves: dict, path: Path) -> None:
    """Error against test density per family (one line per model): `curves[(family, model)] -> dict`."""
    plt = _pyplot()
    families = list(dict.fromkeys(f for f, _ in curves))
    fig, axes = plt.subplots(1, len(families), figsize=(3.2 * len(families), 3), squeeze=False)
    for ax, family in zip(axes[0], families, strict=True):
        for (f, model), sweep in curves.items():
            if f == family:
                ax.plot(100 * sweep["densities"], sweep["errors"], "o-", label=model, ms=3)
        ax.set(yscale="log", xlabel="test density (%)", title=family.replace("_field", ""))
    axes[0, 0].set_ylabel("mean relative L2 (R50-trained)")
    axes[0, -1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def mix_density_figure(curves: dict, path: Path) -> None:
    """Fig. 5: MIX error against random test density (solid), destination-trained references (open)."""
    plt = _pyplot()
    keys = list(curves)
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3), squeeze=False)
    densities = 100 * np.asarray(list(data.DENSITIES.values()))
    for ax, key in zip(axes[0], keys, strict=True):
        mix, reference = curves[key]
        ax.plot(densities, mix, "o-", color="C3", label="MIX")
        ax.plot(densities[2:], reference, "o", mfc="none", color="k", label="destination-trained")
        ax.axvspan(15, 40, color="0.9", zorder=0)  # densities absent from training
        ax.set(yscale="log", xlabel="test density (%)", title=f"{key[0].replace('_field', '')} / {key[1]}")
    axes[0, 0].set_ylabel("mean relative L2")
    axes[0, -1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def mixed_figure(mixed: dict, path: Path, *, views=data.VIEWS) -> None:
    """Per (family, model): MIX ratio per destination (dots) and the transferred range/median (bars)."""
    plt = _pyplot()
    keys = list(mixed)
    fig, axes = plt.subplots(1, len(keys), figsize=(3.4 * len(keys), 3), squeeze=False)
    x = np.arange(len(views))
    for ax, key in zip(axes[0], keys, strict=True):
        m = mixed[key]
        ax.vlines(x, m["transferred_min"], m["transferred_max"], color="0.6", lw=4, label="transferred range")
        ax.plot(x, m["transferred_median"], "_", color="k", ms=10, label="transferred median")
        ax.plot(x, m["ratio"], "o", color="C3", label="MIX")
        ax.axhline(1.0, ls="--", color="k", lw=0.8)
        ax.set(yscale="log", title=f"{key[0].replace('_field', '')} / {key[1]}")
        ax.set_xticks(x, views, rotation=90, fontsize=7)
    axes[0, 0].set_ylabel("error / destination-trained")
    axes[0, -1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(x: float) -> str:
    return "—" if x is None or not np.isfinite(x) else (f"{x:.3g}" if abs(x) < 100 else f"{x:.1f}")


def _mean_of(entry: dict, train: str, test: str, metric: str = "error") -> float:
    block = entry["blocks"].get((train, test))
    if block is None or block.problem:
        return float("nan")
    values = getattr(block, metric)
    if protocol.block_problem(entry["expected"], block.record, values) is not None:
        return float("nan")
    return float(np.mean(values))


def _num_frames(blocks) -> int:
    frames = [b.frames.shape[1] for b in blocks.values() if b.frames is not None]
    return min(frames) if frames and min(frames) > 1 else 0


def analyze(entries: dict) -> dict:
    """Matrices and summaries of every stored (family, model) result (`protocol.load_block_file`)."""
    out = {}
    for key, entry in entries.items():
        blocks, expected = entry["blocks"], entry["expected"]
        matrix = protocol.error_matrix(blocks, expected, strict=False)
        hidden = protocol.error_matrix(blocks, expected, metric="hidden", strict=False)
        invalid = protocol.invalid_blocks(blocks, expected)
        # every block whose model failed, the density, MIX and unseen cells included
        invalid_all = {k: b.problem for k, b in blocks.items() if b.problem} | invalid
        res = {"matrix": matrix, "hidden_matrix": hidden, "invalid": invalid, "invalid_all": invalid_all}
        res["training"] = entry.get("training", {})
        for name in ("fit_seconds", "predict_seconds", "mixed_seconds"):
            res[name] = entry.get(name)
        res["cells"] = {
            (v, w): (float(np.mean(b.error)), float(np.std(b.error, ddof=1)) if b.error.size > 1 else 0.0)
            for (v, w), b in blocks.items()
        }
        horizons = []
        for h in range(_num_frames(blocks)):
            m = protocol.error_matrix(blocks, expected, metric=f"frame{h}", strict=False)
            horizons.append(protocol.summarize(m) if np.all(np.isfinite(m)) else None)
        res["horizons"] = horizons
        extra = {v: {w: _mean_of(entry, v, w) for w in ("random20", "random35")} for v in data.VIEWS}
        res["density_all"] = {
            v: np.asarray(
                [extra[v]["random20"], extra[v]["random35"]]
                + [matrix[i, data.VIEWS.index(p)] for p in ("R50", "R65", "R80")]
            )
            for i, v in enumerate(data.VIEWS)
        }
        mix_extra = {w: entry["blocks"].get((data.MIXTURE, w)) for w in UNSEEN_VIEWS + ("R50", "R65", "R80")}
        if all(b is not None and not b.problem for b in mix_extra.values()):
            res["mix_unseen"] = {
                w: (100 * float(np.mean(mix_extra[w].error)), 100 * float(np.std(mix_extra[w].error, ddof=1)))
                for w in UNSEEN_VIEWS
            }
            res["mix_density"] = np.asarray(
                [float(np.mean(mix_extra[w].error)) for w in ("random20", "random35", "R50", "R65", "R80")]
            )
        if np.all(np.isfinite(matrix)):
            res["summary"] = protocol.summarize(matrix)
            res["layout"] = protocol.layout_comparison(matrix, counts=entry.get("view_counts"))
            if np.all(np.isfinite(hidden)):
                res["hidden_summary"] = protocol.summarize(hidden)
            density = {w: _mean_of(entry, "R50", w) for w in ("random20", "random35")}
            for w, preset in (("random50", "R50"), ("random65", "R65"), ("random80", "R80")):
                density[w] = matrix[0, data.VIEWS.index(preset)]
            if all(np.isfinite(v) for v in density.values()):
                res["density"] = protocol.density_sweep(density)
            mix = np.asarray([_mean_of(entry, data.MIXTURE, w) for w in data.VIEWS])
            if np.all(np.isfinite(mix)):
                res["mix_row"] = mix
                res["mixed"] = protocol.mixed_ratios(mix, matrix)
        out[key] = res
    return out


def _family_table(analysis: dict, families) -> tuple[str, dict]:
    rows, medians = [], {}
    for family in families:
        learned, classical, excluded = [], [], []
        for (f, model), res in analysis.items():
            if f != family:
                continue
            if "summary" not in res:
                excluded.append(model)
                continue
            (classical if model in baselines.MODELS else learned).append((model, res["summary"].ratio))
        pool = learned or classical
        median = protocol.family_median_ratio([r for _, r in pool]) if pool else float("nan")
        medians[family] = median
        which = "learned" if learned else ("baselines" if classical else "none")
        base = ", ".join(f"{m} {_fmt(r)}" for m, r in classical) or "—"
        published = PUBLISHED_MEDIAN_CD[family]
        left_out = f"{len(excluded)} ({', '.join(excluded)})" if excluded else "0"
        rows.append(
            f"| {family} | {_fmt(median)} ({which}, {len(pool)}) | {published:.2f} | {base} | {left_out} |"
        )
    head = (
        "| family | median C/D, ours (over models, n) | published median C/D | baselines C/D | "
        "models excluded (invalid blocks) |\n|---|---|---|---|---|"
    )
    return head + "\n" + "\n".join(rows), medians


def _pair_table(analysis: dict) -> str:
    lines = [
        "| family | model | D | C | C/D | C/D hidden-only | cross median | cross p90 | cross max | "
        "fit (s) | invalid blocks |",
        "|" + "---|" * 11,
    ]
    for (family, model), res in analysis.items():
        s, h = res.get("summary"), res.get("hidden_summary")
        cells = (
            [_fmt(s.D), _fmt(s.C), _fmt(s.ratio), _fmt(h.ratio if h else None)]
            + [_fmt(s.cross_median), _fmt(s.cross_p90), _fmt(s.cross_max)]
            if s
            else ["—"] * 7
        )
        fit = res.get("fit_seconds")
        lines.append(
            f"| {family} | {model} | " + " | ".join(cells) + f" | {_fmt(fit)} | {len(res['invalid_all'])} |"
        )
    return "\n".join(lines)


def _view_order(view: str) -> tuple[int, str]:
    """The protocol's order of a view (`data.VIEWS`, then the others by name)."""
    return (data.VIEWS.index(view), "") if view in data.VIEWS else (len(data.VIEWS), view)


def _invalid_lines(analysis: dict) -> list[str]:
    """One line per (family, model, kind of reason): how many blocks, which training views, and
    the first block's full reason."""
    lines = []
    for (f, m), r in analysis.items():
        grouped: dict[str, list] = {}
        for (v, w), reason in r["invalid_all"].items():
            grouped.setdefault(reason.split(":")[0], []).append((v, w, reason))
        for kind, cells in grouped.items():
            cells.sort(key=lambda c: (_view_order(c[0]), _view_order(c[1])))  # files store keys sorted
            rows = ", ".join(dict.fromkeys(v for v, _, _ in cells))
            v, w, reason = cells[0]
            lines.append(
                f"- {f} / {m}: {len(cells)} block(s) {kind}, training views {rows} "
                f"(e.g. train {v} / test {w}: {reason})"
            )
    return lines


def _training_table(analysis: dict) -> str:
    lines = [
        "| family | model | training view | initial loss | final loss | valid |",
        "|---|---|---|---|---|---|",
    ]
    for (f, m), r in analysis.items():
        for v, t in r.get("training", {}).items():
            verdict = "yes" if not t.get("problem") else f"no: {t['problem']}"
            lines.append(
                f"| {f} | {m} | {v} | {_fmt(t['initial_loss'])} | {_fmt(t['final_loss'])} | {verdict} |"
            )
    return "\n".join(lines) if len(lines) > 2 else "no learned models"


def _layout_table(analysis: dict) -> str:
    lines = [
        "| family | model | group | worse than destination-trained | median ratio | observed cells |",
        "|---|---|---|---|---|---|",
    ]
    for (family, model), res in analysis.items():
        for g in res.get("layout", []):
            worse = f"{g['worse']}/{g['total']}"
            if "cells" not in g:
                cells = "not recorded"
            elif g["equal_count"]:
                cells = f"{next(iter(g['cells'].values()))[0]} each"
            else:  # e.g. the `posteriorjax` mask scheme, whose layouts are not sized to equal counts
                cells = "NOT equal: " + ", ".join(
                    f"{v} {'/'.join(map(str, c))}" for v, c in g["cells"].items()
                )
            lines.append(
                f"| {family} | {model} | {g['group']} | {worse} | {_fmt(g['median_ratio'])} | {cells} |"
            )
    return "\n".join(lines)


def _density_table(analysis: dict) -> str:
    head = " | ".join(f"{int(100 * d)} %" for d in data.DENSITIES.values())
    lines = [f"| family | model | {head} | denser < 50 % |", "|" + "---|" * (3 + len(data.DENSITIES))]
    for (family, model), res in analysis.items():
        d = res.get("density")
        if d is not None:
            lines.append(
                f"| {family} | {model} | "
                + " | ".join(_fmt(e) for e in d["errors"])
                + f" | {d['denser_lower']}/{d['denser_total']} |"
            )
    return "\n".join(lines)


def _mixed_table(analysis: dict) -> str:
    head = " | ".join(data.VIEWS)
    lines = [
        f"| family | model | {head} | geometric mean | beats median transfer |",
        "|" + "---|" * (4 + len(data.VIEWS)),
    ]
    for (family, model), res in analysis.items():
        m = res.get("mixed")
        if m is not None:
            lines.append(
                f"| {family} | {model} | "
                + " | ".join(_fmt(r) for r in m["ratio"])
                + f" | {_fmt(m['geometric_mean'])} | {m['beats_median_transfer']}/{len(data.VIEWS)} |"
            )
    return "\n".join(lines)


def _pm(mean, sd) -> str:
    return f"{_fmt(mean)} ± {_fmt(sd)}"


def _pair_sd_table(analysis: dict) -> str:
    """Table 13: D and C as mean ± sample SD over the 9 / 72 cell means."""
    lines = ["| family | model | D (mean ± SD) | C (mean ± SD) | C/D |", "|---|---|---|---|---|"]
    for (family, model), res in analysis.items():
        s = res.get("summary")
        if s is not None and model not in baselines.MODELS:
            lines.append(
                f"| {family} | {model} | {_pm(s.D, s.D_sd)} | {_pm(s.C, s.C_sd)} | {_fmt(s.ratio)} |"
            )
    return "\n".join(lines)


def _family_sd_table(analysis: dict, families) -> str:
    """Table 10: per family, matched / cross mean ± SD over the 9 M / 72 M cell means of M learned models."""
    lines = ["| family | matched (mean ± SD, cells) | cross (mean ± SD, cells) |", "|---|---|---|"]
    for family in families:
        diag, cross = [], []
        for (f, model), res in analysis.items():
            if f == family and model not in baselines.MODELS and "summary" in res:
                m = res["matrix"]
                off = ~np.eye(m.shape[0], dtype=bool)
                diag += list(np.diag(m))
                cross += list(m[off])
        if len(diag) > 1:
            lines.append(
                f"| {family} | {_pm(np.mean(diag), np.std(diag, ddof=1))} ({len(diag)}) | "
                f"{_pm(np.mean(cross), np.std(cross, ddof=1))} ({len(cross)}) |"
            )
    return "\n".join(lines)


def _horizon_table(analysis: dict) -> str:
    """Table 14: per forecasting horizon h, D_h and C_h (mean ± SD over 9 / 72 cell means)."""
    rows = [(k, r["horizons"]) for k, r in analysis.items() if r.get("horizons") and all(r["horizons"])]
    if not rows:
        return "no forecasting results"
    n = len(rows[0][1])
    head = " | ".join(f"D_{h + 1} | C_{h + 1}" for h in range(n))
    lines = [f"| family | model | {head} |", "|" + "---|" * (2 + 2 * n)]
    for (family, model), hs in rows:
        cells = " | ".join(f"{_pm(s.D, s.D_sd)} | {_pm(s.C, s.C_sd)}" for s in hs)
        lines.append(f"| {family} | {model} | {cells} |")
    return "\n".join(lines)


def _density_all_table(analysis: dict) -> str:
    """Density response of every training view's model (Table 12, second group, over all nine rows)."""
    head = " | ".join(f"{int(100 * d)} %" for d in data.DENSITIES.values())
    lines = [
        f"| family | model | train view | {head} | E[v, R65], E[v, R80] < E[v, R50] |",
        "|" + "---|" * (4 + len(data.DENSITIES)),
    ]
    totals = {}
    for (family, model), res in analysis.items():
        if model in baselines.MODELS:
            continue
        for v, errs in res.get("density_all", {}).items():
            if not np.all(np.isfinite(errs)):
                continue
            lower = int(np.sum(errs[3:] < errs[2]))
            t = totals.setdefault(model, [0, 0])
            t[0], t[1] = t[0] + lower, t[1] + 2
            lines.append(
                f"| {family} | {model} | {v} | " + " | ".join(_fmt(e) for e in errs) + f" | {lower}/2 |"
            )
    summary = ", ".join(f"{m} {a}/{b}" for m, (a, b) in totals.items())
    return "\n".join(lines) + f"\n\nDenser than R50 and lower error, per model: {summary or '—'}."


def _unseen_table(analysis: dict) -> str:
    """Table 65: MIX on protocols absent from training, error % mean ± SD over records."""
    lines = [
        "| family | model | random 20 % | random 35 % | line 30 / random 20 | published (Table 65) "
        "| MIX error at 20/35/50/65/80 % (Fig. 5) |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, res in analysis.items():
        u = res.get("mix_unseen")
        if u is None:
            continue
        pub = PUBLISHED_UNSEEN.get(key)
        pub_text = " / ".join(_pm(*c) for c in pub) if pub else "—"
        cells = " | ".join(_pm(*u[w]) for w in UNSEEN_VIEWS)
        density = ", ".join(_fmt(e) for e in res["mix_density"])
        lines.append(f"| {key[0]} | {key[1]} | {cells} | {pub_text} | {density} |")
    return "\n".join(lines)


def _baseline_table(analysis: dict) -> str:
    """Classical baselines as PDE x test view: hyperparameters selected on the test view itself (E[w, w])."""
    head = " | ".join(data.VIEWS)
    lines = [f"| family | baseline | {head} |", "|" + "---|" * (2 + len(data.VIEWS))]
    for (family, model), res in analysis.items():
        if model in baselines.MODELS:
            lines.append(
                f"| {family} | {model} | " + " | ".join(_fmt(e) for e in np.diag(res["matrix"])) + " |"
            )
    return "\n".join(lines)


def _cell_tables(analysis: dict) -> str:
    """Tables 15-63: every cell as mean ± SD over the test records, an invalid block marked so."""
    parts = []
    for (family, model), res in analysis.items():
        cells = res.get("cells", {})
        lines = [f"### {family} / {model}", "", "| train \\ test | " + " | ".join(data.VIEWS) + " |"]
        lines.append("|" + "---|" * (1 + len(data.VIEWS)))
        rows = [*data.VIEWS, data.MIXTURE] if any(k[0] == data.MIXTURE for k in cells) else list(data.VIEWS)
        bad = res.get("invalid_all", {})

        def cell(v, w, cells=cells, bad=bad):
            if (v, w) not in cells:
                return "—"
            return _pm(*cells[(v, w)]) + (" (invalid)" if (v, w) in bad else "")

        for v in rows:
            lines.append(f"| {v} | " + " | ".join(cell(v, w) for w in data.VIEWS) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _jsonable(value):
    if isinstance(value, dict):
        return {(k if isinstance(k, str) else "|".join(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, protocol.TransferSummary):
        return _jsonable(value._asdict())
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            return np.where(np.isfinite(value), value, None).tolist()
        return value.tolist()
    if isinstance(value, (np.floating, float)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def write(workdir, config=None) -> dict:
    """Build `summary.md`, `results.json` and the figures from the stored blocks; returns the analysis.

    With `config`, only its families and models are reported, in its order;
    otherwise every stored block file.
    """
    workdir = Path(workdir)
    files = sorted((workdir / "blocks").glob("*.json"))
    entries = {}
    for path in files:
        entry = protocol.load_block_file(path)
        entries[(entry["family"], entry["model"])] = entry
    if config is not None:
        order = [(f, m) for f in config.families for m in config.models]
        entries = {k: entries[k] for k in order if k in entries}
    analysis = analyze(entries)
    families = list(dict.fromkeys(f for f, _ in analysis))
    figures = workdir / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    matrices = {k: r["matrix"] for k, r in analysis.items()}
    if matrices:
        scale = heatmaps(matrices, figures / "heatmaps.png")
        for family in families:
            heatmaps(
                {k: v for k, v in matrices.items() if k[0] == family},
                figures / f"heatmaps_{family}.png",
                norm_range=scale,
            )
    curves = {k: r["density"] for k, r in analysis.items() if "density" in r}
    if curves:
        density_figure(curves, figures / "density.png")
    mixed = {k: r["mixed"] for k, r in analysis.items() if "mixed" in r}
    if mixed:
        mixed_figure(mixed, figures / "mixed.png")
        # Fig. 3 (top): the nine single-view rows and the MIX row on the shared scale
        with_mix = {k: np.vstack([analysis[k]["matrix"], analysis[k]["mix_row"][None]]) for k in mixed}
        heatmaps(with_mix, figures / "heatmaps_mix.png", norm_range=scale if matrices else None)
    mix_curves = {
        k: (
            r["mix_density"],
            np.asarray(
                [r["matrix"][data.VIEWS.index(v), data.VIEWS.index(v)] for v in ("R50", "R65", "R80")]
            ),
        )
        for k, r in analysis.items()
        if "mix_density" in r
    }
    if mix_curves:
        mix_density_figure(mix_curves, figures / "mix_density.png")
    family_table, medians = _family_table(analysis, families)
    invalid = _invalid_lines(analysis)
    scale = "" if config is None else f" ({config.resolution} x {config.resolution}, {config.num_train}/"
    scale += "" if config is None else f"{config.num_test} train/test records per family)"
    text = "\n\n".join(
        [
            f"# Observation-pattern transfer{scale}",
            "Rows of every matrix are training views, columns test views, in the order "
            + ", ".join(data.VIEWS)
            + ". Published medians: PDE-OBS, 128 x 128, 1800/200 records, 500 epochs.",
            "## C/D per family\n\n" + family_table,
            "## Matched and cross-pattern errors per model\n\n" + _pair_table(analysis),
            "## Equal-count layouts\n\n" + _layout_table(analysis),
            "## Density sweep (R50-trained models)\n\n" + _density_table(analysis),
            "## Mixed-pattern training: E_MIX[w] / E[w, w]\n\n" + _mixed_table(analysis),
            "## Matched and cross, mean ± SD (Tables 10, 13)\n\n"
            + _family_sd_table(analysis, families)
            + "\n\n"
            + _pair_sd_table(analysis),
            "## Forecasting horizons (Table 14)\n\n" + _horizon_table(analysis),
            "## Density response of every training view (Table 12, second group)\n\n"
            + _density_all_table(analysis),
            "## MIX on unseen protocols (Table 65)\n\n" + _unseen_table(analysis),
            "## Classical baselines per test view\n\n" + _baseline_table(analysis),
            "## Invalid blocks (excluded from every mean above)\n\n"
            + ("\n".join(invalid) if invalid else "none"),
            "## Training losses (mean of the first / last tenth of the steps)\n\n"
            + _training_table(analysis),
        ]
    )
    (workdir / "summary.md").write_text(text + "\n")
    (workdir / "cells.md").write_text(
        "# Every cell: mean ± SD over the test records (Tables 15-63)\n\n" + _cell_tables(analysis) + "\n"
    )
    payload = {"|".join(k): _jsonable(r) for k, r in analysis.items()}
    payload["family_median_cd"] = _jsonable(medians)
    (workdir / "results.json").write_text(json.dumps(payload, indent=1))
    print(text, flush=True)
    return {"analysis": analysis, "family_median_cd": medians}
