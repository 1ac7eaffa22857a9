"""`nexus-agent bench overhead` on the tiny random Qwen3: every registered policy is measured (the list comes from
kvstore.POLICIES), with eviction-step time, attention-statistics time and peak extra memory."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from cli.app import app
from kvstore import POLICIES
from kvstore.policies import Policy


def test_every_policy_is_measured(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    out = tmp_path / "o.json"
    args = ["bench", "overhead", "--contexts", "320", "--model", "", "--repeats", "1", "--json", str(out)]
    try:
        result = CliRunner().invoke(app, args)
    finally:
        torch.set_num_threads(threads)
    assert result.exit_code == 0, result.output
    rows = {r["policy"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {name for name, (cls, _) in POLICIES.items() if cls.evicts}
    for name, r in rows.items():
        assert r["eviction_step_ms"] > 0, name
        assert r["decode_step_ms"] > 0, name
        assert r["eviction_peak_mib"] > 0, name
        assert r["prefill_chunk_ms"] > 0, name
        assert r["prefill_overhead_pct"] > 0, name
        assert r["triton"], name
        observes = POLICIES[name][0].observe is not Policy.observe  # H2O and nexus-agent gather on every forward
        assert (r["observe_chunk_peak_mib"] > 0) == observes, name
        assert r["observe_alone_ms"] >= 0, name
        assert r["observe_decode_ms"] >= 0, name
        # the cache observes decoded tokens in one call per eviction step at most: decode_slack + 1 = 33 tokens
        assert r["observe_batch"] == 33 or not observes, name
    # H2O's statistics for a 512-token chunk: [Hq, 512, T] probabilities (4 heads, T = 320) plus logits, ~5 MiB
    assert rows["h2o"]["observe_chunk_peak_mib"] < 8


def test_a_bad_shape_or_a_missing_gpu_is_one_clear_error() -> None:
    result = CliRunner().invoke(app, ["bench", "overhead", "--shape", "qwen9", "--model", ""])
    assert result.exit_code == 2
    assert "unknown shape 'qwen9'" in result.output
    if not torch.cuda.is_available():
        result = CliRunner().invoke(app, ["bench", "overhead", "--device", "cuda", "--model", ""])
        assert result.exit_code == 2
        assert "no CUDA GPU here" in result.output
