"""Admin of the calibration app: read-only views (fits are written by services)."""

from __future__ import annotations

from django.contrib import admin

from .models import CalibrationFit, DocumentAbility, QueryCalibration


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(CalibrationFit)
class CalibrationFitAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "source",
        "mode",
        "family",
        "status",
        "fingerprint",
        "created_at",
    ]
    list_filter = ["status", "source", "mode"]


@admin.register(QueryCalibration)
class QueryCalibrationAdmin(ReadOnlyAdmin):
    list_display = ["id", "fit_id", "query_id", "tau", "alpha", "has_rubric", "flagged"]
    list_select_related = False


@admin.register(DocumentAbility)
class DocumentAbilityAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "fit_id",
        "query_id",
        "document_id",
        "theta",
        "gain",
        "count_gain",
    ]
    raw_id_fields = ["fit", "query", "document"]
