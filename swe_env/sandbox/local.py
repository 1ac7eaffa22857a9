"""The local backend: NO isolation. Commands run on the host in a private working copy of the repo.

Only for when isolation is impossible and the user asked for it explicitly (`--sandbox local`); the workdir is the
working copy's real host path, not /testbed.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from swe_env.sandbox import common
from swe_env.sandbox.base import ExecResult, SandboxError
from tasks.schema import Task


@dataclass
class LocalConfig:
    """Settings of an unisolated local sandbox."""

    repo_cache: Path | None = None  # local git mirrors (owner__name) used before any clone
    install_tools: bool = True  # put the agent tools into a private dir first on PATH
    extra_path: tuple[str, ...] = ()  # dirs put on PATH after the tools


class LocalSandbox:
    """A working copy in a temp dir; commands run with bash on the host, in their own process group."""

    def __init__(self, task: Task, config: LocalConfig | None = None):
        self.task = task
        self.config = config or LocalConfig()
        self._root = common.make_workspace("local")
        try:
            self.repo = common.prepare_repo(task, self._root / "repo", self.config.repo_cache)
            tools = self._root / "tools"
            common.install_tools(tools) if self.config.install_tools else tools.mkdir()
            self.workdir, self.tools_dir = str(self.repo), str(tools)
            common.track(self)
        except BaseException:
            self.close()
            raise

    def execute(self, cmd: str, timeout: float = 120.0) -> ExecResult:
        if self._root is None:
            raise SandboxError("sandbox is closed")
        env = {**os.environ, **common.COMMAND_ENV}
        env["PATH"] = os.pathsep.join([self.tools_dir, *self.config.extra_path, env.get("PATH", common.SYSTEM_PATH)])
        return common.run_process(["bash", "-c", cmd], timeout=timeout, cwd=self.repo, env=env)

    def _host(self, path: str) -> Path:
        return Path(path) if path.startswith("/") else self.repo / path

    def read_file(self, path: str) -> str:
        try:
            return self._host(path).read_text(errors="replace")
        except OSError as exc:
            raise SandboxError(f"cannot read {path}: {exc.strerror}") from None

    def write_file(self, path: str, content: str) -> None:
        target = self._host(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)

    def get_patch(self) -> str:
        res = self.execute(common.patch_command(self.task.base_commit), timeout=120)
        if res.returncode != 0:
            raise SandboxError(f"git diff failed: {res.output.strip()[-500:]}")
        return res.output

    def close(self) -> None:
        root, self._root = getattr(self, "_root", None), None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    def __enter__(self) -> LocalSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
