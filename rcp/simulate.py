"""Simulated judged suites with known truth, for recovery tests and benchmarks.

Every document has a true calibrated ability; a tournament judge scores windows with
``decisiveness_j * truth + noise`` (its scale differs by query, which is what tau
absorbs), and a rubric judge passes criterion c with probability
sigmoid(gamma_c (truth - beta_c)) with the true items (sum gamma = C, mean beta = 0,
the fit's own identification, so fitted and true abilities share one scale).

Stress cases (``SuiteSpec`` shares): near-random tournament judges, queries whose
documents all pass or all fail every criterion, queries with one relevant document,
small pools (whole-pool windows) and invalid windows. ``recovery`` measures a fit
against the truth. No Django; seeded.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from scipy.special import expit
from scipy.stats import spearmanr

from rcp.gain import rcp_gain

__all__ = [
    "KINDS",
    "NANOBEIR",
    "STRESS",
    "VIDORE",
    "Recovery",
    "Suite",
    "SuiteSpec",
    "recovery",
    "simulate_suite",
    "spec_with",
]

KINDS = ("normal", "near_random", "all_pass", "all_fail", "one_relevant")
TRUE_GAMMA = (1.55, 1.30, 0.70, 1.00, 0.45)  # sums to 5
TRUE_BETA = (-2.4, -1.9, 0.0, 1.5, 2.8)  # mean 0
_BLOCK = 1024  # queries generated at a time


@dataclass(frozen=True)
class SuiteSpec:
    """Sizes and judge behaviour of a simulated suite.

    ``tournament_calls`` / ``rubric_windows`` are per query at a pool of 150 and
    scale with the pool (placements per document stay fixed); tournament windows
    are asked twice (as listed and reversed, fresh noise), so calls = 2 x windows.
    Decisiveness is log-uniform on ``decisiveness`` (a 4x spread by default).
    """

    n_queries: int = 649
    pool: int = 150
    small_pool: int = 10
    small_pool_share: float = 0.0
    tournament_calls: int = 160
    rubric_windows: int = 100
    window: int = 10
    rubric_window: int = 10
    decisiveness: tuple[float, float] = (0.7, 2.8)
    score_noise: float = 0.3
    truth_sd: float = 1.3
    offset_mean: float = -1.0
    offset_sd: float = 1.0
    gamma: tuple[float, ...] = TRUE_GAMMA
    beta: tuple[float, ...] = TRUE_BETA
    near_random_share: float = 0.0
    all_pass_share: float = 0.0
    all_fail_share: float = 0.0
    one_relevant_share: float = 0.0
    invalid_share: float = 0.0
    seed: int = 0


NANOBEIR = SuiteSpec()
VIDORE = SuiteSpec(
    n_queries=14514, tournament_calls=320, window=5, rubric_windows=125, rubric_window=8
)
STRESS = SuiteSpec(
    n_queries=90,
    small_pool_share=0.2,
    decisiveness=(0.4, 1.6),
    near_random_share=0.08,
    all_pass_share=0.06,
    all_fail_share=0.06,
    one_relevant_share=0.08,
    invalid_share=0.05,
    seed=11,
)


@dataclass(frozen=True)
class Suite:
    """A simulated suite as flat arrays; documents are rows 0..R-1.

    Tournament windows: ``t_size`` documents each, listed flat in ``t_doc`` (global
    rows) with ``t_score``; rubric windows likewise with ``r_answers`` (flat, C).
    ``*_valid`` marks invalid windows (their documents are listed, their scores or
    answers are NaN / -1 and must not be used).
    """

    spec: SuiteSpec
    doc_query: np.ndarray
    truth: np.ndarray
    kind: np.ndarray  # per query, index into KINDS
    decisiveness: np.ndarray
    t_size: np.ndarray
    t_doc: np.ndarray
    t_score: np.ndarray
    t_valid: np.ndarray
    r_size: np.ndarray
    r_doc: np.ndarray
    r_answers: np.ndarray
    r_valid: np.ndarray
    gamma: np.ndarray = field(default_factory=lambda: np.array(TRUE_GAMMA))
    beta: np.ndarray = field(default_factory=lambda: np.array(TRUE_BETA))

    @property
    def n_queries(self) -> int:
        return int(self.spec.n_queries)

    def window_query(self, sizes: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """Query of each window (its first document's)."""
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        return self.doc_query[docs[starts]] if sizes.size else np.zeros(0, np.int64)

    def save(self, path: str | Path) -> None:
        """Write the suite as one ``.npz`` (spec included), for another process."""
        arrays = {
            k: getattr(self, k)
            for k in (
                "doc_query", "truth", "kind", "decisiveness", "t_size", "t_doc",
                "t_score", "t_valid", "r_size", "r_doc", "r_answers", "r_valid",
                "gamma", "beta",
            )
        }  # fmt: skip
        spec = json.dumps(asdict(self.spec))
        np.savez(path, spec=np.array(spec), **arrays)

    @classmethod
    def load(cls, path: str | Path) -> Suite:
        with np.load(path) as data:
            spec = json.loads(str(data["spec"]))
            spec = SuiteSpec(**{k: tuple(v) if isinstance(v, list) else v
                                for k, v in spec.items()})  # fmt: skip
            return cls(spec=spec, **{k: data[k] for k in data.files if k != "spec"})

    def valid_tournament(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        keep = np.repeat(self.t_valid, self.t_size)
        return self.t_size[self.t_valid], self.t_doc[keep], self.t_score[keep]

    def valid_rubric(self) -> tuple[np.ndarray, np.ndarray]:
        keep = np.repeat(self.r_valid, self.r_size)
        return self.r_doc[keep], self.r_answers[keep]


def _balanced_windows(
    rng: np.random.Generator, n_docs: int, w: int, n_windows: int, n_queries: int
) -> np.ndarray:
    """(n_queries, n_windows, w) windows of distinct local documents with balanced
    placements: fresh permutations of the pool, cut into windows."""
    w = min(w, n_docs)
    per_perm = n_docs // w
    perms = -(-n_windows // per_perm)
    order = rng.permuted(np.tile(np.arange(n_docs), (n_queries, perms, 1)), axis=2)
    cut = order[:, :, : per_perm * w].reshape(n_queries, perms * per_perm, w)
    return cut[:, :n_windows]


def simulate_suite(spec: SuiteSpec = NANOBEIR) -> Suite:
    """Draw a suite under ``spec`` (see the module docstring)."""
    rng = np.random.default_rng(spec.seed)
    q = spec.n_queries
    gamma, beta = np.asarray(spec.gamma, float), np.asarray(spec.beta, float)
    shares = [
        spec.near_random_share,
        spec.all_pass_share,
        spec.all_fail_share,
        spec.one_relevant_share,
    ]
    counts = [int(round(s * q)) for s in shares]
    kind = np.zeros(q, dtype=np.int64)
    kind[: sum(counts)] = np.repeat(np.arange(1, 5), counts)
    kind = rng.permutation(kind)
    small = rng.random(q) < spec.small_pool_share
    pool = np.where(small, spec.small_pool, spec.pool)
    decisive = np.exp(rng.uniform(*np.log(spec.decisiveness), q))
    decisive[kind == 1] = 0.02

    doc_query = np.repeat(np.arange(q), pool)
    offsets = np.concatenate([[0], np.cumsum(pool)[:-1]])
    truth = rng.normal(0.0, spec.truth_sd, doc_query.size)
    truth += rng.normal(spec.offset_mean, spec.offset_sd, q)[doc_query]
    truth[kind[doc_query] == 2] += 12.0
    truth[kind[doc_query] == 3] -= 12.0
    for j in np.flatnonzero(kind == 4):
        rows = slice(offsets[j], offsets[j] + pool[j])
        truth[rows] = rng.normal(-4.0, 0.5, pool[j])
        truth[offsets[j] + rng.integers(pool[j])] = 3.0

    t_parts: list[tuple[np.ndarray, ...]] = []
    r_parts: list[tuple[np.ndarray, ...]] = []
    for n_docs in np.unique(pool):
        group = np.flatnonzero(pool == n_docs)
        w = min(spec.window, int(n_docs))
        n_win = max(1, int(round(spec.tournament_calls / 2 * n_docs / 150)))
        wr = min(spec.rubric_window, int(n_docs))
        n_rub = max(
            -(-int(n_docs) // wr), int(round(spec.rubric_windows * n_docs / 150))
        )
        # Blocks of queries bound memory at ViDoRe scale (same draws in any case).
        for lo in range(0, group.size, _BLOCK):
            members = group[lo : lo + _BLOCK]
            local = _balanced_windows(rng, int(n_docs), w, n_win, members.size)
            # each window twice: as listed and reversed
            local = np.concatenate([local, local[:, :, ::-1]], axis=1)
            rows = (local + offsets[members][:, None, None]).astype(np.int64)
            scores = decisive[members][:, None, None] * truth[rows]
            scores += rng.normal(0.0, spec.score_noise, rows.shape)
            scores += rng.normal(0.0, 1.0, rows.shape[:2])[:, :, None]  # window shift
            t_parts.append((rows.reshape(-1, w), scores.reshape(-1, w)))

            local = _balanced_windows(rng, int(n_docs), wr, n_rub, members.size)
            rows = (local + offsets[members][:, None, None]).reshape(-1, wr)
            seen = truth[rows]
            answers = np.empty((*rows.shape, gamma.size), dtype=np.int8)
            for c in range(gamma.size):  # one criterion at a time: less memory
                prob = expit(gamma[c] * (seen - beta[c]))
                answers[..., c] = rng.random(prob.shape) < prob
            r_parts.append((rows.astype(np.int64), answers))

    t_size = np.concatenate([np.full(r.shape[0], r.shape[1]) for r, _ in t_parts])
    t_doc = np.concatenate([r.ravel() for r, _ in t_parts])
    t_score = np.concatenate([x.ravel() for _, x in t_parts])
    r_size = np.concatenate([np.full(r.shape[0], r.shape[1]) for r, _ in r_parts])
    r_doc = np.concatenate([r.ravel() for r, _ in r_parts])
    r_answers = np.concatenate([x.reshape(-1, x.shape[-1]) for _, x in r_parts])
    t_valid = rng.random(t_size.size) >= spec.invalid_share
    r_valid = rng.random(r_size.size) >= spec.invalid_share
    t_score = np.where(np.repeat(t_valid, t_size), t_score, np.nan)
    r_answers = np.where(np.repeat(r_valid, r_size)[:, None], r_answers, -1)
    return Suite(
        spec=spec,
        doc_query=doc_query,
        truth=truth,
        kind=kind,
        decisiveness=decisive,
        t_size=t_size.astype(np.int64),
        t_doc=t_doc.astype(np.int64),
        t_score=t_score,
        t_valid=t_valid,
        r_size=r_size.astype(np.int64),
        r_doc=r_doc.astype(np.int64),
        r_answers=r_answers.astype(np.int8),
        r_valid=r_valid,
        gamma=gamma,
        beta=beta,
    )


@dataclass(frozen=True)
class Recovery:
    """How well a fit recovers the truth (over documents of normal queries).

    ``pooled``: Spearman of calibrated vs true abilities over every document;
    ``top10``: the same over each query's true top 10, pooled (the cross-query
    alignment that matters for nDCG); ``gain_mae``: mean |g(fit) - g(truth)|.
    """

    pooled: float
    top10: float
    gain_mae: float
    documents: int


def recovery(
    suite: Suite,
    theta: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    *,
    kinds: tuple[str, ...] = ("normal",),
) -> Recovery:
    """Recovery of ``theta`` (per document row) with the fitted items."""
    wanted = np.isin(suite.kind, [KINDS.index(k) for k in kinds])
    rows = wanted[suite.doc_query] & np.isfinite(theta)
    truth, est = suite.truth[rows], theta[rows]
    pooled = float(spearmanr(est, truth).statistic)
    # each query's true top 10
    q = suite.doc_query[rows]
    order = np.lexsort((-truth, q))
    first = np.searchsorted(q[order], q[order], side="left")
    rank_in_query = np.arange(order.size) - first
    top = order[rank_in_query < 10]
    top10 = float(spearmanr(est[top], truth[top]).statistic)
    mae = float(
        np.mean(
            np.abs(
                rcp_gain(est, gamma, beta) - rcp_gain(truth, suite.gamma, suite.beta)
            )
        )
    )
    return Recovery(pooled=pooled, top10=top10, gain_mae=mae, documents=int(rows.sum()))


def spec_with(spec: SuiteSpec, **changes: object) -> SuiteSpec:
    """``dataclasses.replace`` for specs (e.g. a smaller NanoBEIR-like suite)."""
    return replace(spec, **changes)  # type: ignore[arg-type]
