"""Token priors (kvstore.profiles.tokens): a profile's weights averaged per token id rank the openings its template
does not cover, on the tiny random Qwen3 with the real tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from profilelib import conversation, save_tiny_profile
from sessionlib import qwen_tokenizer, tiny_chat_model, words

from kvstore import Session, SessionConfig
from kvstore.profiles.profile import MemoryProfile
from kvstore.profiles.tokens import TokenPrior


@pytest.fixture(scope="module")
def profile_file(tmp_path_factory) -> Path:
    return save_tiny_profile(tmp_path_factory.mktemp("profile") / "profile.pt")


def test_each_token_id_gets_its_mean_weight_and_an_unknown_id_the_mean(profile_file: Path) -> None:
    p = MemoryProfile.load(profile_file)
    ids = p.prefix + p.suffix
    weights = torch.cat([p.prefix_weight, p.suffix_weight], -1)
    tp = TokenPrior.of(p)
    repeated = max(set(ids), key=ids.count)
    at = [i for i, t in enumerate(ids) if t == repeated]
    assert len(at) > 1
    prior = tp.prior_for([repeated, 10**6, ids[0]])
    torch.testing.assert_close(prior[..., 0], weights[..., at].mean(-1))
    torch.testing.assert_close(prior[..., 1], torch.ones_like(prior[..., 1]))  # never held: the profile's mean
    assert bool((prior > 0).all())


def _session(profile: str | None) -> Session:
    config = SessionConfig(budget=256, profile=profile, cache_options={"chunk_size": 128})
    return Session(tiny_chat_model(), qwen_tokenizer(), config)


def test_an_opening_no_profile_matches_is_ranked_by_the_profiles_token_prior(profile_file: Path) -> None:
    other = [{"role": "system", "content": "another agent"}, {"role": "user", "content": words(300, "q")}]
    with_file, without = _session(str(profile_file)), _session(None)
    for s in (with_file, without):
        s.append(other)
        s.prefill()
    opening = len(with_file.tokens)
    assert with_file.profile_status == (
        f"opening does not carry the profile's template; token prior for its {opening} opening tokens"
    )
    prior = with_file.cache.signals.prior
    assert prior is not None and prior.shape[-1] == opening and bool((prior > 0).all())
    assert without.cache.signals.prior is None
    assert not with_file.has_profile and with_file.cache.signals.prior_kind == "tokens"  # learning may still run
    kept = [layer.positions for layer in with_file.cache.layers]
    assert any(not torch.equal(a, b.positions) for a, b in zip(kept, without.cache.layers, strict=True))


def test_a_matched_opening_keeps_the_profile_alone(profile_file: Path) -> None:
    """The task statement inside a matched template stays ranked by its own attention (prior 0 there)."""
    s = _session(str(profile_file))
    s.append(conversation(words(40, "delta"), replies=1)[:2])
    p = MemoryProfile.load(profile_file)
    prior = s.cache.signals.prior
    assert s.profile_status.startswith("matched") and "token prior" not in s.profile_status
    assert bool((prior[..., len(p.prefix) : len(s.tokens) - len(p.suffix)] == 0).all())


def test_a_saved_session_remembers_its_prior_was_a_token_prior(profile_file: Path, tmp_path: Path) -> None:
    s = _session(str(profile_file))
    s.append([{"role": "system", "content": "another agent"}, {"role": "user", "content": words(50, "q")}])
    s.prefill()
    s.save(tmp_path / "s.pt")
    back = Session.load(tmp_path / "s.pt", tiny_chat_model(), qwen_tokenizer())
    assert back.cache.signals.prior_kind == "tokens" and not back.has_profile
    torch.testing.assert_close(back.cache.signals.prior, s.cache.signals.prior)


def test_a_directory_of_profiles_gives_no_token_prior(profile_file: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / profile_file.name).write_bytes(profile_file.read_bytes())
    s = _session(str(store))
    s.append([{"role": "system", "content": "another agent"}, {"role": "user", "content": words(50, "q")}])
    assert s.cache.signals.prior is None and s.profile_status == "opening does not carry the profile's template"
