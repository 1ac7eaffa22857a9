"""Host-side records beside files a sandbox wrote (swe_env/records.py): never read through a link, never more than
the cap, written by a rename that replaces whatever was planted at the path."""

from __future__ import annotations

import os
from pathlib import Path

from swe_env.records import CAP, read_record, write_record


def test_a_record_round_trips(tmp_path: Path):
    write_record(tmp_path / "r.json", {"key": "k", "build_s": 1.5})
    assert read_record(tmp_path / "r.json") == {"key": "k", "build_s": 1.5}
    assert read_record(tmp_path / "missing.json") is None


def test_links_fifos_devices_and_big_files_are_not_records(tmp_path: Path):
    target = tmp_path / "root-only.json"
    target.write_text('{"owner": "root"}')
    (tmp_path / "link.json").symlink_to(target)
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.json")  # a plain read would wait forever for a writer
    (tmp_path / "big.json").write_text('{"a": "' + "x" * CAP + '"}')
    (tmp_path / "list.json").write_text("[1, 2]")
    for name in ("link.json", "zero.json", "fifo.json", "big.json", "list.json"):
        assert read_record(tmp_path / name) is None, name
    assert read_record(Path("/dev/zero")) is None


def test_writing_replaces_a_planted_link_and_leaves_its_target(tmp_path: Path):
    target = tmp_path / "root-only.json"
    target.write_text('{"owner": "root"}')
    (tmp_path / "r.json").symlink_to(target)
    write_record(tmp_path / "r.json", {"key": "k"})
    assert not (tmp_path / "r.json").is_symlink() and read_record(tmp_path / "r.json") == {"key": "k"}
    assert target.read_text() == '{"owner": "root"}'
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left behind
