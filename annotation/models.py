"""Blind human validation studies: studies, rubric versions, contests, assignments, grades.

A ``Study`` samples ``Contest``s (one query, the top-k of two systems). Each contest is
graded by exactly ``per_contest`` annotators: an ``Assignment`` is one annotator's lease
on one contest and holds one of the contest's numbered *slots*, so the database itself
refuses a second holder of a slot and a second assignment of the same annotator (see
``annotation/ASSIGNMENT.md``). ``Grade`` rows keep the raw yes/no answers with the
rubric version they answered.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User, UserManager
from django.core.exceptions import ValidationError
from django.db import models

MAX_QUESTIONS = 9  # keys 1-9 toggle questions on the grading page
MAX_PER_CONTEST = 20


class AnnotatorManager(UserManager):
    def get_queryset(self) -> models.QuerySet:
        return super().get_queryset().filter(groups__name="annotators")


class Annotator(User):
    """Users of the ``annotators`` group (a proxy: no table of its own).

    It carries the one permission annotators hold, ``annotation.annotate``, and gives
    the admin an annotator list with CSV import and deactivation.
    """

    objects = AnnotatorManager()

    class Meta:
        proxy = True
        permissions = [("annotate", "Can grade contests of open studies")]


def new_random_id() -> str:
    """32 random bytes as hex: an annotator's release identity (never enumerable)."""
    return secrets.token_hex(32)


class AnnotatorRandomId(models.Model):
    """A random id per annotator account, stored when the account or its first study
    membership is created and never shown anywhere.

    Releases name an annotator by HMAC(RELEASE_HASH_KEY, "study:random id"), not by
    the user id: user ids are small and sequential, so with the key anyone could
    have tried them all. Deleting this row would change the annotator's release
    hash, so nothing does.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="annotator_random_id",
    )
    value = models.CharField(
        max_length=64, unique=True, default=new_random_id, editable=False
    )

    class Meta:
        verbose_name = "annotator random id"

    def __str__(self) -> str:
        return f"random id of user {self.user_id}"


class StudyStatus(models.TextChoices):
    DRAFT = "draft", "draft"
    OPEN = "open", "open"
    CLOSED = "closed", "closed"


class DesignCell(models.TextChoices):
    """Why a contest was drawn: how RCP-nDCG and qrel-nDCG judge its system pair."""

    DISCORDANT_DECISIVE = "discordant_decisive", "discordant, both margins >= 0.02"
    DISCORDANT_MARGINAL = "discordant_marginal", "discordant, a margin < 0.02"
    CONCORDANT = "concordant", "concordant (control)"


class Study(models.Model):
    """A blind validation study over one calibration fit and a set of systems.

    ``design`` records how the contests were drawn (metric cut-off, quotas, candidates
    and draws per cell, seed) so a study can be re-derived and reported.
    """

    name = models.CharField(max_length=200, unique=True)
    datasets = models.ManyToManyField("benchmarks.Dataset", related_name="studies")
    fit = models.ForeignKey(
        "calibration.CalibrationFit", on_delete=models.PROTECT, related_name="studies"
    )
    systems = models.ManyToManyField("benchmarks.System", related_name="studies")
    depth = models.PositiveSmallIntegerField(
        default=5, help_text="top-k of each system shown"
    )
    per_contest = models.PositiveSmallIntegerField(
        default=3, help_text="annotators per contest (N)"
    )
    collect_order = models.BooleanField(
        default=False, help_text="ask for an ordering of equally graded documents"
    )
    collect_comments = models.BooleanField(
        default=True, help_text="show a comment box per document (never released)"
    )
    lease_duration = models.DurationField(default=timedelta(minutes=30))
    instructions = models.TextField(blank=True, help_text="Markdown")
    status = models.CharField(
        max_length=10, choices=StudyStatus.choices, default=StudyStatus.DRAFT
    )
    seed = models.BigIntegerField(default=0)
    design = models.JSONField(default=dict, blank=True)
    gold_rate = models.FloatField(
        default=0.0,
        help_text="share of assignments that get one gold document mixed in "
        "(unannounced; needs gold items for the contest's query)",
    )
    acceptance = models.JSONField(
        default=dict,
        blank=True,
        help_text="acceptance thresholds overriding the defaults "
        "(annotation.acceptance.THRESHOLDS)",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    opened_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    # Pre-registration (issue 14): the analysis plan, editable while a draft, and the
    # copy frozen when the study first opens (``looks.PLAN_KEYS``).
    analysis_plan = models.JSONField(default=dict, blank=True)
    registered_plan = models.JSONField(null=True, blank=True)
    registered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "studies"
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(depth__gte=1, depth__lte=50),
                name="study_depth_range",
            ),
            models.CheckConstraint(
                condition=models.Q(
                    per_contest__gte=1, per_contest__lte=MAX_PER_CONTEST
                ),
                name="study_per_contest_range",
            ),
            models.CheckConstraint(
                condition=models.Q(lease_duration__gt=timedelta(0)),
                name="study_lease_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(gold_rate__gte=0, gold_rate__lte=1),
                name="study_gold_rate_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class StudyMember(models.Model):
    """An annotator invited to a study. Only members get its contests."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="members")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="study_memberships",
    )
    active = models.BooleanField(default=True)
    added_at = models.DateTimeField(auto_now_add=True)
    # Exclusion (annotation.services.annotator_exclude): recorded, never undone;
    # the member's reviews are invalid and their contests went to others.
    excluded_at = models.DateTimeField(null=True, blank=True)
    excluded_reason = models.TextField(blank=True)
    excluded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        ordering = ["study_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "annotator"], name="member_unique_annotator"
            ),
            models.CheckConstraint(
                condition=models.Q(excluded_at__isnull=True)
                | (models.Q(active=False) & ~models.Q(excluded_reason="")),
                name="member_excluded_inactive_with_reason",
            ),
        ]

    def __str__(self) -> str:
        return f"study {self.study_id} / user {self.annotator_id}"


class Rubric(models.Model):
    """One version of a study's yes/no questions, least to most stringent.

    ``questions`` = [{"key": "C1", "text": "..."}, ...]. New versions never change
    grades already given: every assignment and grade points at its version.
    """

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="rubrics")
    version = models.PositiveSmallIntegerField()
    questions = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["study_id", "version"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "version"], name="rubric_unique_version"
            ),
            models.CheckConstraint(
                condition=models.Q(version__gte=1), name="rubric_version_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"study {self.study_id} rubric v{self.version}"

    def clean(self) -> None:
        questions = self.questions
        if not isinstance(questions, list) or not 1 <= len(questions) <= MAX_QUESTIONS:
            raise ValidationError(
                {"questions": f"give 1 to {MAX_QUESTIONS} questions as a list"}
            )
        keys = []
        for q in questions:
            if (
                not isinstance(q, dict)
                or set(q) != {"key", "text"}
                or not isinstance(q["key"], str)
                or not isinstance(q["text"], str)
                or not q["key"].strip()
                or not q["text"].strip()
            ):
                raise ValidationError(
                    {"questions": 'each question is {"key": str, "text": str}'}
                )
            keys.append(q["key"])
        if len(set(keys)) != len(keys):
            raise ValidationError({"questions": "question keys must be unique"})

    @property
    def keys(self) -> list[str]:
        return [q["key"] for q in self.questions]


class Contest(models.Model):
    """One query and the top-k lists of two systems (sides randomised at sampling).

    ``rcp_*``/``qrel_*`` are nDCG@``design.metric_k`` of each side, used to place the
    contest in its design cell. Never shown to annotators.
    """

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="contests")
    position = models.PositiveIntegerField(help_text="order of the shuffled draw")
    query = models.ForeignKey(
        "benchmarks.Query", on_delete=models.PROTECT, related_name="+"
    )
    system_a = models.ForeignKey(
        "benchmarks.System", on_delete=models.PROTECT, related_name="+"
    )
    system_b = models.ForeignKey(
        "benchmarks.System", on_delete=models.PROTECT, related_name="+"
    )
    cell = models.CharField(max_length=30, choices=DesignCell.choices)
    rcp_a = models.FloatField()
    rcp_b = models.FloatField()
    qrel_a = models.FloatField()
    qrel_b = models.FloatField()

    class Meta:
        ordering = ["study_id", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "position"], name="contest_unique_position"
            ),
            models.UniqueConstraint(
                fields=["study", "query", "system_a", "system_b"],
                name="contest_unique_pair",
            ),
            models.CheckConstraint(
                condition=~models.Q(system_a=models.F("system_b")),
                name="contest_two_systems",
            ),
        ]

    def __str__(self) -> str:
        return f"study {self.study_id} contest #{self.position}"

    @property
    def rcp_margin(self) -> float:
        return self.rcp_a - self.rcp_b

    @property
    def qrel_margin(self) -> float:
        return self.qrel_a - self.qrel_b


class ContestDocument(models.Model):
    """A document of a contest's de-duplicated union, with its rank in each list."""

    contest = models.ForeignKey(
        Contest, on_delete=models.CASCADE, related_name="entries"
    )
    document = models.ForeignKey(
        "benchmarks.Document", on_delete=models.PROTECT, related_name="+"
    )
    rank_a = models.PositiveSmallIntegerField(null=True, blank=True)
    rank_b = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["contest_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["contest", "document"], name="contestdoc_unique_doc"
            ),
            models.UniqueConstraint(
                fields=["contest", "rank_a"], name="contestdoc_unique_rank_a"
            ),
            models.UniqueConstraint(
                fields=["contest", "rank_b"], name="contestdoc_unique_rank_b"
            ),
            models.CheckConstraint(
                condition=models.Q(rank_a__isnull=False)
                | models.Q(rank_b__isnull=False),
                name="contestdoc_in_a_list",
            ),
        ]

    def __str__(self) -> str:
        return f"contest {self.contest_id} / doc {self.document_id}"


class AssignmentStatus(models.TextChoices):
    LEASED = "leased", "leased"
    SUBMITTED = "submitted", "submitted"
    EXPIRED = "expired", "expired (slot returned to the pool)"


class Assignment(models.Model):
    """One annotator's lease on one contest.

    A valid leased or submitted assignment holds a ``slot`` 1..N of its contest; the
    unique (contest, slot) constraint makes over-assignment impossible, so a contest
    never has more than N valid reviews. An invalid one (its annotator was excluded)
    holds no slot. A lease past
    ``expires_at`` keeps its slot until another request reclaims it (status
    ``expired``, slot cleared). ``documents`` is the display order, each with its
    opaque per-assignment key: [{"key": "k3f9...", "document": <pk>}, ...].
    """

    contest = models.ForeignKey(
        Contest, on_delete=models.CASCADE, related_name="assignments"
    )
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="assignments"
    )
    slot = models.PositiveSmallIntegerField(null=True, blank=True)
    status = models.CharField(
        max_length=10, choices=AssignmentStatus.choices, default=AssignmentStatus.LEASED
    )
    rubric = models.ForeignKey(Rubric, on_delete=models.PROTECT, related_name="+")
    seed = models.BigIntegerField(help_text="seed of this annotator's document order")
    documents = models.JSONField()
    leased_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    submitted_at = models.DateTimeField(null=True, blank=True)
    draft = models.JSONField(null=True, blank=True)
    draft_saved_at = models.DateTimeField(null=True, blank=True)
    # False once its annotator is excluded: it gives its slot back (so the contest
    # re-opens) and its grades leave the analysis; the rows are kept.
    valid = models.BooleanField(default=True)

    class Meta:
        ordering = ["contest_id", "slot", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["contest", "annotator"], name="assignment_unique_annotator"
            ),
            models.UniqueConstraint(
                fields=["contest", "slot"], name="assignment_unique_slot"
            ),
            models.CheckConstraint(
                condition=models.Q(slot__isnull=True)
                | models.Q(slot__gte=1, slot__lte=MAX_PER_CONTEST),
                name="assignment_slot_range",
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(slot__isnull=True)
                    & (
                        models.Q(status=AssignmentStatus.EXPIRED)
                        | models.Q(valid=False)
                    )
                )
                | (
                    models.Q(slot__isnull=False)
                    & ~models.Q(status=AssignmentStatus.EXPIRED)
                    & models.Q(valid=True)
                ),
                name="assignment_slot_iff_live_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(valid=True)
                | ~models.Q(status=AssignmentStatus.LEASED),
                name="assignment_invalid_not_leased",
            ),
            models.CheckConstraint(
                condition=~models.Q(status=AssignmentStatus.SUBMITTED)
                | models.Q(submitted_at__isnull=False),
                name="assignment_submitted_at",
            ),
        ]
        indexes = [
            models.Index(
                fields=["annotator", "status"], name="assignment_annotator_status"
            ),
            models.Index(
                fields=["contest", "status", "expires_at"],
                name="assignment_contest_live",
            ),
        ]

    def __str__(self) -> str:
        return f"assignment {self.pk} (contest {self.contest_id}, user {self.annotator_id})"

    @property
    def keys(self) -> list[str]:
        return [d["key"] for d in self.documents]


class Grade(models.Model):
    """One annotator's grade of one document of a contest, as submitted.

    ``answers`` are the raw yes/no answers keyed by question key of ``rubric``;
    ``grade`` is the 1-based index of the most stringent "yes" (0 if none).
    """

    assignment = models.ForeignKey(
        Assignment, on_delete=models.CASCADE, related_name="grades"
    )
    document = models.ForeignKey(
        "benchmarks.Document", on_delete=models.PROTECT, related_name="+"
    )
    rubric = models.ForeignKey(Rubric, on_delete=models.PROTECT, related_name="+")
    answers = models.JSONField()
    grade = models.PositiveSmallIntegerField()
    order = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="rank among equally graded documents"
    )
    comment = models.TextField(blank=True)
    seconds = models.FloatField(default=0.0, help_text="time spent on the document")

    class Meta:
        ordering = ["assignment_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["assignment", "document"], name="grade_unique_doc"
            ),
            models.CheckConstraint(
                condition=models.Q(grade__lte=MAX_QUESTIONS), name="grade_range"
            ),
            models.CheckConstraint(
                condition=models.Q(seconds__gte=0), name="grade_seconds_nonnegative"
            ),
        ]

    def __str__(self) -> str:
        return (
            f"assignment {self.assignment_id} / doc {self.document_id} = {self.grade}"
        )


class GoldSource(models.TextChoices):
    QREL = "qrel", "from the benchmark's qrels"
    STAFF = "staff", "entered by staff"


class GoldItem(models.Model):
    """A document with a known grade for one query of a study: a quality check.

    Mixed into some assignments of contests on ``query`` (``Study.gold_rate``),
    looking like any other document. Its answers go to ``GoldAnswer``, never to
    ``Grade``: gold documents cannot enter verdicts, picks or releases.
    """

    study = models.ForeignKey(
        Study, on_delete=models.CASCADE, related_name="gold_items"
    )
    query = models.ForeignKey(
        "benchmarks.Query", on_delete=models.PROTECT, related_name="+"
    )
    document = models.ForeignKey(
        "benchmarks.Document", on_delete=models.PROTECT, related_name="+"
    )
    expected_grade = models.PositiveSmallIntegerField(
        help_text="grade on the rubric's scale (0 = no question answered yes)"
    )
    source = models.CharField(max_length=10, choices=GoldSource.choices)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["study_id", "query_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "query", "document"], name="gold_unique_document"
            ),
            models.CheckConstraint(
                condition=models.Q(expected_grade__lte=MAX_QUESTIONS),
                name="gold_grade_range",
            ),
        ]

    def __str__(self) -> str:
        return (
            f"gold {self.document_id} for query {self.query_id} = {self.expected_grade}"
        )


class GoldAnswer(models.Model):
    """An annotator's answers to a gold document mixed into their assignment."""

    assignment = models.ForeignKey(
        "Assignment", on_delete=models.CASCADE, related_name="gold_answers"
    )
    item = models.ForeignKey(GoldItem, on_delete=models.PROTECT, related_name="answers")
    answers = models.JSONField()
    grade = models.PositiveSmallIntegerField()
    seconds = models.FloatField(default=0.0)

    class Meta:
        ordering = ["assignment_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["assignment", "item"], name="goldanswer_unique_item"
            ),
        ]

    def __str__(self) -> str:
        return f"assignment {self.assignment_id} / gold {self.item_id} = {self.grade}"


class ReleaseStatus(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    DONE = "done", "done"
    FAILED = "failed", "failed"


class Release(models.Model):
    """One numbered, immutable export of a study's anonymised grades.

    Numbers count 1, 2, ... per study; the files of a done release never change (a
    new export is a new number and a new folder). ``path`` is the release folder
    relative to MEDIA_ROOT (a zip of it sits beside it); ``checksum`` is the SHA-256
    of its ``manifest.json``, which holds the SHA-256 of every other file.
    """

    study = models.ForeignKey(Study, on_delete=models.PROTECT, related_name="releases")
    number = models.PositiveIntegerField()
    status = models.CharField(
        max_length=10, choices=ReleaseStatus.choices, default=ReleaseStatus.PENDING
    )
    include_text = models.BooleanField(
        default=False, help_text="include query and document texts"
    )
    checksum = models.CharField(max_length=64, blank=True)
    path = models.CharField(max_length=500, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Set when a worker claims the build: still running after it, the worker is
    # taken for lost (RELEASE_BUILD_LEASE_S; releases_reap_stale).
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["study_id", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "number"], name="release_unique_number"
            ),
            models.CheckConstraint(
                condition=models.Q(number__gte=1), name="release_number_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"study {self.study_id} release {self.number}"


class StudyLook(models.Model):
    """A report requested while its study was open: an interim look (issue 14).

    ``information`` is the information fraction (contests with a full panel over the
    planned contests); ``z`` the main measure's clustered Wald statistic against its
    chance rate. ``fingerprint`` identifies the data seen, so re-reading a report over
    unchanged data records no new look. Boundaries are recomputed from all looks.
    """

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="looks")
    number = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    fingerprint = models.CharField(max_length=64)
    complete_contests = models.PositiveIntegerField()
    information = models.FloatField()
    k = models.PositiveIntegerField()
    n = models.PositiveIntegerField()
    rate = models.FloatField(null=True, blank=True)
    chance = models.FloatField(null=True, blank=True)
    z = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["study_id", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "number"], name="study_look_unique_number"
            ),
            models.CheckConstraint(
                condition=models.Q(information__gt=0, information__lte=1),
                name="study_look_information_range",
            ),
        ]

    def __str__(self) -> str:
        return f"study {self.study_id} look {self.number}"
