"""The configuration of one agent run, with every default defined once.

`solve`, `eval` and `chat` flags map onto `RunConfig`'s fields; a Python caller builds one directly (chat through
`chat_config`, with chat's own defaults). The settings tree, built once at the edge and passed unchanged:
RunConfig -> `memory` (MemorySettings: model, policy, budget, ... validated there) -> `session_config()` (a kvstore
SessionConfig, whose `cache` is the cache's typed config, its policy class resolved) -> the session's caches.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from agent.calls import AUTO, CALL_FORMATS
from kvstore.defaults import DEFAULT_POLICY
from kvstore.session.config import MemorySettings, SessionConfig
from pipeline.errors import RunError, RunSettingError
from pipeline.profiles.store import AUTO_PROFILE, BUILTIN_PROFILE, CLIENT, LOCAL, NO_PROFILE, resolve_profile

DEFAULT_TASK = "nexus-demo__pagekit-1"  # the built-in task `nexus-agent solve` runs with no argument
DEFAULT_MAX_STEPS = 5  # the default run of the small CPU model finishes in minutes (it will not solve the task)
DEFAULT_MAX_NEW_TOKENS = 256  # a solve or eval reply is one tool call with a little reasoning before it
SERVER_TIMEOUT_S = 600.0  # a --server's whole answer to one turn (a long reply of a big model, queued behind others)
# chat's defaults differ from a run's on purpose: a chat request is open-ended and a person watches it and can stop
# it (Ctrl-C, or refusing a command), so it may take more steps than a batch run, whose default must finish in
# minutes on a CPU; and its replies speak to that person (explanations, summaries), not only to the tools
CHAT_MAX_STEPS = 20  # most agent steps per chat request
CHAT_MAX_NEW_TOKENS = 512  # most tokens in one chat reply


def run_memory(**settings: Any) -> MemorySettings:
    """A run's memory settings: the session defaults (the shipped profile of the built-in agent for the run's model,
    "builtin"; "none", a file, a folder or "auto", the profile store, when asked for), but for `settings`
    (`RunConfig(memory=run_memory(policy="snapkv", budget=64))`)."""
    return MemorySettings(**{"profile": BUILTIN_PROFILE, **settings})


@dataclass
class RunConfig:
    """What one agent run uses; `solve`, `eval` and `chat` flags map onto these fields (and `memory`'s) one to one."""

    dataset: str | None = None  # task source (None: the built-in tasks)
    memory: MemorySettings = field(default_factory=run_memory)  # the model and its KV memory (model, policy, budget,
    # protocol, protect, memory profile, seed, device); profile "none" (the default) or None: none; "auto": the
    # profile store when it holds one; resolved to a path or None when the config is made (pipeline.profiles.store)
    sandbox: str = "auto"  # sandbox backend: auto, docker, bwrap, local
    max_steps: int | None = None  # step limit (soft and hard); None: 5 for a local model, the recording's for replay
    temperature: float = 1.0  # sampling temperature (DeepSWE evaluates at 1.0); 0 = greedy
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS  # most tokens in one reply
    replay: Path | None = None  # replay this recorded trajectory instead of running a model
    replay_dir: Path | None = None  # replay <dir>/<instance_id>*.jsonl (one recording per instance)
    command_timeout: float = 120.0  # seconds one tool call may run
    test_timeout: float = 1800.0  # seconds grading's test command may run
    threads: int | None = None  # torch CPU threads (None: cores / workers, 1 when the machine is already busy)
    workers: int = 1  # processes sharing this machine's cores (eval --workers)
    repo_cache: Path | None = None  # dir of repo mirrors (owner__name) or git bundles; None: $NEXUS_REPO_CACHE
    server: str | None = None  # base URL (…/v1) of a running `nexus-agent serve`: the model runs there, shared by
    # every worker (its policy, budget and protocol are the server's); None: load the model in this process
    warmup: int = 0  # eval: the first N tasks run without a memory profile, the others with one calibrated from
    # their conversations (pipeline.profiles.warmup); 0: off
    learn: bool = False  # solve, chat (--learn-profile): a run with no profile for its agent that made a valid tool
    # call teaches the profile store one when it ends (pipeline.profiles.learn); later runs use it only when asked
    # (--memory-profile auto)
    constrain: bool | None = None  # a local model's replies follow the call grammar, so they always parse
    # (agent.call_grammar, docs/constrained.md); None: on for the offline default model only
    call_format: str = AUTO  # how the model calls tools (agent.calls): xml (DeepSWE's <function=...> text), tools
    # (native tool calls); auto: tools with a --server (vLLM, SGLang, a nexus-agent serve), a replay's recorded
    # format, else xml (pipeline.backends.call_format_of)
    api_key: str | None = field(default=None, repr=False)  # the --server's key, sent as a Bearer token; None: the
    # environment's $OPENAI_API_KEY (agent.backends.openai_compat); never written to a run's files
    server_timeout: float = SERVER_TIMEOUT_S  # seconds the --server may take over one turn's request, all of it
    # (connect, every read of the answer, a stream to its end; agent.backends.client), each retry anew

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_new_tokens", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise RunSettingError(name, f"must be at least 1, got {value}")
        if self.server is not None and self.replaying:
            raise RunError("--server and --replay/--replay-dir exclude each other (a replay runs no model)")
        if self.warmup:
            self._check_warmup()
        if self.learn:
            self._check_learn()
        mode = CLIENT if self.server is not None else LOCAL
        profile = resolve_profile(self.memory.profile, mode, self.memory.model)  # before any task
        self.memory = replace(self.memory, profile=profile)  # a copy: the caller's settings stay as given
        if self.workers < 1:
            raise RunSettingError("workers", f"must be at least 1, got {self.workers}")
        if not self.temperature >= 0:  # NaN too
            raise RunSettingError("temperature", f"must be at least 0, got {self.temperature}")
        for name in ("command_timeout", "test_timeout"):
            if not getattr(self, name) > 0:
                raise RunSettingError(name, f"must be more than 0 seconds, got {getattr(self, name)}")
        if not 0 < (timeout := self.server_timeout) < math.inf:
            raise RunSettingError("server_timeout", f"must be more than 0 seconds (and finite), got {timeout}")
        self._check_call_format()

    def _check_call_format(self) -> None:
        """A known format; native tool calls exclude the call grammar, which constrains replies to the XML format."""
        if self.call_format not in (AUTO, *CALL_FORMATS):
            raise RunSettingError("call_format", f"{self.call_format}: use one of auto, {', '.join(CALL_FORMATS)}")
        if self.call_format == "tools" and self.constrain and self.server is None:
            raise RunError("--constrain makes replies follow the XML call grammar: it needs --call-format xml")

    def _check_warmup(self) -> None:
        """--warmup learns the run's profile with the model (in this process, or the --server's); the warm-up tasks
        run without one."""
        if self.warmup < 1:
            raise RunSettingError("warmup", f"needs at least 1 task to calibrate from (0: off), got {self.warmup}")
        if self.replaying:
            raise RunError("--warmup calibrates with a model: it excludes --replay-dir")
        if isinstance(self.memory.profile, str):  # as given; a learned one is a Path (pipeline.profiles.warmup)
            if self.memory.profile not in (AUTO_PROFILE, NO_PROFILE, BUILTIN_PROFILE):
                raise RunError("--warmup learns this run's memory profile: leave --memory-profile out")
            self.memory = replace(self.memory, profile=None)

    def _check_learn(self) -> None:
        """--learn-profile teaches the profile store (or the --server) a profile of the default memory's model."""
        if self.replaying:
            raise RunError("--learn-profile learns with a model: it excludes --replay/--replay-dir")
        if self.server is None and self.memory.policy != DEFAULT_POLICY:
            raise RunError(f"--learn-profile learns a profile of the default memory: leave --policy {DEFAULT_POLICY}")
        if str(self.memory.profile) not in (AUTO_PROFILE, NO_PROFILE, BUILTIN_PROFILE):
            raise RunError("--learn-profile learns into the profile store: give no --memory-profile file (or 'auto')")

    def to_dict(self) -> dict[str, Any]:
        """The settings as one flat record (report.json's `config`, run.json): the memory settings by name."""
        flat = {"dataset": self.dataset, **self.memory.settings()}
        flat |= {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("dataset", "memory", "api_key")}
        return {k: str(v) if isinstance(v, Path) else v for k, v in flat.items()}

    def session_config(self) -> SessionConfig:
        """The kvstore session a local run opens (pipeline.backends.new_session): its memory settings as they are,
        built once into the session's config and its cache's (`SessionConfig.cache`)."""
        return SessionConfig.of(self.memory)

    @property
    def lacks_profile(self) -> bool:
        """The default memory runs with this process's model and no memory profile, though one could be calibrated
        for it (solve and eval say how)."""
        local = self.server is None and not self.replaying
        return local and self.memory.policy == DEFAULT_POLICY and self.memory.profile is None and not self.warmup

    @property
    def learns(self) -> bool:
        """Whether a finished run may learn a memory profile (pipeline.profiles.learn): learning on, the default
        memory, the model in this process."""
        return self.learn and self.server is None and not self.replaying and self.memory.policy == DEFAULT_POLICY

    @property
    def teaches_server(self) -> bool:
        """Whether a finished run may teach its --server a memory profile (pipeline.profiles.learn.learn_served; the
        server decides the rest: its memory, its profile directory, what its session matched)."""
        return self.learn and self.server is not None and not self.replaying

    @property
    def server_model(self) -> str | None:
        """The served model --model names under --server; None (the default model left as it is): the only one the
        server serves."""
        return None if self.memory.model == run_memory().model else self.memory.model

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
            ran = served | {"protect": served.get("protect", "none"), "profile": served.get("memory_profile")}
        elif served is not None:  # another OpenAI-compatible server: only its model id is known
            return f"nexus-agent__{_safe(served['id'])}__server"
        else:
            ran = self.memory.settings()
        model, policy, budget, protocol, protect, profile = (
            ran[k] for k in ("model", "policy", "budget", "protocol", "protect", "profile")
        )
        suffix = "" if protect == "none" else f"-protect-{protect}"  # unprotected labels stay as they were
        if self.warmup:  # every task of the batch, before and after its profile was learned
            suffix += f"-warmup{self.warmup}"
        elif profile is not None:  # a profile file by its stem, a profile folder by its name
            suffix += f"-profile-{Path(profile).stem}"
        return f"nexus-agent__{_safe(model)}__{policy}-{budget}-{protocol}{suffix}"


def _safe(model: str) -> str:
    """A model name as one path component (the last part of a directory or hub id)."""
    return Path(model).name if os.sep in model else model


def chat_config(
    *,
    seed: int = 0,
    server: str | None = None,
    learn: bool = False,
    constrain: bool | None = None,
    max_steps: int = CHAT_MAX_STEPS,
    max_new_tokens: int = CHAT_MAX_NEW_TOKENS,
    temperature: float = 1.0,
    resume: bool = False,
    call_format: str = AUTO,
    server_timeout: float = SERVER_TIMEOUT_S,
    **memory: Any,
) -> RunConfig:
    """chat's settings as one RunConfig, built once from its options (`memory`: the MemorySettings fields chat
    takes, None where not given: the session defaults apply, a resumed session keeps its saved ones, see
    `memory_conflicts`). As chat decides: a resumed session keeps the profile it started with (`auto` is not read
    again); --learn-profile applies only with no profile file, and on a local model only to the default memory."""
    given = chat_given(memory, resume)
    learn = learn and str(memory.get("profile") or NO_PROFILE) in (AUTO_PROFILE, NO_PROFILE, BUILTIN_PROFILE)
    learn = learn and (server is not None or given.get("policy", DEFAULT_POLICY) == DEFAULT_POLICY)
    return RunConfig(
        memory=run_memory(**given, seed=seed), server=server, learn=learn, constrain=constrain,
        max_steps=max_steps, max_new_tokens=max_new_tokens, temperature=temperature, call_format=call_format,
        server_timeout=server_timeout,
    )  # fmt: skip


def chat_given(memory: dict[str, Any], resume: bool) -> dict[str, Any]:
    """The memory settings a chat's user gave that count (None: not given). A resumed session keeps the profile it
    started with: `auto` (the store is not read again) and `builtin` (the default) are not given to it."""
    given = {name: value for name, value in memory.items() if value is not None}
    if resume and str(given.get("profile")) in (AUTO_PROFILE, BUILTIN_PROFILE):
        del given["profile"]
    return given


def memory_conflicts(memory: MemorySettings, saved: MemorySettings, given: list[str]) -> dict[str, tuple[Any, Any]]:
    """The settings among `given` (the memory options a user gave) whose value in `memory` differs from a saved
    session's: setting -> (given, saved). A resumed session refuses them; a device may change."""
    values = {name: (_text(getattr(memory, name)), _text(getattr(saved, name))) for name in given if name != "device"}
    return {name: pair for name, pair in values.items() if pair[0] != pair[1]}


def _text(value: Any) -> Any:
    """A path as the text a saved session holds (kvstore.session.config.SessionConfig keeps its profile as text)."""
    return str(value) if isinstance(value, Path) else value
