"""import_judgments / export_judgments: the DESIGN.md JSONL format, atomic imports
with file/line/field errors, and an identical export -> import -> export round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from benchmarks.services import dataset_import
from judging.models import Judge, JudgmentWindow
from judging.services import JudgmentImportError, judgments_import
from tests.conftest import DEMO_TINY

pytestmark = pytest.mark.django_db

LINES = [
    {
        "query_id": "q1",
        "stage": "tournament",
        "window": 0,
        "phase": "random",
        "doc_ids": ["q1-d0", "q1-d1", "q1-d2"],
        "scores": [2.5, 1.0, -3],
    },
    {
        "query_id": "q1",
        "stage": "A",
        "window": 1,
        "phase": "random",
        "doc_ids": ["q1-d2", "q1-d1", "q1-d0"],
        "scores": [-3, 1.0, 2.5],
    },
    {
        "query_id": "q2",
        "stage": "B",
        "window": 0,
        "phase": "random",
        "doc_ids": ["q2-d0", "q2-d5"],
        "answers": [[1, 1, True, 0, 0], [1, False, 0, 0, 0]],
    },
    {
        "query_id": "q2",
        "stage": "rubric",
        "window": 1,
        "phase": "stratified",
        "doc_ids": ["q2-d1"],
        "valid": False,
        "invalid_category": "truncated",
    },
]


@pytest.fixture
def tiny():
    return dataset_import(
        name="tiny",
        corpus=DEMO_TINY / "corpus.jsonl",
        queries=DEMO_TINY / "queries.jsonl",
        pools=DEMO_TINY / "pools.tsv",
    )


def write(path: Path, records: list) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)
    )
    return path


def test_import_stores_windows_and_normalises_stages_and_booleans(tiny, tmp_path):
    n = judgments_import(
        dataset=tiny, judge_name="gpt-offline", path=write(tmp_path / "j.jsonl", LINES)
    )
    assert n == 4
    judge = Judge.objects.get(name="gpt-offline")
    assert judge.offline
    w = JudgmentWindow.objects.get(query__external_id="q2", stage="rubric", seq=0)
    assert (
        w.answers == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]]
        and w.valid
        and w.status == "done"
    )
    assert JudgmentWindow.objects.get(
        query__external_id="q1", stage="tournament", seq=1
    ).scores == [-3.0, 1.0, 2.5]
    bad = JudgmentWindow.objects.get(query__external_id="q2", seq=1)
    assert (
        bad.valid is False
        and bad.invalid_category == "truncated"
        and bad.answers is None
    )


def test_export_import_export_is_identical(tiny, tmp_path):
    judgments_import(
        dataset=tiny, judge_name="j", path=write(tmp_path / "in.jsonl", LINES)
    )
    first = tmp_path / "first.jsonl"
    call_command("export_judgments", "--dataset", "tiny", "--out", str(first))
    JudgmentWindow.objects.all().delete()
    call_command("import_judgments", "--dataset", "tiny", "--judge", "j", str(first))
    second = tmp_path / "second.jsonl"
    call_command("export_judgments", "--dataset", "tiny", "--out", str(second))
    assert first.read_text() == second.read_text()
    exported = [json.loads(line) for line in first.read_text().splitlines()]
    assert [e["stage"] for e in exported] == [
        "tournament",
        "tournament",
        "rubric",
        "rubric",
    ]
    assert exported[0] == {
        "query_id": "q1",
        "stage": "tournament",
        "window": 0,
        "phase": "random",
        "doc_ids": ["q1-d0", "q1-d1", "q1-d2"],
        "scores": [2.5, 1.0, -3.0],
        "judge": "j",
        "valid": True,
    }


BAD = {
    "bad json": ('{"query_id": "q1", ', "bad JSON"),
    "missing field": (
        {"query_id": "q1", "stage": "A", "doc_ids": ["q1-d0"]},
        "missing field 'window'",
    ),
    "unknown query": (
        {**LINES[0], "query_id": "zz"},
        "field 'query_id': unknown query 'zz'",
    ),
    "unknown doc": (
        {**LINES[0], "doc_ids": ["q1-d0", "nope", "q1-d2"]},
        "field 'doc_ids': unknown document 'nope'",
    ),
    "bad stage": ({**LINES[0], "stage": "C"}, "field 'stage'"),
    "score count": (
        {**LINES[0], "scores": [1, 2]},
        "field 'scores' must list one number per document",
    ),
    "answer values": (
        {**LINES[2], "answers": [[1, 2, 0, 0, 0], [0, 0, 0, 0, 0]]},
        "field 'answers'",
    ),
    "duplicate window": (
        LINES[0],
        "window 0 (tournament) of this query is already stored",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_lines_are_refused_with_line_and_nothing_is_written(case, tiny, tmp_path):
    record, fragment = BAD[case]
    path = write(tmp_path / "j.jsonl", [LINES[0], LINES[2], record])
    with pytest.raises(JudgmentImportError) as info:
        judgments_import(dataset=tiny, judge_name="j", path=path)
    assert f"{path}, line 3: " in info.value.message and fragment in info.value.message
    assert JudgmentWindow.objects.count() == 0


def test_command_reports_error_and_exits_nonzero(tiny, tmp_path):
    path = write(tmp_path / "empty.jsonl", [])
    with pytest.raises(CommandError, match="file is empty"):
        call_command("import_judgments", "--dataset", "tiny", "--judge", "j", str(path))
