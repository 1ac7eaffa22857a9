"""pipeline/chat/instructions.py: the repo's AGENTS.md, read safely into the system prompt."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.chat import instructions as ins


def test_agents_md_is_read(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Run tests with `make test`.\n")
    assert ins.read(tmp_path).text == "Run tests with `make test`."


def test_reading_it_is_said_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("x\n")
    assert ins.read(tmp_path).line == "AGENTS.md read into the model's instructions (1 bytes)"


def test_no_file_no_line(tmp_path: Path) -> None:
    assert ins.read(tmp_path) == ins.Instructions("", "")


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("host secret\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "AGENTS.md").symlink_to(tmp_path / "secret")
    assert ins.read(repo) == ins.Instructions("", "AGENTS.md not read: a symbolic link")


def test_a_fifo_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "AGENTS.md")
    assert ins.read(tmp_path).line == "AGENTS.md not read: not a regular file"


def test_a_large_file_is_cut(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("a" * (ins.MAX_BYTES + 100))
    assert len(ins.read(tmp_path).text) == ins.MAX_BYTES


def test_a_cut_is_said(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("a" * (ins.MAX_BYTES + 100))
    assert "(cut at 32 KiB)" in ins.read(tmp_path).line


def test_the_system_prompt_carries_the_instructions(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Use tabs.\n")
    assert "<instructions>\nUse tabs.\n</instructions>" in ins.system_prompt("base", ins.read(tmp_path))


def test_without_instructions_the_prompt_is_unchanged() -> None:
    assert ins.system_prompt("base", ins.Instructions("", "")) == "base"


def test_a_folder_named_agents_md_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").mkdir()
    assert ins.read(tmp_path) == ins.Instructions("", "AGENTS.md not read: not a regular file")


def test_a_binary_file_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe" * 100)
    assert ins.read(tmp_path) == ins.Instructions("", "AGENTS.md not read: a binary file (it holds NUL bytes)")


def test_the_line_counts_the_bytes_read_not_their_replacements(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_bytes(b"caf\xe9 au lait\n")  # Latin-1: one undecodable byte, replaced
    assert ins.read(tmp_path).line == "AGENTS.md read into the model's instructions (12 bytes)"
