"""A park folder on a full filesystem (a 64 KiB tmpfs): a session that cannot be parked is closed with a log line
(its client's next turn rebuilds it from its history) and the request in hand still succeeds; at shutdown the
server parks what it can and says what it could not."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest


@pytest.fixture
def full_disk(tmp_path) -> Path:
    """A folder on a 64 KiB tmpfs (too small for one session file of the tiny model), unmounted afterwards."""
    folder = tmp_path / "tiny-fs"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_full_park_disk_closes_sessions_and_serves_every_request(make_server, full_disk, capfd) -> None:
    server = make_server(park_dir=full_disk / "park", max_sessions=2)
    with httpx.Client(base_url=server.url, timeout=60) as http:
        codes = []
        for i in range(20):  # each new conversation past 2 parks the least recently used one: every park fails
            body = {"messages": [{"role": "user", "content": f"conversation {i}"}], "max_tokens": 2}
            codes.append(http.post("/chat/completions", json=body).status_code)
        assert codes == [200] * 20, codes
    err = capfd.readouterr().err
    assert err.count("cannot park session") >= 15, err
    server.close()
    err = capfd.readouterr().err
    assert "could not park" in err and "Traceback" not in err, err
