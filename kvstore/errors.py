"""Errors a user of the cache or session can cause; the message names the bad value and the fix."""


class KVStoreError(ValueError):
    """Bad budget, unknown policy or architecture, mismatched or corrupt session file, context overflow."""
