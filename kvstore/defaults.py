"""The defaults of the cache and the session, defined once (no torch import: the CLI reads them for --help).

Every other module (kvstore's configs and MemorySettings, which runs and the server nest, the CLI's options, the
benchmarks) takes its default from here, and every budget goes through `check_budget` (text first through
`parse_budget`).
"""

from __future__ import annotations

from kvstore.errors import SettingError

ENGINES = ("static", "eager")  # the KV storage engines of kvstore/cache/buffers.py (light: bench --help lists them)

DEFAULT_MODEL = "smollm2-135m"  # the offline default model (a GGUF inside a PyPI package; see kvstore.models.registry)
DEFAULT_POLICY = "nexus-agent"  # eviction policy of a new cache or session: the measured default (docs/memory.md)
DEFAULT_PROTECT = "none"  # what of the opening a session never evicts: "system+task", "system", "none" (docs/memory.md)
PROTECT_MODES = ("system+task", "system", "none")  # the values of MemorySettings.protect / --protect
DEFAULT_PROTOCOL = "true-eviction"  # one persistent cache per session ("re-prefill": a new cache each turn)
DEFAULT_DENSITY = 0.2  # budget of `make_cache` when none is given: the paper's 20% (80% of the tokens evicted)
DEFAULT_SESSION_BUDGET = 2048  # tokens per layer of an agent session (solve, eval, chat)
PROFILE_SUFFIX = ".pt"  # memory-profile files: what a profile directory (the store) holds (kvstore.profiles.profile)

_NO_BUDGET = ("none", "full")


def describe_memory(
    policy: str, budget: object, protocol: str, protect: str = DEFAULT_PROTECT, profile: object = None
) -> str:
    """A session's memory settings for people, the same everywhere (live views, chat status, serve banner)."""
    text = f"{policy}, budget {budget}, {protocol}, protect {protect}"
    return text if profile is None else f"{text}, memory profile {profile}"


def parse_budget(text: str | None) -> int | float | None:
    """A budget given as text: '2048' tokens per layer, '0.25' or '25%' a density, 'none'/'full' never evict."""
    if text is None or text.strip().lower() in _NO_BUDGET:
        return None
    raw = text.strip()
    try:
        if raw.endswith("%"):
            value: int | float = float(raw[:-1]) / 100
        elif any(c in raw for c in ".eE"):
            value = float(raw)
        else:
            value = int(raw)
    except ValueError:
        value = -1
    return check_budget(value, shown=repr(text))


def check_budget(value: int | float | None, shown: str | None = None) -> int | float | None:
    """The one check of a budget, given as text (`parse_budget`) or as a number (MemorySettings, CacheConfig): an int
    > 0 tokens per layer, a float in (0, 1] a density, None never evict; anything else is refused in one message that
    names the setting (`shown`: the value as the user wrote it)."""
    if value is None or isinstance(value, float) and 0 < value <= 1:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    shown = repr(value) if shown is None else shown
    raise SettingError(
        "budget", f"{shown}: give tokens per layer (e.g. 2048), a density in (0, 1] (e.g. 0.25 or 25%), or 'none'"
    )
