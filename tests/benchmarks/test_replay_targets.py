"""The replay bench's target check (the default memory against the best baseline) and its spec strings (the merge of
split runs, research/replay_merge.py, is tested in tests/research/test_replay_merge.py)."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from benchmarks.replay import parse_spec
from benchmarks.replay_report import summarize, target_rows, target_table
from kvstore.errors import KVStoreError


def _run(spec: str, budget: float, kl: float, top1: int, conversation: str = "c1") -> dict:
    turn = {"turn": 1, "start": 0, "tokens": 10, "kl": kl * 10, "nll": 0.0, "top1": top1, "held": 1.0}
    return {"spec": spec, "budget": budget, "conversation": conversation, "turns": [turn]}


def test_the_default_is_compared_with_the_lowest_kl_baseline_only() -> None:
    runs = [_run("nexus-agent", 0.25, 0.1, 9), _run("h2o", 0.25, 0.3, 8), _run("snapkv", 0.25, 0.2, 7)]
    runs += [_run("nexus-topk", 0.25, 0.01, 10), _run("h2o", 0.5, 0.05, 10)]  # an ablation is no baseline
    (row,) = target_rows(summarize(runs), "nexus-agent")  # no default at 0.5: that budget is left out
    assert (row["best_baseline"], row["best_kl"], row["top1"]) == ("snapkv", pytest.approx(0.2), 0.9)
    assert row["ratio"] == pytest.approx(0.5)


def test_no_ratio_where_the_best_baseline_loses_nothing() -> None:
    runs = [_run("nexus-agent", 1.0, 0.0, 10), _run("h2o", 1.0, 0.0, 10)]  # a budget that evicts nothing
    (row,) = target_rows(summarize(runs), "nexus-agent")
    assert row["ratio"] is None
    json.dumps(row, allow_nan=False)  # valid JSON: no Infinity
    console = Console(record=True, width=200)
    console.print(target_table([row]))
    assert console.export_text().splitlines()[-2].split("│")[-2].strip() == "n/a"  # the KL ratio column


def test_a_baseline_replayed_with_a_profile_is_still_the_baseline() -> None:
    """Older replays labelled every run of a --profile / --learn replay, baselines too (`h2o+learned`); the check
    must still find them, since a baseline ignores the profile."""
    runs = [_run("nexus-agent+learned", 0.25, 0.1, 9), _run("h2o+learned", 0.25, 0.3, 8)]
    (row,) = target_rows(summarize(runs), "nexus-agent+learned")
    assert row["best_baseline"] == "h2o+learned"
    assert row["ratio"] == pytest.approx(1 / 3)


def test_spec_options_keep_their_types() -> None:
    spec = parse_spec("nexus-agent@score_memory=none,acc_weight=2,selector=reservoir,sink=none,protect=system")
    assert dict(spec.options) == {"score_memory": "none", "acc_weight": 2, "selector": "reservoir", "sink": None}
    assert spec.protect == "system"
    with pytest.raises(KVStoreError, match="score_memory"):
        parse_spec("nexus-agent@score_memory=ema")
    assert parse_spec("h2o").protocol == "true-eviction"
    assert parse_spec("h2o@protocol=re-prefill").protocol == "re-prefill"  # the comparison protocol, per spec
    with pytest.raises(KVStoreError, match="protocol must be one of"):
        parse_spec("h2o@protocol=sometimes")
