"""research/replay_merge.py: `bench replay --json` files of one configuration, split over processes, budgets or later
specs, join into one result; files of different settings, a run twice, and missing, corrupt or foreign files are
refused with one clear line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from replay_merge import arguments, merge
from rich.console import Console

from benchmarks.replay_report import summarize, summary_table, target_rows


def _run(spec: str, budget: float, kl: float, top1: int, conversation: str = "c1") -> dict:
    turn = {"turn": 1, "start": 0, "tokens": 10, "kl": kl * 10, "nll": 0.0, "top1": top1, "held": 1.0}
    return {"spec": spec, "budget": budget, "conversation": conversation, "turns": [turn]}


def test_split_runs_merge_and_different_settings_are_refused(tmp_path: Path) -> None:
    config = {"model": "m", "specs": ["h2o"], "budgets": [0.25], "max_tokens": 100, "seeds": 1}
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(
        json.dumps(
            {"conversations": [{"name": "c1"}], "runs": [_run("h2o", 0.25, 0.1, 9)], "failed": []}
            | {"config": config | {"traces": ["t1"]}}
        )
    )
    b.write_text(
        json.dumps(
            {"conversations": [{"name": "c2"}], "runs": [_run("h2o", 0.25, 0.2, 9, "c2")]}
            | {"config": config | {"traces": ["t2"]}, "partial": True}
        )
    )
    result, info = merge([a, b])
    assert [c["name"] for c in result["conversations"]] == ["c1", "c2"] and len(result["runs"]) == 2
    assert info["traces"] == ["t1", "t2"] and "partial" not in info  # b stopped after c2, which it had replayed
    stopped = tmp_path / "stopped.json"  # stopped during t3: listed with no run, so the merge is partial
    stopped.write_text(
        json.dumps(
            {"conversations": [{"name": "c3"}], "runs": [], "partial": True}
            | {"config": config | {"traces": ["t3", "t4"]}}
        )
    )
    assert merge([a, b, stopped])[1]["partial"] is True
    stopped.write_text(
        json.dumps({"conversations": [], "runs": [], "partial": True, "config": config | {"traces": ["t4"]}})
    )
    assert merge([a, b, stopped])[1]["partial"] is True  # t4 never reached
    two_seeds = {"conversations": [{"name": "c1"}], "runs": [_run("h2o", 0.25, 0.1, 9)], "partial": True}
    stopped.write_text(json.dumps(two_seeds | {"config": config | {"traces": ["t1"], "seeds": 2}}))
    assert merge([stopped])[1]["partial"] is True  # seed 1 of c1 never ran
    c.write_text(json.dumps({"runs": [], "config": config | {"max_tokens": 200, "traces": []}}))
    with pytest.raises(SystemExit, match="different settings"):
        merge([a, c])
    d = tmp_path / "d.json"  # a spec replayed later on the same conversation joins the earlier result
    d.write_text(
        json.dumps(
            {"conversations": [{"name": "c1"}], "runs": [_run("nexus-agent", 0.25, 0.05, 9)], "failed": []}
            | {"config": config | {"specs": ["nexus-agent"], "traces": ["t1"], "merged_from": 2}}
        )
    )
    result, info = merge([a, b, d])
    assert [c["name"] for c in result["conversations"]] == ["c1", "c2"] and len(result["runs"]) == 3
    assert info["merged_from"] == 4  # d was itself merged from two files
    assert info["specs"] == ["h2o", "nexus-agent"] and info["traces"] == ["t1", "t2"] and info["bound"] is False
    e = tmp_path / "e.json"  # the query-specific bound replayed later joins too, and the result says it has it
    e.write_text(
        json.dumps(
            {"conversations": [{"name": "c1"}], "runs": [_run("bound:query-top-B", 0.25, 0.01, 10)], "failed": []}
            | {"config": config | {"specs": [], "traces": ["t1"], "bound": True}}
        )
    )
    result, info = merge([a, e])
    assert len(result["runs"]) == 2 and info["bound"] is True


def test_budgets_split_over_files_merge_and_a_run_twice_is_refused(tmp_path: Path) -> None:
    config = {"model": "m", "specs": ["h2o"], "max_tokens": 100, "seeds": 1, "traces": ["t1"]}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path, budget in ((a, 0.5), (b, 0.25)):  # one process per budget
        path.write_text(
            json.dumps(
                {"conversations": [{"name": "c1"}], "runs": [_run("h2o", budget, 0.1, 9)], "failed": []}
                | {"config": config | {"budgets": [budget]}}
            )
        )
    result, info = merge([a, b])
    assert info["budgets"] == [0.25, 0.5] and len(result["runs"]) == 2 and len(result["conversations"]) == 1
    with pytest.raises(SystemExit, match="h2o at budget 0.5 on c1 is in more than one file"):
        merge([a, b, a])


def test_a_learned_replay_joins_its_baselines_and_two_different_learnings_are_refused(tmp_path: Path) -> None:
    config = {"model": "m", "budgets": [0.25], "max_tokens": 100, "seeds": 1, "traces": ["t1"]}
    learn = {"first": 1, "profile": "p", "sources": ["c0"]}
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    for path, spec, extra in ((a, "nexus-agent+learned", {"learn": learn}), (b, "h2o", {}), (c, "nexus-agent", {})):
        path.write_text(
            json.dumps(
                {"conversations": [{"name": "c1"}], "runs": [_run(spec, 0.25, 0.1, 9)], "failed": []}
                | {"config": config | {"specs": [spec]} | extra}
            )
        )
    result, info = merge([b, a, c])  # the baseline and the default without a profile beside the learned default
    assert info["learn"] == learn and info["specs"] == ["h2o", "nexus-agent+learned", "nexus-agent"]
    (row,) = target_rows(summarize(result["runs"]), "nexus-agent+learned")
    assert row["best_baseline"] == "h2o"
    d = tmp_path / "d.json"  # learned from another conversation: not the same configuration
    d.write_text(json.dumps({"runs": [], "config": config | {"specs": ["x"], "learn": learn | {"sources": ["c9"]}}}))
    with pytest.raises(SystemExit, match="learn differs"):
        merge([a, d])
    assert "cross_fit" not in info


def test_a_missing_corrupt_or_foreign_file_is_a_clear_error(tmp_path: Path) -> None:
    corrupt, foreign = tmp_path / "corrupt.json", tmp_path / "foreign.json"
    corrupt.write_text('{"runs": [')  # a run stopped while writing
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\x89PNG\r\n")  # the plot given by mistake
    foreign.write_text('{"x": 1}')
    with pytest.raises(SystemExit, match="missing.json: No such file"):
        merge([tmp_path / "missing.json"])
    with pytest.raises(SystemExit, match="corrupt.json: not JSON"):
        merge([corrupt])
    with pytest.raises(SystemExit, match="binary.json: not UTF-8 text"):
        merge([binary])
    with pytest.raises(SystemExit, match="foreign.json: not a `bench replay --json` result"):
        merge([foreign])


def test_a_later_run_joins_under_a_new_label(tmp_path: Path) -> None:
    """`--relabel OLD NEW` renames a spec in the files after it only: the default's name, run again after a change,
    joins the earlier files beside its old rows."""
    config = {"model": "m", "specs": ["nexus-agent", "h2o"], "budgets": [0.25], "traces": ["t1"], "seeds": 1}
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    runs = [_run("nexus-agent", 0.25, 0.1, 9), _run("h2o", 0.25, 0.3, 8)]
    old.write_text(json.dumps({"conversations": [{"name": "c1"}], "runs": runs, "config": config}))
    later = {"conversations": [{"name": "c1"}], "runs": [_run("nexus-agent", 0.25, 0.05, 9)], "failed": []}
    new.write_text(json.dumps(later | {"config": config | {"specs": ["nexus-agent"]}}))
    with pytest.raises(SystemExit, match="more than one file"):
        merge([old, new])
    prefix, paths, relabels = arguments(["out", str(old), "--relabel", "nexus-agent", "nexus-agent [new]", str(new)])
    assert prefix == Path("out") and paths == [old, new] and relabels == [{}, {"nexus-agent": "nexus-agent [new]"}]
    result, info = merge(paths, relabels)
    assert info["specs"] == ["nexus-agent", "h2o", "nexus-agent [new]"]
    kl = {r["spec"]: r["turns"][0]["kl"] for r in result["runs"]}
    assert kl == {"nexus-agent": 1.0, "h2o": 3.0, "nexus-agent [new]": 0.5}
    text = io.StringIO()
    Console(file=text, width=160).print(summary_table(summarize(result["runs"]), "t"))
    assert "nexus-agent [new]" in text.getvalue()  # the table prints the label as it is, not as markup
    with pytest.raises(SystemExit, match="two specs"):
        arguments(["out", str(old), "--relabel", "nexus-agent"])
