"""Recorded conversations as the replayed model would see them: what `bench replay` replays.

A mini-swe-agent `.traj.json` (OpenAI messages: native `tool_calls`, `tool` results, a reasoning model's thinking in
`reasoning_content`) is rendered through the model's chat template:

- `--system recorded` (the default): the recorded system message, with the tool definition mini-swe-agent sent (its
  `bash` tool) in the template's `tools`; each reply's reasoning, text and tool calls as the template renders the
  latest reply; each tool result as a `tool` message.
- `--system project`: this project's system prompt (its tools and call format), each tool call in the agent's
  `<function=...>` format and each tool result as the next user message (the observation, as agent.loop sends it);
  the reasoning as above.
- `--system agent`: as `project`, and the first user message is the built-in agent's instance prompt around the
  recorded task statement (`<pr_description>`): the opening `solve` would have had, whose fixed text the shipped
  memory profiles are calibrated on (pipeline.profiles.builtin).

A reply becomes one plain assistant message holding that text, so a Session keeps every reply's thinking as chat and
solve keep a generated reply's (kvstore.session.render): the reasoning tokens are in the cache and are scored. Where
the template renders no reasoning (SmolLM2's has no thinking), it is written as DeepSWE's template (Qwen3's) writes
it, `<think>\\n...\\n</think>\\n\\n`; where it renders no tool calls, each is written as Qwen3's `<tool_call>` JSON.
Both are warnings, as is anything in a trace that is left out. mini-swe-agent's closing `exit` record (how the run
ended) is not a message the model saw and is left out silently. This project's trajectory JSONL is read as
pipeline.conversations reads it (its messages are already the agent's own).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kvstore.errors import KVStoreError
from kvstore.session.render import ChatRenderer
from pipeline.conversations import Conversation, conversation_name, load_conversation, render_call

SYSTEMS = ("recorded", "project", "agent")  # --system: the recorded system message, this project's, its agent's
# the tool mini-swe-agent (v2, tool-call models) sends with every request (minisweagent.models.utils.actions_toolcall)
MINI_SWE_BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Execute a bash command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command to execute"}},
            "required": ["command"],
        },
    },
}
THINK = "<think>\n{}\n</think>\n\n"  # reasoning as DeepSWE's (Qwen3's) template writes it, for templates without
TOOL_CALL = '<tool_call>\n{{"name": "{}", "arguments": {}}}\n</tool_call>'  # Qwen3's (Hermes) call, likewise
SILENT_ROLES = ("exit",)  # mini-swe-agent's record of how the run ended: not a message the model saw
_SENTINEL = "\u2063NEXUS-TOOL\u2063"  # content of the tool message that closes a probed reply
_CONTEXT = [{"role": "system", "content": "x"}, {"role": "user", "content": "x"}]


@dataclass
class Replayed:
    """One recorded conversation, rendered for the replay."""

    conversation: Conversation  # plain messages (role + content): replies hold their rendered text
    renderer: ChatRenderer  # the template with the trace's tools: the replay's sessions render with it
    warnings: list[str] = field(default_factory=list)  # what could not be rendered as recorded (and what was done)
    reasoning_chars: int = 0  # characters of recorded reasoning, all kept


def check_system(system: str) -> str:
    if system not in SYSTEMS:
        raise KVStoreError(f"--system {system!r}: give {' or '.join(SYSTEMS)}")
    return system


def load_replayed(path: Path, tokenizer, system: str = "recorded") -> Replayed:
    """The conversation in `path` rendered for `tokenizer`'s template (module docstring); a KVStoreError naming the
    file for one that is not a conversation."""
    check_system(system)
    if path.suffix == ".jsonl":
        return Replayed(load_conversation(path), ChatRenderer(tokenizer))
    raw = _raw_messages(path)
    calls = any(isinstance(m, dict) and m.get("tool_calls") for m in raw)
    tools = [MINI_SWE_BASH] if system == "recorded" and calls else []
    renderer = ChatRenderer(tokenizer, {"tools": tools} if tools else None)
    writer = _Writer(renderer, "project" if system == "agent" else system)
    if tools and renderer.render(_CONTEXT) == ChatRenderer(tokenizer).render(_CONTEXT):
        writer.warn("the chat template does not render tool definitions: the bash tool's is left out")
    messages = writer.messages(raw)
    if system == "agent":
        messages = _agent_opening(conversation_name(path), messages, writer)
    warnings = [f"{text} ({n} times)" if n > 1 else text for text, n in writer.warnings.items()]
    return Replayed(Conversation(conversation_name(path), messages), renderer, warnings, writer.reasoning_chars)


def _agent_opening(name: str, messages: list[dict], writer: _Writer) -> list[dict]:
    """`--system agent`: the first user message as the built-in agent's instance prompt around the recorded task
    statement (left as recorded, with a warning, when the trace marks none)."""
    from pipeline.conversations import task_statement
    from pipeline.profiles.builtin import agent_opening

    statement = task_statement(Conversation(name, messages))
    if statement is None:
        writer.warn("no <pr_description> in the task message: the recorded task message is kept")
        return messages
    return agent_opening(messages, statement)


def _raw_messages(path: Path) -> list:
    if not path.is_file():
        raise KVStoreError(f"no conversation file at {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise KVStoreError(f"{path}: not a JSON trajectory in UTF-8 ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise KVStoreError(f"{path}: not a mini-swe-agent trajectory (no 'messages' list)")
    return data["messages"]


class _Writer:
    """Turns one trace's messages into plain ones, counting what it could not render as recorded."""

    def __init__(self, renderer: ChatRenderer, system: str):
        self.renderer, self.system = renderer, system
        self.end_text = renderer.decode(renderer.end_of_turn_ids)
        self.warnings: Counter[str] = Counter()
        self.reasoning_chars = 0

    def warn(self, text: str) -> None:
        self.warnings[text] += 1

    def messages(self, raw: list) -> list[dict[str, str]]:
        from agent.prompts import system_prompt

        out = [{"role": "system", "content": system_prompt()}] if self.system == "project" else []
        for n, m in enumerate(raw):
            role = m.get("role") if isinstance(m, dict) else None
            if role in SILENT_ROLES:
                continue
            if role not in ("system", "user", "tool", "assistant"):
                self.warn(f"message {n} is not a chat message (role {role!r}): left out")
                continue
            content = self.text(m.get("content"), n)
            if role == "system":
                if self.system == "recorded":
                    out.append({"role": "system", "content": content})
            elif role == "user" or (role == "tool" and self.system == "project"):
                out.append({"role": "user", "content": content})
            elif role == "tool":
                out.append({"role": "tool", "content": content})
            else:
                out.append({"role": "assistant", "content": self.reply(m, content, n)})
        return out

    def text(self, content, n: int) -> str:
        """A message's content as text: a string, or OpenAI's list of parts (their text joined)."""
        if content is None or isinstance(content, str):
            return content or ""
        if isinstance(content, list):
            return "".join(str(p.get("text") or "") if isinstance(p, dict) else str(p) for p in content)
        self.warn(f"message {n}: content that is neither text nor parts: left out")
        return ""

    def reply(self, m: dict, content: str, n: int) -> str:
        """The text of one recorded reply, as the template renders it as the latest reply (what is left out of the
        template's text is written as the module docstring says, with a warning)."""
        reasoning = m.get("reasoning_content") if isinstance(m.get("reasoning_content"), str) else ""
        self.reasoning_chars += len(reasoning)
        calls = self.calls(m.get("tool_calls"), n)
        if self.system == "project":
            content, calls = (content.strip() + "".join(render_call(c) for c in calls)).strip(), []
        message, written = {"role": "assistant", "content": content}, ""
        if calls and self.renders(message, {"tool_calls": calls}):
            message["tool_calls"] = calls
        elif calls:
            self.warn("the chat template renders no tool calls: written as Qwen3's <tool_call> JSON")
            written = "".join(_tool_call(c, i, bool(content)) for i, c in enumerate(calls))
        if reasoning.strip() and self.renders(message, {"reasoning_content": reasoning}):
            message["reasoning_content"] = reasoning
        elif reasoning.strip():
            self.warn("the chat template renders no reasoning: written as DeepSWE's (Qwen3) <think> block")
            return THINK.format(reasoning.strip("\n")) + (self.probe(message) or content) + written
        body = self.probe(message)
        return (content if body is None else body) + written

    def renders(self, message: dict, extra: dict) -> bool:
        """Whether the template's text for `message` changes with the fields `extra` (it renders them)."""
        with_extra = self.probe(message | extra)
        return with_extra is not None and with_extra != self.probe(message)

    def calls(self, calls, n: int) -> list[dict]:
        """The recorded tool calls as the template takes them ({"type", "function": {"name", "arguments"}})."""
        if not calls:
            return []
        if not isinstance(calls, list):
            self.warn(f"message {n}: 'tool_calls' is not a list: left out")
            return []
        out = []
        for c in calls:
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict) or not fn.get("name"):
                self.warn(f"message {n}: a tool call without a function name: left out")
                continue
            out.append({"type": "function", "function": {"name": fn["name"], "arguments": fn.get("arguments") or {}}})
        return out

    def probe(self, message: dict) -> str | None:
        """What the template writes for assistant `message` between the generation prompt and the end of its turn,
        placed as the latest reply (after the last user query, followed by a tool result); None when it cannot."""
        try:
            head = self.renderer.render(_CONTEXT, add_generation_prompt=True)
            full = self.renderer.render([*_CONTEXT, message, {"role": "tool", "content": _SENTINEL}])
        except Exception:  # noqa: BLE001 - a template that rejects the message: the caller writes it itself
            return None
        if not full.startswith(head) or _SENTINEL not in full:
            return None
        rest = full[len(head) : full.index(_SENTINEL)]
        end = rest.rfind(self.end_text) if self.end_text else -1
        return rest[:end] if end >= 0 else None


def _tool_call(call: dict, i: int, content: bool) -> str:
    fn = call["function"]
    args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"], ensure_ascii=False)
    return ("\n" if content or i else "") + TOOL_CALL.format(fn["name"], args)
