"""Calibration diagnostics against plain numpy oracles."""

from __future__ import annotations

import numpy as np
import pytest

from rcp.diagnostics import criterion_correlation


def _mean_abs_corr(x: np.ndarray) -> float:
    c = np.corrcoef(x, rowvar=False)
    iu = np.triu_indices(c.shape[0], k=1)
    return float(np.abs(c[iu]).mean())


def test_criterion_correlation_in_chunks_equals_numpy():
    """Moments accumulated in chunks give np.corrcoef's mean |r|, for raw answers
    and residuals, with per-placement or per-unit predictions; a constant criterion
    is left out."""
    rng = np.random.default_rng(0)
    y = (rng.random((5000, 5)) < [0.2, 0.4, 0.5, 0.6, 0.7]).astype(np.int8)
    p = rng.random((5000, 5))
    got = criterion_correlation(y, p, chunk=777)
    assert got["raw"] == pytest.approx(_mean_abs_corr(y.astype(float)), abs=1e-12)
    assert got["conditional"] == pytest.approx(_mean_abs_corr(y - p), abs=1e-12)
    unit = rng.integers(0, 100, 5000)
    per_unit = rng.random((100, 5))
    got = criterion_correlation(y, per_unit, unit=unit, chunk=1000)
    assert got["conditional"] == pytest.approx(
        _mean_abs_corr(y - per_unit[unit]), abs=1e-12
    )
    y[:, 2] = 1
    got = criterion_correlation(y, p)
    keep = [0, 1, 3, 4]
    assert got["raw"] == pytest.approx(
        _mean_abs_corr(y[:, keep].astype(float)), abs=1e-12
    )
