"""Perplexity as llama.cpp's ``llama-perplexity`` tool defines it, for the course's model, for
llama.cpp itself (through llama-cpp-python) and for the float model of a file.

llama.cpp's ``perplexity()`` (``tools/perplexity/perplexity.cpp``, without ``--ppl-stride``):

* the text is tokenized once, with BOS first where the vocabulary asks for it (SmolLM2's does not);
  at least ``2 * n_ctx`` tokens are required;
* the tokens are cut into ``len(tokens) // n_ctx`` chunks of ``n_ctx`` tokens (a shorter tail is
  dropped), each evaluated from scratch (the KV cache cleared), its first token replaced by BOS
  where the vocabulary adds BOS;
* only the second half of each chunk is scored: the logits at positions ``j = n_ctx/2 ..
  n_ctx - 2`` predict token ``j + 1``, so ``n_ctx - n_ctx/2 - 1`` tokens per chunk (the first
  half gives every scored token at least ``n_ctx/2`` tokens of context);
* perplexity = ``exp(mean negative log-likelihood)`` over all scored tokens.

:func:`perplexity` follows those rules. Where it differs: the log-softmax is taken in float64 (the
tool sums ``expf`` in float32 per row and accumulates the NLL in double), chunks run one at a
time (the tool packs several into a batch when ``n_batch > n_ctx``; each is still its own
sequence), and ``n_chunks`` caps the number of chunks as the tool's ``--chunks`` does.

:func:`text` is the text chapter 8 measures on, shipped in ``data/``: Abraham Lincoln's Gettysburg
Address (1863, the Bliss copy) and his Second Inaugural Address (1865), public domain everywhere
(works of the 1860s, and speeches of a US President in office); the Bliss copy's dashes are written
``--``, and the file has no header.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

DATA = Path(__file__).resolve().parent / "data"
TEXT_FILE = "lincoln_gettysburg_second_inaugural.txt"


def text() -> str:
    """Lincoln's Gettysburg Address and Second Inaugural Address (public domain), about 1000 words."""
    return (DATA / TEXT_FILE).read_text(encoding="utf-8")


@dataclass
class Perplexity:
    """What :func:`perplexity` measured."""

    ppl: float  #: exp of the mean negative log-likelihood
    nll: float  #: mean negative log-likelihood (nats per token)
    n_scored: int  #: tokens scored (``n_chunks * (ctx - ctx // 2 - 1)``)
    n_chunks: int
    ctx: int
    chunk_ppl: list[float] = field(default_factory=list)  #: perplexity of each chunk alone
    logits: np.ndarray | None = None  #: float32 ``[n_scored, vocab]`` with ``keep_logits``
    targets: np.ndarray | None = None  #: the scored tokens ``[n_scored]``

    def __repr__(self):
        return f"Perplexity(ppl={self.ppl:.4f}, {self.n_scored} tokens in {self.n_chunks} chunks of {self.ctx})"


def _is_llama_cpp(model) -> bool:
    return all(hasattr(model, a) for a in ("eval", "reset", "scores", "n_tokens"))


def _is_transformers(model) -> bool:
    return hasattr(model, "config") and hasattr(model, "generation_config")


def chunk_logits(model, ids: list[int]) -> np.ndarray:
    """Float32 logits ``[len(ids), vocab]`` of ``ids`` as a fresh sequence, for the course's model
    (``model(tensor)``), a ``llama_cpp.Llama`` built with ``logits_all=True`` and ``n_ctx >=
    len(ids)``, a transformers causal LM, or any callable taking a 1-D LongTensor of ids."""
    if _is_llama_cpp(model):
        if model.n_ctx() < len(ids):
            raise ValueError(f"the llama_cpp.Llama has n_ctx={model.n_ctx()}, a chunk needs {len(ids)}")
        model.reset()  # llama_memory_clear: each chunk from scratch
        model.eval(list(ids))
        out = np.array(model.scores[: len(ids)], np.float32)
        if not np.any(out[0]):
            raise ValueError("llama.cpp returned logits for the last position only: build it with logits_all=True")
        return out
    t = torch.tensor(list(ids), dtype=torch.int64)
    with torch.no_grad():
        if _is_transformers(model):
            out = model(input_ids=t[None]).logits[0]
        else:
            out = model(t)
    return out.float().cpu().numpy()


def _ids(model, text_or_ids, add_bos: bool | None):
    """Token ids and the BOS id (None where the vocabulary adds no BOS)."""
    if isinstance(text_or_ids, str):
        if _is_llama_cpp(model):
            use = model._model.add_bos_token() if add_bos is None else add_bos  # the vocabulary's add_bos
            return model.tokenize(text_or_ids.encode(), add_bos=use, special=False), (
                model.token_bos() if use else None
            )
        tok = getattr(model, "tokenizer", None)
        if tok is None or not hasattr(tok, "encode"):
            raise TypeError("this model has no tokenizer: pass token ids instead of text")
        use = tok.add_bos if add_bos is None else add_bos
        return tok.encode(text_or_ids, add_bos=use), (tok.bos_id if use else None)
    ids = [int(i) for i in (text_or_ids.tolist() if hasattr(text_or_ids, "tolist") else text_or_ids)]
    return ids, None


def log_softmax_at(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``log p(target)`` per row of ``logits`` ``[n, vocab]``, in float64."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1))
    return z[np.arange(len(targets)), targets] - lse


def perplexity(
    model,
    text_or_ids,
    ctx: int = 256,
    *,
    n_chunks: int | None = None,
    add_bos: bool | None = None,
    bos_id: int | None = None,
    keep_logits: bool = False,
) -> Perplexity:
    """llama.cpp's perplexity of ``model`` on ``text_or_ids`` with chunks of ``ctx`` tokens (its
    ``-c``); see the module's docstring for the definition.

    ``model``: the course's :class:`~quantgemm_kernels.model.LlamaModel`, a ``llama_cpp.Llama``
    (``logits_all=True``, ``n_ctx >= ctx``), a transformers causal LM (token ids only) or a callable
    ids -> logits. ``text_or_ids``: a string, tokenized once by the model's tokenizer (BOS first if
    ``add_bos``; default: what the file says), or token ids (then ``bos_id``, if given, replaces
    each chunk's first token, as llama.cpp does with BOS). ``n_chunks``: at most this many chunks
    (llama.cpp's ``--chunks``). ``keep_logits``: return the scored positions' logits and targets.
    """
    if not isinstance(ctx, (int, np.integer)) or isinstance(ctx, bool) or ctx < 4:
        raise ValueError(f"ctx must be an integer >= 4 (half of each chunk is context, half is scored), got {ctx!r}")
    ctx = int(ctx)
    if n_chunks is not None and n_chunks < 1:
        raise ValueError(f"n_chunks must be >= 1 or None, got {n_chunks}")
    ids, bos = _ids(model, text_or_ids, add_bos)
    if bos_id is not None:
        bos = bos_id
    if len(ids) < 2 * ctx:
        raise ValueError(
            f"perplexity with a context of {ctx} needs at least {2 * ctx} tokens (as llama.cpp's tool); "
            f"the text has {len(ids)}: use a longer text or a smaller ctx"
        )
    n = len(ids) // ctx
    if n_chunks is not None:
        n = min(n, n_chunks)
    first = ctx // 2
    nll_sum, count, chunk_ppl, kept, targets = 0.0, 0, [], [], []
    for i in range(n):
        chunk = list(ids[i * ctx : (i + 1) * ctx])
        if bos is not None:
            chunk[0] = bos
        logits = chunk_logits(model, chunk)
        if logits.shape[0] != ctx:
            raise ValueError(f"the model returned logits for {logits.shape[0]} positions, expected {ctx}")
        scored = logits[first : ctx - 1]
        tgt = np.asarray(ids[i * ctx + first + 1 : (i + 1) * ctx], np.int64)  # the original tokens
        lp = log_softmax_at(scored, tgt)
        nll_sum -= float(lp.sum())
        count += len(tgt)
        chunk_ppl.append(math.exp(-float(lp.mean())))
        if keep_logits:
            kept.append(np.asarray(scored, np.float32))
            targets.append(tgt)
    nll = nll_sum / count
    return Perplexity(
        ppl=math.exp(nll),
        nll=nll,
        n_scored=count,
        n_chunks=n,
        ctx=ctx,
        chunk_ppl=chunk_ppl,
        logits=np.concatenate(kept) if keep_logits else None,
        targets=np.concatenate(targets) if keep_logits else None,
    )


def float_model(path, device="cpu"):
    """The float model of the GGUF file at ``path``: the course's :class:`LlamaModel` with every
    linear weight dequantized to float32 once, so that no activation is quantized either (the
    same computation as transformers' float32 Llama of the file, ``model.check``)."""
    from .. import api
    from . import load_gguf

    m = load_gguf(path, device)

    def f32(W):
        return api.dequantize(W.data, W.fmt).reshape(W.shape).contiguous() if isinstance(W, api.QTensor) else W

    for layer in m.layers:
        for name in list(layer.linears):
            layer.linears[name] = f32(layer.linears[name])
    m.output = f32(m.output)
    if m.tied:
        m.tok_embd = m.output
    return m


def agreement(logits: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """(top-1 agreement, NMSE) of ``logits`` against ``reference``, both ``[n, vocab]``: the
    fraction of positions where both pick the same token, and ``sum((a - r)^2) / sum(r^2)``."""
    from ..reference import nmse

    a, r = np.asarray(logits, np.float64), np.asarray(reference, np.float64)
    if a.shape != r.shape:
        raise ValueError(f"logits of shape {a.shape} and {r.shape} cannot be compared")
    return float((a.argmax(-1) == r.argmax(-1)).mean()), nmse(a, r)
