"""Group-sequential boundaries by alpha spending (Lan-DeMets), for interim looks at a
study (issue 14). Pure numerics, no Django, deterministic.

At information fractions 0 < t_1 < ... < t_K <= 1 the standardised statistics Z_k of
the main measure behave like B(t_k)/sqrt(t_k) for a Brownian motion B under the null.
A spending function gives the cumulative two-sided alpha a(t); boundary c_k solves

    P(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1}, |Z_k| >= c_k) = a(t_k) - a(t_{k-1}).

The joint probabilities are computed by numerical integration of B's sub-density on a
grid over the continuation region (Armitage, McPherson and Rowe 1969), c_k by root
finding. Spending functions (two-sided alpha):

- ``obrien_fleming``: a(t) = 2 (2 - 2 Phi(z_{1-alpha/4} / sqrt(t))), i.e. the
  O'Brien-Fleming-type function spending alpha/2 on each side (as gsDesign's
  ``sfLDOF`` and ldbounds for a symmetric two-sided design: 5 equal looks at
  alpha 0.05 give 4.877, 3.357, 2.680, 2.290, 2.031);
- ``pocock``: a(t) = alpha ln(1 + (e - 1) t) (5 looks: 2.438, 2.427, 2.410, 2.397,
  2.386).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

__all__ = ["SPENDING", "boundaries", "spent", "wald_z"]

SPENDING = ("obrien_fleming", "pocock")
_GRID = 801  # points over the continuation region; Simpson weights


def spent(t: float, alpha: float, kind: str) -> float:
    """Cumulative two-sided alpha spent at information fraction t (0 at 0, alpha at 1)."""
    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    if kind == "obrien_fleming":
        return float(2 * (2 - 2 * norm.cdf(norm.ppf(1 - alpha / 4) / math.sqrt(t))))
    if kind == "pocock":
        return float(alpha * math.log(1 + (math.e - 1) * t))
    raise ValueError(f"unknown spending function {kind!r}; use one of {SPENDING}")


def _simpson(n: int) -> np.ndarray:
    w = np.ones(n)
    w[1:-1:2] = 4
    w[2:-1:2] = 2
    return w / 3


def boundaries(fractions: Sequence[float], *, alpha: float, kind: str) -> list[float]:
    """Two-sided z boundaries c_1..c_K at increasing information fractions.

    Raises ValueError unless 0 < t_1 < ... < t_K <= 1. A look that may spend nothing
    (a(t_k) = a(t_{k-1}) within 1e-15) gets an infinite boundary.
    """
    t = [float(x) for x in fractions]
    steps = zip(t[:-1], t[1:], strict=True)
    if not t or t[0] <= 0 or t[-1] > 1 + 1e-12 or any(b <= a for a, b in steps):
        raise ValueError("information fractions must increase within (0, 1]")
    cum = [spent(x, alpha, kind) for x in t]
    out: list[float] = []
    grid = weights = dens = None  # sub-density of B(t_{k-1}) on the continuation grid
    prev_t = 0.0
    for k, tk in enumerate(t):
        target = cum[k] - (cum[k - 1] if k else 0.0)
        sd = math.sqrt(tk - prev_t)
        if k == 0:

            def cross(c: float, tk: float = tk) -> float:
                return float(2 * norm.sf(c))

        else:

            def cross(
                c: float, tk: float = tk, sd: float = sd, grid=grid, w=weights, f=dens
            ) -> float:
                b = c * math.sqrt(tk)
                tail = norm.cdf((-b - grid) / sd) + norm.sf((b - grid) / sd)
                return float((w * f * tail).sum())

        if target <= 1e-15:
            c = math.inf
        else:
            hi = 40.0
            if cross(hi) > target:
                c = hi
            else:
                c = brentq(
                    lambda c, cross=cross, target=target: cross(c) - target,
                    0.0,
                    hi,
                    xtol=1e-10,
                )
        out.append(c)
        # Sub-density of B(t_k) on |B| < c sqrt(t_k) (no crossing so far).
        b = min(c, 12.0) * math.sqrt(tk)
        new_grid = np.linspace(-b, b, _GRID)
        new_w = _simpson(_GRID) * (new_grid[1] - new_grid[0])
        if k == 0:
            new_dens = norm.pdf(new_grid / math.sqrt(tk)) / math.sqrt(tk)
        else:
            kernel = norm.pdf((new_grid[:, None] - grid[None, :]) / sd) / sd
            new_dens = kernel @ (weights * dens)
        grid, weights, dens, prev_t = new_grid, new_w, new_dens, tk
    return out


def wald_z(
    hits: Sequence[bool], clusters: Sequence[str], chance: float | None
) -> float | None:
    """(rate - chance) / SE with the query-clustered SE of the headline interval,
    sqrt(G/(G-1) sum_g r_g^2) / n; None when undefined (no hits, G < 2, SE 0)."""
    h = np.asarray(hits, dtype=np.float64)
    n = len(h)
    if n == 0 or chance is None:
        return None
    p = float(h.mean())
    _, g = np.unique(
        np.asarray(clusters, dtype=object).astype(str), return_inverse=True
    )
    r = np.bincount(g, weights=h - p)
    if len(r) < 2:
        return None
    se = math.sqrt(len(r) / (len(r) - 1) * float(r @ r)) / n
    return None if se == 0 else (p - chance) / se
