"""REST API of the judging app: judges, estimates, jobs and their controls, windows."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from benchmarks.access import IsStaffOrReviewerReadOnly
from benchmarks.selectors import dataset_get
from rcp_platform.exceptions import NotFoundError

from . import selectors, services
from .keyenv import api_key_env_refusal
from .models import Decoding, JobStages


class JudgeOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    base_urls = serializers.ListField(child=serializers.CharField())
    model = serializers.CharField()
    api_key_env = serializers.CharField()
    concurrency = serializers.IntegerField()
    max_output_tokens = serializers.IntegerField()
    decoding = serializers.CharField()
    offline = serializers.BooleanField()


class CanAddJudge(IsStaffOrReviewerReadOnly):
    """Reads as everywhere; creating a judge needs ``judging.add_judge``: a judge's
    URL receives the key its variable holds, so ``is_staff`` alone is not enough."""

    def has_permission(self, request: Request, view: object) -> bool:
        if not super().has_permission(request, view):
            return False
        return request.method in SAFE_METHODS or request.user.has_perm(
            "judging.add_judge"
        )


class JudgeListApi(APIView):
    permission_classes = [CanAddJudge]

    class JudgeInput(serializers.Serializer):
        name = serializers.CharField(max_length=200)
        base_urls = serializers.ListField(child=serializers.URLField(), min_length=1)
        model = serializers.CharField(max_length=300)
        api_key_env = serializers.CharField(
            required=False, allow_blank=True, default=""
        )
        concurrency = serializers.IntegerField(min_value=1, default=8)
        max_output_tokens = serializers.IntegerField(min_value=16, default=2048)
        decoding = serializers.ChoiceField(
            choices=Decoding.values, default=Decoding.JSON_SCHEMA
        )
        temperature = serializers.FloatField(
            required=False, allow_null=True, default=None
        )
        context_tokens = serializers.IntegerField(
            required=False, allow_null=True, default=None
        )
        timeout_s = serializers.FloatField(min_value=1, default=120.0)
        extra_body = serializers.DictField(required=False, default=dict)

        def validate_api_key_env(self, value: str) -> str:
            refusal = api_key_env_refusal(value)
            if refusal is not None:
                raise serializers.ValidationError(refusal)
            return value

    @extend_schema(responses=JudgeOutput(many=True))
    def get(self, request: Request) -> Response:
        return Response(
            JudgeOutput(selectors.judge_list(user=request.user), many=True).data
        )

    @extend_schema(request=JudgeInput, responses={201: JudgeOutput})
    def post(self, request: Request) -> Response:
        data = self.JudgeInput(data=request.data)
        data.is_valid(raise_exception=True)
        judge = services.judge_create(**data.validated_data)
        return Response(JudgeOutput(judge).data, status=status.HTTP_201_CREATED)


class JobInput(serializers.Serializer):
    dataset = serializers.CharField()
    judge = serializers.CharField()
    stages = serializers.ChoiceField(choices=JobStages.values, default=JobStages.BOTH)
    query_ids = serializers.ListField(
        child=serializers.CharField(), required=False, allow_null=True, default=None
    )
    params = serializers.DictField(required=False, default=dict)


def _resolve(request: Request, data: dict):
    dataset = dataset_get(user=request.user, ref=data["dataset"])
    judge = selectors.judge_list(user=request.user).filter(name=data["judge"]).first()
    if judge is None:
        raise NotFoundError(f"judge {data['judge']!r} not found")
    return dataset, judge


class JobEstimateApi(APIView):
    @extend_schema(request=JobInput, responses=dict)
    def post(self, request: Request) -> Response:
        data = JobInput(data=request.data)
        data.is_valid(raise_exception=True)
        dataset, judge = _resolve(request, data.validated_data)
        est = services.job_estimate(
            dataset=dataset,
            judge=judge,
            stages=data.validated_data["stages"],
            query_ids=data.validated_data["query_ids"],
            params=data.validated_data["params"],
        )
        return Response(est.as_dict())


class JobOutput(serializers.Serializer):
    id = serializers.IntegerField()
    dataset = serializers.CharField(source="dataset.name")
    judge = serializers.CharField(source="judge.name")
    family = serializers.CharField()
    stages = serializers.CharField()
    status = serializers.CharField()
    created_at = serializers.DateTimeField()


class JobListApi(APIView):
    @extend_schema(responses=JobOutput(many=True))
    def get(self, request: Request) -> Response:
        return Response(
            JobOutput(selectors.job_list(user=request.user)[:200], many=True).data
        )

    @extend_schema(request=JobInput, responses={201: JobOutput})
    def post(self, request: Request) -> Response:
        data = JobInput(data=request.data)
        data.is_valid(raise_exception=True)
        dataset, judge = _resolve(request, data.validated_data)
        job = services.job_create(
            dataset=dataset,
            judge=judge,
            stages=data.validated_data["stages"],
            query_ids=data.validated_data["query_ids"],
            params=data.validated_data["params"],
            user=request.user,
        )
        return Response(JobOutput(job).data, status=status.HTTP_201_CREATED)


class JobDetailApi(APIView):
    @extend_schema(responses=dict)
    def get(self, request: Request, job_id: int) -> Response:
        job = selectors.job_get(user=request.user, job_id=job_id)
        return Response(
            JobOutput(job).data
            | {
                "progress": selectors.job_progress(job=job),
                "invalid": selectors.invalid_windows(job=job),
            }
        )


class _JobActionApi(APIView):
    # Not named ``action``: DRF and drf-spectacular reserve that attribute.
    operation = staticmethod(services.job_pause)

    @extend_schema(request=None, responses=JobOutput)
    def post(self, request: Request, job_id: int) -> Response:
        job = selectors.job_get(user=request.user, job_id=job_id)
        return Response(JobOutput(self.operation(job=job)).data)


class JobPauseApi(_JobActionApi):
    operation = staticmethod(services.job_pause)


class JobCancelApi(_JobActionApi):
    operation = staticmethod(services.job_cancel)


class JobResumeApi(_JobActionApi):
    operation = staticmethod(services.job_resume)


class WindowDetailApi(APIView):
    class WindowOutput(serializers.Serializer):
        id = serializers.IntegerField()
        family = serializers.CharField()
        query = serializers.CharField(source="query.external_id")
        stage = serializers.CharField()
        phase = serializers.CharField()
        seq = serializers.IntegerField()
        doc_ids = serializers.ListField()
        status = serializers.CharField()
        valid = serializers.BooleanField(allow_null=True)
        invalid_category = serializers.CharField()
        invalid_reason = serializers.CharField()
        raw_response = serializers.CharField()
        scores = serializers.JSONField()
        answers = serializers.JSONField()
        attempts = serializers.IntegerField()
        prompt_sha256 = serializers.CharField()

    @extend_schema(responses=WindowOutput)
    def get(self, request: Request, window_id: int) -> Response:
        return Response(
            self.WindowOutput(
                selectors.window_get(user=request.user, window_id=window_id)
            ).data
        )
