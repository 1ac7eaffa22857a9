"""The conversation of a local `nexus-agent chat`: a kvstore Session in this process, saved to session.safetensors
after every agent step; a turn cut mid-step goes back to that file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.backends.local import LocalModel
from kvstore.session.session import Session, SessionConfig
from pipeline.chat.state import SESSION_FILE


class LocalConversation:
    """The chat's model and memory when they live here: the agent drives a LocalModel over the session."""

    def __init__(self, folder: Path, session, config: dict[str, Any], on_token: Callable[[str], None] | None = None):

        self.folder, self.config = folder, config  # config: the SessionConfig a new session is opened with
        self.model = LocalModel(session, on_token=on_token)

    def set_output(self, on_token: Callable[[str], None] | None, notify: Callable[[str], None]) -> None:
        self.model.on_token = on_token

    @property
    def session(self):
        return self.model.session

    @property
    def has_history(self) -> bool:
        return bool(self.session.messages)

    def on_step(self, rec: dict[str, Any]) -> None:
        """The session itself records its turns."""

    def save(self) -> None:
        if self.session.tokens:
            self.session.save(self.folder / SESSION_FILE)

    def rollback(self) -> None:
        """A turn cut mid-step: go back to the session saved after its last complete step."""

        path, s = self.folder / SESSION_FILE, self.session
        if path.exists():
            self.model.session = Session.load(path, model=s.model, tokenizer=s.tokenizer)
        else:
            self.model.session = Session(s.model, s.tokenizer, SessionConfig.from_dict(self.config))

    def attach(self) -> str:
        s = self.session
        last = s.turns[-1].summary() if s.turns else "no turns yet"
        return f"{s.num_tokens} tokens of history; {last}"

    def stats_lines(self) -> list[str]:
        s = self.session
        return [t.summary() for t in s.turns] + [f"{len(s.turns)} turns, {s.num_tokens} tokens in the history"]

    def describe(self) -> str:
        c = self.session.config
        return f"{c.model}, {c.describe()}"

    def token_limit_note(self) -> str:
        s = self.session
        return (
            f"the conversation fills the model's positions ({s.num_tokens} of {s.max_positions}); start a new --session"
        )
