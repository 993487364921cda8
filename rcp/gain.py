"""Gains from calibrated abilities (RCP) and rubric pass counts (Count) (facts 5.1)."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = ["count_gain", "pass_probabilities", "rcp_gain"]


def pass_probabilities(
    theta: np.ndarray | float, gamma: np.ndarray, beta: np.ndarray
) -> np.ndarray:
    """P_c(theta) = sigmoid(gamma_c (theta - beta_c)); shape theta.shape + (C,)."""
    theta = np.asarray(theta, dtype=np.float64)
    gamma = np.asarray(gamma, dtype=np.float64)
    beta = np.asarray(beta, dtype=np.float64)
    return expit(gamma * (theta[..., None] - beta))


def rcp_gain(
    theta: np.ndarray | float, gamma: np.ndarray, beta: np.ndarray
) -> np.ndarray:
    """g(theta) = sum_c gamma_c P_c(theta) / sum_c gamma_c, in (0, 1) and increasing.

    Invariant to the (sum gamma, mean beta) convention. NaN theta (no calibrated
    ability) gets gain 0.
    """
    gamma = np.asarray(gamma, dtype=np.float64)
    if gamma.ndim != 1 or np.any(gamma <= 0):
        raise ValueError("gamma must be a 1-D vector of positive discriminations")
    theta = np.asarray(theta, dtype=np.float64)
    missing = np.isnan(theta)
    probs = pass_probabilities(np.where(missing, 0.0, theta), gamma, beta)
    gain = probs @ gamma / gamma.sum()
    return np.where(missing, 0.0, gain)


def count_gain(passes: np.ndarray, placements: np.ndarray | int) -> np.ndarray:
    """Count gain = passed verdicts / (C * placements); ``passes`` has shape (..., C).

    Documents with zero placements get gain 0.
    """
    passes = np.asarray(passes, dtype=np.float64)
    placements = np.asarray(placements, dtype=np.float64)
    n_criteria = passes.shape[-1]
    if np.any(passes < 0) or np.any(passes > placements[..., None]):
        raise ValueError("passes must lie in [0, placements] for every criterion")
    denom = n_criteria * placements
    total = passes.sum(axis=-1)
    return np.divide(total, denom, out=np.zeros_like(total), where=denom > 0)
