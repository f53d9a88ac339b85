"""Reading a Llama GGUF file: hyperparameters, tensors and tokenizer fields, with clear errors.

A GGUF file is a header of key/value fields (``llama.block_count``, ``tokenizer.ggml.tokens``,
...) followed by tensors, each with a GGML type. Quantized tensors are stored exactly as the
package's formats lay them out: a weight ``[M, K]`` is M rows of ``K / 32`` blocks, so its bytes
become a :class:`~quantgemm_kernels.QTensor` without any conversion. ``gguf.GGUFReader`` (llama.cpp's
own Python package) parses the file; this module only checks what it finds and hands out numpy
arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import formats as F

try:  # gguf is llama.cpp's package; load_gguf needs it, importing this module does not
    import gguf
    from gguf import GGMLQuantizationType as _T
except ImportError:  # pragma: no cover - gguf is in requirements.txt
    gguf = None
    _T = None


class GGUFModelError(ValueError):
    """A GGUF file this model cannot run: another architecture, a tensor type without kernels,
    a missing tensor or field."""


#: GGML tensor type -> the package's format name. Tensors of these types stay quantized and go
#: through :func:`quantgemm_kernels.linear` as a ``QTensor``; a type listed here whose format the
#: package does not (yet) have gives a clear error at load time. Q4_K and Q6_K (chapter 8) have
#: CPU kernels only: a model with them runs on the CPU.
GGML_FORMATS: dict[str, str] = {
    "Q4_0": "q4_0",
    "Q4_1": "q4_1",
    "Q8_0": "q8_0",
    "Q4_K": "q4_k",
    "Q6_K": "q6_k",
}
#: GGML types read as float tensors (norms, sometimes embeddings or small matrices).
FLOAT_TYPES = ("F32", "F16")


def format_of(type_name: str, tensor_name: str = "") -> str | None:
    """The package's format for a GGML type name (``"Q4_0"`` -> ``"q4_0"``), ``None`` for F32/F16;
    :class:`GGUFModelError` for any other type, or for a format the package has no kernels for."""
    what = f"tensor {tensor_name!r} " if tensor_name else ""
    if type_name in FLOAT_TYPES:
        return None
    if type_name not in GGML_FORMATS:
        supported = ", ".join((*GGML_FORMATS, *FLOAT_TYPES))
        raise GGUFModelError(
            f"{what}has GGML type {type_name}, which this model does not run "
            f"(supported: {supported}); requantize the file, e.g. with llama.cpp's "
            "llama-quantize to Q4_0 or Q8_0"
        )
    fmt = GGML_FORMATS[type_name]
    if fmt not in F.SPECS:
        raise GGUFModelError(
            f"{what}is {type_name}, but this version of quantgemm_kernels has no {fmt} "
            f"format or kernels (it has {', '.join(F.FORMATS)})"
        )
    return fmt


@dataclass(frozen=True)
class LlamaConfig:
    """The hyperparameters of a Llama model, from the file's ``llama.*`` fields."""

    n_layers: int
    dim: int  #: hidden size (embedding length)
    ffn_dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int
    rms_eps: float
    rope_base: float
    n_rot: int  #: how many leading dimensions of each head RoPE rotates (all of them for Llama)
    rope_freq_scale: float = 1.0  #: 1/factor for linear RoPE scaling, else 1
    name: str = ""

    @property
    def group(self) -> int:
        """Query heads per KV head (grouped-query attention)."""
        return self.n_heads // self.n_kv_heads


@dataclass
class GGUFTensor:
    """One tensor: ``data`` as the reader gives it (quantized: uint8 ``[rows, row_bytes]``;
    float: ``[rows, K]`` or ``[K]``), its GGML type name and, when quantized, the package's format."""

    name: str
    type_name: str
    fmt: str | None
    data: np.ndarray
    shape: tuple  #: the values' shape, rows first (``[M, K]`` for a weight), as torch writes it


@dataclass
class LlamaFile:
    path: str
    config: LlamaConfig
    tensors: dict[str, GGUFTensor]
    fields: dict = field(default_factory=dict)  #: tokenizer.* fields (lists and scalars)


def _field(reader, key, default=None, required=False):
    f = reader.fields.get(key)
    if f is None:
        if required:
            raise GGUFModelError(f"{reader.path if hasattr(reader, 'path') else 'the file'}: missing field {key!r}")
        return default
    return f.contents()


def read_llama(path) -> LlamaFile:
    """Parse a GGUF file of the Llama architecture; :class:`GGUFModelError` for anything else."""
    if gguf is None:
        raise ImportError("reading GGUF files needs llama.cpp's gguf package: pip install gguf")
    path = str(path)
    try:
        reader = gguf.GGUFReader(path, "r")
    except (ValueError, OSError) as e:
        raise GGUFModelError(f"{path}: not a readable GGUF file ({e})") from e

    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise GGUFModelError(f"{path}: architecture {arch!r}; this model runs the 'llama' architecture only")
    if (_field(reader, "llama.expert_count", 0) or 0) > 0:
        raise GGUFModelError(f"{path}: a mixture-of-experts Llama (llama.expert_count > 0) is not supported")

    def req(key):
        v = _field(reader, key)
        if v is None:
            raise GGUFModelError(f"{path}: missing field {key!r}")
        return v

    dim = int(req("llama.embedding_length"))
    n_heads = int(req("llama.attention.head_count"))
    n_kv = int(_field(reader, "llama.attention.head_count_kv", n_heads))
    head_dim = int(_field(reader, "llama.attention.key_length", dim // n_heads))
    if int(_field(reader, "llama.attention.value_length", head_dim)) != head_dim:
        raise GGUFModelError(f"{path}: key and value head sizes differ, which is not supported")
    if n_heads % n_kv:
        raise GGUFModelError(f"{path}: {n_heads} query heads are not a multiple of {n_kv} KV heads")
    scaling = _field(reader, "llama.rope.scaling.type", "none")
    freq_scale = 1.0
    if scaling == "linear":
        freq_scale = 1.0 / float(req("llama.rope.scaling.factor"))
    elif scaling not in ("none", None):
        raise GGUFModelError(f"{path}: RoPE scaling {scaling!r} is not supported (only none and linear)")

    tensors: dict[str, GGUFTensor] = {}
    for t in reader.tensors:
        type_name = t.tensor_type.name
        if t.name == "rope_freqs.weight":
            raise GGUFModelError(
                f"{path}: per-frequency RoPE factors (rope_freqs.weight, Llama 3.1 style) are not supported"
            )
        fmt = format_of(type_name, t.name)
        shape = tuple(int(s) for s in reversed(t.shape))  # GGUF lists ne0 (K) first
        tensors[t.name] = GGUFTensor(t.name, type_name, fmt, t.data, shape)

    emb = tensors.get("token_embd.weight")
    if emb is None:
        raise GGUFModelError(f"{path}: no token_embd.weight tensor")
    n_layers = int(req("llama.block_count"))
    vocab = int(_field(reader, "llama.vocab_size", emb.shape[0]))
    if vocab != emb.shape[0]:
        raise GGUFModelError(f"{path}: llama.vocab_size {vocab} but token_embd.weight has {emb.shape[0]} rows")
    config = LlamaConfig(
        n_layers=n_layers,
        dim=dim,
        ffn_dim=int(req("llama.feed_forward_length")),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        vocab_size=vocab,
        context_length=int(_field(reader, "llama.context_length", 2048)),
        rms_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_base=float(_field(reader, "llama.rope.freq_base", 10000.0)),
        n_rot=int(_field(reader, "llama.rope.dimension_count", head_dim)),
        rope_freq_scale=freq_scale,
        name=str(_field(reader, "general.name", "") or ""),
    )
    if config.n_rot > head_dim or config.n_rot % 2:
        raise GGUFModelError(
            f"{path}: llama.rope.dimension_count {config.n_rot} must be even and at most the head size {head_dim}"
        )

    expected = {"token_embd.weight": (vocab, dim), "output_norm.weight": (dim,)}
    for i in range(n_layers):
        p = f"blk.{i}."
        expected.update(
            {
                p + "attn_norm.weight": (dim,),
                p + "ffn_norm.weight": (dim,),
                p + "attn_q.weight": (n_heads * head_dim, dim),
                p + "attn_k.weight": (n_kv * head_dim, dim),
                p + "attn_v.weight": (n_kv * head_dim, dim),
                p + "attn_output.weight": (dim, n_heads * head_dim),
                p + "ffn_gate.weight": (config.ffn_dim, dim),
                p + "ffn_up.weight": (config.ffn_dim, dim),
                p + "ffn_down.weight": (dim, config.ffn_dim),
            }
        )
    if "output.weight" in tensors:
        expected["output.weight"] = (vocab, dim)
    for name, shape in expected.items():
        if name not in tensors:
            raise GGUFModelError(f"{path}: missing tensor {name!r}")
        if tensors[name].shape != shape:
            raise GGUFModelError(
                f"{path}: tensor {name!r} has shape {list(tensors[name].shape)}, expected {list(shape)}"
            )
        if len(shape) == 1 and tensors[name].fmt is not None:
            raise GGUFModelError(f"{path}: tensor {name!r} is {tensors[name].type_name}; norms must be F32 or F16")

    tok_fields = {}
    for key in reader.fields:
        if key.startswith("tokenizer."):
            tok_fields[key] = reader.fields[key].contents()
    return LlamaFile(path, config, tensors, tok_fields)
