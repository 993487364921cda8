"""The shared vocabulary: datasets, queries, documents, pools, qrels, systems, rankings.

These names are used by the other apps and by external tools; keep them.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Protocol(models.TextChoices):
    """Evaluation protocol presets (tie rule, gain form, cut-offs) of the reference."""

    PLAIN = "plain", "plain"
    NANOBEIR = "nanobeir", "NanoBEIR"
    BRIGHT = "bright", "BRIGHT"
    TRECDL = "trecdl", "TREC DL"
    VIDORE = "vidore", "ViDoRe"
    MTEB = "mteb", "MTEB"


class Dataset(models.Model):
    name = models.CharField(max_length=200, unique=True)
    protocol = models.CharField(
        max_length=20, choices=Protocol.choices, default=Protocol.PLAIN
    )
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Query(models.Model):
    dataset = models.ForeignKey(
        Dataset, on_delete=models.CASCADE, related_name="queries"
    )
    external_id = models.CharField(max_length=200)
    text = models.TextField()

    class Meta:
        verbose_name_plural = "queries"
        ordering = ["dataset_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "external_id"], name="query_unique_external_id"
            )
        ]

    def __str__(self) -> str:
        return self.external_id


class Document(models.Model):
    dataset = models.ForeignKey(
        Dataset, on_delete=models.CASCADE, related_name="documents"
    )
    external_id = models.CharField(max_length=200)
    title = models.TextField(blank=True)
    text = models.TextField(blank=True)

    class Meta:
        ordering = ["dataset_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "external_id"], name="document_unique_external_id"
            )
        ]

    def __str__(self) -> str:
        return self.external_id


class PoolEntry(models.Model):
    """A document in a query's candidate pool (what the judge sees), with its pool rank."""

    query = models.ForeignKey(Query, on_delete=models.CASCADE, related_name="pool")
    document = models.ForeignKey(
        Document, on_delete=models.CASCADE, related_name="pool_entries"
    )
    rank = models.PositiveIntegerField()

    class Meta:
        verbose_name_plural = "pool entries"
        ordering = ["query_id", "rank"]
        constraints = [
            models.UniqueConstraint(
                fields=["query", "document"], name="pool_unique_doc"
            ),
            models.CheckConstraint(
                condition=models.Q(rank__gte=1), name="pool_rank_positive"
            ),
        ]
        indexes = [models.Index(fields=["query", "rank"], name="pool_query_rank")]

    def __str__(self) -> str:
        # Ids only: a __str__ that follows relations would cost a query per row.
        return f"query {self.query_id} / doc {self.document_id} @ {self.rank}"


class Qrel(models.Model):
    """A graded human relevance label."""

    query = models.ForeignKey(Query, on_delete=models.CASCADE, related_name="qrels")
    document = models.ForeignKey(
        Document, on_delete=models.CASCADE, related_name="qrels"
    )
    grade = models.FloatField()

    class Meta:
        ordering = ["query_id", "document_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["query", "document"], name="qrel_unique_doc"
            )
        ]
        indexes = [models.Index(fields=["document"], name="qrel_document")]

    def __str__(self) -> str:
        return f"query {self.query_id} / doc {self.document_id} = {self.grade:g}"


class System(models.Model):
    """A reranker (or retriever) whose rankings are evaluated."""

    dataset = models.ForeignKey(
        Dataset, on_delete=models.CASCADE, related_name="systems"
    )
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["dataset_id", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "name"], name="system_unique_name"
            )
        ]

    def __str__(self) -> str:
        return self.name


class RankingEntry(models.Model):
    """One document in a system's ranking of a query. ``rank`` is 1-based, by score."""

    system = models.ForeignKey(
        System, on_delete=models.CASCADE, related_name="rankings"
    )
    query = models.ForeignKey(Query, on_delete=models.CASCADE, related_name="rankings")
    document = models.ForeignKey(
        Document, on_delete=models.CASCADE, related_name="rankings"
    )
    rank = models.PositiveIntegerField()
    score = models.FloatField()

    class Meta:
        verbose_name_plural = "ranking entries"
        ordering = ["system_id", "query_id", "rank"]
        constraints = [
            models.UniqueConstraint(
                fields=["system", "query", "document"], name="ranking_unique_doc"
            ),
            models.CheckConstraint(
                condition=models.Q(rank__gte=1), name="ranking_rank_positive"
            ),
        ]
        indexes = [
            models.Index(
                fields=["system", "query", "rank"], name="ranking_system_query_rank"
            )
        ]

    def __str__(self) -> str:
        return f"system {self.system_id} / query {self.query_id} / doc {self.document_id} @ {self.rank}"


class UploadKind(models.TextChoices):
    DATASET = "dataset", "dataset import"
    RUN = "run", "run"


class UploadStatus(models.TextChoices):
    PENDING = "pending", "queued"
    RUNNING = "running", "importing"
    DONE = "done", "done"
    FAILED = "failed", "failed"


class Upload(models.Model):
    """Files sent from the browser, imported by a worker (benchmarks/UPLOADS.md).

    ``files`` maps a role (corpus, queries, qrels, pools, run) to
    {"path": relative to MEDIA_ROOT, "name": as the user sent it, "lines": n}; an
    import error keeps the file, line and message for the page.
    """

    kind = models.CharField(max_length=10, choices=UploadKind.choices)
    status = models.CharField(
        max_length=10, choices=UploadStatus.choices, default=UploadStatus.PENDING
    )
    # Dataset imports: the name to create. Runs: the dataset receiving the run.
    dataset_name = models.CharField(max_length=200)
    dataset = models.ForeignKey(
        Dataset,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="uploads",
    )
    system_name = models.CharField(max_length=200, blank=True)
    protocol = models.CharField(
        max_length=20, choices=Protocol.choices, default=Protocol.PLAIN
    )
    description = models.TextField(blank=True)
    replace = models.BooleanField(default=False)
    files = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    error_file = models.CharField(max_length=300, blank=True)
    error_line = models.PositiveIntegerField(null=True, blank=True)
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

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(kind="run") | ~models.Q(system_name=""),
                name="upload_run_has_system",
            )
        ]

    def __str__(self) -> str:
        return f"upload {self.pk} ({self.kind}, {self.status})"
