"""The shipped memory profiles of the built-in agent (pipeline.profiles.builtin): `--memory-profile builtin` is the
default, a run of the default model uses its shipped profile and says so in its label, and a shipped profile whose
checksum or template does not match its manifest is refused with one line, the run going on with none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvstore.defaults import DEFAULT_MODEL
from pipeline.config import RunConfig, run_memory
from pipeline.profiles import builtin
from pipeline.profiles.builtin import MANIFEST, SHIPPED, resolve_builtin, shipped_name

SHIPPED_FILE = SHIPPED / shipped_name(DEFAULT_MODEL)


def damaged_copy(tmp_path: Path, damage) -> Path:
    """A copy of the shipped folder with `damage(folder)` done to it."""
    folder = tmp_path / "shipped"
    shutil.copytree(SHIPPED, folder)
    damage(folder)
    return folder


def flip_a_byte(folder: Path) -> None:
    path = folder / shipped_name(DEFAULT_MODEL)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def other_template(folder: Path) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["profiles"][DEFAULT_MODEL]["template_sha256"] = "0" * 64
    (folder / MANIFEST).write_text(json.dumps(manifest))


def test_builtin_is_the_default() -> None:
    assert run_memory().profile == "builtin"


def test_the_default_run_uses_the_default_models_shipped_profile() -> None:
    assert RunConfig().memory.profile == SHIPPED_FILE.resolve()


def test_the_default_runs_label_names_the_shipped_profile() -> None:
    assert RunConfig().model_label().endswith(f"-profile-{SHIPPED_FILE.stem}")


def test_a_model_with_no_shipped_profile_runs_with_none(capsys) -> None:
    cfg = RunConfig(memory=run_memory(model="some/other-model"))
    assert (cfg.memory.profile, capsys.readouterr().err) == (None, "")


def test_none_still_runs_with_no_profile() -> None:
    assert RunConfig(memory=run_memory(profile="none")).memory.profile is None


@pytest.mark.parametrize(
    ("damage", "why"),
    [(flip_a_byte, "checksum"), (other_template, "another version of the agent's prompt")],
    ids=["checksum", "template"],
)
def test_a_shipped_profile_that_does_not_match_its_manifest_is_refused_in_one_line(
    tmp_path: Path, damage, why: str
) -> None:
    lines: list[str] = []
    resolve_builtin(DEFAULT_MODEL, damaged_copy(tmp_path, damage), lines.append)
    assert len(lines) == 1 and why in lines[0], lines


@pytest.mark.parametrize("damage", [flip_a_byte, other_template], ids=["checksum", "template"])
def test_a_run_whose_shipped_profile_is_refused_goes_on_with_none(tmp_path: Path, monkeypatch, capsys, damage) -> None:
    monkeypatch.setattr(builtin, "SHIPPED", damaged_copy(tmp_path, damage))
    cfg = RunConfig()
    err = capsys.readouterr().err
    assert (cfg.memory.profile, err.count("\n"), err.startswith("memory profile builtin: refused")) == (None, 1, True)


def test_the_manifest_says_how_the_profile_was_built() -> None:
    entry = builtin.read_manifest()["profiles"][DEFAULT_MODEL]
    assert entry["command"].startswith(f"nexus-agent calibrate --builtin --model {DEFAULT_MODEL}")


def test_the_manifest_names_the_traces_it_was_calibrated_on() -> None:
    assert len(builtin.read_manifest()["profiles"][DEFAULT_MODEL]["sources"]) == 20


@pytest.fixture(scope="module")
def default_model():
    from kvstore.models.registry import load_model

    model, tokenizer, _ = load_model(DEFAULT_MODEL, device="cpu")
    return model, tokenizer


def _session_opening(default_model, messages: list[dict]):
    """A session given the shipped profile, its opening appended (nothing runs: the profile is matched then)."""
    from kvstore import Session, SessionConfig

    session = Session(*default_model, SessionConfig(profile=str(SHIPPED_FILE)))
    session.append(messages)
    return session


@pytest.mark.parametrize("steps", [5, 40, 250])
def test_a_solve_session_of_the_built_in_task_uses_the_shipped_profile(default_model, steps: int) -> None:
    """The opening agent.loop sends on the built-in task (its step limit after the instance prompt) carries the
    shipped profile's whole template, whatever the step limit."""
    from agent.observation import with_steps
    from agent.prompts import initial_messages
    from pipeline.config import DEFAULT_TASK
    from tasks import get_task

    system, task = initial_messages(get_task(DEFAULT_TASK).problem_statement)
    session = _session_opening(default_model, [system, {**task, "content": with_steps(task["content"], steps)}])
    assert session.has_profile, session.profile_status


def test_an_opening_with_the_agents_system_prompt_and_another_message_gets_no_profile(default_model) -> None:
    """A chat or another harness that shares the system prompt only: an exact profile gives it nothing."""
    from agent.prompts import system_prompt

    messages = [{"role": "system", "content": system_prompt()}, {"role": "user", "content": "<request>fix</request>"}]
    session = _session_opening(default_model, messages)
    assert not session.has_profile  # the token prior ranks its opening instead (kvstore.profiles.tokens)
    assert session.profile_status.endswith(f"token prior for its {len(session.tokens)} opening tokens")
    assert session.cache.signals.prior_kind == "tokens"


def test_profiles_builtin_says_the_shipped_profile_is_used() -> None:
    from typer.testing import CliRunner

    from cli.app import app

    out = " ".join(CliRunner().invoke(app, ["profiles", "--builtin"], env={"COLUMNS": "200"}).output.split())
    assert f"{SHIPPED_FILE.name}: used by runs of {DEFAULT_MODEL}" in out


@pytest.mark.parametrize("model", sorted(builtin.read_manifest()["profiles"]))
def test_every_shipped_profile_passes_its_own_checks(model: str) -> None:
    lines: list[str] = []
    assert (resolve_builtin(model, say=lines.append), lines) == (SHIPPED / shipped_name(model), [])


def test_an_eval_folder_records_the_shipped_profile_by_name_and_resumes(tmp_path: Path) -> None:
    from pipeline.eval_files import RUN_FILE, claim_out_dir

    cfg = RunConfig(memory=run_memory())  # the default: builtin, the default model's shipped profile
    claim_out_dir(tmp_path, cfg)
    held = json.loads((tmp_path / RUN_FILE).read_text())
    assert held["profile"] == f"builtin:{shipped_name(DEFAULT_MODEL)}"
    assert str(SHIPPED) not in (tmp_path / RUN_FILE).read_text()
    claim_out_dir(tmp_path, RunConfig(memory=run_memory()))  # the same run resumes
