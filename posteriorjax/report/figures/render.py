"""Workdir -> figures: `render(workdir)` draws every figure whose inputs exist (the tables and
figures together: `report.stage.write`)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from absl import logging

from posteriorjax import tasks
from posteriorjax.report import tables
from posteriorjax.report.figures.calibration import coverage_figure, mira_figure, tarp_figure
from posteriorjax.report.figures.curves import (
    calibration_choice_figure,
    curves_figure,
    optimum_figure,
    vshape_figure,
)
from posteriorjax.report.figures.fields import FieldLayout, field_layout, moments_figure, samples_figure
from posteriorjax.report.figures.style import POSTERIOR_METRICS
from posteriorjax.report.records import (
    LOWER_IS_BETTER,
    base_task,
    group,
    hparams_key,
    mira_scores,
    noise_optima,
    read_workdir,
    row_groups,
    scalar_metrics,
    tarp_curves,
    varying_axes,
)
from posteriorjax.sweep.store import read_reference


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text)


def _chosen_setting(stored: list[tuple], records: Sequence[dict]) -> tuple:
    """The stored hyperparameter setting of smallest over-case `mean_error` (else the first stored)."""
    means = {
        hparams_key(row["hparams"]): row["mean_error"][0] for row in tables.aggregate(records, ["mean_error"])
    }
    finite = [(means[k], i) for i, k in enumerate(stored) if k in means and math.isfinite(means[k])]
    return stored[min(finite)[1]] if finite else stored[0]


def task_layout(label: str, config: Mapping) -> FieldLayout | None:
    """`field_layout` of the sweep task entry `label`, built from the workdir's `config["tasks"]`.

    None when the entry names no registered task (`records.base_task`) or its task has
    no field layout; a registered task that no longer builds from the recorded options
    is logged as a warning and drawn without a layout.
    """
    name = base_task(label)
    if name not in tasks.names():
        return None
    options = ((config.get("tasks") or {}).get(label)) or {}
    try:
        return field_layout(tasks.get(name, **options))
    except (TypeError, ValueError) as err:
        logging.warning(
            "figures: task %r does not build from %s (%s); fields drawn without labels", label, options, err
        )
        return None


def _render_fields(workdir: Path, records: Sequence[dict], config: Mapping, out: Path) -> list[Path]:
    sample_root, paths = workdir / "samples", []
    if not sample_root.is_dir():
        return paths
    for task_dir in sorted(p for p in sample_root.iterdir() if p.is_dir()):
        task = task_dir.name
        ref = read_reference(workdir, task)
        files = sorted(task_dir.glob("*.npz"))
        if not files or ref is None:
            continue
        ref_samples, ref_weights, x_true = ref["ref_samples"], ref["ref_weights"], ref["x_true"]
        if ref_samples.shape[-2:] == (1, 1):  # coefficient vectors (interface tasks), not images
            continue
        layout = task_layout(task, config)
        for file in files:
            label = file.stem
            with np.load(file) as data:
                samples, case = data["samples"], np.asarray(data["case"]).astype(int)
                hp = {k[len("hparam_") :]: np.asarray(data[k]) for k in data.files if k.startswith("hparam_")}
            if samples.shape[0] == 0:
                continue
            stored = [hparams_key({n: v[i] for n, v in hp.items()}) for i in range(samples.shape[0])]
            chosen = _chosen_setting(
                stored, [r for r in records if (r["task"], r["sampler"]) == (task, label)]
            )
            first: dict[int, int] = {}
            for i, (c, k) in enumerate(zip(case.tolist(), stored, strict=True)):
                if k == chosen:
                    first.setdefault(c, i)
            for c, i in sorted(first.items()):
                if not 0 <= c < ref_samples.shape[0]:
                    raise ValueError(
                        f"{file}: case {c} has no reference of task {task!r} ({ref_samples.shape[0]} cases)"
                    )
                title = f"{task} / {label} / case {c} ({tables.hparam_label(dict(chosen))})"
                stem = f"{_slug(task)}_{_slug(label)}_case{c}.png"
                paths.append(
                    samples_figure(
                        out / f"samples_{stem}",
                        samples[i],
                        ref_samples[c],
                        ref_weights[c],
                        truth=x_true[c],
                        title=title,
                        layout=layout,
                    )
                )
                paths.append(
                    moments_figure(
                        out / f"moments_{stem}",
                        samples[i],
                        ref_samples[c],
                        ref_weights[c],
                        title=title,
                        layout=layout,
                    )
                )
    return paths


def render(workdir: str | Path, *, noise_workdirs: Sequence[str | Path] = ()) -> list[Path]:
    """Draw every figure whose inputs exist in `workdir` into `<workdir>/figures/`; return their paths.

    Reads `results.jsonl`, `config.json`, `samples/<task>/<sampler>.npz`,
    `calibration/<task>/<label>.json` (drawn beside it as `<label>.png`) and
    the stored references (`sweep.store.read_reference`), each only if present. Sample and moment figures
    show, per stored case, the stored hyperparameter setting with the smallest
    over-case `mean_error` (the main table's first column; the first stored
    setting when no record is finite). The optimum-vs-noise figures pool the
    task entries of `workdir` and of `noise_workdirs` (sweeps of the same study
    run at other noise levels, one workdir per level), each entry's noise
    level read with `records.noise_level` from its own workdir's config
    (`records.noise_optima`).
    """
    workdir = Path(workdir)
    out = workdir / "figures"
    records, config = read_workdir(workdir)
    sources = [(str(workdir), records, config)]
    for extra in noise_workdirs:
        extra = Path(extra)
        if not (extra / "results.jsonl").is_file():
            raise FileNotFoundError(f"noise_workdirs: {extra} holds no results.jsonl")
        sources.append((str(extra), *read_workdir(extra)))
    noise = noise_optima(sources)  # validated before anything is drawn
    paths = _render_fields(workdir, records, config, out)
    for (task,), trecs in sorted(group(records, "task").items()):
        t = _slug(task)
        for (sampler,), srecs in sorted(group(trecs, "sampler").items()):
            if not scalar_metrics(srecs, LOWER_IS_BETTER):
                continue
            for axis in varying_axes(srecs):
                name = f"curves_{t}_{_slug(sampler)}_{_slug(axis)}.png"
                paths.append(curves_figure(out / name, srecs, axis, title=f"{task} / {sampler}"))
        if (
            len(row_groups(trecs)) >= 2
            and scalar_metrics(trecs, ["rel_l2_mean"])
            and scalar_metrics(trecs, POSTERIOR_METRICS)
        ):
            paths.append(
                vshape_figure(out / f"vshape_{t}.png", trecs, title=f"{task}: pointwise vs posterior")
            )
        if any(isinstance(r["metrics"].get("coverage"), list) for r in trecs):
            paths.append(coverage_figure(out / f"coverage_{t}.png", trecs, title=f"{task}: coverage"))
        curves, rows = tarp_curves(trecs), row_groups(trecs)
        if curves and all(len(rows[k]) >= tables.TARP_MIN_CONDITIONS for k in curves):
            paths.append(tarp_figure(out / f"tarp_{t}.png", trecs, title=f"{task}: TARP expected coverage"))
        if mira_scores(trecs):
            paths.append(mira_figure(out / f"mira_{t}.png", trecs, title=f"{task}: MIRA"))
    for path in sorted(workdir.glob("calibration/*/*.json")):  # `sweep.calibrate`'s choices
        result = json.loads(path.read_text())
        if "chosen" in result:
            paths.append(calibration_choice_figure(path.with_suffix(".png"), result))
    for (base, sampler, axis, others), optima in noise.items():
        setting = tables.hparam_label(dict(others))
        suffix = f"_{_slug(setting)}" if others else ""
        name = f"optimum_{_slug(base)}_{_slug(sampler)}_{_slug(axis)}{suffix}.png"
        title = f"{base} / {sampler}: optimal {axis} per metric" + (f" ({setting})" if others else "")
        paths.append(optimum_figure(out / name, optima, axis=axis, title=title))
    return paths
