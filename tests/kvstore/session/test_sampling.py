"""Next-token choice (greedy, temperature, top-p, seeded) and the streamed reply text with stop strings."""

from __future__ import annotations

import pytest
import torch
from sessionlib import qwen_tokenizer

from kvstore.errors import KVStoreError
from kvstore.session.sampling import LOGPROB_FLOOR, TextStream, check_sampling, next_token, nucleus, token_logprobs


def draws(logits: torch.Tensor, n: int, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    counts = torch.zeros(len(logits))
    for _ in range(n):
        counts[next_token(logits, temperature, top_p, g)] += 1
    return counts / n


def test_greedy_is_argmax() -> None:
    logits = torch.randn(500, generator=torch.Generator().manual_seed(1))
    assert next_token(logits, 0.0, 0.5, torch.Generator()) == int(logits.argmax())


def test_sampling_follows_the_tempered_distribution() -> None:
    logits = torch.randn(20, generator=torch.Generator().manual_seed(2)) * 2
    freq = draws(logits, 20000, temperature=0.7)
    assert (freq - torch.softmax(logits / 0.7, -1)).abs().max() < 0.015


def test_top_p_keeps_only_the_nucleus() -> None:
    probs = torch.tensor([0.05, 0.5, 0.3, 0.1, 0.05])
    ids, kept = nucleus(probs, 0.75)
    assert ids.tolist() == [1, 2]
    assert torch.allclose(kept, torch.tensor([0.5, 0.3]))
    freq = draws(probs.log(), 5000, top_p=0.75)
    assert set(freq.nonzero().flatten().tolist()) == {1, 2}


@pytest.mark.parametrize("temperature", [1e-30, 1e-300, 5e-324])
def test_a_temperature_too_small_for_float32_is_greedy(temperature: float) -> None:
    """1e-300 is 0 in float32: logits / temperature made every probability NaN, and the draw took the last token."""
    logits = torch.randn(500, generator=torch.Generator().manual_seed(3)) * 3
    assert draws(logits, 50, temperature=temperature).argmax() == logits.argmax()
    assert draws(logits, 50, temperature=temperature).max() == 1.0


def test_a_tiny_temperature_shares_the_mass_among_tied_tokens() -> None:
    logits = torch.tensor([1.0, 5.0, 5.0, 2.0])
    assert set(draws(logits, 400, temperature=1e-300).nonzero().flatten().tolist()) == {1, 2}


@pytest.mark.parametrize("top_p", [1e-300, 5e-324])
def test_a_top_p_too_small_for_float32_keeps_the_most_likely_token(top_p: float) -> None:
    """1e-300 is 0 in float32: the nucleus was empty and the draw raised IndexError (HTTP 500 in serve)."""
    logits = torch.randn(500, generator=torch.Generator().manual_seed(4))
    assert nucleus(torch.softmax(logits, -1), top_p)[0].tolist() == [int(logits.argmax())]
    assert draws(logits, 20, top_p=top_p).argmax() == logits.argmax()


def test_logprobs_at_a_tiny_temperature_are_finite() -> None:
    """-inf (and NaN before) cannot be sent as JSON: the impossible tokens get the floor, as OpenAI's -9999."""
    logits = torch.randn(500, generator=torch.Generator().manual_seed(5))
    best = int(logits.argmax())
    chosen, top = token_logprobs(logits, 1e-300, best, 3)
    assert chosen == 0.0
    assert [v for _, v in top] == [0.0, LOGPROB_FLOOR, LOGPROB_FLOOR]


def test_seeded_draws_repeat() -> None:
    logits = torch.randn(1000, generator=torch.Generator().manual_seed(3))
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert [next_token(logits, 1.0, 0.9, g1) for _ in range(50)] == [
        next_token(logits, 1.0, 0.9, g2) for _ in range(50)
    ]


@pytest.mark.parametrize(("temperature", "top_p"), [(-0.1, 1.0), (1.0, 0.0), (1.0, 1.5)])
def test_bad_sampling_settings(temperature: float, top_p: float) -> None:
    with pytest.raises(KVStoreError):
        check_sampling(temperature, top_p)


def test_stream_stops_at_a_stop_string_and_streams_whole_characters() -> None:
    tok = qwen_tokenizer()
    ids = tok("héllo <function=finish>\n</function> tail", add_special_tokens=False)["input_ids"]
    pieces: list[str] = []
    stream = TextStream(lambda x: tok.decode(x), stop=["</function>"], on_token=pieces.append)
    stopped_at = next(i for i, t in enumerate(ids) if stream.push(t))
    stream.flush()
    assert stream.text.endswith("</function>")
    assert stopped_at < len(ids) - 1
    assert "".join(pieces) == stream.text
    assert all("\ufffd" not in p for p in pieces)
