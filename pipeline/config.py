"""The configuration of one agent run, with every default defined once.

`solve`, `eval` and `chat` flags map onto `RunConfig`'s fields; a Python caller builds one directly.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent.errors import AgentError
from kvstore.defaults import (
    DEFAULT_MODEL,
    DEFAULT_POLICY,
    DEFAULT_PROTECT,
    DEFAULT_PROTOCOL,
    DEFAULT_SESSION_BUDGET,
    PROFILE_SUFFIX,
    PROTECT_MODES,
    parse_budget,
)

DEFAULT_TASK = "nexus-demo__pagekit-1"  # the built-in task `nexus-agent solve` runs with no argument
DEFAULT_MAX_STEPS = 5  # the default run of the small CPU model finishes in minutes (it will not solve the task)


class RunError(AgentError):
    """A run cannot start as asked (bad flag combination, missing replay file, out dir of another run)."""


PROFILE_NEEDS_LOCAL_MODEL = (
    "--memory-profile needs the model in this process; a --server runs its own memory settings "
    "(give the profile to nexus-agent serve --memory-profile)"
)
AUTO_PROFILE = "auto"  # --memory-profile's default: the profile store (pipeline.home), when it holds a profile


def resolve_profile(value: str | Path | None, server: bool = False) -> Path | None:
    """--memory-profile's value as the file or directory of profiles a session reads (kvstore.profile.load_profiles:
    each session takes the profile whose template its opening carries, if any).

    "auto": the profile store when it holds a profile, else none; with a --server none (the server applies its
    own). "none" or None: none. A path: itself, which must exist (with a --server: an error)."""
    if value is None or str(value) == "none":
        return None
    if str(value) == AUTO_PROFILE:
        from pipeline.home import profile_store

        store = profile_store()
        if server or not any(store.glob(f"*{PROFILE_SUFFIX}")):
            return None
        path = store
    elif server:
        raise RunError(PROFILE_NEEDS_LOCAL_MODEL)
    else:
        path = Path(value).expanduser()
    if not path.exists():
        raise RunError(f"--memory-profile {value}: no such file or directory (make one with: nexus-agent calibrate)")
    from kvstore.profile import check_readable

    check_readable(path)  # a corrupt profile stops the run here, not in every task
    return path.resolve()


@dataclass
class RunConfig:
    """What one agent run uses; `solve`, `eval` and `chat` flags map onto these fields one to one."""

    dataset: str | None = None  # task source (None: the built-in tasks)
    model: str = DEFAULT_MODEL  # registry name, local model directory or hub id
    policy: str = DEFAULT_POLICY  # KV eviction policy (kvstore.POLICIES)
    budget: int | float | None = DEFAULT_SESSION_BUDGET  # tokens per layer, or a density in (0, 1]; None = never evict
    protocol: str = DEFAULT_PROTOCOL  # "true-eviction" (one persistent cache) or "re-prefill" (new cache each turn)
    protect: str = DEFAULT_PROTECT  # never evicted, counted in the budget: "system+task", "system" or "none"
    profile: Path | str | None = AUTO_PROFILE  # memory profile file or directory (nexus-agent calibrate); "auto": the
    # profile store when it holds one; "none"/None: none. Resolved to a path or None when the config is made
    sandbox: str = "auto"  # sandbox backend: auto, docker, bwrap, local
    max_steps: int | None = None  # step limit (soft and hard); None: 5 for a local model, the recording's for replay
    seed: int = 0  # seed of sampling and of the cache's randomness
    temperature: float = 1.0  # sampling temperature (DeepSWE evaluates at 1.0); 0 = greedy
    max_new_tokens: int = 256  # most tokens in one reply
    replay: Path | None = None  # replay this recorded trajectory instead of running a model
    replay_dir: Path | None = None  # replay <dir>/<instance_id>*.jsonl (one recording per instance)
    command_timeout: float = 120.0  # seconds one tool call may run
    test_timeout: float = 1800.0  # seconds grading's test command may run
    device: str | None = None  # torch device for the model (None: CUDA when present, else CPU)
    threads: int | None = None  # torch CPU threads (None: cores / workers, 1 when the machine is already busy)
    workers: int = 1  # processes sharing this machine's cores (eval --workers)
    repo_cache: Path | None = None  # dir of repo mirrors (owner__name) or git bundles; None: $NEXUS_REPO_CACHE
    server: str | None = None  # base URL (…/v1) of a running `nexus-agent serve`: the model runs there, shared by
    # every worker (its policy, budget and protocol are the server's); None: load the model in this process
    warmup: int = 0  # eval: the first N tasks run without a memory profile, the others with one calibrated from
    # their conversations (pipeline.warmup); 0: off
    learn: bool = True  # solve: a run with no profile for its agent keeps its conversation, and the second such run
    # learns a profile into the store (pipeline.learning); only with --memory-profile auto

    def __post_init__(self) -> None:
        if isinstance(self.budget, str):
            self.budget = parse_budget(self.budget)
        for name in ("max_steps", "max_new_tokens", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise RunError(f"{name.replace('_', '-')} must be at least 1, got {value}")
        if self.server is not None and self.replaying:
            raise RunError("--server and --replay/--replay-dir exclude each other (a replay runs no model)")
        if self.warmup:
            self._check_warmup()
        self.learn = self.learn and str(self.profile) == AUTO_PROFILE  # learning fills the store auto reads
        self.profile = resolve_profile(self.profile, server=self.server is not None)  # before any task starts
        if self.protect not in PROTECT_MODES:
            raise RunError(f"--protect {self.protect!r}: use one of {', '.join(PROTECT_MODES)}")
        if self.workers < 1:
            raise RunError(f"workers must be at least 1, got {self.workers}")
        if self.temperature < 0 or self.command_timeout <= 0 or self.test_timeout <= 0:
            raise RunError("temperature must be >= 0 and the timeouts > 0")

    def _check_warmup(self) -> None:
        """--warmup learns the run's profile with the model (in this process, or the --server's); the warm-up tasks
        run without one."""
        if self.warmup < 1:
            raise RunError(f"--warmup needs at least 1 task to calibrate from (0: off), got {self.warmup}")
        if self.replaying:
            raise RunError("--warmup calibrates with a model: it excludes --replay-dir")
        if isinstance(self.profile, str):  # as given; the learned profile comes as a Path (pipeline.warmup)
            if self.profile != AUTO_PROFILE:
                raise RunError("--warmup learns this run's memory profile: leave --memory-profile at auto")
            self.profile = None

    def to_dict(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}

    @property
    def lacks_profile(self) -> bool:
        """The default memory runs with this process's model and no memory profile, though one could be calibrated
        for it (solve and eval say how)."""
        local = self.server is None and not self.replaying
        return local and self.policy == DEFAULT_POLICY and self.profile is None and not self.warmup

    @property
    def learns(self) -> bool:
        """Whether a finished run may learn a memory profile (pipeline.learning): learning on, the default memory,
        the model in this process."""
        return self.learn and self.server is None and not self.replaying and self.policy == DEFAULT_POLICY

    @property
    def teaches_server(self) -> bool:
        """Whether a finished run may teach its --server a memory profile (pipeline.learning.learn_served; the server
        decides the rest: its memory, its profile directory, what its session matched)."""
        return self.learn and self.server is not None and not self.replaying

    @property
    def replaying(self) -> bool:
        return self.replay is not None or self.replay_dir is not None

    def model_label(self, served: dict[str, Any] | None = None) -> str:
        """The `model_name_or_path` of SWE-bench predictions: model and cache settings, filesystem-safe.

        `served`: the settings a `nexus-agent serve` reports (pipeline.backends.server_settings); under --server
        they, not this config's model/policy/budget/protocol, are what ran."""
        if self.replaying:
            return "nexus-agent__replay"
        if served is not None and "policy" in served:
            model, policy, budget, protocol = (served[k] for k in ("model", "policy", "budget", "protocol"))
            protect, profile = served.get("protect", "none"), served.get("memory_profile")
        elif served is not None:  # another OpenAI-compatible server: only its model id is known
            return f"nexus-agent__{_safe(served['id'])}__server"
        else:
            model, policy, budget, protocol, protect = self.model, self.policy, self.budget, self.protocol, self.protect
            profile = self.profile
        suffix = "" if protect == "none" else f"-protect-{protect}"  # unprotected labels stay as they were
        if self.warmup:  # every task of the batch, before and after its profile was learned
            suffix += f"-warmup{self.warmup}"
        elif profile is not None:  # a profile file by its stem, a profile folder by its name
            suffix += f"-profile-{Path(profile).stem}"
        return f"nexus-agent__{_safe(model)}__{policy}-{budget}-{protocol}{suffix}"


def _safe(model: str) -> str:
    """A model name as one path component (the last part of a directory or hub id)."""
    return Path(model).name if os.sep in model else model
