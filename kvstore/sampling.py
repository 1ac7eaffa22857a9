"""Choosing the next token (greedy, or temperature + top-p from a seeded generator) and streaming the reply text."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from kvstore.errors import KVStoreError


def check_sampling(temperature: float, top_p: float) -> None:
    if temperature < 0:
        raise KVStoreError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise KVStoreError(f"top_p must be in (0, 1], got {top_p}")


@torch.inference_mode()
def next_token(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    """The next token id from `logits` [V]: argmax when temperature is 0, else a draw from `generator`.

    Sampling runs on the CPU in float32, so a seeded generator draws the same tokens on any device.
    """
    if temperature == 0:
        return int(logits.argmax())
    probs = torch.softmax(logits.detach().to("cpu", torch.float32) / temperature, dim=-1)  # [V]
    if top_p < 1.0:
        sorted_p, order = probs.sort(descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p >= top_p  # tokens wholly past the nucleus
        probs = probs.scatter(0, order[drop], 0.0)
    return int(torch.multinomial(probs, 1, generator=generator))


class TextStream:
    """Decodes generated tokens incrementally: hands new text to a callback and watches for stop strings.

    Parameters
    ----------
    decode : token ids -> text.
    stop : strings that end the reply once they appear in the generated text.
    on_token : called with each new piece of text (held back while it ends in an incomplete UTF-8 character).
    """

    def __init__(self, decode: Callable[[list[int]], str], stop: Sequence[str] = (), on_token=None):
        self.decode = decode
        self.stop = [s for s in stop if s]
        self.on_token = on_token
        self.ids: list[int] = []
        self.text = ""
        self._sent = 0

    def push(self, token_id: int) -> bool:
        """Add one generated token; True when a stop string completed."""
        before = len(self.text)
        self.ids.append(token_id)
        self.text = self.decode(self.ids)
        if self.on_token is not None and not self.text.endswith("\ufffd") and len(self.text) > self._sent:
            self.on_token(self.text[self._sent :])
            self._sent = len(self.text)
        return any(s in self.text[max(0, before - len(s)) :] for s in self.stop)

    def flush(self) -> None:
        """Send whatever text is still held back (the reply is over)."""
        if self.on_token is not None and len(self.text) > self._sent:
            self.on_token(self.text[self._sent :])
            self._sent = len(self.text)
