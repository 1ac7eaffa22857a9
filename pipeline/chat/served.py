"""The conversation of a `nexus-agent chat --server URL`: the model and the KV cache live in a `nexus-agent serve`.

The chat names one server session (X-Nexus-Session: `session_id`, kept in conversation.json) and sends the whole
conversation with every request; the server, holding that session, prefills only the new messages. conversation.json
(rewritten atomically after every agent step, like the local chat's session file) keeps what the chat needs without
the server: the messages, the turn statistics, the session id.

The server's copy must stay the chat's conversation, message for message, or the server would take the request's
messages as new ones on top of its own. So:
- resume: a server session with as many messages as the saved chat is re-attached; one that differs is closed; a
  missing one (server restarted, session idle past its TTL) is re-opened under the same id by the next request,
  which prefills the saved conversation once;
- a turn cut short (Ctrl-C mid-step, a server error or disconnect): the chat goes back to its last saved step and
  closes the server session (the server already closes it when a streamed reply is cut); the next request
  re-opens it and prefills the saved conversation. A close that cannot reach the server is retried before the
  next request (`rebuild` in conversation.json).

A server that speaks only the OpenAI API (vLLM, SGLang: no `nexus` field in its /v1/models) keeps no sessions: the
chat sends the whole saved conversation with every request, a resume re-sends it, and /stats has the token counts
it reports instead of cache statistics. Every request goes through agent.backends.client.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.backends.client import ServerClient, ServerError
from agent.backends.openai_compat import OpenAICompatConfig, OpenAICompatModel
from agent.calls import AUTO, CallFormat, call_format
from agent.calls_tools import tool_schemas
from agent.errors import AgentError
from agent.protocols import Message, ModelReply, Sampling
from kvstore.defaults import describe_memory
from pipeline import chat as cs
from pipeline.backends import MODELS_TIMEOUT_S, server_settings
from pipeline.chat.state import SERVED_FILE
from pipeline.chat.steps import stats_line
from pipeline.config import SERVER_TIMEOUT_S
from pipeline.errors import RunError
from pipeline.files import atomic_write

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")  # what a server takes as a session id (server.api)
SESSIONS_MAX_BYTES = 4 * 2**20  # the nexus-only /v1/sessions answers: a list of sessions, ~150 bytes each
BUSY_WAIT_S = 30.0  # how long closing a session waits for a reply the server is still generating (a cut stream)


@dataclass
class ServedRecord:
    """conversation.json: what a server chat keeps on its side."""

    server: str  # base URL (…/v1) of the server
    session_id: str  # the server session this chat continues
    messages: list[dict[str, str]] = field(default_factory=list)  # the conversation as sent and received
    turns: list[dict[str, Any]] = field(default_factory=list)  # each model turn's stats (the server's `nexus.turn`)
    rebuild: bool = False  # the server's copy may differ from `messages`: close it before the next request
    model: str = ""  # the served model the chat talks to (--model, else the server's only one); "": not yet asked
    call_format: str = "xml"  # how the model calls tools (agent.calls): kept for the conversation's whole life

    def save(self, folder: Path) -> None:
        atomic_write(folder / SERVED_FILE, json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, folder: Path) -> ServedRecord:
        path = folder / SERVED_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            record = cls(**data)
        except FileNotFoundError:
            raise RunError(f"{path} is missing: the chat's conversation cannot be restored; delete {folder}") from None
        except (OSError, ValueError, TypeError, RecursionError) as exc:
            raise RunError(f"{path} is corrupt ({type(exc).__name__}); delete {folder} to start over") from None
        if not isinstance(record.messages, list) or not isinstance(record.turns, list):
            raise RunError(f"{path} is corrupt (messages or turns is not a list); delete {folder} to start over")
        if not isinstance(record.session_id, str) or not SESSION_ID.fullmatch(record.session_id):
            record.session_id = new_session_id(folder.name)  # an id servers now refuse: the chat re-opens as a new one
        return record


def new_session_id(name: str) -> str:
    """A server session id for the chat `name` (server.api.SESSION_ID: letters, digits and . _ : @ - only)."""
    plain = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:64]
    return f"chat-{plain}-{uuid.uuid4().hex[:12]}" if plain else f"chat-{uuid.uuid4().hex[:12]}"


def open_served(
    folder: Path, repo: Path | None, server: str | None, resume: bool, seed: int, given: dict[str, Any],
    learn: bool = False, api_key: str | None = None, calls: str = AUTO, timeout_s: float = SERVER_TIMEOUT_S,
):  # fmt: skip
    """The chat state and conversation of a new or resumed --server chat (`server`: None keeps the saved URL).
    given["model"]: the served model (None: the saved one, else the server's only one); the other options of a
    local model are refused. `learn`: a new chat may teach the server a memory profile when it is left (a resumed
    one keeps its choice). `api_key`: the server's key (None: $OPENAI_API_KEY; never saved). `calls`: the call
    format (auto: tools, which every server takes; a resumed chat keeps its own). `timeout_s`: the seconds the
    server may take over one answer, all of it (--server-timeout)."""

    model = given.get("model")
    local = [f"--{k}" for k, v in given.items() if v is not None and k != "model"]
    if local:
        raise RunError(f"with --server the model and its cache settings are the server's; drop {', '.join(local)}")
    if resume:
        state = cs.ChatState.load(folder)
        state.check_resumable(folder, repo)
        if not state.server:
            raise RunError(f"session {folder.name!r} keeps its model and cache here; resume it without --server")
        have = (folder / SERVED_FILE).is_file()
        record = ServedRecord.load(folder) if have else ServedRecord(state.server, new_session_id(folder.name))
        state.server = record.server = server or state.server  # a --server given on resume: the server moved
        if calls not in (AUTO, record.call_format):
            raise RunError(f"session {folder.name!r} was started with --call-format {record.call_format}")
    else:
        repo = cs.new_chat_repo(folder, repo)
        state = cs.ChatState(repo=str(repo), server=server, learn=learn)
        record = ServedRecord(server, new_session_id(folder.name), call_format="tools" if calls == AUTO else calls)
    settings = server_settings(record.server, model or record.model or None, api_key, min(MODELS_TIMEOUT_S, timeout_s))
    record.model = settings["id"]
    state.config = {k: v for k, v in settings.items() if k != "id"}
    folder.mkdir(parents=True, exist_ok=True)
    record.save(folder)
    state.save(folder)
    return state, ServedConversation(folder, record, settings, seed, api_key, timeout_s)


class ServedConversation:
    """The chat's side of a server session: the backend the agent talks to, saving, rollback, re-attaching."""

    def __init__(
        self, folder: Path, record: ServedRecord, settings: dict[str, Any], seed: int | None = None,
        api_key: str | None = None, timeout_s: float = SERVER_TIMEOUT_S,
    ) -> None:  # fmt: skip
        self.folder, self.record, self.settings = folder, record, settings
        self.notify: Callable[[str], None] = print  # one-line notes for the user
        self.sessions = "policy" in settings  # a nexus-agent serve (its /v1/models says its cache): server sessions
        self.calls: CallFormat = call_format(record.call_format)  # what the agent parses the replies with
        sid = record.session_id if self.sessions else None
        config = OpenAICompatConfig(
            settings["id"], record.server, api_key=api_key, timeout_s=timeout_s, seed=seed, session_id=sid, retries=1
        )
        self.inner = OpenAICompatModel(config)
        if self.calls.name == "tools":  # sent with every request, a resumed chat's too (the history keeps none)
            self.inner.tools = tool_schemas()
        sessions_timeout = min(MODELS_TIMEOUT_S, timeout_s)  # /v1/sessions: as quick to answer as /models
        self.client = ServerClient(
            record.server, api_key, timeout_s=sessions_timeout, max_answer_bytes=SESSIONS_MAX_BYTES
        )
        self.inner.history = record.messages
        where = f" (session {record.session_id})" if self.sessions else ""
        self.name = f"{settings['id']} at {record.server}{where}"

    @property
    def model(self) -> ServedConversation:
        return self  # the agent's backend: `reply` below

    def set_output(self, on_token: Callable[[str], None] | None, notify: Callable[[str], None]) -> None:
        """Stream replies to `on_token`; notes (a re-opened session, a busy one) go to `notify`."""
        self.inner.on_token, self.notify = on_token, notify

    # --- the ModelBackend the agent drives -----------------------------------------------------------------------
    def reply(self, new_messages: list[Message], sampling: Sampling) -> ModelReply:
        if self.record.rebuild:
            self._close_on_server()
        known = len(self.inner.history)
        reply = self.inner.reply(new_messages, sampling)
        if known and not self.inner.nexus.get("continued", True):
            self.notify(
                f"the server had no session {self.record.session_id}: it re-opened it and prefilled the whole "
                f"conversation ({reply.stats.get('prefill_tokens', '?')} tokens) once"
            )
        return reply

    # --- what the chat loop asks ---------------------------------------------------------------------------------
    @property
    def has_history(self) -> bool:
        return bool(self.record.messages)

    def on_step(self, rec: dict[str, Any]) -> None:
        self.record.turns.append(dict(rec.get("stats") or {}))

    def save(self) -> None:
        self.record.save(self.folder)

    def rollback(self) -> None:
        """Back to the conversation saved after the last complete step; the server's copy is closed."""
        saved = ServedRecord.load(self.folder) if (self.folder / SERVED_FILE).is_file() else self.record
        self.record.messages[:] = saved.messages  # the backend holds this very list
        self.record.turns = saved.turns
        self.record.rebuild = True
        self.save()
        self._close_on_server()

    def attach(self) -> str:
        """On resume: whether the server still holds this chat's session, and what happens when it does not."""
        sid, n = self.record.session_id, len(self.record.messages)
        if not self.sessions:
            where = f"the server at {self.record.server} keeps no sessions (not a nexus-agent serve)"
            return f"{where}: the next request re-sends the saved conversation ({n} messages)"
        if not n:
            return f"server session {sid} (empty)"
        if self.record.rebuild and self._close_on_server():
            return f"server session {sid} closed after an interrupted turn; the next request prefills {n} messages"
        found = self._lookup()
        if found is None:
            return (f"the server no longer holds session {sid} (restarted, or idle past its TTL): the next request "
                    f"re-opens it and prefills the saved conversation ({n} messages) once")  # fmt: skip
        if found.get("messages") == n and found.get("state") != "active":
            held = found.get("held_bytes", 0) / 2**20
            return f"re-attached to server session {sid} ({n} messages, {found.get('state')}, {held:.1f} MiB held)"
        self.record.rebuild = True
        closed = self._close_on_server()
        why = ("was busy with a reply (cut short, or another chat on this session)" if found.get("state") == "active"
               else f"has {found.get('messages')} messages, the saved chat {n}")  # fmt: skip
        what = "it was closed" if closed else "it is closed before the next request"
        return f"the server's session {sid} {why}: {what}, and the next request prefills the saved conversation once"

    def stats_lines(self) -> list[str]:

        lines = [stats_line(n, t) or f"turn {n}: no statistics" for n, t in enumerate(self.record.turns, 1)]
        note = "" if self.sessions else "; no cache statistics: the server is not a nexus-agent serve"
        return [*lines, f"{len(self.record.turns)} turns, {self.history_tokens} tokens in the history (server){note}"]

    @property
    def history_tokens(self) -> int:
        last = self.record.turns[-1] if self.record.turns else {}
        return int(last.get("history_tokens") or last.get("total_tokens") or 0)

    def describe(self) -> str:
        s = self.settings
        if "policy" in s:
            cache = describe_memory(s["policy"], s["budget"], s["protocol"], s.get("protect", "none"))
        else:
            cache = "the server's cache"
        return f"{s.get('model', s['id'])}, {cache}, served at {self.record.server}"

    def token_limit_note(self) -> str:
        return f"the conversation reached the context limit ({self.history_tokens} tokens); start a new --session"

    # --- the server's session ------------------------------------------------------------------------------------
    def _lookup(self) -> dict[str, Any] | None:
        """The server's entry for this chat's session (GET /v1/sessions), None when it has none."""
        data = self._call("GET", "/sessions")
        return next((e for e in data.get("data", []) if e.get("id") == self.record.session_id), None)

    def _close_on_server(self) -> bool:
        """DELETE the session (waiting out a reply still being generated); True once the server holds no copy."""
        if not self.sessions:  # nothing to close: every request carries the whole conversation
            self.record.rebuild = False
            return True
        end = time.monotonic() + BUSY_WAIT_S
        while True:
            try:
                self._call("DELETE", f"/sessions/{self.record.session_id}")
            except _NotFound:
                pass
            except _Busy:
                if time.monotonic() < end:
                    time.sleep(0.2)
                    continue
                self.notify(f"server session {self.record.session_id} still busy; closing it before the next request")
                return False
            except AgentError:  # unreachable: `rebuild` stays set, the close is retried before the next request
                return False
            self.record.rebuild = False
            self.save()
            return True

    def _call(self, method: str, path: str) -> dict[str, Any]:
        try:
            return self.client.call(method.lower(), path)
        except ServerError as exc:
            raise {404: _NotFound, 409: _Busy}.get(exc.status, AgentError)(f"{method} {exc}") from None


class _NotFound(AgentError):
    pass


class _Busy(AgentError):
    pass
