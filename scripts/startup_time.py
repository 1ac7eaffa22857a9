"""How long `nexus-agent --help` takes beside a bare typer app with one command, measured side by side.

    python scripts/startup_time.py [--runs 7]

Each run is a fresh interpreter; the two are alternated so machine load hits both alike. Prints the medians and
their ratio (the command line registers its commands lazily, so its help should cost about what typer does).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

BARE = (
    "import typer\n"
    "app = typer.Typer(add_completion=False)\n"
    "@app.command()\n"
    "def hello(name: str = 'x') -> None:\n    print(name)\n"
    "@app.command()\n"
    "def bye() -> None:\n    pass\n"
    "import sys; sys.argv = ['bare', '--help']\n"
    "app()\n"
)
NEXUS = "import sys; sys.argv = ['nexus-agent', '--help']\nfrom cli.app import main\nmain()\n"


def wall(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs of each (medians reported)")
    runs = parser.parse_args().runs
    bare, nexus = [], []
    for _ in range(runs):
        bare.append(wall(BARE))
        nexus.append(wall(NEXUS))
    b, n = statistics.median(bare), statistics.median(nexus)
    print(f"bare typer app --help: {b:.3f} s | nexus-agent --help: {n:.3f} s | ratio {n / b:.2f}x ({runs} runs each)")


if __name__ == "__main__":
    main()
