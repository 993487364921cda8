"""REST API v1 of the benchmarks app: thin views over selectors and services."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from . import selectors, services
from .models import Upload, UploadKind, UploadStatus


class DatasetOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    protocol = serializers.CharField()
    description = serializers.CharField()
    created_at = serializers.DateTimeField()
    n_queries = serializers.IntegerField()
    n_documents = serializers.IntegerField()
    n_systems = serializers.IntegerField()
    n_qrels = serializers.IntegerField()
    n_pool = serializers.IntegerField()
    n_rankings = serializers.IntegerField()


class DatasetListApi(APIView):
    @extend_schema(responses=DatasetOutput(many=True))
    def get(self, request: Request) -> Response:
        datasets = selectors.dataset_list(user=request.user)
        return Response(DatasetOutput(datasets, many=True).data)


class DatasetDetailApi(APIView):
    @extend_schema(responses=DatasetOutput)
    def get(self, request: Request, dataset: str) -> Response:
        obj = selectors.dataset_get(user=request.user, ref=dataset)
        return Response(DatasetOutput(obj).data)


class _PagedListApi(APIView):
    """A paginated list of one dataset's rows (queries, documents or systems)."""

    class Pagination(PageNumberPagination):
        page_size = 50
        page_size_query_param = "page_size"
        max_page_size = 500

    def paginate(self, request: Request, queryset, serializer_class) -> Response:
        paginator = self.Pagination()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(serializer_class(page, many=True).data)


class QueryListApi(_PagedListApi):
    class QueryOutput(serializers.Serializer):
        id = serializers.CharField(source="external_id")
        text = serializers.CharField()
        n_pool = serializers.IntegerField()
        n_qrels = serializers.IntegerField()

    @extend_schema(responses=QueryOutput(many=True))
    def get(self, request: Request, dataset: str) -> Response:
        obj = selectors.dataset_get(user=request.user, ref=dataset)
        return self.paginate(
            request, selectors.query_list(dataset=obj), self.QueryOutput
        )


class DocumentListApi(_PagedListApi):
    class DocumentOutput(serializers.Serializer):
        id = serializers.CharField(source="external_id")
        title = serializers.CharField()
        text = serializers.CharField()

    @extend_schema(responses=DocumentOutput(many=True))
    def get(self, request: Request, dataset: str) -> Response:
        obj = selectors.dataset_get(user=request.user, ref=dataset)
        return self.paginate(
            request, selectors.document_list(dataset=obj), self.DocumentOutput
        )


class SystemOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    n_rankings = serializers.IntegerField()


class SystemListApi(_PagedListApi):
    @extend_schema(responses=SystemOutput(many=True))
    def get(self, request: Request, dataset: str) -> Response:
        obj = selectors.dataset_get(user=request.user, ref=dataset)
        return self.paginate(request, selectors.system_list(dataset=obj), SystemOutput)


class UploadOutput(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    status = serializers.CharField()
    dataset = serializers.CharField(source="dataset_name")
    system = serializers.CharField(source="system_name")
    files = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField()

    def get_files(self, upload: Upload) -> dict[str, str]:
        return {role: f["name"] for role, f in upload.files.items()}

    def get_error(self, upload: Upload) -> dict | None:
        if upload.status != UploadStatus.FAILED:
            return None
        return {
            "message": upload.error,
            "file": upload.error_file or None,
            "line": upload.error_line,
        }

    def get_progress(self, upload: Upload) -> dict:
        return selectors.upload_progress(upload=upload)


class RunUploadApi(APIView):
    """Upload a TREC run file as a (new or replaced) system. Staff only.

    The file is stored and imported by a worker: the answer is 202 with the
    upload; poll ``GET /api/v1/uploads/ID`` until its status is done or failed
    (then ``error`` names the file, line and problem)."""

    parser_classes = [MultiPartParser, FormParser]

    class Input(serializers.Serializer):
        system = serializers.CharField(max_length=200)
        file = serializers.FileField()
        replace = serializers.BooleanField(default=False)
        description = serializers.CharField(
            required=False, allow_blank=True, default=""
        )

    @extend_schema(request=Input, responses={202: UploadOutput})
    def post(self, request: Request, dataset: str) -> Response:
        obj = selectors.dataset_get(user=request.user, ref=dataset)
        data = self.Input(data=request.data)
        data.is_valid(raise_exception=True)
        upload = services.upload_create(
            kind=UploadKind.RUN,
            files={"run": data.validated_data["file"]},
            dataset_name=obj.name,
            dataset=obj,
            system_name=data.validated_data["system"],
            description=data.validated_data["description"],
            replace=data.validated_data["replace"],
            created_by=request.user,
        )
        return Response(UploadOutput(upload).data, status=status.HTTP_202_ACCEPTED)


class UploadDetailApi(APIView):
    """An upload's status, progress and (if refused) error with file and line."""

    @extend_schema(responses=UploadOutput)
    def get(self, request: Request, upload_id: int) -> Response:
        upload = selectors.upload_get(user=request.user, pk=upload_id)
        return Response(UploadOutput(upload).data)
