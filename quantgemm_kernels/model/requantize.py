"""Requantizing a Llama GGUF file with llama.cpp's Q4_K_M recipe, written with gguf's GGUFWriter.

``llama-quantize model.gguf out.gguf Q4_K_M`` does not put every weight in Q4_K. Its
``llama_tensor_get_type`` (``src/llama-quant.cpp``) chooses a type per tensor; for the Llama
architecture without experts or an importance matrix, and a model that is not a 70B, the Q4_K_M
rules are:

* the output layer (or the token embedding, where the two are tied): Q6_K, or Q8_0 when its rows
  are not a whole number of 256-value super-blocks;
* ``attn_v`` and ``ffn_down``: Q6_K in the layers where ``use_more_bits`` holds (the first and the
  last eighth of the layers, and every third layer between), Q4_K elsewhere; the layer is the
  tensor's position among the tensors of its kind, counted in file order;
* every other 2-D weight (``attn_q``, ``attn_k``, ``attn_output``, ``ffn_gate``, ``ffn_up``, an
  untied ``token_embd``): Q4_K;
* then ``tensor_type_fallback``: a row of K values that is not a multiple of 256 cannot hold
  super-blocks, and Q4_K falls back to Q5_0, Q6_K to Q8_0 (F16 where even 32 does not divide K);
* norms and other 1-D tensors are copied.

:func:`q4_k_m_types` reproduces those choices (tests/test_requantize.py compares them with the
types llama.cpp's own ``llama_model_quantize`` writes). :func:`requantize_gguf` writes a file with
them: each weight is dequantized from the source file and quantized again with the package's
quantizers, whose bytes are ggml's. A type the package has no format for (Q5_0, a fallback of
small models whose hidden size is not a multiple of 256) is either kept as it is in the source
file (``missing="keep"``: its bytes and type unchanged) or refused (``missing="error"``).

``recipe="Q4_0"`` and ``recipe="Q8_0"`` (:func:`legacy_types`) write the plain 32-value files of
``llama-quantize ... Q4_0`` / ``Q8_0``: every 2-D weight in that type, except the output layer (or
the tied token embedding), which llama.cpp gives Q6_K (Q8_0 where its rows are not super-blocks) in
a Q4_0 file and Q8_0 in a Q8_0 file; norms and other 1-D tensors copied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import formats as F
from .gguf_file import GGML_FORMATS, GGUFModelError

try:
    import gguf
except ImportError:  # pragma: no cover - gguf is in requirements.txt
    gguf = None

QK_K = F.QK_K
#: llama.cpp's ``tensor_type_fallback`` for the types of the Q4_K_M recipe
FALLBACK = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}
_BLOCK = {"Q4_K": 256, "Q6_K": 256, "Q5_0": 32, "Q8_0": 32, "Q4_0": 32}
_LAYER = re.compile(r"^blk\.(\d+)\.")


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama.cpp's ``use_more_bits``: the first and last eighth of the layers, and every third
    layer between (integer division, as in C++)."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def _loader_order(item) -> tuple[int, str]:
    """llama.cpp's ``weight_name_comparer``: tensors by layer (``blk.N.``; others first, as -1),
    then by name. The recipe counts attn_v and ffn_down tensors in this order, not in file order
    (a file may list ``blk.10`` before ``blk.2``)."""
    m = _LAYER.match(item[0])
    return (int(m.group(1)) if m else -1, item[0])


def _quantized(name: str, shape) -> bool:
    """``tensor_allows_quantization`` for a Llama file: 2-D tensors whose name ends in ``weight``,
    not a norm."""
    return len(shape) >= 2 and name.endswith("weight") and "_norm.weight" not in name


def _named_shapes(tensors) -> list[tuple[str, tuple[int, ...]]]:
    """``(name, shape)`` pairs, shape ``[rows, K]`` as torch writes it, from ``gguf`` reader tensors
    (whose shapes list the fastest dimension first) or from such pairs."""
    return [
        (t.name, tuple(int(s) for s in reversed(t.shape)))
        if hasattr(t, "tensor_type")
        else (t[0], tuple(map(int, t[1])))
        for t in tensors
    ]


def q4_k_m_types(tensors, tied: bool | None = None) -> dict[str, str]:
    """GGML type name per tensor, as ``llama-quantize ... Q4_K_M`` chooses it for a Llama model
    (no experts, no importance matrix, not a 70B). ``tensors``: ``(name, shape)`` pairs, shape ``[rows, K]`` as torch writes it (``[K]`` for a 1-D tensor), or ``gguf`` reader
    tensors. ``tied``: whether the token embedding is also the output layer (default: the file has
    no ``output.weight``). 1-D tensors and norms map to ``None`` (copied)."""
    items = _named_shapes(tensors)
    names = [n for n, _ in items]
    if tied is None:
        tied = "output.weight" not in names
    n_attn_v = sum(n.endswith("attn_v.weight") for n in names)
    n_ffn_down = sum(n.endswith("ffn_down.weight") for n in names)
    i_attn_v = i_ffn_down = 0
    out: dict[str, str | None] = {}
    for name, shape in sorted(items, key=_loader_order):
        if not _quantized(name, shape):
            out[name] = None
            continue
        K = shape[-1]
        new = "Q4_K"  # the recipe's default type
        if name == "output.weight" or (tied and name == "token_embd.weight"):
            new = "Q8_0" if K % QK_K else "Q6_K"
        elif name.endswith("attn_v.weight"):
            if use_more_bits(i_attn_v, n_attn_v):
                new = "Q6_K"
            i_attn_v += 1
        elif name.endswith("ffn_down.weight"):
            if use_more_bits(i_ffn_down, n_ffn_down):
                new = "Q6_K"
            i_ffn_down += 1
        if K % _BLOCK.get(new, 32):  # tensor_type_fallback
            new = FALLBACK.get(new, new)
            if K % _BLOCK.get(new, 32):
                new = "F16"
        out[name] = new
    return out


def legacy_types(tensors, ftype: str, tied: bool | None = None) -> dict[str, str]:
    """GGML type name per tensor, as ``llama-quantize ... Q4_0`` (or ``Q8_0``) chooses it for a
    Llama model without an importance matrix: ``ftype`` for every 2-D weight; the output layer (or
    the tied token embedding) Q8_0 where its rows are not whole 32-value blocks, else Q6_K in a
    Q4_0 file (Q8_0 where the rows are not super-blocks, ``tensor_type_fallback``) and Q8_0 in a
    Q8_0 file; F16 where a row is not whole blocks of 32 (where llama.cpp refuses the tensor).
    Arguments and result as :func:`q4_k_m_types`."""
    if ftype not in ("Q4_0", "Q8_0"):
        raise ValueError(f"ftype must be 'Q4_0' or 'Q8_0', got {ftype!r}")
    items = _named_shapes(tensors)
    if tied is None:
        tied = "output.weight" not in [n for n, _ in items]
    out: dict[str, str | None] = {}
    for name, shape in sorted(items, key=_loader_order):
        if not _quantized(name, shape):
            out[name] = None
            continue
        K = shape[-1]
        new = ftype
        if name == "output.weight" or (tied and name == "token_embd.weight"):
            if K % 32 == 0 and ftype != "Q8_0":
                new = "Q6_K" if K % QK_K == 0 else "Q8_0"
            else:
                new = "Q8_0"
        if K % _BLOCK[new]:
            new = "F16"
        out[name] = new
    return out


#: the recipes :func:`requantize_gguf` writes, with their ``general.file_type``
RECIPES = ("Q4_K_M", "Q4_0", "Q8_0")


@dataclass
class RequantizedTensor:
    name: str
    source_type: str  #: the type in the source file
    recipe_type: str | None  #: what llama.cpp's recipe chooses (None: copied, 1-D)
    written_type: str  #: what the written file holds
    nbytes: int


def _values(t) -> np.ndarray:
    """float32 ``[rows, K]`` (or ``[K]``) values of a reader tensor, by the package's dequantizer
    where it has the format, else gguf's."""
    name = t.tensor_type.name
    data = np.asarray(t.data)
    if name == "F32":
        return np.array(data, np.float32)
    if name in GGML_FORMATS:
        return F.dequantize(data, GGML_FORMATS[name])
    return gguf.quants.dequantize(data, t.tensor_type).astype(np.float32)


def _quantize(x: np.ndarray, type_name: str) -> np.ndarray:
    """The bytes of ``x`` in ``type_name``: the package's C++ quantizer (the bytes of ggml's
    reference quantizers, tests/test_formats.py), through torch."""
    import torch

    from .. import api

    if type_name == "F16":
        return x.astype(np.float16)
    return api.quantize(torch.from_numpy(np.ascontiguousarray(x, np.float32)), GGML_FORMATS[type_name]).numpy()


def requantize_gguf(src, dst, *, recipe: str = "Q4_K_M", missing: str = "keep") -> list[RequantizedTensor]:
    """Write ``dst``: the Llama GGUF ``src`` with its weights requantized by llama.cpp's ``recipe``
    (``"Q4_K_M"``, see :func:`q4_k_m_types`; ``"Q4_0"`` or ``"Q8_0"``, see :func:`legacy_types`). Every key/value field is copied (``general.file_type``
    set to the recipe's, unless a tensor could not get its type). Each quantized weight is
    dequantized from ``src`` and quantized again: its error is the source's plus the new format's.

    ``missing``: what to do with a tensor whose recipe type the package has no format for (Q5_0):
    ``"keep"`` copies the source tensor unchanged (its type and bytes), ``"error"`` raises
    :class:`GGUFModelError`. Returns one :class:`RequantizedTensor` per tensor, in file order.
    """
    if gguf is None:
        raise ImportError("writing GGUF files needs llama.cpp's gguf package: pip install gguf")
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {', '.join(RECIPES)}, got {recipe!r}")
    if missing not in ("keep", "error"):
        raise ValueError(f"missing must be 'keep' or 'error', got {missing!r}")
    src, dst = Path(src), Path(dst)
    if src.resolve() == dst.resolve():
        raise ValueError("dst must differ from src (the source is read while the new file is written)")
    reader = gguf.GGUFReader(str(src), "r")
    arch = reader.fields["general.architecture"].contents()
    if arch != "llama":
        raise GGUFModelError(f"{src}: architecture {arch!r}; the Q4_K_M rules here are the Llama ones")
    if (reader.fields.get("llama.expert_count") and reader.fields["llama.expert_count"].contents()) or 0:
        raise GGUFModelError(f"{src}: a mixture-of-experts model; the rules here are for dense Llamas")
    types = q4_k_m_types(reader.tensors) if recipe == "Q4_K_M" else legacy_types(reader.tensors, recipe)

    report, planned = [], []
    for t in reader.tensors:
        want = types[t.name]
        have = t.tensor_type.name
        if want is None:
            written = have
        elif want in GGML_FORMATS and GGML_FORMATS[want] in F.SPECS or want == "F16":
            written = want
        elif missing == "keep":
            written = have
        else:
            raise GGUFModelError(
                f"{t.name}: the {recipe} recipe makes it {want} (its rows have {int(t.shape[0])} values), "
                f"a type this package has no format for; missing='keep' keeps it {have}"
            )
        planned.append((t, want, written))

    w = gguf.GGUFWriter(str(dst), arch)
    complete = all(want is None or want == written for _, want, written in planned)
    for key, f in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key == "general.file_type":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), vtype, sub)
    if complete:
        w.add_file_type(getattr(gguf.LlamaFileType, f"MOSTLY_{recipe}"))
    for t, want, written in planned:
        have = t.tensor_type.name
        if want is None or written != want:
            data = np.asarray(t.data)  # copied as stored: norms, or a tensor kept for lack of its format
        else:
            data = _quantize(_values(t), written)
        raw = None if written in ("F32", "F16") else gguf.GGMLQuantizationType[written]
        w.add_tensor(t.name, data, raw_dtype=raw)
        report.append(RequantizedTensor(t.name, have, want, written, int(data.nbytes)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return report


def quantize_with_llama_cpp(src, dst, ftype: str = "Q4_K_M", threads: int | None = None, verbose: bool = False) -> None:
    """llama.cpp's own ``llama_model_quantize`` (what ``llama-quantize`` runs), through
    llama-cpp-python: ``src`` requantized to ``ftype`` (``allow_requantize``: a quantized source is
    dequantized by ggml first, as :func:`requantize_gguf` does). Its log (a line per tensor) is
    silenced unless ``verbose``. Raises ImportError without llama-cpp-python, RuntimeError if
    llama.cpp reports a failure."""
    import contextlib
    import ctypes

    import llama_cpp

    try:  # llama-cpp-python's own silencer (file descriptors 1 and 2, and ipykernel's copies)
        from llama_cpp._utils import suppress_stdout_stderr

        quiet = suppress_stdout_stderr(disable=verbose)
    except ImportError:  # pragma: no cover - another llama-cpp-python layout
        quiet = contextlib.nullcontext()

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.allow_requantize = True
    if threads:
        params.nthread = int(threads)
    with quiet:
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src} -> {dst}, {ftype}) returned {rc}")
