"""Importers: good files in every supported format, and each malformed-input class
refused with file and line, leaving the database exactly as before."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from benchmarks import services
from benchmarks.models import (
    Dataset,
    Document,
    PoolEntry,
    Qrel,
    Query,
    RankingEntry,
    System,
)
from benchmarks.services import ImportFailed, dataset_import, run_import
from rcp_platform.exceptions import ConflictError
from tests.conftest import DEMO_TINY

pytestmark = pytest.mark.django_db


def snapshot() -> dict[str, int]:
    return {
        m.__name__: m.objects.count()
        for m in (Dataset, Query, Document, PoolEntry, Qrel, System, RankingEntry)
    }


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def corpus_lines(n: int = 4) -> list[str]:
    return [
        json.dumps({"_id": f"d{i}", "title": f"T{i}", "text": f"text {i}"})
        for i in range(1, n + 1)
    ]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "corpus": write(tmp_path / "corpus.jsonl", corpus_lines()),
        "queries": write(
            tmp_path / "queries.jsonl",
            [
                json.dumps({"_id": "q1", "text": "first"}),
                json.dumps({"_id": 2, "text": "second"}),
            ],
        ),
        "qrels": write(
            tmp_path / "qrels.tsv",
            ["query-id\tcorpus-id\tscore", "q1\td1\t2", "q1\td2\t0", "2\td3\t1"],
        ),
        "pools": write(
            tmp_path / "pools.tsv", ["q1\td1\t1", "q1\td2\t2", "2\td3\t1", "2\td4\t2"]
        ),
    }


@pytest.fixture
def tiny() -> Dataset:
    dataset = dataset_import(
        name="tiny",
        corpus=DEMO_TINY / "corpus.jsonl",
        queries=DEMO_TINY / "queries.jsonl",
        qrels=DEMO_TINY / "qrels.tsv",
        pools=DEMO_TINY / "pools.tsv",
    )
    run_import(dataset=dataset, system_name="bm25", path=DEMO_TINY / "bm25.trec")
    return dataset


def test_tiny_dataset_imports_with_expected_counts_and_values(tiny: Dataset) -> None:
    """The reference tiny set: 3 queries x 8 docs, 13 graded qrels, pools in file order."""
    assert tiny.queries.count() == 3
    assert tiny.documents.count() == 24
    assert Qrel.objects.filter(query__dataset=tiny).count() == 13
    assert (
        Qrel.objects.get(query__external_id="q1", document__external_id="q1-d2").grade
        == 1.0
    )
    pool = list(
        PoolEntry.objects.filter(query__external_id="q2")
        .order_by("rank")
        .values_list("document__external_id", flat=True)
    )
    assert pool == [f"q2-d{i}" for i in range(8)]
    top = list(
        RankingEntry.objects.filter(system__name="bm25", query__external_id="q1")
        .order_by("rank")
        .values_list("document__external_id", "score")[:3]
    )
    assert top == [("q1-d0", 4.283), ("q1-d3", 0.941), ("q1-d2", -0.759)]


def test_beir_files_with_integer_ids_and_optional_title(files: dict[str, Path]) -> None:
    dataset = dataset_import(name="x", **files)
    assert sorted(dataset.queries.values_list("external_id", flat=True)) == ["2", "q1"]
    assert Qrel.objects.get(query__external_id="2").grade == 1.0
    assert PoolEntry.objects.filter(query__dataset=dataset).count() == 4


def test_trec_qrels_detected_and_gzip_accepted(
    files: dict[str, Path], tmp_path: Path
) -> None:
    qrels = tmp_path / "qrels.trec.gz"
    with gzip.open(qrels, "wt") as handle:
        handle.write("q1 0 d1 3\nq1 0 d4 1\n")
    corpus = tmp_path / "corpus.jsonl.gz"
    with gzip.open(corpus, "wt") as handle:
        handle.write("\n".join(corpus_lines()) + "\n")
    dataset = dataset_import(
        name="x", corpus=corpus, queries=files["queries"], qrels=qrels
    )
    grades = dict(
        Qrel.objects.filter(query__dataset=dataset).values_list(
            "document__external_id", "grade"
        )
    )
    assert grades == {"d1": 3.0, "d4": 1.0}


def test_run_ranks_follow_scores_and_ties_keep_file_rank(
    files: dict[str, Path], tmp_path: Path
) -> None:
    """Ranks come from the score, descending; equal scores keep the file's rank order."""
    dataset = dataset_import(name="x", **files)
    run = write(
        tmp_path / "run.trec",
        [
            "q1 Q0 d1 1 0.5 s",
            "q1 Q0 d2 2 0.9 s",
            "q1 Q0 d4 4 0.7 s",
            "q1 Q0 d3 3 0.7 s",
        ],
    )
    run_import(dataset=dataset, system_name="s", path=run)
    order = list(
        RankingEntry.objects.filter(system__name="s")
        .order_by("rank")
        .values_list("document__external_id", "rank")
    )
    assert order == [("d2", 1), ("d3", 2), ("d4", 3), ("d1", 4)]


def test_pool_from_run_takes_top_depth_by_score(
    files: dict[str, Path], tmp_path: Path
) -> None:
    run = write(
        tmp_path / "run.trec",
        ["q1 Q0 d1 1 0.1 s", "q1 Q0 d2 2 0.9 s", "q1 Q0 d3 3 0.5 s", "2 Q0 d4 1 1 s"],
    )
    files = {k: v for k, v in files.items() if k != "pools"}
    dataset = dataset_import(name="x", pool_from_run=run, depth=2, **files)
    pool = list(
        PoolEntry.objects.filter(query__dataset=dataset)
        .order_by("query__external_id", "rank")
        .values_list("query__external_id", "document__external_id", "rank")
    )
    assert pool == [("2", "d4", 1), ("q1", "d2", 1), ("q1", "d3", 2)]


BAD_CASES = {
    # name: (file role, lines, expected line, expected message fragment)
    "bad json": ("corpus", [*corpus_lines(2), '{"_id": "d9", "text": '], 3, "bad JSON"),
    "missing _id": (
        "corpus",
        [*corpus_lines(2), '{"text": "no id"}'],
        3,
        "missing field '_id'",
    ),
    "missing text": ("queries", ['{"_id": "q1"}'], 1, "missing field 'text'"),
    "duplicate doc id": (
        "corpus",
        [*corpus_lines(3), json.dumps({"_id": "d2", "text": "again"})],
        4,
        "duplicate document id 'd2'",
    ),
    "duplicate query id": (
        "queries",
        ['{"_id": "q1", "text": "a"}', '{"_id": "q1", "text": "b"}'],
        2,
        "duplicate query id 'q1'",
    ),
    "unknown query in qrels": (
        "qrels",
        ["q1\td1\t1", "q7\td1\t1"],
        2,
        "unknown query id 'q7'",
    ),
    "unknown doc in pools": (
        "pools",
        ["q1\td1\t1", "q1\td99\t2"],
        2,
        "unknown document id 'd99'",
    ),
    "qrels wrong column count": (
        "qrels",
        ["q1\td1\t1", "q1\td2"],
        2,
        "wrong column count",
    ),
    "qrels non-numeric grade": (
        "qrels",
        ["q1 0 d1 1", "q1 0 d2 high"],
        2,
        "grade 'high' is not a number",
    ),
    "pools non-integer rank": (
        "pools",
        ["q1\td1\t1", "q1\td2\tx2"],
        2,
        "rank 'x2' is not an integer",
    ),
    "pools wrong column count": (
        "pools",
        ["q1\td1\t1\textra"],
        1,
        "wrong column count",
    ),
    "duplicate qrel": ("qrels", ["q1\td1\t1", "q1\td1\t2"], 2, "duplicate qrel"),
    "empty corpus": ("corpus", [], None, "file is empty"),
    "empty qrels": ("qrels", ["", "  "], None, "file is empty"),
    # What PostgreSQL refuses (DataError, ValueError) is refused by the parser, with
    # its line, on every database.
    "lone surrogate in text": (
        "corpus",
        [*corpus_lines(2), json.dumps({"_id": "d3", "text": "bad \ud800 half"})],
        3,
        "field 'text' contains a lone surrogate (\\ud800)",
    ),
    "lone surrogate in id": (
        "queries",
        [json.dumps({"_id": "q\udc80", "text": "x"})],
        1,
        "field '_id' contains a lone surrogate (\\udc80)",
    ),
    "NUL in JSON text": (
        "corpus",
        [json.dumps({"_id": "d1", "title": "a\u0000b", "text": "x"})],
        1,
        "field 'title' contains a NUL character",
    ),
    "NUL byte in a TSV line": (
        "pools",
        ["q1\td1\t1", "q1\td2\x00\t2"],
        2,
        "contains a NUL character",
    ),
    "over-long document id": (
        "corpus",
        [json.dumps({"_id": "d" * 201, "text": "x"})],
        1,
        "field '_id' is 201 characters long; ids have at most 200",
    ),
    "over-long query id in qrels": (
        "qrels",
        ["q1\td1\t1", f"{'q' * 300}\td1\t1"],
        2,
        "field 'query id' is 300 characters long",
    ),
    "pools with only a header": (
        "pools",
        ["query-id\tcorpus-id\trank"],
        None,
        "no pool entries after the header line",
    ),
    "qrels with only a header": (
        "qrels",
        ["query-id\tcorpus-id\tscore"],
        None,
        "no qrels after the header line",
    ),
    "negative grade": (
        "qrels",
        ["q1 0 d1 1", "q1 0 d2 -1"],
        2,
        "grade -1 is negative",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_malformed_dataset_files_are_refused_atomically(
    case: str, files: dict[str, Path], tiny: Dataset
) -> None:
    """Each error class names file and line, and nothing at all is written."""
    role, lines, line, fragment = BAD_CASES[case]
    write(files[role], lines)
    before = snapshot()
    with pytest.raises(ImportFailed) as info:
        dataset_import(name="x", **files)
    assert fragment in info.value.message
    assert info.value.path == str(files[role])
    assert info.value.line == line
    if line is not None:
        assert f"{files[role]}, line {line}:" in info.value.message
    assert snapshot() == before


def test_duplicate_across_batches_names_the_later_line(
    files: dict[str, Path], monkeypatch
) -> None:
    """A duplicate id in a later batch than its first occurrence is still located."""
    monkeypatch.setattr(services, "BATCH_SIZE", 2)
    write(
        files["corpus"], [*corpus_lines(5), json.dumps({"_id": "d1", "text": "again"})]
    )
    with pytest.raises(ImportFailed) as info:
        dataset_import(name="x", **files)
    assert info.value.line == 6 and "duplicate document id 'd1'" in info.value.message
    assert snapshot()["Document"] == 0


def test_failure_late_in_a_large_file_leaves_nothing(
    files: dict[str, Path], monkeypatch
) -> None:
    """Batches already inserted before the bad line are rolled back too."""
    monkeypatch.setattr(services, "BATCH_SIZE", 3)
    write(files["corpus"], [*corpus_lines(10), "not json"])
    with pytest.raises(ImportFailed) as info:
        dataset_import(name="x", **files)
    assert info.value.line == 11
    assert all(v == 0 for v in snapshot().values())


def test_file_matching_no_ids_gives_examples_from_both_sides(
    files: dict[str, Path],
) -> None:
    write(files["qrels"], ["Q-1\tDOC-1\t1", "Q-2\tDOC-2\t1"])
    with pytest.raises(ImportFailed) as info:
        dataset_import(name="x", **files)
    message = info.value.message
    assert "no line matches the dataset 'x'" in message
    assert "'Q-1'" in message and "query 'q1'" in message and "document 'd1'" in message


def test_reimport_refused_without_replace_and_failed_replace_keeps_old(
    files: dict[str, Path],
) -> None:
    dataset_import(name="x", **files)
    with pytest.raises(ConflictError, match="--replace"):
        dataset_import(name="x", **files)
    before = snapshot()
    write(files["pools"], ["q1\td1\t1", "q1\tnope\t2"])
    with pytest.raises(ImportFailed):
        dataset_import(name="x", replace=True, **files)
    assert snapshot() == before
    write(files["pools"], ["q1\td1\t1"])
    dataset_import(name="x", replace=True, **files)
    assert PoolEntry.objects.count() == 1 and Dataset.objects.count() == 1


RUN_CASES = {
    "unknown doc": (
        ["q1 Q0 d1 1 2.0 s", "q1 Q0 zzz 2 1.0 s"],
        2,
        "unknown document id 'zzz'",
    ),
    "unknown query": (
        ["q1 Q0 d1 1 2.0 s", "q9 Q0 d2 1 1.0 s"],
        2,
        "unknown query id 'q9'",
    ),
    "non-numeric score": (
        ["q1 Q0 d1 1 2.0 s", "q1 Q0 d2 2 abc s"],
        2,
        "score 'abc' is not a number",
    ),
    "wrong column count": (["q1 Q0 d1 1 2.0 s", "q1 d2 2"], 2, "wrong column count"),
    "duplicate doc": (
        ["q1 Q0 d1 1 2.0 s", "q1 Q0 d1 2 1.0 s"],
        2,
        "duplicate document 'd1'",
    ),
    "empty": ([], None, "file is empty"),
}


@pytest.mark.parametrize("case", sorted(RUN_CASES))
def test_malformed_runs_are_refused_atomically(
    case: str, tiny: Dataset, tmp_path: Path
) -> None:
    lines, line, fragment = RUN_CASES[case]
    dataset = dataset_import(
        name="x",
        corpus=write(tmp_path / "c.jsonl", corpus_lines()),
        queries=write(tmp_path / "q.jsonl", ['{"_id": "q1", "text": "a"}']),
    )
    before = snapshot()
    path = write(tmp_path / "run.trec", lines)
    with pytest.raises(ImportFailed) as info:
        run_import(dataset=dataset, system_name="s", path=path)
    assert fragment in info.value.message and info.value.line == line
    assert snapshot() == before


def test_run_matching_nothing_is_refused_with_examples(
    tiny: Dataset, tmp_path: Path
) -> None:
    path = write(tmp_path / "run.trec", ["1 Q0 7 1 2.0 s", "1 Q0 8 2 1.0 s"])
    with pytest.raises(ImportFailed) as info:
        run_import(dataset=tiny, system_name="other", path=path)
    assert "no line matches the dataset 'tiny'" in info.value.message
    assert "'1'" in info.value.message and "query 'q1'" in info.value.message


def test_existing_system_needs_replace(tiny: Dataset) -> None:
    with pytest.raises(ConflictError):
        run_import(dataset=tiny, system_name="bm25", path=DEMO_TINY / "reranker.trec")
    run_import(
        dataset=tiny, system_name="bm25", path=DEMO_TINY / "reranker.trec", replace=True
    )
    top = RankingEntry.objects.get(system__name="bm25", query__external_id="q1", rank=1)
    assert top.document.external_id == "q1-d0" and top.score == 2.128


def test_commands_print_file_and_line_and_exit_nonzero(
    files: dict[str, Path], capsys
) -> None:
    write(files["qrels"], ["q1\td1\t1", "q1\td1"])
    with pytest.raises(CommandError) as info:
        call_command(
            "import_dataset",
            "--name",
            "x",
            "--corpus",
            str(files["corpus"]),
            "--queries",
            str(files["queries"]),
            "--qrels",
            str(files["qrels"]),
        )
    assert f"{files['qrels']}, line 2: wrong column count" in str(info.value)
    assert "Nothing was imported" in str(info.value)
    assert Dataset.objects.count() == 0


def test_commands_import_and_report_counts(
    files: dict[str, Path], tmp_path: Path, capsys
) -> None:
    call_command(
        "import_dataset",
        "--name",
        "x",
        "--corpus",
        str(files["corpus"]),
        "--queries",
        str(files["queries"]),
        "--qrels",
        str(files["qrels"]),
        "--pools",
        str(files["pools"]),
    )
    run = write(tmp_path / "run.trec", ["q1 Q0 d1 1 2.0 s", "q1 Q0 d2 2 1.0 s"])
    call_command("import_run", "--dataset", "x", "--system", "s", str(run))
    capsys.readouterr()
    call_command("dataset_info", "x", "--json")
    info = json.loads(capsys.readouterr().out)
    assert {
        k: info[k]
        for k in (
            "queries",
            "documents",
            "pool_entries",
            "qrels",
            "systems",
            "ranking_entries",
        )
    } == {
        "queries": 2,
        "documents": 4,
        "pool_entries": 4,
        "qrels": 3,
        "systems": 1,
        "ranking_entries": 2,
    }
    assert info["system_names"] == ["s"]


def test_dataset_delete_removes_only_that_dataset(
    tiny: Dataset, files: dict[str, Path]
) -> None:
    other = dataset_import(name="x", **files)
    run_import(
        dataset=other,
        system_name="s",
        path=write(files["pools"].with_name("r.trec"), ["q1 Q0 d1 1 1 s"]),
    )
    services.dataset_delete(dataset=tiny)
    assert snapshot() == {
        "Dataset": 1,
        "Query": 2,
        "Document": 4,
        "PoolEntry": 4,
        "Qrel": 3,
        "System": 1,
        "RankingEntry": 1,
    }


def test_files_with_a_byte_order_mark_import(files: dict[str, Path]) -> None:
    """A UTF-8 BOM (as Windows tools write it) before TREC qrels or JSONL is
    skipped, not read as part of the first id."""
    files["qrels"].write_text(
        "\ufeffq1 0 d1 2\nq1 0 d2 0\n2 0 d3 1\n", encoding="utf-8"
    )
    corpus = files["corpus"]
    corpus.write_text("\ufeff" + corpus.read_text(encoding="utf-8"), encoding="utf-8")
    dataset = dataset_import(name="bom", **files)
    grades = dict(
        Qrel.objects.filter(query__dataset=dataset).values_list(
            "document__external_id", "grade"
        )
    )
    assert grades == {"d1": 2.0, "d2": 0.0, "d3": 1.0}
    assert Document.objects.filter(dataset=dataset, external_id="d1").exists()


def _gzip(path: Path, chunks) -> Path:
    with gzip.open(path, "wb", compresslevel=9) as fh:
        for chunk in chunks:
            fh.write(chunk)
    return path


def test_gzip_bomb_is_refused_at_the_size_cap(
    files: dict[str, Path], tmp_path: Path, settings
) -> None:
    """A small .gz of many megabytes of blank lines stops at IMPORT_MAX_BYTES with
    the file and line, and nothing is written."""
    settings.IMPORT_MAX_BYTES = 1_000_000
    line = b" " * 999 + b"\n"
    bomb = _gzip(
        tmp_path / "corpus.jsonl.gz",
        [corpus_lines(1)[0].encode() + b"\n", *([line * 1000] * 20)],  # 20 MB
    )
    assert bomb.stat().st_size < 100_000
    before = snapshot()
    with pytest.raises(ImportFailed) as info:
        dataset_import(name="bomb", **{**files, "corpus": bomb})
    message = info.value.message
    assert message.startswith(f"{bomb}, line ")
    assert "more than 1000000 bytes after decompression (IMPORT_MAX_BYTES)" in message
    assert 900 < info.value.line <= 1002  # stopped near the cap, not at the end
    assert snapshot() == before


def test_huge_line_is_refused_at_the_line_cap(
    files: dict[str, Path], tmp_path: Path, settings
) -> None:
    """One endless line (a gzip of spaces without a newline) is refused at
    IMPORT_MAX_LINE_CHARS instead of being read into memory whole."""
    settings.IMPORT_MAX_LINE_CHARS = 65_536
    bomb = _gzip(tmp_path / "pools.tsv.gz", [b" " * 1_000_000] * 10)  # 10 MB
    with pytest.raises(ImportFailed) as info:
        dataset_import(name="bomb", **{**files, "pools": bomb})
    assert info.value.message == (
        f"{bomb}, line 1: line longer than 65536 characters "
        "(IMPORT_MAX_LINE_CHARS); refused"
    )
    assert not Dataset.objects.filter(name="bomb").exists()
