"""Perplexity as llama.cpp's tool defines it (quantgemm_kernels.model.perplexity), and the Q4_0 and
Q8_0 recipes of model.requantize.

* Known cases: uniform logits give a perplexity of exactly the vocabulary size; a model that puts
  all its mass on the right token gives 1; the chunking (n_ctx tokens per chunk, the second half
  scored, the tail dropped, BOS replacing each chunk's first token) seen by a recording model.
* Bad input: too few tokens, ctx too small, text for a model without a tokenizer.
* The shipped text is there and long enough for chapter 8's chunks.
* The Q4_0 / Q8_0 recipes' types on a small tensor list, and (with llama-cpp-python and the model)
  byte for byte against llama.cpp's own quantizer.
"""

import math

import numpy as np
import pytest
import torch

from quantgemm_kernels.model import perplexity as P
from quantgemm_kernels.model import requantize as RQ


class Recorder:
    """A model over ``vocab`` tokens that records the chunks it sees; ``sure`` puts every logit's
    mass on the next token of ``ids`` (known in advance), else all logits are equal."""

    def __init__(self, vocab, ids=None, sure=False):
        self.vocab, self.ids, self.sure, self.seen = vocab, ids, sure, []

    def __call__(self, t):
        self.seen.append(t.tolist())
        out = torch.zeros(len(t), self.vocab)
        if self.sure:
            start = len(self.seen) - 1
            n = len(t)
            for j in range(n - 1):
                out[j, self.ids[start * n + j + 1]] = 1e4
        return out


def test_uniform_logits_give_the_vocabulary_size():
    ids = list(np.random.default_rng(0).integers(0, 50, 300))
    r = P.perplexity(Recorder(50), ids, ctx=64)
    assert r.ppl == pytest.approx(50, rel=1e-12)
    assert r.nll == pytest.approx(math.log(50), rel=1e-12)


def test_a_sure_model_gives_one():
    ids = [int(i) for i in np.random.default_rng(1).integers(0, 20, 256)]
    r = P.perplexity(Recorder(20, ids, sure=True), ids, ctx=32)
    assert r.ppl == pytest.approx(1.0, abs=1e-9)


def test_chunking_as_llama_cpp():
    ids = list(range(10, 10 + 100))  # 100 tokens, ctx 16: 6 chunks, the last 4 tokens dropped
    m = Recorder(200)
    r = P.perplexity(m, ids, ctx=16, keep_logits=True)
    assert r.n_chunks == 6 and len(m.seen) == 6
    assert m.seen[1] == ids[16:32]  # each chunk a fresh sequence of ctx tokens
    assert r.n_scored == 6 * (16 - 8 - 1)  # positions 8..14 predict tokens 9..15
    assert r.targets.tolist()[:7] == ids[9:16]
    assert r.logits.shape == (r.n_scored, 200)
    assert len(r.chunk_ppl) == 6
    m2 = Recorder(200)
    r2 = P.perplexity(m2, ids, ctx=16, n_chunks=2, bos_id=1)
    assert r2.n_chunks == 2 and [c[0] for c in m2.seen] == [1, 1]  # BOS replaces each chunk's first token
    assert m2.seen[1][1:] == ids[17:32]


def test_odd_ctx():
    r = P.perplexity(Recorder(7), list(range(7)) * 10, ctx=9)
    assert r.n_scored == (70 // 9) * (9 - 4 - 1)


def test_bad_input():
    with pytest.raises(ValueError, match="at least 64 tokens"):
        P.perplexity(Recorder(10), list(range(10)) * 6, ctx=32)
    for ctx in (1, 2, 3, 0, -4, 2.5, True):
        with pytest.raises(ValueError, match="ctx must be an integer >= 4"):
            P.perplexity(Recorder(10), list(range(10)) * 10, ctx=ctx)
    with pytest.raises(ValueError, match="n_chunks"):
        P.perplexity(Recorder(10), list(range(10)) * 10, ctx=8, n_chunks=0)
    with pytest.raises(TypeError, match="no tokenizer"):
        P.perplexity(Recorder(10), "some text", ctx=8)
    with pytest.raises(ValueError, match="cannot be compared"):
        P.agreement(np.zeros((2, 3)), np.zeros((3, 3)))


def test_agreement():
    ref = np.array([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]])
    top1, e = P.agreement(ref * 1.1, ref)
    assert top1 == 1.0 and e == pytest.approx(0.01)
    top1, _ = P.agreement(ref[::-1], ref)
    assert top1 == 0.0


def test_shipped_text():
    t = P.text()
    assert t.startswith("Four score and seven years ago")
    assert t.rstrip().endswith("with all nations.")
    assert 900 < len(t.split()) < 1500


def test_legacy_recipes_types():
    tensors = [
        ("token_embd.weight", (1000, 576)),
        ("blk.0.attn_q.weight", (576, 576)),
        ("blk.0.ffn_down.weight", (576, 1536)),
        ("blk.0.attn_norm.weight", (576,)),
        ("blk.0.odd.weight", (8, 40)),
    ]
    t4 = RQ.legacy_types(tensors, "Q4_0")
    assert t4 == {
        "token_embd.weight": "Q8_0",  # tied output, 576 not a multiple of 256: Q6_K falls back
        "blk.0.attn_q.weight": "Q4_0",
        "blk.0.ffn_down.weight": "Q4_0",
        "blk.0.attn_norm.weight": None,
        "blk.0.odd.weight": "F16",
    }
    assert RQ.legacy_types([("output.weight", (10, 512)), ("token_embd.weight", (10, 512))], "Q4_0") == {
        "output.weight": "Q6_K",
        "token_embd.weight": "Q4_0",
    }
    assert set(RQ.legacy_types(tensors[:3], "Q8_0").values()) == {"Q8_0"}
    with pytest.raises(ValueError, match="ftype"):
        RQ.legacy_types(tensors, "Q5_1")


@pytest.mark.parametrize("recipe", ["Q4_0", "Q8_0"])
def test_legacy_recipes_match_llama_cpp(recipe, tmp_path):
    pytest.importorskip("llama_cpp")
    gguf = pytest.importorskip("gguf")
    from quantgemm_kernels.model import smollm2_path

    try:
        src = smollm2_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    RQ.requantize_gguf(src, tmp_path / "ours.gguf", recipe=recipe)
    RQ.quantize_with_llama_cpp(src, tmp_path / "theirs.gguf", recipe, threads=2)
    ours = {t.name: t for t in gguf.GGUFReader(tmp_path / "ours.gguf").tensors}
    theirs = {t.name: t for t in gguf.GGUFReader(tmp_path / "theirs.gguf").tensors}
    assert ours.keys() == theirs.keys()
    for n, t in theirs.items():
        assert ours[n].tensor_type == t.tensor_type, n
        assert np.array_equal(np.asarray(ours[n].data), np.asarray(t.data)), n
