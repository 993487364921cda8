"""REST API v1 of the benchmarks app: thin views over selectors and services."""

from __future__ import annotations

import tempfile
from pathlib import Path

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from . import selectors, services


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


class RunUploadApi(APIView):
    """Upload a TREC run file as a (new or replaced) system. Staff only."""

    parser_classes = [MultiPartParser, FormParser]

    class Input(serializers.Serializer):
        system = serializers.CharField(max_length=200)
        file = serializers.FileField()
        replace = serializers.BooleanField(default=False)
        description = serializers.CharField(
            required=False, allow_blank=True, default=""
        )

    @extend_schema(request=Input, responses={201: SystemOutput})
    def post(self, request: Request, dataset: str) -> Response:
        obj = selectors.dataset_get(user=request.user, ref=dataset)
        data = self.Input(data=request.data)
        data.is_valid(raise_exception=True)
        upload = data.validated_data["file"]
        suffix = ".gz" if upload.name.endswith(".gz") else ""
        with tempfile.TemporaryDirectory() as tmp:
            # Keep the uploaded name so errors point at the file the user sent.
            path = Path(tmp) / (Path(upload.name).name or f"run{suffix}")
            with open(path, "wb") as out:
                for chunk in upload.chunks():
                    out.write(chunk)
            try:
                system = services.run_import(
                    dataset=obj,
                    system_name=data.validated_data["system"],
                    path=path,
                    description=data.validated_data["description"],
                    replace=data.validated_data["replace"],
                )
            except services.ImportFailed as exc:
                # Name the file as the user sent it, not our temporary copy.
                raise services.ImportFailed(
                    exc.message.replace(str(path), upload.name),
                    path=upload.name,
                    line=exc.line,
                ) from exc
        system = selectors.system_list(dataset=obj).get(pk=system.pk)
        return Response(SystemOutput(system).data, status=status.HTTP_201_CREATED)
