"""`nexus-agent chat --server` against a stand-in that speaks only the OpenAI API (tests/standin.py), as vLLM or
SGLang do: the real chat in a real bubblewrap sandbox, the served model picked by --model, the key from --api-key or
$OPENAI_API_KEY, native tool calls by default, and a resume that re-sends the saved conversation (no nexus endpoint
is asked: /v1/sessions would answer 404 here)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from clilib import cli_env, nexus
from standin import KEY, MODELS, StandIn, stand_in_server

from pipeline import chat as cs

pytestmark = pytest.mark.usefixtures("bwrap_installed")
SCRIPT = [("execute_bash", {"cmd": "cat app.py"}), ("finish", {"command": "submit", "result": "read app.py"})]


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    with stand_in_server(SCRIPT) as srv:
        yield srv


def _chat(tmp_path: Path, *args: str, request: str = "read app.py", key: str | None = None):
    env = cli_env(tmp_path / "home") | ({"OPENAI_API_KEY": key} if key else {})
    base = ["chat", "--session", "s", "--max-steps", "2", "--yolo", "--no-env"]
    return nexus(*base, *args, env=env, cwd=tmp_path, input=f"{request}\n")


def _record(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "home" / "sessions" / "s" / cs.SERVED_FILE).read_text())


def _posts(srv: StandIn) -> list[dict]:
    return [s for s in srv.seen if s["body"] is not None]


def test_a_chat_calls_tools_natively_and_resumes_by_resending(stand_in: StandIn, tmp_path: Path, repo: Path) -> None:
    res = _chat(tmp_path, "--server", stand_in.url, "--model", MODELS[1], "--api-key", KEY, "--repo", str(repo))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    first = _posts(stand_in)
    assert len(first) == 2  # a tool call, then finish
    assert {p["body"]["model"] for p in first} == {MODELS[1]}
    assert {p["auth"] for p in first} == {f"Bearer {KEY}"}
    assert first[0]["body"]["tool_choice"] == "required"
    assert [t["function"]["name"] for t in first[0]["body"]["tools"]] == ["file_editor", "execute_bash", "search",
                                                                          "finish"]  # fmt: skip
    assert "<function=" not in first[0]["body"]["messages"][0]["content"]  # the tools' rules, not the XML ones
    assert "print('hello')" in first[1]["body"]["messages"][3]["content"]  # the tool ran in the sandbox
    record = _record(tmp_path)
    assert (record["model"], record["call_format"]) == (MODELS[1], "tools")
    saved = len(record["messages"])
    assert KEY not in (tmp_path / "home").joinpath("sessions", "s").joinpath(cs.SERVED_FILE).read_text()

    res = _chat(tmp_path, "--resume", "--repo", str(repo), request="and again", key=KEY)  # key from the environment
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    said = " ".join(res.stdout.split())
    assert (
        f"keeps no sessions (not a nexus-agent serve): the next request re-sends the saved conversation ({saved}"
        in said
    )
    again = _posts(stand_in)[len(first)]["body"]
    assert again["messages"][:saved] == record["messages"]  # the whole saved conversation, re-sent
    assert "and again" in again["messages"][saved]["content"]
    assert again["tools"] == first[0]["body"]["tools"]  # the resumed chat still offers its tools
    assert {s["path"] for s in stand_in.seen} == {"/v1/models", "/v1/chat/completions"}  # no nexus endpoint asked
    assert len(_record(tmp_path)["messages"]) > saved


def test_the_xml_format_is_kept_on_resume(stand_in: StandIn, tmp_path: Path, repo: Path) -> None:
    args = ["--server", stand_in.url, "--model", MODELS[0], "--call-format", "xml", "--repo", str(repo)]
    res = _chat(tmp_path, *args, key=KEY)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    body = _posts(stand_in)[0]["body"]
    assert "tools" not in body
    assert body["stop"] == ["</function>"]
    assert _record(tmp_path)["call_format"] == "xml"
    res = _chat(tmp_path, "--resume", "--call-format", "tools", "--repo", str(repo), key=KEY)
    assert res.returncode == 2, res.stderr
    assert "was started with --call-format xml" in res.stderr


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ([], f"serves {', '.join(MODELS)}: name one with --model"),
        (["--model", "nosuch"], f"--model nosuch: the server at URL does not serve it; it serves: {', '.join(MODELS)}"),
        (["--model", MODELS[0], "--policy", "snapkv"], "the server's; drop --policy"),
    ],
)
def test_the_served_model_is_picked_or_listed(stand_in: StandIn, tmp_path: Path, repo: Path, options, says) -> None:
    res = _chat(tmp_path, "--server", stand_in.url, *options, "--repo", str(repo), key=KEY)
    assert res.returncode == 2, res.stdout + res.stderr
    assert says.replace("URL", stand_in.url) in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_missing_key_is_one_line(stand_in: StandIn, tmp_path: Path, repo: Path) -> None:
    res = _chat(tmp_path, "--server", stand_in.url, "--model", MODELS[0], "--repo", str(repo))
    out = " ".join(res.stdout.split())
    assert "HTTP 401: bad key" in out, out + res.stderr
    assert "Traceback" not in out + res.stderr
