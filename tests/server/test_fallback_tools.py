"""Every served model takes tools: where the model's chat template has no tool support (the offline default
SmolLM2's), the server renders them with its fallback tool template (kvstore.session.tools_fallback, Hermes/Qwen's
convention), says so in /v1/models, and forced calls stay grammar-constrained. A tiny random Llama over SmolLM2's
real tokenizer and template (the default model, converted once)."""

from __future__ import annotations

import json
import urllib.request
from functools import lru_cache

import openai
import pytest
import torch

from kvstore.models.tiny import tiny_model
from server.app import Server

pytestmark = pytest.mark.slow  # SmolLM2's tokenizer comes with the default model (converted once, then cached)

COMMAND = {"enum": ["ls", "pwd"]}  # a random model writes strings to its token limit: a choice ends
PARAMETERS = {
    "type": "object",
    "properties": {"command": COMMAND},
    "required": ["command"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": PARAMETERS}}]


@lru_cache(maxsize=1)
def smol_tokenizer():
    from transformers import AutoTokenizer

    from kvstore.models.registry import DEFAULT_MODEL, resolve

    return AutoTokenizer.from_pretrained(resolve(DEFAULT_MODEL))


@pytest.fixture
def smol_server(tmp_path):
    from sessionlib import serve_config

    torch.set_num_threads(1)
    model = tiny_model("llama", seed=0, vocab_size=len(smol_tokenizer()), max_positions=4096, tie_word_embeddings=False)
    config = serve_config(port=0, model="tiny-smol", budget=128, park_dir=tmp_path / "park")
    server = Server(model, smol_tokenizer(), config).start()
    yield server
    server.close()


def test_a_model_without_tool_support_takes_tools_with_the_fallback_template(smol_server) -> None:
    models = json.load(urllib.request.urlopen(smol_server.url + "/models"))
    assert models["data"][0]["nexus"]["tool_template"] == "fallback"
    c = openai.OpenAI(base_url=smol_server.url, api_key="unused", max_retries=0)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "List the files."}]
    r = c.chat.completions.create(
        model="tiny-smol", messages=messages, tools=TOOLS, tool_choice="required", max_tokens=60, temperature=0
    )
    (call,) = r.choices[0].message.tool_calls  # grammar-constrained: one call of a listed tool
    assert call.function.name == "bash" and json.loads(call.function.arguments)["command"] in ("ls", "pwd")
    sid = r.model_extra["nexus"]["session_id"]
    text = smol_tokenizer().decode(smol_server.registry.entries[sid].session.tokens)
    assert text.startswith("<|im_start|>system\nYou are terse.\n\n# Tools") and '"name": "bash"' in text
    messages += [r.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "a.py b.py"}]  # fmt: skip
    r2 = c.chat.completions.create(model="tiny-smol", messages=messages, tools=TOOLS, max_tokens=4, temperature=0)
    assert r2.model_extra["nexus"]["session_id"] == sid and r2.model_extra["nexus"]["continued"]
    text = smol_tokenizer().decode(smol_server.registry.entries[sid].session.tokens)
    assert "<|im_start|>user\n<tool_response>\na.py b.py\n</tool_response><|im_end|>" in text
