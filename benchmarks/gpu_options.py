"""The options of the device benchmark (`nexus-agent bench gpu`, `python -m benchmarks.gpu_report`), apart from its
torch code: `--help` is answered here, before the run is imported."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.shapes import SHAPES

DESCRIPTION = (  # argparse refills it, so where the lines break does not show
    "The device benchmark as one plain run: `python -m benchmarks.gpu_report [options]` (what scripts/gpu_bench.sh "
    "calls, needing only torch, transformers and triton) or `nexus-agent bench gpu`. Prints plain-text tables side "
    "by side and optionally writes the result as JSON."
)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def parse(argv: list[str] | None, prog: str) -> argparse.Namespace:
    """The options of `nexus-agent bench gpu` and `python -m benchmarks.gpu_report` (defined only here), parsed."""
    p = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    p.add_argument("--quick", action="store_true", help="tiny shapes on the CPU")
    p.add_argument("--shape", choices=SHAPES, help="the random model's shape (default qwen3-8b)")
    p.add_argument("--layers", type=_positive_int, help="decoder layers to build (default: all of the shape's)")
    p.add_argument("--prefill", type=_positive_int, help="prompt tokens (default 8192)")
    p.add_argument("--decode", help="decode lengths to report, comma-separated (default 4096,8192)")
    p.add_argument(
        "--policies",
        help="comma-separated: dense (DynamicCache), full, nexus, ..., or POLICY@key=value,... specs (cache options) "
        "separated by ';' (default dense,nexus)",
    )
    p.add_argument("--density", type=float, help="budget of the evicting policies (default 0.2)")
    p.add_argument("--max-decode-s", type=float, help="stop a decode run after this many seconds (default 240)")
    p.add_argument("--kernel-lengths", help="held-key lengths of the kernel timing (default 8192,32768)")
    p.add_argument("--json", type=Path, help="also write the result as JSON here")
    return p.parse_args(argv)
