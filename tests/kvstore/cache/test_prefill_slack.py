"""prefill_slack (kvstore.cache.config): the chunks of one prefill before its last evict only past budget + slack,
so a message up to the slack is evicted once, on the attention of all its queries, as one chunk of it would be;
the storage that peak grew is given back, and a server's admission counts the peak."""

import pytest
from tinymodels import random_ids, tiny_model

import kvstore
from kvstore.cache.config import CacheConfig
from kvstore.session.config import SessionConfig
from server.memory import peak_tokens

BUDGET, PROMPT, CHUNK = 96, 700, 64


def _prefilled(model, policy: str, chunk: int, **options):
    cache = kvstore.make_cache(model, policy, budget=BUDGET, seed=0, chunk_size=chunk, **options)
    peaks = []
    cache.add_observer(lambda layer: peaks.append(layer.held()))
    kvstore.prefill(model, cache, random_ids(PROMPT, seed=5), chunk_size=chunk)
    return cache, max(peaks)


def _held(cache) -> list[list[int]]:
    return [sorted(layer.positions[0, 0].tolist()) for layer in cache.layers]


@pytest.mark.parametrize("policy", ["h2o", "nexus-agent"])
def test_a_message_within_the_slack_is_evicted_once_as_one_chunk_would_be(policy):
    model = tiny_model(layers=2).float()
    whole, _ = _prefilled(model, policy, PROMPT, prefill_slack=0)
    chunked, peak = _prefilled(model, policy, CHUNK, prefill_slack=PROMPT)
    per_chunk, _ = _prefilled(model, policy, CHUNK, prefill_slack=0)
    assert chunked.stats()["eviction_steps"] == len(chunked.layers)  # once per layer
    assert peak == PROMPT  # nothing evicted before the last chunk
    assert chunked.stats()["tokens_held_per_layer"] == [BUDGET] * len(chunked.layers)
    assert _held(chunked) == _held(whole)
    assert _held(per_chunk) != _held(whole)  # the slack is what makes the difference here


def test_past_the_slack_the_chunks_evict_again():
    model = tiny_model(layers=2)
    slack = 200
    cache, peak = _prefilled(model, "h2o", CHUNK, prefill_slack=slack)
    assert BUDGET + slack < peak <= BUDGET + slack + CHUNK
    assert cache.stats()["eviction_steps"] > len(cache.layers)
    assert cache.stats()["tokens_held_per_layer"] == [BUDGET] * len(cache.layers)
    assert "others once past budget + 200" in cache.stats()["evicts_when"]


def test_the_peaks_storage_is_given_back_after_the_eviction():
    model = tiny_model(layers=2)
    per_chunk, _ = _prefilled(model, "h2o", CHUNK, prefill_slack=0)
    slack, _ = _prefilled(model, "h2o", CHUNK, prefill_slack=PROMPT)
    for a, b in zip(per_chunk.layers, slack.layers, strict=True):
        assert b.store.allocated_bytes() <= 1.5 * a.store.allocated_bytes()  # not the 700-token peak's (4.4x)
    kvstore.forward(model, slack, random_ids(1, seed=9))  # decoding goes on in the trimmed storage
    assert slack.stats()["tokens_held_per_layer"] == [BUDGET + 1] * len(slack.layers)


def test_admission_counts_the_slack_in_a_turns_peak():
    model = tiny_model(layers=2)
    plain = kvstore.make_cache(model, "h2o", budget=BUDGET, seed=0)
    slack = kvstore.make_cache(model, "h2o", budget=BUDGET, seed=0, prefill_slack=1000)
    block = plain.config.block
    assert peak_tokens(plain, 0, 3000, 10, 512) == BUDGET + 2 * block + 512
    assert peak_tokens(slack, 0, 3000, 10, 512) == BUDGET + 2 * block + 1512
    assert peak_tokens(slack, 5000, 800, 10, 512) == BUDGET + 2 * block + 800  # the message, whole


def test_the_default_memory_has_the_slack_and_an_older_saved_session_none():
    assert SessionConfig(policy="nexus-agent").cache.prefill_slack == 4096
    saved = CacheConfig.of("nexus-agent").to_dict()
    del saved["prefill_slack"]
    assert CacheConfig.from_saved(saved).prefill_slack == 0
