"""`nexus-agent serve` as a user starts it: the default model (SmolLM2-135M) behind the real openai client."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import openai
import pytest


def default_sigint() -> None:
    """In the child before exec: Ctrl-C as in a terminal, even when the test run itself was started with SIGINT
    ignored (a background job), which a child would otherwise inherit and never see KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base: str, proc: subprocess.Popen, timeout: float = 180.0, log: Path | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"the server exited: {log.read_text() if log else proc.stdout.read()}")
        try:
            urllib.request.urlopen(base + "/health", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail("the server did not come up")


@pytest.mark.slow
def test_serve_the_default_model(tmp_path) -> None:
    port = free_port()
    cmd = [sys.executable, "-c", "from cli.app import main; main()", "serve", "--port", str(port), "--budget", "256"]
    cmd += ["--memory-cap", "64MiB", "--park-dir", str(tmp_path), "--threads", "2", "--memory-profile", "auto"]
    log = tmp_path / "serve.log"  # a file, not a pipe nobody reads: the server can never block on its output
    with log.open("w") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, env=os.environ.copy(), preexec_fn=default_sigint
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, log=log)
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        assert [m.id for m in c.models.list().data] == ["smollm2-135m"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models") as r:  # auto: the store, even while empty
            nexus = json.load(r)["data"][0]["nexus"]
        assert nexus["profile_directory"] and nexus["memory_profile"] is None  # reported once it holds a profile
        messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
        r1 = c.chat.completions.create(model="smollm2-135m", messages=messages, max_tokens=16, temperature=0)
        assert "paris" in r1.choices[0].message.content.lower()
        messages += [{"role": "assistant", "content": r1.choices[0].message.content}]
        messages += [{"role": "user", "content": "And of Italy?"}]
        r2 = c.chat.completions.create(model="smollm2-135m", messages=messages, max_tokens=16, temperature=0)
        nexus = r2.model_extra["nexus"]
        assert nexus["continued"] and nexus["turn"]["turn"] == 2 and nexus["turn"]["prefill_tokens"] < 20
        assert "rome" in r2.choices[0].message.content.lower()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"the server did not stop within 60 s of Ctrl-C; its output:\n{log.read_text()}")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--memory-cap", "12XB"], "size '12XB': give bytes or a number with a unit"),
        (["--park", "cloud"], "--park 'cloud': use one of disk, host"),
        (["--budget", "lots"], "--budget 'lots'"),
        (["--max-batch", "0"], "--max-batch must be >= 1"),
        (["--protect", "all"], "--protect 'all': use one of system+task, system, none"),
        (["--drain", "inf"], "--drain must be a number of seconds, 0 or more, got inf"),
        (["--max-profile-conversations", "0"], "--max-profile-conversations must be >= 1, got 0"),
    ],
)
def test_bad_flags_are_one_clear_line(flags: list[str], message: str) -> None:
    cmd = [sys.executable, "-c", "from cli.app import main; main()", "serve", *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
