"""Verdict rules: how a panel's picks become a contest verdict (a study setting).

- ``majority`` (default, the reference's rule): A or B holds a strict majority of
  all N picks, "tie" picks counted in N (``picks.majority_verdict``).
- ``plurality``: A or B has strictly more picks than each of the other two outcomes
  (the other side and "tie"); anything else is a tie. With N = 4, A A B tie gives A
  under plurality and a tie under majority.
"""

from __future__ import annotations

from collections.abc import Sequence

from annotation.analysis.picks import PICKS, majority_verdict

__all__ = ["VERDICT_RULES", "plurality_verdict", "verdict_by_rule"]

VERDICT_RULES = ("majority", "plurality")


def plurality_verdict(picks: Sequence[str]) -> str:
    """ "A" or "B" when that side has strictly more picks than the other side and than
    the "tie" picks; "tie" otherwise (including N = 0)."""
    for p in picks:
        if p not in PICKS:
            raise ValueError(f"unknown pick {p!r}")
    counts = {p: sum(x == p for x in picks) for p in PICKS}
    for side, other in (("A", "B"), ("B", "A")):
        if counts[side] > counts[other] and counts[side] > counts["tie"]:
            return side
    return "tie"


def verdict_by_rule(picks: Sequence[str], rule: str = "majority") -> str:
    """The verdict of one panel under ``rule`` (one of VERDICT_RULES)."""
    if rule == "majority":
        return majority_verdict(picks)
    if rule == "plurality":
        return plurality_verdict(picks)
    raise ValueError(f"unknown verdict rule {rule!r}; use one of {VERDICT_RULES}")
