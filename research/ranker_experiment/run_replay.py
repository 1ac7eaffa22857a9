"""python run_replay.py RANKER.pt bench replay ...: the CLI with the experimental policies registered."""

import sys

import common  # noqa: F401
from rankpol import load_weights

load_weights(sys.argv[1])
from cli.app import main  # noqa: E402

sys.argv = ["nexus-agent"] + sys.argv[2:]
main()
