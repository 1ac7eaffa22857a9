"""Streaming reply text without its stop string (OpenAI's rule): text that may begin a stop string is held back
until it is known not to. Linear: each stop string is matched by a Knuth-Morris-Pratt automaton fed one character at
a time, whose state is also how much of the text's end may begin it, so a piece costs its length times the number
of stops, whatever their length (a rescan of the whole text and of every prefix of every stop per piece, as before,
cost the square of the stop's length: four stops of 400k characters froze the event loop)."""

from __future__ import annotations


def _failure(stop: str) -> list[int]:
    """KMP's table: fail[i] = the length of the longest proper border of stop[: i + 1]."""
    fail, k = [0] * len(stop), 0
    for i in range(1, len(stop)):
        while k and stop[i] != stop[k]:
            k = fail[k - 1]
        if stop[i] == stop[k]:
            k += 1
        fail[i] = k
    return fail


class StopTrimmer:
    """Feed it the reply's text pieces; it returns what is safe to send (never a stop string, nor what follows)."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = [s for s in stops if s]
        self._fail = [_failure(s) for s in self.stops]
        self._state = [0] * len(self.stops)  # characters of each stop matched at the text's end
        self._pieces: list[str] = []  # all the text (joined only when asked: `text`)
        self._held = ""  # the text not sent yet: at most the longest stop and the last piece
        self.length, self.sent, self.cut = 0, 0, None  # text length; characters sent; where the first stop began

    @property
    def text(self) -> str:
        """All the text fed so far."""
        return "".join(self._pieces)

    def feed(self, piece: str) -> str:
        """Add generated text; the part that is now safe to send."""
        if self.cut is not None:
            return ""
        self._pieces.append(piece)
        self._held += piece
        found = [self._advance(i, piece) for i in range(len(self.stops))]
        self.length += len(piece)
        starts = [f for f in found if f is not None]
        if starts:
            self.cut = min(starts)
            return self._send(self.cut)
        return self._send(self.length - max(self._state, default=0))

    def _advance(self, i: int, piece: str) -> int | None:
        """Run stop i's automaton over `piece`; where its first match in the text begins, if one ends in it."""
        stop, fail, k = self.stops[i], self._fail[i], self._state[i]
        for offset, char in enumerate(piece):
            while k and char != stop[k]:
                k = fail[k - 1]
            if char == stop[k]:
                k += 1
            if k == len(stop):
                self._state[i] = k
                return self.length + offset + 1 - k
        self._state[i] = k
        return None

    def rest(self) -> str:
        """What is still held back once the reply is over."""
        return self._send(self.cut if self.cut is not None else self.length)

    def _send(self, end: int) -> str:
        if end <= self.sent:
            return ""
        out, self._held = self._held[: end - self.sent], self._held[end - self.sent :]
        self.sent = end
        return out
