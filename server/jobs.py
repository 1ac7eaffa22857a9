"""One chat-completion request's record on its way from the HTTP side (server.asgi, server.app) through the
scheduler (server.batching), which answers it through its events."""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from typing import Any

from server.sessions import Entry


@dataclass
class Job:
    """One chat-completion request on its way through the scheduler."""

    entry: Entry
    messages: list[dict[str, str]]  # the messages the session has not seen yet
    max_new_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    continued: bool  # the session had earlier turns
    events: queue.Queue = field(default_factory=queue.Queue)  # ("text", str) | ("done", dict) | ("error", ServeError)
    submitted: float = field(default_factory=time.monotonic)
    reply: Any = None  # the kvstore ReplyInProgress once started
    reserved: int = 0  # KV bytes admission set aside for this turn's peak
    restored: bool = False
    cancelled: bool = False  # the client went away
    started: float = 0.0
    first_token: float = 0.0  # when its prefill ended and the first reply token was chosen
    batch_rows: int = 0  # sum over this reply's decode steps of the batch size
    prepared: Any = None  # server.prepare.Prepared: its new messages tokenized on the request side (None: not yet)
    request: Any = None  # its server.api.ChatRequest: seed, penalties, logprobs, tools, constraint (None: plain)
    constraint: Any = None  # its grammar, compiled on the request side (api.check_for_model; None: free decoding)


def result_of(job: Job, reply, answer: dict[str, Any]) -> dict[str, Any]:
    """The "done" event of a finished turn: its answer (server.api.answer), the token counts and the `nexus`
    extension (session, queueing and batching figures, the turn's cache statistics)."""
    completion = len(reply.token_ids)
    steps = max(1, completion - 1)
    profile = job.entry.session.profile_status
    return answer | {
        "prompt_tokens": job.reply.prompt_tokens,
        "completion_tokens": completion,
        "cached_tokens": job.reply.prompt_tokens - reply.stats.prefill_tokens,
        "nexus": {
            "session_id": job.entry.id,
            "continued": job.continued,
            "restored": job.restored,
            "queue_s": round(job.started - job.submitted, 4),
            "first_token_s": round(job.first_token - job.submitted, 4),
            "mean_batch": round(job.batch_rows / steps, 2) if completion > 1 else 1.0,
            "turn": reply.stats.to_dict(),
        }
        | ({"memory_profile": profile} if profile is not None else {}),
    }
