"""A worker's view of its model's prefill and decoding, which have no events of their own: read from the task's
session once a second while the model works, and sent as "phase" events (the eval view shows "prefill 1200/3100
tokens", then "writes its reply (40 tokens so far)"), and the batch's ETA from its finished tasks. The
watch also passes on the first build of a task's Python env ("env_build", "env_built": swe_env.pyenv), which takes
minutes before the model is even loaded."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

# run_task's events on a task's Python env build, and the fields a worker sends of them (cli/live.py words them)
ENV_EVENTS = {"env_build": ("repo", "version"), "env_built": ("repo", "version", "seconds")}


def prefill_of(session: Any) -> tuple[int, int] | None:
    """(tokens the model has run, tokens of the conversation) while `session` (a kvstore Session) prefills a turn;
    None while it decodes, between turns, or for a backend without a session (a server, a replay)."""
    if session is None or session.pending_prompt() is None:
        return None
    total = len(session.tokens)
    return min(session.prefilled, total), total


def model_progress(session: Any) -> dict[str, Any] | None:
    """What the model does now: {"prefill": [done, total]} while it reads, {"decoded": n} once it writes (n tokens
    so far), None between turns or without a session. A prefill's last reading stood for the whole reply before."""
    if (prefill := prefill_of(session)) is not None:
        return {"prefill": list(prefill)}
    decoded = session.reply_tokens() if session is not None else None
    return {"decoded": decoded} if decoded is not None else None


def eta_seconds(durations: list[float], left: int, workers: int) -> float | None:
    """Seconds until the batch ends: tasks left x the mean duration of the finished ones / the workers they keep
    busy (never more than the tasks left); None until one has finished (rich's rate over the recent minutes said
    -:--:--, then 3 s for two 90 s tasks)."""
    if not durations:
        return None
    return left * (sum(durations) / len(durations)) / max(1, min(workers, left))


class PrefillWatch:
    """Emits `emit("phase", step=..., phase="model", prefill=[done, total] | decoded=n)` when the model's progress
    has moved, every `every` seconds while it works on a step (from run_task's events: "backend", "model", then any
    other)."""

    def __init__(self, emit: Callable[..., None], every: float = 1.0) -> None:
        self.emit, self.every = emit, every
        self.session: Any = None
        self.step, self.watching, self.last = 0, False, None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="prefill-watch", daemon=True)

    def __enter__(self) -> PrefillWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)

    def event(self, ev: dict[str, Any]) -> None:
        if ev["kind"] in ENV_EVENTS:
            self.emit("phase", phase=ev["kind"], **{k: ev[k] for k in ENV_EVENTS[ev["kind"]] if k in ev})
        if ev["kind"] == "backend":
            self.session = getattr(ev["backend"], "session", None)
        self.watching = ev["kind"] == "model"
        self.step = ev.get("step", self.step)

    def _run(self) -> None:
        while not self.stopped.wait(self.every):
            now = model_progress(self.session) if self.watching else None
            if now is not None and now != self.last:
                self.last = now
                self.emit("phase", step=self.step, phase="model", **now)
