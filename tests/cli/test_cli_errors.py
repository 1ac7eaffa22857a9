"""Mistakes a user can make end with one clear line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cli.app import main


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    """Run the real entry point in this process (as the console script does); its stderr."""

    def run(*args: str, **env: str) -> str:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(sys, "argv", ["nexus-agent", *args])
        with pytest.raises(SystemExit) as exit_:
            main()
        out, err = capsys.readouterr()
        assert exit_.value.code == 2, out + err
        assert err.startswith("error: ") and err.count("\n") == 1, err
        assert "Traceback" not in out + err
        return err

    return run


def test_unknown_task_id_suggests_the_close_one(cli, tmp_path: Path) -> None:
    err = cli("solve", "nexus-demo__pagekit-2")
    assert "no task 'nexus-demo__pagekit-2'" in err and "did you mean nexus-demo__pagekit-1" in err


def test_missing_docker(cli, tmp_path: Path) -> None:
    gone = f"unix://{tmp_path}/no-docker.sock"
    err = cli("solve", "--sandbox", "docker", DOCKER_HOST=gone)
    assert "no Docker daemon answers" in err and "--sandbox bwrap" in err
    err = cli("eval", "--sandbox", "docker", "--out", str(tmp_path / "o"), DOCKER_HOST=gone)
    assert "no Docker daemon answers" in err


@pytest.mark.usefixtures("bwrap_installed")
def test_unknown_model_offline(cli, tmp_path: Path) -> None:
    err = cli("solve", "--model", "nobody/no-such-model", "--sandbox", "bwrap")
    assert "'nobody/no-such-model'" in err and "smollm2-135m" in err
    err = cli("eval", "--model", "nobody/no-such-model", "--out", str(tmp_path / "o"))
    assert "'nobody/no-such-model'" in err
    assert not (tmp_path / "o").exists()  # refused before any work


def test_a_bad_budget_is_named_by_its_flag(cli) -> None:
    assert cli("solve", "--budget", "abc").startswith("error: --budget 'abc': give tokens per layer")


def test_a_bad_protect_is_named_by_its_flag(cli) -> None:
    assert cli("solve", "--protect", "bogus").startswith("error: --protect 'bogus': use one of")


def test_a_bad_serve_setting_is_named_by_its_flag(cli) -> None:
    assert cli("serve", "--park", "cloud").startswith("error: --park 'cloud': use one of")


def test_a_setting_is_named_by_its_own_flag() -> None:
    from cli.options import flag_of

    assert [flag_of(s) for s in ("profile", "drain_s", "park_dir")] == ["--memory-profile", "--drain", "--park-dir"]


def test_the_prefill_chunk_is_named_by_its_flag() -> None:
    from cli.options import flag_of

    assert flag_of("chunk_size") == "--prefill-chunk"


def test_a_setting_without_a_flag_keeps_its_name() -> None:
    from cli.options import flag_of

    assert flag_of("block") == "block"


def test_a_missing_chat_repo_is_a_user_error(cli, tmp_path: Path) -> None:
    err = cli("chat", "--repo", str(tmp_path / "none"), NEXUS_AGENT_HOME=str(tmp_path / "home"))
    assert "is not a directory" in err


def test_an_unexpected_missing_file_is_a_bug_with_its_traceback(monkeypatch) -> None:
    """Only a file the user named is a user error (raised as one where it is opened); any other missing file is a
    bug: cli.errors.run lets it through to Python's traceback instead of printing it as one line."""
    import typer

    from cli.errors import run

    app = typer.Typer(pretty_exceptions_enable=False)

    @app.command()
    def command() -> None:
        Path("/nonexistent-nexus-agent-internal/part.json").read_text()

    monkeypatch.setattr(sys, "argv", ["nexus-agent"])
    with pytest.raises(FileNotFoundError):
        run(app)


def test_bad_flags_and_files(cli, tmp_path: Path) -> None:
    assert "--budget 'lots'" in cli("solve", "--budget", "lots")
    err = cli("eval", "--replay-dir", str(tmp_path / "none"), "--out", str(tmp_path / "o"))
    assert "is not a directory" in err
    assert "unknown --executor" in cli("eval", "--executor", "k8s", "--out", str(tmp_path / "o"))
    assert "trajectory file not found" in cli("solve", "--replay", str(tmp_path / "t.jsonl"))


@pytest.mark.parametrize(
    "args",
    [
        ["solve", "--threads", "0"],
        ["serve", "--threads", "0"],
        ["serve", "--port", "99999"],
        ["calibrate", "a.json", "b.json", "--threads", "0"],
        ["bench", "replay", "--quick", "--threads", "0"],
        ["bench", "serve", "--threads", "0"],
    ],
)
def test_out_of_range_numbers_are_usage_errors(args: list[str], monkeypatch, capsys) -> None:
    """Refused by the command line itself (typer's usage error, exit 2), not by torch or the socket later."""
    monkeypatch.setattr(sys, "argv", ["nexus-agent", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and "Invalid value" in err and "Traceback" not in out + err, out + err
