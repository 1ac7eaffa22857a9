"""research/replay_spread.py: a pooled ratio, its bootstrap interval over conversations, and the ratio without the
conversation that adds most, from `bench replay --json` files (a relabelled later run of a spec included)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from replay_spread import conversation_sums, spread


def _run(spec: str, conversation: str, first: float, later: float) -> dict:
    turns = [
        {"turn": 1, "start": 0, "tokens": 10, "kl": first, "nll": 0.0, "top1": 9, "held": 1.0},
        {"turn": 2, "start": 20, "tokens": 10, "kl": later, "nll": 0.0, "top1": 9, "held": 1.0},
    ]
    return {"spec": spec, "budget": 0.25, "conversation": conversation, "turns": turns}


def test_one_conversation_that_carries_the_ratio_is_named_and_left_out() -> None:
    num = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 30.0}
    den = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}
    s = spread(num, den, random.Random(0))
    assert s["n"] == 4 and s["pooled"] == 33 / 4
    assert s["worst"] == "d" and s["without_worst"] == 1.0 and s["median"] == 1.0
    assert s["low"] < s["pooled"] < s["high"]  # the draws without d pool to 1, with it twice to 16


def test_sums_per_spec_and_conversation_with_a_relabelled_later_run(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    new = tmp_path / "new.json"
    old.write_text(json.dumps({"runs": [_run("nexus-agent+profile", "c1", 5.0, 1.0), _run("h2o", "c1", 8.0, 2.0)]}))
    new.write_text(json.dumps({"runs": [_run("nexus-agent+profile [v2]", "c1", 3.0, 1.0)]}))
    by = conversation_sums([new, old], 0.25, {"nexus-agent+profile [v2]": "nexus-agent+profile"})
    assert by["nexus-agent+profile"]["c1"] == (4.0, 20, 3.0)  # the first file to give the pair wins: the later run
    assert by["h2o"]["c1"] == (10.0, 20, 8.0)
