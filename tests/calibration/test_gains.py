"""Released labels with no judge: import_gains + leaderboard reproduce rcp_facts 10.4,
export/import round trips, and bad files are refused naming file, line and field."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from calibration.models import CalibrationFit, DocumentAbility, FitMode, FitSource
from calibration.selectors import leaderboard_compute, run_read, run_score
from calibration.services import GainsImportFailed, gains_export, gains_import
from rcp_platform.exceptions import ApplicationError
from tests.calibration.conftest import write_released_gains
from tests.conftest import DEMO_TINY

pytestmark = pytest.mark.django_db

RCP = {
    "bm25": ([0.943953, 0.876292, 0.779113], 0.866453),
    "reranker": ([0.977301, 0.982348, 1.000000], 0.986550),
}
QREL = {
    "bm25": ([0.931330, 0.774759, 0.658992], 0.788361),
    "reranker": ([0.973012, 1.000000, 1.000000], 0.991004),
}


def _run_json(*args: str) -> dict:
    out = io.StringIO()
    call_command("leaderboard", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_import_gains_and_leaderboard_reproduce_tiny_numbers(tiny, tmp_path):
    """rcp_facts 10.4 with no judge: RCP-nDCG@5 and qrel-nDCG@5 means, the paired t
    of reranker minus bm25, and the JSON shape of the issue."""
    path = write_released_gains(tmp_path / "gains.tsv")
    out = io.StringIO()
    call_command("import_gains", "--dataset", "tiny", str(path), stdout=out)
    assert "imported 24 gains over 3 queries" in out.getvalue()
    fit = CalibrationFit.objects.get()
    assert (fit.source, fit.mode, fit.status) == (
        FitSource.IMPORT,
        FitMode.RELEASED,
        "done",
    )
    assert DocumentAbility.objects.get(
        document__external_id="q1-d0"
    ).gain == pytest.approx(0.863536, abs=1e-6)

    board = _run_json("--dataset", "tiny", "--k", "5", "--protocol", "plain")
    assert set(board) >= {
        "k",
        "protocol",
        "systems",
        "pairs",
        "sensitivity",
        "failure_modes",
    }
    assert (board["k"], board["protocol"]) == (5, "plain")
    by_name = {s["system"]: s for s in board["systems"]}
    assert [s["system"] for s in board["systems"]] == ["reranker", "bm25"]
    for name in ("bm25", "reranker"):
        row = by_name[name]
        assert row["rcp_ndcg"] == pytest.approx(RCP[name][1], abs=1e-6)
        assert row["qrel_ndcg"] == pytest.approx(QREL[name][1], abs=1e-6)
        assert row["count_ndcg"] is None  # released gains carry no rubric counts
        lo, hi = row["rcp_ci"]
        assert lo <= row["rcp_ndcg"] <= hi
    pairs = {(p["a"], p["b"], p["metric"]): p for p in board["pairs"]}
    rcp = pairs["bm25", "reranker", "rcp_ndcg"]
    qrel = pairs["bm25", "reranker", "qrel_ndcg"]
    assert rcp["delta"] == pytest.approx(0.120097, abs=1e-6)
    assert rcp["p"] == pytest.approx(0.1588, abs=1e-4)
    assert qrel["delta"] == pytest.approx(0.202643, abs=1e-6)
    assert qrel["p"] == pytest.approx(0.1456, abs=1e-4)
    assert not rcp["separated"] and not rcp["tie_zone"]
    assert board["sensitivity"]["rcp_ndcg"] == 0.0
    assert board["failure_modes"]["rcp_ndcg"] == {
        "saturation": 0.0,
        "floor": 0.0,
        "compression": 0.0,
        "tie_zone": 0.0,
    }


def test_leaderboard_per_query_values(tiny, tmp_path):
    """Per-query RCP-nDCG@5 and qrel-nDCG@5 of both systems match 10.4 to 1e-6."""
    gains_import(dataset=tiny, path=write_released_gains(tmp_path / "g.tsv"))
    board = leaderboard_compute(
        datasets=[tiny], k=5, protocol="plain", include_queries=True
    )
    for row in board["systems"]:
        got = row["per_query"]
        assert [got["rcp_ndcg"][q] for q in ("q1", "q2", "q3")] == pytest.approx(
            RCP[row["system"]][0], abs=1e-6
        )
        assert [got["qrel_ndcg"][q] for q in ("q1", "q2", "q3")] == pytest.approx(
            QREL[row["system"]][0], abs=1e-6
        )


def test_new_run_scored_against_gains_without_a_judge(tiny, tmp_path):
    """An unsaved TREC run is scored against the imported gains: the bm25 file gives
    the bm25 numbers; the command's --run adds it to the table."""
    gains_import(
        dataset=tiny, path=write_released_gains(tmp_path / "g.tsv", theta=False)
    )
    score = run_score(
        dataset=tiny, run=run_read(path=DEMO_TINY / "bm25.trec"), k=5, protocol="plain"
    )
    assert score["system"] == "uploaded run"
    assert score["rcp_ndcg"] == pytest.approx(0.866453, abs=1e-6)
    assert score["per_query"]["rcp_ndcg"]["q2"] == pytest.approx(0.876292, abs=1e-6)
    board = _run_json(
        "--dataset", "tiny", "--k", "5", "--run", f"mine={DEMO_TINY / 'reranker.trec'}"
    )
    mine = next(s for s in board["systems"] if s["system"] == "mine")
    assert mine["rcp_ndcg"] == pytest.approx(0.986550, abs=1e-6)


def test_run_matching_no_judged_document_is_refused_with_an_example(tiny, tmp_path):
    gains_import(dataset=tiny, path=write_released_gains(tmp_path / "g.tsv"))
    with pytest.raises(ApplicationError) as err:
        run_score(dataset=tiny, run={"q1": {"other-doc": 1.0}}, k=5)
    assert "matches no judged document" in err.value.message
    assert "'other-doc'" in err.value.message and "'q1-d0'" in err.value.message
    bad = tmp_path / "bad.trec"
    bad.write_text("q9 Q0 zzz 1 1.0 x\n")
    with pytest.raises(CommandError, match="matches no judged document.*'zzz'"):
        call_command("leaderboard", "--dataset", "tiny", "--run", str(bad))


def test_export_import_round_trip(tiny, tmp_path):
    """export -> import -> export gives the identical file, with qrel grades."""
    gains_import(dataset=tiny, path=write_released_gains(tmp_path / "g.tsv"))
    first = tmp_path / "first.tsv"
    call_command(
        "export_gains", "--dataset", "tiny", "--out", str(first), stdout=io.StringIO()
    )
    text = first.read_text()
    lines = text.splitlines()
    assert lines[0] == "query_id\tdoc_id\ttheta\tgain\tcount_gain\tqrel"
    assert len(lines) == 25
    q1d0 = lines[1].split("\t")
    assert q1d0[:2] == ["q1", "q1-d0"] and float(q1d0[2]) == 2.4
    assert float(q1d0[3]) == pytest.approx(0.863536, abs=1e-6)
    assert q1d0[4] == "" and q1d0[5] == "2"
    assert lines[-1].split("\t")[5] == ""  # q3-d7 has no qrel
    call_command("import_gains", "--dataset", "tiny", str(first), stdout=io.StringIO())
    assert CalibrationFit.objects.count() == 2
    again = io.StringIO()
    gains_export(dataset=tiny, out=again)
    assert again.getvalue() == text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("query_id\tdoc_id\n", "line 1: header must name query_id, doc_id and gain"),
        (
            "query_id\tdoc_id\tgain\nq1\tq1-d0\tabc\n",
            "line 2, field 'gain': 'abc' is not a number",
        ),
        (
            "query_id\tdoc_id\tgain\nq1\tq1-d0\t1.5\n",
            "line 2, field 'gain': 1.5 is outside [0, 1]",
        ),
        (
            "query_id\tdoc_id\tgain\ttheta\nq1\tq1-d0\t0.5\tnan\n",
            "line 2, field 'theta': 'nan' is not finite",
        ),
        (
            "query_id\tdoc_id\tgain\nq1\tq1-d0\t0.5\tx\n",
            "line 2: expected 3 columns, found 4",
        ),
        (
            "query_id\tdoc_id\tgain\nq1\tq1-d0\t0.5\nq1\tq1-d0\t0.4\n",
            "line 3: duplicate query/doc 'q1'/'q1-d0' (first on line 2)",
        ),
        (
            "query_id\tdoc_id\tgain\nq1\tq1-d0\t0.5\nq7\tq1-d1\t0.4\n",
            "line 3, field 'query_id': unknown query 'q7'",
        ),
        (
            "query_id\tdoc_id\tgain\nq1\tq1-d0\t0.5\nq1\tnope\t0.4\n",
            "line 3, field 'doc_id': unknown document 'nope'",
        ),
        (
            "query_id\tdoc_id\tgain\nx1\ty1\t0.5\n",
            "no line matches dataset 'tiny': the file has query 'x1'",
        ),
        ("", "gains.tsv: file is empty"),
    ],
)
def test_bad_gains_files_are_refused_atomically(tiny, tmp_path, content, message):
    path = tmp_path / "gains.tsv"
    path.write_text(content)
    with pytest.raises(GainsImportFailed) as err:
        gains_import(dataset=tiny, path=path)
    assert message in err.value.message
    assert str(path) in err.value.message
    assert not CalibrationFit.objects.exists() and not DocumentAbility.objects.exists()
    with pytest.raises(CommandError, match="Nothing was imported"):
        call_command("import_gains", "--dataset", "tiny", str(path))


def test_commands_name_unknown_dataset_and_missing_fit(tiny):
    with pytest.raises(CommandError, match="dataset 'nope' does not exist"):
        call_command("leaderboard", "--dataset", "nope")
    with pytest.raises(CommandError, match="has no calibration yet"):
        call_command("export_gains", "--dataset", "tiny", "--out", "-")


def test_leaderboard_without_a_fit_shows_qrel_ndcg_like_trec_eval(tiny):
    """No calibration: the leaderboard (command, JSON) shows qrel-nDCG alone, equal
    to the pinned trec_eval-convention numbers of rcp_facts 10.4, says that RCP
    columns need `calibrate` or `import_gains`, and leaves RCP/Count empty."""
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "leaderboard",
        "--dataset",
        "tiny",
        "--k",
        "5",
        "--protocol",
        "plain",
        "--json",
        stdout=out,
        stderr=err,
    )
    board = json.loads(out.getvalue())
    assert board["qrel_only"] and board["fits"] == {"tiny": None}
    rows = {s["system"]: s for s in board["systems"]}
    assert rows["bm25"]["qrel_ndcg"] == pytest.approx(0.788361, abs=1e-6)
    assert rows["reranker"]["qrel_ndcg"] == pytest.approx(0.991004, abs=1e-6)
    assert rows["bm25"]["rcp_ndcg"] is None and rows["bm25"]["count_ndcg"] is None
    assert [s["system"] for s in board["systems"]] == ["reranker", "bm25"]
    assert board["metrics"] == ["qrel_ndcg"]
    assert "need `calibrate`" in err.getvalue() and "import_gains" in err.getvalue()
    text = io.StringIO()
    call_command("leaderboard", "--dataset", "tiny", stdout=text, stderr=io.StringIO())
    assert "none (qrel-nDCG only)" in text.getvalue()


def test_text_table_highlights_rank_changes(tiny, tmp_path):
    """The plain table prints CIs and the pair-test summary."""
    gains_import(dataset=tiny, path=write_released_gains(tmp_path / "g.tsv"))
    out = io.StringIO()
    call_command("leaderboard", "--dataset", "tiny", "--k", "5", stdout=out)
    text = out.getvalue()
    rows = {line.split()[0]: line for line in text.splitlines()[2:4]}
    assert "0.8665 [" in rows["bm25"] and "0.7884 [" in rows["bm25"]
    assert "0.9865" in rows["reranker"] or "0.9866" in rows["reranker"]
    assert "0 of 2 pair tests separated" in text
    assert np.isfinite(float(text.split("sensitivity rcp_ndcg ")[1].split(",")[0]))
