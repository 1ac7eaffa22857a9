"""The task record every source produces: the SWE-bench instance schema plus the few fields runs need."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

REQUIRED_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement")
# what host-side git and the folders a run makes accept from a record (a dataset may come from anyone): a commit SHA,
# tag or branch name that git cannot read as an option, and `owner/name` (R2E-Gym: `name`) as on GitHub
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")
REPO = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}(/[A-Za-z0-9_][A-Za-z0-9_.-]{0,99})?")


class TaskError(ValueError):
    """A task record or a task source the user gave cannot be used (the message says why)."""


@dataclass(frozen=True)
class Task:
    """One SWE-bench-style instance.

    FAIL_TO_PASS / PASS_TO_PASS are JSON-encoded strings in SWE-bench files; here they are lists.
    """

    instance_id: str
    repo: str  # "owner/name"
    base_commit: str
    problem_statement: str
    patch: str = ""  # gold patch
    test_patch: str = ""
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    version: str = ""
    hints_text: str = ""
    created_at: str = ""
    environment_setup_commit: str = ""
    docker_image: str | None = None  # R2E-Gym's field, or an image built locally for built-in tasks
    test_cmd: str | None = None  # how to run the tests in /testbed; None: derived from swebench's specs
    source: str = ""  # "builtin", a dataset name or a file path

    @classmethod
    def from_record(cls, rec: dict[str, Any], source: str = "") -> Task:
        """Validate a SWE-bench / R2E-Gym record and build a Task; raise TaskError naming what is wrong."""
        missing = [k for k in REQUIRED_FIELDS if not rec.get(k)]
        ident = rec.get("instance_id", "<no instance_id>")
        if missing:
            raise TaskError(f"task {ident} from {source or 'input'}: missing field(s) {', '.join(missing)}")
        if not isinstance(rec["problem_statement"], str):
            raise TaskError(f"task {ident} from {source or 'input'}: problem_statement is not text")
        for key, pattern, what in (("repo", REPO, "owner/name"), ("base_commit", REVISION, "a commit SHA or ref name")):
            value = str(rec[key])
            if not pattern.fullmatch(value) or ".." in value:
                raise TaskError(f"task {ident} from {source or 'input'}: {key} {value[:80]!r} is not {what}")
        return cls(
            instance_id=str(rec["instance_id"]),
            repo=str(rec["repo"]),
            base_commit=str(rec["base_commit"]),
            problem_statement=str(rec["problem_statement"]),
            patch=str(rec.get("patch") or ""),
            test_patch=str(rec.get("test_patch") or ""),
            fail_to_pass=_test_list(rec.get("FAIL_TO_PASS", rec.get("fail_to_pass")), "FAIL_TO_PASS", ident),
            pass_to_pass=_test_list(rec.get("PASS_TO_PASS", rec.get("pass_to_pass")), "PASS_TO_PASS", ident),
            version=str(rec.get("version") or ""),
            hints_text=str(rec.get("hints_text") or ""),
            created_at=str(rec.get("created_at") or ""),
            environment_setup_commit=str(rec.get("environment_setup_commit") or ""),
            docker_image=rec.get("docker_image") or None,
            test_cmd=rec.get("test_cmd") or None,
            source=source,
        )

    def to_record(self) -> dict[str, Any]:
        """The SWE-bench record (test lists JSON-encoded, as in the published datasets)."""
        rec = asdict(self)
        rec["FAIL_TO_PASS"] = json.dumps(rec.pop("fail_to_pass"))
        rec["PASS_TO_PASS"] = json.dumps(rec.pop("pass_to_pass"))
        return rec


def _test_list(value: Any, name: str, ident: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise TaskError(f"task {ident}: {name} is not a JSON list ({exc})") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskError(f"task {ident}: {name} must be a list of test names")
    return list(value)
