"""A memory profile of an agent whose every conversation opens with the same system prompt and standing
instructions around a different task, calibrated on the tiny random Qwen3 (sessionlib) with the real tokenizer."""

from __future__ import annotations

from pathlib import Path

from sessionlib import qwen_tokenizer, tiny_chat_model, words

from kvstore.profiles.calibrate import calibrate

SYSTEM = "You are a coding agent. " + words(200, "rule")
AFTER = words(120, "step")  # the standing instructions after the task, the same in every conversation


def conversation(task: str, replies: int = 2) -> list[dict]:
    """The opening around `task`, then `replies` agent replies with an observation between them."""
    out = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{task}\n{AFTER}"}]
    for i in range(replies):
        out += [{"role": "assistant", "content": f"look {i} " + words(30, "a")}]
        out += [{"role": "user", "content": words(60, f"o{i}")}]
    return out[:-1]


def save_tiny_profile(path: Path) -> Path:
    """Calibrate on three conversations of that agent and save the profile at `path`."""
    convs = [conversation(words(40, t)) for t in ("alpha", "beta", "gamma")]
    calibrate(tiny_chat_model(), qwen_tokenizer(), convs, max_tokens=2000, meta={"model": "tiny"}).save(path)
    return path
