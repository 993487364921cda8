"""Panel decisions, verdicts and their agreement with humans and metrics. No Django.

The rule of rcp_facts §6.4: each contest is shown to each judge twice with the sides
swapped; a judge *decides* a contest only when it names the same side both times;
the panel's verdict is the side a strict majority of its judges decide (2 of 3), by
``annotation.analysis.picks.majority_verdict`` - the human verdict's own code, an
undecided judge counting as a "tie" pick; *unanimous* when every judge decides it.
Rates and intervals come from ``annotation.analysis.agreement`` (query-clustered
95% CIs), so panel and human figures are computed the same way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from annotation.analysis.agreement import (
    MARGIN_BANDS,
    clustered_rate,
    hit_rates,
    main_measure,
)
from annotation.analysis.picks import majority_verdict

__all__ = [
    "Answer",
    "ContestRef",
    "judge_decision",
    "panel_section",
    "panel_verdict",
]

SIDES = ("A", "B")


@dataclass(frozen=True)
class Answer:
    """One stored, valid answer of a judge: the side it names ("A", "B" or "tie"
    for a tied rubric pick) and the side that was shown first (List 1)."""

    contest_id: str
    judge: str
    rep: int
    side: str
    first_side: str


@dataclass(frozen=True)
class ContestRef:
    """A contest as the human report sees it: cluster, human verdict (and whether
    anyone graded it), both metrics' winners and margins over the shown documents."""

    contest_id: str
    query_id: str
    human_verdict: str
    human_picks: int
    rcp_winner: str
    qrel_winner: str
    rcp_margin: float
    qrel_margin: float


def judge_decision(sides: Sequence[str]) -> str:
    """The side a judge decides: the same A/B in both showings, else "tie"
    (undecided - also when an answer is missing or invalid)."""
    if len(sides) == 2 and sides[0] == sides[1] and sides[0] in SIDES:
        return sides[0]
    return "tie"


def panel_verdict(decisions: Sequence[str]) -> str:
    """Strict majority of the judges' decisions (undecided counts as "tie")."""
    return majority_verdict(list(decisions))


def _agreement(
    refs: Sequence[ContestRef], verdicts: Sequence[str], bands: Sequence[float]
) -> dict:
    clusters = [r.query_id for r in refs]
    rcp_w = [r.rcp_winner for r in refs]
    qrel_w = [r.qrel_winner for r in refs]
    with_human = [
        i
        for i, r in enumerate(refs)
        if verdicts[i] in SIDES and r.human_picks and r.human_verdict in SIDES
    ]
    return {
        "human": clustered_rate(
            [verdicts[i] == refs[i].human_verdict for i in with_human],
            [clusters[i] for i in with_human],
        ).as_dict(),
        "rcp": {
            band: rate.as_dict()
            for band, rate in hit_rates(
                verdicts, rcp_w, [r.rcp_margin for r in refs], clusters, bands=bands
            ).items()
        },
        "qrel": {
            band: rate.as_dict()
            for band, rate in hit_rates(
                verdicts, qrel_w, [r.qrel_margin for r in refs], clusters, bands=bands
            ).items()
        },
        "main": main_measure(verdicts, rcp_w, qrel_w, clusters).as_dict(),
    }


def panel_section(
    refs: Sequence[ContestRef],
    answers: Sequence[Answer],
    judges: Sequence[str],
    *,
    mode: str,
    bands: Sequence[float] = MARGIN_BANDS,
) -> dict:
    """The panel's figures over ``refs`` (answers of other contests are ignored).

    decided: share of contests with a panel verdict; unanimous: share of decided
    contests every judge decided; agreement of verdicts with the human majority
    (contests both decided), with RCP and qrel winners (hit rates by margin band)
    and the main measure, on all decided contests and on the unanimous subset;
    per judge: decided share, agreement with the panel, and in lists mode the
    share of its valid answers naming List 1 (position bias; 0.5 is none).
    """
    ids = {r.contest_id for r in refs}
    sides: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
    first: dict[str, list[bool]] = defaultdict(list)
    first_clusters: dict[str, list[str]] = defaultdict(list)
    cluster_of = {r.contest_id: r.query_id for r in refs}
    for a in answers:
        if a.contest_id not in ids:
            continue
        sides[a.contest_id, a.judge][a.rep] = a.side
        if a.side in SIDES:
            first[a.judge].append(a.side == a.first_side)
            first_clusters[a.judge].append(cluster_of[a.contest_id])
    rows, verdicts, unanimous = [], [], []
    decisions: dict[str, list[str]] = {j: [] for j in judges}
    for r in refs:
        per_judge = {
            j: judge_decision(
                [
                    sides[r.contest_id, j][rep]
                    for rep in (1, 2)
                    if rep in sides[r.contest_id, j]
                ]
            )
            for j in judges
        }
        for j in judges:
            decisions[j].append(per_judge[j])
        verdict = panel_verdict(list(per_judge.values()))
        all_same = bool(judges) and len(set(per_judge.values())) == 1
        unanimous.append(verdict in SIDES and all_same)
        verdicts.append(verdict)
        rows.append(
            {
                "contest_id": r.contest_id,
                "decisions": per_judge,
                "verdict": verdict,
                "unanimous": unanimous[-1],
                "human_verdict": r.human_verdict if r.human_picks else None,
                "rcp_winner": r.rcp_winner,
                "qrel_winner": r.qrel_winner,
            }
        )
    clusters = [r.query_id for r in refs]
    decided_idx = [i for i, v in enumerate(verdicts) if v in SIDES]
    uni_idx = [i for i in decided_idx if unanimous[i]]
    per_judge_out = {}
    for j in judges:
        decided_j = [d in SIDES for d in decisions[j]]
        agree = [i for i in decided_idx if decisions[j][i] in SIDES]
        per_judge_out[j] = {
            "decided": clustered_rate(decided_j, clusters).as_dict(),
            "agrees_with_panel": clustered_rate(
                [decisions[j][i] == verdicts[i] for i in agree],
                [clusters[i] for i in agree],
            ).as_dict(),
            "first_list_share": clustered_rate(first[j], first_clusters[j]).as_dict()
            if mode == "lists"
            else None,
        }
    return {
        "mode": mode,
        "judges": list(judges),
        "contests": len(refs),
        "human_graded": sum(1 for r in refs if r.human_picks),
        "verdicts": {v: verdicts.count(v) for v in ("A", "B", "tie")},
        "decided": clustered_rate([v in SIDES for v in verdicts], clusters).as_dict(),
        "unanimous": clustered_rate(
            [unanimous[i] for i in decided_idx], [clusters[i] for i in decided_idx]
        ).as_dict(),
        "agreement": _agreement(refs, verdicts, bands),
        "unanimous_agreement": _agreement(
            [refs[i] for i in uni_idx], [verdicts[i] for i in uni_idx], bands
        ),
        "per_judge": per_judge_out,
        "per_contest": rows,
    }
