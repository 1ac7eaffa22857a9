"""A real server on 127.0.0.1 (any free port) over the tiny random Qwen3 with the real Qwen3 tokenizer."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest
import torch
from sessionlib import qwen_tokenizer, serve_config, tiny_chat_model

from server.app import Server


@pytest.fixture
def make_server(tmp_path) -> Iterator[Callable[..., Server]]:
    """Start servers with ServeConfig overrides, its memory settings' too (port 0); all closed at the end. Each
    server gets a park folder of its own, tmp_path/park-1, park-2, ... in the order they are made (a server holds its
    folder's lock while it runs, so two servers of one test may run at once), unless the test gives `park_dir`: a
    test that restarts a server on the same folder passes it and closes the first server before the next starts."""
    torch.set_num_threads(1)
    started: list[Server] = []
    made = itertools.count(1)

    def start(**overrides) -> Server:
        park = tmp_path / f"park-{next(made)}"
        options = {"port": 0, "model": "tiny-qwen3", "budget": 128, "park_dir": park} | overrides
        server = Server(tiny_chat_model(), qwen_tokenizer(), serve_config(**options)).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()
