"""Django admin of the annotation app.

Annotators get their own list (a proxy of User): bulk creation from a CSV, password
change (Django's own form), deactivation that also returns open leases to the pool.
Studies, contests and assignments are read-only here: they change only through the
services (create_study, the grading API).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path

from rcp_platform.exceptions import ApplicationError

from . import services
from .models import (
    Annotator,
    Assignment,
    Contest,
    Grade,
    Release,
    Study,
    StudyLook,
    StudyMember,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class StudyMemberInline(admin.TabularInline):
    model = StudyMember
    extra = 0
    fields = [
        "annotator",
        "active",
        "added_at",
        "excluded_at",
        "excluded_by",
        "excluded_reason",
    ]
    # Exclusion goes through annotator_exclude (study page); the database refuses
    # to re-activate an excluded member (member_excluded_inactive_with_reason).
    readonly_fields = [
        "annotator",
        "added_at",
        "excluded_at",
        "excluded_by",
        "excluded_reason",
    ]
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Study)
class StudyAdmin(admin.ModelAdmin):
    list_display = ["name", "status", "per_contest", "depth", "created_at"]
    list_filter = ["status"]
    search_fields = ["name"]
    readonly_fields = [
        "fit",
        "datasets",
        "systems",
        "depth",
        "per_contest",
        "seed",
        "design",
        "status",
        "created_by",
        "created_at",
        "opened_at",
        "closed_at",
        "analysis_plan",
        "registered_plan",
        "registered_at",
    ]
    fields = [
        "name",
        "instructions",
        "lease_duration",
        "collect_order",
        "collect_comments",
        "gold_rate",
        "acceptance",
        *readonly_fields,
    ]
    inlines = [StudyMemberInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # studies are sampled by create_study / the studies page


@admin.register(Contest)
class ContestAdmin(ReadOnlyAdmin):
    list_display = ["study", "position", "query", "system_a", "system_b", "cell"]
    list_filter = ["study", "cell"]
    list_select_related = ["study", "query", "system_a", "system_b"]
    show_full_result_count = False


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdmin):
    list_display = ["id", "contest", "annotator", "slot", "status", "expires_at"]
    list_filter = ["status", "contest__study"]
    list_select_related = ["contest__study", "annotator"]
    exclude = ["draft", "documents"]
    show_full_result_count = False


@admin.register(Grade)
class GradeAdmin(ReadOnlyAdmin):
    list_display = ["assignment", "document", "grade", "seconds"]
    list_select_related = ["assignment", "document"]
    exclude = ["comment"]
    show_full_result_count = False


class AnnotatorCsvForm(forms.Form):
    file = forms.FileField(
        help_text="CSV with a header: username,password[,email]. An empty password "
        "is generated and shown once."
    )
    study = forms.ModelChoiceField(
        queryset=Study.objects.order_by("-created_at"),
        required=False,
        help_text="invite everyone in the file to this study",
    )
    update = forms.BooleanField(
        required=False,
        help_text="invite annotators that exist already (their password changes "
        "only where the row gives one)",
    )


@admin.register(Annotator)
class AnnotatorAdmin(UserAdmin):
    list_display = ["username", "email", "is_active", "last_login", "date_joined"]
    list_filter = ["is_active"]
    actions = ["deactivate", "activate"]
    change_list_template = "annotation/admin/annotator_changelist.html"
    fieldsets = (
        (None, {"fields": ("username", "password")}),
        ("Personal info", {"fields": ("first_name", "last_name", "email")}),
        ("Status", {"fields": ("is_active", "last_login", "date_joined")}),
    )
    readonly_fields = ["last_login", "date_joined"]

    def get_urls(self) -> list:
        return [
            path(
                "import/",
                self.admin_site.admin_view(self.import_csv),
                name="annotation_annotator_import",
            ),
            *super().get_urls(),
        ]

    def save_model(self, request: HttpRequest, obj, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        obj.groups.add(services.annotator_group_ensure())

    @admin.action(description="Deactivate (and return their open leases to the pool)")
    def deactivate(self, request: HttpRequest, queryset: QuerySet) -> None:
        released = sum(services.annotator_deactivate(user=u) for u in queryset)
        self.message_user(
            request, f"{queryset.count()} deactivated, {released} leases released."
        )

    @admin.action(description="Activate")
    def activate(self, request: HttpRequest, queryset: QuerySet) -> None:
        for user in queryset:
            services.annotator_activate(user=user)
        self.message_user(request, f"{queryset.count()} activated.")

    def import_csv(self, request: HttpRequest) -> HttpResponse:
        """Bulk-create annotators from an uploaded CSV (all rows or none)."""
        if not self.has_add_permission(request):
            return redirect("admin:index")
        form = AnnotatorCsvForm(request.POST or None, request.FILES or None)
        created = None
        if request.method == "POST" and form.is_valid():
            raw = form.cleaned_data["file"].read()
            try:
                created = services.annotators_import(
                    text=raw.decode("utf-8-sig"),
                    study=form.cleaned_data["study"],
                    update=form.cleaned_data["update"],
                )
            except UnicodeDecodeError:
                form.add_error("file", "the file is not UTF-8 text")
            except ApplicationError as exc:
                form.add_error("file", exc.message)
            else:
                messages.success(request, f"{len(created)} annotators imported.")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Import annotators from CSV",
            "form": form,
            "created": created,
        }
        return TemplateResponse(
            request, "annotation/admin/annotator_import.html", context
        )


@admin.register(Release)
class ReleaseAdmin(ReadOnlyAdmin):
    """Releases, read-only: they are numbered, built and retried by the services
    (study page, ``export_release``); their files never change."""

    list_display = [
        "study",
        "number",
        "status",
        "include_text",
        "created_at",
        "finished_at",
        "checksum",
    ]
    list_filter = ["status"]
    search_fields = ["study__name", "checksum"]
    readonly_fields = [
        "study",
        "number",
        "status",
        "include_text",
        "checksum",
        "path",
        "error",
        "created_by",
        "created_at",
        "finished_at",
        "lease_expires_at",
    ]


@admin.register(StudyLook)
class StudyLookAdmin(ReadOnlyAdmin):
    """Interim looks, read-only: recorded by the report services while a study is
    open (``services.looks``); boundaries are recomputed from them in the report."""

    list_display = ["study", "number", "created_at", "information", "rate", "z"]
    search_fields = ["study__name"]
    readonly_fields = [
        "study",
        "number",
        "created_at",
        "fingerprint",
        "complete_contests",
        "information",
        "k",
        "n",
        "rate",
        "chance",
        "z",
    ]
