"""A real server on 127.0.0.1 (any free port) over the tiny random Qwen3 with the real Qwen3 tokenizer."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from sessionlib import qwen_tokenizer, serve_config, tiny_chat_model

from server.app import Server


@pytest.fixture
def make_server(tmp_path) -> Iterator[Callable[..., Server]]:
    """Start servers with ServeConfig overrides, its memory settings' too (port 0, parking under tmp_path); all
    closed at the end."""
    torch.set_num_threads(1)
    started: list[Server] = []

    def start(**overrides) -> Server:
        options = {"port": 0, "model": "tiny-qwen3", "budget": 128, "park_dir": tmp_path / "park"} | overrides
        server = Server(tiny_chat_model(), qwen_tokenizer(), serve_config(**options)).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()
