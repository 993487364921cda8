"""Admin of the panels app: panels are edited here; runs and requests are read-only
(they change only through the services)."""

from __future__ import annotations

from django.contrib import admin

from .models import Panel, PanelRequest, PanelRun


@admin.register(Panel)
class PanelAdmin(admin.ModelAdmin):
    list_display = ("name", "created_at")
    filter_horizontal = ("judges",)


@admin.register(PanelRun)
class PanelRunAdmin(admin.ModelAdmin):
    list_display = ("id", "study", "panel", "mode", "status", "answered", "total")
    list_filter = ("status", "mode")
    readonly_fields = [f.name for f in PanelRun._meta.fields]

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(PanelRequest)
class PanelRequestAdmin(admin.ModelAdmin):
    list_display = ("id", "run", "judge", "contest", "rep", "status", "side", "valid")
    list_filter = ("status", "valid")
    readonly_fields = [f.name for f in PanelRequest._meta.fields]

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return False
