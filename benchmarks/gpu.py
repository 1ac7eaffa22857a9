"""`nexus-agent bench gpu`: one prepared device run (decode speed, cache memory, scoring kernel) of dense vs
Nexus at 20% on a random-weight Qwen3-8B-shaped model; `--quick` runs the same machinery on tiny CPU shapes.

The options are defined once, in `benchmarks/gpu_options.py` (argparse, so the run also works where only the ML
stack is installed: `python -m benchmarks.gpu_report`); this command parses its arguments there (--help imports no
torch), then runs them.
"""

from __future__ import annotations

import click

from benchmarks.gpu_options import parse


def _run(args: tuple[str, ...]) -> None:
    parsed = parse(list(args), prog="nexus-agent bench gpu")
    from benchmarks.gpu_report import run_parsed  # lazy: torch, off --help

    run_parsed(parsed)


gpu = click.Command(
    "gpu",
    callback=_run,
    params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    add_help_option=False,  # --help goes to the benchmark's own parser
    help="Decode throughput, per-step latency and cache memory of dense vs Nexus, and the scoring kernel's time.",
)
