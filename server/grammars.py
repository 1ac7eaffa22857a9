"""The grammars that constrain a reply's decoding (kvstore.session.grammar over llguidance), compiled on the request's
worker thread, never on the event loop or the scheduler: cached by schema (an agent sends the same tools every turn),
and under a time limit (a request whose grammar takes longer gets a 400; the compile finishes in the background and
is cached for a retry). The tokenizer's llguidance form is built at the server's start (`warm_grammars`)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as CompileTimeout
from typing import Any

from kvstore.errors import KVStoreError
from kvstore.session.grammar import Constraint, ll_tokenizer
from server import limits
from server.config import ServeError
from server.tools import call_grammar, compact

COMPILED_KEPT = 64  # compiled grammars kept (least recently used dropped first)
COMPILERS = 2  # threads compiling at once: a flood of slow schemas holds these, not the request threads
_COMPILED: OrderedDict[tuple[str, str, int], Any] = OrderedDict()
_LOCK = threading.Lock()
_POOL = ThreadPoolExecutor(COMPILERS, thread_name_prefix="nexus-grammar")


def warm_grammars(tokenizer) -> None:
    """Build llguidance's form of `tokenizer` now, at the server's start: it takes seconds with the GIL held (measured
    here, Qwen3's: 4.1 s, other threads stalled 2.2 s), which the first request with a grammar would otherwise cost
    every stream in flight. A tokenizer it cannot take (not a fast one) is left: its grammar requests are 400s."""

    try:
        ll_tokenizer(tokenizer)
    except KVStoreError:
        pass


def make_constraint(kind: str, schema: dict[str, Any], tokenizer) -> Any:
    """The grammar constraint (kvstore.session.grammar) of a ("tool_call", call schema) or ("json_schema", schema)
    spec over `tokenizer`, fresh for one reply; a 400 when it does not compile, or not within
    limits.COMPILE_TIMEOUT_S."""
    key = (kind, json.dumps(schema, sort_keys=True), id(tokenizer))
    with _LOCK:
        compiled = _COMPILED.get(key)
        if compiled is not None and compiled.tokenizer is tokenizer:
            _COMPILED.move_to_end(key)
            return compiled.fresh()
    try:
        return _POOL.submit(_compile, key, kind, schema, tokenizer).result(limits.COMPILE_TIMEOUT_S).fresh()
    except CompileTimeout:
        raise limits.refused(
            f"the grammar of this request (tools or response_format) did not compile within "
            f"{limits.COMPILE_TIMEOUT_S:g} s (the limit); send a smaller schema"
        ) from None


def _compile(key: tuple[str, str, int], kind: str, schema: dict[str, Any], tokenizer) -> Any:
    """On a compiler thread: compile and cache (even when the request that asked no longer waits)."""

    try:
        if kind == "tool_call":
            compiled = Constraint.lark(call_grammar(schema, tokenizer), tokenizer)
        else:
            compiled = Constraint.json_schema(compact(schema), tokenizer)
    except KVStoreError as exc:
        raise ServeError(f"the grammar of this request does not compile: {exc}") from None
    with _LOCK:
        _COMPILED[key] = compiled
        while len(_COMPILED) > COMPILED_KEPT:
            _COMPILED.popitem(last=False)
    return compiled
