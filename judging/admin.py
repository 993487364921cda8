"""Django admin for judges, jobs and windows (list views without N+1)."""

from django.contrib import admin

from .models import Judge, JudgingJob, JudgmentWindow


@admin.register(Judge)
class JudgeAdmin(admin.ModelAdmin):
    list_display = ["name", "model", "concurrency", "decoding", "offline", "created_at"]
    list_filter = ["decoding", "offline"]
    search_fields = ["name", "model"]


@admin.register(JudgingJob)
class JudgingJobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "dataset",
        "judge",
        "stages",
        "status",
        "requests",
        "created_at",
    ]
    list_filter = ["status", "stages", "judge"]
    list_select_related = ["dataset", "judge"]
    search_fields = ["dataset__name", "judge__name", "family"]
    readonly_fields = [
        "requests",
        "retries",
        "input_tokens",
        "output_tokens",
        "heartbeat_at",
    ]


@admin.register(JudgmentWindow)
class JudgmentWindowAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "family",
        "query",
        "stage",
        "phase",
        "seq",
        "status",
        "valid",
        "invalid_category",
    ]
    list_filter = ["stage", "phase", "status", "valid", "invalid_category", "family"]
    list_select_related = ["query"]
    search_fields = ["query__external_id", "family"]
    raw_id_fields = ["query", "job", "judge"]
    show_full_result_count = False
