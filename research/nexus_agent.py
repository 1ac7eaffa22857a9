"""`nexus-agent` with research's policy variants registered (the product never imports research/):

    python research/nexus_agent.py bench replay TRACES --specs 'nexus-agent;nexus-agent-reply;nexus-topk' ...

Any command and option of `nexus-agent` works; a spec may name a variant of research/policies.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `research` and the product

import research.policies  # noqa: E402,F401  (registers the variants through kvstore.register_policy)
from cli.app import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[0] = "nexus-agent"
    main()
