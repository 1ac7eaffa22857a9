"""Drive one real mini-swe-agent episode (its litellm text-based model class) against a running `nexus-agent serve`.

It runs in a virtualenv that has mini-swe-agent (`pip install mini-swe-agent`) and imports nothing of this project:
the harness talks to the server exactly as it would to any OpenAI-compatible endpoint. Afterwards it prints what
the server saw (sessions, turns, prefilled tokens), to show that every step continued one server session.

    nexus-agent serve --port 8000 &
    /path/to/msa-venv/bin/python scripts/mini_swe_agent_episode.py --url http://127.0.0.1:8000/v1 --repo DIR
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.request
from pathlib import Path

import yaml


def served_model(url: str) -> str:
    with urllib.request.urlopen(url.rstrip("/") + "/models") as resp:
        return json.load(resp)["data"][0]["id"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="http://127.0.0.1:8000/v1", help="the server's base URL")
    p.add_argument("--repo", required=True, help="the directory the agent works in")
    p.add_argument("--task", default="Add a function `double(x)` returning 2*x to calc.py and show the file.")
    p.add_argument("--steps", type=int, default=4, help="step limit of the episode")
    p.add_argument("--max-tokens", type=int, default=96, help="max_tokens of each reply")
    p.add_argument("--out", default="mini-swe-agent.traj.json", help="where the harness saves its trajectory")
    args = p.parse_args()
    os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")  # a local model has no price

    from minisweagent.agents.default import AgentConfig, DefaultAgent
    from minisweagent.config import get_config_path
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

    config = yaml.safe_load(get_config_path("mini_textbased").read_text())
    agent_cfg = {k: v for k, v in config["agent"].items() if k in AgentConfig.model_fields}
    agent_cfg |= {"step_limit": args.steps, "output_path": Path(args.out)}
    model_cfg = {k: v for k, v in config["model"].items() if k != "model_kwargs"}
    kwargs = {"api_base": args.url, "api_key": "unused", "temperature": 0.0, "max_tokens": args.max_tokens}
    model = LitellmTextbasedModel(model_name=f"openai/{served_model(args.url)}", model_kwargs=kwargs, **model_cfg)
    env = LocalEnvironment(cwd=str(Path(args.repo).resolve()), env=config["environment"]["env"])
    result = DefaultAgent(model, env, **agent_cfg).run(task=args.task)
    print("episode:", json.dumps({"exit_status": result.get("exit_status"), "steps": args.steps}))
    with urllib.request.urlopen(args.url.rstrip("/") + "/sessions") as resp:
        print("server sessions:", json.dumps(json.load(resp)["data"]))
    with urllib.request.urlopen(args.url.rstrip("/").removesuffix("/v1") + "/metrics") as resp:
        wanted = ("nexus_turns_total", "nexus_tokens_prefilled_total", "nexus_tokens_generated_total", "nexus_requests")
        print("".join(line + "\n" for line in resp.read().decode().splitlines() if line.startswith(wanted)), end="")


if __name__ == "__main__":
    main()
