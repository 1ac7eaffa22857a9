"""`nexus-agent solve --server` against a stand-in server that speaks only the OpenAI API (GET /v1/models, POST
/v1/chat/completions; no nexus endpoints), as vLLM or SGLang do: the real program on a built-in task in a real
bubblewrap sandbox, two steps in each call format, the served model picked by --model, the key sent as a Bearer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from clilib import cli_env, nexus
from standin import KEY, MODELS, StandIn, stand_in_server

TASK = "nexus-demo__pagekit-1"
pytestmark = pytest.mark.usefixtures("bwrap_installed")


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    with stand_in_server() as srv:
        yield srv


def url(srv: StandIn) -> str:
    return srv.url


@pytest.mark.parametrize(
    ("given", "call_format"), [("tools", "tools"), ("xml", "xml"), ("auto", "tools")]
)  # auto: tools with any --server
def test_solve_through_an_openai_only_server(stand_in: StandIn, tmp_path: Path, given: str, call_format: str) -> None:
    out = tmp_path / "run"
    args = ["--server", url(stand_in), "--model", MODELS[1], "--api-key", KEY, "--call-format", given,
            "--learn-profile"]  # fmt: skip
    res = nexus("solve", TASK, *args, "--max-steps", "2", "--sandbox", "bwrap", "--out", str(out),
                env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads((out / "report.json").read_text())
    assert (report["exit_reason"], report["steps"], report["config"]["call_format"]) == ("agent", 2, call_format)
    assert "is not a nexus-agent serve, which alone learns one" in res.stdout  # one line; no POST to /v1/nexus/...
    assert "api_key" not in report["config"] and KEY not in (out / "trajectory.jsonl").read_text()
    posts = [s for s in stand_in.seen if s["body"] is not None]
    assert {s["path"] for s in stand_in.seen} == {"/v1/models", "/v1/chat/completions"}  # no nexus endpoint
    assert len(posts) == 2 and all(p["auth"] == f"Bearer {KEY}" and p["body"]["model"] == MODELS[1] for p in posts)
    steps = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()][1:3]
    second = posts[1]["body"]["messages"]
    if call_format == "tools":
        assert [t["function"]["name"] for t in posts[0]["body"]["tools"]] == [
            "file_editor", "execute_bash", "search", "finish",
        ]  # fmt: skip
        assert "stop" not in posts[0]["body"] and second[2]["tool_calls"][0]["id"] == "call_0"
        assert second[3]["role"] == "tool" and second[3]["tool_call_id"] == "call_0"
        assert steps[0]["tool_calls"][0]["name"] == "execute_bash"
    else:
        assert "tools" not in posts[0]["body"] and posts[0]["body"]["stop"] == ["</function>"]
        assert second[3]["role"] == "user" and "tool_calls" not in steps[0]
    assert "Exit code: 0" in steps[0]["observation"] and steps[1]["call"]["name"] == "finish"


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ([], f"serves {', '.join(MODELS)}: name one with --model"),
        (["--model", "nosuch"], f"--model nosuch: the server at URL does not serve it; it serves: {', '.join(MODELS)}"),
    ],
)
def test_the_served_model_is_picked_or_listed(stand_in: StandIn, tmp_path: Path, options: list[str], says: str) -> None:
    res = nexus("solve", TASK, "--server", url(stand_in), *options, "--out", str(tmp_path / "run"),
                env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 2 and says.replace("URL", url(stand_in)) in res.stderr, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_eval_workers_share_the_server_in_the_tools_format(stand_in: StandIn, tmp_path: Path) -> None:
    """eval takes the same options: two workers, two built-in tasks, native tool calls (auto), the key never on disk."""
    out = tmp_path / "eval"
    ids = ["nexus-demo__pagekit-1", "nexus-demo__memocache-1"]
    res = nexus("eval", "--server", url(stand_in), "--model", MODELS[0], "--api-key", KEY, "--instances", ",".join(ids),
                "--workers", "2", "--max-steps", "2", "--sandbox", "bwrap", "--out", str(out),
                env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    for task in ids:
        report = json.loads((out / task / "report.json").read_text())
        assert (report["exit_reason"], report["steps"], report["config"]["call_format"]) == ("agent", 2, "tools")
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert {p["model_name_or_path"] for p in predictions} == {"nexus-agent__coder-7b__server"}
    assert not [f for f in out.rglob("*") if f.is_file() and KEY in f.read_text(errors="replace")]
    assert {p["body"]["model"] for p in stand_in.seen if p["body"]} == {MODELS[0]}


def test_an_eval_on_an_openai_only_server_resumes_where_it_stopped(stand_in: StandIn, tmp_path: Path) -> None:
    """The same eval folder again with one more task: the finished task is kept as it was and never asked again."""
    out, done, new = tmp_path / "eval", "nexus-demo__pagekit-1", "nexus-demo__memocache-1"

    def run_eval(ids: list[str]):
        return nexus("eval", "--server", url(stand_in), "--model", MODELS[0], "--api-key", KEY,
                     "--instances", ",".join(ids), "--max-steps", "1", "--sandbox", "bwrap", "--out", str(out),
                     env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip

    first = run_eval([done])
    assert first.returncode == 0, first.stdout + first.stderr
    kept, asked = (out / done / "report.json").read_bytes(), len(stand_in.seen)
    again = run_eval([done, new])
    assert again.returncode == 0, again.stdout + again.stderr
    assert "HTTP Request:" not in again.stderr  # the HTTP library's log lines stay off the user's terminal
    assert (out / done / "report.json").read_bytes() == kept
    assert json.loads((out / new / "report.json").read_text())["steps"] == 1
    later = [json.dumps(p["body"]) for p in stand_in.seen[asked:] if p["body"]]
    assert later, "the new task asked the server nothing"
    assert not [body for body in later if "pagekit" in body]
