"""What one decode step can reach on a GPU once Python and kernel launches are out of it.

The product's decode step runs eagerly: on a GPU its 36-64 layers are bound by launches, not by the bytes they read
(docs/benchmarks.md, "Decode on a GPU"). This probe measures the ceiling a compiled step would approach, before
anything is built into the engine: transformers' own StaticCache (fixed-size buffers, one token per step), the
same forward run eagerly and as one captured CUDA graph replayed, at cache capacities that stand for the full
cache and for a 25% budget. Each row is set beside the step's bandwidth bound (weights + the keys and values held,
at the copy bandwidth measured in the same run), and the graph's logits are compared with the eager step's at the
same position.

    python research/cuda_graph_probe.py --shape qwen3-8b --capacities 2048,8192,32768 --batches 1,8
    python research/cuda_graph_probe.py --shape tiny --device cpu      # the eager rows alone (no graphs on a CPU)

It ranks nothing and changes nothing in the product; its figures are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import median_time  # noqa: E402
from benchmarks.decode import bandwidth, weight_bytes  # noqa: E402
from benchmarks.gpu_measure import QWEN3_TINY, SHAPES, random_qwen3  # noqa: E402
from benchmarks.timing import sync  # noqa: E402
from kvstore.cache.forwarding import cache_kwarg  # noqa: E402


def kv_bytes(config, batch: int, capacity: int, layers: int) -> int:
    """Bytes of keys and values one step reads from a full static cache of `capacity` positions (bf16)."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * layers * batch * config.num_key_value_heads * capacity * head_dim * 2


class Stepper:
    """One decode step over a StaticCache whose inputs live in fixed tensors, so a graph can replay it: the step
    reads `ids` and `pos`, writes the greedy token back into `ids` and moves `pos` on by one."""

    def __init__(self, model, batch: int, capacity: int, device: torch.device):
        from transformers import StaticCache

        self.model = model
        self.cache = StaticCache(config=model.config, max_cache_len=capacity)
        self.cache_kwarg = cache_kwarg(model)
        self.ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.logits: torch.Tensor | None = None

    @torch.inference_mode()
    def __call__(self) -> None:
        cache = {self.cache_kwarg: self.cache}  # `cache` in newer transformers, `past_key_values` before
        out = self.model(input_ids=self.ids, cache_position=self.pos, use_cache=True, **cache)
        self.logits = out.logits[:, -1]
        self.ids.copy_(self.logits.argmax(-1, keepdim=True))
        self.pos.add_(1)

    def at(self, position: int, token: int = 1) -> None:
        self.ids.fill_(token)
        self.pos.fill_(position)


def capture(step: Stepper) -> torch.cuda.CUDAGraph:
    """The step captured as one CUDA graph (warmed on a side stream first, as torch asks)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def probe(model, layers: int, batch: int, capacity: int, steps: int, bw: float, weights: int) -> list[dict]:
    device = next(model.parameters()).device
    step = Stepper(model, batch, capacity, device)
    start = capacity - 2 * steps - 16  # the step reads every position of the buffer whatever is filled
    step.at(start)
    step()  # the cache's buffers are made on first use
    bound_s = (weights + kv_bytes(model.config, batch, capacity, layers)) / bw
    rows = []
    step.at(start)
    rows.append(_row("eager", batch, capacity, median_time(step, steps, device, warmup=0), bound_s))
    if device.type != "cuda":
        return rows
    try:
        step.at(start)
        graph = capture(step)
        graph_logits = step.logits  # the graph's own output tensor, rewritten by each replay
    except Exception as exc:  # noqa: BLE001 - reported as the row's outcome, the other rows go on
        rows.append({"mode": "graph", "batch": batch, "capacity": capacity, "error": f"{type(exc).__name__}: {exc}"})
        return rows
    step.at(start + steps, token=7)
    step()
    reference = step.logits.float().clone()
    step.at(start + steps, token=7)
    graph.replay()
    sync(device)
    diff = (graph_logits.float() - reference).abs().max().item()
    step.at(start)
    seconds = median_time(graph.replay, steps, device, warmup=0)
    rows.append(_row("graph", batch, capacity, seconds, bound_s) | {"max_abs_logit_diff": diff})
    del graph
    return rows


def _row(mode: str, batch: int, capacity: int, seconds: float, bound_s: float) -> dict:
    """One row of the table: `seconds` is the median time of a step."""
    return {
        "mode": mode,
        "batch": batch,
        "capacity": capacity,
        "ms_step": seconds * 1e3,
        "tok_s": batch / seconds,
        "bound_ms": bound_s * 1e3,
        "of_bound": bound_s / seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="qwen3-8b", help=f"one of {', '.join([*SHAPES, 'tiny'])}")
    ap.add_argument("--layers", type=int, default=None, help="decoder layers built (default: the shape's)")
    ap.add_argument("--capacities", default="2048,8192,32768", help="cache sizes, comma-separated")
    ap.add_argument("--batches", default="1,8", help="batch sizes, comma-separated")
    ap.add_argument("--steps", type=int, default=32, help="timed steps per row")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    shapes = QWEN3_TINY if args.shape == "tiny" else SHAPES[args.shape]
    capacities = [int(x) for x in args.capacities.split(",")]
    shapes = dict(shapes) | {"max_position_embeddings": max(max(capacities), shapes["max_position_embeddings"])}
    model, layers = random_qwen3(shapes, args.layers, args.device, "bfloat16", "sdpa")
    device = next(model.parameters()).device
    bw, weights = bandwidth(512, device), weight_bytes(model)
    print(f"{args.shape}, {layers} layers, weights {weights / 2**30:.2f} GiB, copy bandwidth {bw / 1e9:.0f} GB/s")
    if device.type == "cuda":
        print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    for batch in (int(x) for x in args.batches.split(",")):
        for capacity in capacities:
            try:
                got = probe(model, layers, batch, capacity, args.steps, bw, weights)
            except torch.OutOfMemoryError:
                got = [{"mode": "eager", "batch": batch, "capacity": capacity, "error": "out of GPU memory"}]
            for r in got:
                rows.append(r)
                print(_line(r), flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    _ratios(rows)
    if args.json:
        args.json.write_text(json.dumps({"shape": args.shape, "layers": layers, "bandwidth_gb_s": bw / 1e9,
                                         "weights_gib": weights / 2**30, "rows": rows}, indent=1))  # fmt: skip


def _line(r: dict) -> str:
    head = f"{r['mode']:>5} batch {r['batch']:>2} capacity {r['capacity']:>6}"
    if "error" in r:
        return f"{head}: {r['error']}"
    diff = f"  max |logit diff| vs eager {r['max_abs_logit_diff']:.3g}" if "max_abs_logit_diff" in r else ""
    return (
        f"{head}: {r['ms_step']:8.2f} ms/step {r['tok_s']:8.1f} tok/s  bound {r['bound_ms']:6.2f} ms "
        f"({100 * r['of_bound']:5.1f}% of it){diff}"
    )


def _ratios(rows: list[dict]) -> None:
    """graph / eager per (batch, capacity), and each capacity's tokens/s against the largest's per mode."""
    ok = {(r["mode"], r["batch"], r["capacity"]): r for r in rows if "error" not in r}
    for (mode, batch, cap), r in sorted(ok.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        if mode == "graph" and ("eager", batch, cap) in ok:
            x = r["tok_s"] / ok["eager", batch, cap]["tok_s"]
            print(f"batch {batch} capacity {cap}: graph / eager tokens/s {x:.2f}x")
    for mode in ("eager", "graph"):
        for batch in sorted({b for m, b, _ in ok if m == mode}):
            caps = sorted(c for m, b, c in ok if m == mode and b == batch)
            for cap in caps[:-1]:
                x = ok[mode, batch, cap]["tok_s"] / ok[mode, batch, caps[-1]]["tok_s"]
                print(f"{mode} batch {batch}: capacity {cap} / {caps[-1]} tokens/s {x:.2f}x")


if __name__ == "__main__":
    main()
