"""Run one quality item on one cache: prefill (and evict) the context first, then ask, greedy-decode, score.

Two modes. Question-unaware (the agent setting, the default): the question is never seen before the context was
compressed: the context (or each conversation turn) is prefilled chunk by chunk on the evicting cache, and only then
the question, the generation prompt and the answer prefix. Query-aware (the paper's RULER setting, RunSpec
query_aware): the questions close the context message, the prompt is prefilled in one forward and compressed once
with the question as the window, then the generation prompt and the answer prefix follow (context tasks only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import torch

import kvstore
from benchmarks.quality_tasks import Item
from kvstore.session.render import ChatRenderer


@dataclass
class RunSpec:
    """One cell of the run matrix."""

    policy: str  # kvstore policy name
    density: float  # share of the context kept (multi_turn: of the planned conversation length, as a token budget)
    seed: int  # cache seed (reservoir draws)
    chunk_size: int = 512  # prefill chunk in tokens
    options: dict = field(default_factory=dict)  # further CacheConfig knobs for evicting policies (ablations)
    query_aware: bool = False  # the questions inside the compressed prompt (context tasks; see the module doc)

    @property
    def label(self) -> str:
        """The policy name, with QUERY_AWARE appended in query-aware mode (its own column in tables)."""
        return self.policy + (QUERY_AWARE if self.query_aware else "")


QUERY_AWARE = "+q"  # label suffix of query-aware runs


def score(reply: str, answers: list[str]) -> float:
    """Share of the expected answers found in the reply (whole-word match, case-insensitive)."""
    found = [re.search(rf"(?<![A-Za-z0-9]){re.escape(a)}(?![A-Za-z0-9])", reply, re.IGNORECASE) for a in answers]
    return sum(f is not None for f in found) / len(answers)


@torch.inference_mode()
def greedy(model, cache, prompt: list[int], max_new: int, stop_ids: set[int]) -> list[int]:
    """Prefill `prompt` on `cache` and decode greedily up to `max_new` tokens (stops at an end-of-turn token)."""
    device = next(model.parameters()).device
    logits = kvstore.prefill(model, cache, torch.tensor([prompt], device=device))  # [1, V]
    out: list[int] = []
    for _ in range(max_new):
        token = int(logits[0].argmax())
        if token in stop_ids:
            break
        out.append(token)
        logits = kvstore.forward(model, cache, torch.tensor([[token]], device=device))[:, -1]
    return out


def _stop_ids(tokenizer, renderer: ChatRenderer) -> set[int]:
    ids = {i for i in renderer.end_of_turn_ids if i in tokenizer.all_special_ids}
    return ids | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())


def _ask(renderer: ChatRenderer, question: str, prefix: str) -> list[int]:
    """Tokens of a new user turn with the question, the generation prompt and the answer prefix."""
    return renderer.encode_messages([{"role": "user", "content": question}], first=False) + (
        renderer.generation_prompt_ids + renderer.encode(prefix)
    )


def cache_budget(item: Item, spec: RunSpec, planned_tokens: int, block: int = 32) -> int | float | None:
    """Context tasks: the density (fixed from the context at its prefill); multi_turn: a fixed token budget,
    density x the planned conversation length (the first turn alone would make a density meaningless)."""
    if spec.policy == "full":
        return None
    if item.task != "multi_turn":
        return spec.density
    return max(4 * block, round(spec.density * planned_tokens / block) * block)


def run_item(model, tokenizer, item: Item, spec: RunSpec, planned_tokens: int) -> dict:
    """Prefill the turns one by one on one evicting cache (true eviction), then ask the questions in turn."""
    renderer = _renderer(tokenizer)
    budget = cache_budget(item, spec, planned_tokens)
    options = {} if spec.policy == "full" else spec.options
    aware = spec.query_aware and item.task != "multi_turn"
    item = with_questions_in_context(item) if aware else item
    chunk = 1 << 30 if aware else spec.chunk_size  # query-aware: one forward, compressed once with the question
    cache = kvstore.make_cache(model, spec.policy, budget, seed=spec.seed, chunk_size=chunk, **options)
    device = next(model.parameters()).device
    stop = _stop_ids(tokenizer, renderer)
    context, spans = 0, []
    for i, batch in enumerate(item.turns):
        ids = renderer.encode_messages(batch, first=i == 0)
        spans += [[context + t for t in span] for span in evidence_spans(tokenizer, renderer, batch, i == 0, item)]
        kvstore.prefill(model, cache, torch.tensor([ids], device=device))
        context += len(ids)
    held = cache.stats()["tokens_held"] / len(cache.layers)
    kept = retention(cache, spans)
    scores, replies = [], []
    for n, q in enumerate(item.questions):
        ask = renderer.generation_prompt_ids + renderer.encode(q.prefix) if aware and n == 0 else None
        out = greedy(model, cache, ask or _ask(renderer, q.text, q.prefix), q.max_new_tokens, stop)
        replies.append(renderer.decode(out))
        kvstore.prefill(model, cache, torch.tensor([renderer.end_of_reply(out)], device=device))
        if q.answers:
            scores.append(score(replies[-1], q.answers))
    return {
        "score": sum(scores) / len(scores),
        "replies": replies,
        "context_tokens": context,
        "held_tokens": held,
        "budget": budget,
        **kept,
    }


def with_questions_in_context(item: Item) -> Item:
    """The item with its questions appended to the last context message (the paper's RULER prompt)."""
    turns = [list(batch) for batch in item.turns]
    last = dict(turns[-1][-1])
    last["content"] = last["content"] + "\n\n" + "\n".join(q.text for q in item.questions)
    turns[-1][-1] = last
    return replace(item, turns=turns)


def evidence_spans(tokenizer, renderer: ChatRenderer, batch: list[dict], first: bool, item: Item) -> list[list[int]]:
    """Token indices (within this batch's tokens) of each evidence sentence found in the batch's text."""
    text = renderer.messages_text(batch, first)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = []
    for sentence in item.evidence:
        start = text.find(sentence)
        if start >= 0:
            end = start + len(sentence)
            spans.append([t for t, (a, b) in enumerate(enc["offset_mapping"]) if a < end and b > start])
    return spans


def retention(cache, spans: list[list[int]]) -> dict:
    """How much of the evidence the cache still holds, over layers and kv heads (heads of per-head policies
    separately): the share of evidence tokens held, and the share of evidence sentences held whole."""
    if not spans:
        return {}
    tokens, whole = [], []
    for layer in cache.layers:
        for h in range(layer.positions.shape[1]):
            pos = layer.positions[0, h]  # [T_held]
            if layer.valid is not None:
                pos = pos[layer.valid[0, h]]
            held = set(pos.tolist())
            for span in spans:
                hit = sum(p in held for p in span)
                tokens.append(hit / len(span))
                whole.append(float(hit == len(span)))
    return {"evidence_kept": sum(tokens) / len(tokens), "evidence_whole": sum(whole) / len(whole)}


_RENDERERS: dict[int, ChatRenderer] = {}


def _renderer(tokenizer) -> ChatRenderer:
    if id(tokenizer) not in _RENDERERS:
        _RENDERERS[id(tokenizer)] = ChatRenderer(tokenizer)
    return _RENDERERS[id(tokenizer)]
