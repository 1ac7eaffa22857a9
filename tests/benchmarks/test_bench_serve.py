"""`bench serve` on the tiny model (fp32, so batched and serial replies must agree): every phase measured side by
side, batches formed, and nexus at 20% fits more sessions under the KV cap than the full cache."""

from __future__ import annotations

import pytest
import torch
from sessionlib import qwen_tokenizer, tiny_chat_model

from benchmarks.serve import ServePlan, print_report, run_bench
from benchmarks.serve_admission import AdmissionPlan, admission_line, measure_admission
from benchmarks.serve_stall import StallPlan
from benchmarks.serve_workload import synthetic_conversations


def test_bench_serve_quick_plan_on_the_tiny_model() -> None:
    torch.set_num_threads(1)
    plan = ServePlan(clients=(1, 4), turns=2, prompt_tokens=500, obs_tokens=30, reply_tokens=8, fit_cap_mib=1.5,
                     fit_max=10)  # fmt: skip
    stall = StallPlan(newcomer_tokens=1200, chunk=64, active_reply_tokens=200)
    result = run_bench(tiny_chat_model(), qwen_tokenizer(), "tiny-qwen3", plan, stall)
    print_report(result)
    assert [p["clients"] for p in result["phases"]] == [1, 4]
    for p in result["phases"]:
        assert p["same_replies"]  # greedy, fp32: batching changes no token
        assert p["batched"]["completion_tokens"] == p["serial"]["completion_tokens"] > 0
        assert p["serial"]["mean_batch"] == 1.0
        assert 0 < p["batched"]["ttft_mean_s"] <= p["batched"]["ttft_max_s"]
    assert result["phases"][1]["batched"]["mean_batch"] > 1.5  # four sessions decoded together
    assert all(
        p[m]["rss_before_mib"] > 0 and p[m]["rss_after_mib"] > 0
        for p in result["phases"]
        for m in ("batched", "serial")
    )
    nexus, full = result["fit"]
    assert full["hit_cap"]
    assert 1 <= full["sessions"] < nexus["sessions"]
    assert nexus["mean_held_bytes"] < 0.5 * full["mean_held_bytes"]
    assert result["fit_ratio"] == nexus["sessions"] / full["sessions"]
    inter, whole = result["stall"]["interleaved"], result["stall"]["whole"]
    assert result["stall"]["same_replies"]
    assert inter["newcomer_prefill_tokens"] > 10 * 64
    assert inter["clients_still_decoding"] >= 1  # the others decoded through the newcomer's prefill, chunk by chunk
    assert inter["tokens_during_prefill"] > whole["tokens_during_prefill"]


@pytest.mark.slow  # its last RSS reading waits 10 s after the clients close
def test_bench_serve_admission_many_more_clients_than_sessions() -> None:
    torch.set_num_threads(1)
    tok = qwen_tokenizer()
    plan = AdmissionPlan(clients=24, max_sessions=4, turns=2, reply_tokens=6)
    convs = synthetic_conversations(plan.clients, plan.turns, 200, 20, tok)
    r = measure_admission(tiny_chat_model(), tok, "tiny-qwen3", convs, plan)
    print(admission_line(r))
    assert (r["finished"], r["failed"], r["turns"]) == (24, 0, 48)  # every conversation finished
    assert r["seconds_without_tokens"] == 0
    assert r["sessions_parked"] > 0
    assert 0 < r["latency_p50_s"] <= r["latency_p99_s"] <= r["latency_max_s"]
    assert r["ttft_p99_s"] > 0
    assert all(r[k] > 0 for k in ("rss_before_mib", "rss_after_mib", "rss_settled_mib"))
