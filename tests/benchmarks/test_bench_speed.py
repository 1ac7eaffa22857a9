"""`nexus-agent bench speed` on a tiny random Qwen3: decode timing, ratios, prefill peak memory, RSS subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from benchmarks.speed import SpeedConfig, memory_run, rss_of, tiny_qwen3
from cli.app import app


def test_quick_run_measures_side_by_side(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    out = tmp_path / "s.json"
    try:
        result = CliRunner().invoke(app, ["bench", "speed", "--quick", "--json", str(out)])
    finally:
        torch.set_num_threads(threads)
    assert result.exit_code == 0, result.output
    assert "Decode speed" in result.output
    assert "Prefill memory" in result.output
    data = json.loads(out.read_text())
    assert [(r["policy"], r["context"]) for r in data["decode"]] == [
        ("full", 512),
        ("nexus", 512),
        ("full", 1024),
        ("nexus", 1024),
    ]
    for r in data["decode"]:
        assert r["decode_tok_s"] > 0
        assert r["step_ms_median"] > 0
        if r["policy"] == "nexus":  # 20% of the prompt + at most a block of slack + the decoded tail
            assert r["held_tokens_per_layer"] <= 0.2 * r["context"] + 32 + 40 + 32
    for pair in data["ratios"]:
        assert pair["cache_bytes_ratio"] > 3  # full holds the whole prompt, nexus ~20% of it
    mem = {r["config"]: r for r in data["memory"]}
    full, chunked = mem["full (no eviction)"], mem["nexus 20%, chunked prefill"]
    one_shot = mem["nexus 20%, one-shot prefill"]
    assert full["peak_cache_mib"] == full["final_cache_mib"]  # nothing evicted
    assert chunked["peak_cache_mib"] < one_shot["peak_cache_mib"] < full["peak_cache_mib"]
    assert chunked["final_cache_mib"] < full["final_cache_mib"] / 3


def test_peak_is_sampled_before_eviction() -> None:
    """One-shot prefill: the last layer holds the whole prompt before it evicts, so the peak exceeds one layer's full
    share; chunked prefill keeps it near budget + one chunk."""
    model = tiny_qwen3(max_positions=4096, layers=4)
    one = memory_run(model, "nexus 20%, one-shot prefill", 2048, model.config.vocab_size, 0.2)
    full = memory_run(model, "full (no eviction)", 2048, model.config.vocab_size, 0.2)
    assert one["peak_cache_mib"] >= full["final_cache_mib"] / 4  # >= one whole layer of the full cache


def test_rss_subprocess_reports_high_water_marks() -> None:
    cfg = SpeedConfig(model="tiny", memory_context=512, threads=1)
    row = rss_of(cfg, "nexus 20%, chunked prefill")
    assert row["rss_peak_mib"] >= row["rss_loaded_mib"] > 50  # torch + model are resident
    assert row["context"] == 512
