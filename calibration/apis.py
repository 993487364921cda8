"""REST API v1 of the calibration app: thin views over selectors and services."""

from __future__ import annotations

import io

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_serializer,
)
from rest_framework import serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from benchmarks.selectors import dataset_get
from rcp.ndcg import PROTOCOLS
from rcp_platform.exceptions import ApplicationError

from . import selectors, services
from .models import RequestedMode


class FitOutput(serializers.Serializer):
    id = serializers.IntegerField()
    datasets = serializers.SerializerMethodField()
    source = serializers.CharField()
    requested_mode = serializers.CharField()
    mode = serializers.CharField()
    family = serializers.CharField()
    status = serializers.CharField(
        help_text="pending, running, done (converged), unconverged (results stored, "
        "not trustworthy) or failed"
    )
    converged = serializers.BooleanField(allow_null=True)
    error = serializers.CharField(help_text="why the fit failed or did not converge")
    fingerprint = serializers.CharField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField()
    heartbeat_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField()
    n_queries = serializers.IntegerField()
    n_documents = serializers.IntegerField()

    def get_datasets(self, fit) -> list[str]:
        # Prefetched by the selector: sorting here costs no query.
        return sorted(d.name for d in fit.datasets.all())


class FitDetailOutput(FitOutput):
    items = serializers.JSONField()
    diagnostics = serializers.JSONField()


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 1000


class FitListApi(APIView):
    @extend_schema(responses=FitOutput(many=True))
    def get(self, request: Request) -> Response:
        paginator = Pagination()
        page = paginator.paginate_queryset(
            selectors.fit_list(user=request.user), request, view=self
        )
        return paginator.get_paginated_response(FitOutput(page, many=True).data)


class FitCreateApi(APIView):
    """Queue a calibration (staff only); the fit runs as a Celery job."""

    @extend_schema_serializer(component_name="FitCreateInput")
    class Input(serializers.Serializer):
        datasets = serializers.ListField(
            child=serializers.CharField(max_length=200), min_length=1
        )
        mode = serializers.ChoiceField(
            choices=RequestedMode.values, default=RequestedMode.AUTO
        )
        family = serializers.CharField(required=False, allow_blank=True, default="")

    @extend_schema(request=Input, responses={202: FitOutput})
    def post(self, request: Request) -> Response:
        data = self.Input(data=request.data)
        data.is_valid(raise_exception=True)
        datasets = [
            dataset_get(user=request.user, ref=name)
            for name in data.validated_data["datasets"]
        ]
        fit = services.calibration_fit_request(
            datasets=datasets,
            mode=data.validated_data["mode"],
            family=data.validated_data["family"] or None,
            created_by=request.user,
        )
        fit = selectors.fit_get(user=request.user, pk=fit.pk)
        return Response(FitOutput(fit).data, status=status.HTTP_202_ACCEPTED)


class FitDetailApi(APIView):
    @extend_schema(responses=FitDetailOutput)
    def get(self, request: Request, pk: int) -> Response:
        fit = selectors.fit_get(user=request.user, pk=pk)
        return Response(FitDetailOutput(fit).data)


class FitQueryListApi(APIView):
    """Per-query scale, offset and flags of a fit (``?flagged=1``: flagged only)."""

    # Its own schema name: benchmarks' QueryListApi has a QueryOutput too.
    @extend_schema_serializer(component_name="FitQuery")
    class QueryOutput(serializers.Serializer):
        dataset = serializers.CharField(source="query.dataset.name")
        query_id = serializers.CharField(source="query.external_id")
        tau = serializers.FloatField()
        alpha = serializers.FloatField()
        has_rubric = serializers.BooleanField()
        n_documents = serializers.IntegerField()
        tournament_windows = serializers.IntegerField()
        rubric_windows = serializers.IntegerField()
        invalid_windows = serializers.IntegerField()
        flagged = serializers.BooleanField()
        flags = serializers.ListField(child=serializers.CharField())

    @extend_schema(
        parameters=[OpenApiParameter("flagged", bool)],
        responses=QueryOutput(many=True),
    )
    def get(self, request: Request, pk: int) -> Response:
        fit = selectors.fit_get(user=request.user, pk=pk)
        rows = selectors.fit_query_rows(
            fit=fit, flagged_only=request.query_params.get("flagged") in ("1", "true")
        )
        paginator = Pagination()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(self.QueryOutput(page, many=True).data)


class FitRetryApi(APIView):
    """Queue a failed fit again (staff only)."""

    @extend_schema(request=None, responses={202: FitOutput})
    def post(self, request: Request, pk: int) -> Response:
        fit = selectors.fit_get(user=request.user, pk=pk)
        services.calibration_fit_retry(fit=fit)
        fit = selectors.fit_get(user=request.user, pk=pk)
        return Response(FitOutput(fit).data, status=status.HTTP_202_ACCEPTED)


class AbilityListApi(APIView):
    class AbilityOutput(serializers.Serializer):
        dataset = serializers.CharField(source="query.dataset.name")
        query_id = serializers.CharField(source="query.external_id")
        doc_id = serializers.CharField(source="document.external_id")
        theta_bt = serializers.FloatField()
        theta_bt_se = serializers.FloatField()
        theta = serializers.FloatField()
        theta_se = serializers.FloatField()
        gain = serializers.FloatField()
        count_gain = serializers.FloatField()
        placements = serializers.IntegerField()

    @extend_schema(
        parameters=[OpenApiParameter("query", str, description="external query id")],
        responses=AbilityOutput(many=True),
    )
    def get(self, request: Request, pk: int) -> Response:
        fit = selectors.fit_get(user=request.user, pk=pk)
        rows = selectors.ability_list(fit=fit, query=request.query_params.get("query"))
        paginator = Pagination()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(
            self.AbilityOutput(page, many=True).data
        )


class LeaderboardApi(APIView):
    @extend_schema_serializer(component_name="LeaderboardInput")
    class Input(serializers.Serializer):
        dataset = serializers.ListField(child=serializers.CharField(), min_length=1)
        k = serializers.IntegerField(min_value=1, max_value=1000, default=10)
        protocol = serializers.ChoiceField(choices=sorted(PROTOCOLS), required=False)
        allow_unconverged = serializers.BooleanField(default=False)

    @extend_schema(
        parameters=[
            OpenApiParameter("dataset", str, many=True, required=True),
            OpenApiParameter("k", int),
            OpenApiParameter("protocol", str, enum=sorted(PROTOCOLS)),
            OpenApiParameter(
                "allow_unconverged",
                bool,
                description="score with an unconverged fit (refused by default)",
            ),
        ],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request: Request) -> Response:
        params = {
            "dataset": request.query_params.getlist("dataset"),
            **{k: v for k, v in request.query_params.items() if k != "dataset"},
        }
        data = self.Input(data=params)
        data.is_valid(raise_exception=True)
        datasets = [
            dataset_get(user=request.user, ref=ref)
            for ref in data.validated_data["dataset"]
        ]
        board = selectors.leaderboard_compute(
            datasets=datasets,
            k=data.validated_data["k"],
            protocol=data.validated_data.get("protocol"),
            allow_unconverged=data.validated_data["allow_unconverged"],
        )
        return Response(board)


class GainsExportApi(APIView):
    """The fit's gains of one dataset as TSV (``query_id doc_id theta gain ...``)."""

    @extend_schema(
        parameters=[OpenApiParameter("dataset", str)],
        responses={(200, "text/tab-separated-values"): OpenApiTypes.STR},
    )
    def get(self, request: Request, pk: int) -> HttpResponse:
        fit = selectors.fit_get(user=request.user, pk=pk)
        names = sorted(d.name for d in fit.datasets.all())
        ref = request.query_params.get("dataset") or (
            names[0] if len(names) == 1 else ""
        )
        if ref not in names:
            raise ApplicationError(
                f"name one of the fit's datasets with ?dataset= ({', '.join(names)})"
            )
        dataset = dataset_get(user=request.user, ref=ref)
        out = io.StringIO()
        services.gains_export(dataset=dataset, out=out, fit=fit)
        response = HttpResponse(
            out.getvalue(), content_type="text/tab-separated-values"
        )
        response["Content-Disposition"] = (
            f'attachment; filename="gains-{dataset.name}-fit{fit.pk}.tsv"'
        )
        return response
