"""REST API of the annotation app.

Annotator endpoints (``IsAnnotator``; the shapes are a contract for external
crowdsourcing tools): next assignment, one assignment with its draft, draft save,
submit. Staff endpoints (the default staff/reviewer permission): studies, their
sampling plan, monitoring, open/close and members.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import permissions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from benchmarks.selectors import dataset_get

from . import sampling, selectors, services


class IsAnnotator(permissions.BasePermission):
    """Active users with ``annotation.annotate``; object access is the selectors' job."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return selectors.is_annotator(request.user)


# ---------------------------------------------------------------------------- annotators


class RubricQuestionOutput(serializers.Serializer):
    key = serializers.CharField()
    text = serializers.CharField()


class BlindDocumentOutput(serializers.Serializer):
    key = serializers.CharField(help_text="opaque, per assignment")
    title = serializers.CharField()
    text = serializers.CharField()


class AnnotatorProgressOutput(serializers.Serializer):
    documents = serializers.IntegerField()
    contests_done = serializers.IntegerField()
    contests_left = serializers.IntegerField()


class GradingOptionsOutput(serializers.Serializer):
    order = serializers.BooleanField()
    comment = serializers.BooleanField()


class AssignmentOutput(serializers.Serializer):
    """Only these fields ever leave the server (a second guard of the blinding)."""

    assignment = serializers.IntegerField()
    status = serializers.CharField()
    query = serializers.CharField()
    instructions = serializers.CharField()
    questions = RubricQuestionOutput(many=True)
    documents = BlindDocumentOutput(many=True)
    options = GradingOptionsOutput()
    expires_at = serializers.DateTimeField()
    progress = AnnotatorProgressOutput()


class AssignmentDetailOutput(AssignmentOutput):
    draft = serializers.JSONField(allow_null=True)
    draft_saved_at = serializers.DateTimeField(allow_null=True)


class GradesInput(serializers.Serializer):
    grades = serializers.DictField(child=serializers.DictField())


class AssignmentNextApi(APIView):
    """201 with the annotator's contest in progress or a new one; 204 when none left."""

    permission_classes = [IsAnnotator]

    @extend_schema(request=None, responses={201: AssignmentOutput, 204: None})
    def post(self, request: Request, study_id: int) -> Response:
        # The service checks membership and study status in its first query.
        lease = services.assignment_next_for(study_id=study_id, annotator=request.user)
        if lease is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        payload = selectors.assignment_payload(
            assignment=lease.assignment, progress=lease.progress, texts=lease.texts
        )
        return Response(AssignmentOutput(payload).data, status=status.HTTP_201_CREATED)


class AssignmentDetailApi(APIView):
    permission_classes = [IsAnnotator]

    @extend_schema(responses=AssignmentDetailOutput)
    def get(self, request: Request, assignment_id: int) -> Response:
        assignment = selectors.assignment_get_for_annotator(
            user=request.user, assignment_id=assignment_id
        )
        payload = selectors.assignment_payload(assignment=assignment, with_draft=True)
        return Response(AssignmentDetailOutput(payload).data)


class AssignmentDraftApi(APIView):
    permission_classes = [IsAnnotator]

    class DraftOutput(serializers.Serializer):
        assignment = serializers.IntegerField(source="pk")
        draft_saved_at = serializers.DateTimeField()
        expires_at = serializers.DateTimeField()

    @extend_schema(request=GradesInput, responses=DraftOutput)
    def put(self, request: Request, assignment_id: int) -> Response:
        assignment = selectors.assignment_get_for_annotator(
            user=request.user, assignment_id=assignment_id
        )
        data = GradesInput(data=request.data)
        data.is_valid(raise_exception=True)
        saved = services.assignment_draft_save(
            assignment=assignment, grades=data.validated_data["grades"]
        )
        return Response(self.DraftOutput(saved).data)


class AssignmentSubmitApi(APIView):
    permission_classes = [IsAnnotator]

    class SubmitOutput(serializers.Serializer):
        assignment = serializers.IntegerField(source="pk")
        status = serializers.CharField()
        submitted_at = serializers.DateTimeField()
        already_submitted = serializers.BooleanField()

    @extend_schema(request=GradesInput, responses=SubmitOutput)
    def post(self, request: Request, assignment_id: int) -> Response:
        assignment = selectors.assignment_get_for_annotator(
            user=request.user, assignment_id=assignment_id
        )
        data = GradesInput(data=request.data)
        data.is_valid(raise_exception=True)
        submitted, already = services.assignment_submit(
            assignment=assignment, grades=data.validated_data["grades"]
        )
        submitted.already_submitted = already
        return Response(self.SubmitOutput(submitted).data)


# ---------------------------------------------------------------------------- staff


class PlanInput(serializers.Serializer):
    datasets = serializers.ListField(child=serializers.CharField(), min_length=1)
    systems = serializers.ListField(child=serializers.CharField(), min_length=2)
    contests = serializers.IntegerField(min_value=1, max_value=100_000)
    depth = serializers.IntegerField(min_value=1, max_value=50, default=5)
    quotas = serializers.DictField(
        child=serializers.FloatField(min_value=0, max_value=1), required=False
    )
    seed = serializers.IntegerField(min_value=0, default=0)
    # Design controls (issue 14), all optional.
    metric_k = serializers.IntegerField(min_value=1, max_value=1000, default=10)
    dataset_quotas = serializers.DictField(
        child=serializers.FloatField(min_value=0, max_value=1), required=False
    )
    balance_pairs = serializers.BooleanField(default=False)
    max_per_query = serializers.IntegerField(min_value=1, required=False)
    concordant_controls = serializers.BooleanField(default=True)


def _plan_kwargs(request: Request, data: dict[str, Any]) -> dict[str, Any]:
    datasets = [dataset_get(user=request.user, ref=name) for name in data["datasets"]]
    systems = selectors.systems_by_names(datasets=datasets, names=data["systems"])
    return {
        "datasets": datasets,
        "systems": systems,
        "n_contests": data["contests"],
        "depth": data["depth"],
        "quotas": data.get("quotas") or None,
        "seed": data["seed"],
        "metric_k": data["metric_k"],
        "controls": sampling.Controls(
            dataset_quotas=data.get("dataset_quotas") or None,
            balance_pairs=data["balance_pairs"],
            max_per_query=data.get("max_per_query"),
            concordant_controls=data["concordant_controls"],
        ),
    }


class PlanOutput(serializers.Serializer):
    fit = serializers.IntegerField()
    candidates = serializers.IntegerField()
    quotas = serializers.DictField(child=serializers.FloatField())
    available = serializers.DictField(child=serializers.IntegerField())
    requested = serializers.DictField(child=serializers.IntegerField())
    drawn = serializers.DictField(child=serializers.IntegerField())
    by_dataset = serializers.DictField(child=serializers.IntegerField())
    controls = serializers.JSONField()
    metric_k = serializers.IntegerField()


class StudyOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    status = serializers.CharField()
    datasets = serializers.SerializerMethodField()
    systems = serializers.SerializerMethodField()
    fit = serializers.IntegerField(source="fit_id")
    depth = serializers.IntegerField()
    per_contest = serializers.IntegerField()
    lease_minutes = serializers.SerializerMethodField()
    collect_order = serializers.BooleanField()
    collect_comments = serializers.BooleanField()
    seed = serializers.IntegerField()
    design = serializers.JSONField()
    created_at = serializers.DateTimeField()

    def get_datasets(self, study: Any) -> list[str]:
        return [d.name for d in study.datasets.all()]

    def get_systems(self, study: Any) -> list[str]:
        return sorted({s.name for s in study.systems.all()})

    def get_lease_minutes(self, study: Any) -> float:
        return study.lease_duration.total_seconds() / 60


class StudyListApi(APIView):
    class StudyInput(PlanInput):
        name = serializers.CharField(max_length=200)
        per_contest = serializers.IntegerField(min_value=1, max_value=20, default=3)
        lease_minutes = serializers.FloatField(
            min_value=0.05, max_value=services.MAX_LEASE_MINUTES, default=30.0
        )
        collect_order = serializers.BooleanField(default=False)
        collect_comments = serializers.BooleanField(default=True)
        instructions = serializers.CharField(required=False, allow_blank=True)
        questions = RubricQuestionOutput(many=True, required=False)
        open = serializers.BooleanField(default=False)
        verdict_rule = serializers.ChoiceField(
            choices=["majority", "plurality"], default="majority"
        )

    @extend_schema(responses=StudyOutput(many=True))
    def get(self, request: Request) -> Response:
        studies = selectors.study_list(user=request.user).prefetch_related(
            "datasets", "systems"
        )
        return Response(StudyOutput(studies, many=True).data)

    @extend_schema(request=StudyInput, responses={201: StudyOutput})
    def post(self, request: Request) -> Response:
        data = self.StudyInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        study = services.study_create(
            name=v["name"],
            **_plan_kwargs(request, v),
            per_contest=v["per_contest"],
            lease_duration=timedelta(minutes=v["lease_minutes"]),
            collect_order=v["collect_order"],
            collect_comments=v["collect_comments"],
            instructions=v.get("instructions"),
            questions=v.get("questions"),
            verdict_rule=v["verdict_rule"],
            created_by=request.user,
            open_now=v["open"],
        )
        return Response(StudyOutput(study).data, status=status.HTTP_201_CREATED)


class StudyPlanApi(APIView):
    """Preview a study's contest sampling: candidates and draws per design cell."""

    @extend_schema(request=PlanInput, responses=PlanOutput)
    def post(self, request: Request) -> Response:
        data = PlanInput(data=request.data)
        data.is_valid(raise_exception=True)
        planned = services.study_plan(**_plan_kwargs(request, data.validated_data))
        return Response(PlanOutput(planned.summary()).data)


class StudyPowerApi(APIView):
    """Power planner: contests needed for a target power, and the power of a size.
    ``study`` (id) fills a missing chance rate / counted share from its contests, and
    a missing true rate from its LLM-panel pilot."""

    class PowerInput(serializers.Serializer):
        true_rate = serializers.FloatField(required=False)
        chance_rate = serializers.FloatField(required=False)
        counted_share = serializers.FloatField(required=False)
        power = serializers.FloatField(default=0.8)
        alpha = serializers.FloatField(default=0.05)
        design_effect = serializers.FloatField(default=1.0)
        one_sided = serializers.BooleanField(default=False)
        contests = serializers.IntegerField(required=False, min_value=1)
        study = serializers.IntegerField(required=False)

    @extend_schema(parameters=[PowerInput], responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        data = self.PowerInput(data=request.query_params)
        data.is_valid(raise_exception=True)
        v = dict(data.validated_data)
        if "study" in v:
            v["study"] = selectors.study_get(user=request.user, study_id=v["study"])
        return Response(services.power_plan_build(**v))


class StudyDetailApi(APIView):
    """A study with its live monitoring figures."""

    class DetailOutput(StudyOutput):
        progress = serializers.JSONField()

    @extend_schema(responses=DetailOutput)
    def get(self, request: Request, study_id: int) -> Response:
        study = selectors.study_get(user=request.user, study_id=study_id)
        study.progress = selectors.study_progress(study=study)
        return Response(self.DetailOutput(study).data)


class StudyOpenApi(APIView):
    @extend_schema(request=None, responses=StudyOutput)
    def post(self, request: Request, study_id: int) -> Response:
        study = selectors.study_get(user=request.user, study_id=study_id)
        return Response(StudyOutput(services.study_open(study=study)).data)


class StudyCloseApi(APIView):
    @extend_schema(request=None, responses=StudyOutput)
    def post(self, request: Request, study_id: int) -> Response:
        study = selectors.study_get(user=request.user, study_id=study_id)
        return Response(StudyOutput(services.study_close(study=study)).data)


class StudyMemberListApi(APIView):
    class MembersInput(serializers.Serializer):
        usernames = serializers.ListField(
            child=serializers.CharField(), min_length=1, max_length=1000
        )

    class MemberOutput(serializers.Serializer):
        username = serializers.CharField(source="annotator.username")
        active = serializers.BooleanField()
        added_at = serializers.DateTimeField()

    @extend_schema(responses=MemberOutput(many=True))
    def get(self, request: Request, study_id: int) -> Response:
        study = selectors.study_get(user=request.user, study_id=study_id)
        members = study.members.select_related("annotator").order_by("id")
        return Response(self.MemberOutput(members, many=True).data)

    @extend_schema(request=MembersInput, responses={201: MemberOutput(many=True)})
    def post(self, request: Request, study_id: int) -> Response:
        study = selectors.study_get(user=request.user, study_id=study_id)
        data = self.MembersInput(data=request.data)
        data.is_valid(raise_exception=True)
        users = selectors.annotators_by_usernames(
            usernames=data.validated_data["usernames"]
        )
        members = [services.study_member_add(study=study, annotator=u) for u in users]
        return Response(
            self.MemberOutput(members, many=True).data, status=status.HTTP_201_CREATED
        )


class StudyAnalysisPlanApi(APIView):
    """The study's analysis plan: GET the effective and registered plan; POST (staff,
    draft studies only) sets entries of the plan, frozen when the study opens."""

    class PlanEntriesInput(serializers.Serializer):
        primary_endpoint = serializers.ChoiceField(
            choices=["main", "disagreements"], required=False
        )
        slices = serializers.ListField(child=serializers.CharField(), required=False)
        alpha = serializers.FloatField(required=False)
        planned_contests = serializers.IntegerField(min_value=1, required=False)
        stopping_rule = serializers.ChoiceField(
            choices=["fixed", "obrien_fleming", "pocock"], required=False
        )

    @staticmethod
    def _out(study: Any) -> dict[str, Any]:
        return {
            "effective": services.study_plan_effective(study),
            "registered": study.registered_plan,
            "registered_at": study.registered_at,
        }

    @extend_schema(
        operation_id="study_analysis_plan_read", responses=OpenApiTypes.OBJECT
    )
    def get(self, request: Request, study_id: int) -> Response:
        study = selectors.study_get(user=request.user, study_id=study_id)
        return Response(self._out(study))

    @extend_schema(
        operation_id="study_analysis_plan_set",
        request=PlanEntriesInput,
        responses=OpenApiTypes.OBJECT,
    )
    def post(self, request: Request, study_id: int) -> Response:
        study = selectors.study_get(user=request.user, study_id=study_id)
        data = self.PlanEntriesInput(data=request.data)
        data.is_valid(raise_exception=True)
        plan = dict(data.validated_data)
        if "stopping_rule" in plan:
            plan["stopping_rule"] = {"kind": plan["stopping_rule"]}
        study = services.study_analysis_plan_set(study=study, plan=plan)
        return Response(self._out(study))


class StudyReportApi(APIView):
    """The study's analysis as JSON (staff only: it holds annotator flags keyed by
    pseudonym). ``?exclude_system=NAME`` (repeatable) leaves a system's contests out;
    ``?system=NAME`` adds that system's slices to ``inference.slices``."""

    permission_classes = [permissions.IsAdminUser]

    @extend_schema(responses=OpenApiTypes.OBJECT)  # the report's own nested shape
    def get(self, request: Request, study_id: int) -> Response:
        study = selectors.study_get(user=request.user, study_id=study_id)
        report, _names = services.study_report_requested(
            study=study,
            exclude_systems=request.query_params.getlist("exclude_system"),
            focus_system=request.query_params.get("system", ""),
            severity=request.query_params.get("severity") == "1",
        )
        return Response(report)
