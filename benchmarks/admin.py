"""Django admin for every benchmarks model: search, filters, no N+1 in list views."""

from django.contrib import admin

from .models import Dataset, Document, PoolEntry, Qrel, Query, RankingEntry, System


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["name", "protocol", "created_at"]
    list_filter = ["protocol"]
    search_fields = ["name", "description"]


@admin.register(Query)
class QueryAdmin(admin.ModelAdmin):
    list_display = ["external_id", "dataset", "text"]
    list_filter = ["dataset"]
    list_select_related = ["dataset"]
    search_fields = ["external_id", "text"]
    show_full_result_count = False


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = ["external_id", "dataset", "title"]
    list_filter = ["dataset"]
    list_select_related = ["dataset"]
    search_fields = ["external_id", "title"]
    show_full_result_count = False


@admin.register(PoolEntry)
class PoolEntryAdmin(admin.ModelAdmin):
    list_display = ["query", "document", "rank"]
    list_filter = ["query__dataset"]
    list_select_related = ["query", "document"]
    search_fields = ["query__external_id", "document__external_id"]
    raw_id_fields = ["query", "document"]
    show_full_result_count = False


@admin.register(Qrel)
class QrelAdmin(admin.ModelAdmin):
    list_display = ["query", "document", "grade"]
    list_filter = ["query__dataset", "grade"]
    list_select_related = ["query", "document"]
    search_fields = ["query__external_id", "document__external_id"]
    raw_id_fields = ["query", "document"]
    show_full_result_count = False


@admin.register(System)
class SystemAdmin(admin.ModelAdmin):
    list_display = ["name", "dataset", "created_at"]
    list_filter = ["dataset"]
    list_select_related = ["dataset"]
    search_fields = ["name", "description"]


@admin.register(RankingEntry)
class RankingEntryAdmin(admin.ModelAdmin):
    list_display = ["system", "query", "document", "rank", "score"]
    list_filter = ["system__dataset", "system"]
    list_select_related = ["system", "query", "document"]
    search_fields = ["query__external_id", "document__external_id", "system__name"]
    raw_id_fields = ["system", "query", "document"]
    show_full_result_count = False
