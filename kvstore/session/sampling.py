"""Choosing the next token (greedy, or temperature + top-p from a seeded generator) and streaming the reply text."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from kvstore.errors import KVStoreError

# The floor of a reported log-probability: a token that a tiny temperature makes impossible has log p = -inf, which
# JSON cannot carry (OpenAI reports such tokens at -9999.0 too).
LOGPROB_FLOOR = -9999.0


def check_sampling(temperature: float, top_p: float) -> None:
    if temperature < 0:
        raise KVStoreError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise KVStoreError(f"top_p must be in (0, 1], got {top_p}")


@torch.inference_mode()
def next_token(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    """The next token id from `logits` [V]: argmax when temperature is 0, else a draw from `generator`.

    Sampling runs on the CPU in float32, so a seeded generator draws the same tokens on any device. One uniform
    per token, inverted through the cumulative distribution (torch.multinomial is ~100x slower over 150k tokens).
    """
    if temperature == 0:
        return int(logits.argmax())
    probs = torch.softmax(scaled(logits, temperature), dim=-1)  # [V]
    ids, probs = nucleus(probs, top_p)  # [K], [K]
    cdf = probs.cumsum(0)  # [K]
    u = torch.rand(1, generator=generator, dtype=torch.float64).item() * cdf[-1].item()
    return int(ids[min(int(torch.searchsorted(cdf, torch.tensor([u])).item()), len(ids) - 1)])


class LogitAdjust:
    """OpenAI's presence and frequency penalties and logit bias, applied to the logits over the reply's own tokens:
    logit[t] += bias[t] - presence * (t in reply) - frequency * count(t in reply)."""

    def __init__(self, presence: float = 0.0, frequency: float = 0.0, bias: dict[int, float] | None = None) -> None:
        self.presence, self.frequency, self.bias = presence, frequency, dict(bias or {})

    def __bool__(self) -> bool:
        return bool(self.presence or self.frequency or self.bias)

    @torch.inference_mode()
    def apply(self, logits: torch.Tensor, reply_ids: Sequence[int]) -> torch.Tensor:
        """The adjusted logits [V] (float32 on the CPU) given the reply's tokens so far."""
        out = logits.detach().to("cpu", torch.float32).clone()  # [V]
        if self.bias:
            out[torch.tensor(list(self.bias))] += torch.tensor(list(self.bias.values()))
        if reply_ids and (self.presence or self.frequency):
            ids, counts = torch.tensor(list(reply_ids)).unique(return_counts=True)  # [U], [U]
            out[ids] -= self.presence + self.frequency * counts.float()
        return out


@torch.inference_mode()
def token_logprobs(
    logits: torch.Tensor, temperature: float, token: int, k: int
) -> tuple[float, list[tuple[int, float]]]:
    """The log-probability of `token` and the `k` most likely (id, log-probability) under the distribution the token
    was drawn from: softmax(logits / temperature) (temperature 0: softmax(logits)), before top-p truncation."""
    logp = torch.log_softmax(scaled(logits, temperature or 1.0), dim=-1).clamp(min=LOGPROB_FLOOR)  # [V]
    top = logp.topk(k) if k else None
    alternatives = list(zip(top.indices.tolist(), top.values.tolist(), strict=True)) if top is not None else []
    return float(logp[token]), alternatives


def scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """`logits` [V] / `temperature` in float32 on the CPU, shifted so that the largest is 0. A temperature that float32
    cannot hold (1e-300 is 0 there) is its smallest normal number: the most likely tokens share all the mass, the
    rest get none (a division by 0, or logits over 1e38, would have made every probability NaN)."""
    x = logits.detach().to("cpu", torch.float32)  # [V]
    return (x - x.max()) / max(temperature, torch.finfo(torch.float32).tiny)


def nucleus(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The smallest set of most likely tokens whose mass reaches top_p: (ids [K], probs [K]), most likely first.

    Looks at the top 1024 tokens first and sorts the whole vocabulary only when they do not reach top_p.
    """
    if top_p >= 1.0:
        return torch.arange(len(probs)), probs
    k = min(1024, len(probs))
    top, ids = probs.topk(k)  # [k] sorted descending
    if top.sum() < top_p and k < len(probs):
        top, ids = probs.sort(descending=True)
    # the tokens whose preceding mass is below top_p; the most likely one always (a top_p of 1e-300 is 0 in float32)
    keep = max(1, int((top.cumsum(0) - top < top_p).sum()))
    return ids[:keep], top[:keep]


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
