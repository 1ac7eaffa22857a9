"""Helpers of the CLI tests: a tiny real model directory, the CLI as a subprocess, a pseudo-terminal driver."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLD_DIR = ROOT / "tests" / "agent" / "data"
SLOW_TASK = "nexus-demo__semver-lite-1"


def default_sigint() -> None:
    """In the child before exec: Ctrl-C as in a terminal, even when the test run itself was started with SIGINT
    ignored (a background job), which a child would otherwise inherit and never see KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sleeping_replay(path: Path, seconds: int = 60) -> Path:
    """A recording of SLOW_TASK whose first step runs `sleep`, so that its run takes a while: it holds its folder,
    and it can be stopped mid-step."""
    call = f"Wait.\n\n<function=execute_bash>\n<parameter=cmd>sleep {seconds}</parameter>\n</function>"
    done = "Done.\n\n<function=finish>\n<parameter=command>submit</parameter>\n</function>"
    records = [
        {"type": "header", "version": 1, "task_id": SLOW_TASK, "model": "replay", "config": {}, "meta": {}},
        {"type": "step", "step": 1, "reply": call, "stats": {}},
        {"type": "step", "step": 2, "reply": done, "stats": {}},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def save_tiny_model(dest: Path) -> Path:
    """A random-weight 2-layer Qwen3 with the real Qwen3 tokenizer, saved as a model directory (save_pretrained)."""
    from sessionlib import save_tiny_chat_model

    return save_tiny_chat_model(dest, max_positions=16384)


def cli_env(home: Path) -> dict[str, str]:
    """The environment of a CLI subprocess: sessions under `home`, no hub, plain terminal output."""
    return {**os.environ, "NEXUS_AGENT_HOME": str(home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200", "NO_COLOR": "1"}


def nexus(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 300, input: str | None = None
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", "from cli.app import main; main()", *args]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, input=input)


class Pty:
    """The CLI running on a pseudo-terminal: send lines and Ctrl-C, wait for text in what it printed."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.master, slave = os.openpty()
        cmd = [sys.executable, "-c", "from cli.app import main; main()", *args]
        self.proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
                                     start_new_session=True)  # fmt: skip
        os.close(slave)
        self.out = ""

    def expect(self, text: str, timeout: float = 180) -> str:
        """Read until `text` appears in the output after the last match; the output read so far."""
        end = time.monotonic() + timeout
        while text not in self.out:
            if time.monotonic() > end:
                raise AssertionError(f"timed out waiting for {text!r}; output:\n{self.out[-3000:]}")
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if ready:
                try:
                    self.out += os.read(self.master, 65536).decode(errors="replace")
                except OSError:  # the program ended
                    if text not in self.out:
                        raise AssertionError(f"program ended before {text!r}; output:\n{self.out[-3000:]}") from None
        seen, self.out = self.out, self.out[self.out.index(text) + len(text) :]
        return seen

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def interrupt(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=60)
        finally:
            os.close(self.master)
