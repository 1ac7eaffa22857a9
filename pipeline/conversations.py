"""Recorded agent conversations as plain chat messages in this project's format: mini-swe-agent `.traj.json` files
and this project's trajectory JSONL (solve / eval / chat runs). `nexus-agent calibrate`, `eval --warmup` and
`bench replay` read them.

A mini-swe-agent trace (OpenAI tool calls, `bash` tool) becomes the conversation this project's agent would have
had: this project's system prompt (its tools and call format), the recorded task message, each assistant message
with its tool calls written in the `<function=...>` call format, and each tool result as the next user message
(the observation, as agent.loop sends it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agent.errors import AgentError
from agent.prompts import system_prompt
from agent.trajectory import load_trajectory
from kvstore.errors import KVStoreError
from kvstore.profiles.calibrate import calibrate, statement_variants
from pipeline.files import TRAJECTORY  # the file every solve / eval run folder holds


@dataclass
class Conversation:
    """One recorded conversation."""

    name: str  # the file's stem (instance id)
    messages: list[dict[str, Any]]  # role + content, roles system/user/assistant (tool, and the tools and calls of
    # native tool calls, in a run of --call-format tools)


def conversation_files(paths: list[Path]) -> list[Path]:
    """Each path as conversation files: a file stays itself; a folder gives every conversation under it, sorted:
    mini-swe-agent `*.traj.json` files and the `trajectory.jsonl` of each solve / eval / chat run folder (an eval's
    --out, a folder of runs, the chat sessions folder). Links are not followed. A folder without any is an error."""
    files: list[Path] = []
    for path in paths:
        if not path.is_dir():
            files.append(path)
            continue
        found = sorted(
            Path(root) / name
            for root, _dirs, names in os.walk(path)  # does not descend into linked folders
            for name in names
            if (name == TRAJECTORY or name.endswith(".traj.json")) and not os.path.islink(os.path.join(root, name))
        )
        if not found:
            raise KVStoreError(f"{path}: no conversations in this folder (no *.traj.json or {TRAJECTORY} under it)")
        files += found
    return files


def conversation_name(path: Path) -> str:
    """The name a conversation file goes by: its instance id (for a solve / eval run's trajectory, the run folder)."""
    if path.suffix == ".jsonl":
        return path.parent.resolve().name if path.name == TRAJECTORY else path.stem
    return path.name.removesuffix(".traj.json")


def load_conversation(path: Path) -> Conversation:
    """A `.traj.json` (mini-swe-agent) or `.jsonl` (this project's trajectory) file as a conversation; a file that is
    not one is a KVStoreError naming it."""
    if not path.is_file():
        raise KVStoreError(f"no conversation file at {path}")
    if path.suffix == ".jsonl":
        try:
            trajectory = load_trajectory(path)
        except AgentError as e:  # a bad line or record: the file is not a trajectory
            raise KVStoreError(str(e)) from None
        if not (trajectory.header or trajectory.steps):  # empty, or one line that is not JSON (read as a
            # trajectory cut off mid-line); a run stopped before its first reply has its header: an empty conversation
            raise KVStoreError(f"{path}: holds no conversation (no header or step record of a trajectory)")
        messages = [_plain(m) for m in trajectory.messages()]
        return Conversation(conversation_name(path), [m for m in messages if m])
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, RecursionError) as e:
        raise KVStoreError(f"{path}: not JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise KVStoreError(f"{path}: not UTF-8 text (byte {e.start}); a trajectory is JSON in UTF-8") from None
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise KVStoreError(f"{path}: not a mini-swe-agent trajectory (no 'messages' list)")
    try:
        return Conversation(conversation_name(path), mini_swe_messages(data["messages"]))
    except ValueError as e:  # a message of another shape
        raise KVStoreError(f"{path}: {e}") from None


# Tags that mark the task's statement in a first user message: a mini-swe-agent trace's, this project's solve prompt
# (agent.prompts) and a chat's first request (pipeline.chat).
STATEMENT_MARKS = ("pr_description", "github_issue", "request")


def task_statement(conversation: Conversation) -> str | None:
    """The task's statement inside a recorded conversation's first user message, where its recorder marks it (one
    of STATEMENT_MARKS; None when there is no such mark)."""
    first = next((m["content"] for m in conversation.messages if m["role"] == "user"), "")
    for tag in STATEMENT_MARKS:
        start, end = first.find(f"<{tag}>"), first.find(f"</{tag}>")
        if 0 <= start < end:
            return first[start + len(tag) + 2 : end].strip() or None
    return None


def marked_variants(conversation: Conversation) -> list[list[dict]]:
    """The conversation's opening with its marked task statement replaced
    (kvstore.profiles.calibrate.statement_variants):
    what calibrating this one conversation alone needs; [] when its statement is not marked."""

    return statement_variants(conversation.messages, task_statement(conversation))


def unmarked(name: str) -> str:
    marks = ", ".join(f"<{t}>" for t in STATEMENT_MARKS)
    return f"the task statement of {name} is not marked in its first user message (by {marks})"


def calibrate_recorded(
    model,
    tokenizer,
    conversations: list[Conversation],
    say: Callable[[str], None],
    max_tokens: int | None = None,
    meta: dict | None = None,
    variants: list[list[dict]] = (),
):
    """kvstore.profiles.calibrate over recorded conversations, saying of each whether it was calibrated or left out (no
    opening and reply inside the replayed tokens); the profile's meta names them as its sources. `variants`: as
    kvstore.profiles.calibrate takes them (openings that mark the task's text, for a single conversation)."""

    def progress(done: int, total: int, used: bool) -> None:
        name = conversations[done - 1].name
        if used:
            say(f"calibrated {done}/{total}: {name}")
        else:
            say(f"left out {done}/{total}: {name} (no opening and reply inside the replayed tokens)")

    meta = (meta or {}) | {"sources": [c.name for c in conversations]}
    with torch.inference_mode():
        return calibrate(
            model, tokenizer, [c.messages for c in conversations], max_tokens, progress, meta, variants=variants
        )


def mini_swe_messages(raw: list) -> list[dict[str, str]]:
    """mini-swe-agent messages in this project's format (see the module docstring); ValueError for a message that
    is not an object with a text (or text parts) content."""

    out = [{"role": "system", "content": system_prompt()}]
    for n, m in enumerate(raw):
        if not isinstance(m, dict):
            raise ValueError(f"message {n} is not an object")
        role, content = m.get("role"), _text(m.get("content"), n)
        if role in ("user", "tool"):
            out.append({"role": "user", "content": content})
        elif role == "assistant":
            calls = m.get("tool_calls") or []
            if not isinstance(calls, list):
                raise ValueError(f"message {n}: 'tool_calls' is not a list")
            rendered = "".join(render_call(c) for c in calls if isinstance(c, dict))
            out.append({"role": "assistant", "content": (content.strip() + rendered).strip()})
    return out


def render_call(call: dict) -> str:
    """One OpenAI tool call in the `<function=NAME>` format; mini-swe-agent's `bash` is execute_bash(cmd). The
    arguments are a JSON object (as OpenAI sends them) or an object; anything else becomes the command."""
    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
    raw = fn.get("arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) and raw else raw
    except (json.JSONDecodeError, RecursionError):
        args = None
    if not isinstance(args, dict):
        args = {} if raw in (None, "") else {"cmd": raw if isinstance(raw, str) else json.dumps(raw)}
    name = str(fn.get("name") or "")
    if name == "bash":
        args = {"cmd": args.get("command", args.get("cmd", ""))}
    params = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in args.items())
    return f"\n\n<function={'execute_bash' if name == 'bash' else name}>\n{params}</function>"


def _text(content, n: int) -> str:
    """A message's content as text: a string, or OpenAI's list of parts (their text joined); None is empty."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") if isinstance(p, dict) else str(p) for p in content)
    raise ValueError(f"message {n}: 'content' is neither text nor a list of parts")


def _plain(message: dict) -> dict[str, Any] | None:
    """A recorded message as the session rendered it: role and text, plus what native tool calls (agent.calls_tools)
    add, so that a calibration replays the same tokens: the tools on the first message, an assistant's calls, a tool
    result's call id."""
    role = message.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        return None
    plain = {"role": role, "content": str(message.get("content") or "")}
    return plain | {k: message[k] for k in ("tools", "tool_calls", "tool_call_id") if message.get(k)}
