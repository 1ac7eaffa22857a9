"""The options of solve, eval, chat and serve, defined once: each maps onto a `RunConfig` field, or a field of its
`memory` (kvstore.session.config.MemorySettings), and takes its default from there.

`@run_options("model", "policy", ...)` adds the named options to a command and hands the command one `RunConfig`
(argument `cfg`) built from them; adding a knob to the CLI is one `RunConfig` (or `MemorySettings`) field plus one
line in `OPTIONS`. `@raw_options(...)` adds the same options but passes their raw values (chat resumes a saved
config and only overrides what was given). `shared("model")` is one of them as the default of a parameter of a
command with its own config (serve), in its place among that command's options.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from kvstore.session.config import MemorySettings
from pipeline.config import RunConfig, run_memory
from server.config import ServeConfig

_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
MEMORY = tuple(f.name for f in dataclasses.fields(MemorySettings))  # the options that make `RunConfig.memory`

# field -> (type on the command line, typer.Option). The help names the default only where it is not shown.
OPTIONS: dict[str, tuple[Any, Any]] = {
    "dataset": (str | None, typer.Option("--dataset", "-d", help="Task source (default: the built-in tasks).")),
    "model": (
        str,
        typer.Option("--model", "-m", help="Registry name, local model dir or hub id; with --server, a served model."),
    ),
    "policy": (str, typer.Option("--policy", help="KV eviction policy (nexus, snapkv, full, ...).")),
    "budget": (str, typer.Option("--budget", help="Cache budget: tokens per layer, a density (0.25 or 25%), 'none'.")),
    "protocol": (str, typer.Option("--protocol", help="true-eviction or re-prefill.")),
    "protect": (
        str,
        typer.Option("--protect", help="Never evicted (counted in the budget): system+task, system or none."),
    ),
    "profile": (
        str,
        typer.Option(
            "--memory-profile",
            help="Memory profile for the default memory: 'builtin' (the default: the profile shipped for the "
            "built-in agent and this model, if any), 'none', a file or a directory of them (nexus-agent calibrate), "
            "or 'auto': the profile store when it has one (never read unasked). One file also ranks an opening it "
            "does not match by its token prior.",
        ),
    ),
    "sandbox": (str, typer.Option("--sandbox", "-s", help="auto, docker, bwrap, or local (no isolation).")),
    "max_steps": (int | None, typer.Option("--max-steps", help="Step limit (default 5; a replay: the recording's).")),
    "seed": (int, typer.Option("--seed", help="Seed of sampling and of the cache.")),
    "temperature": (float, typer.Option("--temperature", help="Sampling temperature (0 = greedy).")),
    "max_new_tokens": (int, typer.Option("--max-new-tokens", help="Most tokens in one reply.")),
    "replay": (Path | None, typer.Option("--replay", help="Replay this recorded trajectory instead of a model.")),
    "replay_dir": (Path | None, typer.Option("--replay-dir", help="Replay <dir>/<instance_id>[.*].jsonl per task.")),
    "command_timeout": (float, typer.Option("--command-timeout", help="Seconds one tool call may run.")),
    "test_timeout": (float, typer.Option("--test-timeout", help="Seconds grading's test command may run.")),
    "device": (str | None, typer.Option("--device", help="Torch device (default: CUDA when present, else CPU).")),
    "threads": (int | None, typer.Option("--threads", min=1, help="CPU threads (default: cores/workers; 1 if busy).")),
    "workers": (int, typer.Option("--workers", "-w", help="Tasks run at once (one model per worker).")),
    "repo_cache": (
        Path | None,
        typer.Option(
            "--repo-cache", help="Dir of repo mirrors (owner__name) or git bundles (default: $NEXUS_REPO_CACHE)."
        ),
    ),
    "warmup": (
        int,
        typer.Option(
            "--warmup",
            help="Learn a memory profile from the first N tasks (run without one, then calibrated, here or on the "
            "--server); the other tasks use it. 0: off.",
        ),
    ),
    "server": (
        str | None,
        typer.Option(
            "--server",
            help="Base URL (…/v1) of an OpenAI-compatible server all workers share: a `nexus-agent serve`, vLLM, "
            "SGLang (docs/servers.md); --model picks among its models (default: its only one).",
        ),
    ),
    "api_key": (
        str | None,
        typer.Option("--api-key", help="The --server's API key, sent as a Bearer token (default: $OPENAI_API_KEY)."),
    ),
    "server_timeout": (
        float,
        typer.Option(
            "--server-timeout",
            metavar="SECONDS",
            help="Seconds the --server may take over one answer, all of it (connect, every byte of the reply); "
            "past it the request fails, and is retried unless part of a streamed reply was shown.",
        ),
    ),
    "call_format": (
        str,
        typer.Option(
            "--call-format",
            help="How the model calls tools: xml (DeepSWE's <function=...> text), tools (native tool calls), auto "
            "(tools with a --server, a replay's recorded one, else xml).",
        ),
    ),
    "learn": (
        bool,
        typer.Option(
            "--learn-profile/--no-learn-profile",
            help="Learn a memory profile into the profile store from this conversation (a solve run's when it ends, "
            "a chat's when you leave it) when it made a valid tool call and had no profile; later runs use it with "
            "--memory-profile auto; with --server, the server learns it. Off by default.",
        ),
    ),
    "constrain": (
        bool | None,
        typer.Option(
            "--constrain/--no-constrain",
            help="Constrain a local model's replies to the tool-call format, so they always parse (default: on for "
            "the offline default model only).",
        ),
    ),
}


def _default(name: str) -> Any:
    value = getattr(run_memory(), name) if name in MEMORY else _FIELDS[name].default
    return str(value) if name == "budget" and value is not None else value


def _run_config(values: dict[str, Any]) -> RunConfig:
    memory = dataclasses.replace(run_memory(), **{n: v for n, v in values.items() if n in MEMORY})
    return RunConfig(memory=memory, **{n: v for n, v in values.items() if n not in MEMORY})


def shared(name: str, default: Any = ..., help: str | None = None) -> Any:
    """The option `name` as a parameter's default (`policy: str = shared("policy")`): its flags and constraints, its
    default unless `default` is given, its help unless the command says what it means there (`help`)."""
    option = copy.copy(OPTIONS[name][1])
    option.param_decls = (option.default, *option.param_decls)  # as declared for Annotated: the first flag first
    option.default = _default(name) if default is ... else default
    option.help = option.help if help is None else help
    return option


def _with_options(names: tuple[str, ...], defaults: dict[str, Any], build: Callable[[dict[str, Any]], dict]):
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = inspect.signature(fn, eval_str=True).parameters.values()
        own = [p for p in params if p.name != "cfg" and p.kind is not inspect.Parameter.VAR_KEYWORD]
        added = [
            inspect.Parameter(
                n,
                inspect.Parameter.KEYWORD_ONLY,
                default=defaults.get(n, _default(n)),
                annotation=Annotated[OPTIONS[n][0], OPTIONS[n][1]],
            )
            for n in names
        ]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            values = {n: kwargs.pop(n) for n in names}
            return fn(**kwargs, **build(values))

        command.__signature__ = inspect.Signature(own + added)  # type: ignore[attr-defined]
        return command

    return decorate


def run_options(*names: str, **defaults: Any):
    """Add the options `names` to a command, which receives `cfg: RunConfig` built from them."""
    return _with_options(names, defaults, lambda values: {"cfg": _run_config(values)})


def raw_options(*names: str, **defaults: Any):
    """Add the options `names` to a command, which receives their values as keyword arguments."""
    return _with_options(names, defaults, lambda values: values)


# Settings whose flag is not "--" + the field's name with dashes (serve's own; the run options' are in OPTIONS).
_OWN_FLAGS = {
    "chunk_size": "--prefill-chunk",
    "served_name": "--served-name",
    "queue_timeout_s": "--queue-timeout",
    "drain_s": "--drain",
    "interleave_prefill": "--interleave-prefill",
    "max_body_bytes": "--max-body",
    "keep_alive_s": "--keep-alive",
    "header_timeout_s": "--header-timeout",
}


_SERVE = {f.name for f in dataclasses.fields(ServeConfig)}


def flag_of(setting: str) -> str:
    """The command-line flag of a setting (a field of RunConfig, MemorySettings or ServeConfig): `profile` is
    `--memory-profile`, `drain_s` is `--drain`; what a library error names by its setting, the CLI names by this.
    A setting no command has a flag for (a cache option of a `POLICY@key=value` spec: block, engine) keeps its name."""
    if setting in OPTIONS:
        return OPTIONS[setting][1].default
    if setting in _OWN_FLAGS or setting in _SERVE:
        return _OWN_FLAGS.get(setting, "--" + setting.replace("_", "-"))
    return setting
