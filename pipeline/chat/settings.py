"""A chat's settings as one object, built at the edge (the CLI's flags, or a Python caller) and handed to
`pipeline.chat.opening.open_chat` unchanged.

`memory` keeps the model and cache options as given (None: not given), since a resumed session compares them
with the settings it was saved with and a --server chat refuses them; `run_config` builds them, once, into the
RunConfig that solve and eval use too (its memory settings become the session's config and its cache's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import CHAT_MAX_NEW_TOKENS, CHAT_MAX_STEPS, SERVER_TIMEOUT_S, RunConfig, chat_config

MEMORY_KEYS = ("model", "policy", "budget", "protocol", "protect", "profile", "device")


@dataclass
class ChatSettings:
    """What one chat (interactive or one-shot) runs with; every field has the CLI flag's default."""

    repo: Path | None = None  # the repository to work on (None: the current dir; a resumed session keeps its own)
    session: str | None = None  # the session's name (None: the repo's folder name, -2, -3... when taken)
    resume: bool = False  # continue a saved session (without `session`: this repo's most recently used one)
    python_env: bool = True  # give the sandbox a Python env of the repo with pytest (built once, cached)
    yolo: bool = False  # run every call without asking
    max_steps: int = CHAT_MAX_STEPS  # most agent steps per request
    max_new_tokens: int = CHAT_MAX_NEW_TOKENS  # most tokens in one reply
    temperature: float = 1.0  # sampling temperature (0: greedy)
    seed: int = 0  # seed of sampling and of the cache (new sessions)
    memory: dict[str, Any] = field(default_factory=dict)  # MEMORY_KEYS as given (missing or None: not given)
    server: str | None = None  # base URL of the OpenAI-compatible server the model runs in (None: a local model)
    api_key: str | None = field(default=None, repr=False)  # the server's key (None: $OPENAI_API_KEY); never saved
    server_timeout: float = SERVER_TIMEOUT_S  # seconds the server may take over one answer, all of it; never saved
    call_format: str = "auto"  # xml | tools | auto (tools with a server; a resumed server chat keeps its own)
    learn: bool = False  # --learn-profile: leaving a chat with no memory profile learns one
    constrain: bool | None = None  # constrained decoding of a local model (None: the model's default)

    def given(self) -> dict[str, Any]:
        """The memory options, every key present (None where not given)."""
        return {k: self.memory.get(k) for k in MEMORY_KEYS}

    def run_config(self) -> RunConfig:
        """The chat's model, memory and limits as one RunConfig, built once (pipeline.config.chat_config): every
        setting checked there, once, its error naming the setting; what `opening` opens the session from."""
        return chat_config(
            seed=self.seed, server=self.server, learn=self.learn, constrain=self.constrain, max_steps=self.max_steps,
            max_new_tokens=self.max_new_tokens, temperature=self.temperature, resume=self.resume,
            call_format=self.call_format, server_timeout=self.server_timeout, **self.given(),
        )  # fmt: skip
