"""The OpenAI chat-completions schema: a request's fields checked into a `ChatRequest`, and the answer objects.

Extension (documented in docs/server.md): a request may name its session (body field `session_id` or header
`X-Nexus-Session`); every answer carries `nexus` (the session id, whether it continued, and the turn's cache
statistics) next to `usage`, whose `prompt_tokens_details.cached_tokens` counts the prompt tokens not prefilled.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import torch

from kvstore.session.sampling import LogitAdjust
from server import limits
from server.config import ServeConfig, ServeError
from server.grammars import make_constraint
from server.logprobs import logprob_content
from server.messages import normalize
from server.stops import StopTrimmer
from server.tools import OPEN as TOOL_CALL_OPEN
from server.tools import check_choice, check_tools, constraint_spec, parse_reply

SESSION_HEADER = "X-Nexus-Session"
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")  # what a client may name a session


MAX_TOKENS = 1 << 20  # the largest max_tokens taken (a reply also stops at the model's last position)
SEED_RANGE = (-(1 << 63), (1 << 64) - 1)  # a 64-bit seed, signed or not (torch.Generator.manual_seed's range)
MAX_BIAS = 300  # most logit_bias entries (OpenAI's limit)


@dataclass
class ChatRequest:
    """What one /v1/chat/completions request asks for."""

    messages: list[dict[str, Any]]  # the conversation, normalized (server.messages.normalize)
    max_new_tokens: int  # max_completion_tokens / max_tokens, else the server's default
    temperature: float  # OpenAI's default is 1.0; 0 = greedy (top_p 0 is greedy too)
    top_p: float
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with usage
    session_id: str | None  # explicit session (extension)
    seed: int | None  # seed of this reply's sampling (None: a fresh random one), and of a new session's cache
    presence_penalty: float = 0.0  # subtracted once from the logit of every token the reply has used
    frequency_penalty: float = 0.0  # subtracted from a token's logit once per use in the reply
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added to its logit
    logprobs: bool = False  # return each reply token's log-probability
    top_logprobs: int = 0  # and this many most likely alternatives
    tools: list[dict[str, Any]] | None = None  # function tools (server.tools.check_tools)
    tool_choice: str = "none"  # "none" | "auto" | "required" | a function name
    constraint: tuple[str, Any] | None = None  # ("tool_call" | "json_schema", schema): decoding is constrained
    parallel_tool_calls: bool = True  # False: at most one tool call is returned (the first)
    owner: str = ""  # the client (server.sessions.owner_of: its API key and `user`): whose sessions a prefix adopts


def parse_request(body: object, header_session: str | None, config: ServeConfig) -> ChatRequest:
    """Check a request body; a ServeError (HTTP 400/404) names the first problem. Unknown fields are ignored."""
    if not isinstance(body, dict):
        raise ServeError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model not in (config.model_id, config.memory.model):
        raise ServeError(f"model {model!r} is not served here; this server serves {config.model_id!r}", 404)
    if _integer(body, "n", 1, 1, 128) != 1:
        raise ServeError("only n=1 is supported (one session per conversation)")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise ServeError("'stream_options' must be an object")
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    temperature, top_p = _number(body, "temperature", 1.0, 0.0, 2.0), _number(body, "top_p", 1.0, 0.0, 1.0)
    tools = check_tools(body.get("tools"))
    choice = check_choice(body.get("tool_choice"), tools)
    parallel = body.get("parallel_tool_calls") is None or _boolean(body, "parallel_tool_calls")
    logprobs, top = _logprob_fields(body)
    if body.get("user") is not None and not isinstance(body["user"], str):  # it tells clients' sessions apart
        raise ServeError("'user' must be a string")
    return ChatRequest(
        messages=normalize(body.get("messages"), tools),
        max_new_tokens=_integer(body, key, config.max_new_tokens, 1, MAX_TOKENS),
        temperature=0.0 if top_p == 0 else temperature,  # top_p 0 keeps only the most likely token: greedy
        top_p=top_p or 1.0,
        stop=_stop(body.get("stop")),
        stream=_boolean(body, "stream"),
        include_usage=_boolean(stream_options, "include_usage", "stream_options.include_usage"),
        session_id=_session_id(body.get("session_id") or header_session),
        seed=_integer(body, "seed", None, *SEED_RANGE),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        logit_bias=_logit_bias(body.get("logit_bias")),
        logprobs=logprobs,
        top_logprobs=top,
        tools=tools,
        tool_choice=choice,
        constraint=constraint_spec(body.get("response_format"), tools, choice),
        parallel_tool_calls=parallel,
    )


def _stop(stop: object) -> tuple[str, ...]:
    stop = stop or []
    stop = (stop,) if isinstance(stop, str) else tuple(stop) if isinstance(stop, list) else None
    if stop is None or not all(isinstance(s, str) for s in stop):
        raise ServeError(f"'stop' must be a string or a list of at most {limits.MAX_STOPS} strings")
    limits.check_stops(stop)
    return stop


def _logprob_fields(body: dict) -> tuple[bool, int]:
    """(logprobs, top_logprobs)."""
    logprobs, top = _boolean(body, "logprobs"), _integer(body, "top_logprobs", 0, 0, 20)
    if top and not logprobs:
        raise ServeError("top_logprobs needs logprobs: true")
    return logprobs, top


def _session_id(session_id: object) -> str | None:
    if session_id and not (isinstance(session_id, str) and SESSION_ID.fullmatch(session_id)):
        raise ServeError(
            f"session id {str(session_id)[:40]!r} is not valid: 1-128 letters, digits and . _ : @ -, starting with "
            "a letter or digit"
        )
    return session_id or None


def _boolean(body: dict, name: str, label: str | None = None) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ServeError(f"{label or name} must be a JSON boolean (true or false), got {value!r}")
    return value


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    """A finite number in [low, high] (default when absent or null)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ServeError(f"{name} must be a finite number, got {_short(value)}")
    if not low <= value <= high:
        raise ServeError(f"{name} must be between {low:g} and {high:g}, got {_short(value)}")
    return float(value)


def _integer(body: dict, name: str, default: int | None, low: int, high: int) -> int | None:
    """An integer in [low, high] (default when absent or null)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ServeError(f"{name} must be an integer, got {_short(value)}")
    if not low <= value <= high:
        raise ServeError(f"{name} must be an integer between {low} and {high}, got {_short(value)}")
    return value


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _logit_bias(bias: object) -> dict[int, float]:
    """{token id: bias} from OpenAI's {"id as a string": number in -100..100}; the ids are checked against the
    vocabulary once the model is known (check_bias)."""
    if bias is None:
        return {}
    if not isinstance(bias, dict) or len(bias) > MAX_BIAS:
        raise ServeError(f"logit_bias must be an object of at most {MAX_BIAS} token ids (strings) to numbers")
    out = {}
    for key, value in bias.items():
        if not re.fullmatch(r"[0-9]{1,9}", key):
            raise ServeError(f"logit_bias keys must be token ids (decimal strings), got {_short(key)}")
        out[int(key)] = _number({f"logit_bias[{key}]": value}, f"logit_bias[{key}]", 0.0, -100.0, 100.0)
    return out


def check_bias(bias: dict[int, float], vocab_size: int) -> None:
    """A 400 when a logit_bias token id is not in the model's vocabulary."""
    outside = [t for t in bias if t >= vocab_size]
    if outside:
        raise ServeError(f"logit_bias token id {outside[0]} is not in the vocabulary (ids 0..{vocab_size - 1})")


def parse_json(raw: bytes) -> object:
    """A request body as JSON; ServeError 400 when it is not JSON (UTF-8, RFC 8259), when limits refuses it (too
    deep, too many values, too long a number: before it is parsed; a lone surrogate in a string), or when a field
    holds NaN, Infinity or a number too large for a float (1e400): not JSON numbers, refused here, by field name,
    before any field is read."""
    limits.check_json(raw)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ServeError(f"the request body is not valid JSON: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        body = json.loads(
            text or "null", parse_constant=_NonFinite, parse_float=_finite, object_pairs_hook=_no_non_finite
        )
    except ServeError:
        raise
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        raise ServeError("the request body is not valid JSON") from None
    limits.check_strings(body)
    return body


class _NonFinite(str):
    """A NaN/Infinity read from JSON, until the object holding it names its field."""


def _finite(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _no_non_finite(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    for key, value in pairs:
        items = value if isinstance(value, list) else [value]
        if any(isinstance(v, _NonFinite) for v in items):
            raise ServeError(
                f"{key} must be a finite number; the request body holds {_short(value)}, not a JSON number"
            )
    return dict(pairs)


def check_for_model(req: ChatRequest, tokenizer) -> Any:
    """On the request's side (a worker thread), before its turn is queued: a 400 for a logit_bias id outside the
    vocabulary or a grammar that does not compile; else the request's
    compiled constraint (kvstore.session.grammar.Constraint of its tool_choice or response_format; None: free).
    Compiling takes about a second the first time per tokenizer, which the scheduler must never spend."""
    check_bias(req.logit_bias, len(tokenizer))
    return None if req.constraint is None else make_constraint(*req.constraint, tokenizer)


def reply_options(req: ChatRequest, constraint: Any = None) -> dict[str, Any]:
    """The request's sampling options as kvstore.session.reply.ReplyInProgress arguments: this reply's generator
    (seeded by `seed`, else by a fresh random seed), penalties and logit bias, logprobs, and `constraint` (compiled by
    check_for_model)."""

    seed = secrets.randbits(64) if req.seed is None else req.seed
    options = {
        "generator": torch.Generator(device="cpu").manual_seed(seed),
        "adjust": LogitAdjust(req.presence_penalty, req.frequency_penalty, req.logit_bias) or None,
        "top_logprobs": req.top_logprobs if req.logprobs else None,
    }
    if constraint is not None:
        options["constraint"] = constraint
    return options


def answer(req: ChatRequest | None, text: str, finish_reason: str, records: list, tokenizer) -> dict[str, Any]:
    """The reply's part of a result: its content and tool calls (parsed when the request has tools and tool_choice
    is not "none"; only the first with parallel_tool_calls false; finish_reason "tool_calls" when it made some), and
    its logprobs when asked."""
    content, calls = text, []
    if req is not None and req.tools and req.tool_choice != "none":
        content, calls = parse_reply(text, first_only=not req.parallel_tool_calls)
    logprobs = logprob_content(records, tokenizer) if req is not None and req.logprobs else None
    return {
        "text": content,
        "tool_calls": calls,
        "finish_reason": "tool_calls" if calls else finish_reason,
        "logprobs": logprobs,
    }


def new_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage(result: dict[str, Any]) -> dict[str, Any]:
    p, c = result["prompt_tokens"], result["completion_tokens"]
    return {
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": p + c,
        "prompt_tokens_details": {"cached_tokens": result["cached_tokens"]},
    }


def completion(cid: str, model: str, result: dict[str, Any]) -> dict[str, Any]:
    """The non-streaming answer."""
    message = {"role": "assistant", "content": result["text"]}
    if result.get("tool_calls"):
        message["tool_calls"] = result["tool_calls"]
    choice = {"index": 0, "message": message, "finish_reason": result["finish_reason"], "logprobs": _logprobs(result)}
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(result),
        "nexus": result["nexus"],
    }


def _logprobs(result: dict[str, Any]) -> dict[str, Any] | None:
    return None if result.get("logprobs") is None else {"content": result["logprobs"], "refusal": None}


def chunk(
    cid: str, model: str, delta: dict[str, Any] | None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    """One streamed chunk (`extra`: usage and nexus on the last ones; `logprobs` goes into the choice)."""
    logprobs = extra.pop("logprobs", None)
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}]
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        **extra,
    }


class ChunkStream:
    """The chunks of one streamed answer from its job's events (the transport sends each as an SSE event):
    `opening()`, then `text(piece)` for each ("text", piece) event, then `done(result)` for the ("done", result)
    event. Content streams as it comes, less the stop string (StopTrimmer) and less the tool calls, whose text is held
    back from "<tool_call>" on and sent whole as delta.tool_calls at the end. Log-probabilities come in one chunk
    before the finish chunk."""

    def __init__(self, req: ChatRequest, cid: str, model: str) -> None:
        self.req, self.cid, self.model = req, cid, model
        calls = req.tools is not None and req.tool_choice != "none"
        self.trim = StopTrimmer(req.stop + ((TOOL_CALL_OPEN,) if calls else ()))

    def opening(self) -> list[dict[str, Any]]:
        return [chunk(self.cid, self.model, {"role": "assistant", "content": ""})]

    def text(self, piece: str) -> list[dict[str, Any]]:
        sent = self.trim.feed(piece)
        return [chunk(self.cid, self.model, {"content": sent})] if sent else []

    def done(self, result: dict[str, Any]) -> list[dict[str, Any]]:
        out, cid, model = [], self.cid, self.model
        sent, content = self.trim.text[: self.trim.sent], result["text"] or ""
        rest = content[len(sent) :] if content.startswith(sent) else self.trim.rest()
        if rest and not result.get("tool_calls"):
            out.append(chunk(cid, model, {"content": rest}))
        if result.get("tool_calls"):
            calls = [{"index": i} | call for i, call in enumerate(result["tool_calls"])]
            out.append(chunk(cid, model, {"tool_calls": calls}))
        if result.get("logprobs") is not None:
            out.append(chunk(cid, model, {}, logprobs=_logprobs(result)))
        out.append(chunk(cid, model, {}, result["finish_reason"], nexus=result["nexus"]))
        if self.req.include_usage:
            out.append(chunk(cid, model, None, usage=usage(result)))
        return out


def error_body(exc: ServeError) -> dict[str, Any]:
    return {"error": {"message": str(exc), "type": exc.kind, "code": exc.status}}


def models(config: ServeConfig, started: float, tool_template: str) -> dict[str, Any]:
    """/v1/models: the one served model, with the cache settings every session runs with (extension `nexus`) and
    what renders tools: the model's own chat template ("model") or the server's fallback ("fallback",
    kvstore.session.tools_fallback)."""
    return {
        "object": "list",
        "data": [
            {"id": config.model_id, "object": "model", "created": int(started), "owned_by": "nexus-agent",
             "nexus": config.cache_settings() | {"tool_template": tool_template}}
        ],
    }  # fmt: skip
