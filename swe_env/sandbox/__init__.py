"""Sandboxes: docker (production), bwrap (fast, no daemon), local (no isolation, explicit only)."""

from swe_env.sandbox.base import ExecResult, Sandbox, SandboxError
from swe_env.sandbox.factory import BACKENDS, SandboxConfig, open_sandbox

__all__ = ["BACKENDS", "ExecResult", "Sandbox", "SandboxConfig", "SandboxError", "open_sandbox"]
