"""Writes of the annotation app, by subject: ``annotators``, ``studies``,
``reports``/``releases`` (study analysis and anonymised exports) and
``assignment`` (the algorithm of ASSIGNMENT.md: ``assignment_next``,
``assignment_draft_save`` and ``assignment_submit`` are its only entry points).
"""

from .annotators import (
    ANNOTATE_CODENAME,
    ANNOTATORS_GROUP,
    ImportedAnnotator,
    annotator_activate,
    annotator_create,
    annotator_deactivate,
    annotator_group_ensure,
    annotator_password_link,
    annotator_random_id_ensure,
    annotator_role_check,
    annotators_import,
    study_member_add,
)
from .assignment import (
    NextLease,
    assignment_draft_save,
    assignment_next,
    assignment_next_for,
    assignment_submit,
    grade_of,
)
from .looks import (
    study_analysis_plan_set,
    study_plan_effective,
    study_report_requested,
)
from .planning import power_plan_build
from .quality import (
    annotator_exclude,
    gold_item_add,
    gold_items_from_qrels,
    qrel_to_grade,
    study_gold_rate_set,
)
from .reanalysis import reference_report
from .releases import (
    release_build,
    release_export,
    release_folder,
    release_request,
    release_retry,
    releases_reap_stale,
)
from .reports import (
    annotator_hash,
    release_report,
    study_report_build,
)
from .studies import (
    DEFAULT_INSTRUCTIONS,
    DEFAULT_QUESTIONS,
    MAX_LEASE_MINUTES,
    METRIC_K,
    StudyPlan,
    rubric_create,
    study_close,
    study_create,
    study_open,
    study_plan,
)

__all__ = [
    "ANNOTATE_CODENAME",
    "ANNOTATORS_GROUP",
    "DEFAULT_INSTRUCTIONS",
    "DEFAULT_QUESTIONS",
    "MAX_LEASE_MINUTES",
    "METRIC_K",
    "ImportedAnnotator",
    "NextLease",
    "StudyPlan",
    "annotator_activate",
    "annotator_create",
    "annotator_deactivate",
    "annotator_exclude",
    "annotator_group_ensure",
    "annotator_hash",
    "annotator_password_link",
    "annotator_random_id_ensure",
    "annotator_role_check",
    "annotators_import",
    "assignment_draft_save",
    "assignment_next",
    "assignment_next_for",
    "assignment_submit",
    "gold_item_add",
    "gold_items_from_qrels",
    "grade_of",
    "qrel_to_grade",
    "release_build",
    "release_export",
    "release_folder",
    "power_plan_build",
    "reference_report",
    "study_analysis_plan_set",
    "study_plan_effective",
    "study_report_requested",
    "release_report",
    "release_request",
    "release_retry",
    "releases_reap_stale",
    "rubric_create",
    "study_close",
    "study_create",
    "study_gold_rate_set",
    "study_member_add",
    "study_open",
    "study_plan",
    "study_report_build",
]
