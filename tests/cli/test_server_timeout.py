"""`--server-timeout SECONDS` of solve, eval and chat: refused in one line unless a finite number of seconds above 0,
and, given, the deadline of each whole request to the --server: against a server that trickles its answers a byte
every 0.2 s (so no single read ever waits long), each attempt ends after SECONDS, in one line, as the real program
runs it (a built-in task, a chat, in a bubblewrap sandbox)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from clilib import cli_env, nexus

LINE = "--server-timeout must be more than 0 seconds (and finite), got {}"


class Trickler(ThreadingHTTPServer):
    """Serves one model (GET /v1/models); answers each POST a byte every 0.2 s, never finishing, and keeps when
    (time.monotonic()) each POST came."""

    posts: list[float]
    stop: threading.Event
    models_trickle = False  # GET /v1/models trickles too

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    server: Trickler
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (the http.server API)
        if self.server.models_trickle:
            self._trickle(streamed=False)
            return
        data = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802
        streamed = json.loads(self.rfile.read(int(self.headers["Content-Length"]))).get("stream")
        self.server.posts.append(time.monotonic())
        self._trickle(streamed)

    def _trickle(self, streamed: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if streamed else "application/json")
        self.send_header("Connection" if streamed else "Content-Length", "close" if streamed else "100000")
        self.end_headers()
        while not self.server.stop.wait(0.2):
            self.wfile.write(b" ")
            self.wfile.flush()

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:  # the client gave up on the answer
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def trickler() -> Iterator[Trickler]:
    srv = Trickler(("127.0.0.1", 0), Handler)
    srv.posts, srv.stop = [], threading.Event()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.stop.set()
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize(("command", "value"), [("solve", "nan"), ("eval", "0"), ("chat", "-1"), ("solve", "inf")])
def test_a_timeout_that_bounds_nothing_is_refused_in_one_line(tmp_path: Path, command: str, value: str) -> None:
    extra = {"eval": ["--out", str(tmp_path / "run")], "chat": ["--message", "hi", "--no-env"]}.get(command, [])
    res = nexus(command, "--server", "http://127.0.0.1:9/v1", "--server-timeout", value, *extra,
                env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip() == "error: " + LINE.format(float(value))


@pytest.mark.usefixtures("bwrap_installed")
def test_solve_gives_each_attempt_the_timeout(trickler: Trickler, tmp_path: Path) -> None:
    res = nexus("solve", "--server", trickler.url, "--server-timeout", "1", "--max-steps", "1", "--sandbox", "bwrap",
                "--out", str(tmp_path / "run"), env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip() == f"error: {trickler.url}/chat/completions: no complete answer within 1 s"
    first, second, third = trickler.posts  # two retries, 1 s and 2 s of backoff after 1 s each
    assert 1.8 < second - first < 3.0 and 2.8 < third - second < 4.0


@pytest.mark.usefixtures("bwrap_installed")
def test_a_chat_gives_each_attempt_the_timeout(trickler: Trickler, tmp_path: Path, repo: Path) -> None:
    res = nexus("chat", "--server", trickler.url, "--server-timeout", "1", "--message", "read app.py", "--yolo",
                "--no-env", "--repo", str(repo), env=cli_env(tmp_path / "home"), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"error: {trickler.url}/chat/completions: no complete answer within 1 s" in res.stdout
    first, second = trickler.posts  # a chat retries once, after 1 s of backoff
    assert 1.8 < second - first < 3.0


@pytest.mark.parametrize("command", ["solve", "chat"])
def test_the_first_question_to_the_server_keeps_a_shorter_timeout_too(trickler: Trickler, tmp_path: Path,
                                                                      repo: Path, command: str) -> None:  # fmt: skip
    """GET /models, asked before anything runs, waited 30 s per attempt whatever --server-timeout said."""
    trickler.models_trickle = True
    extra = (
        ["--message", "hi", "--no-env", "--repo", str(repo)] if command == "chat" else ["--out", str(tmp_path / "r")]
    )
    res = nexus(command, "--server", trickler.url, "--server-timeout", "1", *extra, env=cli_env(tmp_path / "home"),
                cwd=tmp_path)  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    assert "no OpenAI-compatible server answers there (no complete answer within 1 s)" in res.stderr
