"""create_study, add_annotator, study_status and the demo's study."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from annotation.models import Study, StudyMember, StudyStatus
from annotation.selectors import is_annotator

pytestmark = pytest.mark.django_db


def _run(*args):
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _create(world, *extra):
    systems = [s.name for s in world.systems]
    return _run(
        "create_study",
        "--name",
        "cli",
        "--dataset",
        world.dataset.name,
        "--systems",
        *systems,
        "--contests",
        "8",
        *extra,
    )


def test_create_study_prints_only_the_id(world):
    out, err = _create(
        world, "--quota", "discordant_decisive=0.75", "--seed", "4", "--depth", "4"
    )
    study = Study.objects.get(name="cli")
    assert out.strip() == str(study.pk)
    assert "discordant_decisive" in err and "drawn" in err
    assert study.status == StudyStatus.DRAFT and study.depth == 4
    assert study.design["quotas"]["discordant_decisive"] == 0.75
    assert study.contests.count() == 8


def test_create_study_open_and_per_contest(world):
    _create(world, "--open", "--per-contest", "2", "--lease-minutes", "5")
    study = Study.objects.get(name="cli")
    assert study.status == StudyStatus.OPEN and study.per_contest == 2
    assert study.lease_duration.total_seconds() == 300


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--quota", "nonsense"], "not CELL=SHARE"),
        (["--quota", "unknown_cell=0.5"], "unknown design cell"),
        (["--quota", "concordant=1.5"], "sum to 1"),
        (["--contests", "999"], "only 24 candidate contests"),
        (["--fit", "9999"], "fit 9999 does not exist"),
        (["--lease-minutes", "0"], "positive"),
    ],
)
def test_create_study_refuses_bad_input(world, args, message):
    with pytest.raises(CommandError, match=message):
        _create(world, *args)
    assert not Study.objects.exists()


def test_create_study_unknown_dataset_and_system(world):
    with pytest.raises(CommandError, match="dataset 'nope' does not exist"):
        _run("create_study", "--name", "x", "--dataset", "nope", "--systems", "a", "b",
             "--contests", "1")  # fmt: skip
    with pytest.raises(CommandError, match="system 'ghost' not found"):
        _run("create_study", "--name", "x", "--dataset", world.dataset.name,
             "--systems", "ghost", world.systems[0].name, "--contests", "1")  # fmt: skip


def test_add_annotator_creates_invites_and_resets_only_when_asked(study, make_study):
    out, _ = _run("add_annotator", "--username", "ann", "--password", "pw-long-enough-1",
                  "--study", str(study.pk))  # fmt: skip
    user = get_user_model().objects.get(username="ann")
    assert is_annotator(user) and user.check_password("pw-long-enough-1")
    assert StudyMember.objects.filter(study=study, annotator=user).exists()
    assert "invited to study" in out
    # Inviting the existing annotator to a second study keeps their password.
    second = make_study(name="Second", seed=5)
    out, _ = _run("add_annotator", "--username", "ann", "--study", second.name)
    assert "password unchanged" in out and "shown once" not in out
    user.refresh_from_db()
    assert user.check_password("pw-long-enough-1")
    assert set(
        StudyMember.objects.filter(annotator=user).values_list("study_id", flat=True)
    ) == {study.pk, second.pk}
    # A password for an existing account without the explicit flag is refused.
    with pytest.raises(CommandError, match="--reset-password"):
        _run("add_annotator", "--username", "ann", "--password", "other-password-2")
    user.refresh_from_db()
    assert user.check_password("pw-long-enough-1")
    out, _ = _run("add_annotator", "--username", "ann", "--reset-password")
    generated = out.split("shown once): ")[1].strip()
    user.refresh_from_db()
    assert user.check_password(generated)
    with pytest.raises(CommandError, match="password refused"):
        _run("add_annotator", "--username", "ann2", "--password", "short")
    with pytest.raises(CommandError, match="study 'nope' not found"):
        _run("add_annotator", "--username", "ann3", "--study", "nope")


def test_add_annotator_link_gives_a_one_time_set_password_path(study):
    out, _ = _run("add_annotator", "--username", "linked", "--link")
    user = get_user_model().objects.get(username="linked")
    assert not user.has_usable_password() and "shown once" not in out
    path = out.split("link (path): ")[1].strip()
    assert path.startswith("/annotation/set-password/")


def test_add_annotator_refuses_staff_accounts(admin_user):
    with pytest.raises(CommandError, match="is staff"):
        _run("add_annotator", "--username", admin_user.username, "--password", "x" * 12)


def test_study_status_text_and_json(study, members):
    from annotation.services import assignment_next

    assignment_next(study=study, annotator=members[0])
    out, _ = _run("study_status", "--study", str(study.pk))
    assert "contests: 6 (complete 0, in progress 1, not started 5)" in out
    assert members[0].username in out
    data = json.loads(_run("study_status", "--study", "Study A", "--json")[0])
    assert data["status"] == "open" and data["in_progress"] == 1
    with pytest.raises(CommandError, match="not found"):
        _run("study_status", "--study", "404")


def test_demo_opens_a_study_for_the_three_demo_annotators(db):
    _run("demo")
    study = Study.objects.get(name="Demo study")
    assert study.status == StudyStatus.OPEN and study.contests.count() == 3
    assert sorted(study.members.values_list("annotator__username", flat=True)) == [
        "annotator1",
        "annotator2",
        "annotator3",
    ]
    _run("demo")  # idempotent
    assert Study.objects.count() == 1
