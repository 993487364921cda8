"""Pure numerics of RCP (no Django): BT, 2PL calibration, gains, nDCG and statistics.

Services convert database rows to arrays, call these functions and store the results.
See README.md in this directory for the algorithms and the reference conventions.
"""

from __future__ import annotations

from rcp.bt import BTResult, aggregate_pairs, fit_bt, window_pairs
from rcp.gain import count_gain, pass_probabilities, rcp_gain
from rcp.irt import (
    Priors,
    RubricOnlyFit,
    TournamentFit,
    aggregate_rubric,
    fit_calibration,
    fit_rubric_only,
    fit_tournament,
)
from rcp.ndcg import (
    PROTOCOLS,
    Protocol,
    count_ndcg,
    gain_ndcg,
    ndcg_dense,
    qrel_ndcg,
    rcp_ndcg,
)
from rcp.stats import (
    bootstrap_ci,
    failure_modes,
    kendall_tau,
    leaderboard_sign_flips,
    pair_tests,
    paired_t,
    query_sign_flips,
    sensitivity,
)

__all__ = [
    "PROTOCOLS",
    "BTResult",
    "Priors",
    "Protocol",
    "RubricOnlyFit",
    "TournamentFit",
    "aggregate_pairs",
    "aggregate_rubric",
    "bootstrap_ci",
    "count_gain",
    "count_ndcg",
    "failure_modes",
    "fit_bt",
    "fit_calibration",
    "fit_rubric_only",
    "fit_tournament",
    "gain_ndcg",
    "kendall_tau",
    "leaderboard_sign_flips",
    "ndcg_dense",
    "pair_tests",
    "paired_t",
    "pass_probabilities",
    "qrel_ndcg",
    "query_sign_flips",
    "rcp_gain",
    "rcp_ndcg",
    "sensitivity",
    "window_pairs",
]
