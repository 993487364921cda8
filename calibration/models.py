"""Calibration fits: shared items, per-query scale/offset, per-document abilities.

A ``CalibrationFit`` covers one dataset or a suite of datasets fitted together (shared
items). It is produced either from judgment windows (``source=judgments``) or from
published labels (``source=import``, ``import_gains``), and is immutable once finished:
a new calibration is a new fit. A fit from judgments ends ``done`` only when every
optimiser converged (a database constraint); otherwise ``unconverged`` (rows stored
for inspection, never used without an explicit override) or ``failed``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class FitSource(models.TextChoices):
    JUDGMENTS = "judgments", "fitted from judgments"
    IMPORT = "import", "imported gains (released labels)"


class RequestedMode(models.TextChoices):
    AUTO = "auto", "auto"
    TOURNAMENT = "tournament", "tournament"
    RUBRIC_ONLY = "rubric_only", "rubric-only"


class FitMode(models.TextChoices):
    TOURNAMENT = "tournament", "tournament (2PL over frozen BT abilities)"
    RUBRIC_ONLY = "rubric_only", "rubric-only (marginal 2PL, EAP abilities)"
    RELEASED = "released", "released labels (no fit)"


class FitStatus(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    DONE = "done", "done"
    UNCONVERGED = "unconverged", "unconverged (results stored, not trusted)"
    FAILED = "failed", "failed"


class CalibrationFit(models.Model):
    """One calibration of one or more datasets (a suite shares its items).

    ``items`` = {"criteria": [...], "gamma": [...], "beta": [...]} (empty for imported
    gains); ``diagnostics`` holds optimiser state, calibration quality (ECE/Brier, tau
    spread, criterion correlations) and coverage. ``fingerprint`` is a 16-hex digest of
    mode, items, per-query parameters and abilities.
    """

    datasets = models.ManyToManyField(
        "benchmarks.Dataset", related_name="calibration_fits"
    )
    source = models.CharField(
        max_length=20, choices=FitSource.choices, default=FitSource.JUDGMENTS
    )
    requested_mode = models.CharField(
        max_length=20, choices=RequestedMode.choices, default=RequestedMode.AUTO
    )
    mode = models.CharField(max_length=20, choices=FitMode.choices, blank=True)
    family = models.CharField(
        max_length=200, blank=True, help_text="judge family whose windows were fitted"
    )
    status = models.CharField(
        max_length=20, choices=FitStatus.choices, default=FitStatus.PENDING
    )
    error = models.TextField(blank=True)
    items = models.JSONField(default=dict, blank=True)
    diagnostics = models.JSONField(default=dict, blank=True)
    fingerprint = models.CharField(max_length=16, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="last sign of life of the running fit"
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    converged = models.BooleanField(
        null=True, blank=True, help_text="every optimiser converged (None: no fit ran)"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "-created_at"], name="fit_status")]
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(status="done") | ~models.Q(mode=""),
                name="fit_done_has_mode",
            ),
            # A fit from judgments is shown as a result only if it converged.
            models.CheckConstraint(
                condition=~models.Q(status="done", source="judgments")
                | models.Q(converged=True),
                name="fit_done_converged",
            ),
        ]

    def __str__(self) -> str:
        return f"fit {self.pk} ({self.mode or self.requested_mode}, {self.status})"


class QueryCalibration(models.Model):
    """Per-query scale tau > 0 and offset alpha (tournament mode; null otherwise)."""

    fit = models.ForeignKey(
        CalibrationFit, on_delete=models.CASCADE, related_name="query_rows"
    )
    query = models.ForeignKey(
        "benchmarks.Query", on_delete=models.CASCADE, related_name="+"
    )
    tau = models.FloatField(null=True, blank=True)
    alpha = models.FloatField(null=True, blank=True)
    has_rubric = models.BooleanField(default=False)
    n_documents = models.PositiveIntegerField(default=0)
    tournament_windows = models.PositiveIntegerField(default=0)
    rubric_windows = models.PositiveIntegerField(default=0)
    invalid_windows = models.PositiveIntegerField(default=0)
    flags = models.JSONField(
        default=list,
        blank=True,
        help_text="codes of rcp.irt.FLAG_TEXT (scale pinned by priors or a bound) "
        "and invalid_windows (> 5% invalid in a stage, or any adaptive)",
    )
    flagged = models.BooleanField(default=False, help_text="any flag")

    class Meta:
        ordering = ["fit_id", "query_id"]
        constraints = [
            models.UniqueConstraint(fields=["fit", "query"], name="fitquery_unique"),
            models.CheckConstraint(
                condition=models.Q(tau__isnull=True) | models.Q(tau__gt=0),
                name="fitquery_tau_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"fit {self.fit_id} / query {self.query_id}"


class DocumentAbility(models.Model):
    """A (query, document) of a fit: BT ability, calibrated ability, gains.

    ``theta`` (calibrated) and ``gain`` are null for uncalibrated documents (gain 0 in
    metrics); ``count_gain`` is null without rubric placements.
    """

    fit = models.ForeignKey(
        CalibrationFit, on_delete=models.CASCADE, related_name="abilities"
    )
    query = models.ForeignKey(
        "benchmarks.Query", on_delete=models.CASCADE, related_name="+"
    )
    document = models.ForeignKey(
        "benchmarks.Document", on_delete=models.CASCADE, related_name="+"
    )
    theta_bt = models.FloatField(null=True, blank=True)
    theta_bt_se = models.FloatField(null=True, blank=True)
    theta = models.FloatField(null=True, blank=True)
    theta_se = models.FloatField(null=True, blank=True)
    gain = models.FloatField(null=True, blank=True)
    count_gain = models.FloatField(null=True, blank=True)
    placements = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["fit_id", "query_id", "-gain", "document_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["fit", "query", "document"], name="ability_unique_doc"
            ),
            models.CheckConstraint(
                condition=models.Q(gain__isnull=True)
                | models.Q(gain__gte=0, gain__lte=1),
                name="ability_gain_unit_interval",
            ),
            models.CheckConstraint(
                condition=models.Q(count_gain__isnull=True)
                | models.Q(count_gain__gte=0, count_gain__lte=1),
                name="ability_count_gain_unit_interval",
            ),
        ]
        indexes = [models.Index(fields=["fit", "query"], name="ability_fit_query")]

    def __str__(self) -> str:
        return f"fit {self.fit_id} / query {self.query_id} / doc {self.document_id}"
