"""What a task's environment holds and how its tests run: a recipe per (repo, version).

Source: SWE-bench's own specs, `swebench.harness.constants.MAP_REPO_VERSION_TO_SPECS` (swebench 4.x; pinned in
pyproject.toml because 5.x dropped them), and `MAP_REPO_TO_REQS_PATHS` for repos whose packages are "the repo's
requirements file". SWE-bench makes conda environments; here the same Python version and packages go into a
virtualenv with pip (conda's `pkg=1.2` pins become `pkg==1.2`). Built-in tasks and repos swebench does not know
get a fallback recipe: the project's Python version and `pip install -e .` when the repo is a package. Every env
also gets the test runner (PyEnvConfig.test_packages) when its recipe did not bring it.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tasks.builtin import is_builtin
from tasks.schema import Task

SWEBENCH_SOURCE = "swebench 4.x MAP_REPO_VERSION_TO_SPECS"
FALLBACK_TEST_CMD = "pytest --no-header -rA --tb=no -p no:cacheprovider"  # for repos swebench does not know
_PACKAGE_FILES = ("setup.py", "pyproject.toml", "setup.cfg")
_SKIP_REQ_LINE = ("-e .", "#", ".[test")  # swebench drops these lines of a requirements file too
# Unpinned packages that later broke the old test suites SWE-bench validated with them: name -> (release date of
# the breaking version, the pin used for instances created before it). pytest 8 dropped nose-style `setup()`.
BREAKING_RELEASES = {"pytest": ("2024-01-27", "pytest<8")}


@dataclass(frozen=True)
class Recipe:
    """How one task's Python environment is made and its tests are run."""

    python: str  # interpreter version, "3.9"
    requirements: tuple[str, ...] = ()  # requirement lines read from the repo's own requirements file
    packages: tuple[str, ...] = ()  # pip requirement specifiers (SWE-bench `packages` + `pip_packages`)
    pre_install: tuple[str, ...] = ()  # shell commands run in the repo before the install command
    install: str = ""  # how the repo itself is installed ("python -m pip install -e ."); "" = not installed
    test_cmd: str = FALLBACK_TEST_CMD  # the test runner (the test files are appended)
    eval_commands: tuple[str, ...] = ()  # shell commands run before the tests at grading time
    source: str = "fallback"  # where the recipe comes from
    extra: dict = field(default_factory=dict, compare=False, hash=False)  # spec keys with no use here (reported)

    def digest(self) -> str:
        """A short hash of everything the build depends on (part of the env cache key)."""
        data = {k: v for k, v in asdict(self).items() if k not in ("extra", "eval_commands", "test_cmd")}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def swebench_specs(repo: str, version: str) -> dict | None:
    """SWE-bench's spec for (repo, version), or None when the installed swebench has no such table or entry."""
    try:
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS  # swebench < 5
    except ImportError:
        return None
    return MAP_REPO_VERSION_TO_SPECS.get(repo, {}).get(version)


def recipe_for(task: Task, repo: Path | None = None) -> Recipe:
    """The task's recipe; `repo` (its working copy) supplies requirement files and whether it is a package."""
    spec = None if is_builtin(task) else swebench_specs(task.repo, task.version)
    if spec is None:
        return fallback_recipe(task, repo)
    requirements = _requirements(task.repo, repo) if spec.get("packages") == "requirements.txt" else []
    return Recipe(
        python=str(spec.get("python", host_python())),
        requirements=tuple(as_of(requirements, task.created_at)),
        packages=tuple(as_of(_packages(spec), task.created_at)),
        pre_install=tuple(spec.get("pre_install", ())),
        install=str(spec.get("install", "")),
        test_cmd=_joined(spec.get("test_cmd", FALLBACK_TEST_CMD)),
        eval_commands=tuple(spec.get("eval_commands", ())),
        source=SWEBENCH_SOURCE,
        extra={k: v for k, v in spec.items() if k not in _USED_KEYS},
    )


_USED_KEYS = {"python", "packages", "pip_packages", "pre_install", "install", "test_cmd", "eval_commands"}


def fallback_recipe(task: Task, repo: Path | None) -> Recipe:
    """Built-in tasks and repos swebench does not know: the project's Python (pytest comes with every env)."""
    packaged = repo is not None and not is_builtin(task) and any((repo / f).exists() for f in _PACKAGE_FILES)
    source = "built-in" if is_builtin(task) else f"fallback (no swebench spec for {task.repo} {task.version!r})"
    return Recipe(
        python=host_python(), install="python -m pip install -e ." if packaged else "",
        test_cmd=_repo_runner(task.repo), source=source,
    )  # fmt: skip


def _repo_runner(repo: str) -> str:
    """The test runner swebench uses for `repo` in its newest version (runners rarely change), else pytest."""
    try:
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
    except ImportError:
        return FALLBACK_TEST_CMD
    versions = MAP_REPO_VERSION_TO_SPECS.get(repo, {})
    newest = max(versions, key=_version_key, default=None)
    return _joined(versions[newest].get("test_cmd", FALLBACK_TEST_CMD)) if newest else FALLBACK_TEST_CMD


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.\-]", version))


def as_of(specifiers: list[str], created_at: str) -> list[str]:
    """Unpinned packages of BREAKING_RELEASES pinned below their breaking version for tasks made before it.

    SWE-bench resolved bare names when its images were built, close to the instances' dates; a build today would
    get versions the validated tests never ran with.
    """
    out = []
    for spec in specifiers:
        rule = BREAKING_RELEASES.get(spec.strip().lower())
        out.append(rule[1] if rule and created_at and created_at[:10] < rule[0] else spec)
    return out


def host_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _packages(spec: dict) -> list[str]:
    """SWE-bench's conda `packages` (space separated, `name=1.2` pins) and `pip_packages`, as pip specifiers."""
    conda = spec.get("packages", "")
    out = [] if conda in ("", "requirements.txt", "environment.yml") else conda.split()
    out = [re.sub(r"^([A-Za-z0-9_.\-\[\]]+)=(?!=)", r"\1==", p) for p in out]
    return out + list(spec.get("pip_packages", ()))


def _requirements(repo_name: str, repo: Path | None) -> list[str]:
    """The lines of the repo's requirements file (the first of swebench's paths that exists), `-r` included."""
    try:
        from swebench.harness.constants import MAP_REPO_TO_REQS_PATHS
    except ImportError:
        return []
    if repo is None:
        return []
    for rel in MAP_REPO_TO_REQS_PATHS.get(repo_name, ()):
        path = repo / rel
        if path.is_file():
            return _cleaned(_read_requirements(path, repo.resolve(), set()))
    return []


def _cleaned(lines: list[str]) -> list[str]:
    """swebench's own clean-up of requirement lines (packages yanked from PyPI replaced), when it has one."""
    try:
        from swebench.harness.test_spec.python import clean_requirements
    except ImportError:
        return lines
    return [ln for ln in clean_requirements("\n".join(lines)).splitlines() if ln.strip()]


def _read_requirements(path: Path, root: Path, seen: set[Path]) -> list[str]:
    """The requirement lines of `path` and the files its `-r` lines name, read on the host: only files inside the
    repo `root` (a link or `-r ../..` out of it is not followed: a repo could name any host file), each once (a
    `-r` loop ends)."""
    path = path.resolve()
    if not path.is_relative_to(root) or path in seen or not path.is_file():
        return []
    seen.add(path)
    lines = []
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith(_SKIP_REQ_LINE):
            continue
        if line.startswith("-r"):
            lines += _read_requirements(path.parent / line[2:].strip(), root, seen)
        else:
            lines.append(line)
    return lines


def _joined(cmd: str | list[str]) -> str:
    return " && ".join(cmd) if isinstance(cmd, list) else str(cmd)
