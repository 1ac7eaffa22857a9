"""The DeepSWE / R2E-Gym-style agent: prompts, the XML call format, the loop, model backends and trajectories.

- `agent.loop`: `Agent`, `AgentConfig`, `AgentResult` (exit reasons: agent, max_step_limit, abs_step_limit,
  token_limit, traj_time_limit, disk_limit; "error" and "interrupted" are recorded and re-raised).
- `agent.protocols`: the `ModelBackend` and `Environment` contracts and the records they pass.
- `agent.backends`: `local.LocalModel` (kvstore Session), `replay.ReplayModel`, `openai_compat.OpenAICompatModel`.
- `agent.environment.SandboxEnvironment`: tool calls run as the swe_env tool programs in any Sandbox.
- `agent.trajectory`: `TrajectoryWriter` (incremental JSONL) and `load_trajectory`.
"""
