"""The benchmarks of the evicting cache (`nexus-agent bench ...`): each uses only kvstore's public API.

One module per benchmark command (overhead, turns, quality, speed, gpu), with its helpers beside it; what each
measures and the results are in docs/benchmarks.md.
"""
