"""Writes of the benchmarks app: dataset and run imports.

Every import is one transaction: any error leaves the database exactly as it was.
Files are streamed and inserted in batches, so memory follows the batch size, not
the corpus size. Errors are :class:`ImportFailed` naming the file, line and problem.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from rcp_platform.exceptions import ApplicationError, ConflictError

from . import formats
from .formats import FormatError
from .models import (
    Dataset,
    Document,
    PoolEntry,
    Protocol,
    Qrel,
    Query,
    RankingEntry,
    System,
    Upload,
    UploadKind,
    UploadStatus,
)
from .tasks import upload_import_task

BATCH_SIZE = 5000
T = TypeVar("T")
ProgressFn = Callable[[str, int], None]


class ImportFailed(ApplicationError):
    """An import was refused; nothing was written. ``path``/``line`` locate the problem."""

    def __init__(
        self, message: str, *, path: str | None = None, line: int | None = None
    ):
        super().__init__(message, extra={"path": path, "line": line})
        self.path = path
        self.line = line


def _fail(path: str | Path, line: int | None, message: str) -> ImportFailed:
    where = f"{path}, line {line}" if line is not None else str(path)
    return ImportFailed(f"{where}: {message}", path=str(path), line=line)


def _batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _noop(stage: str, count: int) -> None:
    return None


def _insert(
    model: type[models.Model],
    objs: Sequence[models.Model],
    *,
    keys: Sequence[tuple],
    lines: Sequence[int],
    path: str | Path,
    what: str,
    existing: Callable[[list[tuple]], set[tuple]],
) -> None:
    """Bulk-insert one batch under a savepoint; turn a unique violation into a line.

    A duplicate within the batch or against earlier batches names the offending line.
    """
    try:
        with transaction.atomic():
            model.objects.bulk_create(objs, batch_size=1000)
    except IntegrityError:
        seen: set[tuple] = set()
        for key, line in zip(keys, lines, strict=True):
            if key in seen:
                raise _fail(path, line, f"duplicate {what} {_show(key)}") from None
            seen.add(key)
        clash = existing(list(keys))
        for key, line in zip(keys, lines, strict=True):
            if key in clash:
                raise _fail(path, line, f"duplicate {what} {_show(key)}") from None
        raise


def _show(key: tuple) -> str:
    return " / ".join(repr(k) for k in key)


class _Ids:
    """Looks up query and document primary keys by external id, a batch at a time."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.queries = dict(
            Query.objects.filter(dataset=dataset).values_list("external_id", "id")
        )

    def documents(self, external_ids: Iterable[str]) -> dict[str, int]:
        wanted = list(set(external_ids))
        found: dict[str, int] = {}
        # Bounded IN lists keep SQLite below its variable limit.
        for chunk in _batches(wanted, 900):
            found.update(
                Document.objects.filter(
                    dataset=self.dataset, external_id__in=chunk
                ).values_list("external_id", "id")
            )
        return found

    def example_query(self) -> str:
        return next(iter(self.queries), "(none)")

    def example_document(self) -> str:
        ext = (
            Document.objects.filter(dataset=self.dataset)
            .values_list("external_id", flat=True)
            .first()
        )
        return ext or "(none)"


def _unknown_id_error(
    *,
    ids: _Ids,
    path: str | Path,
    line: int,
    kind: str,
    value: str,
    matched_any: bool,
    rest: Iterable[tuple[str, str]],
) -> ImportFailed:
    """Name the first unknown id; if the whole file matches nothing, say so with examples."""
    if not matched_any:
        # Look ahead: a file whose ids match nothing at all is almost always the
        # wrong file or a different id scheme, and deserves a clearer message.
        for chunk in _batches(rest, BATCH_SIZE):
            docs = ids.documents(d for _, d in chunk)
            if any(q in ids.queries and d in docs for q, d in chunk):
                break
        else:
            return _fail(
                path,
                None,
                f"no line matches the dataset {ids.dataset.name!r}: the file has "
                f"{kind} {value!r} (line {line}) but the dataset has ids like query "
                f"{ids.example_query()!r} and document {ids.example_document()!r}",
            )
    return _fail(
        path, line, f"unknown {kind} {value!r} (not in dataset {ids.dataset.name!r})"
    )


def _resolve_pairs(
    *,
    ids: _Ids,
    batch: list,
    path: str | Path,
    matched_any: bool,
    remaining: Iterator,
) -> tuple[dict[str, int], bool]:
    """Map a batch's doc ids to pks, raising on the first unknown query or document."""
    docs = ids.documents(r.doc_id for r in batch)
    for i, rec in enumerate(batch):
        if rec.query_id not in ids.queries or rec.doc_id not in docs:
            kind, value = (
                ("query id", rec.query_id)
                if rec.query_id not in ids.queries
                else ("document id", rec.doc_id)
            )
            rest = itertools.chain(
                ((r.query_id, r.doc_id) for r in batch[i + 1 :]),
                ((r.query_id, r.doc_id) for r in remaining),
            )
            raise _unknown_id_error(
                ids=ids,
                path=path,
                line=rec.line,
                kind=kind,
                value=value,
                matched_any=matched_any or i > 0,
                rest=rest,
            )
    return docs, True


def _import_documents(dataset: Dataset, path: Path, progress: ProgressFn) -> int:
    count = 0
    for batch in _batches(formats.iter_corpus(path), BATCH_SIZE):
        _insert(
            Document,
            [
                Document(
                    dataset=dataset, external_id=r.doc_id, title=r.title, text=r.text
                )
                for r in batch
            ],
            keys=[(r.doc_id,) for r in batch],
            lines=[r.line for r in batch],
            path=path,
            what="document id",
            existing=lambda keys: {
                (e,)
                for e in Document.objects.filter(
                    dataset=dataset, external_id__in=[k[0] for k in keys]
                ).values_list("external_id", flat=True)
            },
        )
        count += len(batch)
        progress("documents", count)
    return count


def _import_queries(dataset: Dataset, path: Path, progress: ProgressFn) -> int:
    count = 0
    for batch in _batches(formats.iter_queries(path), BATCH_SIZE):
        _insert(
            Query,
            [
                Query(dataset=dataset, external_id=r.query_id, text=r.text)
                for r in batch
            ],
            keys=[(r.query_id,) for r in batch],
            lines=[r.line for r in batch],
            path=path,
            what="query id",
            existing=lambda keys: {
                (e,)
                for e in Query.objects.filter(
                    dataset=dataset, external_id__in=[k[0] for k in keys]
                ).values_list("external_id", flat=True)
            },
        )
        count += len(batch)
        progress("queries", count)
    return count


def _pair_lookup(
    model: type[models.Model], queries: dict[str, int], docs: dict[str, int]
) -> Callable[[list[tuple]], set[tuple]]:
    """Which (query ext id, doc ext id) keys already have a ``model`` row."""

    def existing(keys: list[tuple]) -> set[tuple]:
        q_ext = {queries[q]: q for q, _ in keys}
        d_ext = {docs[d]: d for _, d in keys}
        rows = model.objects.filter(
            query_id__in=list(q_ext), document_id__in=list(d_ext)
        ).values_list("query_id", "document_id")
        return {(q_ext[q], d_ext[d]) for q, d in rows}

    return existing


def _import_pairs(
    *,
    dataset: Dataset,
    ids: _Ids,
    records: Iterator,
    path: Path,
    model: type[models.Model],
    build: Callable[[object, int, int], models.Model],
    what: str,
    stage: str,
    progress: ProgressFn,
) -> int:
    """Shared loop of qrels and pools: resolve ids per batch, insert, report progress."""
    count = 0
    matched = False
    for batch in _batches(records, BATCH_SIZE):
        docs, matched = _resolve_pairs(
            ids=ids, batch=batch, path=path, matched_any=matched, remaining=records
        )
        _insert(
            model,
            [build(r, ids.queries[r.query_id], docs[r.doc_id]) for r in batch],
            keys=[(r.query_id, r.doc_id) for r in batch],
            lines=[r.line for r in batch],
            path=path,
            what=what,
            existing=_pair_lookup(model, ids.queries, docs),
        )
        count += len(batch)
        progress(stage, count)
    return count


def _import_qrels(dataset: Dataset, ids: _Ids, path: Path, progress: ProgressFn) -> int:
    return _import_pairs(
        dataset=dataset,
        ids=ids,
        records=formats.iter_qrels(path),
        path=path,
        model=Qrel,
        build=lambda r, q, d: Qrel(query_id=q, document_id=d, grade=r.grade),
        what="qrel for query / document",
        stage="qrels",
        progress=progress,
    )


def _import_pools(
    dataset: Dataset,
    ids: _Ids,
    path: Path,
    progress: ProgressFn,
    records: Iterator | None = None,
) -> int:
    """Pool entries from a pools file, or from ``records`` (a run's top ranks)."""
    return _import_pairs(
        dataset=dataset,
        ids=ids,
        records=formats.iter_pools(path) if records is None else records,
        path=path,
        model=PoolEntry,
        build=lambda r, q, d: PoolEntry(query_id=q, document_id=d, rank=r.rank),
        what="pool entry for query / document",
        stage="pools",
        progress=progress,
    )


def _ranked_records(path: Path, depth: int | None) -> Iterator[formats.RunRecord]:
    """A run as records re-ranked by score (ties: file rank); ``rank`` is the new rank."""
    ranked = formats.rank_run(formats.iter_run(path), path)
    for qid, entries in ranked.items():
        for rank, (doc_id, score, line) in enumerate(
            entries[:depth] if depth else entries, 1
        ):
            yield formats.RunRecord(line, qid, doc_id, rank, score)


@transaction.atomic
def dataset_import(
    *,
    name: str,
    corpus: str | Path,
    queries: str | Path,
    qrels: str | Path | None = None,
    pools: str | Path | None = None,
    pool_from_run: str | Path | None = None,
    depth: int | None = None,
    protocol: str = Protocol.PLAIN,
    description: str = "",
    replace: bool = False,
    progress: ProgressFn | None = None,
) -> Dataset:
    """Create dataset ``name`` from BEIR-style files, atomically.

    Refuses an existing name unless ``replace`` (the old dataset is deleted in the same
    transaction, so a failed re-import keeps it). A pool comes from ``pools`` or from the
    top ``depth`` of ``pool_from_run``. Raises ImportFailed naming file and line.
    """
    progress = progress or _noop
    if pools and pool_from_run:
        raise ImportFailed("give either a pools file or --pool-from-run, not both")
    if pool_from_run and not depth:
        raise ImportFailed("--pool-from-run needs --depth N (e.g. --depth 150)")
    if protocol not in Protocol.values:
        raise ImportFailed(
            f"unknown protocol {protocol!r}; choose one of {', '.join(Protocol.values)}"
        )
    existing = Dataset.objects.filter(name=name).first()
    if existing is not None:
        if not replace:
            raise ConflictError(
                f"dataset {name!r} already exists; pass --replace to replace it"
            )
        dataset_delete(dataset=existing)
    dataset = Dataset(name=name, protocol=protocol, description=description)
    dataset.full_clean()
    dataset.save()
    try:
        _import_documents(dataset, Path(corpus), progress)
        _import_queries(dataset, Path(queries), progress)
        ids = _Ids(dataset)
        if qrels:
            _import_qrels(dataset, ids, Path(qrels), progress)
        if pools:
            _import_pools(dataset, ids, Path(pools), progress)
        if pool_from_run:
            path = Path(pool_from_run)
            _import_pools(dataset, ids, path, progress, _ranked_records(path, depth))
    except FormatError as exc:
        raise _fail(exc.path, exc.line, exc.message) from exc
    return dataset


@transaction.atomic
def run_import(
    *,
    dataset: Dataset,
    system_name: str,
    path: str | Path,
    description: str = "",
    replace: bool = False,
    progress: ProgressFn | None = None,
) -> System:
    """Import a TREC run as system ``system_name`` of ``dataset``, atomically.

    Ranks are re-derived from scores (descending; ties keep the file's rank order).
    Refuses an existing system unless ``replace``. Raises ImportFailed naming the line.
    """
    progress = progress or _noop
    path = Path(path)
    old = System.objects.filter(dataset=dataset, name=system_name).first()
    if old is not None:
        if not replace:
            raise ConflictError(
                f"system {system_name!r} already exists in dataset {dataset.name!r}; "
                "pass --replace to replace it"
            )
        # Keep the System row (studies and fits point at it); only its rankings go.
        RankingEntry.objects.filter(system=old).delete()
        old.description = description or old.description
        old.save(update_fields=["description"])
        system = old
    else:
        system = System(dataset=dataset, name=system_name, description=description)
        system.full_clean()
        system.save()
    ids = _Ids(dataset)
    try:
        records = _ranked_records(path, None)
        count = 0
        matched = False
        for batch in _batches(records, BATCH_SIZE):
            docs, matched = _resolve_pairs(
                ids=ids, batch=batch, path=path, matched_any=matched, remaining=records
            )
            RankingEntry.objects.bulk_create(
                [
                    RankingEntry(
                        system=system,
                        query_id=ids.queries[r.query_id],
                        document_id=docs[r.doc_id],
                        rank=r.rank,
                        score=r.score,
                    )
                    for r in batch
                ],
                batch_size=1000,
            )
            count += len(batch)
            progress("ranking entries", count)
    except FormatError as exc:
        raise _fail(exc.path, exc.line, exc.message) from exc
    return system


def _delete_rows(qs: models.QuerySet, cleared: set[type[models.Model]]) -> None:
    """Delete ``qs`` in one statement when every table pointing at it is already
    cleared; otherwise let Django's collector cascade (which loads the rows)."""
    dependents = {rel.related_model for rel in qs.model._meta.related_objects}
    if dependents <= cleared:
        qs._raw_delete(qs.db)
    else:
        qs.delete()


@transaction.atomic
def dataset_delete(*, dataset: Dataset) -> None:
    """Delete a dataset and everything under it.

    Leaf tables go first as single DELETE statements, so a 100k-document dataset is
    removed without loading its rows; tables that other apps point at fall back to
    the cascading collector, so their dependents are never orphaned.
    """
    try:
        _delete_dataset_rows(dataset)
    except models.ProtectedError as exc:
        users = sorted({f"{o._meta.verbose_name} {o}" for o in exc.protected_objects})[
            :3
        ]
        raise ConflictError(
            f"dataset {dataset.name!r} is used by {', '.join(users)}"
            f"{' and more' if len(exc.protected_objects) > 3 else ''}; "
            "it cannot be deleted or replaced (import under a new name instead)"
        ) from None


def _delete_dataset_rows(dataset: Dataset) -> None:
    cleared: set[type[models.Model]] = set()
    for qs in (
        RankingEntry.objects.filter(system__dataset=dataset),
        Qrel.objects.filter(query__dataset=dataset),
        PoolEntry.objects.filter(query__dataset=dataset),
        System.objects.filter(dataset=dataset),
        Document.objects.filter(dataset=dataset),
        Query.objects.filter(dataset=dataset),
    ):
        _delete_rows(qs, cleared)
        cleared.add(qs.model)
    dataset.delete()


# ---------------------------------------------------------------------------- uploads
# Files sent from the browser are stored under MEDIA_ROOT/uploads/<id>/ and imported
# by a worker (benchmarks/UPLOADS.md): the web request only saves and queues.

DATASET_FILES = ("corpus", "queries", "qrels", "pools")
REQUIRED_FILES = {UploadKind.DATASET: ("corpus", "queries"), UploadKind.RUN: ("run",)}


def upload_folder(upload: Upload) -> Path:
    return Path(settings.MEDIA_ROOT) / "uploads" / str(upload.pk)


def _suffix(name: str) -> str:
    # The importers gunzip by suffix, so ".gz" must survive the rename.
    return ".gz" if name.endswith(".gz") else Path(name).suffix[:10]


@transaction.atomic
def upload_create(
    *,
    kind: str,
    files: Mapping[str, UploadedFile],
    dataset_name: str,
    dataset: Dataset | None = None,
    system_name: str = "",
    protocol: str = Protocol.PLAIN,
    description: str = "",
    replace: bool = False,
    created_by: Any = None,
) -> Upload:
    """Store the uploaded files and queue their import on a worker (on commit).

    A dataset import needs corpus and queries (qrels, pools optional); a run needs
    ``run`` and a system name. Refuses an existing dataset or system unless
    ``replace`` (checked again by the worker). Returns the pending Upload.
    """
    files = {role: f for role, f in files.items() if f}
    missing = [r for r in REQUIRED_FILES[UploadKind(kind)] if r not in files]
    if missing:
        raise ImportFailed(f"missing file: {', '.join(missing)}")
    if kind == UploadKind.DATASET and not replace:
        if Dataset.objects.filter(name=dataset_name).exists():
            raise ConflictError(
                f"dataset {dataset_name!r} already exists; ask to replace it "
                "(replace, --replace)"
            )
    if kind == UploadKind.RUN and not replace and dataset is not None:
        if System.objects.filter(dataset=dataset, name=system_name).exists():
            raise ConflictError(
                f"system {system_name!r} already exists in dataset {dataset.name!r}; "
                "ask to replace it (replace, --replace)"
            )
    upload = Upload(
        kind=kind,
        dataset_name=dataset.name if dataset is not None else dataset_name,
        dataset=dataset,
        system_name=system_name,
        protocol=protocol,
        description=description,
        replace=replace,
        created_by=created_by,
    )
    upload.full_clean()
    upload.save()
    folder = upload_folder(upload)
    folder.mkdir(parents=True, exist_ok=True)
    stored = {}
    for role, uploaded in files.items():
        target = folder / f"{role}{_suffix(uploaded.name)}"
        lines = 0
        with open(target, "wb") as out:
            for chunk in uploaded.chunks():
                out.write(chunk)
                lines += chunk.count(b"\n")
        stored[role] = {
            "path": str(target.relative_to(settings.MEDIA_ROOT)),
            "name": Path(uploaded.name).name,
            # Lines of a gzipped file are unknown until read: progress then shows rows.
            "lines": None if target.suffix == ".gz" else lines,
        }
    upload.files = stored
    upload.save(update_fields=["files"])
    transaction.on_commit(lambda: upload_import_task.delay(upload.pk))
    return upload


def _write_progress(upload: Upload, done: dict[str, int]) -> None:
    """Progress lives in a file beside the uploads, not in the database: the import
    holds one long transaction, so rows written there would stay invisible."""
    folder = upload_folder(upload)
    tmp = folder / "progress.json.tmp"
    tmp.write_text(json.dumps(done))
    os.replace(tmp, folder / "progress.json")


def upload_import(*, upload_id: int) -> Upload | None:
    """Import a pending upload; safe to run twice.

    Claims the row by compare-and-set (pending -> running) and returns None when it
    is not pending. The import itself is one transaction (nothing is written on
    error); a refused import marks the upload failed with the file, line and message
    as the user named them. The stored files are deleted once imported.
    """
    claimed = Upload.objects.filter(pk=upload_id, status=UploadStatus.PENDING).update(
        status=UploadStatus.RUNNING, started_at=timezone.now()
    )
    if not claimed:
        return None
    upload = Upload.objects.select_related("dataset").get(pk=upload_id)
    root = Path(settings.MEDIA_ROOT)
    paths = {role: root / f["path"] for role, f in upload.files.items()}
    done: dict[str, int] = {}

    def progress(stage: str, count: int) -> None:
        done[stage] = count
        _write_progress(upload, done)

    try:
        if upload.kind == UploadKind.DATASET:
            dataset = dataset_import(
                name=upload.dataset_name,
                corpus=paths["corpus"],
                queries=paths["queries"],
                qrels=paths.get("qrels"),
                pools=paths.get("pools"),
                protocol=upload.protocol,
                description=upload.description,
                replace=upload.replace,
                progress=progress,
            )
        else:
            dataset = Dataset.objects.filter(name=upload.dataset_name).first()
            if dataset is None:
                raise ImportFailed(f"dataset {upload.dataset_name!r} no longer exists")
            run_import(
                dataset=dataset,
                system_name=upload.system_name,
                path=paths["run"],
                description=upload.description,
                replace=upload.replace,
                progress=progress,
            )
    except ApplicationError as exc:
        message, name = exc.message, ""
        for role, path in paths.items():
            if str(path) in message or getattr(exc, "path", None) == str(path):
                name = upload.files[role]["name"]
                message = message.replace(str(path), name)
        upload.status = UploadStatus.FAILED
        upload.error = message
        upload.error_file = name
        upload.error_line = getattr(exc, "line", None)
        upload.finished_at = timezone.now()
        upload.save(
            update_fields=["status", "error", "error_file", "error_line", "finished_at"]
        )
        return upload
    upload.status = UploadStatus.DONE
    upload.dataset = dataset
    upload.finished_at = timezone.now()
    upload.save(update_fields=["status", "dataset", "finished_at"])
    for path in paths.values():
        path.unlink(missing_ok=True)
    return upload
