"""Annotator quality flags for admins (never shown to annotators): agreement with the
panel, median seconds per document, straight-lining."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

from annotation.analysis.picks import majority_verdict

__all__ = [
    "AnnotatorQuality",
    "FlagRules",
    "ReviewSummary",
    "annotator_quality",
    "contradictory",
]


@dataclass(frozen=True)
class ReviewSummary:
    """One annotator's review of one contest: pick, seconds and answer per document."""

    contest_id: str
    annotator: str
    pick: str
    seconds: tuple[float, ...] = ()
    answers: tuple[Hashable, ...] = ()  # grade or raw answers, one per document


@dataclass(frozen=True)
class FlagRules:
    """Thresholds for the flags; a flag needs at least ``min_contests`` contests."""

    min_agreement: float = 0.5  # "low_agreement" below this (vs the other annotators)
    min_median_seconds: float = 3.0  # "fast" below this median per document
    straight_share: float = 0.5  # "straight_lining" at or above this share
    min_contests: int = 3


@dataclass(frozen=True)
class AnnotatorQuality:
    """Per-annotator figures and the flags they raise."""

    annotator: str
    contests: int
    panel_agreement: float | None
    others_agreement: float | None
    others_compared: int
    median_seconds: float | None
    straight_lined: int
    straight_share: float | None
    flags: tuple[str, ...]

    def as_dict(self) -> dict:
        return {
            "contests": self.contests,
            "panel_agreement": self.panel_agreement,
            "others_agreement": self.others_agreement,
            "others_compared": self.others_compared,
            "median_seconds": self.median_seconds,
            "straight_lined": self.straight_lined,
            "straight_share": self.straight_share,
            "flags": list(self.flags),
        }


def annotator_quality(
    reviews: Sequence[ReviewSummary], *, rules: FlagRules | None = None
) -> dict[str, AnnotatorQuality]:
    """Figures per annotator (sorted by id) from valid reviews.

    panel_agreement: share of picks equal to the contest verdict (own pick included);
    others_agreement: share equal to the strict majority of the other picks, over
    contests where that majority is A or B; a contest is straight-lined when its
    (>= 2) documents all got identical answers.
    """
    rules = rules or FlagRules()
    by_contest: dict[str, list[ReviewSummary]] = defaultdict(list)
    for r in reviews:
        by_contest[r.contest_id].append(r)
    verdict = {
        c: majority_verdict([r.pick for r in rs]) for c, rs in by_contest.items()
    }
    mine: dict[str, list[ReviewSummary]] = defaultdict(list)
    for r in reviews:
        mine[r.annotator].append(r)

    out: dict[str, AnnotatorQuality] = {}
    for a in sorted(mine):
        rs = mine[a]
        panel = [r.pick == verdict[r.contest_id] for r in rs]
        others = []
        for r in rs:
            rest = [o.pick for o in by_contest[r.contest_id] if o is not r]
            v = majority_verdict(rest) if rest else "tie"
            if v in ("A", "B"):
                others.append(r.pick == v)
        secs = [s for r in rs for s in r.seconds]
        eligible = [r for r in rs if len(r.answers) >= 2]
        straight = sum(len(set(r.answers)) == 1 for r in eligible)
        q = AnnotatorQuality(
            annotator=a,
            contests=len(rs),
            panel_agreement=sum(panel) / len(panel),
            others_agreement=sum(others) / len(others) if others else None,
            others_compared=len(others),
            median_seconds=float(statistics.median(secs)) if secs else None,
            straight_lined=straight,
            straight_share=straight / len(eligible) if eligible else None,
            flags=(),
        )
        out[a] = _with_flags(q, rules)
    return out


def _with_flags(q: AnnotatorQuality, rules: FlagRules) -> AnnotatorQuality:
    flags = []
    if (
        q.others_agreement is not None
        and q.others_compared >= rules.min_contests
        and q.others_agreement < rules.min_agreement
    ):
        flags.append("low_agreement")
    if (
        q.median_seconds is not None
        and q.contests >= rules.min_contests
        and q.median_seconds < rules.min_median_seconds
    ):
        flags.append("fast")
    if (
        q.straight_share is not None
        and q.straight_lined >= rules.min_contests
        and q.straight_share >= rules.straight_share
    ):
        flags.append("straight_lining")
    return replace(q, flags=tuple(flags))


def contradictory(answers: Mapping[str, bool | None], keys: Sequence[str]) -> bool:
    """True when a stricter question got "yes" while a looser one got "no".

    The rubric's questions go from least to most stringent (each assumes the ones
    before it), so a consistent answer is a run of yes then a run of no: Q1 "about
    the topic" = no with Q4 "directly answers" = yes is a contradiction. Unanswered
    questions are ignored.
    """
    seen_no = False
    for key in keys:
        value = answers.get(key)
        if value is False:
            seen_no = True
        elif value is True and seen_no:
            return True
    return False
