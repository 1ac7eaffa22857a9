"""`nexus-agent bench turns` end to end on a tiny random Qwen3 model (a few short turns)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sessionlib import save_tiny_chat_model
from typer.testing import CliRunner

from cli.app import app


def test_bench_turns_quick(tmp_path: Path) -> None:
    model = save_tiny_chat_model(tmp_path / "model")
    out = tmp_path / "turns.json"
    args = ["bench", "turns", "--model", str(model), "--turns", "4", "--prompt-tokens", "300", "--obs-tokens", "80"]
    args += ["--reply-tokens", "30", "--budget", "128", "--dtype", "fp32", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "latency" in result.output
    assert "same tokens in all runs: yes" in result.output
    data = json.loads(out.read_text())
    te, rp, full = (data["runs"][r] for r in ("true-eviction", "re-prefill", "full"))
    assert data["same_tokens"]
    assert len(te) == len(rp) == len(full) == 4
    history = [t["history_tokens"] for t in full]
    assert [t["prefill_tokens"] for t in rp] == history  # re-prefill runs the whole history every turn
    assert sum(t["prefill_tokens"] for t in te) == history[-1]  # true eviction runs each token once
    assert data["totals"]["total_prefill_token_ratio"] == sum(history) / history[-1]
    assert all(t["held_tokens"] <= 128 + 32 for t in te)  # budget + one block
    assert full[-1]["held_tokens"] == history[-1]
    assert data["totals"]["true_eviction_bytes_vs_full"] < 0.5


def test_bench_turns_refuses_a_session_longer_than_the_model(tmp_path: Path) -> None:
    model = save_tiny_chat_model(tmp_path / "model", max_positions=512)
    args = ["bench", "turns", "--model", str(model), "--turns", "10", "--prompt-tokens", "300", "--dtype", "fp32"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    assert "maximum of 512 positions" in str(result.exception)


@pytest.mark.slow
def test_default_plan_fits_the_default_model() -> None:
    """`nexus-agent bench turns` with no options must run: its 30 turns fit SmolLM2's 8192 positions."""
    from benchmarks.turns import TurnsPlan, script
    from kvstore.models.registry import load_model
    from kvstore.session.session import Session, SessionConfig

    model, tokenizer, _ = load_model("smollm2-135m")
    opening, turns = script(TurnsPlan(), tokenizer)
    probe = Session(model, tokenizer, SessionConfig(policy="full"))
    for messages in [opening, *turns]:
        probe.append(messages)  # raises KVStoreError past the model's positions
    assert len(turns) == 30
    assert probe.num_tokens <= model.config.max_position_embeddings
