"""Learned estimators of a finite unknown (e.g. the 17 interface coefficients) from observations.

An estimator maps one standardized observation vector ``y (p,)`` to standardized
coefficients ``(m,)``; each family sees the observation through its own view of
the sensor `Layout` (``frames`` blocks of ``count`` sensor values, then ``totals``
auxiliary channels):

* ``"mlp"``: the flat vector.
* ``"gru"``: the observation history, a sequence of `frames` per-frame sensor
  vectors (the totals appended to every step), read by a GRU; a linear head on the
  last hidden state.
* ``"fno"`` / ``"deeponet"``: rasterized sensors, one channel per frame with the
  sensor values scattered onto the grid (zero elsewhere, i.e. the standardized
  mean), one constant channel per total and a mask channel; `posteriorjax.nn.FNO`
  / `DeepONet` to m output channels, mean-pooled over the grid.
* ``"unipde"`` / ``"unipde_noalign"``: our reading of the paper's UniPDE families
  (`UniPDEEstimator`): one encoder shared by every observation channel, the channel
  embeddings mean-pooled to a latent, an MLP head to the coefficients; ``"unipde"``
  adds a cross-channel alignment term to the training loss, ``"unipde_noalign"``
  does not. The paper names the two families only; architecture and term are ours.

Deep ensembles (Lakshminarayanan et al. 2017): `fit` trains one member per key
(`training.scan_ensemble`: members and seeds are one program); member k of a
vmapped fit equals `fit_member` on key k alone. Training is minibatch AdamW on the
mean squared error in standardized units, a cosine learning-rate decay, all
steps in one `lax.scan` (`TRAINING`, the shared `training.TrainConfig`).

Direction-wise confidences (`confidences`, larger = claimed first) come only
from the calibration split, never from test errors: ensemble spread of the
projected predictions, split-conformal interval width of the absolute projected
residual (`metrics.calibration.conformal_quantile`), calibration (validation)
NRMSE and the geometric reference (oracle), each scale-free (divided by the
calibration std of that direction's coordinate); the ``*_raw`` rules are the same signals
in the coordinate's own units (d = V^T G^(1/2) c: the interval width itself, the RMSE, the member
std), the other reading of the paper, whose formulas are lost. `evaluate` scores test
predictions: directional NRMSE, hits, sCRS under no abstention / validation
gating / oracle gating, and the ranking scores of every confidence rule
(`metrics.geometry.selection`). `run_configuration` does all of it for one task:
simulate the splits, fit every family, score every seed.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import checks, nn, training
from posteriorjax.metrics import calibration
from posteriorjax.metrics import geometry as geo
from posteriorjax.reference import registry
from posteriorjax.training import health

ESTIMATORS = ("mlp", "gru", "fno", "deeponet", "unipde", "unipde_noalign")
CONFIDENCES = (
    "validation",
    "spread",
    "conformal",
    "oracle",
    "validation_raw",
    "spread_raw",
    "conformal_raw",
    "validation_global",
)


# ----------------------------------------------------------------------------
# Observation layout and views


@dataclasses.dataclass(frozen=True)
class Layout:
    """Arrangement of an observation vector `(frames * count + totals,)` (static, hashable).

    Attributes:
      frames: sensor blocks (observation history length), frame-major; 0 with count 0
        for an observation of auxiliary channels alone (then totals >= 1).
      count: sensors per frame.
      totals: auxiliary scalar channels after the sensor blocks.
      shape: `(H, W)` grid of the sensors.
      indices: flat row-major grid cell of each sensor, in observation order `(count,)`.
    """

    frames: int
    count: int
    totals: int
    shape: tuple[int, int]
    indices: tuple[int, ...]

    def __post_init__(self):
        sensors = self.frames >= 1 and self.count >= 1
        no_sensors = self.frames == 0 and self.count == 0 and self.totals >= 1
        if not (sensors or no_sensors) or self.totals < 0:
            raise ValueError(
                f"Layout: expected frames >= 1, count >= 1, totals >= 0 (or frames = count = 0, "
                f"totals >= 1), got {self.frames}, {self.count}, {self.totals}"
            )
        if len(self.indices) != self.count:
            raise ValueError(f"indices: expected {self.count} sensor cells, got {len(self.indices)}")

    @property
    def size(self) -> int:
        return self.frames * self.count + self.totals

    @property
    def raster_channels(self) -> int:
        return self.frames + self.totals + 1

    def _check(self, y):
        if jnp.shape(y) != (self.size,):
            raise ValueError(
                f"y: expected one observation vector of shape ({self.size},), got {jnp.shape(y)}"
            )

    def history(self, y: jax.Array) -> jax.Array:
        """`(max(frames, 1), count + totals)`: per-frame sensor vectors, the totals appended to each
        (no sensor frame: one step of the totals)."""
        self._check(y)
        steps = max(self.frames, 1)
        frames = y[: self.frames * self.count].reshape(steps, self.count)
        totals = jnp.broadcast_to(y[self.frames * self.count :], (steps, self.totals))
        return jnp.concatenate([frames, totals], axis=1)

    @property
    def channels(self) -> int:
        """Observation channels: the sensor frames, then the totals."""
        return self.frames + self.totals

    def tokens(self, y: jax.Array) -> jax.Array:
        """`(channels, count + 1 + channels)`: one token per observation channel, [sensor values
        of the frame (zeros for a total), the total's value (0 for a frame), one-hot channel index]."""
        self._check(y)
        frames = y[: self.frames * self.count].reshape(self.frames, self.count)
        values = jnp.concatenate(
            [
                jnp.concatenate([frames, jnp.zeros((self.frames, 1), y.dtype)], axis=1),
                jnp.concatenate(
                    [jnp.zeros((self.totals, self.count), y.dtype), y[self.frames * self.count :, None]],
                    axis=1,
                ),
            ]
        )
        return jnp.concatenate([values, jnp.eye(self.channels, dtype=y.dtype)], axis=1)

    def raster(self, y: jax.Array) -> jax.Array:
        """`(frames + totals + 1, H, W)`: scattered sensor frames, constant totals, the sensor mask."""
        self._check(y)
        h, w = self.shape
        idx = np.asarray(self.indices, dtype=np.int64)
        frames = y[: self.frames * self.count].reshape(self.frames, self.count)
        grid = jnp.zeros((self.frames, h * w), y.dtype).at[:, idx].set(frames).reshape(self.frames, h, w)
        totals = jnp.broadcast_to(y[self.frames * self.count :, None, None], (self.totals, h, w))
        mask = jnp.zeros(h * w, y.dtype).at[idx].set(1.0).reshape(1, h, w)
        return jnp.concatenate([grid, totals, mask])


def layout(task) -> Layout:
    """`Layout` of a task whose observation has `sensors`, `sensor_channels` and `total_channels`
    (the interface tasks); checked against `task.num_observations`."""
    obs = task.observation
    # no sensor frame (auxiliary channels alone): no sensor cell either
    mask = np.asarray(obs.mask) & bool(obs.sensor_channels)
    out = Layout(
        frames=len(obs.sensor_channels),
        count=int(mask.sum()),
        totals=len(obs.total_channels),
        shape=tuple(int(s) for s in mask.shape),
        indices=tuple(int(i) for i in np.flatnonzero(mask)),
    )
    if out.size != task.num_observations:
        raise ValueError(f"task: layout size {out.size} != num_observations {task.num_observations}")
    return out


# ----------------------------------------------------------------------------
# Estimator families: (p,) standardized observation -> (m,) standardized coefficients


class MLPEstimator(eqx.Module):
    mlp: eqx.nn.MLP

    def __init__(self, layout: Layout, num_outputs: int, *, width: int = 128, depth: int = 3, key):
        self.mlp = eqx.nn.MLP(layout.size, num_outputs, width, depth, activation=jax.nn.gelu, key=key)

    def __call__(self, y: jax.Array) -> jax.Array:
        return self.mlp(y)


class GRUEstimator(eqx.Module):
    cell: eqx.nn.GRUCell
    head: eqx.nn.Linear
    layout: Layout = eqx.field(static=True)

    def __init__(self, layout: Layout, num_outputs: int, *, hidden: int = 64, key):
        k1, k2 = jr.split(key)
        self.cell = eqx.nn.GRUCell(layout.count + layout.totals, hidden, key=k1)
        self.head = eqx.nn.Linear(hidden, num_outputs, key=k2)
        self.layout = layout

    def __call__(self, y: jax.Array) -> jax.Array:
        def step(h, x):
            return self.cell(x, h), None

        h0 = jnp.zeros(self.cell.hidden_size, y.dtype)
        h, _ = jax.lax.scan(step, h0, self.layout.history(y))
        return self.head(h)


class RasterEstimator(eqx.Module):
    """A field network `(C, H, W) -> (m, H, W)` on rasterized sensors, mean-pooled to `(m,)`."""

    net: eqx.Module
    layout: Layout = eqx.field(static=True)

    def __call__(self, y: jax.Array) -> jax.Array:
        return jnp.mean(self.net(self.layout.raster(y)), axis=(-2, -1))


class UniPDEEstimator(eqx.Module):
    """Our reading of the paper's UniPDE / UniPDE-noalign families (a labelled inference).

    The paper's text says of them only: "Neural models comprise UniPDE, UniPDE-noalign, a GRU,
    a static MLP, FNO (Li et al., 2021), and DeepONet (Lu et al., 2021)" (Sec. 5.1), and that
    the geometry "must match the estimator's actual inputs, including observation histories
    and auxiliary channels". It defines neither the architecture nor the alignment term;
    what follows is ours, built on the name (one model over all observation channels) and
    the "-noalign" ablation:

        h_j = phi(t_j)                 one shared MLP phi over the channel tokens t_j
                                       (`Layout.tokens`: a frame's sensor values or a
                                       total's value, plus the one-hot channel index)
        z   = mean_j h_j               pooled latent `(latent,)`
        c   = psi(z)                   MLP head to the m coefficients
        A(y) = mean_j |h_j - z|^2 / latent     cross-channel alignment: every channel's
                                       embedding pulled to the pooled latent

    Training loss: MSE + `align_weight` A (mean over the batch); ``"unipde_noalign"`` is the
    same model with `align_weight = 0`, whose `alignment` is exactly 0 (not computed). The
    field is rendered from the coefficients as for the other families.

    `__call__(y (p,)) -> (m,)`; `embeddings(y) -> (channels, latent)`; `alignment(y) -> ()`.
    """

    encoder: eqx.nn.MLP
    head: eqx.nn.MLP
    layout: Layout = eqx.field(static=True)
    align_weight: float = eqx.field(static=True)

    def __init__(
        self,
        layout: Layout,
        num_outputs: int,
        *,
        width: int = 128,
        depth: int = 2,
        latent: int = 64,
        align_weight: float = 0.1,
        key,
    ):
        if not (np.isfinite(align_weight) and align_weight >= 0):
            raise ValueError(f"align_weight: expected a finite weight >= 0, got {align_weight!r}")
        k1, k2 = jr.split(key)
        token = layout.count + 1 + layout.channels
        self.encoder = eqx.nn.MLP(token, latent, width, depth, activation=jax.nn.gelu, key=k1)
        self.head = eqx.nn.MLP(latent, num_outputs, width, depth, activation=jax.nn.gelu, key=k2)
        self.layout = layout
        self.align_weight = float(align_weight)

    def embeddings(self, y: jax.Array) -> jax.Array:
        return jax.vmap(self.encoder)(self.layout.tokens(y))

    def __call__(self, y: jax.Array) -> jax.Array:
        return self.head(jnp.mean(self.embeddings(y), axis=0))

    def alignment(self, y: jax.Array) -> jax.Array:
        """The weighted alignment term `align_weight A(y)` (exactly 0 without alignment)."""
        if self.align_weight == 0.0:
            return jnp.zeros((), y.dtype)
        h = self.embeddings(y)
        return self.align_weight * jnp.mean((h - jnp.mean(h, axis=0)) ** 2)


def _unipde(layout, num_outputs, *, key, **options):
    return UniPDEEstimator(layout, num_outputs, key=key, **options)


def _unipde_noalign(layout, num_outputs, *, key, **options):
    if options.pop("align_weight", 0.0) != 0.0:
        raise ValueError("align_weight: unipde_noalign has no alignment term; leave it out")
    return UniPDEEstimator(layout, num_outputs, key=key, align_weight=0.0, **options)


def _fno(layout, num_outputs, *, key, **options):
    return RasterEstimator(nn.FNO(layout.raster_channels, num_outputs, key=key, **options), layout)


def _deeponet(layout, num_outputs, *, key, **options):
    return RasterEstimator(nn.DeepONet(layout.raster_channels, num_outputs, key=key, **options), layout)


_BUILDERS = {
    "mlp": MLPEstimator,
    "gru": GRUEstimator,
    "fno": _fno,
    "deeponet": _deeponet,
    "unipde": _unipde,
    "unipde_noalign": _unipde_noalign,
}


def build(name: str, key, layout: Layout, num_outputs: int, **options) -> eqx.Module:
    """Estimator `name` (one of `ESTIMATORS`) with `options` for its constructor / network."""
    if name not in _BUILDERS:
        raise ValueError(f"name: unknown estimator {name!r}; available: {list(ESTIMATORS)}")
    try:
        return _BUILDERS[name](layout, num_outputs, key=key, **options)
    except TypeError as err:
        raise ValueError(f"options: invalid options {sorted(options)} for estimator {name!r}: {err}") from err


# ----------------------------------------------------------------------------
# Standardization and training


@dataclasses.dataclass(frozen=True)
class Standardizer:
    """Per-feature affine map fitted on training data: z = (x - mean) / std (std of a constant = 1)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, x) -> Standardizer:
        x = np.asarray(x, np.float64)
        if x.ndim != 2 or x.shape[0] < 2 or not np.all(np.isfinite(x)):
            raise ValueError(f"x: expected finite training data (N >= 2, d), got shape {x.shape}")
        std = x.std(axis=0)
        return cls(x.mean(axis=0), np.where(std > 0, std, 1.0))

    def forward(self, x) -> np.ndarray:
        x = np.asarray(x)
        return ((x - self.mean) / self.std).astype(x.dtype)

    def inverse(self, z) -> np.ndarray:
        z = np.asarray(z)
        return (z * self.std + self.mean).astype(z.dtype)


# Minibatch AdamW with cosine decay to 0, no warm-up, no clipping: `num_steps` steps of
# `batch_size` examples drawn with replacement.
TRAINING = training.TrainConfig(
    num_steps=2000,
    batch_size=64,
    learning_rate=1e-3,
    weight_decay=1e-4,
    warmup_steps=0,
    end_learning_rate_factor=0.0,
    clip_norm=0.0,
    progress=False,
)


def train_config(**settings) -> training.TrainConfig:
    """`TRAINING` with `settings` replaced (e.g. `num_steps`, `batch_size`, `learning_rate`)."""
    return dataclasses.replace(TRAINING, **settings)


def _mse(y, c, batch_size: int):
    """Loss of one step: mean squared error on `batch_size` examples drawn with the step's key,
    plus the batch mean of the model's `alignment` term where it has one (`UniPDEEstimator`)."""

    def loss(model, key):
        idx = jr.randint(key, (batch_size,), 0, y.shape[0])
        value = jnp.mean((jax.vmap(model)(y[idx]) - c[idx]) ** 2)
        if hasattr(model, "alignment"):
            value = value + jnp.mean(jax.vmap(model.alignment)(y[idx]))
        return value

    return loss


def fit_member(key, y, c, *, name: str, layout: Layout, options: dict | None = None, config=TRAINING):
    """Initialize and train one estimator on standardized `y (N, p)`, `c (N, m)`; returns (model, losses)."""
    k_init, k_train = jr.split(key)
    model = build(name, k_init, layout, c.shape[-1], **(options or {}))
    optimizer = training.make_optimizer(config)
    model, _, losses = training.scan(
        model, _mse(y, c, config.batch_size), optimizer, jr.split(k_train, config.num_steps)
    )
    return model, losses


@eqx.filter_jit
def _fit(keys, y, c, *, name, layout, options, config):
    k_init, k_train = jnp.moveaxis(jax.vmap(jr.split)(keys), 1, 0)
    models = eqx.filter_vmap(lambda k: build(name, k, layout, c.shape[-1], **dict(options)))(k_init)
    xs = jax.vmap(lambda k: jr.split(k, config.num_steps))(k_train)
    optimizer = training.make_optimizer(config)
    models, _, losses = training.scan_ensemble(models, _mse(y, c, config.batch_size), optimizer, xs)
    return models, losses


def fit(keys, y, c, *, name: str, layout: Layout, options: dict | None = None, config=TRAINING):
    """Train one member per key of `keys (K,)` in one vmapped program -> (stacked model, losses (K, steps)).

    `y (N, p)` and `c (N, m)` are standardized training data.
    """
    y, c = jnp.asarray(y), jnp.asarray(c)
    if y.ndim != 2 or y.shape[1] != layout.size:
        raise ValueError(f"y: expected shape (N, {layout.size}), got {y.shape}")
    if c.ndim != 2 or c.shape[0] != y.shape[0]:
        raise ValueError(f"c: expected shape ({y.shape[0]}, m), got {c.shape}")
    if name not in _BUILDERS:
        raise ValueError(f"name: unknown estimator {name!r}; available: {list(ESTIMATORS)}")
    return _fit(
        keys, y, c, name=name, layout=layout, options=tuple(sorted((options or {}).items())), config=config
    )


@eqx.filter_jit
def predict(models, y, *, batch_size: int = 128) -> jax.Array:
    """Predictions `(K, N, m)` of stacked members `models` on `y (N, p)` (standardized units).

    Cases run in chunks of `batch_size` (all members at once), which bounds the
    activations of field networks (K x batch_size fields, not K x N).
    """

    def chunk(yi):
        return eqx.filter_vmap(lambda mdl: mdl(yi))(models)

    out = jax.lax.map(chunk, jnp.asarray(y), batch_size=min(batch_size, y.shape[0]))  # (N, K, m)
    return jnp.swapaxes(out, 0, 1)


# ----------------------------------------------------------------------------
# Data


def simulate(key, task, num: int, *, batch_size: int = 64) -> tuple[jax.Array, jax.Array]:
    """`num` prior draws and noisy observations of `task`: `(c (num, m), y (num, p))`.

    Sample i uses `fold_in(key, i)` (so the split into chunks never changes it).
    """
    checks.positive_int("num", num)

    def one(i):
        k_prior, k_noise = jr.split(jr.fold_in(key, i))
        x = task.prior.sample(k_prior)
        return x.reshape(-1), task.simulate(k_noise, x)

    return jax.lax.map(one, jnp.arange(num), batch_size=min(batch_size, num))


def field_nrmse(field, pred, truth, *, batch_size: int = 128) -> float:
    """Field NRMSE of coefficient predictions: RMS over cases and cells of field(pred) - field(truth),
    divided by the std of the true fields (over cases and cells); `field: (m,) -> (H, W)`,
    `pred`, `truth` `(N, m)`."""
    pred, truth = np.asarray(pred, np.float64), np.asarray(truth, np.float64)
    if pred.shape != truth.shape or pred.ndim != 2:
        raise ValueError(f"pred, truth: expected equal (N, m) shapes, got {pred.shape} and {truth.shape}")
    render = jax.jit(jax.vmap(field))
    starts = range(0, len(pred), batch_size)
    fp = np.concatenate([np.asarray(render(pred[i : i + batch_size])) for i in starts])
    ft = np.concatenate([np.asarray(render(truth[i : i + batch_size])) for i in starts])
    return float(np.sqrt(np.mean((fp - ft) ** 2)) / np.std(ft))


def ridge_baseline(y_train, c_train, *, alpha: float = 1e-2):
    """Linear ridge regression `y -> c` with intercept on standardized observations (closed form).

    Minimizes ||Z W + 1 b - C||^2 + alpha N ||W||^2 over the training split (Z the
    standardized `y_train (N, p)`); returns the predictor `y (n, p) -> c (n, m)`.
    """
    y_std = Standardizer.fit(y_train)
    z = y_std.forward(np.asarray(y_train, np.float64))
    c = np.asarray(c_train, np.float64)
    cm = c.mean(axis=0)
    w = np.linalg.solve(z.T @ z + alpha * len(z) * np.eye(z.shape[1]), z.T @ (c - cm))
    return lambda y: y_std.forward(np.asarray(y, np.float64)) @ w + cm


# ----------------------------------------------------------------------------
# Direction-wise confidences and scores


def _projected(geometry, pred, truth):
    d_pred = geo.project(geometry, np.asarray(pred, np.float64))
    d_true = geo.project(geometry, np.asarray(truth, np.float64))
    if d_pred.ndim != 3 or d_pred.shape[1:] != d_true.shape:
        raise ValueError(f"pred: expected (K, N, m) for truth {d_true.shape}, got {np.shape(pred)}")
    return d_pred, d_true


def conformal_halfwidths(residuals, level: float) -> np.ndarray:
    """Split-conformal half-widths `(m,)` from calibration residuals `(n, m)`, one threshold per column.

    The interval ``pred_i +- q_i`` covers a new exchangeable residual with
    probability in [level, level + 1/(n + 1)) (no ties).
    """
    r = jnp.abs(jnp.asarray(residuals))
    if r.ndim != 2:
        raise ValueError(f"residuals: expected (n, m), got shape {r.shape}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: expected a coverage level in (0, 1), got {level!r}")
    return np.asarray(jax.vmap(lambda col: calibration.conformal_quantile(col, level), in_axes=1)(r))


def confidences(geometry: geo.Geometry, cal_pred, cal_truth, *, level: float = 0.9) -> dict[str, np.ndarray]:
    """Confidence `(m,)` per rule from calibration data only (larger = claimed first).

    Args:
      geometry: the observation geometry (directions V, retained partition).
      cal_pred: ensemble predictions `(K, N, m)` of the coefficients on the calibration split.
      cal_truth: calibration coefficients `(N, m)`.
      level: conformal coverage level.

    Rules (s_i = calibration std of direction i's coordinate): ``validation`` =
    -NRMSE_i of the ensemble mean; ``spread`` = -(mean over cases of the member
    std) / s_i; ``conformal`` = -(conformal interval width) / s_i; ``oracle`` =
    1 on retained directions, 0 below threshold.

    Raw readings (the same signals not divided by s_i, in the units of the coordinate
    d_i = v_i^T G^(1/2) c, i.e. of the state metric G): ``validation_raw`` = -RMSE_i,
    ``spread_raw`` = -(mean member std), ``conformal_raw`` = -(conformal interval width);
    ``validation_global`` = -RMSE_i / sqrt(mean_j s_j^2), the raw calibration error on one
    scale common to all directions (so that a tolerance delta applies to it; it ranks as
    ``validation_raw``).
    The paper ranks by "calibration error", "conformal interval width" and "ensemble
    spread" (Sec. 5.5) and does not say (its formulas are lost) whether they are
    normalized per direction. The two readings rank differently whenever the
    directions' calibration spreads differ: a raw width is narrow on a direction
    the prior already pins down, whether or not the observations see it.
    """
    d_pred, d_true = _projected(geometry, cal_pred, cal_truth)
    if d_pred.shape[0] < 2:
        raise ValueError(f"cal_pred: ensemble spread needs K >= 2 members, got K = {d_pred.shape[0]}")
    mean = d_pred.mean(axis=0)
    scale = np.std(d_true, axis=0)
    if np.any(scale <= 0):
        raise ValueError("cal_truth: a direction has zero calibration spread; its confidences are undefined")
    spread = d_pred.std(axis=0).mean(axis=0)
    width = 2.0 * conformal_halfwidths(mean - d_true, level)
    nrmse = geo.directional_nrmse(mean, d_true)
    return {
        "validation": -nrmse,
        "spread": -spread / scale,
        "conformal": -width / scale,
        "oracle": geometry.retained.astype(np.float64),
        "validation_raw": -nrmse * scale,
        "spread_raw": -spread,
        "conformal_raw": -width,
        "validation_global": -nrmse * scale / np.sqrt(np.mean(scale**2)),
    }


def evaluate(
    geometry: geo.Geometry, test_pred, test_truth, confidence: dict, *, delta: float = geo.DEFAULT_DELTA
) -> dict:
    """Scores of ensemble predictions `(K, N, m)` on the test split against `test_truth (N, m)`.

    Returns coefficient NRMSE (ensemble mean; RMS error over the test set divided
    by the test std, averaged over coefficients), directional NRMSE `(m,)`, hits,
    sCRS under no abstention / validation gating (claim directions whose
    calibration NRMSE <= delta) / oracle gating, and one
    `metrics.geometry.Selection` per confidence rule in `confidence`.
    """
    d_pred, d_true = _projected(geometry, test_pred, test_truth)
    e = geo.directional_nrmse(d_pred.mean(axis=0), d_true)
    hit = geo.hits(geometry, e, delta)
    m = e.size
    val = np.asarray(confidence["validation"], np.float64)
    if val.shape != (m,) or not np.all(np.isfinite(val)):
        raise ValueError(f"confidence['validation']: expected finite values of shape ({m},), got {val}")
    c_mean = np.asarray(test_pred, np.float64).mean(axis=0)
    c_true = np.asarray(test_truth, np.float64)
    return {
        "nrmse": float(np.mean(geo.directional_nrmse(c_mean, c_true))),
        "directional_nrmse": e,
        "hits": int(hit.sum()),
        "scrs_none": geo.scrs(np.ones(m, bool), geometry.retained, hit),
        "scrs_validation": geo.scrs(-val <= delta, geometry.retained, hit),
        "scrs_oracle": geo.scrs(geometry.retained, geometry.retained, hit),
        "selection": {rule: geo.selection(u, geometry.retained, hit) for rule, u in confidence.items()},
    }


def run_problem(member_problems, pred, true) -> str | None:
    """Why one seed's ensemble is invalid, or None (`posteriorjax.training.health`).

    A member whose training diverged or stayed at its initial loss invalidates the seed;
    otherwise the ensemble-mean test predictions `pred (N, m)` are near-constant when their
    total spread sqrt(sum_j var pred_j) / sqrt(sum_j var true_j) over the N test samples is
    below `health.COLLAPSE_RATIO` (one number: directions the observations do not identify
    may legitimately be predicted constant).
    """
    for k, problem in enumerate(member_problems):
        if problem:
            return f"member {k}: {problem}"
    pred, true = np.asarray(pred, np.float64), np.asarray(true, np.float64)
    ratio = np.sqrt(np.sum(np.var(pred, axis=0))) / max(np.sqrt(np.sum(np.var(true, axis=0))), 1e-300)
    return health.spread_problem([ratio], "prediction spread ratio")


def run_configuration(
    key,
    task,
    geometry: geo.Geometry,
    *,
    estimators=ESTIMATORS,
    sizes: tuple[int, int, int],
    num_seeds: int,
    num_members: int,
    options: dict | None = None,
    config: training.TrainConfig = TRAINING,
    level: float = 0.9,
    delta: float = geo.DEFAULT_DELTA,
    ood_task=None,
    baseline: bool = False,
    field=None,
) -> dict:
    """Simulate, train and score every estimator family on one task configuration.

    Data: `sizes = (train, calibration, test)` prior draws with noisy observations
    (`simulate`, key `stream(key, "data")`), standardized on the training split. Each
    family trains `num_seeds x num_members` members in one `fit` (member k of seed
    s from `fold_in(fold_in(stream(key, "family/" + name), s), k)`, keyed by the
    family's name, so a subset of `estimators` gives the same numbers); per seed, the
    ensemble's `confidences` on the calibration split and `evaluate` on the test
    split. `ood_task` (the same observation model, a shifted coefficient prior):
    an out-of-distribution test split of the same size (key `stream(key, "ood")`),
    scored with the in-distribution confidences under ``"ood"`` of each run.
    Each run holds ``"problem"``: why that seed is invalid (`run_problem`), or None.
    Returns ``{family: {"runs": [per-seed evaluate dict + "confidence" + "problem" (+ "ood")],
    "final_loss": (num_seeds, num_members)}}``; with `baseline`, also
    ``"baseline": {"ridge": {"id": NRMSE, "ood": NRMSE}}`` (`ridge_baseline` on the
    same splits; coefficient NRMSE as in `evaluate`). `field: (m,) -> (H, W)`: each
    run (and its ``"ood"``) also gets ``"field_nrmse"`` of the ensemble-mean
    coefficients (`field_nrmse`), and the ridge baseline ``"field_id"``/``"field_ood"``.
    """
    options = options or {}
    c, y = simulate(registry.stream(key, "data"), task, sum(sizes))
    c, y = np.asarray(c, np.float64), np.asarray(y, np.float32)
    c_tr, c_ca, c_te = np.split(c, np.cumsum(sizes)[:-1])
    y_tr, y_ca, y_te = np.split(y, np.cumsum(sizes)[:-1])
    if ood_task is not None:
        if ood_task.num_observations != task.num_observations:
            raise ValueError(
                f"ood_task: expected {task.num_observations} observations, got {ood_task.num_observations}"
            )
        c_ood, y_ood = simulate(registry.stream(key, "ood"), ood_task, sizes[2])
        c_ood, y_ood = np.asarray(c_ood, np.float64), np.asarray(y_ood, np.float32)
    y_std, c_std = Standardizer.fit(y_tr), Standardizer.fit(c_tr)
    lay = layout(task)
    out = {}
    if baseline:
        ridge = ridge_baseline(y_tr, c_tr)
        splits = {"id": (y_te, c_te)} | ({"ood": (y_ood, c_ood)} if ood_task is not None else {})
        nrmse = {k: float(np.mean(geo.directional_nrmse(ridge(yy), cc))) for k, (yy, cc) in splits.items()}
        if field is not None:
            nrmse |= {f"field_{k}": field_nrmse(field, ridge(yy), cc) for k, (yy, cc) in splits.items()}
        out["baseline"] = {"ridge": nrmse}
    for name in estimators:
        k_family = registry.stream(key, f"family/{name}")
        keys = jnp.stack(
            [jr.fold_in(jr.fold_in(k_family, s), k) for s in range(num_seeds) for k in range(num_members)]
        )
        c_train = c_std.forward(c_tr).astype(np.float32)
        models, losses = fit(
            keys,
            y_std.forward(y_tr),
            c_train,
            name=name,
            layout=lay,
            options=options.get(name),
            config=config,
        )

        def ensemble(y_split, models=models):
            pred = c_std.inverse(np.asarray(predict(models, y_std.forward(y_split)), np.float64))
            return pred.reshape(num_seeds, num_members, *pred.shape[1:])

        pred_ca, pred_te = ensemble(y_ca), ensemble(y_te)
        pred_ood = ensemble(y_ood) if ood_task is not None else None
        member_problems = np.asarray(
            [health.training_problem(curve) for curve in np.asarray(losses)], object
        ).reshape(num_seeds, num_members)
        runs = []
        for s in range(num_seeds):
            conf = confidences(geometry, pred_ca[s], c_ca, level=level)
            run = evaluate(geometry, pred_te[s], c_te, conf, delta=delta) | {"confidence": conf}
            run["problem"] = run_problem(member_problems[s], pred_te[s].mean(axis=0), c_te)
            if field is not None:
                run["field_nrmse"] = field_nrmse(field, pred_te[s].mean(axis=0), c_te)
            if ood_task is not None:
                run["ood"] = evaluate(geometry, pred_ood[s], c_ood, conf, delta=delta)
                if field is not None:
                    run["ood"]["field_nrmse"] = field_nrmse(field, pred_ood[s].mean(axis=0), c_ood)
            runs.append(run)
        out[name] = {
            "runs": runs,
            "final_loss": np.asarray(losses)[:, -1].reshape(num_seeds, num_members),
        }
    return out


__all__ = [
    "CONFIDENCES",
    "ESTIMATORS",
    "GRUEstimator",
    "Layout",
    "MLPEstimator",
    "RasterEstimator",
    "Standardizer",
    "TRAINING",
    "UniPDEEstimator",
    "build",
    "confidences",
    "conformal_halfwidths",
    "evaluate",
    "field_nrmse",
    "fit",
    "fit_member",
    "layout",
    "predict",
    "ridge_baseline",
    "run_configuration",
    "simulate",
    "train_config",
]
