"""The eval view tells the truth: the model's phase moves from reading (prefill) to writing (decode) when it starts
writing, and the ETA comes from the finished tasks' durations as soon as one has finished. Before, a worker's row
kept "prefill 1409/1411 tokens" for the whole reply, and rich's speed estimate showed -:--:-- until 5/7 finished,
then 3 s while two 90 s tasks had just started."""

from __future__ import annotations

import time

from rich.console import Console

from cli.live import EvalView
from pipeline.executors.progress import PrefillWatch, eta_seconds


def _said(view: EvalView) -> str:
    console = Console(record=True, width=250)
    console.print(view.render())
    return console.export_text()


def _wait(sent: list[dict], cond, timeout: float = 5) -> None:
    end = time.monotonic() + timeout
    while not any(cond(e) for e in sent) and time.monotonic() < end:
        time.sleep(0.01)


def test_a_worker_that_writes_its_reply_is_shown_writing(session) -> None:
    from kvstore.session.reply import ReplyInProgress

    sent: list[dict] = []
    with PrefillWatch(lambda kind, **data: sent.append({"kind": kind, **data}), every=0.01) as watch:
        watch.event({"kind": "backend", "backend": type("Local", (), {"session": session})()})
        watch.event({"kind": "model", "step": 1})
        reply = ReplyInProgress(session, 8)
        reply.begin_prefill()
        reply.prefill_chunk()
        _wait(sent, lambda e: (e.get("prefill") or [0])[0] >= 64)
        while not reply.prefill_chunk():
            pass
        for _ in range(3):
            reply.step_alone()
        _wait(sent, lambda e: (e.get("decoded") or 0) >= 4)
    view = EvalView(Console(record=True, width=250), 3)
    view.event({"kind": "start", "worker": "w1", "instance_id": "task-1"})
    view.event({"worker": "w1", "instance_id": "task-1", **next(e for e in sent if e.get("prefill", [0])[0] >= 64)})
    assert "the model reads the conversation (prefill 64/" in _said(view)
    for ev in sent:
        view.event({"worker": "w1", "instance_id": "task-1", **ev})
    said = _said(view)
    assert "the model writes its reply (4 tokens so far)" in said and "reads the conversation" not in said, said


def test_the_eta_comes_from_finished_tasks_durations() -> None:
    assert eta_seconds([], 7, 2) is None  # nothing finished: no estimate yet
    assert eta_seconds([90.0], 6, 2) == 270.0 and eta_seconds([80.0, 100.0], 2, 2) == 90.0
    assert eta_seconds([90.0], 0, 2) == 0.0
    view = EvalView(Console(record=True, width=250), 7, workers=2)
    assert "ETA after the first task" in _said(view)
    view.finished_one({"instance_id": "t1", "status": "resolved", "wall_s": 90.0})
    assert "ETA 4:30" in _said(view)  # 6 left x 90 s / 2 workers
    for n in range(2, 6):
        view.finished_one({"instance_id": f"t{n}", "status": "resolved", "wall_s": 90.0})
    assert "ETA 1:30" in _said(view)  # 2 left: two 90 s tasks on two workers, not 3 s


def test_the_plain_view_says_the_eta_with_each_finished_task() -> None:
    console = Console(record=True, width=250, force_terminal=False)
    view = EvalView(console, 3, workers=1)
    view.finished_one({"instance_id": "t1", "status": "resolved", "wall_s": 60.0, "exit_reason": "agent"})
    assert "1/3 finished | t1: resolved (submitted) | ETA 2:00" in console.export_text()
