"""Task sources: local files of every supported format, their errors, R2E-Gym records and the HF hub fallback."""

import json
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks import load_tasks
from tasks.schema import TaskError


def record(ident: str, **extra) -> dict:
    rec = {
        "instance_id": ident,
        "repo": "octo/widgets",
        "base_commit": "a" * 40,
        "problem_statement": f"Issue of {ident}\nmore text",
        "FAIL_TO_PASS": json.dumps(["tests/test_a.py::test_x"]),
        "PASS_TO_PASS": json.dumps(["tests/test_a.py::test_y", "tests/test_a.py::test_z"]),
    }
    rec.update(extra)
    return rec


def test_json_list(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([record("octo__widgets-1"), record("octo__widgets-2")]))
    tasks = load_tasks(str(path))
    assert [t.instance_id for t in tasks] == ["octo__widgets-1", "octo__widgets-2"]
    assert tasks[0].fail_to_pass == ["tests/test_a.py::test_x"]
    assert tasks[0].pass_to_pass == ["tests/test_a.py::test_y", "tests/test_a.py::test_z"]
    assert tasks[0].source == str(path)


def test_json_single_object(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(record("octo__widgets-7")))
    assert [t.instance_id for t in load_tasks(str(path))] == ["octo__widgets-7"]


def test_jsonl_skips_blank_lines(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(record("a__b-1")) + "\n\n" + json.dumps(record("a__b-2")) + "\n")
    assert [t.instance_id for t in load_tasks(str(path))] == ["a__b-1", "a__b-2"]


def test_parquet(tmp_path):
    path = tmp_path / "tasks.parquet"
    rows = [record("a__b-1", hints_text=""), record("a__b-2", hints_text="look at x")]
    pq.write_table(pa.Table.from_pylist(rows), path)
    tasks = load_tasks(str(path))
    assert [t.instance_id for t in tasks] == ["a__b-1", "a__b-2"]
    assert tasks[1].hints_text == "look at x"


def test_round_trip_through_to_record(tmp_path):
    original = load_tasks("builtin")
    path = tmp_path / "builtin.jsonl"
    path.write_text("\n".join(json.dumps(t.to_record()) for t in original))
    again = load_tasks(str(path))
    assert [(t.instance_id, t.patch, t.fail_to_pass, t.test_cmd) for t in again] == [
        (t.instance_id, t.patch, t.fail_to_pass, t.test_cmd) for t in original
    ]


def test_missing_field_names_instance_and_field(tmp_path):
    rec = record("octo__widgets-3")
    del rec["base_commit"]
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([record("octo__widgets-1"), rec]))
    with pytest.raises(TaskError, match=r"octo__widgets-3.*missing field\(s\) base_commit"):
        load_tasks(str(path))


def test_bad_json(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text('[{"instance_id": "x",]')
    with pytest.raises(TaskError, match="not valid JSON"):
        load_tasks(str(path))


def test_bad_jsonl_line_is_named(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(record("a__b-1")) + "\n{oops\n")
    with pytest.raises(TaskError, match="line 2"):
        load_tasks(str(path))


def test_json_list_of_non_objects(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([record("a__b-1"), ["not", "a", "record"]]))
    with pytest.raises(TaskError, match="record 2 is a list"):
        load_tasks(str(path))


def test_a_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b"\xff\xfe" + json.dumps(record("a__b-1")).encode())
    with pytest.raises(TaskError, match="is not UTF-8 text"):
        load_tasks(str(path))


@pytest.mark.parametrize(
    "field,value",
    [
        ("base_commit", "--upload-pack=touch /tmp/x;"),  # git would run it (fetch from a local mirror)
        ("base_commit", "../../x"),
        ("base_commit", "a b"),
        ("repo", "-x/y"),
        ("repo", "a/b/c"),
        ("repo", "../x"),
    ],
)
def test_fields_git_and_paths_take_are_checked(tmp_path, field, value):
    """A dataset may come from anyone: what host-side git and the run's folders take from it must be plain."""
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(record("a__b-1", **{field: value})))
    with pytest.raises(TaskError, match=f"a__b-1 from .*: {field} .* is not "):
        load_tasks(str(path))
    ok = {"base_commit": ["v1.2.0", "main", "release/4.x", "0123abc"], "repo": ["sympy", "octo/widgets.py"]}
    path.write_text(json.dumps([record(f"a__b-{i}", **{field: v}) for i, v in enumerate(ok[field])]))
    assert [getattr(t, field) for t in load_tasks(str(path))] == ok[field]


@pytest.mark.parametrize("value", [5, ["a", "b"], {"text": "x"}])
def test_a_problem_statement_that_is_not_text_is_refused(tmp_path, value):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(record("a__b-1", problem_statement=value)))
    with pytest.raises(TaskError, match="a__b-1 from .*: problem_statement is not text"):
        load_tasks(str(path))


def test_test_list_that_is_not_json(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(record("a__b-1", FAIL_TO_PASS="[tests/x.py")))
    with pytest.raises(TaskError, match="a__b-1: FAIL_TO_PASS is not a JSON list"):
        load_tasks(str(path))


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(TaskError, match="does not exist"):
        load_tasks(str(tmp_path / "nope.jsonl"))
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    with pytest.raises(TaskError, match="holds no records"):
        load_tasks(str(empty))


def test_duplicate_ids(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([record("a__b-1"), record("a__b-1")]))
    with pytest.raises(TaskError, match="more than once"):
        load_tasks(str(path))


def test_r2e_gym_record(tmp_path):
    parsed = {"old_commit_hash": "b" * 40, "new_commit_hash": "c" * 40, "file_diffs": []}
    rec = {
        "repo_name": "aiohttp",
        "docker_image": "namanjain12/aiohttp_final:" + "c" * 40,
        "commit_hash": "c" * 40,
        "parsed_commit_content": json.dumps(parsed),
        "problem_statement": "Title\nbody",
    }
    path = tmp_path / "r2e.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    (task,) = load_tasks(str(path))
    assert task.instance_id == "aiohttp__" + "c" * 12
    assert task.repo == "aiohttp"
    assert task.base_commit == "b" * 40
    assert task.docker_image == rec["docker_image"]
    assert task.fail_to_pass == [] and task.patch == ""


def test_r2e_gym_swebench_record_keeps_its_fields(tmp_path):
    path = tmp_path / "r2e_verified.json"
    path.write_text(json.dumps(record("django__django-1", docker_image="slimshetty/swebench-verified:sweb.x")))
    (task,) = load_tasks(str(path))
    assert (task.instance_id, task.repo, task.base_commit) == ("django__django-1", "octo/widgets", "a" * 40)
    assert task.docker_image == "slimshetty/swebench-verified:sweb.x"


def test_hub_unreachable_fails_fast(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: connection refused at once
    start = time.monotonic()
    with pytest.raises(TaskError, match="hub is unreachable.*local .json/.jsonl/.parquet"):
        load_tasks("SWE-bench/SWE-bench_Verified")
    assert time.monotonic() - start < 10


@pytest.mark.slow  # end to end (subprocesses, a pty or a timeout): ~8-23 s
def test_hub_offline_mode_without_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))
    with pytest.raises(TaskError, match="HF_HUB_OFFLINE is set and it is not cached"):
        load_tasks("nexus-test/no-such-dataset:dev")


def test_bad_source_name():
    with pytest.raises(TaskError, match="neither 'builtin'"):
        load_tasks("not a dataset")
