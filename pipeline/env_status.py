"""What sandboxes can run on this machine, as one plain record (`nexus-agent env status`, a table or JSON)."""

from __future__ import annotations

import shutil
from typing import Any

from swe_env.dockerd import connect
from swe_env.images import BASE_IMAGE, BUILTIN_IMAGE, image_exists
from swe_env.sandbox.base import SandboxError

TOOLS = ("bwrap", "debootstrap", "dockerd")


def environment_status() -> dict[str, Any]:
    """{"tools": {name: installed}, "docker": {"answers", "url" | "problem", "images": {tag: present},
    "leftover_containers"}}; a daemon that does not answer is a record with its problem, never an error."""

    status: dict[str, Any] = {"tools": {tool: shutil.which(tool) is not None for tool in TOOLS}}
    try:
        status["docker"] = _docker()
    except SandboxError as exc:
        status["docker"] = {"answers": False, "problem": str(exc)}
    return status


def _docker() -> dict[str, Any]:

    client = connect(timeout=10)
    left = client.containers.list(all=True, filters={"label": "nexus-agent=1"})
    return {
        "answers": True,
        "url": client.api.base_url,
        "images": {tag: image_exists(client, tag) for tag in (BASE_IMAGE, BUILTIN_IMAGE)},
        "leftover_containers": len(left),
    }
