"""The report's inference section (issue 14): every rate with Wilson, query-clustered
and two-way clustered intervals and an exact test, over a family of slices with Holm
adjustment; jackknife intervals for the AUCs, ECE and Spearman; a paired test of the
two margin AUCs; verdict-rule sensitivity and both leave-one-annotator-out readings.

Pure numerics, no Django. ``inference_section`` reads the collected study (the
``_Collected`` of ``report.py``: rows, panels and per-document labels) duck-typed, so
this module does not import ``report`` (which imports it).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import numpy as np
from scipy.stats import norm

from annotation.analysis.agreement import (
    MARGIN_BANDS,
    auc,
    chance_rate,
    clustered_rate,
    margin_auc,
)
from annotation.analysis.inference import (
    ExactTest,
    design_exact_test,
    holm,
    jackknife,
    poisson_binomial_test,
    twoway_clustered_ci,
    wilson,
)
from annotation.analysis.label_quality import ece, query_spearman
from annotation.analysis.rules import VERDICT_RULES, verdict_by_rule
from annotation.analysis.verdicts import verdict_class
from annotation.sampling import CELLS, classify

__all__ = ["inference_section", "rate_inference", "win_rate_inference"]

DECIDED = ("A", "B")


def _ci(pair: tuple[float, float] | None) -> list[float] | None:
    return None if pair is None else [pair[0], pair[1]]


def rate_inference(
    rows: Sequence[dict],
    panels: Sequence[Sequence[str]],
    verdicts: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The main measure of a slice with every interval and both chance rates.

    ``rows`` are per-contest report rows (winners, query), ``panels[i]`` the
    annotators of row i, ``verdicts`` override the rows' verdicts (rule changes).
    Intervals: ``ci_query`` (query-clustered normal, as the headline figures),
    ``ci_twoway`` (query and annotator), ``wilson`` (binomial score interval, sound for
    small slices). ``chance_all`` is the chance rate over every contest of the slice
    (the README's headline chance), ``chance_decided`` over contests whose verdict is
    A or B; the exact test (``test``) uses the decided contests as its population.
    """
    verdicts = [r["verdict"] for r in rows] if verdicts is None else list(verdicts)
    rcp_w = [r["rcp_winner"] for r in rows]
    qrel_w = [r["qrel_winner"] for r in rows]
    classes = [
        verdict_class(v, rw, qw)
        for v, rw, qw in zip(verdicts, rcp_w, qrel_w, strict=True)
    ]
    keep = [i for i, c in enumerate(classes) if c in ("rcp", "qrel")]
    hits = [classes[i] == "rcp" for i in keep]
    queries = [rows[i]["query_id"] for i in keep]
    k, n = sum(hits), len(keep)
    decided = [i for i, v in enumerate(verdicts) if v in DECIDED]
    test = design_exact_test(
        [rcp_w[i] for i in decided], [qrel_w[i] for i in decided], k, n
    )
    return {
        "rate": k / n if n else None,
        "k": k,
        "n": n,
        "contests": len(rows),
        "ci_query": _ci(clustered_rate(hits, queries).ci),
        "ci_twoway": _ci(twoway_clustered_ci(hits, queries, [panels[i] for i in keep])),
        "wilson": _ci(wilson(k, n)),
        "chance_all": chance_rate(rcp_w, qrel_w),
        "chance_decided": chance_rate(
            [rcp_w[i] for i in decided], [qrel_w[i] for i in decided]
        ),
        "test": test.as_dict(),
        "p": test.p_two_sided,
    }


def win_rate_inference(
    rows: Sequence[dict], panels: Sequence[Sequence[str]], system: str
) -> dict[str, Any]:
    """Share of the decided contests involving ``system`` that its side won, with the
    same intervals and an exact binomial test against 1/2 (sides are swapped by a fair
    coin at sampling, so a verdict coin gives each system 1/2)."""
    idx = [
        i
        for i, r in enumerate(rows)
        if system in (r["system_a"], r["system_b"]) and r["verdict"] in DECIDED
    ]
    side = {i: "A" if rows[i]["system_a"] == system else "B" for i in idx}
    hits = [rows[i]["verdict"] == side[i] for i in idx]
    queries = [rows[i]["query_id"] for i in idx]
    k, n = sum(hits), len(idx)
    test = poisson_binomial_test(k, [0.5] * n)
    return {
        "rate": k / n if n else None,
        "k": k,
        "n": n,
        "ci_query": _ci(clustered_rate(hits, queries).ci),
        "ci_twoway": _ci(twoway_clustered_ci(hits, queries, [panels[i] for i in idx])),
        "wilson": _ci(wilson(k, n)),
        "chance_all": 0.5 if n else None,
        "chance_decided": 0.5 if n else None,
        "test": test.as_dict(),
        "p": test.p_two_sided,
    }


def _slice_defs(
    rows: Sequence[dict], focus: str, edge: float
) -> list[tuple[str, Callable[[dict], bool]]]:
    """(name, predicate) of the main-measure slices for one scope of rows."""

    def disagree(r: dict) -> bool:
        return (
            r["rcp_winner"] in DECIDED
            and r["qrel_winner"] in DECIDED
            and r["rcp_winner"] != r["qrel_winner"]
        )

    def smaller(r: dict) -> float:
        return min(abs(r["rcp_margin"]), abs(r["qrel_margin"]))

    defs: list[tuple[str, Callable[[dict], bool]]] = [
        ("all", lambda r: True),
        ("disagreements", disagree),
        (
            f"disagreements_both_ge_{edge:.2f}",
            lambda r: disagree(r) and smaller(r) >= edge,
        ),
        (
            f"disagreements_any_lt_{edge:.2f}",
            lambda r: disagree(r) and smaller(r) < edge,
        ),
    ]
    for cell in sorted({r["design_cell"] for r in rows if r["design_cell"]}):
        defs.append((f"cell:{cell}", lambda r, c=cell: r["design_cell"] == c))
    if focus:

        def involves(r: dict) -> bool:
            return focus in (r["system_a"], r["system_b"])

        def rcp_favours(r: dict) -> bool:
            if not involves(r):
                return False
            mine = "A" if r["system_a"] == focus else "B"
            theirs = "B" if mine == "A" else "A"
            return r["rcp_winner"] == mine and r["qrel_winner"] == theirs

        defs.append((f"system:{focus}", involves))
        defs.append((f"system:{focus}/rcp_favours_it_qrels_its_opponent", rcp_favours))
    return defs


def _slices(
    rows: Sequence[dict], panels: Sequence[Sequence[str]], cfg: Any
) -> dict[str, dict]:
    """Every slice over the whole study and per dataset, Holm-adjusted as one family."""
    edge = cfg.bands[0] if cfg.bands else MARGIN_BANDS[0]
    focus = cfg.focus_system
    scopes: list[tuple[str, list[int]]] = [("", list(range(len(rows))))]
    datasets = sorted({r["dataset"] for r in rows if r["dataset"]})
    if len(datasets) > 1 or (datasets and focus):
        scopes += [
            (f"dataset:{d}/", [i for i, r in enumerate(rows) if r["dataset"] == d])
            for d in datasets
        ]
    out: dict[str, dict] = {}
    for prefix, scope in scopes:
        sub_rows = [rows[i] for i in scope]
        sub_panels = [panels[i] for i in scope]
        for name, pred in _slice_defs(sub_rows, focus, edge):
            sel = [j for j, r in enumerate(sub_rows) if pred(r)]
            out[prefix + name] = {
                "measure": "main",
                **rate_inference(
                    [sub_rows[j] for j in sel], [sub_panels[j] for j in sel]
                ),
            }
        if focus:
            out[f"{prefix}system:{focus}/win_rate"] = {
                "measure": "win_rate",
                **win_rate_inference(sub_rows, sub_panels, focus),
            }
    names = list(out)
    for name, adj in zip(names, holm([out[n]["p"] for n in names]), strict=True):
        out[name]["p_holm"] = adj
    return out


def _hit_rate_intervals(
    rows: Sequence[dict], panels: Sequence[Sequence[str]], bands: Sequence[float]
) -> dict[str, dict]:
    """Wilson and two-way intervals of the hit rates (same bands as ``hit_rates``)."""
    out: dict[str, dict] = {}
    for metric in ("rcp", "qrel"):
        idx = [
            i
            for i, r in enumerate(rows)
            if r["verdict"] in DECIDED and r[f"{metric}_winner"] in DECIDED
        ]
        margin = {i: abs(rows[i][f"{metric}_margin"]) for i in idx}
        groups = {"all": idx}
        if bands:
            groups[f"lt_{bands[0]:.2f}"] = [i for i in idx if margin[i] < bands[0]]
        for b in bands:
            groups[f"ge_{b:.2f}"] = [i for i in idx if margin[i] >= b]
        out[metric] = {}
        for band, sel in groups.items():
            hits = [rows[i]["verdict"] == rows[i][f"{metric}_winner"] for i in sel]
            k = sum(hits)
            out[metric][band] = {
                "rate": k / len(sel) if sel else None,
                "k": k,
                "n": len(sel),
                "wilson": _ci(wilson(k, len(sel))),
                "ci_twoway": _ci(
                    twoway_clustered_ci(
                        hits,
                        [rows[i]["query_id"] for i in sel],
                        [panels[i] for i in sel],
                    )
                ),
            }
    return out


def _main_rate(rows: Sequence[dict], verdicts: Sequence[str]) -> float | None:
    classes = [
        verdict_class(v, r["rcp_winner"], r["qrel_winner"])
        for v, r in zip(verdicts, rows, strict=True)
    ]
    n = sum(c in ("rcp", "qrel") for c in classes)
    return sum(c == "rcp" for c in classes) / n if n else None


def _range(values: list[float | None]) -> list[float] | None:
    kept = [v for v in values if v is not None]
    return [min(kept), max(kept)] if kept else None


def _verdict_rules(
    rows: Sequence[dict], panel: Sequence[Sequence[tuple[str, str]]]
) -> dict:
    """Main rate under each verdict rule, and the leave-one-annotator-out range in
    both readings: ``recompute`` (verdicts re-taken without the annotator) and
    ``drop_contests`` (the annotator's contests removed, other verdicts unchanged)."""
    annotators = sorted({a for contest in panel for a, _ in contest})
    out = {}
    for rule in VERDICT_RULES:
        verdicts = [verdict_by_rule([p for _, p in c], rule) for c in panel]
        recompute, drop = [], []
        for left in annotators:
            recompute.append(
                _main_rate(
                    rows,
                    [
                        verdict_by_rule([p for a, p in c if a != left], rule)
                        for c in panel
                    ],
                )
            )
            keep = [i for i, c in enumerate(panel) if all(a != left for a, _ in c)]
            drop.append(
                _main_rate([rows[i] for i in keep], [verdicts[i] for i in keep])
            )
        out[rule] = {
            "main": _main_rate(rows, verdicts),
            "loo_recompute": _range(recompute),
            "loo_drop_contests": _range(drop),
        }
    return out


def _jackknives(col: Any, cfg: Any) -> dict[str, Any]:
    """Delete-one-query jackknife of margin AUC, label AUC, ECE and Spearman, and the
    paired jackknife test of RCP against qrel margin AUC on the same picks."""
    rows = col.rows
    pick_q, pick_p, pick_r, pick_m = [], [], [], []
    for r, contest in zip(rows, col.panel, strict=True):
        for _a, p in contest:
            pick_q.append(r["query_id"])
            pick_p.append(p)
            pick_r.append(r["rcp_margin"])
            pick_m.append(r["qrel_margin"])
    pq = np.asarray(pick_q, dtype=object)
    pick_arr = np.asarray(pick_p, dtype=object)

    def picks_without(g: Hashable | None) -> np.ndarray:
        return np.ones(len(pq), bool) if g is None else pq != g

    def m_auc(margins: list[float]) -> Callable[[Hashable | None], float | None]:
        def stat(g: Hashable | None) -> float | None:
            keep = picks_without(g)
            return margin_auc(np.asarray(margins)[keep], pick_arr[keep].tolist())

        return stat

    def diff(g: Hashable | None) -> float | None:
        a, b = m_auc(pick_r)(g), m_auc(pick_m)(g)
        return None if a is None or b is None else a - b

    queries = [r["query_id"] for r in rows]
    paired = jackknife(diff, queries)
    z = p = None
    if paired.se:
        z = paired.estimate / paired.se  # type: ignore[operator]
        p = float(2 * norm.sf(abs(z)))

    graded = [k for k in sorted(col.doc_grades) if col.doc_grades[k]]
    doc_q = np.asarray([k[0] for k in graded], dtype=object)
    mean_grade = np.array([np.mean(col.doc_grades[k]) for k in graded])
    useful = mean_grade >= cfg.useful_grade
    gains = np.array([col.doc_gain[k] for k in graded])
    qrels = np.array([col.doc_qrel[k] for k in graded])
    grade_q = np.asarray(
        [k[0] for k in graded for _ in col.doc_grades[k]], dtype=object
    )
    obs_gain = np.array([col.doc_gain[k] for k in graded for _ in col.doc_grades[k]])
    obs_useful = np.array(
        [g >= cfg.useful_grade for k in graded for g in col.doc_grades[k]], dtype=bool
    )

    def docs_without(g: Hashable | None) -> np.ndarray:
        return np.ones(len(doc_q), bool) if g is None else doc_q != g

    def l_auc(labels: np.ndarray) -> Callable[[Hashable | None], float | None]:
        return lambda g: auc(labels[docs_without(g)], useful[docs_without(g)])

    def ece_stat(g: Hashable | None) -> float | None:
        keep = np.ones(len(grade_q), bool) if g is None else grade_q != g
        return ece(obs_gain[keep], obs_useful[keep], bins=cfg.ece_bins).ece

    # Exact mean grades, as the report's Spearman (equal means are tied ranks).
    exact_grade = [
        Fraction(int(sum(col.doc_grades[k])), len(col.doc_grades[k])) for k in graded
    ]

    def spear(scores: dict) -> Callable[[Hashable | None], float | None]:
        idx = [i for i, k in enumerate(graded) if k in scores]
        vals = np.array([scores[graded[i]] for i in idx], dtype=np.float64)
        qs = np.asarray([graded[i][0] for i in idx], dtype=object)
        grades = [exact_grade[i] for i in idx]

        def stat(g: Hashable | None) -> float | None:
            keep = np.ones(len(idx), bool) if g is None else qs != g
            return query_spearman(
                list(qs[keep]),
                vals[keep],
                [x for x, k in zip(grades, keep, strict=True) if k],
            )

        return stat

    doc_queries = list(doc_q)
    unit = (0.0, 1.0)
    return {
        "clusters": "query",
        "margin_auc": {
            "rcp": jackknife(m_auc(pick_r), queries, bounds=unit).as_dict(),
            "qrel": jackknife(m_auc(pick_m), queries, bounds=unit).as_dict(),
        },
        "margin_auc_paired": {
            **paired.as_dict(),
            "difference": paired.estimate,
            "z": z,
            "p_two_sided": p,
        },
        "label_auc": {
            "rcp": jackknife(l_auc(gains), doc_queries, bounds=unit).as_dict(),
            "qrel": jackknife(l_auc(qrels), doc_queries, bounds=unit).as_dict(),
        },
        "ece_gain_useful": jackknife(ece_stat, doc_queries, bounds=unit).as_dict(),
        "spearman_query": {
            "raw_bt": jackknife(
                spear(col.doc_bt), doc_queries, bounds=(-1.0, 1.0)
            ).as_dict(),
            "calibrated": jackknife(
                spear(col.doc_cal or col.doc_gain), doc_queries, bounds=(-1.0, 1.0)
            ).as_dict(),
        },
    }


def cells_by_depth(rows: Sequence[dict], k: int) -> dict[str, Any]:
    """Design cell at the draw depth (``design_cell``) against the cell its shown
    depth-k margins give (``sampling.classify`` of the shown margins): a count per
    (drawn, shown) pair and how many contests moved. ``draw_depth`` is filled by the
    service, which knows the study's ``metric_k``."""
    table: dict[str, dict[str, int]] = {}
    changed = 0
    for r in rows:
        drawn = r["design_cell"] or "unknown"
        shown = classify(r["rcp_margin"], r["qrel_margin"])
        table.setdefault(drawn, dict.fromkeys(CELLS, 0))[shown] += 1
        changed += drawn != shown
    return {
        "draw_depth": None,
        "shown_depth": k,
        "contests": len(rows),
        "changed": changed,
        "table": {cell: table[cell] for cell in sorted(table)},
    }


def inference_section(col: Any, cfg: Any) -> dict[str, Any]:
    """The ``inference`` key of the report (README.md, "Inference"), over graded
    contests (as the headline figures); ``cells_by_depth`` covers every contest."""
    graded = [i for i, r in enumerate(col.rows) if r["verdict"] is not None]
    all_rows = col.rows
    col = SimpleNamespace(
        rows=[col.rows[i] for i in graded],
        panel=[col.panel[i] for i in graded],
        doc_grades=col.doc_grades,
        doc_gain=col.doc_gain,
        doc_qrel=col.doc_qrel,
        doc_bt=col.doc_bt,
        doc_cal=col.doc_cal,
    )
    rows = col.rows
    panels = [[a for a, _ in contest] for contest in col.panel]
    slices = _slices(rows, panels, cfg)
    main = slices["all"]
    return {
        "verdict_rule": cfg.verdict_rule,
        "focus_system": cfg.focus_system or None,
        "chance": {
            "all_contests": main["chance_all"],
            "decided_contests": main["chance_decided"],
        },
        "main_test": {
            "design_exact": main["test"],
            "conditional_poisson_binomial": _conditional_test(rows).as_dict(),
        },
        "slices": slices,
        "multiplicity": {
            "method": "holm",
            "family": len([s for s in slices.values() if s["p"] is not None]),
        },
        "hit_rates": _hit_rate_intervals(rows, panels, cfg.bands),
        "verdict_rules": _verdict_rules(rows, col.panel),
        "jackknife": _jackknives(col, cfg),
        "cells_by_depth": cells_by_depth(all_rows, cfg.k),
    }


def _conditional_test(rows: Sequence[dict]) -> ExactTest:
    """Poisson-binomial test given which contests count (class rcp/qrel): under fair
    verdict coins a counted disagreement is RCP's with probability 1/2, a counted
    contest where only RCP (only qrels) names a winner is RCP's with probability 1
    (0); K ~ PoissonBinomial of those, ``expected`` is their mean."""
    probs, k = [], 0
    for r in rows:
        if r["class"] not in ("rcp", "qrel"):
            continue
        k += r["class"] == "rcp"
        both = r["rcp_winner"] in DECIDED and r["qrel_winner"] in DECIDED
        probs.append(0.5 if both else (1.0 if r["rcp_winner"] in DECIDED else 0.0))
    return poisson_binomial_test(k, probs)
