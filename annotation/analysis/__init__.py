"""Pure numerics of the human studies (no Django): picks, verdicts, agreement with
RCP- and qrel-nDCG, label quality, reliability, annotator flags and the study report.

Services turn rows into the frozen dataclasses of ``report`` and call ``study_report``.
See README.md in this directory for the definitions.
"""

from __future__ import annotations

from annotation.analysis.agreement import (
    Rate,
    auc,
    chance_rate,
    clustered_rate,
    disagreement_measure,
    hit_rates,
    loo_range,
    main_measure,
    margin_auc,
)
from annotation.analysis.label_quality import (
    Calibration,
    ece,
    label_auc,
    matched_flag_recall,
    query_spearman,
)
from annotation.analysis.picks import (
    Pick,
    annotator_pick,
    copeland_scores,
    displayed_docs,
    majority_verdict,
    shared_ideal_ndcg,
)
from annotation.analysis.quality import (
    AnnotatorQuality,
    FlagRules,
    ReviewSummary,
    annotator_quality,
    contradictory,
)
from annotation.analysis.reliability import (
    balanced_units,
    icc1k,
    krippendorff_alpha,
    pick_agreement,
    within_one_share,
)
from annotation.analysis.report import (
    Annotation,
    Contest,
    StudyConfig,
    json_safe,
    study_report,
)
from annotation.analysis.verdicts import (
    ContestMetrics,
    contest_metrics,
    metric_winner,
    verdict_class,
)

__all__ = [
    "Annotation",
    "AnnotatorQuality",
    "Calibration",
    "Contest",
    "ContestMetrics",
    "FlagRules",
    "Pick",
    "Rate",
    "ReviewSummary",
    "StudyConfig",
    "annotator_pick",
    "annotator_quality",
    "auc",
    "balanced_units",
    "chance_rate",
    "clustered_rate",
    "contest_metrics",
    "contradictory",
    "copeland_scores",
    "disagreement_measure",
    "displayed_docs",
    "ece",
    "hit_rates",
    "icc1k",
    "json_safe",
    "krippendorff_alpha",
    "label_auc",
    "loo_range",
    "main_measure",
    "majority_verdict",
    "margin_auc",
    "matched_flag_recall",
    "metric_winner",
    "pick_agreement",
    "query_spearman",
    "shared_ideal_ndcg",
    "study_report",
    "verdict_class",
    "within_one_share",
]
