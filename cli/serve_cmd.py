"""`nexus-agent serve`: one model, many persistent agent sessions, batched decoding, an OpenAI-compatible API."""

from __future__ import annotations

from pathlib import Path

import typer

from cli.options import shared
from kvstore.session.config import MemorySettings
from pipeline.profiles.store import SERVE, resolve_profile
from server.config import ServeConfig, parse_size

_D = ServeConfig()  # the defaults, defined once in ServeConfig (the memory options': in MemorySettings)


def serve_cmd(
    host: str = typer.Option(_D.host, "--host", help="Interface to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(_D.port, "--port", "-p", min=0, max=65535, help="TCP port (0: any free one)."),
    model: str = shared("model"),
    served_name: str = typer.Option(None, "--served-name", help="Model id clients ask for (default: --model)."),
    policy: str = shared("policy", help="KV eviction policy of every session."),
    budget: str = shared("budget", help="Per-session budget: tokens, a density, or 'none'."),
    protocol: str = shared("protocol"),
    protect: str = shared("protect", help="Never evicted in a session: system+task, system, none."),
    profile: str = shared(
        "profile",
        help="Memory profile (a file or a directory of them; nexus-agent calibrate) for every session whose opening "
        "matches; 'auto': the profile store, also where POST /v1/nexus/profiles saves; 'builtin': the profile shipped "
        "for the built-in agent (solve/eval --server) and this model; 'none'. One file also ranks the openings it "
        "does not match (other harnesses) by its token prior.",
    ),
    max_sessions: int = typer.Option(
        _D.max_sessions, "--max-sessions", help="Most resident sessions (then the least recently used idle is parked)."
    ),
    max_batch: int = typer.Option(_D.max_batch, "--max-batch", help="Most sessions decoding in one forward."),
    memory_cap: str = typer.Option(None, "--memory-cap", help="KV bytes of resident sessions, e.g. 2GiB (none)."),
    park: str = typer.Option(_D.park, "--park", help="Where idle sessions go under the cap: disk or host."),
    park_dir: Path = typer.Option(
        None, "--park-dir", help="Folder of parked sessions, kept across restarts (default: a temp folder, deleted)."
    ),
    park_quota: str = typer.Option(
        f"{_D.park_quota >> 30}GiB",
        "--park-quota",
        help="Bytes for parked sessions, disk files and --park host memory together, e.g. 10GiB, or none (LRU closed).",
    ),
    queue_timeout: float = typer.Option(_D.queue_timeout_s, "--queue-timeout", help="Seconds a request may wait."),
    drain: float = typer.Option(
        _D.drain_s,
        "--drain",
        min=0,
        help="On SIGTERM or Ctrl-C, seconds the replies already accepted may take to finish before they are cut; no "
        "new request is taken meanwhile (HTTP 503), and a second SIGTERM or Ctrl-C stops at once. 0: cut them at once.",
    ),
    max_new_tokens: int = shared("max_new_tokens", _D.max_new_tokens, help="Reply length without max_tokens."),
    chunk_size: int = typer.Option(
        _D.chunk_size,
        "--prefill-chunk",
        help="Prefill chunk in tokens (evicted after each; the default memory: once, after the last).",
    ),
    interleave: bool = typer.Option(
        _D.interleave_prefill,
        "--interleave-prefill/--whole-prefill",
        help="Run a newcomer's prefill one chunk per decode step of the others, or whole at admission.",
    ),  # fmt: skip
    seed: int = shared("seed", help="Seed of new sessions (a request's seed overrides it)."),
    device: str = shared("device"),
    dtype: str = typer.Option(None, "--dtype", help="bf16, fp16 or fp32 (default: bf16 where supported)."),
    threads: int = shared("threads", help="Torch CPU threads (default: all cores; 1 if busy)."),
    api_key: str = typer.Option(
        None,
        "--api-key",
        envvar="NEXUS_AGENT_API_KEY",
        show_default=False,
        help="Answer only requests that send 'Authorization: Bearer KEY' (every route but /health and /metrics); "
        "best given as $NEXUS_AGENT_API_KEY, since a flag shows in the process list. Clients send $OPENAI_API_KEY.",
    ),
    tls_cert: Path = typer.Option(
        None, "--tls-cert", help="PEM certificate (chain): serve HTTPS only (clients trust it via SSL_CERT_FILE)."
    ),
    tls_key: Path = typer.Option(None, "--tls-key", help="PEM key of --tls-cert (default: in the certificate file)."),
    backlog: int = typer.Option(_D.backlog, "--backlog", min=1, help="Connections queued before they are accepted."),
    max_connections: int = typer.Option(
        _D.max_connections, "--max-connections", min=1, help="Open connections served at once (then HTTP 503)."
    ),
    max_body: str = typer.Option(
        f"{_D.max_body_bytes >> 20}MiB", "--max-body", help="Largest request body, e.g. 32MiB (then HTTP 413)."
    ),
    keep_alive: float = typer.Option(_D.keep_alive_s, "--keep-alive", help="Seconds an idle connection stays open."),
    header_timeout: float = typer.Option(
        _D.header_timeout_s, "--header-timeout", help="Seconds a request's headers, then its body, may take to arrive."
    ),
    max_profile_conversations: int = typer.Option(
        _D.max_profile_conversations,
        "--max-profile-conversations",
        help="Most conversations one POST /v1/nexus/profiles calibrates from (then HTTP 400).",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log every HTTP request and dropped connection."),
) -> None:
    """Serve one model to many agent sessions at /v1/chat/completions (see docs/server.md)."""
    from pipeline.backends import set_threads  # lazy: torch, transformers, off --help
    from server.app import Server  # lazy: torch, transformers, off --help
    from server.listen import raise_fd_limit  # lazy: torch, transformers, off --help

    memory = MemorySettings(
        model=model, policy=policy, budget=budget, protocol=protocol, protect=protect,
        profile=resolve_profile(profile, SERVE, model), seed=seed, device=device,
    )  # fmt: skip
    body_limit = parse_size(max_body)  # "none": the default (0 is refused, as any other size under a byte)
    config = ServeConfig(
        host=host, port=port, memory=memory, served_name=served_name, max_sessions=max_sessions, max_batch=max_batch,
        memory_cap=parse_size(memory_cap), park=park, park_dir=park_dir, park_quota=parse_size(park_quota),
        queue_timeout_s=queue_timeout, drain_s=drain,
        max_new_tokens=max_new_tokens, dtype=dtype, threads=threads, chunk_size=chunk_size,
        interleave_prefill=interleave, api_key=api_key, tls_cert=tls_cert, tls_key=tls_key, backlog=backlog,
        max_connections=max_connections, max_body_bytes=_D.max_body_bytes if body_limit is None else body_limit,
        keep_alive_s=keep_alive, header_timeout_s=header_timeout, max_profile_conversations=max_profile_conversations,
    )  # fmt: skip
    raise_fd_limit(max_connections)
    set_threads(threads)
    server = Server.load(config, verbose=verbose)
    cap = "none" if config.memory_cap is None else f"{config.memory_cap / 2**20:.0f} MiB"
    print(
        f"nexus-agent serve: {config.model_id} ({memory.describe()}), max {max_sessions} sessions, batch {max_batch}, "
        f"KV cap {cap}\n  OpenAI base URL: {server.url}  (metrics: {server.url.removesuffix('/v1')}/metrics)",
        flush=True,
    )
    print(_access_line(config), flush=True)
    server.serve_forever()  # until SIGTERM or SIGINT: then a graceful shutdown (the drain first), exit status 0


def _access_line(config: ServeConfig) -> str:
    """Who may use the server: a warning when it listens beyond this machine with no API key, or with one but no
    TLS (the key and every conversation then cross the network in clear)."""
    local = config.host in ("127.0.0.1", "localhost", "::1")
    link = "TLS: on" if config.tls_cert is not None else "TLS: off"
    if config.api_key is not None:
        line = f"  API key: required (Authorization: Bearer ...; /health and /metrics stay open); {link}"
        if config.tls_cert is None and not local:
            line += (
                f"\n  warning: listening on {config.host} without TLS: the key and the conversations cross the "
                "network in clear; give --tls-cert (or put a TLS proxy in front)"
            )
        return line
    if local:
        return f"  API key: none (listening on this machine only); {link}"
    return (
        f"  warning: listening on {config.host} with no API key: anyone who reaches this port can use and close "
        f"sessions and install memory profiles; set NEXUS_AGENT_API_KEY; {link}"
    )
