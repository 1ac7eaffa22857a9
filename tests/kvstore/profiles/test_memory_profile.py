"""Memory profiles (kvstore.profiles.profile, kvstore.profiles.calibrate): the attention replies gave the fixed text
of an agent's
opening, calibrated on the full cache of a tiny random Qwen3 (real tokenizer) and used by the default memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from profilelib import SYSTEM, conversation, save_tiny_profile
from sessionlib import qwen_tokenizer, tiny_chat_model, words

from kvstore import Session, SessionConfig
from kvstore.cache.evicting import model_identity
from kvstore.errors import KVStoreError
from kvstore.policies.nexus_agent import with_prior
from kvstore.profiles import calibrate as calibration
from kvstore.profiles.calibrate import calibrate
from kvstore.profiles.profile import MemoryProfile, common_template


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


def test_the_first_reply_gets_its_share_of_the_weights(monkeypatch) -> None:
    """A profile's weights are FIRST_SHARE the first reply's and the rest all replies': the same as that blend of a
    profile of all replies and one of the conversations cut after their first reply (each with no first share)."""
    convs = [conversation(words(40, t), replies=3) for t in ("alpha", "beta")]
    cut = [c[:3] for c in convs]  # system, user, the first reply
    model, tok = tiny_chat_model(), qwen_tokenizer()
    blended = calibrate(model, tok, convs, max_tokens=2000)
    assert blended.meta["first_share"] == calibration.FIRST_SHARE == 0.5
    monkeypatch.setattr(calibration, "FIRST_SHARE", 0.0)
    every, first = calibrate(model, tok, convs, max_tokens=2000), calibrate(model, tok, cut, max_tokens=2000)
    assert every.prefix == first.prefix == blended.prefix and every.suffix == blended.suffix
    assert not torch.allclose(every.prefix_weight, first.prefix_weight, rtol=0.05)  # later replies read otherwise
    for name in ("prefix_weight", "suffix_weight"):
        want = 0.5 * getattr(every, name) + 0.5 * getattr(first, name)
        torch.testing.assert_close(getattr(blended, name), want)


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

    # a suffix that differs near its end (an agent's "Steps Remaining: 40" where the profile's runs had "5")
    head, end = p.prefix + [11, 12, 13] + p.suffix[:-3], p.suffix[-2:]
    for other in ([99], [98, 99]):
        prior, matched = p.prior_for(head + other + end)
        assert matched == p.template_tokens - 1, other
        n = len(head)
        torch.testing.assert_close(prior[..., n - 5 : n], p.suffix_weight[..., -8:-3])  # the text before it matches
        assert bool((prior[..., n : n + len(other)] == 0).all())
        torch.testing.assert_close(prior[..., -2:], p.suffix_weight[..., -2:])
    changed = p.prefix + [11] + p.suffix[:-12] + [99] * 10 + p.suffix[-2:]  # more than a few tokens: the end only
    assert p.prior_for(changed)[1] == len(p.prefix) + 2
    assert common_template([[1, 2, 3, 9], [1, 2, 4, 9], [1, 2, 9]]) == (2, 1)


def test_an_exact_profile_applies_only_to_openings_that_carry_its_whole_template(profile_file: Path) -> None:
    """A shipped profile (meta["exact"], pipeline.profiles.builtin) gives nothing to an opening that shares most of
    its template but not all (a harness with the same system prompt and another task message)."""
    p = MemoryProfile.load(profile_file)
    p.meta["exact"] = True
    assert p.prior_for(p.prefix[:-2] + [11, 12] + p.suffix) is None


def test_an_exact_profile_applies_to_an_opening_that_carries_its_whole_template(profile_file: Path) -> None:
    p = MemoryProfile.load(profile_file)
    p.meta["exact"] = True
    assert p.prior_for(p.prefix + [11, 12, 13] + p.suffix)[1] == p.template_tokens


def test_an_exact_profile_allows_a_few_tokens_at_the_end_to_differ(profile_file: Path) -> None:
    """The step limit an agent states last ("Steps Remaining: 40" where the calibration said 5)."""
    p = MemoryProfile.load(profile_file)
    p.meta["exact"] = True
    assert p.prior_for(p.prefix + [11] + p.suffix[:-3] + [98, 99] + p.suffix[-2:]) is not None


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
    assert with_profile.cache.signals.prior is not None and without.cache.signals.prior is None
    kept = [layer.positions for layer in with_profile.cache.layers]
    assert any(not torch.equal(a, b.positions) for a, b in zip(kept, without.cache.layers, strict=True))
    path = tmp_path / "s.pt"  # the weights live in the saved cache: a resumed session needs no profile file
    with_profile.save(path)
    resumed = Session.load(path, model, tok)
    torch.testing.assert_close(resumed.cache.signals.prior, with_profile.cache.signals.prior)


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


def test_one_conversation_calibrates_when_variants_mark_its_task(profile_file: Path) -> None:
    """A single conversation with openings of other tasks beside it (never replayed) finds the template the three
    conversations of `profile_file` share, from its own replies alone."""
    from kvstore.profiles.calibrate import statement_variants

    task = words(40, "alpha")
    one = conversation(task)
    variants = statement_variants(one, task)
    assert len(variants) == 2 and all(task not in v[1]["content"] for v in variants)
    p = calibrate(tiny_chat_model(), qwen_tokenizer(), [one], max_tokens=2000, variants=variants)
    three = MemoryProfile.load(profile_file)
    assert p.conversations == 1 and p.prefix == three.prefix
    # the three tasks all end in "39", so their template takes those tokens too; the variants' template does not
    assert 0 <= len(three.suffix) - len(p.suffix) <= 3 and p.suffix == three.suffix[-len(p.suffix) :]
    assert statement_variants(one, "not in it") == [] and statement_variants(one, None) == []
    with pytest.raises(KVStoreError, match="needs a conversation"):  # variants alone: nothing replayed
        calibrate(tiny_chat_model(), qwen_tokenizer(), [], max_tokens=2000, variants=variants)


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


def test_a_profile_directory_gives_each_opening_the_profile_that_fits_it(profile_file: Path, tmp_path: Path) -> None:
    from kvstore.profiles.profile import best_match, load_profiles, store_name

    model, tok = tiny_chat_model(), qwen_tokenizer()
    mine = MemoryProfile.load(profile_file)
    narrow = MemoryProfile.load(profile_file)  # the same agent, a profile that knows only part of its template
    narrow.suffix, narrow.suffix_weight = narrow.suffix[:0], narrow.suffix_weight[..., :0]
    other = MemoryProfile.load(profile_file)
    other.identity = dict(other.identity, num_layers=other.identity["num_layers"] + 1)
    other.prefix_weight = torch.ones(other.identity["num_layers"], *other.prefix_weight.shape[1:])
    other.suffix_weight = torch.ones(other.identity["num_layers"], *other.suffix_weight.shape[1:])
    store = tmp_path / "store"
    for name, p in (("a-narrow.pt", narrow), (store_name(mine), mine), ("z-other-model.pt", other)):
        p.save(store / name)
    (store / "notes.txt").write_text("not a profile")  # other files are not read
    found = load_profiles(store, model_identity(model))
    assert sorted(name for name, _ in found) == sorted(["a-narrow.pt", store_name(mine)])  # other models: skipped
    s = Session(model, tok, SessionConfig(budget=256, profile=str(store)))
    s.append(conversation("epsilon")[:2])
    assert s.profile_status.startswith("matched ")  # the full profile, not the narrow one that also matches
    assert s.profile_status.endswith(f" of {mine.template_tokens} template tokens ({store_name(mine)})")
    assert best_match(found, [5] * 300) == (None, "opening does not carry the template of any of 2 profiles")
    assert best_match([], [5] * 300) == (None, "no memory profile for this model")
    (store / "broken.pt").write_bytes(b"\x00")  # a corrupt file is a clear error, not a silent skip
    damaged = r"broken.pt cannot be read: not a memory profile.*\); remove it from there, or use no profile \('none'\)$"
    with pytest.raises(KVStoreError, match=damaged):
        load_profiles(store, model_identity(model))
    assert store_name(mine) == store_name(MemoryProfile.load(profile_file))  # recalibrating replaces it
    assert store_name(mine).startswith("tiny-") and store_name(mine) != store_name(other)


def test_a_session_that_skips_unreadable_profiles_uses_the_rest(profile_file: Path, tmp_path: Path, capsys) -> None:
    """A server's sessions (skip_unreadable_profiles): a file in its profile directory that turns up damaged while
    it serves is skipped, said once, instead of failing every new session with the client's HTTP 400."""
    from kvstore.profiles.profile import load_profiles, store_name

    model, tok = tiny_chat_model(), qwen_tokenizer()
    mine = MemoryProfile.load(profile_file)
    store = tmp_path / "store"
    mine.save(store / store_name(mine))
    (store / "zz-copy-under-way.pt").write_bytes(b"PK\x03\x04 half a file")
    config = SessionConfig(budget=256, profile=str(store), skip_unreadable_profiles=True)
    for _ in range(2):
        s = Session(model, tok, config)
        s.append(conversation("epsilon")[:2])
        assert s.profile_status.endswith(f"({store_name(mine)})")
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1
    assert said[0].startswith("nexus-agent: memory profile skipped: ")
    assert "zz-copy-under-way.pt cannot be read" in said[0]
    with pytest.raises(KVStoreError, match="zz-copy-under-way.pt cannot be read"):
        load_profiles(store, model_identity(model))  # a run's sessions: a clear error, as before


def test_a_long_model_name_still_makes_a_file_name(profile_file: Path, tmp_path: Path) -> None:
    """A profile uploaded to serve with a 300-character model name failed to save (File name too long: HTTP 500)."""
    from kvstore.profiles.profile import store_name

    profile = MemoryProfile.load(profile_file)
    profile.meta["model"] = "m" * 300
    name = store_name(profile)
    profile.save(tmp_path / name)
    assert len(name) < 128
    assert MemoryProfile.load(tmp_path / name).meta["model"] == "m" * 300


def test_the_memory_profile_option_resolves_auto_none_and_paths(tmp_path: Path, monkeypatch, profile_file) -> None:
    from pipeline.config import RunConfig, run_memory
    from pipeline.errors import RunError
    from pipeline.profiles.store import CLIENT, SERVE, resolve_profile

    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
    assert resolve_profile("auto") is None and RunConfig(memory=run_memory(profile="auto")).memory.profile is None
    store = tmp_path / "home" / "profiles"
    store.mkdir(parents=True)
    assert resolve_profile("auto") is None  # an empty store
    assert resolve_profile("auto", SERVE) == store.resolve()  # a server reads it even while empty
    (store / "p.pt").write_bytes(profile_file.read_bytes())
    auto = run_memory(profile="auto")  # the store only when asked for: the default is the shipped profile
    assert resolve_profile("auto") == store.resolve() and RunConfig(memory=auto).memory.profile == store.resolve()
    assert RunConfig().memory.profile.parent.name == "shipped"  # pipeline.profiles.builtin
    assert resolve_profile("auto", CLIENT) is None  # a server applies its own
    assert resolve_profile("none") is None and RunConfig(memory=run_memory(profile="none")).memory.profile is None
    assert resolve_profile(str(profile_file)) == profile_file.resolve()
    # the predictions' label names the profile (a file by its stem, the store by its folder); none: as before
    assert RunConfig(memory=run_memory(profile="auto")).model_label().endswith("true-eviction-profile-profiles")
    assert RunConfig(memory=run_memory(profile="none")).model_label().endswith("-true-eviction")
    label = RunConfig(memory=run_memory(profile=str(profile_file))).model_label()
    assert label.endswith(f"-profile-{profile_file.stem}")
    assert RunConfig(memory=run_memory(profile="none")).model_label().endswith("-true-eviction")
    with pytest.raises(RunError, match="no such file or directory"):
        resolve_profile(str(tmp_path / "missing.pt"))
    with pytest.raises(RunError, match="needs the model in this process"):
        RunConfig(memory=run_memory(profile=str(profile_file)), server="http://127.0.0.1:1/v1")
    (store / "q.pt").write_bytes(b"junk")  # a corrupt profile in the store stops a run before its first task
    with pytest.raises(KVStoreError, match="q.pt cannot be read"):
        RunConfig(memory=run_memory(profile="auto"))
    assert RunConfig(memory=run_memory(profile="none")).memory.profile is None
