"""Pick the model backend a run asks for: a recorded trajectory to replay, a `nexus-agent serve` server (shared by
every worker), or a local model over a kvstore Session.

A process loads each model once (`eval` workers solve many tasks with one model); every task gets a fresh Session.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import try_to_load_from_cache
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from agent.backends.client import API_KEY_ENV, ServerClient, ServerError, tls_hint
from agent.backends.local import LocalModel
from agent.backends.openai_compat import OpenAICompatConfig, OpenAICompatModel
from agent.backends.replay import ReplayModel, load_recording
from agent.calls import AUTO
from agent.calls_tools import tool_schemas
from agent.prompts import initial_messages
from agent.protocols import ModelBackend
from kvstore.defaults import describe_memory
from kvstore.errors import KVStoreError
from kvstore.models.registry import DEFAULT_MODEL, hub_offline, load_model, resolve
from kvstore.policies import policy_defaults
from kvstore.session.session import Session
from pipeline.config import RunConfig
from pipeline.errors import RunError

PROFILE_ANSWER_MAX_BYTES = 96 * 2**20  # a /v1/nexus/profiles answer carries the profile in base64: up to a serve's
# largest (its profile_max_bytes, 64 MiB) and a third more
_LOADED: dict[tuple[str, str | None], tuple[Any, Any]] = {}  # (model, device) -> (model, tokenizer), per process


def make_backend(
    cfg: RunConfig, instance_id: str, on_token: Callable[[str], None] | None = None
) -> tuple[ModelBackend, dict[str, Any] | None]:
    """The backend for one task, and the recorded agent config (with its "call_format") when replaying (else None)."""

    if cfg.replay is not None or cfg.replay_dir is not None:
        path = cfg.replay if cfg.replay is not None else replay_file(cfg.replay_dir, instance_id)
        recorded = load_recording(path)  # AgentError, one line, for a file a replay cannot run
        task_id = recorded.header.get("task_id")
        if task_id and task_id != instance_id:
            raise RunError(f"{path} records task {task_id}, not {instance_id}")
        meta = recorded.header.get("meta") or {}  # the recording's call format replays with it (--call-format auto)
        return ReplayModel.from_file(path), {
            **(recorded.header.get("config") or {}),
            "call_format": meta.get("call_format", "xml"),
        }
    if cfg.server is not None:
        model = served(cfg)["id"]
        config = OpenAICompatConfig(
            model=model, base_url=cfg.server, seed=cfg.memory.seed, api_key=cfg.api_key, timeout_s=cfg.server_timeout
        )
        backend = OpenAICompatModel(config)
        backend.name = describe_model(cfg)
        return backend, None

    constrain = False if cfg.call_format == "tools" else cfg.constrain  # the call grammar is XML's
    return LocalModel(new_session(cfg), on_token=on_token, constrain=constrain), None


def call_format_of(cfg: RunConfig, recorded: dict[str, Any] | None = None) -> str:
    """The call format a run uses: --call-format's, or for auto: a replay's recorded one; tools for any --server
    (vLLM, SGLang and a nexus-agent serve all take `tools` with `tool_choice: required`, and a serve constrains the
    forced call by its grammar, so even the offline default model calls a tool each step); else xml (the local
    model's call grammar is DeepSWE's format)."""
    if cfg.call_format != AUTO:
        return cfg.call_format
    if cfg.replaying:
        return (recorded or {}).get("call_format", "xml")
    return "tools" if cfg.server is not None else "xml"


def served(cfg: RunConfig) -> dict[str, Any]:
    """server_settings of the run's --server, for the model its --model names (or the only one), with its key,
    asked within --server-timeout when that is shorter than MODELS_TIMEOUT_S."""
    return server_settings(cfg.server, cfg.server_model, cfg.api_key, min(MODELS_TIMEOUT_S, cfg.server_timeout))


def served_model(url: str, model: str | None = None, api_key: str | None = None) -> str:
    """The model id an OpenAI-compatible server at `url` serves (`model`, or its only one); RunError if none."""
    return server_settings(url, model, api_key)["id"]


MODELS_TIMEOUT_S = 30.0  # the most a server's GET /models may take, all of it (a --server-timeout below it: that)


@functools.lru_cache(maxsize=8)
def server_settings(
    url: str, model: str | None = None, api_key: str | None = None, timeout_s: float = MODELS_TIMEOUT_S
) -> dict[str, Any]:
    """What the server at `url` serves as `model` (None: its only model): {"id"} plus, from a `nexus-agent serve`,
    the cache settings every session runs with ("model", "policy", "budget", "protocol", ...: the `nexus` field of
    /v1/models). Asked once per process; RunError, one line, when no OpenAI-compatible server answers or the model
    is not one it serves."""
    entries = _served_models(url, api_key, timeout_s)
    ids = [str(e.get("id")) for e in entries]
    if model is not None and model not in ids:
        raise RunError(f"--model {model}: the server at {url} does not serve it; it serves: {', '.join(ids)}")
    if model is None and len(ids) != 1:
        listed = f"serves {', '.join(ids)}" if ids else "lists no model"
        raise RunError(f"--server {url} {listed}: name one with --model" if ids else f"--server {url} {listed}")
    entry = entries[ids.index(model) if model is not None else 0]
    return {**(entry.get("nexus") or {}), "id": entry["id"]}


def _served_models(url: str, api_key: str | None, timeout_s: float) -> list[dict[str, Any]]:
    """The `data` of the server's GET /models, asked within `timeout_s` per attempt."""

    client = ServerClient(url, api_key, timeout_s=timeout_s)
    try:
        entries = client.get("/models")["data"]
        if not isinstance(entries, list) or not all(isinstance(e, dict) and "id" in e for e in entries):
            raise ValueError("its /models answer is not a list of models")
        return entries
    except ServerError as exc:
        if exc.status is None:
            if hint := tls_hint(url, exc.__context__ or exc):
                raise RunError(f"--server {url}: cannot connect ({exc.detail}); {hint}") from None
            raise _no_server(url, exc.detail) from None
        if exc.status not in (401, 403):
            raise RunError(f"--server {url}: /models answered HTTP {exc.status}") from None
        given = "the key given is not the one it takes" if client.key else f"${API_KEY_ENV} is not set"
        raise RunError(
            f"--server {url}: the server needs an API key and {given}; give the key the server was started with "
            "(a nexus-agent serve's NEXUS_AGENT_API_KEY, a vLLM's --api-key) as --api-key or in ${API_KEY_ENV}"
        ) from None
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise _no_server(url, str(exc)) from None


def _no_server(url: str, why: str) -> RunError:
    return RunError(
        f"--server {url}: no OpenAI-compatible server answers there ({why}); start one with `nexus-agent serve` "
        "and give its base URL, e.g. http://127.0.0.1:8000/v1"
    )


def post_profiles(server: str, body: dict[str, Any], api_key: str | None = None) -> dict[str, Any]:
    """POST /v1/nexus/profiles of a `nexus-agent serve` (server/profiles.py): its answer, or a RunError with the
    server's message. A calibration runs on the server's model between its sessions' steps: minutes, not seconds."""

    try:
        client = ServerClient(server, api_key, timeout_s=3600, max_answer_bytes=PROFILE_ANSWER_MAX_BYTES)
        return client.post("/nexus/profiles", body)
    except ServerError as exc:
        if exc.status is None:
            raise RunError(f"no answer from the server at {server} ({exc})") from None
        message = exc.detail or f"HTTP {exc.status}"
        raise RunError(f"the server at {server} did not take the memory profile: {message}") from None


def describe_model(cfg: RunConfig) -> str:
    """The model and cache settings a run actually uses, for people: the server's under --server."""
    if cfg.replaying:
        return "replay"
    if cfg.server is None:
        return f"{cfg.memory.model} ({cfg.memory.describe()})"
    served_now = served(cfg)
    if "policy" not in served_now:  # another OpenAI-compatible server: its cache is its own business
        return f"{served_now['id']} at {cfg.server}"
    s = served_now
    memory = describe_memory(s["policy"], s["budget"], s["protocol"], s.get("protect", "none"))
    return f"{s['model']} ({memory}) at {cfg.server}"


def run_label(cfg: RunConfig) -> str:
    """`model_name_or_path` of the run's predictions: under --server, the model and cache settings the server runs
    (the client's --model/--policy/--budget do not apply there); `nexus-agent__server` if it cannot be asked."""
    if cfg.server is None or cfg.replaying:
        return cfg.model_label()
    try:
        return cfg.model_label(served(cfg))
    except RunError:
        return "nexus-agent__server"


def new_session(cfg: RunConfig):
    """A fresh kvstore Session on the (once per process) loaded model."""

    config = cfg.session_config()
    set_threads(cfg.threads, cfg.workers)
    model, tokenizer = load_once(cfg.memory.model, cfg.memory.device)
    return Session(model, tokenizer, config)


def set_threads(threads: int | None, workers: int = 1) -> int:
    """Set torch's CPU threads: as asked, else this process's share of the cores, 1 on an overloaded machine.

    Oversubscribed OpenMP threads spin against each other: on a busy machine one thread decodes many times faster.
    """

    if threads is None:
        cores = os.cpu_count() or 1
        busy = os.getloadavg()[0] >= cores
        threads = 1 if busy else max(1, cores // max(1, workers))
    torch.set_num_threads(threads)
    return threads


def load_once(name: str, device: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) for `name`, loaded on the first call in this process."""
    key = (name, device)
    if key not in _LOADED:
        model, tokenizer, _ = load_model(name, device=device)
        _LOADED[key] = (model, tokenizer)
    return _LOADED[key]


def replay_file(folder: Path, instance_id: str) -> Path:
    """The recording of `instance_id` in `folder`: <id>.jsonl, else the one <id>.*.jsonl (e.g. <id>.gold.jsonl)."""
    if not folder.is_dir():
        raise RunError(f"--replay-dir {folder} is not a directory")
    exact = folder / f"{instance_id}.jsonl"
    if exact.is_file():
        return exact
    found = sorted(folder.glob(f"{instance_id}.*jsonl"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise RunError(f"no recorded trajectory for {instance_id} in {folder} (expected {instance_id}[.*].jsonl)")
    raise RunError(f"several trajectories for {instance_id} in {folder}: {', '.join(p.name for p in found)}")


def check_device(device: str | None) -> None:
    """Fail fast (RunError) on a --device this machine lacks, before any folder, sandbox or model: it was refused
    only when the model loaded. A CUDA device is looked for without torch where no NVIDIA device node exists."""
    if device is None or device == "cpu":
        return
    if device.startswith("cuda"):
        if not Path("/dev/nvidiactl").exists() or not _cuda_count():
            raise RunError(f"--device {device}: no CUDA GPU on this machine; use --device cpu or leave it out")
        index = device.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= _cuda_count()):
            raise RunError(f"--device {device}: this machine has {_cuda_count()} CUDA GPU(s), cuda:0 to cuda:N-1")
        return

    try:
        torch.device(device)
    except RuntimeError:
        raise RunError(f"--device {device}: not a torch device (cpu, cuda, cuda:N, ...)") from None


def _cuda_count() -> int:

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_model_available(name: str) -> None:
    """Fail fast (KVStoreError) when the model cannot be loaded offline, before any worker starts."""

    source = resolve(name)
    if isinstance(source, Path) or not hub_offline():
        return

    if not isinstance(try_to_load_from_cache(source, "config.json"), str):
        raise KVStoreError(
            f"model {name!r} is neither a registered name nor a local directory, and the Hugging Face hub cannot "
            f"provide it (offline); use the offline default {DEFAULT_MODEL!r} or a local model directory"
        )


def check_policy(cfg: RunConfig) -> None:
    """Fail fast (KVStoreError naming the known ones) on an unknown --policy of a run that loads its model here (a
    --server runs its own; a replay runs none), before any sandbox starts or task is recorded."""
    if cfg.server is None and not cfg.replaying:
        policy_defaults(cfg.memory.policy)


def check_protected_opening(cfg: RunConfig, issues: list[str]) -> None:
    """Fail fast (KVStoreError) when a token budget cannot hold the protected opening of one of these issues, or
    (nothing protected) the policy's forced blocks.

    Only tokenizes: the session sits on a weightless (meta) copy of the model, so no weights load before workers do.
    """
    memory = cfg.memory
    if not isinstance(memory.budget, int) or cfg.replaying or cfg.server is not None:
        return
    source = resolve(cfg.memory.model)
    local = isinstance(source, Path)
    if memory.protect == "none":
        _check_forced_blocks(cfg, AutoConfig.from_pretrained(source, local_files_only=local))
        return
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source, local_files_only=local))
    for issue in issues:
        Session(model, tokenizer, cfg.session_config()).append(initial_messages(issue))


def _check_forced_blocks(cfg: RunConfig, config: Any) -> None:
    """Fail fast (KVStoreError) when the token budget cannot hold the policy's forced blocks (sinks, recent tokens):
    the run's cache, built for the model's layers and kv heads alone, refuses it as the session would after the
    sandbox opened and the model loaded (`--budget 1` did)."""
    from kvstore.cache.evicting import EvictingCache  # lazy: only for a local model's token budget

    shape = {"num_layers": config.num_hidden_layers, "num_kv_heads": config.num_key_value_heads}
    EvictingCache(cfg.session_config().cache, shape)


def check_tools_template(cfg: RunConfig) -> None:
    """Fail fast (RunError) when native tool calls would reach a local model whose chat template drops the tools
    (SmolLM2's does): the model would never learn what it may call. Only loads the tokenizer."""
    if cfg.call_format != "tools" or cfg.server is not None or cfg.replaying:
        return

    source = resolve(cfg.memory.model)
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=isinstance(source, Path))
    chat = [{"role": "system", "content": "x"}, {"role": "user", "content": "x"}]
    if tokenizer.apply_chat_template(chat, tokenize=False) == tokenizer.apply_chat_template(
        chat, tokenize=False, tools=tool_schemas()
    ):
        raise RunError(
            f"--call-format tools: the chat template of {cfg.memory.model} does not render tools; use --call-format "
            "xml (or a model whose template does, e.g. qwen2.5-coder-0.5b)"
        )
