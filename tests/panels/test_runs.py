"""Panel runs end to end in this process: real HTTP through the openai client to
simulated judges; the §6.4 rule on biased and unbiased judges; blind prompts;
resume asks nothing already answered; rubric picks by the human code path;
the estimate equals the calls made; the report section beside the human results."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command

from annotation.analysis.picks import annotator_pick
from annotation.models import Contest, ContestDocument
from annotation.selectors import rubric_current
from annotation.services import study_report_build
from annotation.services.assignment import grade_of
from benchmarks.models import Document, Query, System
from panels import selectors, services
from panels.models import PanelRequest, PanelRun, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)

STRONG = {"list_signal": 400.0}  # an unbiased judge that always sees the better list


def _run(study, panel, mode="lists"):
    run = services.panel_run_create(study=study, panel=panel, mode=mode, queue=False)
    status = services.panel_run_execute(run_id=run.pk)
    run.refresh_from_db()
    return status, run


def _judge_figures(study, run):
    report, _ = study_report_build(study=study)
    (section,) = [r for r in report["panels"]["runs"] if r["run"] == run.pk]
    return section


def test_unbiased_judges_decide_and_biased_ones_do_not(study, servers, make_panel):
    """Three judges that always name the better list decide every contest (same side
    both times); three that always name List 1 decide none,
    and their position bias (share naming List 1) is exactly 1."""
    fair = make_panel(servers(3, **STRONG), name="fair")
    biased = make_panel(servers(3, position_bias=1.0), name="biased")
    status, run = _run(study, fair)
    assert status == RunStatus.DONE and run.answered == run.total == 8 * 3 * 2
    fair_section = _judge_figures(study, run)
    assert fair_section["decided"]["rate"] == 1.0
    # Judges with different seeds hold different hidden relevances: unanimous
    # exactly where all three decided the same side.
    same = [len(set(r["decisions"].values())) == 1 for r in fair_section["per_contest"]]
    assert fair_section["unanimous"]["k"] == sum(same)
    for figures in fair_section["per_judge"].values():
        assert figures["decided"]["k"] == 8
        assert figures["first_list_share"]["rate"] == 0.5  # each side shown first once
    status, run = _run(study, biased)
    assert status == RunStatus.DONE
    biased_section = _judge_figures(study, run)
    assert biased_section["decided"]["k"] == 0
    assert biased_section["verdicts"] == {"A": 0, "B": 0, "tie": 8}
    for figures in biased_section["per_judge"].values():
        assert figures["decided"]["k"] == 0
        assert figures["first_list_share"]["rate"] == 1.0
        assert figures["first_list_share"]["n"] == 16
    # Stored answers: List 1 every time, i.e. side A in rep 1 and side B in rep 2.
    rows = PanelRequest.objects.filter(run=run)
    assert set(rows.values_list("choice", flat=True)) == {"1"}
    assert set(rows.filter(rep=1).values_list("side", flat=True)) == {"A"}
    assert set(rows.filter(rep=2).values_list("side", flat=True)) == {"B"}


def test_every_prompt_sent_is_blind(study, servers, make_panel):
    """No system name, external query/document id, rank, qrel or gain value appears
    in any prompt either mode sends; every displayed document is shown."""
    srv = servers(3, keep_prompts=True)
    panel = make_panel(srv)
    for mode in ("lists", "rubric"):
        assert _run(study, panel, mode)[0] == RunStatus.DONE
    texts = [t for server, _url in srv for t in server.prompt_texts]
    assert len(texts) == 2 * 8 * 3 * 2
    forbidden = set(System.objects.values_list("name", flat=True))
    forbidden |= set(Query.objects.values_list("external_id", flat=True))
    forbidden |= set(Document.objects.values_list("external_id", flat=True))
    forbidden |= {"rank", "qrel", "gain", "ndcg", "system"}
    for text in texts:
        lowered = text.lower()
        leaks = [
            w for w in forbidden if re.search(rf"\b{re.escape(w.lower())}\b", lowered)
        ]
        assert not leaks, leaks
    contest = Contest.objects.filter(study=study).first()
    shown = ContestDocument.objects.filter(contest=contest).select_related("document")
    query_texts = [t for t in texts if contest.query.text in t]
    for entry in shown:
        assert any(entry.document.text in t for t in query_texts)


def test_resume_asks_nothing_already_answered(study, servers, make_panel):
    """A run stopped by a judge's fatal error (wrong key) keeps every stored answer;
    after the fix the resumed run asks only the missing requests: no prompt is ever
    answered twice and the total of answered calls equals the requests."""
    srv = servers(3, **STRONG)
    srv[0][0].configure(api_key="right-key")  # judge 0 refuses us: the run fails
    panel = make_panel(srv)
    status, run = _run(study, panel)
    assert status == RunStatus.FAILED and "401" in run.error
    stored = set(
        PanelRequest.objects.filter(run=run, status="done").values_list("pk", flat=True)
    )
    assert stored and len(stored) < run.total
    assert not PanelRequest.objects.filter(run=run, status="in_flight").exists()
    before = {url: dict(server.stats()["answered"]) for server, url in srv}
    srv[0][0].configure(api_key=None)
    status, run = _run(study, panel)
    assert status == RunStatus.DONE and run.answered == run.total == 48
    answered = {}
    for server, _url in srv:
        for digest, n in server.stats()["answered"].items():
            assert n == 1, "a prompt was answered twice"
            answered[digest] = answered.get(digest, 0) + n
    assert sum(answered.values()) == 48
    # Rows stored before the failure were not asked again.
    for server, url in srv:
        assert set(before[url]) <= set(server.stats()["answered"])
    assert PanelRequest.objects.filter(pk__in=stored, status="done").count() == len(
        stored
    )
    # A second execution of a done run asks nothing.
    calls = sum(server.stats()["chat_requests"] for server, _ in srv)
    assert services.panel_run_execute(run_id=run.pk) == RunStatus.DONE
    assert sum(server.stats()["chat_requests"] for server, _ in srv) == calls


def test_rubric_picks_come_from_the_human_code_path(study, servers, make_panel):
    """Every rubric answer's side equals annotator_pick over the grades (most
    stringent yes) of its stored answers, exactly as a human pick; documents are
    the contest's displayed union in a shuffled order, reversed in rep 2."""
    panel = make_panel(servers(3))
    status, run = _run(study, panel, "rubric")
    assert status == RunStatus.DONE and run.valid == run.total == 48
    keys = rubric_current(study=study).keys
    for row in PanelRequest.objects.filter(run=run).select_related("contest"):
        entries = ContestDocument.objects.filter(contest=row.contest).order_by("id")
        displayed = [e.document_id for e in entries]
        assert sorted(row.documents) == sorted(displayed)
        twin = PanelRequest.objects.get(
            run=run, judge=row.judge, contest=row.contest, rep=3 - row.rep
        )
        assert twin.documents == row.documents[::-1]
        list_a = [e.document_id for e in sorted(entries, key=lambda e: e.rank_a or 99)]
        list_b = [e.document_id for e in sorted(entries, key=lambda e: e.rank_b or 99)]
        list_a = [d for d in list_a if entries.get(document_id=d).rank_a]
        list_b = [d for d in list_b if entries.get(document_id=d).rank_b]
        grades = {int(d): grade_of(a, keys) for d, a in row.answers.items()}
        pick = annotator_pick(
            list_a, list_b, grades, k=study.depth, displayed=displayed
        )
        assert row.side == pick.choice


def test_estimate_equals_calls_made_and_command_runs(
    study, servers, make_panel, capsys
):
    """--estimate asks nothing and predicts the calls the run then makes; the
    command runs inline, and a second run reports everything already answered."""
    srv = servers(3, **STRONG)
    panel = make_panel(srv)
    questions = list(rubric_current(study=study).questions)
    est = selectors.run_estimate(
        study=study, panel=panel, mode="rubric", questions=questions
    )
    assert est["calls"] == 48 and est["input_tokens"] > 0
    call_command(
        "run_panel",
        "--study",
        str(study.pk),
        "--panel",
        "trio",
        "--mode",
        "rubric",
        "--estimate",
    )
    assert "total: 48 calls over 8 contests" in capsys.readouterr().out
    assert not PanelRequest.objects.exists()
    call_command(
        "run_panel",
        "--study",
        str(study.pk),
        "--panel",
        "trio",
        "--mode",
        "rubric",
        "--inline",
    )
    out = capsys.readouterr().out
    assert "done: 48/48 answered (48 valid, 0 invalid), 48 calls" in out
    assert sum(s.stats()["chat_requests"] for s, _ in srv) == est["calls"]
    left = selectors.run_estimate(
        study=study, panel=panel, mode="rubric", questions=questions
    )
    assert left["calls"] == 0
    call_command(
        "run_panel",
        "--study",
        str(study.pk),
        "--panel",
        "trio",
        "--mode",
        "rubric",
        "--inline",
    )
    assert "(48 answered already)" in capsys.readouterr().out
    assert sum(s.stats()["chat_requests"] for s, _ in srv) == 48


def test_in_flight_cap_per_judge_holds(study, servers, make_panel):
    """With a concurrency of 1 per judge the runner starts three threads, yet no
    simulated judge ever sees more than one request at once (global limiter)."""
    srv = servers(3, latency_ms=40)
    panel = make_panel(srv, concurrency=1)
    assert _run(study, panel)[0] == RunStatus.DONE
    assert [server.stats()["max_in_flight"] for server, _ in srv] == [1, 1, 1]


def test_malformed_answers_are_asked_again_and_stored_raw(study, servers, make_panel):
    """Malformed, truncated or incomplete answers are asked again (3 attempts per
    request); a request still invalid keeps its raw answer and reason and counts as
    undecided; every call is counted on the run."""
    srv = servers(3, fault_rate=0.5, faults=["malformed", "truncated", "missing_doc"])
    panel = make_panel(srv)
    status, run = _run(study, panel, "rubric")
    assert status == RunStatus.DONE and run.answered == run.total == 48
    rows = PanelRequest.objects.filter(run=run)
    assert rows.filter(attempts__gt=1).exists()
    chat = sum(server.stats()["chat_requests"] for server, _ in srv)
    assert run.calls == chat == sum(rows.values_list("attempts", flat=True))
    for row in rows.filter(valid=False):
        assert row.attempts == 3 and row.raw_response and row.side == ""
        assert row.error.split(":")[0] in {"invalid_json", "truncated", "incomplete"}
    assert run.valid == rows.filter(valid=True).count()
    assert run.invalid == rows.filter(valid=False).count()


def test_queued_run_and_wait_follow_it_to_the_end(study, servers, make_panel, capsys):
    """Without --inline, run_panel queues panel_run_task on commit (run eagerly
    here, as a worker would); --wait follows the run until it is done."""
    from rcp_platform.celery import app as celery_app

    make_panel(servers(3))
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    try:
        call_command("run_panel", "--study", str(study.pk), "--panel", "trio", "--wait")
    finally:
        celery_app.conf.task_always_eager = eager
    out = capsys.readouterr().out
    assert "done: 48/48 answered" in out
    # The task is safe to run twice: a second copy finds nothing to ask.
    from panels.tasks import panel_run_task

    run = PanelRun.objects.get()
    assert panel_run_task.run(run.pk) == RunStatus.DONE
    run.refresh_from_db()
    assert run.calls == 48


def test_report_compares_panel_verdicts_with_graded_human_verdicts(
    study, truth_world, servers, make_panel
):
    """With three annotators' grades in, the panel section's agreement with the
    human majority is the share of contests both decided where the verdicts are
    equal (recomputed from the per-contest rows); a subset report (one system left
    out) restricts the panel section to the same contests."""
    from annotation.services import study_member_add
    from tests.annotation.factories import simulate_grading
    from tests.factories import AnnotatorFactory

    users = AnnotatorFactory.create_batch(3)
    for user in users:
        study_member_add(study=study, annotator=user)
    assert (
        simulate_grading(study=study, annotators=users, truth=truth_world.truth) == 24
    )
    panel = make_panel(servers(3, **STRONG))
    assert _run(study, panel)[0] == RunStatus.DONE
    report, _ = study_report_build(study=study)
    (section,) = report["panels"]["runs"]
    assert section["human_graded"] == 8
    human = {r["contest_id"]: r["verdict"] for r in report["per_contest"]}
    both = [
        r
        for r in section["per_contest"]
        if r["verdict"] in ("A", "B") and human[r["contest_id"]] in ("A", "B")
    ]
    agree = section["agreement"]["human"]
    assert agree["n"] == len(both) > 0
    assert agree["k"] == sum(r["verdict"] == human[r["contest_id"]] for r in both)
    assert all(
        r["human_verdict"] == human[r["contest_id"]] for r in section["per_contest"]
    )
    left_out = study.systems.order_by("name").first().name
    subset, _ = study_report_build(study=study, exclude_systems=[left_out])
    (sub,) = subset["panels"]["runs"]
    assert sub["contests"] == subset["contests"] < 8
    assert {r["contest_id"] for r in sub["per_contest"]} == {
        r["contest_id"] for r in subset["per_contest"]
    }


def test_a_panel_pilot_feeds_the_power_planner(study, servers, make_panel):
    """Before any human grade, the planner's true rate and counted share are the
    panel pilot's observed main measure (k/n over the study's contests), labelled as
    such; the plan equals the one computed from those numbers given by hand."""
    from annotation.services import power_plan_build

    panel = make_panel(servers(3))  # an imperfect judge: a rate inside (0, 1)
    assert _run(study, panel)[0] == RunStatus.DONE
    report, _ = study_report_build(study=study)
    (run,) = report["panels"]["runs"]
    main = run["agreement"]["main"]
    assert 0 < main["k"] < main["n"] and report["main"]["n"] == 0
    plan = power_plan_build(true_rate=None, study=study)
    assert plan["true_rate"] == pytest.approx(main["rate"])
    assert plan["counted_share"] == pytest.approx(main["n"] / report["contests"])
    assert "LLM panel" in plan["inputs"]["true_rate"]
    by_hand = power_plan_build(
        true_rate=main["rate"],
        chance_rate=plan["chance_rate"],
        counted_share=main["n"] / report["contests"],
    )
    assert by_hand["contests"] == plan["contests"]
    out = io.StringIO()
    call_command("plan_study", "--study", str(study.pk), stdout=out)
    assert f"{plan['contests']} contests" in out.getvalue()
    assert "LLM panel" in out.getvalue()
