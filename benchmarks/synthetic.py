"""A seeded generator of readable synthetic benchmarks in our import formats. No Django.

Used by the ``demo`` command (about 20 queries x 60 documents) and by
``perf/bench_import.py`` (100k documents). ``write_judged_suite`` writes a simulated
judged suite with known truth (``rcp.simulate``) as import files, judgments
included, for ``perf/bench_calibration.py`` and end-to-end tests. Each query is about one subject; its
documents are written about that subject or a neighbouring one, a few are relevant
(sparse binary qrels), and systems of decreasing quality rank the pool with
``score = quality * relevance + noise``.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rcp.simulate import Suite

SUBJECTS = [
    ("solar panels", "convert sunlight into electricity with photovoltaic cells"),
    ("honey bees", "pollinate crops and live in colonies led by a queen"),
    ("volcanoes", "erupt when magma rises through cracks in the crust"),
    ("sourdough bread", "rises thanks to wild yeast and lactic acid bacteria"),
    ("black holes", "bend light because their gravity is extremely strong"),
    ("coral reefs", "are built by tiny animals that deposit calcium carbonate"),
    ("electric cars", "store energy in lithium-ion battery packs"),
    ("the Roman Empire", "was held together by roads, law and a professional army"),
    ("vaccines", "train the immune system to recognise a pathogen"),
    ("glaciers", "carve valleys as they slowly flow downhill under their own weight"),
    ("coffee", "contains caffeine, which blocks adenosine receptors"),
    ("earthquakes", "happen when stress along a fault is suddenly released"),
    ("photosynthesis", "turns carbon dioxide and water into sugar using light"),
    ("the printing press", "made books cheap after Gutenberg's movable type"),
    ("wind turbines", "turn the kinetic energy of air into electricity"),
    ("migraines", "are intense headaches often preceded by visual aura"),
    ("chess openings", "aim to control the centre and develop pieces quickly"),
    ("tea ceremonies", "follow precise steps of preparing and serving matcha"),
    ("rainforests", "hold more than half of the world's plant and animal species"),
    ("the stock market", "lets companies raise money by selling shares"),
    ("octopuses", "can change colour and solve puzzles with their arms"),
    ("nuclear fusion", "joins light nuclei and releases enormous energy"),
    ("marathon training", "builds endurance with long runs and gradual mileage"),
    ("3D printing", "builds objects layer by layer from a digital model"),
]
QUESTIONS = ["how do {s} work", "why do {s} matter", "what are {s}", "facts about {s}"]
ASPECTS = [
    "history",
    "cost",
    "safety",
    "environmental impact",
    "future",
    "common myths",
    "science",
    "everyday uses",
    "risks",
    "best practices",
]


@dataclass(frozen=True)
class SyntheticSpec:
    """Sizes of a synthetic benchmark. The pool of a query is its own documents first,
    then documents of other queries up to ``pool_depth``."""

    n_queries: int = 20
    docs_per_query: int = 60
    pool_depth: int = 60
    relevant_per_query: int = 4
    systems: tuple[tuple[str, float], ...] = (
        ("oracle-ish", 3.0),
        ("cross-encoder", 1.6),
        ("bi-encoder", 0.9),
        ("bm25", 0.4),
    )
    seed: int = 7
    gzip: bool = False


def _doc_text(
    rng: np.random.Generator,
    subject: tuple[str, str],
    relevant: bool,
    i: int,
    question: str = "",
) -> tuple[str, str]:
    name, fact = subject
    aspect = ASPECTS[int(rng.integers(len(ASPECTS)))]
    if relevant:
        # Relevant documents answer the query in its own words, so lexical judges
        # (the simulated judge, BM25) find them as a person would.
        title = f"{name.capitalize()}: {aspect} explained"
        text = (
            f"{question.capitalize()}? This guide explains how {name} {fact}. It covers "
            f"the {aspect} of {name} in detail, with examples and sources (note {i})."
        )
    else:
        title = f"Notes on {name} ({aspect})"
        text = (
            f"A short mention of {name} in a piece mostly about {aspect}; "
            f"it says little more about them (note {i})."
        )
    return title, text


def write_benchmark(
    out_dir: str | Path, spec: SyntheticSpec = SyntheticSpec()
) -> dict[str, Path]:
    """Write corpus/queries/qrels/pools and one run per system into ``out_dir``.

    Deterministic for a given spec. Returns the paths by role (``runs`` maps system
    name to path). Streams to disk: memory stays flat in the corpus size.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    ext = ".gz" if spec.gzip else ""

    def opener(name: str):
        path = out / f"{name}{ext}"
        return path, (
            gzip.open(path, "wt", encoding="utf-8")
            if spec.gzip
            else open(path, "w", encoding="utf-8")
        )

    paths: dict = {"runs": {}}
    n_docs = spec.n_queries * spec.docs_per_query
    corpus_path, corpus = opener("corpus.jsonl")
    queries_path, queries = opener("queries.jsonl")
    qrels_path, qrels = opener("qrels.tsv")
    pools_path, pools = opener("pools.tsv")
    run_files = {name: opener(f"{name}.trec") for name, _ in spec.systems}
    with corpus, queries, qrels, pools:
        qrels.write("query-id\tcorpus-id\tscore\n")
        for q in range(spec.n_queries):
            subject = SUBJECTS[q % len(SUBJECTS)]
            question = QUESTIONS[(q // len(SUBJECTS)) % len(QUESTIONS)].format(
                s=subject[0]
            )
            qid = f"q{q + 1}"
            queries.write(json.dumps({"_id": qid, "text": question}) + "\n")
            relevant = set(
                rng.choice(
                    spec.docs_per_query, spec.relevant_per_query, replace=False
                ).tolist()
            )
            own = [q * spec.docs_per_query + i for i in range(spec.docs_per_query)]
            for i, doc in enumerate(own):
                title, text = _doc_text(rng, subject, i in relevant, doc, question)
                corpus.write(
                    json.dumps({"_id": f"d{doc + 1}", "title": title, "text": text})
                    + "\n"
                )
                if i in relevant:
                    qrels.write(f"{qid}\td{doc + 1}\t1\n")
            extra = max(0, spec.pool_depth - len(own))
            others = (
                rng.choice(n_docs, size=min(extra * 2, n_docs), replace=False).tolist()
                if extra
                else []
            )
            others = [d for d in others if d // spec.docs_per_query != q][:extra]
            pool = own[: spec.pool_depth] + others
            for rank, doc in enumerate(pool, 1):
                pools.write(f"{qid}\td{doc + 1}\t{rank}\n")
            rel = np.array(
                [
                    1.0
                    if d // spec.docs_per_query == q
                    and (d % spec.docs_per_query) in relevant
                    else 0.0
                    for d in pool
                ]
            )
            for name, quality in spec.systems:
                scores = quality * rel + rng.normal(0.0, 1.0, len(pool))
                order = np.argsort(-scores, kind="stable")
                handle = run_files[name][1]
                for rank, j in enumerate(order, 1):
                    handle.write(
                        f"{qid} Q0 d{pool[j] + 1} {rank} {scores[j]:.4f} {name}\n"
                    )
    for name, (path, handle) in run_files.items():
        handle.close()
        paths["runs"][name] = path
    paths.update(
        corpus=corpus_path, queries=queries_path, qrels=qrels_path, pools=pools_path
    )
    return paths


JUDGED_SYSTEMS = (
    ("oracle", 0.2),
    ("strong", 0.6),
    ("medium", 1.0),
    ("fair", 1.5),
    ("weak", 2.5),
    ("noise", 8.0),
)


def write_judged_suite(
    out_dir: str | Path,
    suite: Suite,
    *,
    systems: tuple[tuple[str, float], ...] = JUDGED_SYSTEMS,
    qrel_threshold: float = 1.0,
    seed: int = 0,
) -> dict:
    """Write a simulated judged suite (``rcp.simulate``) in our import formats.

    Corpus/queries/pools/qrels (grade 1 where the true ability exceeds
    ``qrel_threshold``), one TREC run per system ranking each pool by
    ``truth + noise`` (noise sd from ``systems``), and ``judgments.jsonl`` with every
    window (invalid ones with ``valid: false``), ready for ``import_dataset``,
    ``import_run`` and ``import_judgments``. Document ids are ``q{j}-d{i}`` (local
    index i), so they match the suite's rows. Returns the paths by role.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    q_of = suite.doc_query
    offsets = np.concatenate([[0], np.cumsum(np.bincount(q_of))[:-1]])
    local = np.arange(q_of.size) - offsets[q_of]
    doc_id = [f"q{q}-d{i}" for q, i in zip(q_of.tolist(), local.tolist(), strict=True)]
    paths: dict = {
        "corpus": out / "corpus.jsonl",
        "queries": out / "queries.jsonl",
        "qrels": out / "qrels.tsv",
        "pools": out / "pools.tsv",
        "judgments": out / "judgments.jsonl",
        "runs": {name: out / f"{name}.trec" for name, _ in systems},
    }
    with (
        open(paths["corpus"], "w", encoding="utf-8") as corpus,
        open(paths["queries"], "w", encoding="utf-8") as queries,
        open(paths["qrels"], "w", encoding="utf-8") as qrels,
        open(paths["pools"], "w", encoding="utf-8") as pools,
    ):
        qrels.write("query-id\tcorpus-id\tscore\n")
        for j in range(suite.n_queries):
            subject = SUBJECTS[j % len(SUBJECTS)][0]
            queries.write(json.dumps({"_id": f"q{j}", "text": f"about {subject}"}))
            queries.write("\n")
        for r, d in enumerate(doc_id):
            corpus.write(json.dumps({"_id": d, "text": f"document {d}"}) + "\n")
            pools.write(f"q{q_of[r]}\t{d}\t{local[r] + 1}\n")
            if suite.truth[r] > qrel_threshold:
                qrels.write(f"q{q_of[r]}\t{d}\t1\n")
    for name, noise in systems:
        score = suite.truth + rng.normal(0.0, noise, suite.truth.size)
        order = np.lexsort((-score, q_of))
        rank = np.empty(order.size, dtype=np.int64)
        rank[order] = np.arange(order.size) - offsets[q_of[order]] + 1
        with open(paths["runs"][name], "w", encoding="utf-8") as run:
            for r in order.tolist():
                run.write(
                    f"q{q_of[r]} Q0 {doc_id[r]} {rank[r]} {score[r]:.6f} {name}\n"
                )

    def windows(stage, sizes, docs, values, valid):
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        seq = np.zeros(suite.n_queries, dtype=np.int64)
        for w, (start, size) in enumerate(
            zip(starts.tolist(), sizes.tolist(), strict=True)
        ):
            rows = docs[start : start + size]
            q = int(q_of[rows[0]])
            record: dict = {
                "query_id": f"q{q}",
                "stage": stage,
                "window": int(seq[q]),
                "phase": "random",
                "doc_ids": [doc_id[r] for r in rows.tolist()],
            }
            seq[q] += 1
            if not valid[w]:
                record.update(valid=False, invalid_category="invalid_json")
            elif stage == "tournament":
                record["scores"] = [round(v, 4) for v in values[start : start + size]]
            else:
                record["answers"] = values[start : start + size].tolist()
            yield json.dumps(record, separators=(",", ":"))

    with open(paths["judgments"], "w", encoding="utf-8") as judgments:
        for line in windows(
            "tournament",
            suite.t_size,
            suite.t_doc,
            suite.t_score.tolist(),
            suite.t_valid,
        ):
            judgments.write(line + "\n")
        for line in windows(
            "rubric", suite.r_size, suite.r_doc, suite.r_answers, suite.r_valid
        ):
            judgments.write(line + "\n")
    return paths
