"""`nexus-agent chat`: an interactive coding session on a local repo whose KV cache persists across requests
and across restarts (see pipeline/chat.py for the files and the interrupt rules)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from cli.options import raw_options
from cli.safe_text import safe_text, say_to
from pipeline import chat as cs
from pipeline.errors import RunError
from pipeline.profiles.store import AUTO_PROFILE, CLIENT, LOCAL, NO_PROFILE, resolve_profile


@raw_options(
    "model", "policy", "budget", "protocol", "protect", "profile", "device", "server", "api_key", "call_format",
    "learn", "constrain", model=None, policy=None, budget=None, protocol=None, protect=None,
)  # fmt: skip
def chat_cmd(
    repo: Path = typer.Option(None, "--repo", "-r", help="The repository to work on (default: the current dir)."),
    session: str = typer.Option(
        None, "--session", "-S", help="Session name (default: the repo's folder name; -2, -3... when it is taken)."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue a saved session (default: this repo's most recently used one)."
    ),
    python_env: bool = typer.Option(
        True, "--env/--no-env", help="Give the sandbox a Python env of the repo with pytest (built once, cached)."
    ),
    yolo: bool = typer.Option(False, "--yolo", help="Run commands without asking first."),
    max_steps: int = typer.Option(20, "--max-steps", min=1, help="Most agent steps per request."),
    max_new_tokens: int = typer.Option(512, "--max-new-tokens", min=1, help="Most tokens in one reply."),
    temperature: float = typer.Option(1.0, "--temperature", min=0.0, help="Sampling temperature (0 = greedy)."),
    seed: int = typer.Option(0, "--seed", help="Seed of sampling and of the cache (new sessions)."),
    **given: Any,
) -> None:
    """Talk to the agent about a repo; it works in a bubblewrap sandbox bound to the repo (edits land there).

    The sandbox has no network; only the repo and a private /tmp are writable; a Python env of the repo (the repo
    installed editable, or its requirements, and pytest; built once per repo, cached) is first on PATH. Edits are
    shown as diffs before you approve them and each turn's diff after it; /undo puts the repo back as it was before
    the last turn; /show N prints a step's whole output; /sessions lists this repo's sessions. See docs/chat.md.

    A new session takes the session defaults (model, policy, budget, protocol, protect) for options not given; a
    resumed one keeps its saved settings and refuses options that differ from them. With --server URL the model
    runs in that server (a `nexus-agent serve`, vLLM, SGLang: docs/servers.md; --model picks among its models,
    --api-key or $OPENAI_API_KEY is its key); a `nexus-agent serve`'s model and cache settings apply, and the chat
    continues one server session there (on other servers a resume re-sends the saved conversation).
    With --learn-profile (off by default), leaving a chat that has no memory profile and made a valid tool call learns
    one into the profile store (with --server the server learns it); later sessions use it with --memory-profile auto.
    """
    from agent.loop import AgentConfig
    from kvstore.defaults import parse_budget
    from pipeline.backends import set_threads

    console = Console(highlight=False)
    name = _session_name(console, session, repo, resume)
    folder = cs.session_dir(name)
    agent_cfg = AgentConfig(
        max_steps=max_steps, max_steps_absolute=max_steps, max_new_tokens=max_new_tokens, temperature=temperature
    )
    server, learn, constrain = given.pop("server"), given.pop("learn"), given.pop("constrain")
    api_key, calls = given.pop("api_key"), given.pop("call_format")
    learn = learn and given["profile"] in (AUTO_PROFILE, NO_PROFILE)  # --learn-profile fills the store auto reads
    if resume and given["profile"] == AUTO_PROFILE:  # a resumed session keeps the profile it started with
        given["profile"] = None
    else:
        profile = resolve_profile(given["profile"], CLIENT if server is not None else LOCAL)
        given["profile"] = None if profile is None else str(profile)
    if server is not None or (resume and cs.ChatState.load(folder).server):
        from pipeline.chat_served import open_served

        state, conversation = open_served(folder, repo, server, resume, seed, given, learn, api_key, calls)
    else:
        if calls == "tools":
            raise RunError("chat without --server speaks DeepSWE's XML: --call-format tools needs --server")
        given["budget"] = None if given["budget"] is None else parse_budget(given["budget"])
        if given["budget"] is None:
            del given["budget"]
        set_threads(None)
        state, conversation = _resume(folder, repo, given) if resume else _start(folder, repo, given, seed, learn)
        if constrain is not None:  # else the model's default (agent.call_grammar.constrained_by_default)
            conversation.model.constrain = constrain
    env = _python_env(console, Path(state.repo)) if python_env else None
    with cs.open_repo_sandbox(Path(state.repo), name, env) as sandbox:
        from cli.chat_loop import Chat
        from pipeline.chat_env import describe

        Chat(
            console, folder, name, state, conversation, sandbox, agent_cfg, yolo, describe(env), sys.stdin.isatty()
        ).run()
    if learn and state.learn and (folder / cs.STATE_FILE).is_file():  # an empty session is not kept
        saved = cs.ChatState.load(folder)  # as the last complete step left it (a rollback replaces the chat's state)
        if saved.requests:
            served = (getattr(getattr(conversation, "record", None), "model", None), api_key)
            _learn(console, folder, name, saved, getattr(conversation, "session", None), served)


def _session_name(console: Console, session: str | None, repo: Path | None, resume: bool) -> str:
    """--session, else for --resume this repo's most recently used session, else a new session named after the
    repo (its folder name; -2, -3... when a session has that name already)."""
    from pipeline import chat_sessions

    if session:
        return session
    path = (repo or Path.cwd()).resolve()
    base = path.name
    if resume:
        found = chat_sessions.sessions_of(path)
        return found[0].name if found else base
    name = chat_sessions.new_name(base)
    if name != base:
        console.print(safe_text(f"session {base!r} exists (continue it with --resume); this chat is a new session "
                                f"{name!r}", "yellow"))  # fmt: skip
    return name


def _python_env(console: Console, repo: Path):
    """The repo's Python env for the sandbox, built once (None, with a note, when it cannot be built)."""
    from pipeline.chat_env import ensure
    from swe_env.sandbox.base import SandboxError

    try:
        return ensure(repo, None, console.status)
    except SandboxError as exc:
        console.print(safe_text(f"no Python env for the sandbox ({exc}); python3 of the system only, no pytest; "
                                "--no-env skips this", "yellow"))  # fmt: skip
        return None


def _learn(console: Console, folder: Path, name: str, saved: cs.ChatState, session, served=(None, None)) -> None:
    """Leaving a chat with no memory profile: its conversation teaches one, the first request marking the task's
    text (pipeline.profiles.learn); under --server the server learns it. Ctrl-C skips it; nothing is lost."""
    from pipeline.profiles.learn import learn_after

    said = learn_after(
        folder / cs.TRAJECTORY_FILE, saved.requests[0], say_to(console), console.status, noun="chat",
        session=None if saved.server else session, server=saved.server or None, key=f"chat-{name}", skippable=True,
        served=served,
    )  # fmt: skip
    if said:
        console.print(safe_text(said))


def _start(folder: Path, repo: Path | None, given: dict[str, Any], seed: int, learn: bool):
    from kvstore.session.session import Session, SessionConfig
    from pipeline.chat_local import LocalConversation

    repo = cs.new_chat_repo(folder, repo)
    config = SessionConfig(**{k: v for k, v in given.items() if v is not None or k == "budget"}, seed=seed)
    session = Session.open(config)
    folder.mkdir(parents=True, exist_ok=True)
    from kvstore.defaults import DEFAULT_POLICY

    state = cs.ChatState(repo=str(repo), config=config.to_dict(), learn=learn and config.policy == DEFAULT_POLICY)
    state.save(folder)
    return state, LocalConversation(folder, session, state.config)


def _resume(folder: Path, repo: Path | None, given: dict[str, Any]):
    from kvstore.session.session import Session, SessionConfig
    from pipeline.chat_local import LocalConversation

    state = cs.ChatState.load(folder)
    state.check_resumable(folder, repo)
    if state.server:
        raise RunError(f"session {folder.name!r} runs its model in a server; resume it with --server URL")
    saved = SessionConfig.from_dict(state.config)
    differ = [f"--{k} {v} (saved: {getattr(saved, k)})" for k, v in given.items() if k != "device" and v is not None
              and v != getattr(saved, k)]  # fmt: skip
    if differ:
        raise RunError(f"session {folder.name!r} was started with other settings: {', '.join(differ)}")
    if given.get("device"):
        saved.device = given["device"]
    path = folder / cs.SESSION_FILE
    session = Session.load(path, config=saved) if path.exists() else Session.open(saved)
    return state, LocalConversation(folder, session, state.config)
