"""`nexus-agent chat`: an interactive coding session on a local repo whose KV cache persists across requests
and across restarts. This parses the flags into one ChatSettings and renders; the chat itself is
pipeline/chat/ (opening.py opens it, runner.py runs it)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from cli.chat_loop import Chat
from cli.options import raw_options
from pipeline.chat import approval
from pipeline.config import CHAT_MAX_NEW_TOKENS, CHAT_MAX_STEPS
from pipeline.errors import RunError


@raw_options(
    "model", "policy", "budget", "protocol", "protect", "profile", "device", "server", "api_key", "server_timeout",
    "call_format", "learn", "constrain", model=None, policy=None, budget=None, protocol=None, protect=None,
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
    message: str = typer.Option(
        None, "--message", help="Run this one request unattended and exit: 0 when the agent finished, else 1."
    ),
    max_steps: int = typer.Option(CHAT_MAX_STEPS, "--max-steps", min=1, help="Most agent steps per request."),
    max_new_tokens: int = typer.Option(
        CHAT_MAX_NEW_TOKENS, "--max-new-tokens", min=1, help="Most tokens in one reply."
    ),
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
    from pipeline.chat.opening import open_chat  # lazy: torch, transformers, off --help
    from pipeline.chat.settings import ChatSettings

    if message is not None and not message.strip():
        raise RunError("--message is empty: give the request's text")

    settings = ChatSettings(
        repo=repo, session=session, resume=resume, python_env=python_env, yolo=yolo, max_steps=max_steps,
        max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, server=given.pop("server"),
        learn=given.pop("learn"), constrain=given.pop("constrain"), api_key=given.pop("api_key"),
        server_timeout=given.pop("server_timeout"), call_format=given.pop("call_format"), memory=given,
    )  # fmt: skip
    console = Console(highlight=False)
    view = Chat(console, interactive=sys.stdin.isatty() and message is None)
    unattended = approval.ONE_SHOT if message is not None else approval.PIPED
    with open_chat(settings, unattended=unattended, **view.callbacks()) as runner:
        view.runner = runner
        if message is None:
            view.run()
            return
        turn = view.one_shot(message)
    raise typer.Exit(0 if turn.finished else 1)
