"""`nexus-agent bench gpu --quick`: the device benchmark's machinery on tiny CPU shapes (real model, real caches)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli import app as cli_app

REPO = Path(__file__).resolve().parents[2]
HAS_TRITON = importlib.util.find_spec("triton") is not None
CLI = "from cli.app import app; from cli.errors import run; run(app)"  # main() minus the SIGTERM handler
RUN = "import sys; from cli.app import app; sys.argv = ['nexus-agent'] + sys.argv[1:]; app()"


def test_command_is_registered():
    assert cli_app.BENCH_COMMANDS["gpu"][0].startswith("benchmarks.gpu:")


@pytest.mark.slow
def test_quick_run(tmp_path):
    out = tmp_path / "gpu.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if HAS_TRITON:  # score through the Triton kernel, run by its interpreter
        env |= {"TRITON_INTERPRET": "1", "NEXUS_FORCE_TRITON": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", RUN, "bench", "gpu", "--quick", "--json", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "decode after a 1024-token prefill" in proc.stdout
    assert "fused Triton kernel vs torch" in proc.stdout
    result = json.loads(out.read_text())
    assert result["env"]["attn_implementation"] == "sdpa"
    runs = {r["policy"]: r for r in result["runs"]}
    dense, nexus = runs["dense"]["marks"], runs["nexus"]["marks"]
    assert [m["decode"] for m in dense] == [m["decode"] for m in nexus] == [64, 128]
    # dense holds every token; nexus stays within budget (round(0.2 * 1024) = 205 tokens) + one block of decode slack
    assert [m["tokens_held_layer0"] for m in dense] == [1024 + 64, 1024 + 128]
    assert all(m["tokens_held_layer0"] <= 8 * 32 for m in nexus)
    assert all(n["cache_mib"] < d["cache_mib"] / 3 for n, d in zip(nexus, dense, strict=True))
    assert runs["nexus"]["eviction_steps"] > 0
    assert all(m["tok_s"] > 0 for m in dense + nexus)
    assert all(m["ms_step_p50_tail"] > 0 for m in dense + nexus)
    assert [r["T"] for r in result["kernel"]] == [256, 1024]
    if HAS_TRITON:
        assert result["env"]["scoring_path"] == "triton"
        assert all(r["max_abs_diff"] < 1e-5 for r in result["kernel"])


def test_a_policy_spec_sets_cache_options():
    from benchmarks.gpu_measure import GpuBenchConfig, new_cache, random_qwen3
    from kvstore.errors import KVStoreError

    cfg = GpuBenchConfig.quick()
    model, _ = random_qwen3(cfg.shapes, None, "cpu", "float32", "sdpa")
    cache = new_cache(model, "nexus-agent@observe_batch=1,window=8", cfg)
    assert (cache.config.policy, cache.config.observe_batch, cache.config.settings.window) == ("nexus-agent", 1, 8)
    assert new_cache(model, "h2o", cfg).config.observe_batch == 64
    with pytest.raises(KVStoreError, match="observe_batch must be >= 1"):
        new_cache(model, "h2o@observe_batch=0", cfg)
    from benchmarks.gpu_report import make_config

    assert make_config(True, policies=("dense", "h2o@observe_batch=1")).policies[1] == "h2o@observe_batch=1"
    with pytest.raises(KVStoreError, match="unknown policy 'foo'"):  # before any model is built
        make_config(True, policies=("dense", "nexus", "foo@window=8"))


def test_no_gpu_is_one_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    proc = subprocess.run(
        [sys.executable, "-c", CLI, "bench", "gpu"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no CUDA GPU" in proc.stderr
    assert "Traceback" not in proc.stderr
