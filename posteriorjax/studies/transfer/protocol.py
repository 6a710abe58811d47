"""Scores and summaries of the observation-pattern transfer protocol (PDE-OBS `pdeobs-strict-v1`).

Per record i, in float64 over every non-record axis (for forecasting jointly
over frames 1..3):

    rel_i = ||pred_i - target_i||_2 / max(||target_i||_2, 1e-12),

and the hidden-only variant restricted to the cells a view leaves unobserved
(numerator and denominator over the hidden cells, every frame of a forecast).
A block (one training view, one test view) is the per-record errors of the
test records; it is **invalid** if a record is missing, duplicated, unexpected
or non-finite, or if the model behind it failed (`Block.problem`, see below), and
an invalid block never enters a mean: its cell is NaN, a matrix with a NaN cell
gets no summary, and the reports count the (family, model) pairs so excluded.

Model validity (`posteriorjax.training.health`, thresholds after PDE-OBS's training
gates): a trained model is invalid, with the reason, when its training loss diverged
(non-finite, or the last tenth's mean above 1.25 x the first tenth's) or stayed at its
initial loss (less than 1 % lower), which marks every block of that model; and a block is
invalid when the median over its records of the spatial spread ratio
sqrt(mean_c var_x pred) / sqrt(mean_c var_x target) is below 1e-2 (a near-constant field).

For one (family, model), E[v, w] is the block mean with training view v (row)
and test view w (column) over `VIEWS`. Matched mean D = mean of the 9
diagonal cells, cross mean C = mean of the 72 off-diagonal cells, and
C/D = C_mean / D_mean; per-transfer ratios E[v, w] / E[w, w] are normalized by
the destination-trained diagonal. Layout comparisons are made within the
equal-count groups (R50, H, V, CL) and (BL, LI, BD); the density sweep tests
the R50-trained model at random 20/35/50/65/80 %; mixed-pattern training
compares the MIX model's row with the destination-trained diagonal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from posteriorjax.studies.transfer.data import DENSITIES, DENSITY_VIEWS, VIEWS
from posteriorjax.studies.transfer.masks import EQUAL_COUNT_GROUPS
from posteriorjax.training import health

LAYOUT_GROUPS = EQUAL_COUNT_GROUPS  # Table 5: equal counts at every resolution (`masks.view_protocol`)
EPS = 1e-12


class InvalidBlockError(ValueError):
    """A block with a missing, duplicated, unexpected or non-finite record."""


class Block(NamedTuple):
    """Per-record scores of one (training view, test view) block.

    Attributes:
      record: `(N,)` int record ids.
      error: `(N,)` float64 relative L2 over the full field.
      hidden: `(N,)` float64 relative L2 over the hidden cells only.
      frames: `(N, C)` float64 relative L2 per output channel (forecasting: per horizon,
        PDE-OBS Table 14's auxiliary per-frame scores), or None.
      spread: `(N,)` float64 spatial spread ratio of the predictions (`spatial_spread`), or None.
      problem: why the model behind the block is invalid (module doc), or None.
    """

    record: np.ndarray
    error: np.ndarray
    hidden: np.ndarray
    frames: np.ndarray | None = None
    spread: np.ndarray | None = None
    problem: str | None = None


# ----------------------------------------------------------------------------
# Per-record scores


def _as_fields(value, name: str) -> np.ndarray:
    value = np.asarray(value, np.float64)
    if value.ndim != 4:
        raise ValueError(f"{name}: expected (N, C, H, W), got shape {value.shape}")
    return value


def relative_l2(pred, target, hidden=None) -> np.ndarray:
    """Per-record relative L2 `(N,)` in float64 of `pred` against `target`, both `(N, C, H, W)`.

    With `hidden (N, H, W)` bool (True where the view does not observe), only
    those cells (in every channel) enter numerator and denominator.
    """
    pred = _as_fields(pred, "pred")
    target = _as_fields(target, "target")
    if pred.shape != target.shape:
        raise ValueError(f"pred: expected the target shape {target.shape}, got {pred.shape}")
    diff = pred - target
    if hidden is not None:
        hidden = np.asarray(hidden, bool)
        if hidden.shape != (target.shape[0], *target.shape[2:]):
            raise ValueError(
                f"hidden: expected (N, H, W) = {(target.shape[0], *target.shape[2:])}, got {hidden.shape}"
            )
        weight = hidden[:, None].astype(np.float64)
        diff, target = diff * weight, target * weight
    num = np.sqrt(np.sum(diff**2, axis=(1, 2, 3)))
    return num / np.maximum(np.sqrt(np.sum(target**2, axis=(1, 2, 3))), EPS)


def spatial_spread(pred, target) -> np.ndarray:
    """Per-record ratio `(N,)` sqrt(mean_c var_x pred) / sqrt(mean_c var_x target) (float64).

    var_x is the variance over the H x W cells of one channel; 0 for a spatially constant
    prediction, about 1 for one as rough as its target. Both `(N, C, H, W)`.
    """
    pred, target = _as_fields(pred, "pred"), _as_fields(target, "target")
    num = np.sqrt(np.mean(np.var(pred, axis=(2, 3)), axis=1))
    return num / np.maximum(np.sqrt(np.mean(np.var(target, axis=(2, 3)), axis=1)), EPS)


def score_block(record, pred, target, masks, *, problem: str | None = None) -> Block:
    """`Block` of predictions `(N, C, H, W)` for records `(N,)` observed with `masks (N, H, W)`.

    `problem`: the trained model's own failure (`health.training_problem`), if any; otherwise a
    near-constant prediction (`prediction_problem`) marks the block.
    """
    masks = np.asarray(masks, bool)
    pred, target = _as_fields(pred, "pred"), _as_fields(target, "target")
    frames = np.stack(
        [relative_l2(pred[:, c : c + 1], target[:, c : c + 1]) for c in range(target.shape[1])], 1
    )
    spread = spatial_spread(pred, target)
    return Block(
        np.asarray(record, np.int64),
        relative_l2(pred, target),
        relative_l2(pred, target, hidden=~masks),
        frames,
        spread,
        problem or prediction_problem(spread),
    )


def prediction_problem(spread) -> str | None:
    """'near-constant prediction' when the median of the spread ratios `(N,)` is below
    `health.COLLAPSE_RATIO` (or not finite), else None."""
    return health.spread_problem(spread, "spatial spread ratio")


# ----------------------------------------------------------------------------
# Validity


def block_problem(expected, record, error) -> str | None:
    """Why a block is invalid (missing, duplicated, unexpected or non-finite records), or None."""
    expected = np.asarray(expected, np.int64).ravel()
    record = np.asarray(record).ravel()
    error = np.asarray(error, np.float64).ravel()
    if record.shape != error.shape:
        return f"{record.size} record ids for {error.size} errors"
    ids, counts = np.unique(record, return_counts=True)
    problems = []
    missing = np.setdiff1d(expected, ids)
    if missing.size:
        problems.append(f"{missing.size} missing record(s), e.g. {missing[:3].tolist()}")
    if np.any(counts > 1):
        problems.append(f"duplicated record(s) {ids[counts > 1][:3].tolist()}")
    extra = np.setdiff1d(ids, expected)
    if extra.size:
        problems.append(f"{extra.size} unexpected record(s), e.g. {extra[:3].tolist()}")
    bad = ~np.isfinite(error)
    if bad.any():
        problems.append(f"non-finite error for record(s) {record[bad][:3].tolist()}")
    return "; ".join(problems) or None


def block_mean(expected, record, error, *, name: str = "block") -> float:
    """Mean error of a valid block; raises `InvalidBlockError` naming the block and the reason."""
    problem = block_problem(expected, record, error)
    if problem:
        raise InvalidBlockError(f"{name}: invalid block: {problem}")
    return float(np.mean(np.asarray(error, np.float64)))


def error_matrix(
    blocks: Mapping[tuple[str, str], Block],
    expected,
    *,
    views: Sequence[str] = VIEWS,
    metric: str = "error",
    strict: bool = True,
) -> np.ndarray:
    """Mean errors `(len(views), len(views))`: row = training view, column = test view.

    Args:
      blocks: `(train_view, test_view) -> Block`; a missing block is invalid.
      expected: the test record ids every block must hold exactly once.
      metric: ``error`` (full field), ``hidden`` (hidden-only) or ``frame{h}`` (the
        relative L2 of output channel h alone: forecasting horizon h + 1).
      strict: raise `InvalidBlockError` on the first invalid block; otherwise
        its cell is NaN (see `invalid_blocks` for the reasons).
    """
    frame = int(metric[5:]) if metric.startswith("frame") and metric[5:].isdigit() else None
    if metric not in ("error", "hidden") and frame is None:
        raise ValueError(f"metric: expected 'error', 'hidden' or 'frame<h>', got {metric!r}")
    out = np.full((len(views), len(views)), np.nan)
    for i, v in enumerate(views):
        for j, w in enumerate(views):
            block = blocks.get((v, w))
            name = f"train {v} / test {w}"
            if block is None or block.problem:
                if strict:
                    reason = "not computed" if block is None else block.problem
                    raise InvalidBlockError(f"{name}: invalid block: {reason}")
                continue
            if frame is None:
                values = getattr(block, metric)
            elif block.frames is None or frame >= block.frames.shape[1]:
                values = np.full(len(block.record), np.nan)
            else:
                values = block.frames[:, frame]
            if strict:
                out[i, j] = block_mean(expected, block.record, values, name=name)
            elif block_problem(expected, block.record, values) is None:
                out[i, j] = float(np.mean(values))
    return out


def invalid_blocks(blocks: Mapping[tuple[str, str], Block], expected, *, views=VIEWS) -> dict:
    """`{(train_view, test_view): reason}` for every invalid or missing block."""
    out = {}
    for v in views:
        for w in views:
            block = blocks.get((v, w))
            if block is None:
                out[(v, w)] = "not computed"
                continue
            problem = (
                block.problem
                or block_problem(expected, block.record, block.error)
                or block_problem(expected, block.record, block.hidden)
            )
            if problem:
                out[(v, w)] = problem
    return out


# ----------------------------------------------------------------------------
# Summaries of one 9 x 9 matrix


class TransferSummary(NamedTuple):
    """Matched/cross summary of one matrix E (PDE-OBS Tables 10 and 13).

    D, C: means of the diagonal / off-diagonal cells; D_sd, C_sd: their sample
    SDs (ddof 1); ratio: C / D; transfer: `(V, V)` E[v, w] / E[w, w];
    cross_median, cross_p90, cross_max: over the off-diagonal cell means.
    """

    D: float
    C: float
    D_sd: float
    C_sd: float
    ratio: float
    transfer: np.ndarray
    cross_median: float
    cross_p90: float
    cross_max: float


def _check_matrix(matrix, name: str = "matrix") -> np.ndarray:
    matrix = np.asarray(matrix, np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 2:
        raise ValueError(f"{name}: expected a square (V, V) matrix with V >= 2, got shape {matrix.shape}")
    if not np.all(np.isfinite(matrix)) or np.any(matrix < 0):
        raise ValueError(f"{name}: expected finite errors >= 0 (invalid blocks are NaN), got {matrix}")
    return matrix


def transfer_ratios(matrix) -> np.ndarray:
    """Per-transfer ratios `(V, V)`: E[v, w] / E[w, w] (destination-trained diagonal)."""
    matrix = _check_matrix(matrix)
    return matrix / np.maximum(np.diag(matrix)[None, :], EPS)


def summarize(matrix) -> TransferSummary:
    """`TransferSummary` of a complete, valid matrix (C/D = C_mean / D_mean)."""
    matrix = _check_matrix(matrix)
    off = ~np.eye(matrix.shape[0], dtype=bool)
    diag, cross = np.diag(matrix), matrix[off]
    d, c = float(diag.mean()), float(cross.mean())
    return TransferSummary(
        D=d,
        C=c,
        D_sd=float(diag.std(ddof=1)),
        C_sd=float(cross.std(ddof=1)),
        ratio=c / max(d, EPS),
        transfer=transfer_ratios(matrix),
        cross_median=float(np.median(cross)),
        cross_p90=float(np.percentile(cross, 90)),
        cross_max=float(cross.max()),
    )


def layout_comparison(
    matrix, *, views: Sequence[str] = VIEWS, groups=LAYOUT_GROUPS, counts: Mapping | None = None
) -> list[dict]:
    """Equal-count layout contrasts (PDE-OBS Table 12, first group).

    For each group, over ordered pairs v != w inside it: how many transfers
    E[v, w] exceed the destination-trained E[w, w], and the median ratio. With `counts`
    (view -> the observed-cell counts of its test records), each group also says whether its
    views really observe one and the same count (``equal_count``) and which (``cells``).
    """
    matrix = _check_matrix(matrix)
    index = {v: i for i, v in enumerate(views)}
    out = []
    for group in groups:
        missing = [g for g in group if g not in index]
        if missing:
            raise ValueError(f"groups: views {missing} are not in {tuple(views)}")
        ratios = [
            matrix[index[v], index[w]] / max(matrix[index[w], index[w]], EPS)
            for v in group
            for w in group
            if v != w
        ]
        entry = {
            "group": "/".join(group),
            "worse": int(np.sum(np.asarray(ratios) > 1.0)),
            "total": len(ratios),
            "median_ratio": float(np.median(ratios)),
        }
        if counts is not None and all(v in counts for v in group):
            cells = {v: sorted(int(c) for c in np.atleast_1d(counts[v])) for v in group}
            entry["cells"] = cells
            entry["equal_count"] = len({tuple(c) for c in cells.values()}) == 1 and all(
                len(c) == 1 for c in cells.values()
            )
        out.append(entry)
    return out


def density_sweep(errors: Mapping[str, float]) -> dict:
    """Density response of the R50-trained model: `errors` maps every density view to its mean error.

    Returns densities `(5,)`, errors `(5,)`, ratios to the error at 50 %
    (the R50 mask, so the matched cell), and how many denser views (65, 80 %)
    have a lower error than 50 % (PDE-OBS Table 12, second group).
    """
    missing = [v for v in DENSITY_VIEWS if v not in errors]
    if missing:
        raise ValueError(f"errors: expected every density view {DENSITY_VIEWS}, missing {missing}")
    values = np.asarray([errors[v] for v in DENSITY_VIEWS], np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"errors: expected finite errors, got {values}")
    reference = values[DENSITY_VIEWS.index("random50")]
    denser = [i for i, v in enumerate(DENSITY_VIEWS) if DENSITIES[v] > 0.5]
    return {
        "densities": np.asarray([DENSITIES[v] for v in DENSITY_VIEWS]),
        "errors": values,
        "ratio_to_r50": values / max(reference, EPS),
        "denser_lower": int(np.sum(values[denser] < reference)),
        "denser_total": len(denser),
    }


def mixed_ratios(mix_row, matrix) -> dict:
    """Mixed-pattern training against destination-trained references (PDE-OBS Figure 3, Table 64).

    Args:
      mix_row: `(V,)` mean errors of the MIX-trained model on each test view.
      matrix: the single-view matrix `(V, V)` of the same (family, model).

    Returns ratio `(V,)` R_MIX->w = E_MIX[w] / E[w, w], their geometric mean,
    the transferred ratios' median/min/max per destination `(V,)` (the V - 1
    other single-view models), and how many destinations the MIX model beats
    the median transferred model on.
    """
    matrix = _check_matrix(matrix)
    mix_row = np.asarray(mix_row, np.float64)
    if mix_row.shape != (matrix.shape[0],) or not np.all(np.isfinite(mix_row)):
        raise ValueError(f"mix_row: expected {matrix.shape[0]} finite errors, got {mix_row}")
    ratios = transfer_ratios(matrix)
    off = ~np.eye(matrix.shape[0], dtype=bool)
    transferred = np.stack([ratios[off[:, w], w] for w in range(matrix.shape[0])])  # (V, V-1)
    mix = mix_row / np.maximum(np.diag(matrix), EPS)
    median = np.median(transferred, axis=1)
    return {
        "ratio": mix,
        "geometric_mean": float(np.exp(np.mean(np.log(np.maximum(mix, EPS))))),
        "transferred_median": median,
        "transferred_min": transferred.min(axis=1),
        "transferred_max": transferred.max(axis=1),
        "beats_median_transfer": int(np.sum(mix < median)),
    }


def family_median_ratio(ratios: Sequence[float]) -> float:
    """Median C/D of a family over its models (PDE-OBS: median over the seven methods)."""
    values = np.asarray(list(ratios), np.float64)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError(f"ratios: expected a non-empty list of finite C/D values, got {values}")
    return float(np.median(values))


def load_block_file(path: Path) -> dict:
    """A stored (family, model) result with its blocks as `protocol.Block`s keyed `(train, test)`."""
    raw = json.loads(Path(path).read_text())
    raw["blocks"] = {
        tuple(k.split("|")): Block(
            np.asarray(b["record"], np.int64),
            np.asarray(b["error"]),
            np.asarray(b["hidden"]),
            None if b.get("frames") is None else np.asarray(b["frames"], np.float64),
            None if b.get("spread") is None else np.asarray(b["spread"], np.float64),
            b.get("problem"),
        )
        for k, b in raw["blocks"].items()
    }
    raw["expected"] = np.asarray(raw["expected"], np.int64)
    return raw


def encode_block(block: Block) -> dict:
    """The JSON form of a `Block` in a stored block file (`load_block_file` reads it back)."""
    out = {
        "record": block.record.tolist(),
        "error": [float(e) for e in block.error],
        "hidden": [float(e) for e in block.hidden],
    }
    if block.frames is not None and block.frames.shape[1] > 1:
        out["frames"] = np.asarray(block.frames, np.float64).tolist()
    if block.spread is not None:
        out["spread"] = [float(e) for e in block.spread]
    if block.problem:
        out["problem"] = block.problem
    return out
