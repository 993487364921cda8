"""LLM panels: named sets of judges asked a study's own contests, blind.

A ``PanelRun`` asks every judge of a panel every contest of a study twice, with the
sides swapped (rcp_facts §6.4). Each question is one durable ``PanelRequest`` row,
planned when the run is created and unique per (run, judge, contest, rep): a resumed
or duplicated run claims only rows not yet answered, so nothing is asked twice.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Panel(models.Model):
    """A named set of judges (``judging.Judge`` rows, any OpenAI-compatible endpoint)."""

    name = models.CharField(max_length=200, unique=True)
    judges = models.ManyToManyField("judging.Judge", related_name="panels")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class PanelMode(models.TextChoices):
    LISTS = "lists", "lists: name the better of two lists"
    RUBRIC = "rubric", "rubric: answer the study's questions per document"


class RunStatus(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    PAUSED = "paused", "paused"
    FAILED = "failed", "failed"
    DONE = "done", "done"


class PanelRun(models.Model):
    """One panel asked one study's contests in one mode.

    Counters mirror the request rows (updated as answers are stored) so progress is
    one row read; ``heartbeat_at`` tells a live runner from a dead one (resume).
    """

    study = models.ForeignKey(
        "annotation.Study", on_delete=models.CASCADE, related_name="panel_runs"
    )
    panel = models.ForeignKey(Panel, on_delete=models.PROTECT, related_name="runs")
    mode = models.CharField(max_length=10, choices=PanelMode.choices)
    status = models.CharField(
        max_length=10, choices=RunStatus.choices, default=RunStatus.PENDING
    )
    error = models.TextField(blank=True)
    total = models.PositiveIntegerField(default=0, help_text="requests planned")
    answered = models.PositiveIntegerField(default=0, help_text="requests stored")
    valid = models.PositiveIntegerField(default=0)
    invalid = models.PositiveIntegerField(default=0)
    calls = models.PositiveIntegerField(default=0, help_text="chat calls made")
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    claim = models.CharField(max_length=32, blank=True)
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
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "panel", "mode"], name="panelrun_unique_mode"
            ),
            models.CheckConstraint(
                condition=models.Q(answered__lte=models.F("total")),
                name="panelrun_answered_le_total",
            ),
        ]

    def __str__(self) -> str:
        return f"panel {self.panel_id} on study {self.study_id} ({self.mode})"

    @property
    def progress(self) -> float:
        return self.answered / self.total if self.total else 0.0


class RequestStatus(models.TextChoices):
    PLANNED = "planned", "planned"
    IN_FLIGHT = "in_flight", "in flight"
    DONE = "done", "done"


class PanelRequest(models.Model):
    """One question to one judge: a contest shown in one order (``rep`` 1 or 2).

    ``first_side`` is the side ("A"/"B") shown as List 1 (lists mode); ``documents``
    the document pks in prompt order (rubric mode: the displayed documents; lists
    mode: {"list_1": [...], "list_2": [...]}). The raw answer is stored before it
    is parsed; ``choice`` is the parsed position ("1"/"2") in lists mode and
    ``side`` the side it names ("A", "B", or "tie" from a rubric pick).
    """

    run = models.ForeignKey(PanelRun, on_delete=models.CASCADE, related_name="requests")
    judge = models.ForeignKey(
        "judging.Judge", on_delete=models.PROTECT, related_name="panel_requests"
    )
    contest = models.ForeignKey(
        "annotation.Contest", on_delete=models.CASCADE, related_name="panel_requests"
    )
    rep = models.PositiveSmallIntegerField(help_text="1, or 2 with the sides swapped")
    first_side = models.CharField(max_length=1)
    documents = models.JSONField()
    status = models.CharField(
        max_length=10, choices=RequestStatus.choices, default=RequestStatus.PLANNED
    )
    claim = models.CharField(max_length=32, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    prompt_sha256 = models.CharField(max_length=64, blank=True)
    raw_response = models.TextField(blank=True)
    choice = models.CharField(max_length=4, blank=True)
    side = models.CharField(max_length=4, blank=True)
    answers = models.JSONField(
        null=True, blank=True, help_text="rubric: {document pk: {question: bool}}"
    )
    valid = models.BooleanField(null=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    latency_ms = models.PositiveIntegerField(default=0)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "contest_id", "judge_id", "rep"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "judge", "contest", "rep"], name="panelrequest_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(rep__in=[1, 2]), name="panelrequest_rep_1_or_2"
            ),
            models.CheckConstraint(
                condition=models.Q(first_side__in=["A", "B"]),
                name="panelrequest_first_side",
            ),
            models.CheckConstraint(
                condition=~models.Q(status="done") | models.Q(valid__isnull=False),
                name="panelrequest_done_has_validity",
            ),
        ]
        indexes = [
            models.Index(fields=["run", "status"], name="panelrequest_run_status"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} judge {self.judge_id} contest {self.contest_id} rep {self.rep}"
