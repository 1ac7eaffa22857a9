"""research/cuda_graph_probe.py on the CPU: the eager rows of a tiny random Qwen3 (graphs need CUDA), their bound
and ratios, and the step's own bookkeeping (it writes the greedy token back and moves the position on)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from cuda_graph_probe import QWEN3_TINY, Stepper, kv_bytes, random_qwen3

ROOT = Path(__file__).resolve().parents[2]


def test_a_step_writes_its_greedy_token_and_moves_on() -> None:
    model, layers = random_qwen3(QWEN3_TINY, None, "cpu", "bfloat16", "sdpa")
    step = Stepper(model, batch=2, capacity=64, device=torch.device("cpu"))
    step.at(10, token=5)
    step()
    assert int(step.pos) == 11
    assert torch.equal(step.ids.view(-1), step.logits.argmax(-1))
    per_token = QWEN3_TINY["num_key_value_heads"] * QWEN3_TINY["head_dim"] * 2  # one layer's keys, bf16
    assert kv_bytes(model.config, 2, 64, layers) == 2 * layers * 2 * 64 * per_token  # K and V, batch 2


def test_the_probe_prints_eager_rows_and_ratios_on_a_cpu(tmp_path) -> None:
    out = tmp_path / "probe.json"
    args = ["--shape", "tiny", "--device", "cpu", "--capacities", "128,256", "--batches", "1", "--steps", "3"]
    run = subprocess.run(
        [sys.executable, str(ROOT / "research" / "cuda_graph_probe.py"), *args, "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["mode"], r["capacity"]) for r in rows] == [("eager", 128), ("eager", 256)]
    assert all(r["ms_step"] > 0 and 0 < r["of_bound"] for r in rows)
    assert "eager batch 1: capacity 128 / 256 tokens/s" in run.stdout
