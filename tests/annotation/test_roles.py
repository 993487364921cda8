"""Roles are exclusive (issue 10 item 5): an account that can read benchmark data
(staff, superuser, reviewer with ``benchmarks.view_dataset``) is never an annotator,
whatever path tries to make it one, and loses the annotator API if it gains the role
after joining a study."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command

from annotation.models import StudyMember
from annotation.services import (
    annotator_create,
    annotator_group_ensure,
    annotators_import,
    study_member_add,
)
from rcp_platform.exceptions import ApplicationError, ConflictError
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

NEXT = "/api/v1/studies/{}/assignments/next"


def _reviewer_annotator(username: str = "rev-ann", *, via_group: bool = False):
    """A reviewer that was also put in the annotators group (e.g. in the Django admin)."""
    user = UserFactory(username=username)
    user.groups.add(annotator_group_ensure())
    view = Permission.objects.get(codename="view_dataset")
    if via_group:
        group, _ = Group.objects.get_or_create(name="reviewers")
        group.permissions.add(view)
        user.groups.add(group)
    else:
        user.user_permissions.add(view)
    return user


def test_add_annotator_refuses_a_reviewer(reviewer):
    """The command names the account and why (it can read benchmark data)."""
    with pytest.raises(CommandError, match=r"'rita' is a reviewer .*cannot be an"):
        call_command(
            "add_annotator", "--username", "rita", "--password", "x" * 12,
            stdout=io.StringIO(),
        )  # fmt: skip
    reviewer.refresh_from_db()
    assert not reviewer.groups.filter(name="annotators").exists()


@pytest.mark.parametrize("kind", ["staff", "superuser", "reviewer", "group-reviewer"])
def test_study_member_add_refuses_benchmark_readers(study, kind):
    """Every membership path goes through study_member_add: it refuses staff,
    superusers, and reviewers (direct permission or through a group)."""
    if kind == "staff":
        user = UserFactory(username="s1", is_staff=True)
        user.groups.add(annotator_group_ensure())
    elif kind == "superuser":
        user = UserFactory(username="s1", is_superuser=True)
    else:
        user = _reviewer_annotator("s1", via_group=kind == "group-reviewer")
    with pytest.raises(ConflictError, match="can read benchmark data") as caught:
        study_member_add(study=study, annotator=user)
    assert caught.value.extra == {"reason": "benchmark_reader", "username": "s1"}
    assert not StudyMember.objects.filter(annotator=user).exists()


def test_inactive_reviewer_cannot_be_reactivated_as_annotator(db):
    """has_perm answers False for inactive accounts; the check does not rely on it."""
    user = _reviewer_annotator("sleeper")
    user.is_active = False
    user.save(update_fields=["is_active"])
    with pytest.raises(ConflictError, match="'sleeper' is a reviewer"):
        annotator_create(username="sleeper", password="x" * 12, update=True)
    user.refresh_from_db()
    assert not user.is_active


def test_csv_import_refuses_a_reviewer_line(study, reviewer):
    """All or nothing: the reviewer's line is named, nobody is created or invited."""
    text = "username,password\nfresh-1,pw-long-enough-1\nrita,pw-long-enough-2\n"
    with pytest.raises(ApplicationError, match=r"line 3: user .rita. is a reviewer"):
        annotators_import(text=text, study=study, update=True)
    assert not StudyMember.objects.filter(study=study).exists()


def test_members_api_refuses_a_reviewer_with_a_clear_message(
    study, admin_user, api_client_for
):
    """POST /studies/{id}/annotators answers 409 naming the account."""
    _reviewer_annotator("rev-ann")
    response = api_client_for(admin_user).post(
        f"/api/v1/studies/{study.pk}/annotators",
        {"usernames": ["rev-ann"]},
        format="json",
    )
    assert response.status_code == 409
    assert "'rev-ann' is a reviewer" in response.json()["message"]
    assert response.json()["extra"]["reason"] == "benchmark_reader"
    assert not StudyMember.objects.filter(study=study).exists()


def test_member_granted_review_later_loses_the_annotator_api(
    study, members, api_client_for
):
    """A member who becomes a reviewer afterwards is refused per request (403), with
    the same single permission query as before."""
    bob = members[0]
    assert api_client_for(bob).post(NEXT.format(study.pk)).status_code == 201
    bob.user_permissions.add(Permission.objects.get(codename="view_dataset"))
    bob = type(bob).objects.get(pk=bob.pk)  # fresh: no cached permissions
    assert api_client_for(bob).post(NEXT.format(study.pk)).status_code == 403
