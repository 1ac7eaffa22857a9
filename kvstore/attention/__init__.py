"""The attention maths the cache and the policies share, in one place: the torch references (and CPU paths) and the
dispatch to their fused Triton kernels.

- `received`: the attention held tokens receive from a run of queries (H2O's, SnapKV's, MorphKV's and the default
  memory's statistics);
- `scoring`: Nexus scoring (window attention -> block distribution -> direct score + walk);
- `decode`, `prefill`: the static engine's CPU attention passes that also give a policy its statistics;
- `dispatch`: `fused_<what>`, the kernel `triton_<what>` of a `triton_*` module where the Triton path runs, else
  None and the caller's torch path. The `triton_*` modules need triton (extra `gpu`); nothing imports them until a
  kernel runs.

It imports torch only: the policies (kvstore.policies) and the cache (kvstore.cache) build on it, never it on them.
"""
