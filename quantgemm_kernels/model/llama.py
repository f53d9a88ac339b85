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
    z = torch.view_as_complex(head.float().reshape(*x.shape[:-1], n_rot // 2, 2).contiguous())
    out = torch.view_as_real(z * cis[:, None, :]).flatten(-2)
    return out if n_rot == x.shape[-1] else torch.cat((out, x[..., n_rot:]), dim=-1)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
    """Causal grouped-query attention of ``q [T, H, D]`` (positions ``start .. start+T-1``) over the
    cached ``k, v [S, Hkv, D]`` (positions ``0 .. S-1``, ``S = start + T``); returns ``[T, H*D]``.

    Query head ``h`` reads KV head ``h // (H / Hkv)``, as ggml's broadcasting mul_mat does.
    """
    T, H, D = q.shape
    S, Hkv, _ = k.shape
    G = H // Hkv
    qg = q.reshape(T, Hkv, G, D).permute(1, 2, 0, 3)  # [Hkv, G, T, D]
    kt = k.permute(1, 2, 0)[:, None]  # [Hkv, 1, D, S]
    scores = torch.matmul(qg, kt) * (1.0 / math.sqrt(D))  # [Hkv, G, T, S]
    if T > 1:
        qpos = torch.arange(start, start + T, device=q.device)[:, None]
        kpos = torch.arange(S, device=q.device)[None, :]
        scores = scores.masked_fill(kpos > qpos, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    out = torch.matmul(p, v.permute(1, 0, 2)[:, None])  # [Hkv, G, T, D]
    return out.permute(2, 0, 1, 3).reshape(T, H * D)


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
    """Keys and values of every layer for up to ``capacity`` positions: ``k, v [layers, capacity,
    Hkv, D]`` float32 on the model's device; ``pos`` positions are filled."""

    def __init__(self, config: LlamaConfig, capacity: int, device):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        shape = (config.n_layers, capacity, config.n_kv_heads, config.head_dim)
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
            return api.linear(x, W)
        with self._profile.part("linear", name):
            return api.linear(x, W)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Rows of the token embedding ``[T, dim]``: only the selected rows are dequantized."""
        W = self.tok_embd
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

    # --------------------------------------------------------------------------- forward
    def forward(self, tokens, cache: KVCache | None = None, *, last_only: bool = False) -> torch.Tensor:
        """Logits ``[T, vocab]`` (``[1, vocab]`` with ``last_only``) of ``tokens`` placed after the
        ``cache.pos`` positions already in ``cache``, whose keys and values are appended. Without a
        cache, the tokens are a sequence of their own."""
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
            with self._part("norm"):
                h = rms_norm(x, L.attn_norm, c.rms_eps)
            if "attn_qkv" in w:
                qkv = self._linear(h, "attn_qkv", w["attn_qkv"])
                q, k, v = qkv.split((H * D, Hkv * D, Hkv * D), dim=-1)
            else:
                q, k, v = (self._linear(h, n, w[n]) for n in ("attn_q", "attn_k", "attn_v"))
            with self._part("rope"):
                q = rope_cis(q.reshape(T, H, D), cis)
                k = rope_cis(k.reshape(T, Hkv, D), cis)
            with self._part("attention"):
                cache.k[i, start : start + T] = k
                cache.v[i, start : start + T] = v.reshape(T, Hkv, D)
                a = attention(q, cache.k[i, : start + T], cache.v[i, : start + T], start)
            x = x + self._linear(a, "attn_output", w["attn_output"])
            with self._part("norm"):
                h = rms_norm(x, L.ffn_norm, c.rms_eps)
            if "ffn_gate_up" in w:
                g, u = self._linear(h, "ffn_gate_up", w["ffn_gate_up"]).split(c.ffn_dim, dim=-1)
            else:
                g, u = self._linear(h, "ffn_gate", w["ffn_gate"]), self._linear(h, "ffn_up", w["ffn_up"])
            with self._part("swiglu"):
                m = torch.nn.functional.silu(g) * u
            x = x + self._linear(m, "ffn_down", w["ffn_down"])
        cache.pos = start + T
        if last_only:
            x = x[-1:]
        with self._part("norm"):
            x = rms_norm(x, self.output_norm, c.rms_eps)
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
    ):
        """Continue ``prompt``: text in, text out (the continuation only); token ids in (a 1-D
        LongTensor or a list), the new ids out (a LongTensor).

        The prompt runs once through the model (prefill, filling the KV cache), then each new token
        is one decode step of a single token. ``greedy`` takes the most likely token; otherwise
        tokens are sampled at ``temperature`` from the ``top_k`` most likely (all if None), with a
        generator seeded by ``seed``. Generation stops after ``max_new_tokens`` or, with
        ``stop_at_eos``, at the file's EOS/end-of-turn token (which is not returned).
        ``on_token(i, token_id)`` is called after each new token. Timings go to ``self.last_stats``.
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
        prefill_s = decode_s = 0.0
        if max_new_tokens > 0:
            cache = self.new_cache(n_prompt + max_new_tokens)
            sync()
            t0 = time.perf_counter()
            logits = self.forward(ids, cache, last_only=True)
            tok = pick(logits[-1])
            prefill_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            while True:
                if tok in stop:
                    break
                new.append(tok)
                if on_token is not None:
                    on_token(len(new), tok)
                if len(new) == max_new_tokens:
                    break
                logits = self.forward(torch.tensor([tok], device=self.device), cache, last_only=True)
                tok = pick(logits[-1])
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
