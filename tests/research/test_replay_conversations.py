"""research/replay_conversations.py: per-conversation fidelity of the default against a baseline, from a result."""

from __future__ import annotations

from replay_conversations import per_conversation, report


def _run(spec: str, conversation: str, kl: float, top1: int, tokens: int = 10, budget: float = 0.25) -> dict:
    turn = {"turn": 1, "start": 0, "tokens": tokens, "kl": kl * tokens, "nll": 0.0, "top1": top1, "held": 0.0}
    return {"spec": spec, "budget": budget, "conversation": conversation, "seed": 0, "turns": [turn]}


def test_each_conversation_is_compared_with_the_baseline_on_the_same_conversation() -> None:
    runs = [_run("nexus-agent", "a", 0.1, 9), _run("h2o", "a", 0.4, 8), _run("nexus-agent", "b", 0.3, 10)]
    runs += [_run("h2o", "b", 0.2, 10), _run("nexus-agent", "c", 0.1, 10)]  # c: no baseline run, left out
    rows = per_conversation({"runs": runs}, "nexus-agent", "h2o")["0.25"]
    assert [(r["conversation"], round(r["ratio"], 3), r["top1"]) for r in rows] == [("a", 0.25, 0.9), ("b", 1.5, 1.0)]
    text = "\n".join(report({"0.25": rows}, "nexus-agent", "h2o"))
    assert "KL ratio 0.2500 / 0.8750 / 1.5000; nexus-agent has the lower KL on 1 of 2" in text
