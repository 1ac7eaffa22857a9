"""Bring the record shapes found in the wild onto the SWE-bench schema before validation.

SWE-bench records pass through unchanged. R2E-Gym's own subsets (R2E-Gym-Lite, -Subset, -Full) name the repo
`repo_name`, carry the fix commit as `commit_hash` (its parent, the base, inside `parsed_commit_content`) and
have no `instance_id`; the repo is already inside their `docker_image` at /testbed.
"""

from __future__ import annotations

import json
from typing import Any


def normalise_record(rec: dict[str, Any], source: str = "") -> dict[str, Any]:
    """A copy of `rec` with the SWE-bench fields filled from R2E-Gym's field names where those are missing."""
    if not isinstance(rec, dict) or "docker_image" not in rec:
        return rec
    out = dict(rec)
    if not out.get("repo") and out.get("repo_name"):
        out["repo"] = str(out["repo_name"])
    if not out.get("base_commit"):
        base = _parent_commit(out.get("parsed_commit_content")) or out.get("commit_hash")
        if base:
            out["base_commit"] = str(base)
    if not out.get("instance_id"):
        ident = _r2e_instance_id(out)
        if ident:
            out["instance_id"] = ident
    return out


def _parent_commit(parsed: Any) -> str | None:
    """old_commit_hash of R2E-Gym's parsed commit (a JSON string or a dict), if present."""
    if isinstance(parsed, str):
        try:
            parsed = json.loads(parsed)
        except (json.JSONDecodeError, RecursionError):
            return None
    if isinstance(parsed, dict) and parsed.get("old_commit_hash"):
        return str(parsed["old_commit_hash"])
    return None


def _r2e_instance_id(rec: dict[str, Any]) -> str | None:
    """'<repo name>__<first 12 hex of the fix commit>', or the image tag when no commit is given."""
    repo = str(rec.get("repo") or "").split("/")[-1]
    commit = str(rec.get("commit_hash") or "")
    if repo and commit:
        return f"{repo}__{commit[:12]}"
    image = str(rec.get("docker_image") or "")
    return image.rsplit("/", 1)[-1].replace(":", "__") or None
