"""Task sources: the built-in tasks, local JSON / JSONL / parquet files, or a Hugging Face dataset."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tasks.builtin import builtin_tasks
from tasks.records import normalise_record
from tasks.schema import Task, TaskError

FILE_SUFFIXES = (".json", ".jsonl", ".parquet")
DEFAULT_SPLIT = "test"
HUB_PROBE_TIMEOUT_S = 5.0


def load_tasks(source: str | None = None) -> list[Task]:
    """All tasks of a source: None or "builtin", a .json/.jsonl/.parquet path, or a HF dataset "owner/name[:split]"."""
    if source is None or source == "builtin":
        return builtin_tasks()
    path = Path(source).expanduser()
    if path.suffix.lower() in FILE_SUFFIXES or path.exists():
        return tasks_from_records(read_records_file(path), str(path))
    return tasks_from_records(read_hub_dataset(source), source)


def tasks_from_records(records: list[dict[str, Any]], source: str) -> list[Task]:
    """Validate records into Tasks; an empty source or a repeated instance_id is an error."""
    if not records:
        raise TaskError(f"task source {source} holds no records")
    tasks = [Task.from_record(normalise_record(rec, source), source=source) for rec in records]
    seen: set[str] = set()
    for task in tasks:
        if task.instance_id in seen:
            raise TaskError(f"task source {source}: instance_id {task.instance_id} occurs more than once")
        seen.add(task.instance_id)
    return tasks


def read_records_file(path: Path) -> list[dict[str, Any]]:
    """The records of a .json (one object or a list), .jsonl or .parquet file."""
    if path.is_dir():
        raise TaskError(f"task file {path} is a folder; give a .json, .jsonl or .parquet file")
    if not path.is_file():
        raise TaskError(f"task file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _read_parquet(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskError(f"task file {path} is not UTF-8 text (byte {exc.start}); give JSON, JSONL or parquet") from None
    records = _read_jsonl(text, path) if suffix == ".jsonl" else _read_json(text, path)
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise TaskError(f"task file {path}: record {i + 1} is {_kind(rec)}, not a JSON object")
    return records


def _kind(value: Any) -> str:
    """What a parsed JSON value is, with its article: 'a list', 'an int', 'None'."""
    name = type(value).__name__
    return "None" if value is None else f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _read_json(text: str, path: Path) -> list[Any]:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise TaskError(f"task file {path} is not valid JSON: {exc}") from None
    return data if isinstance(data, list) else [data]


def _read_jsonl(text: str, path: Path) -> list[Any]:
    records = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except (json.JSONDecodeError, RecursionError) as exc:
            raise TaskError(f"task file {path}, line {lineno}: not valid JSON ({exc})") from None
    return records


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq  # lazy: pyarrow, off --help

    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise TaskError(f"task file {path} is not a readable parquet file: {exc}") from None


def split_dataset_name(source: str) -> tuple[str, str]:
    """'owner/name:split' -> ('owner/name', 'split'); the split defaults to 'test'."""
    name, _, split = source.partition(":")
    if name.count("/") != 1 or not all(name.split("/")):
        raise TaskError(
            f"task source {source!r} is neither 'builtin', an existing .json/.jsonl/.parquet file, "
            "nor a Hugging Face dataset name like 'SWE-bench/SWE-bench_Verified[:split]'"
        )
    return name, split or DEFAULT_SPLIT


def read_hub_dataset(source: str) -> list[dict[str, Any]]:
    """Rows of a Hugging Face dataset split; fails fast with a clear message when the hub cannot be reached.

    In offline mode (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) only the local `datasets` cache is tried.
    """
    name, split = split_dataset_name(source)
    offline_var = _offline_mode_var()
    if offline_var is None:
        unreachable = _probe_hub()
        if unreachable is not None:
            raise TaskError(
                f"cannot load dataset {name}: the Hugging Face hub is unreachable ({unreachable}); "
                "pass a local .json/.jsonl/.parquet file with --dataset instead"
            )
    import datasets  # lazy: datasets is optional

    try:
        rows = datasets.load_dataset(name, split=split)
    except Exception as exc:  # datasets raises many types (missing split, auth, connection, not cached)
        hint = f" ({offline_var} is set and it is not cached; pass a local file instead)" if offline_var else ""
        raise TaskError(f"cannot load dataset {name} split {split}{hint}: {exc}") from None
    return [dict(row) for row in rows]


def _offline_mode_var() -> str | None:
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return var
    return None


def _probe_hub() -> str | None:
    """Why the hub does not answer within a few seconds, or None when it does."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        urllib.request.urlopen(f"{endpoint}/api/datasets?limit=1", timeout=HUB_PROBE_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return None  # the server answered; `datasets` reports what it refused
    except (urllib.error.URLError, OSError) as exc:
        return f"{endpoint}: {getattr(exc, 'reason', exc)}"
    return None
