"""Append-only, token-exact rendering of a conversation for a persistent KV cache.

A persistent cache holds the tokens of every earlier turn, so a turn must never be rendered twice. The chat
template is applied to each batch of *new* messages only: render `context + new` and keep the text after the
render of `context`, where `context` is a short placeholder conversation (a system and a user message) that puts
the new messages in the position they have in the real conversation. The generation prompt and the end of an
assistant turn are found the same way. The model's raw reply tokens are kept as generated.

Where this differs from re-rendering the whole conversation with the template:

- Qwen3's template drops the `<think>` block of assistant turns that come before the last user query (it keeps
  it after the last query, e.g. in tool-only steps). We deliberately keep every `<think>` block: the cache holds
  the reasoning the model produced, and re-prefill renders the same tokens, so both protocols see one sequence
  (DeepSWE / rLLM training kept the raw response verbatim too).
- Templates that merge consecutive tool messages into one turn (Qwen3) merge them only within one `append`;
  across appends each batch is a closed turn, because the tokens of the earlier one are already in the cache.

Content is text (kvstore.session.control): a special token's text inside a message, a tool call or a tool spec is
spelled out as plain tokens; only the template's own text becomes control tokens. A template without tool support
renders tools, tool calls and tool results through the fallback tool template (kvstore.session.tools_fallback) when
asked (`tool_fallback`: the server's sessions).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstore.errors import KVStoreError
from kvstore.session.control import ControlText
from kvstore.session.tools_fallback import renders_tools, rewrite

ROLES = ("system", "user", "assistant", "tool")
_X = "x"  # placeholder content of context messages
_SENTINEL = "\u2063NEXUS-SENTINEL\u2063"  # assistant content whose surroundings give the end-of-turn text
# placeholder conversations tried, in order, as the context new messages are rendered after
_CONTEXTS = (("system", "user"), ("system", "user", "assistant"), ("user",), ("user", "assistant"))


class ChatRenderer:
    """Turns chat messages into token ids, one batch at a time, never re-rendering earlier ones.

    Parameters
    ----------
    tokenizer : a Hugging Face tokenizer with a chat template.
    template_kwargs : extra variables for the template (e.g. ``enable_thinking=False``, ``tools=[...]``).
    tool_fallback : render tools, tool calls and tool results through the fallback tool template where the model's
        template has no tool support (the server's sessions: SessionConfig.tool_fallback); False keeps the
        template's own text.
    """

    def __init__(self, tokenizer, template_kwargs: dict | None = None, tool_fallback: bool = False):
        if not getattr(tokenizer, "chat_template", None):
            raise KVStoreError("the tokenizer has no chat template; use an instruct/chat model")
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.control = ControlText(tokenizer)
        # who renders tools and their turns: the model's template, the fallback tool template, or none (the template's
        # own text as it is, tools left out: what runs and replays measure on)
        self.tool_template = "model" if renders_tools(tokenizer) else "fallback" if tool_fallback else "none"
        self._prompt_text = self._generation_prompt_text()
        self._end_text = self._end_of_turn_text()
        self.generation_prompt_ids = self.encode(self._prompt_text)
        self.end_of_turn_ids = self.encode(self._end_text)

    def render(self, messages: Sequence[dict], add_generation_prompt: bool = False) -> str:
        """The template's text for a whole conversation (what a stateless client would send). A conversation's
        tools (OpenAI function specs) travel on its first message, key "tools": the template renders them."""
        return self.control.unmask(self._render(messages, add_generation_prompt))

    def _render(self, messages: Sequence[dict], add_generation_prompt: bool = False) -> str:
        """`render` with the special-token texts of the conversation's strings marked (what `encode` takes)."""
        masked = self.control.mask(list(messages))
        if self.tool_template == "fallback" and any(_uses_tools(m) for m in masked):
            masked = rewrite(masked)
        kwargs = self.template_kwargs
        if masked and masked[0].get("tools"):
            kwargs = kwargs | {"tools": masked[0]["tools"]}
        return self.tokenizer.apply_chat_template(
            masked, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text: special-token strings of the template become their single ids, those marked
        as a conversation's (`_render`) are spelled out."""
        ids: list[int] = []
        for content, piece in self.control.pieces(text):
            ids += self.encode_text(piece) if content else self.tokenizer(piece, add_special_tokens=False)["input_ids"]
        return ids

    def encode_text(self, text: str) -> list[int]:
        """Token ids of a conversation's text (a message's content): plain text, never a control token."""
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def messages_text(self, messages: Sequence[dict], first: bool) -> str:
        """The text `messages` add to a conversation (`first`: nothing was rendered before).

        Plain assistant messages (role and content only) become generation prompt + content + end of turn, exactly
        what a generated reply with that text adds; runs of other messages go through the template.
        """
        parts: list[str] = []
        for raw, run in _runs([check_message(m) for m in messages]):
            parts.append(self._raw_reply_text(run[0]["content"]) if raw else self._template_text(run, first))
            first = False
        return self.control.unmask("".join(parts))

    def _raw_reply_text(self, content: str) -> str:
        return self._prompt_text + content + self._end_text

    def _template_text(self, messages: list[dict], first: bool) -> str:
        if first:
            return self._render(messages)
        for roles in _CONTEXTS:
            context = [{"role": r, "content": _X} for r in roles]
            try:
                head, full = self._render(context), self._render(context + messages)
            except Exception:  # noqa: BLE001 - a template that rejects this role order: try the next context
                continue
            if full.startswith(head):
                return full[len(head) :]
        roles = [m["role"] for m in messages]
        raise KVStoreError(f"the chat template cannot render messages with roles {roles} after earlier turns")

    def encode_messages(self, messages: Sequence[dict], first: bool) -> list[int]:
        """Token ids of `messages` appended to a conversation (`first`: nothing was rendered before).

        A plain assistant reply is encoded as a generated one would be: prompt ids + content ids + closing ids.
        """
        return self.encode_with_replies(messages, first)[0]

    def encode_with_replies(self, messages: Sequence[dict], first: bool) -> tuple[list[int], list[tuple[int, int]]]:
        """`encode_messages`, plus the [start, end) offsets in those ids of each plain assistant reply's generation
        prompt and content (the tokens a generated reply runs through the model as its own queries)."""
        ids: list[int] = []
        replies: list[tuple[int, int]] = []
        for raw, run in _runs([check_message(m) for m in messages]):
            if raw:
                content = self.encode_text(run[0]["content"])
                replies.append((len(ids), len(ids) + len(self.generation_prompt_ids) + len(content)))
                ids += self.generation_prompt_ids + content + self.end_of_reply(content)
            else:
                ids += self.encode(self._template_text(run, first))
            first = False
        return ids, replies

    def end_of_reply(self, reply_ids: Sequence[int]) -> list[int]:
        """The tokens that close a raw reply as the template closes an assistant turn.

        When the reply already ends with (a prefix of) that text, e.g. its EOS `<|im_end|>`, only the rest is added.
        """
        if reply_ids:
            last = self.decode(reply_ids[-1:])
            if last and self._end_text.startswith(last):
                return self.encode(self._end_text[len(last) :])
        return list(self.end_of_turn_ids)

    def _generation_prompt_text(self) -> str:
        context = [{"role": "system", "content": _X}, {"role": "user", "content": _X}]
        head, full = self.render(context), self.render(context, add_generation_prompt=True)
        if not full.startswith(head) or full == head:
            raise KVStoreError("the chat template has no generation prompt (add_generation_prompt changes nothing)")
        return full[len(head) :]

    def _end_of_turn_text(self) -> str:
        context = [{"role": "system", "content": _X}, {"role": "user", "content": _X}]
        full = self.render(context + [{"role": "assistant", "content": _SENTINEL}])
        if _SENTINEL not in full:
            raise KVStoreError("the chat template does not render assistant content verbatim")
        return full.rsplit(_SENTINEL, 1)[1]


def _runs(messages: list[dict]) -> list[tuple[bool, list[dict]]]:
    """Split messages into (is a plain assistant reply, messages) runs; each plain reply is a run of its own."""
    runs: list[tuple[bool, list[dict]]] = []
    for m in messages:
        raw = m["role"] == "assistant" and set(m) == {"role", "content"}
        if raw or not runs or runs[-1][0]:
            runs.append((raw, [m]))
        else:
            runs[-1][1].append(m)
    return runs


def _uses_tools(message: dict) -> bool:
    return bool(message.get("tools") or message.get("tool_calls")) or message.get("role") == "tool"


def check_message(message: dict) -> dict:
    """A message must be a dict with a known role and string content."""
    if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(message.get("content"), str):
        raise KVStoreError(f"bad message {message!r}: need {{'role': one of {ROLES}, 'content': str}}")
    return message
