"""Judges (OpenAI-compatible endpoints), judging jobs and per-window judgment records.

A ``JudgmentWindow`` is the durable unit: one row per (family, query, stage,
window sequence), planned before it is asked, claimed with compare-and-set, and
completed exactly once. Calibration reads only completed rows.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Decoding(models.TextChoices):
    JSON_SCHEMA = "json_schema", "JSON schema (response_format)"
    FREE = "free", "free text (tolerant parsing)"


class Judge(models.Model):
    """An OpenAI-compatible endpoint configuration. Secrets stay in the environment:
    ``api_key_env`` names the variable that holds the key."""

    name = models.CharField(max_length=200, unique=True)
    base_urls = models.JSONField(
        default=list, blank=True, help_text="one URL per replica"
    )
    model = models.CharField(max_length=300, blank=True)
    api_key_env = models.CharField(max_length=200, blank=True)
    max_output_tokens = models.PositiveIntegerField(default=2048)
    temperature = models.FloatField(null=True, blank=True)
    context_tokens = models.PositiveIntegerField(null=True, blank=True)
    concurrency = models.PositiveIntegerField(default=8)
    timeout_s = models.FloatField(default=120.0)
    decoding = models.CharField(
        max_length=20, choices=Decoding.choices, default=Decoding.JSON_SCHEMA
    )
    extra_body = models.JSONField(default=dict, blank=True)
    offline = models.BooleanField(
        default=False, help_text="a label for imported judgments; no endpoint is called"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(concurrency__gte=1),
                name="judge_concurrency_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from .keyenv import api_key_env_refusal

        refusal = api_key_env_refusal(self.api_key_env)
        if refusal is not None:
            raise ValidationError({"api_key_env": refusal})


class Stage(models.TextChoices):
    TOURNAMENT = "tournament", "Stage A: tournament"
    RUBRIC = "rubric", "Stage B: rubric"


class Phase(models.TextChoices):
    RANDOM = "random", "balanced random"
    STRATIFIED = "stratified", "stratified"
    ADAPTIVE = "adaptive", "adaptive"


class JobStatus(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    PAUSED = "paused", "paused"
    CANCELLED = "cancelled", "cancelled"
    FAILED = "failed", "failed"
    DONE = "done", "done"


class JobStages(models.TextChoices):
    TOURNAMENT = "tournament", "tournament (Stage A)"
    RUBRIC = "rubric", "rubric (Stage B)"
    BOTH = "both", "both stages"


class JudgingJob(models.Model):
    """A dataset (optionally a subset of queries) x judge x stages, with its schedule
    parameters. Progress is derived from its windows; counters here are totals of
    requests that do not map to one window (retries, refused calls)."""

    dataset = models.ForeignKey(
        "benchmarks.Dataset", on_delete=models.CASCADE, related_name="judging_jobs"
    )
    judge = models.ForeignKey(Judge, on_delete=models.PROTECT, related_name="jobs")
    family = models.CharField(
        max_length=200,
        help_text="windows are shared by jobs of one family (default: judge name)",
    )
    stages = models.CharField(
        max_length=20, choices=JobStages.choices, default=JobStages.BOTH
    )
    query_ids = models.JSONField(
        null=True, blank=True, help_text="external query ids; empty = all"
    )
    params = models.JSONField(
        default=dict, blank=True, help_text="schedule parameters overriding defaults"
    )
    status = models.CharField(
        max_length=20, choices=JobStatus.choices, default=JobStatus.PENDING
    )
    error = models.TextField(blank=True)
    requests = models.PositiveIntegerField(default=0)
    retries = models.PositiveIntegerField(default=0)
    wasted = models.PositiveIntegerField(
        default=0,
        help_text="answers paid for but dropped: their runner had lost the window's claim",
    )
    run_token = models.CharField(
        max_length=32,
        blank=True,
        help_text="token of the current run; a take-over replaces it, fencing the old run",
    )
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status"], name="job_status")]

    def __str__(self) -> str:
        return f"job {self.pk}: {self.judge_id} on {self.dataset_id}"


class UnitStatus(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    DONE = "done", "done"


class JudgingUnit(models.Model):
    """One (query, stage) of a job: the unit of work lanes share.

    Lanes (Celery tasks on any worker) claim units with compare-and-set under the
    job's current run token and hold them with a lease their heartbeat renews; a
    dead lane's units are taken over by the others when the lease runs out. A unit is
    done when its stage's planner has nothing left to ask.
    """

    job = models.ForeignKey(JudgingJob, on_delete=models.CASCADE, related_name="units")
    query = models.ForeignKey(
        "benchmarks.Query", on_delete=models.CASCADE, related_name="+"
    )
    stage = models.CharField(max_length=20, choices=Stage.choices)
    status = models.CharField(
        max_length=20, choices=UnitStatus.choices, default=UnitStatus.PENDING
    )
    claim = models.CharField(max_length=32, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "query", "stage"], name="unit_unique_query_stage"
            ),
        ]
        indexes = [models.Index(fields=["job", "status"], name="unit_job_status")]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.query_id}/{self.stage}"


class WindowStatus(models.TextChoices):
    PLANNED = "planned", "planned"
    IN_FLIGHT = "in_flight", "in flight"
    DONE = "done", "done"


class InvalidCategory(models.TextChoices):
    NONE = "", "valid"
    NO_JSON = "no_json", "no JSON"
    INVALID_JSON = "invalid_json", "invalid JSON"
    SCHEMA = "schema", "schema"
    INCOMPLETE = "incomplete", "incomplete"
    TRUNCATED = "truncated", "truncated"
    REFUSED = "refused", "refused"


class JudgmentWindow(models.Model):
    """One window asked of a judge: the ordered documents, the raw answer, the parse.

    Unique per (family, query, stage, window sequence) so nothing is stored or paid
    for twice. ``status`` moves planned -> in_flight (claimed, with a lease) -> done.
    """

    family = models.CharField(max_length=200)
    judge = models.ForeignKey(Judge, on_delete=models.PROTECT, related_name="windows")
    job = models.ForeignKey(
        JudgingJob,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="windows",
    )
    query = models.ForeignKey(
        "benchmarks.Query", on_delete=models.CASCADE, related_name="judgment_windows"
    )
    stage = models.CharField(max_length=20, choices=Stage.choices)
    phase = models.CharField(max_length=20, choices=Phase.choices)
    seq = models.PositiveIntegerField(
        help_text="window sequence within (family, query, stage)"
    )
    batch = models.PositiveIntegerField(
        null=True, blank=True, help_text="adaptive batch number"
    )
    mirrored = models.BooleanField(
        default=False, help_text="the reversed copy of the previous window"
    )
    doc_ids = models.JSONField(help_text="external document ids in prompt order")
    status = models.CharField(
        max_length=20, choices=WindowStatus.choices, default=WindowStatus.PLANNED
    )
    lease_until = models.DateTimeField(null=True, blank=True)
    claim = models.CharField(
        max_length=32, blank=True, help_text="token of the runner that holds the window"
    )
    valid = models.BooleanField(null=True)
    invalid_category = models.CharField(
        max_length=20,
        choices=InvalidCategory.choices,
        default=InvalidCategory.NONE,
        blank=True,
    )
    invalid_reason = models.TextField(blank=True)
    raw_response = models.TextField(blank=True)
    scores = models.JSONField(
        null=True, blank=True, help_text="Stage A: one score per document"
    )
    ranking = models.JSONField(
        null=True, blank=True, help_text="Stage A: stated ranking (doc ids)"
    )
    answers = models.JSONField(
        null=True, blank=True, help_text="Stage B: per document, five 0/1 answers"
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    latency_ms = models.PositiveIntegerField(default=0)
    prompt_sha256 = models.CharField(max_length=64, blank=True)
    prompt_version = models.CharField(max_length=20, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["query_id", "stage", "seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["family", "query", "stage", "seq"], name="window_unique_seq"
            ),
            models.CheckConstraint(
                condition=~models.Q(status="done") | models.Q(valid__isnull=False),
                name="window_done_has_validity",
            ),
        ]
        indexes = [
            models.Index(fields=["job", "status"], name="window_job_status"),
            models.Index(
                fields=["family", "stage", "status"], name="window_family_stage"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.family}/{self.query_id}/{self.stage}#{self.seq}"
