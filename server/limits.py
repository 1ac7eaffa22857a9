"""What one request may cost, checked before the work it would cause. A request body's JSON is pre-scanned in
linear time (bracket depth and value count outside strings, digits of a number) before anything parses it, since
Python's json recurses once per level (RecursionError past ~1,000), converts integers in time quadratic in their
digits (ValueError past 4,300) and holds the GIL while it builds every value; its strings are then checked for lone
surrogates. JSON held inside a string (a tool call's arguments, a model's reply) goes through the same checks
(`loads`). A JSON schema's depth and the number of messages and stop strings are capped. Every refusal is a
ServeError 400 naming the field and the limit (docs/server.md, "Limits of a request")."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from server.config import ServeError

MAX_DEPTH = 128  # deepest nesting of arrays and objects in a request body (or in JSON held in one of its strings)
MAX_VALUES = 200_000  # most JSON values in a body (json.loads holds the GIL: 8M values took 6 s here)
MAX_DIGITS = 1000  # most digits in one JSON number (a 64-bit seed has 20)
MAX_SCHEMA_DEPTH = 64  # deepest nesting of a JSON schema (tools' parameters, response_format): what a grammar compiles
MAX_MESSAGES = 4096  # most messages in one request
MAX_STOPS = 4  # most stop strings (OpenAI's limit)
MAX_STOP_CHARS = 1000  # longest stop string, in characters
COMPILE_TIMEOUT_S = 10.0  # longest a request waits for its grammar to compile (server.grammars)
CAUSE = "request_limit"  # the metrics cause of these refusals

_SLICE = 1 << 22  # bytes scanned per numpy pass (bounds its temporary arrays at ~40 MiB)


def refused(message: str) -> ServeError:
    return ServeError(message, 400, cause=CAUSE)


def check_json(raw: bytes | str, what: str = "the request body", depth: int = MAX_DEPTH) -> None:
    """ServeError 400 when the JSON text `raw` nests deeper than `depth`, holds more than MAX_VALUES values or a
    number of more than MAX_DIGITS digits. Linear in its length, in numpy passes that release the GIL (a body's scan
    does not hold up the event loop); what is inside strings does not count (their brackets are text)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    scan = _Scan()
    for start in range(0, len(data), _SLICE):
        scan.feed(np.frombuffer(data, np.uint8, min(_SLICE, len(data) - start), start))
    if scan.deepest > depth:
        raise refused(f"{what} is JSON nested deeper than {depth} levels (the limit), at least {scan.deepest}")
    if scan.values > MAX_VALUES:
        raise refused(f"{what} holds {scan.values} JSON values, more than {MAX_VALUES} (the limit)")
    if scan.longest > MAX_DIGITS:
        raise refused(f"{what} holds a number of {scan.longest} digits, more than {MAX_DIGITS} (the limit)")


class _Scan:
    """check_json's running state, one slice of bytes at a time: whether the slice starts inside a string, how many
    backslashes end the bytes before it, the bracket level, and the deepest level, values and longest number seen."""

    def __init__(self) -> None:
        self.in_string, self.backslashes, self.level = False, 0, 0
        self.deepest, self.values, self.longest, self.digits = 0, 0, 0, 0

    def feed(self, a: np.ndarray) -> None:
        """a: [n] uint8, the next slice."""
        pos = np.arange(len(a), dtype=np.int32)
        last_other = np.maximum.accumulate(np.where(a == 92, -1, pos))  # [n] the last non-backslash at or before i
        run = pos - last_other  # [n] backslashes ending at i
        run = np.where(last_other < 0, run + self.backslashes, run)  # the run the slice before ended with goes on
        escaped = np.empty(len(a), bool)
        escaped[0], escaped[1:] = self.backslashes % 2 == 1, run[:-1] % 2 == 1
        quote = (a == 34) & ~escaped
        parity = (np.cumsum(quote, dtype=np.int32) + self.in_string) % 2  # 1 inside a string (its opening quote too)
        self._count(a, (parity == 0) & ~quote)
        self.in_string, self.backslashes = bool(parity[-1]), int(run[-1])

    def _count(self, a: np.ndarray, outside: np.ndarray) -> None:
        opens = outside & ((a == 91) | (a == 123))
        running = np.cumsum(opens.astype(np.int32) - (outside & ((a == 93) | (a == 125))), dtype=np.int32)
        running += self.level
        self.deepest, self.level = max(self.deepest, int(running.max())), int(running[-1])
        self.values += int(np.count_nonzero(opens | (outside & ((a == 44) | (a == 58)))))
        digit = outside & (a >= 48) & (a <= 57)
        self.longest = max(self.longest, _longest_run(digit, self.digits))
        falses = np.flatnonzero(~digit)
        self.digits = self.digits + len(a) if not len(falses) else len(a) - 1 - int(falses[-1])


def _longest_run(mask: np.ndarray, carried: int) -> int:
    """The longest run of True in `mask` ([n] bool), its first run lengthened by `carried` (the slice before's)."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.view(np.int8), [0]))))
    if not len(edges):
        return carried
    starts, lengths = edges[::2], edges[1::2] - edges[::2]
    first = lengths[0] + (carried if starts[0] == 0 else 0)
    return int(max(first, lengths.max(), carried))


def check_strings(value: Any, what: str = "the request body") -> None:
    """ServeError 400 when a string of the parsed JSON `value` (keys too) holds a lone UTF-16 surrogate (a "\\ud800"
    escape alone): no character, it has no UTF-8 and would fail the answer's encoding. Iterative, linear in its size
    (its values are at most MAX_VALUES)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if not node.isascii():
                try:
                    node.encode("utf-8")
                except UnicodeEncodeError:
                    raise refused(
                        f"{what} holds a lone UTF-16 surrogate (such as \\ud800), which is no character"
                    ) from None
        elif isinstance(node, dict):
            stack += [*node.keys(), *node.values()]
        elif isinstance(node, list):
            stack += node


def loads(text: str, what: str) -> Any:
    """JSON held in a string (a tool call's arguments, a call in the model's reply), parsed after check_json: a
    ServeError 400 for what it refuses or what is not JSON."""
    check_json(text, what)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ServeError(f"{what} is not valid JSON ({exc})") from None
    check_strings(value, what)
    return value


def check_schema(schema: object, what: str) -> None:
    """ServeError 400 when a JSON schema nests deeper than MAX_SCHEMA_DEPTH (its grammar's size and compile time grow
    with it). Iterative, linear in its size."""
    stack = [(schema, 1)]
    while stack:
        node, level = stack.pop()
        if level > MAX_SCHEMA_DEPTH:
            raise refused(f"{what} is a JSON schema nested deeper than {MAX_SCHEMA_DEPTH} levels (the limit)")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))


def check_messages(messages: list) -> None:
    if len(messages) > MAX_MESSAGES:
        raise refused(f"'messages' holds {len(messages)} messages; a request may hold at most {MAX_MESSAGES}")


def check_stops(stops: tuple[str, ...]) -> None:
    if len(stops) > MAX_STOPS:
        raise refused(f"'stop' holds {len(stops)} strings; at most {MAX_STOPS} are allowed")
    for i, stop in enumerate(stops):
        if len(stop) > MAX_STOP_CHARS:
            raise refused(
                f"stop[{i}] is {len(stop)} characters; a stop string may be at most {MAX_STOP_CHARS} characters"
            )
