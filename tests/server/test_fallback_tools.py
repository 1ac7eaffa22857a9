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


def test_an_eval_through_serve_calls_a_tool_at_every_step(tmp_path) -> None:
    """The README's serve flow on the real default model (SmolLM2-135M, no tools in its template): `eval --server`
    (call format auto: tools, with tool_choice required) gets one grammar-constrained call of the agent's tools at
    each of its steps. (A random model writes a string to its token limit, so the real one is needed here.)"""
    from sessionlib import serve_config

    from kvstore.models.registry import DEFAULT_MODEL, load_model

    torch.set_num_threads(1)
    model, tokenizer, _ = load_model(DEFAULT_MODEL, device="cpu")
    server = Server(model, tokenizer, serve_config(port=0, model=DEFAULT_MODEL, park_dir=tmp_path / "park")).start()
    try:
        _eval_two_steps(server.url, tmp_path)
    finally:
        server.close()


def _eval_two_steps(url: str, tmp_path) -> None:
    import os
    import subprocess
    import sys

    out = tmp_path / "run"
    args = ["eval", "--server", url, "--out", str(out), "--instances", "nexus-demo__pagekit-1"]
    args += ["--sandbox", "local", "--max-steps", "2", "--temperature", "0", "--max-new-tokens", "128"]
    env = {**os.environ, "NEXUS_AGENT_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", "from cli.app import main; main()", *args],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "nexus-demo__pagekit-1" / "trajectory.jsonl").read_text().splitlines()]
    assert rows[0]["meta"]["call_format"] == "tools"
    steps = [r for r in rows if r["type"] == "step"]
    assert len(steps) == 2
    for step in steps:
        assert step["call"] is not None, step.get("observation", "")[:300]
        assert step["call"]["name"] in {"file_editor", "search", "execute_bash", "finish"}
