"""Task environments: the recipe a task's Python environment follows, the interpreter it is made from.

`recipes` says what to install (SWE-bench's per-(repo, version) specs from swebench 4.x, or a fallback);
`interpreters` finds a Python of the wanted version on this machine (pyenv, uv-managed, system). Building and
caching the environment is `swe_env.pyenv`'s job; the build itself runs inside the task's sandbox.
"""
