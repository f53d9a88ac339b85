"""The Llama forward pass in torch, every linear layer through :func:`quantgemm_kernels.linear`.

One layer, for T tokens ``x [T, dim]`` (llama.cpp's ``llm_build_llama``, float32 throughout)::

    h = rms_norm(x) * attn_norm
    q, k, v = h @ Wq^T, h @ Wk^T, h @ Wv^T         quantized weights x Q8_1 activations
    q, k = rope(q), rope(k)                         "normal" RoPE on GGUF's Q/K layout
    x = x + attention(q, k, v | KV cache) @ Wo^T    grouped-query, causal, softmax in float32
    h = rms_norm(x) * ffn_norm
    x = x + (silu(h @ Wgate^T) * (h @ Wup^T)) @ Wdown^T

and after the last layer ``logits = rms_norm(x) * output_norm @ Wout^T``, with ``Wout`` the token
embedding when the file has no ``output.weight`` (tied weights).

The linear layers are the only place the kernels appear: the weights stay in the file's bytes
(``QTensor``), the activations are quantized to Q8_1 by the kernels, as llama.cpp's mul_mat does.
Everything else (norms, RoPE, attention, SwiGLU) runs in float32 torch, as it does in ggml.

One token's decode step is a few hundred small operator calls around 121 GEMMs, so its speed is
mostly overhead: the forward pass keeps the calls few (one GEMM each for Q/K/V and for gate/up,
one RoPE call for Q and K, a KV cache laid out so that attention reads it in place, no autograd
bookkeeping), and on the CPU calls the kernels without ``linear``'s per-call checks
(:meth:`LlamaModel._matmul`). On CUDA, :class:`StaticDecoder` captures the whole step in a CUDA
graph: one launch per token.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

from .. import api
from .. import formats as F
from .gguf_file import GGUFModelError, GGUFTensor, LlamaConfig, LlamaFile, read_llama


# ------------------------------------------------------------------------------ the layers' math
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """llama.cpp's ``ggml_rms_norm`` then the elementwise weight: ``x / sqrt(mean(x^2) + eps) * w``
    (torch's fused ``rms_norm``, the same arithmetic in fewer operator calls)."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


def rope_tables(positions: torch.Tensor, n_rot: int, base: float, freq_scale: float = 1.0):
    """``cos, sin [len(positions), n_rot/2]`` of the angles ``p * freq_scale * base^(-2i/n_rot)``.

    Computed in float64 and rounded to float32 once (ggml computes the angle in float32; the
    difference is below float32's resolution of the angle for positions up to a few thousand).
    """
    i = torch.arange(n_rot // 2, dtype=torch.float64)
    inv_freq = base ** (-2.0 * i / n_rot)
    theta = positions.to(torch.float64)[:, None] * freq_scale * inv_freq[None, :]
    return torch.cos(theta).float(), torch.sin(theta).float()


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [T, heads, head_dim]`` as llama.cpp's ``ggml_rope`` in mode 0 ("normal", the mode
    LLM_ARCH_LLAMA uses): dimensions ``(2i, 2i+1)`` of each head form a pair rotated by angle
    ``theta_i`` of the token's position; dimensions from ``n_rot = 2 * cos.shape[1]`` on pass through.

    Pairs of *adjacent* dimensions are GGUF's layout of Q and K: llama.cpp's converter permutes the
    rows of Hugging Face's ``q_proj``/``k_proj``, whose RoPE pairs ``(i, i + head_dim/2)`` (NeoX
    style, ``rotate_half``), so that the same rotation becomes adjacent pairs. Both give the same
    attention scores (tests/test_model.py checks it against Hugging Face's formulation).
    """
    n_rot = 2 * cos.shape[1]
    xr = x[..., :n_rot].reshape(*x.shape[:-1], n_rot // 2, 2)
    x0, x1 = xr[..., 0], xr[..., 1]
    c, s = cos[:, None, :], sin[:, None, :]  # broadcast over heads
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).reshape(*x.shape[:-1], n_rot)
    if n_rot == x.shape[-1]:
        return out
    return torch.cat((out, x[..., n_rot:]), dim=-1)


def rope_cis(x: torch.Tensor, cis: torch.Tensor) -> torch.Tensor:
    """:func:`rope` with the angles as unit complex numbers ``cis = cos + i sin [T, n_rot/2]``: each
    pair ``(x[2i], x[2i+1])`` read as ``x[2i] + i x[2i+1]`` times ``cis`` is the same rotation (to
    float32 rounding: torch's complex product may fuse a multiply-add), in three operator calls
    instead of a dozen."""
    n_rot = 2 * cis.shape[1]
    head = x if n_rot == x.shape[-1] else x[..., :n_rot]
    pairs = head.reshape(*x.shape[:-1], n_rot // 2, 2)
    # view_as_complex reads float32 pairs in place where each pair is two adjacent floats starting at
    # an even offset (Q's and K's columns of the fused QKV output are); anything else is copied first
    if pairs.dtype != torch.float32 or pairs.storage_offset() % 2 or any(st % 2 for st in pairs.stride()[:-1]):
        pairs = pairs.float().contiguous()
    z = torch.view_as_complex(pairs)
    out = torch.view_as_real(z * cis[:, None, :]).flatten(-2)
    return out if n_rot == x.shape[-1] else torch.cat((out, x[..., n_rot:]), dim=-1)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
    """Causal grouped-query attention of ``q [T, H, D]`` (positions ``start .. start+T-1``) over the
    cached ``k, v [S, Hkv, D]`` (positions ``0 .. S-1``, ``S = start + T``); returns ``[T, H*D]``.

    Query head ``h`` reads KV head ``h // (H / Hkv)``, as ggml's broadcasting mul_mat does.
    """
    return cached_attention(q, k.transpose(0, 1), v.transpose(0, 1), start)


def cached_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
    """:func:`attention` with ``k, v [Hkv, S, D]``, the layout of :class:`KVCache`: a prefix of the
    cache is then a batch of ``Hkv`` row-major matrices, which the batched matmuls read in place.

    The ``G = H / Hkv`` query heads of a KV head (and, for ``T > 1``, their tokens) are the rows of one
    matrix, so one matmul per KV head gives all their scores, as ggml's broadcasting mul_mat does.
    """
    T, H, D = q.shape
    Hkv, S, _ = k.shape
    G = H // Hkv
    if T == 1:  # one token: its heads are already [Hkv, G, D] in memory
        qg = q.reshape(Hkv, G, D)
    else:
        qg = q.reshape(T, Hkv, G, D).permute(1, 2, 0, 3).reshape(Hkv, G * T, D)
    scores = torch.bmm(qg, k.transpose(1, 2))  # [Hkv, G*T, S]
    scores.mul_(1.0 / math.sqrt(D))
    if T > 1:
        qpos = torch.arange(start, start + T, device=q.device)[:, None]
        kpos = torch.arange(S, device=q.device)[None, :]
        scores.view(Hkv, G, T, S).masked_fill_(kpos > qpos, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    out = torch.bmm(p, v)  # [Hkv, G*T, D]
    if T == 1:
        return out.reshape(1, H * D)
    return out.view(Hkv, G, T, D).permute(2, 0, 1, 3).reshape(T, H * D)


# ------------------------------------------------------------------------------ time breakdown
class TimeBreakdown:
    """Seconds spent in each part of the forward pass, collected while a ``model.profile()`` block
    runs: ``seconds["linear"]`` (the quantized GEMMs, activation quantization included),
    ``"attention"`` (scores, mask, softmax, weighted sum, KV cache writes), ``"rope"``, ``"norm"``,
    ``"swiglu"``, ``"embedding"``, and ``"other"``: the rest of the wall time (residual adds,
    reshapes, Python). ``linear_by_weight`` splits ``"linear"`` by weight (``attn_qkv``, ``ffn_down``,
    ``output``...). On CUDA each part synchronizes the device before and after, so the parts add up
    to the wall time, at the cost of the overlap an unprofiled run has.
    """

    PARTS = ("linear", "attention", "rope", "norm", "swiglu", "embedding")

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.seconds: dict[str, float] = defaultdict(float)
        self.linear_by_weight: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.wall = 0.0
        self.tokens = 0

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextlib.contextmanager
    def part(self, name: str, weight: str | None = None):
        self._sync()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            dt = time.perf_counter() - t0
            self.seconds[name] += dt
            self.calls[name] += 1
            if weight is not None:
                self.linear_by_weight[weight] += dt

    def summary(self) -> dict[str, float]:
        """Seconds per part, ``"other"`` included; they sum to ``wall``."""
        out = {p: self.seconds.get(p, 0.0) for p in self.PARTS}
        out["other"] = max(self.wall - sum(out.values()), 0.0)
        return out

    def fractions(self) -> dict[str, float]:
        s = self.summary()
        total = sum(s.values()) or 1.0
        return {k: v / total for k, v in s.items()}

    def __repr__(self):
        parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.summary().items())
        return f"TimeBreakdown({self.tokens} tokens in {self.wall * 1e3:.1f} ms: {parts})"


_NO_TIMING = contextlib.nullcontext()


# ------------------------------------------------------------------------------ the model
class KVCache:
    """Keys and values of every layer for up to ``capacity`` positions: ``k, v [layers, Hkv, capacity,
    D]`` float32 on the model's device; ``pos`` positions are filled. Each KV head's positions are
    contiguous, so that attention reads the first ``S`` of them as ``[Hkv, S, D]`` without a copy."""

    def __init__(self, config: LlamaConfig, capacity: int, device):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        shape = (config.n_layers, config.n_kv_heads, capacity, config.head_dim)
        self.k = torch.zeros(shape, dtype=torch.float32, device=device)
        self.v = torch.zeros(shape, dtype=torch.float32, device=device)
        self.capacity = capacity
        self.pos = 0


@dataclass
class Layer:
    attn_norm: torch.Tensor
    ffn_norm: torch.Tensor
    linears: dict  #: name -> QTensor or float32 [M, K]; "attn_qkv" or "attn_q"/"attn_k"/"attn_v", ...


@dataclass
class GenerationStats:
    prompt_tokens: int
    new_tokens: int
    prefill_s: float
    decode_s: float  #: time of the new tokens after the first (each one a decode step)

    @property
    def prefill_tok_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s else float("nan")

    @property
    def decode_tok_s(self) -> float:
        steps = self.new_tokens - 1  # the first new token comes out of the prefill
        return steps / self.decode_s if steps > 0 and self.decode_s else float("nan")


def _span(positions: int) -> int:
    """The power of two of at least 256 that holds ``positions``."""
    return max(256, 1 << (positions - 1).bit_length())


class StaticDecoder:
    """Decode steps of one token whose tensors keep their shapes and addresses from step to step, so
    that on CUDA a step is captured once in a ``torch.cuda.CUDAGraph`` and replayed: one launch per
    token instead of a few hundred kernel launches from Python.

    What changes from step to step lives on the device: ``token`` and ``pos`` (int64 ``[1]``), the
    token to feed and its position. A step embeds ``token``, gathers its RoPE row by ``pos``, writes
    its keys and values at ``pos`` of a :class:`KVCache` of ``capacity`` positions (default the
    model's context length), attends over the cache's first ``span`` positions with those after
    ``pos`` masked, and ends by writing the most likely next token into ``token`` and ``pos + 1``
    into ``pos``: greedy decoding replays the step with no host work in between. Nothing in a step
    reads a tensor's value on the host. On the CPU the same step runs eagerly (``graph=False``):
    ``generate`` decodes through it there too, so every CPU test of generation runs the graph's code.

    ``prefill(ids)`` fills the cache through the ordinary forward pass and sets ``pos``.
    """

    def __init__(self, model: LlamaModel, capacity: int | None = None):
        c = model.config
        self.model = model
        self.capacity = c.context_length if capacity is None else capacity
        if not 1 <= self.capacity <= c.context_length:
            raise ValueError(f"capacity must be 1 to the context length {c.context_length}, got {self.capacity}")
        dev = model.device
        # normal tensors even when made under inference_mode, so that steps may run outside it too
        with torch.inference_mode(False):
            self.cache = model.new_cache(self.capacity)
            self.token = torch.zeros(1, dtype=torch.int64, device=dev)
            self.pos = torch.zeros(1, dtype=torch.int64, device=dev)
            self.kpos = torch.arange(self.capacity, device=dev)
            self.cis = model._rope_angles(0, self.capacity).clone()  # the whole table, at a fixed address
            self.cos, self.sin = self.cis.real.contiguous(), self.cis.imag.contiguous()  # decode_layer's
        self._graphs: dict[int, tuple] = {}  # span -> (CUDAGraph, its logits tensor)

    def span_for(self, positions: int) -> int:
        """The span a captured step attends over when ``positions`` will be filled at most: a power of
        two of at least 256, at most ``capacity``. Attention then reads at most about twice the
        positions in use (not the whole context), and a handful of spans (graphs) cover every length."""
        if not 1 <= positions <= self.capacity:
            raise ValueError(f"{positions} positions do not fit in {self.capacity}")
        return min(self.capacity, _span(positions))

    @torch.inference_mode()
    def prefill(self, ids) -> torch.Tensor:
        """Logits ``[1, vocab]`` of the last of ``ids`` (a fresh sequence); the cache then holds their
        keys and values and ``pos`` is ``len(ids)``. The next step's token goes into ``token``."""
        self.cache.pos = 0
        logits = self.model.forward(ids, self.cache, last_only=True)
        self.pos.fill_(self.cache.pos)
        return logits

    def _step(self, span: int) -> torch.Tensor:
        logits = self.model._static_step(self, span)
        self.token.copy_(logits.argmax(-1))
        self.pos.add_(1)
        return logits

    @torch.inference_mode()
    def step(self, span: int | None = None, graph: bool | None = None) -> torch.Tensor:
        """One decode step: logits ``[1, vocab]`` of ``token`` at ``pos`` (attending over ``span``
        positions, default ``capacity``; ``pos`` must be below it); afterwards ``token`` holds the
        argmax and ``pos`` has advanced by one. ``graph`` (default: on CUDA) replays a CUDA graph of
        the step, captured on the first call for this span; its logits tensor is the same object at
        every replay, overwritten by the next."""
        span = self.capacity if span is None else span
        if not 1 <= span <= self.capacity:
            raise ValueError(f"span must be 1 to the capacity {self.capacity}, got {span}")
        if graph is None:
            graph = self.model.device.type == "cuda"
        if not graph:
            return self._step(span)
        g, logits = self.prepare(span)
        g.replay()
        return logits

    @torch.inference_mode()
    def prepare(self, span: int):
        """The CUDA graph of a step over ``span`` positions and its logits tensor, captured on the
        first call for this span (after one eager warm-up step at ``pos``; ``token`` and ``pos`` are
        left as they were)."""
        if self.model.device.type != "cuda":
            raise ValueError("CUDA graphs need the model on a CUDA device")
        if span not in self._graphs:
            self._graphs[span] = self._capture(span)
        return self._graphs[span]

    def _capture(self, span: int):
        # One eager step on a side stream first: what runs once per process and stream (cuBLAS's
        # handle and workspace, the kernels' attribute and occupancy queries) happens outside the
        # capture, which then records on that same stream. The step writes keys and values at pos,
        # which the captured step rewrites before it reads them.
        dev = self.model.device
        with torch.cuda.device(dev):
            saved = self.token.clone(), self.pos.clone()
            side = torch.cuda.Stream(dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                self._step(span)
            torch.cuda.current_stream(dev).wait_stream(side)
            self.token.copy_(saved[0])
            self.pos.copy_(saved[1])
            torch.cuda.synchronize(dev)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=side):
                logits = self._step(span)
        return g, logits

    def graph_safe(self) -> bool:
        """Whether every linear layer's kernel at one token runs without the host: the CUDA kernels
        that quantize the activations themselves (``fused_quant``) and the float32 ones do;
        ``quantize()`` in front of the others reads ``max |x|`` on the host, which a capture forbids."""
        if self.model.device.type != "cuda":
            return False
        m = self.model
        weights = [W for L in m.layers for W in L.linears.values()] + [m.output]
        for W in weights:
            fmt = W.fmt if isinstance(W, api.QTensor) else "f32"
            k = api.pick_kernel(m.device, fmt, 1, W.shape[0])
            if not (k.afmt == "f32" or k.fused_quant):
                return False
        return True


def _float_tensor(t: GGUFTensor, device) -> torch.Tensor:
    return torch.from_numpy(np.array(t.data, dtype=np.float32)).reshape(t.shape).to(device)


def _weight(t: GGUFTensor, device):
    """A weight as :func:`quantgemm_kernels.linear` takes it: QTensor of the file's bytes, or float32."""
    if t.fmt is None:
        return _float_tensor(t, device)
    data = torch.from_numpy(np.array(t.data, dtype=np.uint8)).to(device)  # a copy: the file stays read-only
    return api.QTensor(data, t.fmt)


def _concat_rows(ws):
    """One weight of the rows of ``ws`` (same format and K), or None if they cannot be joined."""
    if all(isinstance(w, api.QTensor) for w in ws) and len({w.fmt for w in ws}) == 1:
        return api.QTensor(torch.cat([w.data for w in ws]).contiguous(), ws[0].fmt)
    if all(isinstance(w, torch.Tensor) for w in ws):
        return torch.cat(ws).contiguous()
    return None


class LlamaModel:
    """A Llama model from a GGUF file; see :func:`load_gguf`.

    ``model(tokens)``: float32 logits ``[len(tokens), vocab]`` of a 1-D LongTensor of token ids,
    computed from scratch. ``model.forward(tokens, cache)``: the same, continuing a
    :class:`KVCache` (``model.new_cache(n)``). ``model.generate(prompt, max_new_tokens)``.
    """

    def __init__(self, file: LlamaFile, device="cpu", *, fuse: bool = True):
        self.device = torch.device(device)
        if self.device.type == "cuda" and not api.cuda_kernels_built():
            raise ValueError("device='cuda' needs the package's CUDA kernels, which are not built here")
        self.path = file.path
        self.config = c = file.config
        T = file.tensors
        self.fused = fuse
        self._tok_fields = file.fields
        self._tokenizer = None

        self._check_kernels(file)
        emb = T["token_embd.weight"]
        self.tok_embd = _weight(emb, self.device)
        # The lookup dequantizes the rows it selects, on the model's device; for a format with no CUDA
        # dequantizer (the K-quants) the table is dequantized once on the CPU instead and kept on the
        # GPU in float32 (the same values as the CPU's row by row; vocab x dim x 4 bytes)
        self._embd_rows = None
        if (
            self.device.type == "cuda"
            and isinstance(self.tok_embd, api.QTensor)
            and not F.SPECS[self.tok_embd.fmt].cuda
        ):
            self._embd_rows = api.dequantize(self.tok_embd.data.cpu(), self.tok_embd.fmt).to(self.device)
        self.output = _weight(T["output.weight"], self.device) if "output.weight" in T else self.tok_embd
        self.tied = "output.weight" not in T
        self.output_norm = _float_tensor(T["output_norm.weight"], self.device)
        self.layers = []
        for i in range(c.n_layers):
            p = f"blk.{i}."
            w = {
                n: _weight(T[p + n + ".weight"], self.device)
                for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
            }
            if fuse:
                # Q, K, V read the same input: one GEMM over their stacked rows gives the same numbers
                # (each output row is its own dot product; the activations are quantized once either way)
                for joined, parts in (
                    ("attn_qkv", ("attn_q", "attn_k", "attn_v")),
                    ("ffn_gate_up", ("ffn_gate", "ffn_up")),
                ):
                    cat = _concat_rows([w[n] for n in parts])
                    if cat is not None:
                        for n in parts:
                            del w[n]
                        w[joined] = cat
            self.layers.append(
                Layer(
                    _float_tensor(T[p + "attn_norm.weight"], self.device),
                    _float_tensor(T[p + "ffn_norm.weight"], self.device),
                    w,
                )
            )
        self._cis = torch.empty(0, c.n_rot // 2, dtype=torch.complex64, device=self.device)
        # The CPU's quantized linear layers call the kernels directly (see _matmul); False: all
        # through quantgemm_kernels.linear, with its checks on every call.
        self._direct = self.device.type == "cpu"
        self._kernels: dict = {}  # (format, N, rows) -> pick_kernel's choice, or False: use linear()
        self._decoder: StaticDecoder | None = None  # static_decoder()'s
        self._fused_decode = True  # see fused_decode
        self._plans = None  # _decode_plans()'s
        self._profile: TimeBreakdown | None = None
        self.last_stats: GenerationStats | None = None

    def _check_kernels(self, file: LlamaFile) -> None:
        """A clear error now, rather than at the first token, if no kernel reads some weight's format
        on this device (for one token or for a prompt's worth)."""
        linear_names = [n for n, t in file.tensors.items() if len(t.shape) == 2 and n != "token_embd.weight"]
        if "output.weight" not in file.tensors:
            linear_names.append("token_embd.weight")  # the tied output layer is a linear layer too
        seen = set()
        for n in linear_names:
            t = file.tensors[n]
            if t.fmt in seen:
                continue
            seen.add(t.fmt)
            for N in (1, 512):
                try:
                    api.pick_kernel(self.device, t.fmt or "f32", N, t.shape[0])
                except ValueError as e:
                    raise GGUFModelError(f"{file.path}: tensor {n!r} is {t.type_name} and {e}") from e

    # --------------------------------------------------------------------------- tokenizer
    @property
    def tokenizer(self):
        """The file's tokenizer (:class:`GGUFTokenizer`), built on first use."""
        if self._tokenizer is None:
            from .tokenizer import GGUFTokenizer

            self._tokenizer = GGUFTokenizer.from_fields(self._tok_fields)
            if self._tokenizer.vocab_size != self.config.vocab_size:
                raise GGUFModelError(
                    f"the tokenizer has {self._tokenizer.vocab_size} tokens, the model {self.config.vocab_size}"
                )
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    # --------------------------------------------------------------------------- pieces
    def _part(self, name: str):
        return _NO_TIMING if self._profile is None else self._profile.part(name)

    def _linear(self, x: torch.Tensor, name: str, W) -> torch.Tensor:
        if self._profile is None:
            return self._matmul(x, W)
        with self._profile.part("linear", name):
            return self._matmul(x, W)

    def _matmul(self, x: torch.Tensor, W) -> torch.Tensor:
        """``x [N, K] @ W^T``: :func:`quantgemm_kernels.linear`, whose CPU path for a quantized weight
        is two compiled calls, quantize the activations to the kernel's format, then the GEMM.

        On the CPU the model makes those two calls itself, with the kernel that ``linear`` picks
        (``pick_kernel``, looked up once per format and N) and the same arguments, so the bytes and
        the result are ``linear``'s (tests/test_model.py checks it bit for bit). What it leaves out is
        ``linear``'s per-call checking, which costs about as much as the GEMM at one token: the
        operands' types and shapes (the model made them), and ``quantize``'s scan of the activations
        for NaN and Inf, whose place :meth:`forward` takes by checking the output layer's input once
        per pass, where a non-finite value anywhere in the residual stream ends up.
        """
        if self._direct and isinstance(W, api.QTensor) and x.device.type == "cpu":
            N = x.shape[0]
            key = (W.fmt, N, W.data.shape[0], x.shape[1])
            k = self._kernels.get(key)
            if k is None:
                k = api.pick_kernel(x.device, W.fmt, N, W.data.shape[0], x.shape[1])
                k = self._kernels[key] = k if (k.device == "cpu" and k.afmt != "f32") else False
            if k and x.dtype == torch.float32 and x.dim() == 2 and x.is_contiguous():
                ops = api._ops()
                return ops.gemm(ops.quantize(x, k.afmt, api._SUM_MODE[k.q8_1_sum]), W.data, k.name)
        return api.linear(x, W)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Rows of the token embedding ``[T, dim]``: only the selected rows are dequantized."""
        W = self.tok_embd
        if self._embd_rows is not None:
            return self._embd_rows.index_select(0, tokens)
        if isinstance(W, api.QTensor):
            return api.dequantize(W.data.index_select(0, tokens), W.fmt)
        return W.index_select(0, tokens)

    def check_tokens(self, tokens) -> torch.Tensor:
        """``tokens`` as a 1-D int64 tensor on the model's device; clear errors for bad ids."""
        if not isinstance(tokens, torch.Tensor):
            if isinstance(tokens, str):
                raise TypeError(
                    "model(tokens) takes token ids; encode text with model.tokenizer.encode "
                    "or call model.generate(text, ...)"
                )
            tokens = torch.as_tensor(list(tokens), dtype=torch.int64)
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must be integer token ids, got dtype {tokens.dtype}")
        if tokens.dim() != 1:
            raise ValueError(f"tokens must be 1-D (one sequence), got shape {tuple(tokens.shape)}")
        if tokens.numel() == 0:
            raise ValueError("empty prompt: at least one token is needed")
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= self.vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"token id {bad} is out of range: the vocabulary has {self.vocab_size} "
                f"tokens (ids 0..{self.vocab_size - 1})"
            )
        return tokens.to(device=self.device, dtype=torch.int64)

    def _rope_angles(self, start: int, T: int) -> torch.Tensor:
        """``cos + i sin`` of positions ``start .. start+T-1`` from a table grown as needed."""
        if start + T > self._cis.shape[0]:
            c = self.config
            n = min(max(start + T, 2 * self._cis.shape[0], 256), c.context_length)
            cos, sin = rope_tables(torch.arange(n), c.n_rot, c.rope_base, c.rope_freq_scale)
            self._cis = torch.complex(cos, sin).to(self.device)
        return self._cis[start : start + T]

    def new_cache(self, capacity: int) -> KVCache:
        """An empty KV cache for up to ``capacity`` positions."""
        return KVCache(self.config, capacity, self.device)

    def static_decoder(self, capacity: int | None = None) -> StaticDecoder:
        """The model's :class:`StaticDecoder`, holding at least ``capacity`` positions (default the
        context length). One is kept with its KV cache and captured graphs, and replaced by a larger
        one when more positions are asked for."""
        cap = self.config.context_length if capacity is None else capacity
        if self._decoder is None or self._decoder.capacity < cap:
            self._decoder = None  # its cache and graphs go before the new ones are allocated
            self._decoder = StaticDecoder(self, cap)
        return self._decoder

    @property
    def fused_decode(self) -> bool:
        """Whether decode steps of one token run each layer as one ``torch.ops.quantgemm.decode_layer``
        call (default True; where some layer cannot, the torch step runs anyway). False: the torch
        operations of :meth:`forward`, one by one. Changing it drops the CUDA graphs captured so far."""
        return self._fused_decode

    @fused_decode.setter
    def fused_decode(self, value: bool) -> None:
        value = bool(value)
        if value != self._fused_decode and self._decoder is not None:
            self._decoder._graphs.clear()  # they replay the other path
        self._fused_decode = value

    #: The linear layers of a layer in the order torch.ops.quantgemm.decode_layer takes them.
    _DECODE_ORDER = (
        (("attn_qkv",), ("attn_q", "attn_k", "attn_v")),
        (("attn_output",),),
        (("ffn_gate_up",), ("ffn_gate", "ffn_up")),
        (("ffn_down",),),
    )

    def _decode_plans(self):
        """Per layer, the arguments of ``torch.ops.quantgemm.decode_layer`` that do not change from
        token to token (weights, kernels, Q8_1 sum modes, how many Q/K/V and gate/up parts), or None
        where some layer cannot run through it: a float32 linear layer, or a kernel that takes
        float32 activations on the CPU, one that does not quantize them itself on CUDA. Made once;
        ``fused_decode = False`` turns the fused step off."""
        if self._plans is None:
            plans = []
            for L in self.layers:
                ws, counts = [], []
                for alternatives in self._DECODE_ORDER:
                    names = next((a for a in alternatives if all(n in L.linears for n in a)), None)
                    if names is None:
                        break
                    ws += [L.linears[n] for n in names]
                    counts.append(len(names))
                kernels = []
                for W in ws:
                    if not isinstance(W, api.QTensor):
                        break
                    k = api.pick_kernel(self.device, W.fmt, 1, W.data.shape[0], W.shape[1])
                    # the CPU quantizes the activations before the kernel; on CUDA the kernel does
                    ok = k.afmt != "f32" if self.device.type == "cpu" else k.fused_quant
                    if k.device != self.device.type or not ok:
                        break
                    kernels.append(k)
                if len(counts) != 4 or len(kernels) != len(ws):
                    plans = False
                    break
                plans.append(
                    (
                        [W.data for W in ws],
                        [k.name for k in kernels],
                        [api._SUM_MODE[k.q8_1_sum] for k in kernels],
                        counts[0],
                        counts[2],
                    )
                )
            self._plans = plans
        return self._plans or None

    def _decode_layer_args(self, i: int, x, k_cache, v_cache, cos, sin, pos) -> list:
        """``torch.ops.quantgemm.decode_layer``'s arguments for layer ``i`` (its plan must exist):
        ``x [1, dim]`` updated in place, that layer's ``k_cache, v_cache [Hkv, capacity, D]``, the
        RoPE tables ``cos, sin [positions, n_rot/2]`` and ``pos`` (int64 ``[1]``)."""
        L, (ws, names, modes, n_qkv, n_gu) = self.layers[i], self._decode_plans()[i]
        c = self.config
        return [
            x,
            L.attn_norm,
            L.ffn_norm,
            ws,
            names,
            modes,
            n_qkv,
            n_gu,
            k_cache,
            v_cache,
            cos,
            sin,
            pos,
            c.n_heads,
            c.rms_eps,
        ]

    def _static_step(self, dec: StaticDecoder, span: int) -> torch.Tensor:
        """:meth:`forward` of one token, ``dec.token`` at position ``dec.pos``, in operations whose
        shapes do not depend on the position: the position only indexes (RoPE's table, the cache's
        write) and masks (attention over ``span`` positions). Logits ``[1, vocab]``.

        With ``fused_decode`` each layer is one call of ``torch.ops.quantgemm.decode_layer``, which
        attends over positions ``0 .. pos`` whatever the span: the same kernels and bytes for the
        linear layers as ``linear``, the rest in C++ (csrc/model/decode_layer.cpp: ggml's
        arithmetic, without a few hundred torch operator calls per token) or in the CUDA kernels of
        csrc/model/decode_layer.cu (about ten launches per layer instead of twenty)."""
        c = self.config
        H, Hkv, D = c.n_heads, c.n_kv_heads, c.head_dim
        pos = dec.pos
        x = self.embed(dec.token)
        plans = self._decode_plans() if self.fused_decode else None
        if plans is not None:
            decode_layer = api._ops().decode_layer
            for i in range(len(self.layers)):
                decode_layer(*self._decode_layer_args(i, x, dec.cache.k[i], dec.cache.v[i], dec.cos, dec.sin, pos))
            return self._matmul(rms_norm(x, self.output_norm, c.rms_eps), self.output)
        cis = dec.cis.index_select(0, pos)
        # Positions after pos get -inf before the softmax, so exactly 0 after it; the cache holds
        # finite values there (zeros, or an earlier sequence's), so they add nothing to p @ v.
        mask = torch.zeros(span, device=x.device).masked_fill_(dec.kpos[:span] > pos, float("-inf"))
        for i, L in enumerate(self.layers):
            w = L.linears
            h = rms_norm(x, L.attn_norm, c.rms_eps)
            if "attn_qkv" in w:
                qkv = self._matmul(h, w["attn_qkv"])
            else:
                qkv = torch.cat([self._matmul(h, w[n]) for n in ("attn_q", "attn_k", "attn_v")], dim=-1)
            qk = rope_cis(qkv[:, : (H + Hkv) * D].reshape(1, H + Hkv, D), cis)[0]  # [H + Hkv, D]
            kc, vc = dec.cache.k[i], dec.cache.v[i]  # [Hkv, capacity, D]
            kc.index_copy_(1, pos, qk[H:, None])
            vc.index_copy_(1, pos, qkv[:, (H + Hkv) * D :].reshape(Hkv, 1, D))
            scores = torch.bmm(qk[:H].reshape(Hkv, H // Hkv, D), kc[:, :span].transpose(1, 2))
            scores.mul_(1.0 / math.sqrt(D)).add_(mask)
            a = torch.bmm(torch.softmax(scores, dim=-1), vc[:, :span]).reshape(1, H * D)
            x += self._matmul(a, w["attn_output"])
            h = rms_norm(x, L.ffn_norm, c.rms_eps)
            if "ffn_gate_up" in w:
                g, u = self._matmul(h, w["ffn_gate_up"]).split(c.ffn_dim, dim=-1)
            else:
                g, u = self._matmul(h, w["ffn_gate"]), self._matmul(h, w["ffn_up"])
            x += self._matmul(torch.nn.functional.silu(g).mul_(u), w["ffn_down"])
        return self._matmul(rms_norm(x, self.output_norm, c.rms_eps), self.output)

    # --------------------------------------------------------------------------- forward
    @torch.inference_mode()
    def forward(self, tokens, cache: KVCache | None = None, *, last_only: bool = False) -> torch.Tensor:
        """Logits ``[T, vocab]`` (``[1, vocab]`` with ``last_only``) of ``tokens`` placed after the
        ``cache.pos`` positions already in ``cache``, whose keys and values are appended. Without a
        cache, the tokens are a sequence of their own. Runs under ``torch.inference_mode`` (no
        autograd bookkeeping per operator call): the logits are inference tensors, which take no
        in-place changes outside that mode (``.clone()`` them first)."""
        tokens = self.check_tokens(tokens)
        c = self.config
        T = tokens.numel()
        if cache is None:
            cache = self.new_cache(T)
        start = cache.pos
        if start + T > cache.capacity:
            raise ValueError(f"the KV cache holds {cache.capacity} positions: {start} used, {T} more do not fit")
        if start + T > c.context_length:
            raise ValueError(f"{start + T} positions exceed the model's context length {c.context_length}")
        t_wall = time.perf_counter()
        H, Hkv, D = c.n_heads, c.n_kv_heads, c.head_dim
        with self._part("embedding"):
            x = self.embed(tokens)
        with self._part("rope"):
            cis = self._rope_angles(start, T)
        for i, L in enumerate(self.layers):
            w = L.linears
            kc, vc = cache.k[i], cache.v[i]  # [Hkv, capacity, D]
            with self._part("norm"):
                h = rms_norm(x, L.attn_norm, c.rms_eps)
            if "attn_qkv" in w:
                qkv = self._linear(h, "attn_qkv", w["attn_qkv"])
                with self._part("rope"):  # Q's and K's heads side by side: one rotation for both
                    qk = rope_cis(qkv[:, : (H + Hkv) * D].reshape(T, H + Hkv, D), cis)
                q, k, v = qk[:, :H], qk[:, H:], qkv[:, (H + Hkv) * D :].reshape(T, Hkv, D)
            else:
                q, k, v = (self._linear(h, n, w[n]) for n in ("attn_q", "attn_k", "attn_v"))
                with self._part("rope"):
                    q, k = rope_cis(q.reshape(T, H, D), cis), rope_cis(k.reshape(T, Hkv, D), cis)
                v = v.reshape(T, Hkv, D)
            with self._part("attention"):
                kc.narrow(1, start, T).copy_(k.transpose(0, 1))
                vc.narrow(1, start, T).copy_(v.transpose(0, 1))
                a = cached_attention(q, kc.narrow(1, 0, start + T), vc.narrow(1, 0, start + T), start)
            x += self._linear(a, "attn_output", w["attn_output"])
            with self._part("norm"):
                h = rms_norm(x, L.ffn_norm, c.rms_eps)
            if "ffn_gate_up" in w:
                g, u = self._linear(h, "ffn_gate_up", w["ffn_gate_up"]).split(c.ffn_dim, dim=-1)
            else:
                g, u = self._linear(h, "ffn_gate", w["ffn_gate"]), self._linear(h, "ffn_up", w["ffn_up"])
            with self._part("swiglu"):
                m = torch.nn.functional.silu(g).mul_(u)
            x += self._linear(m, "ffn_down", w["ffn_down"])
        cache.pos = start + T
        if last_only:
            x = x[-1:]
        with self._part("norm"):
            x = rms_norm(x, self.output_norm, c.rms_eps)
        if self._direct and not bool(torch.isfinite(x).all()):
            # every branch adds into the residual stream, so a NaN or Inf anywhere arrives here
            raise ValueError(
                "the last hidden state holds NaN or Inf: some activation was not finite (a weight or "
                "scale of the file is, or an activation overflowed float32)"
            )
        logits = self._linear(x, "output", self.output)
        if self._profile is not None:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self._profile.wall += time.perf_counter() - t_wall
            self._profile.tokens += T
        return logits

    def __call__(self, tokens) -> torch.Tensor:
        """Float32 logits ``[len(tokens), vocab]`` of a 1-D LongTensor of token ids (a fresh sequence)."""
        return self.forward(tokens)

    @contextlib.contextmanager
    def profile(self):
        """``with model.profile() as tb: ...``: a :class:`TimeBreakdown` of the forward passes inside."""
        tb = TimeBreakdown(self.device)
        old, self._profile = self._profile, tb
        try:
            yield tb
        finally:
            self._profile = old

    # --------------------------------------------------------------------------- generation
    def generate(
        self,
        prompt,
        max_new_tokens: int = 64,
        greedy: bool = True,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
        stop_at_eos: bool = True,
        on_token=None,
        cuda_graph: bool | None = None,
    ):
        """Continue ``prompt``: text in, text out (the continuation only); token ids in (a 1-D
        LongTensor or a list), the new ids out (a LongTensor).

        The prompt runs once through the model (prefill, filling the KV cache), then each new token
        is one decode step of a single token. ``greedy`` takes the most likely token; otherwise
        tokens are sampled at ``temperature`` from the ``top_k`` most likely (all if None), with a
        generator seeded by ``seed``. Generation stops after ``max_new_tokens`` or, with
        ``stop_at_eos``, at the file's EOS/end-of-turn token (which is not returned).
        ``on_token(i, token_id)`` is called after each new token. Timings go to ``self.last_stats``.

        The decode steps run through the model's :class:`StaticDecoder`: on the CPU eagerly, each
        attending over exactly the positions filled (:meth:`forward`'s arithmetic, bit for bit); on
        CUDA each one replay of a captured CUDA graph (``cuda_graph``, default True there; captured
        after the prefill, outside the timed decode, once per span), or with ``cuda_graph=False``
        launched from Python as on the CPU. While the model is profiled, and where the sequence
        would pass the context length, the steps run through :meth:`forward` instead.
        """
        text_in = isinstance(prompt, str)
        if text_in:
            if not prompt:
                raise ValueError("empty prompt: give some text (or token ids)")
            ids = torch.tensor(self.tokenizer.encode(prompt), dtype=torch.int64)
            if ids.numel() == 0:
                raise ValueError("empty prompt: the text encodes to no tokens")
        else:
            ids = prompt
        ids = self.check_tokens(ids)
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if not greedy and temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
        n_prompt = ids.numel()
        stop = set()
        if stop_at_eos:
            try:
                stop = set(self.tokenizer.stop_ids)
            except GGUFModelError:
                eos = self._tok_fields.get("tokenizer.ggml.eos_token_id")
                stop = {eos} if eos is not None else set()
        gen = None
        if not greedy:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(0 if seed is None else seed)

        def pick(logits_row):
            if greedy:
                return int(torch.argmax(logits_row))
            z = logits_row / temperature
            if top_k is not None:
                kth = torch.topk(z, min(top_k, z.numel())).values[-1]
                z = z.masked_fill(z < kth, float("-inf"))
            return int(torch.multinomial(torch.softmax(z, -1), 1, generator=gen))

        new: list[int] = []
        sync = (lambda: torch.cuda.synchronize(self.device)) if self.device.type == "cuda" else (lambda: None)
        on_cuda = self.device.type == "cuda"
        if cuda_graph and not on_cuda:
            raise ValueError("cuda_graph=True needs the model on a CUDA device")
        positions = n_prompt + max_new_tokens - 1  # the last new token is not fed back
        dec = graph = None
        if self._profile is None and max_new_tokens > 1 and positions <= self.config.context_length:
            # on the CPU a cache of what this call needs (a power of two), on CUDA of the whole context
            dec = self.static_decoder(None if on_cuda else min(_span(positions), self.config.context_length))
            graph = on_cuda and cuda_graph is not False and dec.graph_safe()
        prefill_s = decode_s = 0.0
        if max_new_tokens > 0:
            with torch.inference_mode():
                sync()
                t0 = time.perf_counter()
                if dec is None:
                    cache = self.new_cache(n_prompt + max_new_tokens)
                    logits = self.forward(ids, cache, last_only=True)
                else:
                    logits = dec.prefill(ids)
                tok = pick(logits[-1])
                prefill_s = time.perf_counter() - t0
                if dec is not None:
                    dec.token.fill_(tok)
                    if graph:
                        span = dec.span_for(positions)
                        dec.prepare(span)  # the first time for this span: captured here, not timed
                    sync()
                t1 = time.perf_counter()
                token_in = torch.empty(1, dtype=torch.int64, device=self.device)
                while True:
                    if tok in stop:
                        break
                    new.append(tok)
                    if on_token is not None:
                        with torch.inference_mode(False):  # the caller's code, in the caller's mode
                            on_token(len(new), tok)
                    if len(new) == max_new_tokens:
                        break
                    if dec is None:
                        token_in.fill_(tok)
                        logits = self.forward(token_in, cache, last_only=True)
                        tok = pick(logits[-1])
                        continue
                    # Without a graph the step attends over exactly the positions filled so far
                    # (the new token's included): forward()'s arithmetic, bit for bit.
                    logits = dec.step(span if graph else n_prompt + len(new), graph=graph)
                    if self._direct and not bool(torch.isfinite(logits).all()):  # forward()'s check
                        raise ValueError("the logits hold NaN or Inf: some activation was not finite")
                    if greedy:
                        tok = int(dec.token)  # the step left its argmax there
                    else:
                        tok = pick(logits[-1])
                        dec.token.fill_(tok)
                sync()
                decode_s = time.perf_counter() - t1
        self.last_stats = GenerationStats(n_prompt, len(new), prefill_s, decode_s)
        if text_in:
            return self.tokenizer.decode(new, skip_special=True)
        return torch.tensor(new, dtype=torch.int64)

    def chat(self, messages, max_new_tokens: int = 64, **kw) -> str:
        """Reply to ``messages`` (a str: one user message) through the file's chat template."""
        return self.generate(self.tokenizer.apply_chat_template(messages), max_new_tokens, **kw)

    def __repr__(self):
        c = self.config
        kinds = sorted(
            {w.fmt if isinstance(w, api.QTensor) else "f32" for L in self.layers for w in L.linears.values()}
        )
        return (
            f"LlamaModel({c.name or self.path!r}: {c.n_layers} layers, dim {c.dim}, ffn {c.ffn_dim}, "
            f"heads {c.n_heads}/{c.n_kv_heads} kv, vocab {c.vocab_size}, weights {'/'.join(kinds)}, "
            f"{'tied' if self.tied else 'separate'} output, on {self.device})"
        )


def load_gguf(path, device="cpu", *, fuse: bool = True) -> LlamaModel:
    """Load a Llama GGUF file onto ``device`` ("cpu" or "cuda").

    Quantized tensors keep the file's bytes as QTensors; F32/F16 tensors become float32 torch
    tensors. ``fuse`` stacks Q/K/V and gate/up weights of the same format into one GEMM each (the
    same numbers, fewer calls). Raises :class:`GGUFModelError` (a ValueError) for a file of another
    architecture, a tensor type without kernels, or missing tensors and fields.
    """
    return LlamaModel(read_llama(path), device, fuse=fuse)
