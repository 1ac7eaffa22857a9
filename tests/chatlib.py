"""A chat driven by a script: the real ChatRunner (pipeline/chat/runner.py) rendered by the CLI's Chat view, a real
bubblewrap sandbox on a real git repo, and a model backend that answers with written replies
(agent.backends.replay), so that what the chat shows can be asserted."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

from rich.console import Console

from agent.backends.replay import ReplayModel

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
CALC = "def add(a, b):\n    return a - b\n"
TEST_CALC = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def failing_repo(root: Path) -> Path:
    """A small git repo (one commit) whose one test fails: add() subtracts."""
    repo = root / "calc"
    repo.mkdir(parents=True)
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(TEST_CALC)
    for cmd in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=repo, check=True, env=GIT_ENV)
    return repo


def call(name: str, **params: str) -> str:
    """A model reply making one tool call."""
    body = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params.items())
    return f"Next: {name}.\n<function={name}>\n{body}</function>"


def bash(cmd: str) -> str:
    return call("execute_bash", cmd=cmd)


def finish(result: str = "done") -> str:
    return call("finish", command="submit", result=result)


class ScriptedConversation:
    """The chat's conversation (pipeline/chat/runner.py's contract) over a ReplayModel: replies in order, no cache."""

    def __init__(self, replies: list[str], stream: bool = False) -> None:
        self.model = ReplayModel(replies, name="scripted")
        self.steps, self.stream = 0, stream

    def set_output(self, on_token, notify) -> None:
        """With `stream`, each reply goes to `on_token` in pieces of 5 characters, as a live model's would."""
        if not self.stream:
            return
        reply = self.model.reply

        def streamed(messages, sampling):
            out = reply(messages, sampling)
            for i in range(0, len(out.text), 5):
                on_token(out.text[i : i + 5])
            return out

        self.model.reply = streamed

    @property
    def has_history(self) -> bool:
        return self.steps > 0

    def on_step(self, rec) -> None:
        self.steps += 1

    def save(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def attach(self) -> str:
        return f"{self.steps} steps"

    def stats_lines(self) -> list[str]:
        return [f"{self.steps} steps (scripted model)"]

    def describe(self) -> str:
        return "a scripted model"

    def token_limit_note(self) -> str:
        return ""


def open_chat(
    folder: Path, repo: Path, replies: list[str], sandbox, yolo: bool = True, env_line: str = "no env", stream=False
):
    """A Chat view on a ChatRunner on `repo` whose console writes into a string (`chat.console.file.getvalue()`)."""
    from agent.loop import AgentConfig
    from cli.chat_loop import Chat
    from pipeline import chat as cs
    from pipeline.chat.runner import ChatRunner

    console = Console(file=io.StringIO(), width=200, force_terminal=False, highlight=False)
    state = cs.ChatState(repo=str(repo))
    folder.mkdir(parents=True, exist_ok=True)
    state.save(folder)
    cfg = AgentConfig(max_steps=10, max_steps_absolute=10, command_timeout=60)
    chat = Chat(console)
    chat.runner = ChatRunner(folder, "t", state, ScriptedConversation(replies, stream), sandbox, cfg, yolo=yolo,
                             env_line=env_line, **chat.callbacks())  # fmt: skip
    return chat


def shown(chat) -> str:
    """What the chat printed so far (and forget it)."""
    text = chat.console.file.getvalue()
    chat.console.file.seek(0)
    chat.console.file.truncate()
    return text


def view(console: Console, folder: Path, state, conversation, sandbox, cfg=None, yolo: bool = False):
    """The CLI's Chat view on a ChatRunner over `conversation` (a real model's, say)."""
    from agent.loop import AgentConfig
    from cli.chat_loop import Chat
    from pipeline.chat.runner import ChatRunner

    chat = Chat(console)
    chat.runner = ChatRunner(folder, "t", state, conversation, sandbox, cfg or AgentConfig(), yolo=yolo,
                             **chat.callbacks())  # fmt: skip
    return chat
