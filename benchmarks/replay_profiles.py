"""The memory profiles of `bench replay --cross-fit K` and `--learn N`: calibrated on recorded conversations rendered
as the replay renders them (benchmarks.replay_trace), so that no conversation is replayed with a profile that saw it."""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import console
from benchmarks.replay_trace import load_replayed
from kvstore.errors import KVStoreError
from pipeline.conversations import Conversation, conversation_name, load_conversation


def folds(traces: list[Path], k: int) -> list[list[Path]]:
    """The conversations in `k` consecutive folds of (nearly) equal size, the larger ones first."""
    if k < 2 or k > len(traces) // 2:
        raise KVStoreError(
            f"--cross-fit {k}: give at least 2 folds, and at most half as many as the {len(traces)} conversations "
            "(each profile is calibrated on conversations outside its fold)"
        )
    size, extra = divmod(len(traces), k)
    bounds = [i * size + min(i, extra) for i in range(k + 1)]
    return [traces[bounds[i] : bounds[i + 1]] for i in range(k)]


def check_cross_fit(traces: list[Path], k: int, sources: int) -> None:
    folds(traces, k)
    if sources < 2:
        raise KVStoreError(f"--calibrate-on {sources}: a profile needs at least two conversations")


def cross_fit(
    traces: list[Path], k: int, sources: int, model, tokenizer, max_tokens: int | None, where: Path, system: str
) -> tuple[dict[Path, Path], list[dict]]:
    """One profile per fold, calibrated on the first `sources` conversations outside it (in the given order), so
    that no conversation is replayed with a profile that saw it; (trace -> profile file, what each fold got).
    The caller checks `k` and `sources` first (check_cross_fit), before the model loads."""
    mapping, record = {}, []
    for i, fold in enumerate(folds(traces, k)):
        others = [t for t in traces if t not in fold][:sources]
        path = where / f"fold{i + 1}.pt"
        what = f"fold {i + 1}/{k} ({len(fold)} conversations)"
        profile = _calibrate_to(path, others, model, tokenizer, max_tokens, what, {"fold": i + 1}, system)
        mapping |= {t: path for t in fold}
        names = [conversation_name(t) for t in fold]
        record.append(
            {"fold": i + 1, "conversations": names, "profile": profile.summary, "sources": profile.meta["sources"]}
        )
    return mapping, record


def learn_first(
    traces: list[Path], n: int, model, tokenizer, max_tokens: int | None, where: Path, system: str
) -> tuple[dict[Path, Path], dict]:
    """What a user's runs of the default memory get when it learns as it goes (`solve` and `chat` learn from one
    conversation, `eval --warmup N` from N): a profile calibrated on the first `n` conversations (one: with its task
    statement marked, see first_statement_variants), for every later one; (trace -> profile, the record)."""
    path = where / "learned.pt"
    variants = (
        first_statement_variants(traces, load_replayed(traces[0], tokenizer, system).conversation) if n == 1 else []
    )
    what = f"--learn {n}"
    profile = _calibrate_to(path, traces[:n], model, tokenizer, max_tokens, what, {"learned": n}, system, variants)
    return {t: path for t in traces[n:]}, {"first": n, "profile": profile.summary, "sources": profile.meta["sources"]}


def first_statement_variants(traces: list[Path], conv: Conversation | None = None) -> list[list[dict]]:
    """The first conversation's opening (`conv`: as the replay renders it; by default as pipeline.conversations reads
    it, enough to check the mark before a model loads) with its task statement replaced
    (kvstore.profiles.calibrate.statement_variants), what `--learn 1` calibrates one conversation with; a
    KVStoreError when its statement is not marked."""
    from pipeline.conversations import marked_variants, unmarked

    conv = conv or load_conversation(traces[0])
    variants = marked_variants(conv)
    if not variants:
        raise KVStoreError(f"--learn 1: {unmarked(conv.name)}; give --learn 2 or more")
    return variants


def _calibrate_to(
    path: Path,
    sources: list[Path],
    model,
    tokenizer,
    max_tokens: int | None,
    what: str,
    meta: dict,
    system: str,
    variants=(),
):
    """A profile calibrated on the conversations `sources`, rendered as the replay renders them (`system`,
    benchmarks.replay_trace; the calibration renders without template tools), and `variants`
    (kvstore.profiles.calibrate), saved at `path` (saying so for `what`); the profile."""
    from pipeline.conversations import calibrate_recorded

    conversations = [load_replayed(t, tokenizer, system).conversation for t in sources]
    console.print(f"{what}: calibrating on {', '.join(c.name for c in conversations)}")
    profile = calibrate_recorded(model, tokenizer, conversations, console.print, max_tokens, meta, variants)
    profile.save(path)
    return profile
