"""One call from judgment windows to a whole calibration (rcp_facts 1.2, 4, 5.1).

``calibrate`` takes the valid windows of a suite as flat arrays and returns every
number the platform stores: per-query BT abilities (cold fits), the 2PL fit in the
requested mode, calibrated abilities, gains and Count gains, per-query flags,
diagnostics, and whether every optimiser converged. Callers (the calibration service,
benchmarks, tests) read rows into ``Judgments`` and write ``Calibration`` back.
No Django.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from threadpoolctl import threadpool_limits

from rcp import diagnostics
from rcp.bt import fit_bt, ragged_window_pairs
from rcp.gain import count_gain, pass_probabilities, rcp_gain
from rcp.irt import FLAG_TEXT, Priors, aggregate_rubric, fit_rubric_only, fit_tournament

__all__ = ["Calibration", "Judgments", "calibrate", "Mode"]

Mode = Literal["auto", "tournament", "rubric_only"]
Progress = Callable[[str, int, int], None]


def _quiet(stage: str, done: int, total: int) -> None:
    return None


INVALID_FLAG_SHARE = 0.05  # rcp_facts 4.4: > 5% invalid windows in a stage


@dataclass(frozen=True)
class Judgments:
    """Valid judgment windows of one suite. Documents are rows 0..R-1 and
    ``doc_query[r]`` is row r's query (0..n_queries-1).

    Tournament: window i lists ``t_size[i]`` rows, flat in ``t_doc`` with their
    scores ``t_score``. Rubric: one placement per entry of ``r_doc`` with its 0/1
    verdicts ``r_answers[p]``. Optional per-query window counts feed coverage:
    ``windows`` maps "tournament_valid", "tournament_invalid", "rubric_valid",
    "rubric_invalid", "adaptive_invalid" to (n_queries,) arrays.
    """

    n_queries: int
    doc_query: np.ndarray
    t_size: np.ndarray
    t_doc: np.ndarray
    t_score: np.ndarray
    r_doc: np.ndarray
    r_answers: np.ndarray
    windows: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Calibration:
    """A whole calibration. Per row: BT ability and SE (NaN for documents in no
    valid tournament window), calibrated ability and SE, gain (NaN when
    uncalibrated), Count gain (NaN without rubric placements), placements. Per query:
    tau, alpha (NaN in rubric-only mode), whether it has rubric answers, flags
    (FLAG_TEXT codes, plus "invalid_windows"). ``converged`` is True only if the 2PL
    and every BT fit converged; ``optimizer`` says what ran and how it ended.
    """

    mode: Literal["tournament", "rubric_only"]
    gamma: np.ndarray
    beta: np.ndarray
    tau: np.ndarray
    alpha: np.ndarray
    theta_bt: np.ndarray
    theta_bt_se: np.ndarray
    theta: np.ndarray
    theta_se: np.ndarray
    gain: np.ndarray
    count_gain: np.ndarray
    placements: np.ndarray
    query_has_tournament: np.ndarray
    query_has_rubric: np.ndarray
    query_flags: tuple[tuple[str, ...], ...]
    converged: bool
    optimizer: dict[str, Any]
    diagnostics: dict[str, Any]

    def flagged(self) -> list[int]:
        """Indices of queries with at least one flag."""
        return [j for j, f in enumerate(self.query_flags) if f]


class CalibrationInputError(ValueError):
    """The judgments cannot be calibrated in the requested mode (message says why)."""


def _bt_all(
    j: Judgments, n_rows: int, progress: Progress
) -> tuple[np.ndarray, np.ndarray, dict[str, Any], np.ndarray]:
    """Cold BT fit per query over its valid windows (rcp_facts 1.2: calibration
    refits from zero). Returns theta, se per row, a summary, and per-query flags of
    having a tournament."""
    theta = np.full(n_rows, np.nan)
    se = np.full(n_rows, np.nan)
    has = np.zeros(j.n_queries, dtype=bool)
    summary = {"fits": 0, "converged": 0, "max_iterations": 0, "unconverged": []}
    if j.t_size.size == 0:
        return theta, se, summary, has
    starts = np.concatenate([[0], np.cumsum(j.t_size)[:-1]]).astype(np.int64)
    w_query = j.doc_query[j.t_doc[starts]]
    # Windows grouped by query, in their given order. Placements are gathered one
    # query at a time through the window order: no suite-sized copy of the
    # placements (at ViDoRe scale a sorted copy of docs and scores, with the sort's
    # own index arrays, was ~1 GB of the fit's peak).
    grouped = w_query.size < 2 or bool(np.all(w_query[1:] >= w_query[:-1]))
    w_order = None if grouped else np.argsort(w_query, kind="stable")
    w_query_sorted = w_query if grouped else w_query[w_order]
    q_ids, w_first = np.unique(w_query_sorted, return_index=True)
    w_bounds = np.append(w_first, w_query.size)
    # Small dense solves are far cheaper on one BLAS thread than handed between them.
    with threadpool_limits(limits=1):
        for k, q in enumerate(q_ids):
            if grouped:
                sizes = j.t_size[w_bounds[k] : w_bounds[k + 1]]
                p_sl = slice(
                    starts[w_bounds[k]], starts[w_bounds[k + 1] - 1] + sizes[-1]
                )
                docs, scores = j.t_doc[p_sl], j.t_score[p_sl]
            else:
                windows = w_order[w_bounds[k] : w_bounds[k + 1]]
                sizes = j.t_size[windows]
                # Placement indices of these windows, window after window.
                offsets = np.repeat(starts[windows] - (np.cumsum(sizes) - sizes), sizes)
                idx = offsets + np.arange(offsets.size)
                docs, scores = j.t_doc[idx], j.t_score[idx]
            rows, local = np.unique(docs, return_inverse=True)
            res = fit_bt(
                *ragged_window_pairs(sizes, local.ravel(), scores),
                rows.size,
            )
            theta[rows], se[rows] = res.theta, res.se
            has[q] = True
            summary["fits"] += 1
            summary["converged"] += int(res.converged)
            summary["max_iterations"] = max(summary["max_iterations"], res.n_iter)
            if not res.converged:
                summary["unconverged"].append(int(q))
            progress("BT fits", k + 1, q_ids.size)
    return theta, se, summary, has
    return theta, se, summary, has


def calibrate(
    judgments: Judgments,
    *,
    mode: Mode = "auto",
    priors: Priors | None = None,
    maxiter: int = 100,
    progress: Progress | None = None,
) -> Calibration:
    """Calibrate a suite: BT per query, then the 2PL in ``mode``.

    ``auto``: tournament if every query with rubric answers has tournament windows,
    rubric-only if none has; mixed coverage raises CalibrationInputError naming
    the queries. ``maxiter`` bounds the 2PL's Newton iterations (a fit stopped by it
    reports ``converged=False``). ``progress(stage, done, total)`` is called as
    work advances. Raises CalibrationInputError without rubric data.
    """
    j = judgments
    priors = priors or Priors()
    n_rows = j.doc_query.size
    n_q = j.n_queries
    if j.r_answers.ndim != 2:
        raise CalibrationInputError("rubric answers must be (placements, criteria)")
    n_crit = j.r_answers.shape[1] if j.r_answers.size else 5

    progress = progress or _quiet
    theta_bt, se_bt, bt_summary, has_t = _bt_all(j, n_rows, progress)
    n = np.zeros(n_rows)
    passes = np.zeros((n_rows, n_crit))
    if j.r_doc.size:
        units, n_u, passes_u = aggregate_rubric(j.r_doc, j.r_answers)
        n[units], passes[units] = n_u, passes_u
    if not (n > 0).any():
        raise CalibrationInputError("no valid rubric (Stage B) windows to calibrate")
    has_r_rows = np.bincount(j.doc_query[n > 0], minlength=n_q) > 0

    if mode == "auto":
        considered = has_t | has_r_rows
        if (has_t | ~considered).all():
            mode = "tournament"
        elif not has_t[considered].any():
            mode = "rubric_only"
        else:
            missing = np.flatnonzero(considered & ~has_t)
            raise CalibrationInputError(
                f"mixed coverage: {int((has_t & considered).sum())} of "
                f"{int(considered.sum())} queries with rubric answers have tournament "
                f"windows (without: queries {missing[:5].tolist()}"
                f"{' ...' if missing.size > 5 else ''})",
            )
    if mode == "tournament":
        if not has_t.any():
            raise CalibrationInputError("tournament mode needs Stage A windows")
        fit = fit_tournament(
            j.doc_query,
            theta_bt,
            n,
            passes,
            n_queries=n_q,
            theta_bt_se=se_bt,
            priors=priors,
            maxiter=maxiter,
            progress=lambda it: progress("2PL Newton iterations", it, maxiter),
        )
        theta, theta_se = fit.theta, fit.theta_se
        tau, alpha = fit.tau, fit.alpha
        has_rubric = fit.query_has_rubric
        flags = [list(f) for f in fit.query_flags]
        optimizer: dict[str, Any] = {
            "method": fit.method,
            "converged": fit.converged,
            "iterations": fit.n_iter,
            "inner_iterations": fit.inner_iterations,
            "loss": fit.loss,
            "max_grad": fit.max_grad,
            "message": fit.message,
            "skipped_rows": fit.n_skipped,
        }
        irt_converged = fit.converged
    elif mode == "rubric_only":
        rows = np.flatnonzero(n > 0)
        try:
            fit_r = fit_rubric_only(n[rows], passes[rows], priors=priors)
        except ValueError as exc:
            raise CalibrationInputError(str(exc)) from exc
        theta = np.full(n_rows, np.nan)
        theta_se = np.full(n_rows, np.nan)
        theta[rows], theta_se[rows] = fit_r.theta, fit_r.theta_se
        tau = alpha = np.full(n_q, np.nan)
        has_rubric = has_r_rows
        flags = [[] if has_rubric[q] else ["no_rubric"] for q in range(n_q)]
        optimizer = {
            "method": "L-BFGS-B (marginal ML on a grid)",
            "converged": fit_r.converged,
            "iterations": fit_r.n_iter,
            "loss": fit_r.loss,
            "prior_mean": fit_r.prior_mean,
            "prior_sd": fit_r.prior_sd,
            "ordinal_only": fit_r.ordinal_only,
        }
        irt_converged = fit_r.converged
        gamma_beta = (fit_r.gamma, fit_r.beta)
    else:
        raise CalibrationInputError(f"unknown mode {mode!r}")
    gamma, beta = (fit.gamma, fit.beta) if mode == "tournament" else gamma_beta
    optimizer["bt"] = bt_summary

    # Coverage flags (rcp_facts 4.4) join the fit's own.
    w = j.windows
    if w:
        for q in range(n_q):
            tv, ti = w["tournament_valid"][q], w["tournament_invalid"][q]
            rv, ri = w["rubric_valid"][q], w["rubric_invalid"][q]
            if (
                (tv + ti and ti / (tv + ti) > INVALID_FLAG_SHARE)
                or (rv + ri and ri / (rv + ri) > INVALID_FLAG_SHARE)
                or w.get("adaptive_invalid", np.zeros(n_q))[q]
            ):
                flags[q].append("invalid_windows")

    gain = np.where(np.isnan(theta), np.nan, rcp_gain(theta, gamma, beta))
    c_gain = np.where(n > 0, count_gain(passes, np.maximum(n, 1)), np.nan)
    calibrated = ~np.isnan(theta) & (n > 0)
    pred = pass_probabilities(np.where(np.isnan(theta), 0.0, theta), gamma, beta)
    keep = calibrated[j.r_doc] if j.r_doc.size else np.zeros(0, bool)
    diag = {
        "reliability": diagnostics.reliability(
            pred[calibrated], n[calibrated], passes[calibrated]
        ),
        "criterion_correlation": diagnostics.criterion_correlation(
            j.r_answers[keep], pred, unit=j.r_doc[keep]
        ),
        "tau": diagnostics.spread(tau),
        "flag_text": {k: v for k, v in FLAG_TEXT.items()},
    }
    converged = bool(irt_converged) and bt_summary["converged"] == bt_summary["fits"]
    return Calibration(
        mode=mode,
        gamma=np.asarray(gamma),
        beta=np.asarray(beta),
        tau=np.asarray(tau),
        alpha=np.asarray(alpha),
        theta_bt=theta_bt,
        theta_bt_se=se_bt,
        theta=theta,
        theta_se=theta_se,
        gain=gain,
        count_gain=c_gain,
        placements=n,
        query_has_tournament=has_t,
        query_has_rubric=np.asarray(has_rubric),
        query_flags=tuple(tuple(f) for f in flags),
        converged=converged,
        optimizer=optimizer,
        diagnostics=diag,
    )
