"""The plans the bench commands run, apart from their torch code: `nexus-agent bench ... --help` reads their
defaults (benchmarks/commands.py) without importing the benchmark itself."""

from __future__ import annotations

from dataclasses import dataclass

from kvstore.defaults import DEFAULT_DENSITY

MODES = ("unaware", "aware")  # question after compression (the agent setting) / inside the compressed prompt


@dataclass
class TurnsPlan:
    """The simulated agent session every run plays."""

    turns: int = 30  # agent turns (each: prefill, then a forced reply and a tool observation)
    prompt_tokens: int = 1500  # system prompt + task before the first turn (30 turns then fit 8192 positions)
    obs_tokens: int = 140  # tokens per tool observation
    reply_tokens: int = 50  # tokens per forced assistant reply
    seed: int = 0  # seed of the synthetic text and of the caches


@dataclass
class ServePlan:
    """What `bench serve` runs."""

    clients: tuple[int, ...] = (1, 4, 16, 64)  # concurrent sessions per phase
    turns: int = 3  # requests per session (the later ones continue the session)
    prompt_tokens: int = 1000  # tokens of each conversation's task message (cut from the trace)
    obs_tokens: int = 150  # tokens of each tool observation
    reply_tokens: int = 32  # max_tokens of each reply (greedy; a reply may end earlier at EOS)
    density: float = DEFAULT_DENSITY  # nexus budget of every session (fraction of the first prompt kept)
    fit_cap_mib: float = 128.0  # the KV memory cap of the fit test
    fit_max: int = 40  # most sessions the fit test opens

    @classmethod
    def quick(cls) -> ServePlan:
        return cls(
            clients=(1, 4), turns=2, prompt_tokens=500, obs_tokens=40, reply_tokens=8, fit_cap_mib=64, fit_max=12
        )


@dataclass
class AdmissionPlan:
    """What the admission test runs."""

    clients: int = 128  # concurrent conversations
    max_sessions: int = 8  # the server's resident sessions (--max-sessions)
    max_batch: int = 16  # the server's batch (--max-batch)
    turns: int = 3  # requests per conversation
    reply_tokens: int = 16  # max_tokens of each reply
    chunk: int = 128  # the server's prefill chunk: a newcomer's prefill runs one chunk per decode step of the others
    queue_timeout_s: float = 3600.0  # the server's --queue-timeout: the test asks whether admission ever stalls
    # (seconds without tokens), not whether a CPU prefills every newcomer within the default 120 s


BOUND = "bound:query-top-B"  # bench replay's query-specific bound: its name in tables, JSON and --help
