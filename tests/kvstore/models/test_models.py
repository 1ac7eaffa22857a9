"""The model registry: local directories, the offline default converted once, offline hub ids, dtype choice."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from sessionlib import qwen_tokenizer, tiny_chat_model

from kvstore.errors import KVStoreError
from kvstore.models.registry import (
    DEFAULT_MODEL,
    GGUFSource,
    config_hash,
    cpu_supports_bf16,
    gguf_path,
    load_model,
    pick_attention,
    pick_dtype,
)

REPO = Path(__file__).resolve().parents[3]


def test_dtype_and_attention_choice() -> None:
    assert pick_dtype("fp32", "cpu") == torch.float32
    assert pick_dtype("bfloat16", "cpu") == torch.bfloat16
    assert pick_dtype(None, "cuda") == torch.bfloat16
    assert pick_dtype(None, "cpu") == (torch.bfloat16 if cpu_supports_bf16() else torch.float32)
    assert pick_attention("cpu") == "sdpa"
    with pytest.raises(KVStoreError, match="unknown dtype"):
        pick_dtype("int3", "cpu")


def test_loads_a_local_model_directory(tmp_path: Path) -> None:
    model = tiny_chat_model("qwen3")
    model.save_pretrained(tmp_path)
    qwen_tokenizer().save_pretrained(tmp_path)
    loaded, tokenizer, info = load_model(str(tmp_path), device="cpu", dtype="fp32")
    assert info.source == str(tmp_path)
    assert info.device == "cpu"
    assert info.dtype == "float32"
    assert info.max_positions == 4096
    assert info.attn_implementation == "sdpa"
    assert info.config_hash == config_hash(model.config)  # identity survives save/load
    assert not loaded.training
    assert tokenizer.chat_template
    ids = torch.tensor([tokenizer("def add(a, b):")["input_ids"]])
    with torch.inference_mode():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_config_hash_tells_architectures_apart() -> None:
    assert config_hash(tiny_chat_model("qwen3").config) != config_hash(tiny_chat_model("llama").config)


def test_hub_id_offline_names_the_offline_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(KVStoreError, match=DEFAULT_MODEL):
        load_model("some-org/some-model-that-is-not-here")


def test_directory_without_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KVStoreError, match="no config.json"):
        load_model(str(tmp_path))


def test_missing_gguf_package_says_what_to_install() -> None:
    with pytest.raises(KVStoreError, match="pip install nexus-no-such-package"):
        gguf_path(GGUFSource("nexus_no_such_package", "x.gguf", "nexus-no-such-package"))


LOAD_DEFAULT = """
import time, torch
t = time.perf_counter()
from kvstore.models.registry import load_model
model, tok, info = load_model("smollm2-135m")
print(info.source, round(time.perf_counter() - t, 1))
"""


@pytest.mark.slow
def test_default_model_converts_once_even_with_two_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = os.environ | {"NEXUS_AGENT_CACHE": str(tmp_path), "PYTHONPATH": str(REPO)}
    (tmp_path / "models" / f".{DEFAULT_MODEL}.k1ll3d").mkdir(parents=True)  # left by a conversion killed midway
    procs = [subprocess.Popen([sys.executable, "-c", LOAD_DEFAULT], env=env, stdout=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    target = tmp_path / "models" / DEFAULT_MODEL
    assert all(out.split()[0] == str(target) for out in outs)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [f".{DEFAULT_MODEL}.lock", DEFAULT_MODEL]
    assert {p.name for p in target.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}
    monkeypatch.setenv("NEXUS_AGENT_CACHE", str(tmp_path))
    t = time.perf_counter()
    model, tokenizer, info = load_model(DEFAULT_MODEL)
    assert time.perf_counter() - t < 10  # converted: no dequantization on later loads (~1 s unloaded)
    assert info.max_positions == 8192
    assert info.dtype == ("bfloat16" if cpu_supports_bf16() else "float32")
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, tokenize=False
    )
    ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    out = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, ids.shape[1] :])
