"""--device is checked with the other options, before anything starts: a CUDA device on a machine without one was
refused only when the model loaded (after the sandbox opened and runs/ was made)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clilib import cli_env, nexus


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize(
    "device, message",
    [("cuda", "--device cuda: no CUDA GPU"), ("cuda:0", "--device cuda:0: no CUDA GPU"), ("gpu", "--device gpu")],
)
def test_a_device_this_machine_lacks_stops_before_anything_starts(tmp_path: Path, device: str, message: str) -> None:
    if device.startswith("cuda") and _has_cuda():
        pytest.skip("this machine has a CUDA GPU")
    res = nexus("solve", "--device", device, "--sandbox", "bwrap", env=cli_env(tmp_path), cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stdout + res.stderr
    assert res.stderr.startswith("error: ") and message in res.stderr, res.stderr
    assert not (tmp_path / "runs").exists()  # no folder, no sandbox, no model


@pytest.mark.gpu
def test_a_cuda_device_is_accepted_where_there_is_one() -> None:
    if not _has_cuda():
        pytest.skip("no CUDA GPU")
    from pipeline.backends import check_device

    check_device("cuda")
    check_device("cuda:0")
