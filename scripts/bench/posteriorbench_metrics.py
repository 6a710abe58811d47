"""PosteriorBench's metric code, transcribed in NumPy (float64) from its
`posteriorbench/evaluation/metrics.py`: `normalize_weights`, the weighted moments, `weighted_mmd`,
`sliced_wasserstein` (128 GRF directions, seed 0), `radially_averaged_power_spectrum` and
`spectral_relative_geomean`, gathered by `evaluate` as its `evaluate_distribution` gathers them.

The peer benchmark's per-configuration baseline (`peer.bench_peer_sweep`) and the parity tests of
our metric suite (`tests/test_heldout.py`) use it.
"""

from __future__ import annotations

import numpy as np
from scipy.fft import idctn

SWD_DIRECTIONS = 128


def normalize_weights(w, n: int) -> np.ndarray:
    """`w (n,)` as probabilities; ValueError for a wrong shape, a non-finite, negative or zero-sum `w`."""
    w = np.asarray(w, np.float64)
    if w.ndim != 1 or w.shape != (n,):
        raise ValueError("shape")
    if not np.all(np.isfinite(w)):
        raise ValueError("finite")
    if np.any(w < 0):
        raise ValueError("nonnegative")
    if float(w.sum()) <= 0:
        raise ValueError("positive sum")
    return w / w.sum()


def _sq_dist(x, y):
    return np.maximum(np.sum(x * x, 1)[:, None] + np.sum(y * y, 1)[None, :] - 2 * (x @ y.T), 0.0)


def mmd(x, y, wx, wy) -> float:
    """Weighted MMD of two ensembles `(N, ...)`, `(M, ...)`: five RBF kernels at multiples
    (0.2, 0.5, 1, 2, 5) of the median cross distance, averaged."""
    x, y = x.reshape(len(x), -1).astype(np.float64), y.reshape(len(y), -1).astype(np.float64)
    dxx, dyy, dxy = _sq_dist(x, x), _sq_dist(y, y), _sq_dist(x, y)
    bw = float(np.median(dxy))
    bw = 1.0 if bw <= 0 else bw

    def k(d):
        return sum(np.exp(-d / (s * bw)) for s in (0.2, 0.5, 1.0, 2.0, 5.0)) / 5

    v = (
        np.sum(np.outer(wx, wx) * k(dxx))
        + np.sum(np.outer(wy, wy) * k(dyy))
        - 2 * np.sum(np.outer(wx, wy) * k(dxy))
    )
    return float(np.sqrt(max(v, 0.0)))


def w1(x, y, wx, wy) -> float:
    """Weighted 1-D Wasserstein-1 distance of two sets of values."""
    ox, oy = np.argsort(x), np.argsort(y)
    x, wx, y, wy = x[ox], wx[ox], y[oy], wy[oy]
    values = np.unique(np.concatenate([x, y]))
    if len(values) < 2:
        return 0.0
    cx, cy = np.searchsorted(x, values[:-1], "right"), np.searchsorted(y, values[:-1], "right")
    fx, fy = np.concatenate([[0.0], np.cumsum(wx)]), np.concatenate([[0.0], np.cumsum(wy)])
    return float(np.sum(np.abs(fx[cx] - fy[cy]) * np.diff(values)))


def swd(x, y, wx, wy, mean, std) -> float:
    """Sliced Wasserstein distance of `(N, H, W)` fields z-scored by `(mean, std)`, over
    `SWD_DIRECTIONS` smooth GRF directions (inverse DCT of a (pi^2 |k|^2 + 9)^-1 spectrum)."""
    h, w = shape = x.shape[1:]
    x = (x.reshape(len(x), -1).astype(np.float64) - mean) / std
    y = (y.reshape(len(y), -1).astype(np.float64) - mean) / std
    rng, out = np.random.default_rng(0), []
    for _ in range(SWD_DIRECTIONS):
        xi = rng.normal(size=shape)
        gx, gy = np.meshgrid(np.arange(w, dtype=float), np.arange(h, dtype=float), indexing="xy")
        c = np.sqrt(h * w) * 3.0 * (np.pi**2 * (gx**2 + gy**2) + 9.0) ** -1.0 * xi
        c[0, 0] = 0.0
        d = idctn(c, type=2, norm="ortho")
        d = (d / (np.linalg.norm(d.ravel()) + 1e-12)).reshape(-1)
        out.append(w1(x @ d, y @ d, wx, wy))
    return float(np.mean(out))


def spectrum(samples, w) -> np.ndarray:
    """Weighted mean radially averaged power spectrum of `(N, H, W)` fields."""
    _, h, wd = samples.shape
    gx, gy = np.meshgrid(np.fft.fftshift(np.fft.fftfreq(wd)), np.fft.fftshift(np.fft.fftfreq(h)))
    step = 1 / min(h, wd)
    bins = np.arange(0, 0.5 + step, step)
    idx, nb = np.digitize(np.sqrt(gx**2 + gy**2).ravel(), bins) - 1, len(bins) - 1
    spectra = []
    for s in samples:
        # fft2 in float64: the published code's precision (NumPy < 2 always computed float64;
        # NumPy >= 2 keeps float32 inputs in float32, where bin 0 of a zero-mean field is round-off)
        p = np.abs(np.fft.fftshift(np.fft.fft2(s.astype(np.float64)))) ** 2
        ok = (idx >= 0) & (idx < nb)
        sums = np.bincount(idx[ok], weights=p.ravel()[ok], minlength=nb)
        spectra.append(sums / np.maximum(np.bincount(idx[ok], minlength=nb), 1))
    return np.average(np.asarray(spectra), axis=0, weights=w)


def spectral(x, y, wx, wy) -> float:
    """Geometric mean over the radial bins of the relative spectrum error."""
    p, r = spectrum(x, wx), spectrum(y, wy)
    e = np.abs(p - r) / (np.abs(r) + 1e-10)
    ok = np.isfinite(e) & np.isfinite(r) & (r > 1e-10)
    return float(np.exp(np.mean(np.log(e[ok] + 1e-10))))


def evaluate(x, y, wx, wy, mean, std) -> dict[str, float]:
    """PosteriorBench's `evaluate_distribution` on `(N, H, W)` samples `x` against the reference
    `y (M, H, W)` (SWD z-scored by `(mean, std)`)."""
    wx, wy = normalize_weights(wx, len(x)), normalize_weights(wy, len(y))
    mx, my = np.average(x, axis=0, weights=wx), np.average(y, axis=0, weights=wy)
    sx = np.sqrt(np.average((x - mx) ** 2, axis=0, weights=wx))
    sy = np.sqrt(np.average((y - my) ** 2, axis=0, weights=wy))
    return {
        "mean_error": float(np.linalg.norm(mx - my) / (np.linalg.norm(my) + 1e-12)),
        "std_error": float(np.linalg.norm(sx - sy) / (np.linalg.norm(sy) + 1e-12)),
        "mmd": mmd(x, y, wx, wy),
        "swd": swd(x, y, wx, wy, mean, std),
        "spectral_error_published": spectral(x, y, wx, wy),
    }
