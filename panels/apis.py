"""REST API of the panels app: panels, estimates, runs (launch, progress, pause).

Staff write, reviewers read (the default permission). A run is launched for
(study, panel, mode); launching again resumes it, asking only what is missing.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.selectors import rubric_current, study_get

from . import selectors, services
from .models import PanelMode


class PanelOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    judges = serializers.SerializerMethodField()

    def get_judges(self, panel) -> list[str]:  # type: ignore[no-untyped-def]
        return [j.name for j in panel.judges.all()]


class PanelListApi(APIView):
    class PanelInput(serializers.Serializer):
        name = serializers.CharField(max_length=200)
        judges = serializers.ListField(child=serializers.CharField(), min_length=1)

    @extend_schema(responses=PanelOutput(many=True))
    def get(self, request: Request) -> Response:
        panels = selectors.panel_list(user=request.user)
        return Response(PanelOutput(panels, many=True).data)

    @extend_schema(request=PanelInput, responses={201: PanelOutput})
    def post(self, request: Request) -> Response:
        data = self.PanelInput(data=request.data)
        data.is_valid(raise_exception=True)
        judges = selectors.judges_by_names(names=data.validated_data["judges"])
        panel = services.panel_create(name=data.validated_data["name"], judges=judges)
        return Response(PanelOutput(panel).data, status=status.HTTP_201_CREATED)


class RunInput(serializers.Serializer):
    study = serializers.IntegerField()
    panel = serializers.CharField()
    mode = serializers.ChoiceField(choices=PanelMode.values, default=PanelMode.LISTS)


def _questions(study, mode: str) -> list:  # type: ignore[no-untyped-def]
    return (
        list(rubric_current(study=study).questions) if mode == PanelMode.RUBRIC else []
    )


class RunEstimateApi(APIView):
    @extend_schema(request=RunInput, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        data = RunInput(data=request.data)
        data.is_valid(raise_exception=True)
        study = study_get(user=request.user, study_id=data.validated_data["study"])
        panel = selectors.panel_get(ref=data.validated_data["panel"], user=request.user)
        mode = data.validated_data["mode"]
        return Response(
            selectors.run_estimate(
                study=study, panel=panel, mode=mode, questions=_questions(study, mode)
            )
        )


class RunListApi(APIView):
    @extend_schema(operation_id="panel_runs_list", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        runs = selectors.run_list(user=request.user).order_by("-created_at", "-id")
        return Response(
            [selectors.run_progress(run=r, per_judge=False) for r in runs[:200]]
        )

    @extend_schema(request=RunInput, responses={201: OpenApiTypes.OBJECT})
    def post(self, request: Request) -> Response:
        data = RunInput(data=request.data)
        data.is_valid(raise_exception=True)
        study = study_get(user=request.user, study_id=data.validated_data["study"])
        panel = selectors.panel_get(ref=data.validated_data["panel"], user=request.user)
        run = services.panel_run_create(
            study=study,
            panel=panel,
            mode=data.validated_data["mode"],
            created_by=request.user,
        )
        return Response(selectors.run_progress(run=run), status=status.HTTP_201_CREATED)


class RunDetailApi(APIView):
    @extend_schema(operation_id="panel_runs_detail", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, run_id: int) -> Response:
        run = selectors.run_get(run_id=run_id, user=request.user)
        return Response(selectors.run_progress(run=run))


class RunPauseApi(APIView):
    @extend_schema(request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, run_id: int) -> Response:
        run = selectors.run_get(run_id=run_id, user=request.user)
        run = services.panel_run_pause(run=run)
        return Response(selectors.run_progress(run=run))
