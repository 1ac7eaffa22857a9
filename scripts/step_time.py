"""How long one sandbox step takes to start: `true` run N times in one bwrap sandbox on a built-in task.

    python scripts/step_time.py [--runs 50] [--backend bwrap]

Prints the median and the 10th/90th percentiles in milliseconds (the command itself costs nothing, so this is
the sandbox's own start-up: namespaces, mounts, the step's cgroup, the output reader).
"""

from __future__ import annotations

import argparse
import statistics
import time

from swe_env.sandbox.factory import open_sandbox
from tasks import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="steps to time")
    parser.add_argument("--backend", default="bwrap", help="sandbox backend")
    parser.add_argument("--task", default="nexus-demo__semver-lite-1", help="built-in task whose repo is used")
    args = parser.parse_args()
    with open_sandbox(get_task(args.task), args.backend) as sandbox:
        sandbox.execute("true")  # warm caches
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            res = sandbox.execute("true")
            times.append((time.perf_counter() - start) * 1e3)
            assert res.returncode == 0, res.output
    q = statistics.quantiles(times, n=10)
    print(
        f"{args.backend}: {args.runs} steps, median {statistics.median(times):.1f} ms (p10 {q[0]:.1f}, p90 {q[-1]:.1f})"
    )


if __name__ == "__main__":
    main()
