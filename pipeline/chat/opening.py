"""Opening a chat from its settings: the session's name and folder, a new or resumed session with its model and
memory (here, or in a `nexus-agent serve`), the repo's Python env and the sandbox; and, when the chat is left, the
memory profile its conversation may teach (--learn-profile).

`open_chat` is what `nexus-agent chat` runs and what a Python caller uses:

    with open_chat(ChatSettings(repo=path, yolo=True), on_step=print) as runner:
        turn = runner.request("make the tests pass")
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvstore.session.session import Session, SessionConfig
from pipeline.backends import set_threads
from pipeline.chat import sessions
from pipeline.chat import state as cs
from pipeline.chat.env import describe, ensure
from pipeline.chat.local import LocalConversation
from pipeline.chat.runner import ChatRunner
from pipeline.chat.sandbox import open_repo_sandbox
from pipeline.chat.served import open_served
from pipeline.chat.settings import ChatSettings
from pipeline.config import chat_given, memory_conflicts
from pipeline.errors import RunError, RunSettingError
from pipeline.profiles.learn import learn_after
from pipeline.profiles.store import CLIENT, resolve_profile
from pipeline.run import agent_config
from swe_env.sandbox.base import SandboxError


@contextmanager
def open_chat(
    settings: ChatSettings, *, on_event: Callable[[dict[str, Any]], None] | None = None,
    status: Callable[[str], AbstractContextManager] | None = None, **callbacks: Any,
) -> Iterator[ChatRunner]:  # fmt: skip
    """A ChatRunner on the session `settings` name, its sandbox open; closed (and an empty session removed) at the
    end, then, with --learn-profile, the profile learned. `callbacks`: ChatRunner's (approve, unattended,
    on_token, on_step); RunError when the session cannot be opened as asked."""

    emit = on_event or (lambda event: None)
    status = status or (lambda text: nullcontext())
    name, taken = session_name(settings)
    if taken:
        emit({"kind": "warning", "text": f"session {taken!r} exists (continue it with --resume); this chat is a new "
                                         f"session {name!r}"})  # fmt: skip
    folder = cs.session_dir(name)
    with sessions.hold(folder):  # one chat per session: a second one is refused before anything is read
        yield from _opened(settings, folder, name, emit, status, on_event, callbacks)


def _opened(settings: ChatSettings, folder: Path, name: str, emit, status, on_event, callbacks: dict[str, Any]):
    """open_chat's work once the session is held: the runner, then (--learn-profile) the profile learned."""
    state, conversation, cfg = open_conversation(settings, folder)
    others = sessions.open_on(Path(state.repo), besides=name)
    if others:
        emit({"kind": "warning", "text": f"another chat is open on this repo (session {others[0]!r}): /undo cannot "
                                         "tell its edits from this chat's, and takes back both"})  # fmt: skip
    env = python_env(Path(state.repo), status, emit) if settings.python_env else None
    with open_repo_sandbox(Path(state.repo), name, env) as sandbox:
        runner = ChatRunner(folder, name, state, conversation, sandbox, agent_config(cfg), yolo=settings.yolo,
                            env_line=describe(env), on_event=on_event, status=status, **callbacks)  # fmt: skip
        try:
            yield runner
        finally:
            runner.close()
    if cfg.learn and state.learn and (folder / cs.STATE_FILE).is_file():  # an empty session is not kept
        saved = cs.ChatState.load(folder)  # as the last complete step left it (a rollback replaces the runner's)
        if saved.requests:
            served = (getattr(getattr(conversation, "record", None), "model", None), settings.api_key)
            _learn(folder, name, saved, getattr(conversation, "session", None), emit, status, served)


def session_name(settings: ChatSettings) -> tuple[str, str]:
    """The session's name: `settings.session`, else for a resume this repo's most recently used session, else a
    new session named after the repo (its folder name; -2, -3... when taken). Second: the name that was taken
    ("" when none)."""

    if settings.session:
        return settings.session, ""
    path = (settings.repo or Path.cwd()).resolve()
    base = path.name
    if settings.resume:  # a session with no request (a chat killed before its first) is never the one resumed
        found = [s for s in sessions.sessions_of(path) if s.requests]
        return (found[0].name if found else base), ""
    name = sessions.new_name(base)
    return name, base if name != base else ""


def open_conversation(settings: ChatSettings, folder: Path):
    """(ChatState, conversation, RunConfig) of a new or resumed session; the config's `learn`: leaving it may
    learn a profile; its limits and sampling are the agent's (pipeline.run.agent_config).

    The settings are built once (`settings.run_config()`: each one checked there, its error naming it); a new local
    session opens from that config, a resumed one from its saved config, refusing given settings that differ."""
    cfg = settings.run_config()
    given = settings.given()
    if settings.server is not None or (settings.resume and cs.ChatState.load(folder).server):
        profile = resolve_profile(given["profile"], CLIENT)  # the server's own (a file here: an error, one line)
        given["profile"] = None if profile is None else str(profile)
        state, conversation = open_served(folder, settings.repo, settings.server, settings.resume, settings.seed,
                                          given, cfg.learn, settings.api_key, settings.call_format,
                                          cfg.server_timeout)  # fmt: skip
        return state, conversation, cfg
    if settings.call_format == "tools":
        raise RunError("chat without --server speaks DeepSWE's XML: --call-format tools needs --server")

    set_threads(None)
    if settings.resume:
        state, conversation = _resume(folder, settings.repo, cfg, list(chat_given(given, resume=True)))
    else:
        state, conversation = _start(folder, settings.repo, cfg)
    if settings.constrain is not None:  # else the model's default (agent.call_grammar.constrained_by_default)
        conversation.model.constrain = settings.constrain
    return state, conversation, cfg


def _start(folder: Path, repo: Path | None, cfg):

    repo = cs.new_chat_repo(folder, repo)
    config = cfg.session_config()
    session = Session.open(config)
    folder.mkdir(parents=True, exist_ok=True)
    state = cs.ChatState(repo=str(repo), config=config.to_dict(), learn=cfg.learn)
    state.save(folder)
    return state, LocalConversation(folder, session, state.config)


def _resume(folder: Path, repo: Path | None, cfg, given: list[str]):
    """A saved local session as it was saved; `given`: the memory settings the user gave, which must match."""

    state = cs.ChatState.load(folder)
    state.check_resumable(folder, repo)
    if state.server:
        raise RunError(f"session {folder.name!r} runs its model in a server; resume it with --server URL")
    saved = SessionConfig.from_dict(state.config)
    differ = memory_conflicts(cfg.memory, saved, given)
    if differ:  # named by the first setting (the CLI says its flag), the others listed by name
        (name, (new, old)), *rest = differ.items()
        more = "".join(f"; {k} {n} (saved: {o})" for k, (n, o) in rest)
        raise RunSettingError(name, f"{new} (saved: {old}): session {folder.name!r} was started with other "
                                    f"settings, which a resume keeps{more}")  # fmt: skip
    if "device" in given:
        saved = replace(saved, device=cfg.memory.device)
    path = folder / cs.SESSION_FILE
    session = Session.load(path, config=saved) if path.exists() else Session.open(saved)
    return state, LocalConversation(folder, session, state.config)


def python_env(repo: Path, status: Callable[[str], AbstractContextManager], emit: Callable[[dict], None]):
    """The repo's Python env for the sandbox, built once (None, with a warning, when it cannot be built)."""

    try:
        return ensure(repo, None, status)
    except SandboxError as exc:
        emit({"kind": "warning", "text": f"no Python env for the sandbox ({exc}); python3 of the system only, no "
                                         "pytest; --no-env skips this"})  # fmt: skip
        return None


def _learn(folder: Path, name: str, saved: cs.ChatState, session, emit, status, served=(None, None)) -> None:
    """Leaving a chat with no memory profile: its conversation teaches one, the first request marking the task's
    text (pipeline.profiles.learn); under --server the server learns it. Ctrl-C skips it; nothing is lost."""

    def say(line: str) -> None:
        emit({"kind": "info", "text": line})

    said = learn_after(
        folder / cs.TRAJECTORY_FILE, saved.requests[0], say, status, noun="chat",
        session=None if saved.server else session, server=saved.server or None, key=f"chat-{name}", skippable=True,
        served=served,
    )  # fmt: skip
    if said:
        say(said)
