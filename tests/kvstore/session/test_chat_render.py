"""Append-only, token-exact rendering with the real Qwen3 template and the default model's (SmolLM2) template."""

from __future__ import annotations

import re

import pytest
from sessionlib import qwen_tokenizer

from kvstore.errors import KVStoreError
from kvstore.session.render import ChatRenderer

THINK = re.compile(r"<think>.*?</think>\n\n", re.S)
SYSTEM = {"role": "system", "content": "You are a coding agent. Call one function per turn."}
TASK = {"role": "user", "content": "Fix the bug in calc.add: it subtracts.\nThe tests are in test_calc.py."}
REPLIES = [
    "<think>\nI should look at calc.py first.\n</think>\n\n<function=file_editor>\n<parameter=command>view</parameter>"
    "\n</function>",
    "<think>\nThe bug is on line 2: a - b.\nReplace it.\n</think>\n\nI will edit it.\n<function=execute_bash>\n"
    "<parameter=cmd>sed -i 's/a - b/a + b/' calc.py</parameter>\n</function>",
]
OBSERVATIONS = ["def add(a, b):\n    return a - b\n", "[exit code 0]\n"]


class History:
    """Builds a token history the way a session does: rendered messages, raw reply tokens, closing tokens."""

    def __init__(self, renderer: ChatRenderer):
        self.r, self.ids, self.pieces, self.messages = renderer, [], [], []

    def add(self, messages: list[dict]) -> None:
        piece = self.r.encode_messages(messages, first=not self.ids)
        self.ids += piece
        self.pieces.append(piece)
        self.messages += messages

    def reply(self, text: str, ends_with_eos: bool) -> None:
        raw = self.r.encode(text) + ([self.r.tokenizer.eos_token_id] if ends_with_eos else [])
        self.ids += self.r.generation_prompt_ids + raw + self.r.end_of_reply(raw)
        self.pieces += [self.r.generation_prompt_ids, raw]
        self.messages.append({"role": "assistant", "content": text})

    def text(self) -> str:
        return self.r.decode(self.ids)


def agent_history(renderer: ChatRenderer, observation_role: str) -> History:
    h = History(renderer)
    h.add([SYSTEM, TASK])
    for reply, obs, eos in zip(REPLIES, OBSERVATIONS, (True, False), strict=True):
        h.reply(reply, ends_with_eos=eos)  # the first reply ended with <|im_end|>, the second at a stop string
        h.add([{"role": observation_role, "content": obs}])
    return h


@pytest.fixture(scope="module")
def qwen() -> ChatRenderer:
    return ChatRenderer(qwen_tokenizer())


def test_qwen3_prompt_and_closing_tokens(qwen: ChatRenderer) -> None:
    assert qwen.decode(qwen.generation_prompt_ids) == "<|im_start|>assistant\n"
    assert qwen.decode(qwen.end_of_turn_ids) == "<|im_end|>\n"
    assert qwen.decode(qwen.end_of_reply([qwen.tokenizer.eos_token_id])) == "\n"  # EOS already closed the reply
    assert qwen.end_of_reply(qwen.encode("no eos")) == qwen.end_of_turn_ids


def test_qwen3_tool_steps_decode_to_the_template_render(qwen: ChatRenderer) -> None:
    # after the last user query Qwen3 keeps <think>: the append-only history is exactly the template's text
    h = agent_history(qwen, "tool")
    assert h.text() + qwen.decode(qwen.generation_prompt_ids) == qwen.render(h.messages, add_generation_prompt=True)
    assert h.text().count("<think>") == 2


def test_qwen3_user_observations_keep_the_think_blocks_the_template_drops(qwen: ChatRenderer) -> None:
    h = agent_history(qwen, "user")
    rendered = qwen.render(h.messages, add_generation_prompt=True)
    ours = h.text() + qwen.decode(qwen.generation_prompt_ids)
    assert "<think>" not in rendered
    assert ours.count("<think>") == 2  # we deliberately keep the reasoning
    assert THINK.sub("", ours) == rendered  # and nothing else differs


def test_pieces_retokenize_stably(qwen: ChatRenderer) -> None:
    h = agent_history(qwen, "tool")
    for piece in h.pieces:
        assert qwen.encode(qwen.decode(piece)) == piece
    assert qwen.encode(h.text()) == h.ids  # the whole history too: no merge across piece boundaries


def test_earlier_turns_are_never_rerendered(qwen: ChatRenderer) -> None:
    h = agent_history(qwen, "user")
    before = list(h.ids)
    h.add([{"role": "user", "content": "Now run the tests."}])
    assert h.ids[: len(before)] == before


def test_tool_messages_merge_within_one_append_and_close_across_appends(qwen: ChatRenderer) -> None:
    a, b = {"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}
    merged = qwen.decode(qwen.encode_messages([a, b], first=False))
    assert (
        merged
        == "<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response><|im_end|>\n"
    )
    separate = qwen.decode(qwen.encode_messages([a], first=False) + qwen.encode_messages([b], first=False))
    assert separate.count("<|im_start|>user") == 2
    assert separate.count("<|im_end|>") == 2


def test_a_given_assistant_message_encodes_like_a_generated_reply(qwen: ChatRenderer) -> None:
    text = REPLIES[0]
    ids = qwen.encode_messages([{"role": "assistant", "content": text}], first=False)
    assert ids == qwen.generation_prompt_ids + qwen.encode(text) + qwen.end_of_turn_ids


def test_first_append_renders_as_the_template_would(qwen: ChatRenderer) -> None:
    ids = qwen.encode_messages([SYSTEM, TASK], first=True)
    assert qwen.decode(ids) == qwen.render([SYSTEM, TASK])


@pytest.mark.parametrize("bad", [{"role": "robot", "content": "x"}, {"role": "user"}, {"role": "user", "content": 3}])
def test_bad_messages_are_refused(qwen: ChatRenderer, bad: dict) -> None:
    with pytest.raises(KVStoreError, match="bad message"):
        qwen.encode_messages([bad], first=True)


def test_a_tokenizer_without_chat_template_is_refused() -> None:
    from sessionlib import qwen_tokenizer_dir
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir())
    tok.chat_template = None
    with pytest.raises(KVStoreError, match="no chat template"):
        ChatRenderer(tok)


@pytest.mark.slow
def test_default_model_template() -> None:
    from transformers import AutoTokenizer

    from kvstore.models.registry import DEFAULT_MODEL, resolve

    smol = ChatRenderer(AutoTokenizer.from_pretrained(resolve(DEFAULT_MODEL)))
    h = History(smol)
    h.add([TASK])  # no system message: the template adds its default one, once
    for reply, obs, eos in zip(REPLIES, OBSERVATIONS, (True, False), strict=True):
        h.reply(reply, ends_with_eos=eos)
        h.add([{"role": "user", "content": obs}])
    assert h.text() + smol.decode(smol.generation_prompt_ids) == smol.render(h.messages, add_generation_prompt=True)
    assert h.text().count("named SmolLM") == 1
    assert h.text().count("<think>") == 2
    for piece in h.pieces:
        assert smol.encode(smol.decode(piece)) == piece
