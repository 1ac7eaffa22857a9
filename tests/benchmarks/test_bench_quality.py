"""`nexus-agent bench quality`: task generation over real stdlib text, scoring, the run matrix, and a quick run of
the real default model (SmolLM2-135M) through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from benchmarks.quality import QualityConfig
from benchmarks.quality_run import RunSpec, _renderer, cache_budget, evidence_spans, score
from benchmarks.quality_tasks import CONTEXT_TASKS, TASKS, make_item, stdlib_files
from cli.app import app
from kvstore import POLICIES
from kvstore.cache.config import is_stochastic
from kvstore.models.registry import load_model


@pytest.fixture(scope="module")
def smol():
    threads = torch.get_num_threads()
    model, tok, _ = load_model("smollm2-135m")
    yield model, tok
    torch.set_num_threads(threads)  # the command sets its own thread count


def test_items_are_deterministic_real_text_with_needles(smol) -> None:
    _, tok = smol
    for task in CONTEXT_TASKS:
        a, b = make_item(task, 0, 1, tok, 400), make_item(task, 0, 1, tok, 400)
        assert a == b
        assert make_item(task, 1, 1, tok, 400) != a
        context = a.turns[0][0]["content"]
        n = len(tok(context, add_special_tokens=False)["input_ids"])
        assert 300 < n < 600, n
        assert "def " in context or "import " in context
        assert "\n# " in context  # stdlib source + planted comments
        for answer in a.questions[-1].answers:
            assert answer in context  # every expected answer is in the context, never in the question
            assert answer not in a.questions[-1].text
    assert len(stdlib_files()) > 50


def test_two_hop_bridge_needle_does_not_name_the_person(smol) -> None:
    _, tok = smol
    item = make_item("two_hop", 0, 0, tok, 400)
    first, then = item.questions
    assert first.answers == []
    assert then.answers  # only the second hop is scored
    person = first.prefix.split()[0]
    code_line = next(line for line in item.turns[0][0]["content"].splitlines() if then.answers[0] in line)
    assert person not in code_line  # reaching the code needs the drawer, i.e. the other needle


def test_evidence_spans_cover_exactly_the_evidence(smol) -> None:
    _, tok = smol
    renderer = _renderer(tok)
    for task in TASKS:
        item = make_item(task, 0, 0, tok, 400)
        found = []
        for i, batch in enumerate(item.turns):
            ids = renderer.encode_messages(batch, first=i == 0)
            found += [
                tok.decode([ids[t] for t in span]).strip()
                for span in evidence_spans(tok, renderer, batch, i == 0, item)
            ]
        assert found and sorted(found) == sorted(item.evidence), task


def test_multi_turn_is_a_conversation_of_tool_turns(smol) -> None:
    _, tok = smol
    item = make_item("multi_turn", 0, 0, tok, 800)
    roles = [m["role"] for batch in item.turns for m in batch]
    assert roles[:3] == ["system", "user", "assistant"]
    assert roles.count("tool") >= 3
    facts = item.turns[1][0]["content"]
    assert all(q.answers[0] in facts for q in item.questions)


def test_score_is_whole_word_and_partial_for_several_answers() -> None:
    assert score(" 1234567.", ["1234567"]) == 1.0
    assert score(" 12345678", ["1234567"]) == 0.0
    assert score("VAR ABCDE, VAR_FGHIJ", ["ABCDE", "FGHIJ", "KLMNO"]) == pytest.approx(2 / 3)


def test_run_matrix_and_budgets() -> None:
    cfg = QualityConfig(policies=("full", "nexus", "snapkv"), densities=(0.2, 0.5), seeds=3)
    specs = cfg.specs()  # both modes: question-unaware and query-aware
    assert sum(s.policy == "full" for s in specs) == 2
    assert sum(s.query_aware for s in specs) == len(specs) // 2
    assert sum(s.policy == "nexus" for s in specs) == 12
    assert sum(s.policy == "snapkv" for s in specs) == 4
    assert cfg.labels() == ["full", "full+q", "nexus", "nexus+q", "snapkv", "snapkv+q"]
    stochastic = sum(is_stochastic(p) for p in POLICIES)
    assert len(QualityConfig(modes=("unaware",)).specs()) == 1 + 2 * (len(POLICIES) - 1 - stochastic + 3 * stochastic)
    turn_item = type("I", (), {"task": "multi_turn"})()
    ctx_item = type("I", (), {"task": "single_needle"})()
    assert cache_budget(turn_item, RunSpec("nexus", 0.2, 0), 1600) == 320  # a fixed token budget
    assert cache_budget(ctx_item, RunSpec("nexus", 0.2, 0), 1600) == 0.2  # a density of the context
    assert cache_budget(ctx_item, RunSpec("full", 0.2, 0), 1600) is None


def test_unknown_policy_is_one_clear_error() -> None:
    result = CliRunner().invoke(app, ["bench", "quality", "--policies", "nexus,bogus", "--quick"])
    assert result.exit_code != 0
    assert "unknown policy/task bogus" in str(result.exception)


@pytest.mark.slow
def test_quick_run_writes_table_json_and_plot(tmp_path: Path, smol) -> None:
    out, png = tmp_path / "q.json", tmp_path / "q.png"
    tasks = "single_needle,multi_turn"
    args = ["bench", "quality", "--quick", "--tasks", tasks, "--json", str(out), "--plot", str(png)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Accuracy at density 50%" in result.output
    assert "Evidence tokens still held" in result.output
    data = json.loads(out.read_text())
    rows = data["rows"]
    # unaware: 2 tasks x (full + nexus x 2 seeds + snapkv); query-aware: the context task only
    assert len(rows) == 2 * (1 + 2 + 1) + (1 + 2 + 1)
    assert {r["policy"] for r in rows} == {"full", "nexus", "snapkv", "full+q", "nexus+q", "snapkv+q"}
    assert {r["task"] for r in rows if r["mode"] == "aware"} == {"single_needle"}
    assert all(0.0 <= r["score"] <= 1.0 for r in rows)
    assert all(r["replies"] for r in rows)
    for r in rows:
        if r["policy"] in ("full", "full+q"):
            assert r["held_tokens"] == r["context_tokens"]  # nothing evicted
            assert r["evidence_kept"] == r["evidence_whole"] == 1.0
        else:
            assert r["held_tokens"] < r["context_tokens"]  # compressed before the question was seen
            assert 0.0 <= r["evidence_whole"] <= r["evidence_kept"] <= 1.0
    nexus = [s for s in data["summary"] if s["policy"] == "nexus" and s["task"] == "single_needle"]
    assert nexus[0]["seeds"] == 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(TASKS) >= {s["task"] for s in data["summary"]} - {"avg"}
