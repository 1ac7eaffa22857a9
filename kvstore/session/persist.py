"""Save a session to one safetensors file and restore it exactly (same tokens as if it had never stopped).

The file holds the cache tensors (kvstore.cache.snapshot.export_state), the token history and the sampling generator's
state as tensors, and everything else (messages, protocol and cache config, seen count, model identity, turn
statistics) as JSON in the header, with a format version and a sha256 checksum over all of it. It is written to a
temporary file in the same directory and moved into place with os.replace, so a crash never leaves a file that
loads, and a failed save or load never touches an existing file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

import kvstore
from kvstore.errors import KVStoreError
from kvstore.models.registry import config_hash, load_model
from kvstore.session.config import SessionConfig
from kvstore.session.turn_stats import TurnStats

FORMAT = "nexus-agent-session"
VERSION = 1
_CHECKED_CONFIG = ("model", "policy", "budget", "protocol", "seed", "chunk_size", "cache_options")


def save_session(session, path: Path) -> None:
    """Write `session` to `path` atomically (one file)."""
    cache_tensors, cache_meta = kvstore.export_state(session.cache)
    tensors = {f"cache.{k}": v for k, v in cache_tensors.items()}
    tensors["history"] = torch.tensor(session.tokens, dtype=torch.int64)
    tensors["sampling_generator"] = session.generator.get_state()
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "model": {"name": session.config.model, "config_hash": config_hash(session.model.config)},
        "config": session.config.to_dict(),
        "cache": cache_meta,
        "prefilled": session.prefilled,
        "messages": session.messages,
        "turns": [t.to_dict() for t in session.turns],
    }
    header = json.dumps(doc, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata={"session": header, "checksum": _checksum(header, tensors)})
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def load_session(cls, path: Path, model=None, tokenizer=None, expect=None):
    """Restore the session saved at `path` (on `model`, else the saved model loaded through the registry).

    `expect` (a SessionConfig) makes a file saved under another model or cache config an error.
    """
    doc, tensors = read_session_file(path)
    saved = SessionConfig.from_dict(doc["config"])
    if expect is not None:
        _check_config(path, saved, expect)
    if model is None:
        device, dtype = (expect.device, expect.dtype) if expect is not None else (saved.device, saved.dtype)
        model, tokenizer, _ = load_model(saved.model, device=device, dtype=dtype)
    elif tokenizer is None:
        raise KVStoreError("Session.load: a model was given without its tokenizer")
    _check_model(path, doc["model"], model)
    session = cls(model, tokenizer, saved)
    cache_tensors = {k[len("cache.") :]: v for k, v in tensors.items() if k.startswith("cache.")}
    session.cache = kvstore.restore_cache(model, cache_tensors, doc["cache"])
    session.tokens = tensors["history"].tolist()
    session.prefilled = int(doc["prefilled"])
    session.messages = doc["messages"]
    session.generator.set_state(tensors["sampling_generator"])
    session.turns = [TurnStats.from_dict(t) for t in doc["turns"]]
    return session


def read_session_file(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The header document and tensors of a session file, after checking its format and checksum."""
    if not path.is_file():
        raise KVStoreError(f"no session file at {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as exc:  # noqa: BLE001 - safetensors raises several types for a damaged file
        raise KVStoreError(f"{path} is not a readable session file (truncated or corrupt): {exc}") from exc
    header = meta.get("session")
    if header is None or "checksum" not in meta:
        raise KVStoreError(f"{path} is a safetensors file but not a nexus-agent session")
    if _checksum(header, tensors) != meta["checksum"]:
        raise KVStoreError(f"{path} fails its checksum: the file was edited or corrupted")
    doc = json.loads(header)
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise KVStoreError(
            f"{path} has format {doc.get('format')!r} version {doc.get('version')!r}; "
            f"this build reads {FORMAT!r} version {VERSION}"
        )
    return doc, tensors


def _checksum(header: str, tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256(header.encode())
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def check_session_file(path: Path, model, expect) -> None:
    """KVStoreError unless `path` is a readable session file (format, checksum) that `model` with the cache config
    `expect` (a SessionConfig) can continue, as `load_session` would find; nothing is loaded onto the model."""
    doc, _ = read_session_file(path)
    _check_config(path, SessionConfig.from_dict(doc["config"]), expect)
    _check_model(path, doc["model"], model)


def _check_config(path: Path, saved, expect) -> None:
    for name in _CHECKED_CONFIG:
        if getattr(saved, name) != getattr(expect, name):
            raise KVStoreError(
                f"{path} was saved with {name}={getattr(saved, name)!r}, but this session asks for "
                f"{name}={getattr(expect, name)!r}"
            )


def _check_model(path: Path, saved: dict[str, str], model) -> None:
    have = config_hash(model.config)
    if have != saved["config_hash"]:
        name = getattr(model.config, "_name_or_path", "") or model.config.model_type
        raise KVStoreError(
            f"{path} was saved with model {saved['name']!r} (config {saved['config_hash']}); "
            f"the model given is {name!r} (config {have})"
        )
