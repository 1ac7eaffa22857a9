"""Memory profiles (kvstore.profile, kvstore.calibrate): the attention replies gave the fixed text of an agent's
opening, calibrated on the full cache of a tiny random Qwen3 (real tokenizer) and used by the default memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from profilelib import SYSTEM, conversation, save_tiny_profile
from sessionlib import qwen_tokenizer, tiny_chat_model, words

from kvstore import Session, SessionConfig
from kvstore.cache import model_identity
from kvstore.calibrate import calibrate
from kvstore.errors import KVStoreError
from kvstore.policies.nexus import with_prior
from kvstore.profile import MemoryProfile, common_template


@pytest.fixture(scope="module")
def profile_file(tmp_path_factory) -> Path:
    return save_tiny_profile(tmp_path_factory.mktemp("profile") / "profile.pt")


def test_calibration_finds_the_shared_opening_text_and_weighs_it(profile_file: Path) -> None:
    p = MemoryProfile.load(profile_file)
    renderer_ids = qwen_tokenizer()(SYSTEM)["input_ids"]
    assert len(p.prefix) > len(renderer_ids) and len(p.suffix) > 40  # system prompt + template head; the tail
    assert p.conversations == 3 and p.meta["model"] == "tiny"
    for w in (p.prefix_weight, p.suffix_weight):
        assert w.shape[:2] == (2, tiny_chat_model().config.num_key_value_heads) and bool((w > 0).all())
    mean = torch.cat([p.prefix_weight, p.suffix_weight], -1).mean(-1)
    torch.testing.assert_close(mean, torch.ones_like(mean))


def test_a_profile_applies_only_to_openings_that_carry_its_template(profile_file: Path) -> None:
    p = MemoryProfile.load(profile_file)
    mine = p.prefix + [11, 12, 13] + p.suffix
    prior, matched = p.prior_for(mine)
    assert matched == p.template_tokens and prior.shape[-1] == len(mine)
    assert bool((prior[..., len(p.prefix) : -len(p.suffix)] == 0).all()) and bool((prior[..., :5] > 0).all())
    shorter = p.prefix[:-2] + [11, 12] + p.suffix  # a prefix that ran into the calibration tasks' shared first words
    prior, matched = p.prior_for(shorter)
    assert matched == p.template_tokens - 2 and bool((prior[..., len(p.prefix) - 2 : -len(p.suffix)] == 0).all())
    assert p.prior_for([7] + mine[1:60] + [8] * 40) is None  # another agent's opening
    assert common_template([[1, 2, 3, 9], [1, 2, 4, 9], [1, 2, 9]]) == (2, 1)


def test_the_default_memory_keeps_what_the_profile_weighs(profile_file: Path, tmp_path: Path) -> None:
    model, tok = tiny_chat_model(), qwen_tokenizer()
    convo = conversation(words(40, "delta"), replies=1)

    def run(profile):
        s = Session(model, tok, SessionConfig(budget=256, profile=profile, cache_options={"chunk_size": 128}))
        s.append(convo[:2])
        s.prefill()
        return s

    with_profile, without = run(str(profile_file)), run(None)
    assert with_profile.profile_status.startswith("matched") and without.profile_status is None
    assert with_profile.cache.prior is not None and without.cache.prior is None
    kept = [layer.positions for layer in with_profile.cache.layers]
    assert any(not torch.equal(a, b.positions) for a, b in zip(kept, without.cache.layers, strict=True))
    path = tmp_path / "s.pt"  # the weights live in the saved cache: a resumed session needs no profile file
    with_profile.save(path)
    resumed = Session.load(path, model, tok)
    torch.testing.assert_close(resumed.cache.prior, with_profile.cache.prior)


def test_with_prior_ranks_template_tokens_by_the_profile_and_keeps_their_share() -> None:
    acc = torch.tensor([[[4.0, 1.0, 1.0, 2.0]]])
    prior = torch.tensor([[[1.0, 3.0, 0.0, 0.0]]])  # tokens 0 and 1 are template tokens
    out = with_prior(acc, prior)
    assert out[0, 0, 1] > out[0, 0, 0] and out[0, 0, 2:].tolist() == [1.0, 2.0]
    assert float(out[0, 0, :2].sum()) == pytest.approx(5.0)


def test_a_bad_profile_is_a_clear_error_and_appends_nothing(tmp_path: Path) -> None:
    model, tok = tiny_chat_model(), qwen_tokenizer()
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a profile")
    for path, match in ((bad, "cannot be read"), (tmp_path / "none.pt", "does not exist")):
        s = Session(model, tok, SessionConfig(budget=256, profile=str(path)))
        with pytest.raises(KVStoreError, match=match):
            s.append(conversation("task")[:2])
        assert s.tokens == [] and s.messages == []


def test_a_profile_of_another_model_is_refused(profile_file: Path) -> None:
    other = tiny_chat_model("llama")
    with pytest.raises(KVStoreError, match="calibrated on a model"):
        Session(other, qwen_tokenizer(), SessionConfig(budget=256, profile=str(profile_file))).append(
            conversation("task")[:2]
        )


def test_calibration_needs_two_conversations() -> None:
    with pytest.raises(KVStoreError, match="at least two"):
        calibrate(tiny_chat_model(), qwen_tokenizer(), [conversation("only")], max_tokens=2000)


def test_a_profile_file_is_read_once_while_it_stays_the_same(profile_file: Path, tmp_path: Path) -> None:
    identity = model_identity(tiny_chat_model())
    copy = tmp_path / "copy.pt"
    copy.write_bytes(profile_file.read_bytes())
    first = MemoryProfile.load_for(copy, identity)
    assert MemoryProfile.load_for(copy, identity) is first  # e.g. a server opening many sessions
    changed = MemoryProfile.load(copy)
    changed.meta["note"] = "recalibrated"
    changed.save(copy)
    again = MemoryProfile.load_for(copy, identity)
    assert again is not first and again.meta["note"] == "recalibrated"
