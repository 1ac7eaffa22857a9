"""POST /v1/nexus/profiles: memory profiles for the server's sessions, made or installed while it serves.

A server started with a profile directory (`serve --memory-profile auto`, the profile store, or a folder) reads
every new session's profile from it, so a profile written there is used by every later session of that agent.
This endpoint writes one, in either of two ways:

- {"conversations": [[message, ...], ...], "max_tokens": N, "sources": [name, ...], "statement": text}: calibrate on
  the served model (kvstore.profiles.calibrate, teacher-forced on a full cache) from at least two finished
  conversations of
  the agent, or from one whose first user message holds the task's `statement` (the issue, a chat's first request),
  which marks the task's text in its opening as a local `solve` learns (kvstore.profiles.calibrate.statement_variants).
  With "if_missing": true nothing is calibrated when the directory holds a profile that the first conversation's
  opening carries already (a client that learns from its finished session: another may have taught it meanwhile);
  the answer then describes that profile, with "kept": true.
  It runs on the scheduler thread one replayed message per scheduler loop, so the other sessions go on decoding
  in between (each waits at most one message's forward); under --memory-cap idle sessions are parked to make room
  for that full cache, which stays set aside until the calibration ends, else HTTP 503;
- {"profile": "<base64 of a profile file>"}: install a profile calibrated elsewhere for this model.

The profile is saved under its store name (kvstore.profiles.profile.store_name: the model and a digest of the
template), so
it replaces an earlier one of the same agent and model. Limits (ServeConfig): a profile sent, its content inflated
(read from the archive's directory before anything is inflated) and its tensors as stored hold at most
`profile_max_bytes` (else HTTP 413), a new profile is refused (507) while the directory holds `max_profiles`, and a
calibration from more than `max_profile_conversations` conversations is refused (400) before any is read.
The answer describes it and, for a calibration, carries
the file (base64) so that the client can keep it (`eval --server --warmup` does, to install it again on resume).
"""

from __future__ import annotations

import base64
import io
import zipfile
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kvstore.cache.evicting import model_identity
from kvstore.defaults import PROFILE_SUFFIX
from kvstore.errors import KVStoreError
from kvstore.profiles.calibrate import calibration_plans, calibration_steps, max_positions, statement_variants
from kvstore.profiles.profile import MemoryProfile, best_fit, load_profiles, store_name
from server import limits
from server.config import ServeConfig, ServeError
from server.messages import normalize


@dataclass
class Calibration:
    """A calibration request, as parsed."""

    conversations: list[list[dict[str, str]]]
    max_tokens: int | None
    sources: list[str]
    variants: list[list[dict[str, str]]]  # the first conversation's opening with its statement replaced (or [])
    if_missing: bool  # calibrate only when no profile of the directory fits the first conversation's opening


NEEDS_DIRECTORY = (
    "this server reads no profile directory, so a profile made here would not be used; start it with one (its "
    "memory profile 'auto', the profile store, or a folder)"
)


def profile_dir(config: ServeConfig) -> Path:
    """Where this server's sessions read their profiles; ServeError 409 when it reads none or one file."""
    if config.memory.profile is None or not Path(config.memory.profile).is_dir():
        raise ServeError(NEEDS_DIRECTORY, 409, "conflict")
    return Path(config.memory.profile)


def parse(body: object, max_conversations: int) -> tuple[str, Any]:
    """("calibrate", Calibration) or ("install", profile bytes); ServeError 400 (more than `max_conversations`
    conversations too, before any is read)."""
    if not isinstance(body, dict) or ("conversations" in body) == ("profile" in body):
        raise ServeError("the body must be a JSON object with either 'conversations' or 'profile'")
    if "profile" in body:
        try:
            return "install", base64.b64decode(str(body["profile"]), validate=True)
        except ValueError:
            raise ServeError("'profile' must be a profile file in base64") from None
    conversations, statement = body["conversations"], body.get("statement")
    if statement is not None and (not isinstance(statement, str) or not statement.strip()):
        raise ServeError("'statement' must be the task's text as a non-empty string")
    least = 1 if statement is not None else 2
    if not isinstance(conversations, list) or len(conversations) < least:
        raise ServeError(
            "'conversations' must be a list of at least two conversations (lists of messages), or of one with the "
            "task's 'statement'"
        )
    if len(conversations) > max_conversations:
        raise ServeError(
            f"'conversations' holds {len(conversations)} conversations, more than this server calibrates from in one "
            f"request ({max_conversations}, its max_profile_conversations: serve --max-profile-conversations); send "
            "fewer (a profile of an agent needs a few)", cause=limits.CAUSE,
        )  # fmt: skip
    try:
        parsed = [normalize(c) for c in conversations]
    except ServeError as exc:
        raise ServeError(f"conversations: {exc}") from None
    variants = _variants(parsed[0], statement) if statement is not None else []
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ServeError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    sources = body.get("sources") or [f"conversation-{i + 1}" for i in range(len(parsed))]
    if not isinstance(sources, list) or len(sources) != len(parsed) or not all(isinstance(s, str) for s in sources):
        raise ServeError("'sources' must name each conversation (a list of strings as long as 'conversations')")
    if_missing = body.get("if_missing", False)
    if not isinstance(if_missing, bool):
        raise ServeError(f"'if_missing' must be true or false, got {if_missing!r}")
    return "calibrate", Calibration(parsed, max_tokens, sources, variants, if_missing)


def _variants(messages: list[dict[str, str]], statement: str) -> list[list[dict[str, str]]]:

    variants = statement_variants(messages, statement)
    if not variants:
        raise ServeError(
            "'statement' is not in the first conversation's first user message, so it cannot mark the task's text "
            "there; send the text as it appears in that message, or two conversations without it"
        )
    return variants


def calibrate(
    model, tokenizer, config: ServeConfig, request: Calibration, make_room: Callable[[int], None]
) -> Generator:
    """Calibrate from the request's conversations on the served model and save the profile. A generator for
    Scheduler.call: one step per replayed message, so the sessions keep decoding in between; it returns the answer.
    `make_room(tokens)` first: the calibration holds a full cache of its longest conversation beside the sessions."""

    conversations, max_tokens, sources = request.conversations, request.max_tokens, request.sources
    folder = profile_dir(config)
    plans, limit = [], max_positions(model, max_tokens)
    for conversation in conversations:  # tokenized once, one conversation per scheduler loop
        plans += calibration_plans(tokenizer, [conversation], limit)
        yield
    kept = _fitting(model, folder, plans[0]) if request.if_missing and plans[0] is not None else None
    if kept is not None:
        return kept | {"kept": True}
    make_room(max((p.tokens for p in plans if p is not None), default=0))
    meta = {"model": config.memory.model, "sources": sources, "served": True}
    left_out: list[str] = []

    def progress(done: int, _total: int, used: bool) -> None:
        if not used:
            left_out.append(sources[done - 1])

    try:
        profile = yield from calibration_steps(
            model, tokenizer, conversations, max_tokens, progress, meta, plans, variants=request.variants
        )
    except KVStoreError as exc:
        raise ServeError(f"cannot calibrate from these conversations: {exc}") from None
    answer = _save(profile, folder, config)
    data = io.BytesIO()
    profile.save_to(data)
    return answer | {"left_out": left_out, "profile": base64.b64encode(data.getvalue()).decode()}


def install(model, config: ServeConfig, data: bytes) -> dict[str, Any]:
    """Check a profile file sent by a client against the served model and save it; the answer."""

    folder = profile_dir(config)
    check_sent(data, config.profile_max_bytes)
    try:
        profile = MemoryProfile.load_bytes(data)
        profile.check_model(model_identity(model))
    except KVStoreError as exc:
        raise ServeError(str(exc)) from None
    return _save(profile, folder, config)


def check_sent(data: bytes, limit: int) -> None:
    """Refuse (413) a profile file that is, inflates to or expands to more than `limit` bytes, before it is read
    into a profile: its archive's directory gives each record's inflated size, and the tensors it holds (read
    without copying their storage) their size once expanded; 400 when it is no profile file at all."""

    what = "the memory profile sent"
    if len(data) > limit:
        raise _too_large(f"{what} is {len(data)} bytes", limit)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            inflated = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, ValueError):
        raise ServeError(f"{what} cannot be read: not a memory profile (a profile file is a zip archive)") from None
    if inflated > limit:
        raise _too_large(f"{what} inflates to {inflated} bytes", limit)
    try:
        content = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a damaged file raises several types; the profile's own check says it
        raise ServeError(
            f"{what} cannot be read: not a memory profile, or a damaged one ({type(exc).__name__})"
        ) from None
    tensors = [v for v in (content.values() if isinstance(content, dict) else []) if isinstance(v, torch.Tensor)]
    expanded = sum(t.numel() * max(t.element_size(), 4) for t in tensors)  # weights are stored as float32
    if expanded > limit:
        raise _too_large(f"{what} holds {expanded} bytes of tensors once expanded", limit)


def _too_large(what: str, limit: int) -> ServeError:
    return ServeError(
        f"{what}, more than this server's limit of {limit} bytes for a profile (a profile of a real agent is a few "
        "MiB)", 413, "payload_too_large",
    )  # fmt: skip


def _fitting(model, folder: Path, plan) -> dict[str, Any] | None:
    """The answer for the directory's profile that this plan's opening carries, or None."""

    try:
        profiles = load_profiles(folder, model_identity(model))
    except (KVStoreError, OSError):  # a damaged file there: calibrate, which writes a good one
        return None
    best = best_fit(profiles, plan.opening_ids)
    return None if best is None else _describe(best[1], best[0])


def _save(profile, folder: Path, config: ServeConfig) -> dict[str, Any]:
    """Save under the profile's store name, within the directory's limits (413: too large, 507: full)."""

    data = io.BytesIO()
    profile.save_to(data)
    if data.tell() > config.profile_max_bytes:
        raise _too_large(f"this profile takes {data.tell()} bytes", config.profile_max_bytes)
    name = store_name(profile)
    held = [p for p in folder.glob(f"*{PROFILE_SUFFIX}") if p.name != name]
    if len(held) >= config.max_profiles:
        raise ServeError(
            f"the profile directory {folder} holds {len(held)} profiles, this server's maximum (max_profiles); "
            "delete the profiles no longer used there", 507, "insufficient_storage",
        )  # fmt: skip
    profile.save(folder / name)
    return _describe(profile, name)


def _describe(profile, name: str) -> dict[str, Any]:
    return {
        "object": "nexus.profile",
        "name": name,
        "summary": profile.summary,
        "prefix_tokens": len(profile.prefix),
        "suffix_tokens": len(profile.suffix),
        "conversations": profile.conversations,
    }
