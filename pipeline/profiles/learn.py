"""The memory learns its agent, when the user asks for it (`--learn-profile`; off by default): a `solve` run or a
`chat` session of the default memory that found no memory profile for its opening and made a valid tool call teaches
the store one when it ends (a chat when the user leaves it). Its conversation is calibrated
(kvstore.profiles.calibrate, with the process's own model) with the task's statement (the issue, the chat's first
request) marking the part of the opening that is the task's, so the profile covers the rest: the system prompt and
the task message's fixed text. Later sessions of that agent and model use it when they ask for the store
(--memory-profile auto; the default, none, never reads it, so no run changes behind its user's back). In `bench
replay` a profile of one conversation kept 95% of what one of two gained, and one of two did as well as one of twelve
(docs/memory.md).

A conversation whose opening does not hold its statement (so its template is unknown) goes to the pool,
`<profile store>/pool/<model>/` (copies of the trajectory.jsonl files, the newest KEEP per model; a chat left several
times keeps only its last copy), and once two of the pool share a system prompt, the profile is calibrated from those
two, which leave the pool. A session whose opening matched a profile learns nothing, nor does a conversation the store
has a profile for by the time it ends (learned meanwhile), nor one without a valid tool call.

Under --server the server learns instead (`learn_served`): the conversation and its statement go to its POST
/v1/nexus/profiles (server/profiles.py), which calibrates on the server's model and saves the profile where its
sessions read them. `learn_after` is the one call solve and chat make when a conversation ends.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path

from pipeline.lifetime import Terminated
from pipeline.profiles.store import profile_store

KEEP = 8  # conversations kept per model in the pool
POOL = "pool"


def learn_after(
    trajectory: Path, statement: str | None, say: Callable[[str], None],
    waiting: Callable[[str], AbstractContextManager] = nullcontext, *, session=None, server: str | None = None,
    noun: str = "run", key: str | None = None, skippable: bool = False,
    served: tuple[str | None, str | None] = (None, None),
) -> str | None:  # fmt: skip
    """What the conversation of a finished `solve` run, or of a chat being left, teaches its agent's memory profile:
    with `server`, the server learns (`learn_served`); else, when `session` (the model in this process) found no
    profile for its opening, the store does (`learn_from_run`). `statement`: the task's text in the opening (the
    issue, the chat's first request); `waiting(text)`: shown while it works (a console status); `key`, `noun`: as in
    `learn_from_run`; `skippable`: Ctrl-C skips learning (a chat being left) instead of stopping the program;
    `served`: the --server's (model, API key) (None: its only model, $OPENAI_API_KEY). One
    line for people, or None; a file that cannot be read is a line too: the conversation's results are kept. A
    conversation in which the model made no valid tool call teaches nothing (its replies are not the agent's)."""
    if not made_tool_call(trajectory):
        return f"memory profile: not learned (this {noun} made no valid tool call, so it shows no agent at work)"
    if server is not None:
        with waiting("the server learns this agent's memory profile… (Ctrl-C stops waiting)"):
            return learn_served(server, trajectory, statement, noun, *served)
    if session is None or session.has_profile:
        return None
    model, tokenizer = session.model, session.tokenizer
    try:
        with waiting("learning this agent's memory profile…" + (" (Ctrl-C skips it)" if skippable else "")):
            return learn_from_run(session.config.model, model, tokenizer, trajectory, say, key, noun, statement)
    except KeyboardInterrupt as exc:
        if not skippable or isinstance(exc, Terminated):
            raise
        return "memory profile: learning skipped (Ctrl-C); run again with --learn-profile to learn one"
    except OSError as e:  # the conversation's results are written already; learning is a bonus
        kept = "the session is kept" if noun == "chat" else "its results are kept"
        return f"memory profile: could not learn from this {noun} ({e.strerror or e}); {kept}"


def learn_from_run(
    model_name: str, model, tokenizer, trajectory: Path, say: Callable[[str], None], key: str | None = None,
    noun: str = "run", statement: str | None = None,
) -> str | None:  # fmt: skip
    """Calibrate a profile of `model_name` into the store from the conversation of `trajectory`, whose opening holds
    the task's `statement`; without one there, keep the conversation in the pool and, when the pool holds another of
    the same agent (system prompt), calibrate the profile from the two. `key`: the pooled copy's name, which replaces
    an earlier copy of that name (a chat session pooled again); default: the conversation's own name, always a new
    copy. `noun` names the conversation for people ("run", "chat"). One line for people: what happened (None: no
    conversation to learn from)."""
    from filelock import FileLock

    from kvstore.errors import KVStoreError
    from kvstore.profiles.calibrate import statement_variants
    from pipeline.conversations import load_conversation

    try:
        this = load_conversation(trajectory)
    except (KVStoreError, OSError):
        return None
    if _system(this.messages) is None or not any(m["role"] == "assistant" for m in this.messages):
        return None
    covered = _stored_profile(model, tokenizer, this.messages)
    if covered:
        return f"memory profile: the store has one for this agent now ({covered}); --memory-profile auto uses it"
    variants = statement_variants(this.messages, statement)
    if variants:
        say(f"learning a memory profile for this agent from this {noun}'s conversation (--learn-profile)")
        try:
            return _learn_into_store(model_name, model, tokenizer, [this], say, variants)
        except KVStoreError as e:
            return f"memory profile: could not learn one from this {noun} ({e})"
    pool = profile_store() / POOL / _safe(model_name)
    pool.mkdir(parents=True, exist_ok=True)
    name = _safe(key or this.name)
    with FileLock(str(pool / ".lock")):  # runs finishing at once: one calibrates, the other finds the profile
        if key:
            for earlier in pool.glob(f"*--{name}.jsonl"):
                earlier.unlink(missing_ok=True)
        kept = pool / f"{time.time_ns():020d}--{name}.jsonl"  # sorts by age
        shutil.copyfile(trajectory, kept)
        files = sorted(pool.glob("*.jsonl"), reverse=True)  # newest first
        for old in files[KEEP:]:
            old.unlink(missing_ok=True)
        same = [(f, c) for f in files[:KEEP] if (c := this if f == kept else _same_agent(f, this.messages))]
        if len(same) < 2:
            return (
                f"memory profile: none for this agent and model yet; this {noun}'s conversation is kept, and the next "
                f"--learn-profile solve run or chat of this agent learns one from the two"
            )
        pair = [replace(c, name=f.stem.partition("--")[2]) for f, c in same[:2]]  # the run's name, not the pool's
        say(f"learning a memory profile for this agent from {len(pair)} conversations (--learn-profile)")
        try:
            said = _learn_into_store(model_name, model, tokenizer, pair, say)
        except KVStoreError as e:
            return f"memory profile: could not learn one from the last two conversations ({e}); they are kept"
        for f, _ in same[:2]:
            f.unlink(missing_ok=True)
    return said


def learn_served(
    server: str,
    trajectory: Path,
    statement: str | None,
    noun: str = "run",
    model: str | None = None,
    api_key: str | None = None,
) -> str | None:
    """A `solve` run or chat against a `nexus-agent serve` teaches the server a memory profile: when the server runs
    the default memory and reads a profile directory, and the session found no profile there, the conversation of
    `trajectory` and its task's `statement` go to the server's POST /v1/nexus/profiles, which calibrates on its own
    model (unless a profile for this opening arrived meanwhile) and saves the profile where its sessions read them.
    One line for people, or None when there is nothing to learn. Ctrl-C while the server calibrates stops waiting
    (the server may still save the profile)."""
    from kvstore.defaults import DEFAULT_POLICY
    from kvstore.errors import KVStoreError
    from kvstore.profiles.calibrate import statement_variants
    from pipeline.backends import post_profiles, server_settings
    from pipeline.conversations import load_conversation
    from pipeline.errors import RunError

    try:
        settings = server_settings(server, model, api_key)
        this = load_conversation(trajectory)
    except (RunError, KVStoreError, OSError):
        return None
    if "policy" not in settings:  # vLLM, SGLang, ...: POST /v1/nexus/profiles is nexus-agent serve's alone
        return f"memory profile: not learned ({server} is not a nexus-agent serve, which alone learns one)"
    if settings.get("policy") != DEFAULT_POLICY or not settings.get("profile_directory"):
        return None
    if _served_match(trajectory) or not any(m["role"] == "assistant" for m in this.messages):
        return None
    if not statement_variants(this.messages, statement):
        return f"memory profile: not learned on the server (this {noun}'s opening does not hold its task's text)"
    body = {"conversations": [this.messages], "statement": statement, "sources": [this.name], "if_missing": True}
    try:
        answer = post_profiles(server, body, api_key)
    except RunError as e:
        return f"memory profile: could not learn one on the server ({e}); this {noun}'s results are kept"
    except Terminated:
        raise
    except KeyboardInterrupt:
        return "memory profile: stopped waiting for the server (Ctrl-C); it may still save the profile"
    if answer.get("kept"):
        return f"memory profile: the server has one for this agent now ({answer['name']}); its later sessions use it"
    return (
        f"memory profile: the server learned {answer['summary']} -> {answer['name']}; its later sessions of this "
        "agent use it"
    )


def made_tool_call(trajectory: Path) -> bool:
    """Whether a step of the recorded conversation at `trajectory` holds a tool call the parser accepted."""
    import json

    try:
        lines = trajectory.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return False
    for line in lines:
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict) and record.get("type") == "step" and record.get("call"):
            return True
    return False


def _served_match(trajectory: Path) -> bool:
    """Whether a step of this served run says its session matched a memory profile."""
    import json

    for line in trajectory.read_text(errors="replace").splitlines():
        try:
            stats = json.loads(line).get("stats") or {}
        except (ValueError, AttributeError, RecursionError):
            continue
        if str(stats.get("memory_profile") or "").startswith("matched"):
            return True
    return False


def _learn_into_store(model_name: str, model, tokenizer, conversations, say, variants=()) -> str:
    """Calibrate a profile from `conversations` (and `variants`, kvstore.profiles.calibrate) with the model and save
    it into
    the store; one line for people (KVStoreError when the conversations cannot make one)."""
    from kvstore.profiles.profile import store_name
    from pipeline.conversations import calibrate_recorded

    meta = {"model": model_name, "learned": [c.name for c in conversations]}
    profile = calibrate_recorded(model, tokenizer, conversations, say, meta=meta, variants=variants)
    dest = profile_store() / store_name(profile)
    profile.save(dest)
    return (
        f"memory profile: learned {profile.summary} -> {dest}; later sessions of this agent use it with "
        "--memory-profile auto"
    )


def pool_counts(store: Path) -> dict[str, int]:
    """{model: conversations kept} of the store's pool, models with none left out."""
    counts = {d.name: len(list(d.glob("*.jsonl"))) for d in sorted((store / POOL).glob("*")) if d.is_dir()}
    return {model: n for model, n in counts.items() if n}


def _same_agent(path: Path, messages: list[dict[str, str]]):
    """The pooled conversation at `path` when it has the system prompt of `messages`, else None."""
    from kvstore.errors import KVStoreError
    from pipeline.conversations import load_conversation

    try:
        found = load_conversation(path)
    except (KVStoreError, OSError, ValueError):
        path.unlink(missing_ok=True)  # a damaged copy teaches nothing
        return None
    return found if _system(found.messages) == _system(messages) else None


def _stored_profile(model, tokenizer, messages: list[dict[str, str]]) -> str | None:
    """The store's profile that this conversation's opening carries, as "matched N of M template tokens (file)";
    None when there is none (or the store cannot be read: learning then goes on, and calibrate replaces a file)."""
    from kvstore.cache.evicting import model_identity
    from kvstore.errors import KVStoreError
    from kvstore.profiles.calibrate import opening
    from kvstore.profiles.profile import best_match, load_profiles
    from kvstore.session.render import ChatRenderer

    store, first = profile_store(), opening(messages)
    if first is None or not store.is_dir():
        return None
    try:
        profiles = load_profiles(store, model_identity(model))
    except (KVStoreError, OSError):
        return None
    prior, status = best_match(profiles, ChatRenderer(tokenizer).encode_messages(first, first=True))
    return status if prior is not None else None


def _system(messages: list[dict[str, str]]) -> str | None:
    return next((m["content"] for m in messages if m["role"] == "system"), None)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:80] or "model"
