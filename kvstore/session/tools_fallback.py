"""The fallback tool template: tools, tool calls and tool results for a model whose chat template has no tool
support (it ignores `tools`, e.g. the offline default SmolLM2's plain ChatML).

Such a conversation is rewritten, before the model's own template renders it, into messages that template knows,
following the Hermes/Qwen convention the server's call parser reads (server.tools):

- the tools become a section of the system message (one is added when the conversation has none): the tools as
  JSON, one per line, inside `<tools></tools>`, and how to call one;
- an assistant message's `tool_calls` become `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` after
  its content;
- a tool message becomes a user message `<tool_response>\\n...\\n</tool_response>`.

Qwen2.5's template writes the same text with its own markup, so a model trained on either convention reads it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

TOOLS_INTRO = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
TOOLS_OUTRO = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)


@lru_cache(maxsize=8)
def renders_tools(tokenizer) -> bool:
    """Whether the tokenizer's chat template renders `tools` (a probe tool's name shows up in its text)."""
    probe = [{"type": "function", "function": {"name": "nexus_probe", "parameters": {"type": "object"}}}]
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tools=probe, tokenize=False)
    except Exception:  # noqa: BLE001 - a template that fails on tools has no tool support
        return False
    return "nexus_probe" in text


def rewrite(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` (tools on the first one, key "tools") as plain system/user/assistant messages (module doc)."""
    out = [_rewrite_one(m) for m in messages]
    tools = messages[0].get("tools") if messages else None
    if tools:
        section = TOOLS_INTRO + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools) + TOOLS_OUTRO
        if out[0]["role"] == "system":
            out[0] = out[0] | {"content": f"{out[0]['content']}\n\n{section}" if out[0]["content"] else section}
        else:
            out.insert(0, {"role": "system", "content": section})
    return out


def _rewrite_one(message: dict[str, Any]) -> dict[str, Any]:
    role, content = message["role"], message.get("content") or ""
    if role == "tool":
        return {"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"}
    calls = [_call_text(c) for c in message.get("tool_calls") or []]
    if role == "assistant" and calls:
        return {"role": "assistant", "content": "\n".join(([content] if content else []) + calls)}
    return {"role": role, "content": content}


def _call_text(call: dict[str, Any]) -> str:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (json.JSONDecodeError, RecursionError):
            pass  # kept as the string it is
    body = json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"
