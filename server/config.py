"""The configuration of `nexus-agent serve`, every default defined once, and the parsing of its size flags."""

from __future__ import annotations

import math
import re
import traceback
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kvstore.defaults import PROFILE_SUFFIX
from kvstore.errors import KVStoreError
from kvstore.session.config import MemorySettings, SessionConfig
from server.errors import ServeError, ServeSettingError

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20}
_UNITS |= {"g": 2**30, "gb": 2**30, "gib": 2**30}
PARK_MODES = ("disk", "host")


def shutting_down() -> ServeError:
    """What a request still waiting or decoding gets once the server stops (its stream: an error event)."""
    return ServeError("the server is shutting down; retry against its next start", 503, "server_shutdown")


def internal_error(exc: BaseException, cause: str = "internal_error") -> ServeError:
    """What a request gets for an exception nothing expected (its traceback goes to stderr): HTTP 500."""
    traceback.print_exception(exc)
    return ServeError(f"internal error: {type(exc).__name__}: {exc}", 500, "internal_error", cause)


def request_failed(exc: BaseException, cause: str) -> ServeError:
    """What one request gets when a step on its data raised (`cause`: the step, for the metrics): a ServeError as it
    is, a kvstore error (a conversation the model cannot take) as a 400, anything else as a 500."""
    if isinstance(exc, ServeError):
        return exc
    if isinstance(exc, KVStoreError):
        return ServeError(str(exc), 400, cause=cause)
    return internal_error(exc, cause)


def scheduler_failed(exc: BaseException) -> ServeError:
    """What every request gets once the scheduler thread has died (the server then shuts down, exit status 2)."""
    return ServeError(
        f"the server's scheduler failed ({type(exc).__name__}: {exc}); the server is shutting down: retry against "
        "its next start", 503, "server_shutdown", "scheduler_failed",
    )  # fmt: skip


@dataclass
class ServeConfig:
    """What one server process holds and how it shares it among sessions."""

    host: str = "127.0.0.1"  # interface to listen on
    port: int = 8000  # TCP port (0: any free port)
    memory: MemorySettings = field(default_factory=MemorySettings)  # every session's: the model (one per server),
    # policy, budget (per session), protocol, protect, memory profile (a file, or a directory openings are matched
    # against and POST /v1/nexus/profiles saves to), seed (a request's "seed" overrides it for new sessions), device
    served_name: str | None = None  # the model id clients ask for (None: the --model value)
    chunk_size: int = 512  # prefill chunk in tokens (evicted after each; the default memory's prefill_slack: once)
    interleave_prefill: bool = True  # a newcomer's prefill runs one chunk per decode step of the others (False: whole)
    dtype: str | None = None  # "bf16" | "fp16" | "fp32" (None: bf16 where supported, else fp32)
    threads: int | None = None  # torch CPU threads (None: all cores, 1 on a busy machine)
    max_sessions: int = 64  # most resident sessions; past it one is parked to disk (server.admission says which;
    # a request waits for a slot, never refused for want of one)
    max_batch: int = 16  # most sessions decoding in one batched forward; more wait their turn
    memory_cap: int | None = None  # bytes of KV all resident sessions may hold (None: no cap); idle ones are parked
    park: str = "disk"  # where idle sessions go under memory pressure: "disk" (session files) or "host" (CPU RAM)
    park_dir: Path | None = None  # folder of parked sessions, kept across restarts: idle sessions are parked there at
    # shutdown and adopted at start (None: a temporary folder, deleted at close)
    park_quota: int | None = 10 * 2**30  # bytes of parked sessions (files on disk plus tensors in host memory); past
    # it the least recently used are closed
    profile_max_bytes: int = 64 * 2**20  # largest profile POST /v1/nexus/profiles takes, sent or stored, inflated
    max_profiles: int = 256  # most profile files the profile directory may hold (a new one past it: HTTP 507)
    max_profile_conversations: int = 32  # most conversations one POST /v1/nexus/profiles calibrates from (more:
    # HTTP 400); each costs a replay on the model (a QA pass's 1,000 held one request 253 s)
    queue_timeout_s: float = 120.0  # seconds a request may wait for memory or a batch slot before HTTP 503
    drain_s: float = 30.0  # at shutdown, seconds the turns already accepted (decoding or queued) may take to finish
    # before they are cut (0: cut at once); no new work is taken meanwhile
    session_ttl_s: float = 3600.0  # idle sessions older than this are closed (their memory and files freed)
    max_new_tokens: int = 1024  # reply length when a request gives no max_tokens
    api_key: str | None = field(default=None, repr=False)  # clients must send "Authorization: Bearer KEY" (None: open)
    tls_cert: Path | None = None  # PEM certificate (chain): serve HTTPS (None: plain HTTP; server.tls)
    tls_key: Path | None = None  # PEM key of tls_cert (None: the certificate file holds it)
    backlog: int = 2048  # connections the kernel queues before the server accepts them
    max_connections: int = 1024  # open connections served at once; a request past it gets HTTP 503
    max_body_bytes: int = 32 * 2**20  # largest request body; a larger one gets HTTP 413 (Content-Length or as read)
    keep_alive_s: float = 5.0  # an idle keep-alive connection is closed after this many seconds
    header_timeout_s: float = 10.0  # a request's headers (and then its body) must arrive within this, else closed/408

    def __post_init__(self) -> None:
        if self.park not in PARK_MODES:
            raise ServeSettingError("park", f"{self.park!r}: use one of {', '.join(PARK_MODES)}")
        for name in ("max_sessions", "max_batch", "max_new_tokens", "chunk_size", "max_profile_conversations"):
            if getattr(self, name) < 1:
                raise ServeSettingError(name, f"must be >= 1, got {getattr(self, name)}")
        for name in ("backlog", "max_connections", "max_body_bytes", "keep_alive_s", "header_timeout_s",
                     "queue_timeout_s", "session_ttl_s"):  # fmt: skip
            if not getattr(self, name) > 0:  # NaN too: a timeout of NaN seconds never passes
                raise ServeSettingError(name, f"must be positive, got {getattr(self, name)}")
        for name in ("park_quota", "profile_max_bytes", "max_profiles"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ServeSettingError(name, f"must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.drain_s < math.inf:  # NaN and infinity too: a drain always ends
            raise ServeSettingError("drain_s", f"must be a number of seconds, 0 or more, got {self.drain_s}")
        if self.memory_cap is not None and self.memory_cap < 1:
            raise ServeSettingError("memory_cap", f"must be positive, got {self.memory_cap}")
        if self.tls_key is not None and self.tls_cert is None:
            raise ServeSettingError("tls_key", "needs a tls_cert (the certificate the key belongs to)")
        if self.api_key is not None and not self.api_key.strip():
            raise ServeSettingError("api_key", "is empty: give the key clients must send, or none")

    @property
    def model_id(self) -> str:
        return self.served_name or self.memory.model

    def session_config(self) -> SessionConfig:
        """What every session of this server opens with, built once (the scheduler holds it; a request's seed
        replaces its seed): the memory settings, the prefill chunk and dtype, the fallback tool template (every
        served model takes tools, docs/server.md), and a density budget (--budget 0.2) that follows each
        conversation as it grows (density x its tokens at each turn's prefill, never below what the policy must
        keep), where a local run fixes it from the first prompt."""
        grows = {"density_grows": True} if isinstance(self.memory.budget, float) else {}
        return SessionConfig.of(
            self.memory,
            chunk_size=self.chunk_size,
            dtype=self.dtype,
            cache_options=grows,
            tool_fallback=True,
            skip_unreadable_profiles=True,
        )

    def cache_settings(self) -> dict[str, Any]:
        """What every session of this server runs with (reported in /v1/models, so clients label runs by it)."""
        m = self.memory
        return {
            "model": m.model, "policy": m.policy, "budget": m.budget, "protocol": m.protocol,
            "protect": m.protect, "chunk_size": self.chunk_size, "seed": m.seed,
            "memory_profile": self._profiles_in_use(),
            "profile_directory": m.profile is not None and Path(m.profile).is_dir(),  # POST /v1/nexus/profiles
            "interleave_prefill": self.interleave_prefill,
        }  # fmt: skip

    def _profiles_in_use(self) -> str | None:
        """The profile file, or the profile directory while it holds a profile (as a local run's `auto` reads the
        store only then), so that clients label runs alike; None otherwise."""
        if self.memory.profile is None:
            return None
        path = Path(self.memory.profile)
        return str(path) if not path.is_dir() or any(path.glob(f"*{PROFILE_SUFFIX}")) else None

    def to_dict(self) -> dict[str, Any]:
        """The settings, the memory settings by name, with the API key only as whether one is required (never the key
        itself)."""
        flat = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "memory"} | self.memory.settings()
        out = {k: str(v) if isinstance(v, Path) else v for k, v in flat.items()}
        return out | {"api_key": self.api_key is not None}


def parse_size(text: str | None) -> int | None:
    """A byte size: "none", a number of bytes, or a number with a unit (512MiB, 2G, 300k)."""
    if text is None or text.strip().lower() in ("", "none"):
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ServeError(f"size {text!r}: give bytes or a number with a unit, e.g. 512MiB, 2GiB, 300k")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
