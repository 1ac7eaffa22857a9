"""What a measurement ran on (for its JSON), with torch and transformers only: the device benchmark's plain script
(benchmarks.gpu_report) uses it too."""

from __future__ import annotations

import os
import platform
from typing import Any

import torch
import transformers


def machine(device: torch.device | str = "cpu") -> dict[str, Any]:
    """What a measurement ran on, for its JSON: versions, the device (GPU name or CPU model), torch's CPU kernel
    level and threads. Results in bf16 move by a few per cent between CPUs with other instruction sets (research/
    replay-notebook.md, "Reproducing a replay"), so a figure is reproducible only on the machine kind it names."""

    device = torch.device(device)
    model, flags = _cpu()
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else model or platform.processor(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_flags": [f for f in MATH_FLAGS if f in flags],
        "threads": torch.get_num_threads(),
    }
    forced = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if os.environ.get(k)}
    return info | ({"forced_isa": forced} if forced else {})


# the CPU features that pick torch's and oneDNN's kernels for float32 and bf16 math
MATH_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")


def _cpu() -> tuple[str, set[str]]:
    """The CPU's model name and flags (Linux /proc/cpuinfo; "" and none elsewhere)."""
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not model:
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    return model, flags
