"""Our quantizers against llama.cpp's own code, byte for byte.

Three implementations of ours (numpy spec, C++, CUDA) and two of llama.cpp's (gguf's numpy
quantizers, ggml's C through ggml-python) must all give the same bytes.

The K-quants (Q4_K, Q6_K, Q8_K; super-blocks of 256) are checked against ggml's reference
quantizers, ``quantize_row_q4_K_ref``, ``quantize_row_q6_K_ref`` (through ``ggml_quantize_chunk``
with no importance matrix, as llama-quantize without --imatrix) and ``quantize_row_q8_K_ref``
(called by name: Q8_K is never stored), in the ggml that ``quantgemm_kernels.llamacpp`` loads:
ggml-python 0.0.45's ggml 0.15.3 by default, or the standalone ggml 0.25.3 build from the
llama-cpp-python 0.3.36 sdist where ``QUANTGEMM_GGML_LIB`` names it (both builds compile
ggml-quants.c without FMA contraction; the search loops of make_qkx2_quants and make_qx_quants
are float32 and order-sensitive, so the spec repeats their order exactly, and every byte is
compared). gguf-py has no K-quant quantizer; its dequantizers (``gguf.quants``) and ggml's
``dequantize_row_*`` check ours. ggml leaves a Q8_K block of zeros' ``bsums`` unwritten; we write
zeros and give ggml zeroed memory.
"""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import quantgemm_kernels as qk
from quantgemm_kernels import formats as F
from quantgemm_kernels.testing import DISTRIBUTIONS, make_values

from conftest import DEVICES
from ggml_ref import GGUF_DEQUANTIZERS, ggml_dequantize, ggml_quantize, gguf_dequantize, gguf_quantize


def edge_rows() -> np.ndarray:
    """Rows of 32-value blocks built to hit every corner of the rounding rules."""
    blocks = []
    blocks.append(np.zeros(32))  # all-zero block: d = 0
    blocks.append(np.arange(-16, 16) + 0.5)  # .5 ties under Q8_0 (amax 15.5)
    b = np.linspace(-1, 1, 32)
    b[0], b[1] = 127.0, -127.0  # d = 1 exactly for Q8_0/Q8_1
    b[2:10] = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5]  # exact ties: away from zero
    blocks.append(b)
    b = np.full(32, 0.25)
    b[5] = -8.0  # Q4_0: max=-8 -> d=1, x+8.5 ties
    b[6:12] = [0.5, -0.5, 1.5, 6.5, -7.5, 7.0]
    blocks.append(b)
    b = np.zeros(32)
    b[3], b[20] = 1.0, -1.0  # equal + and - maxima: first wins
    blocks.append(b)
    b = np.zeros(32)
    b[20], b[3] = 1.0, -1.0
    blocks.append(b)
    b = np.random.default_rng(7).standard_normal(32)
    b[17] = 1000.0  # one outlier
    blocks.append(b)
    blocks.append(np.random.default_rng(8).standard_normal(32) * 1e-7)  # fp16 d underflows to 0
    blocks.append(np.random.default_rng(9).standard_normal(32) * 1e-3)  # fp16 d subnormal
    blocks.append(np.full(32, 3.0e4))  # Q4_0 d = -3750: all quants 0
    blocks.append(np.array([1e6] + [1.0] * 31))  # Q4_0 d overflows fp16 (inf)
    blocks.append(np.array([-2e9] + [5.0e8] * 31))  # Q8_0/Q8_1 d overflows fp16
    return np.concatenate(blocks).astype(np.float32).reshape(1, -1)


def sample_inputs():
    for dist in DISTRIBUTIONS:
        for seed in range(3):
            yield f"{dist}-{seed}", make_values((37, 256), dist, seed)
    yield "edges", edge_rows()


CASES = list(sample_inputs())
IDS = [c[0] for c in CASES]


def edge_rows_k() -> np.ndarray:
    """Rows for the K-quants' super-blocks of 256: the 32-value edge blocks of :func:`edge_rows`
    side by side (sub-blocks of one super-block, padded with a normal block), each of them repeated
    to fill a super-block of its own, and super-blocks built for the K-quant rules: a positive
    constant (the min is clamped to 0), a negative constant (make_qkx2_quants' flat case), one
    sub-block dominating the others (their 6-bit scales round to 0 and keep the search's quants),
    one 16-value group dominating (Q6_K's int8 scales round to 0), exact halves under a unit scale
    (nearest_int rounds half to even), equal +-maxima, x^2 overflowing float32 (inf weights and
    NaN sums in ggml's search: the bytes must still match) and values whose squares underflow."""
    e = edge_rows().reshape(-1, 32)
    rng = np.random.default_rng(10)
    supers = [np.concatenate([e.reshape(-1), rng.standard_normal(512 - e.size)])]
    supers += [np.tile(b, 8) for b in e]
    supers.append(np.full(256, 3.0))
    supers.append(np.full(256, -2.0))
    b = rng.standard_normal(256)
    b[:32] *= 1000.0
    supers.append(b)
    b = rng.standard_normal(256) * 1e-3
    b[100:116] = rng.standard_normal(16) * 10.0
    supers.append(b)
    b = np.concatenate([[-127.0], np.arange(255) % 64 - 31.5])  # Q8_K: d = 1, every value a .5 tie
    supers.append(b)
    b = np.zeros(256)
    b[7], b[200] = 2.0, -2.0  # equal + and - maxima: the first wins
    supers.append(b)
    b = rng.standard_normal(256)
    b[40:72] = np.abs(b[40:72]) + 1.0  # sub-blocks of positive values only
    b[72:104] = -np.abs(b[72:104]) - 1.0
    supers.append(b)
    supers.append(rng.standard_normal(256) * 3e19)  # x*x overflows float32
    supers.append(rng.standard_normal(256) * 1e-20)  # x*x underflows to 0
    return np.concatenate(supers).astype(np.float32).reshape(1, -1)


def cases_for(fmt: str) -> list:
    """CASES for 32-value formats; for the K-quants the same random rows (256 wide: one super-block,
    with the planted zero and large sub-blocks) and :func:`edge_rows_k` instead of :func:`edge_rows`."""
    if F.SPECS[fmt].block_size == F.QK:
        return CASES
    return [c for c in CASES if c[0] != "edges"] + [("edges", edge_rows_k())]


K_CASES = [(fmt, name, x) for fmt in F.K_FORMATS for name, x in cases_for(fmt)]
K_IDS = [f"{fmt}-{name}" for fmt, name, _ in K_CASES]


def test_block_sizes_match_c_header():
    """formats.py mirrors csrc/formats.h: sizes, field order and offsets."""
    header = (Path(F.__file__).parent / "csrc" / "formats.h").read_text()
    for fmt, size in F.BLOCK_BYTES.items():
        assert re.search(rf"sizeof\(block_{fmt}\) == {size}\b", header), fmt
    want = {"q4_0": 18, "q4_1": 20, "q8_0": 34, "q8_1": 36, "q4_k": 144, "q6_k": 210, "q8_k": 292}
    assert F.BLOCK_BYTES == want
    assert F.BLOCK_DTYPES["q8_1"].fields["qs"][1] == 4  # quants at byte 4 (after d and s)
    assert F.BLOCK_DTYPES["q4_0"].fields["qs"][1] == 2  # at byte 2: only 2-byte aligned
    for fmt in F.FORMATS:  # field order in the C struct is the numpy field order
        struct = re.search(rf"struct block_{fmt} \{{(.*?)\}};", header, re.S).group(1)
        struct = re.sub(r"//[^\n]*", "", struct)  # the comments
        names = re.findall(r"\b(\w+)\b(?:\[[^\]]*\])?;", struct)
        assert tuple(names) == F.BLOCK_DTYPES[fmt].names, (fmt, names)


def _zero_block_d_sign(q: np.ndarray, fmt: str, field: str = "d") -> np.ndarray:
    """Copy of q with the sign bit of ``field`` (d, or Q4_1's m) cleared in blocks where it is zero."""
    b = F.as_blocks(q, fmt).copy()
    d = b[field].view(np.uint16)
    d[d == 0x8000] = 0
    return b.view(np.uint8).reshape(q.shape)


@pytest.mark.parametrize("name,x", CASES, ids=IDS)
@pytest.mark.parametrize("fmt", ["q4_0", "q4_1", "q8_0"])
def test_spec_matches_gguf(name, x, fmt):
    """gguf's numpy quantizers agree with ours, except where gguf disagrees with ggml on the sign of
    a zero: for a Q4_0 block of zeros that starts with -0.0, gguf stores d = +0 and ggml d = -0
    (0x8000); for a Q4_1 block whose min is a zero, ggml keeps the sign of the first zero it meets."""
    with np.errstate(over="ignore", invalid="ignore"):
        ours, theirs = F.quantize(x, fmt), gguf_quantize(x, fmt)
    if fmt == "q4_0":
        ours, theirs = _zero_block_d_sign(ours, fmt), _zero_block_d_sign(theirs, fmt)
    if fmt == "q4_1":
        ours, theirs = _zero_block_d_sign(ours, fmt, "m"), _zero_block_d_sign(theirs, fmt, "m")
    np.testing.assert_array_equal(ours, theirs)


def test_gguf_and_ggml_disagree_on_signed_zero_blocks():
    """The one difference between llama.cpp's two reference quantizers that we found, pinned down."""
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = -0.0
    assert F.as_blocks(ggml_quantize(x, "q4_0"), "q4_0")["d"].view(np.uint16)[0, 0] == 0x8000
    assert F.as_blocks(gguf_quantize(x, "q4_0"), "q4_0")["d"].view(np.uint16)[0, 0] == 0x0000
    np.testing.assert_array_equal(F.quantize(x, "q4_0"), ggml_quantize(x, "q4_0"))
    x = np.zeros((1, 32), np.float32)  # Q4_1: a zero min keeps the sign of the first zero
    x[0, 3], x[0, 5] = -0.0, 1.0
    assert F.as_blocks(ggml_quantize(x, "q4_1"), "q4_1")["m"].view(np.uint16)[0, 0] == 0x0000
    x[0, 0] = -0.0
    assert F.as_blocks(ggml_quantize(x, "q4_1"), "q4_1")["m"].view(np.uint16)[0, 0] == 0x8000
    np.testing.assert_array_equal(F.quantize(x, "q4_1"), ggml_quantize(x, "q4_1"))


@pytest.mark.parametrize("name,x", CASES, ids=IDS)
@pytest.mark.parametrize("fmt", ["q4_0", "q4_1", "q8_0", "q8_1"])
def test_spec_matches_ggml(name, x, fmt):
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(F.quantize(x, fmt), ggml_quantize(x, fmt))


@pytest.mark.filterwarnings("ignore:max |x|")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,x", CASES, ids=IDS)
@pytest.mark.parametrize(
    "fmt,q8_1_sum",
    [("q4_0", "d_sum_q"), ("q4_1", "d_sum_q"), ("q8_0", "d_sum_q"), ("q8_1", "d_sum_q"), ("q8_1", "sum_x")],
)
def test_compiled_matches_spec(name, x, fmt, q8_1_sum, device):
    """C++ (CPU) and CUDA quantizers give the spec's bytes; dequantize inverts them exactly."""
    with np.errstate(over="ignore"):
        want = F.quantize(x, fmt, q8_1_sum)
        want_deq = F.dequantize(want, fmt)
    got = qk.quantize(torch.from_numpy(x).to(device), fmt, q8_1_sum=q8_1_sum)
    assert got.dtype == torch.uint8 and got.device.type == device
    assert tuple(got.shape) == (x.shape[0], F.row_bytes(fmt, x.shape[1]))
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    np.testing.assert_array_equal(qk.dequantize(got, fmt).cpu().numpy(), want_deq)


@pytest.mark.parametrize("fmt,name,x", K_CASES, ids=K_IDS)
def test_k_quants_spec_matches_ggml(fmt, name, x):
    """Q4_K, Q6_K, Q8_K: every byte equal to ggml's reference quantizer's (module docstring: which)."""
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(F.quantize(x, fmt), ggml_quantize(x, fmt))


@pytest.mark.filterwarnings("ignore:max |x|")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt,name,x", K_CASES, ids=K_IDS)
def test_k_quants_compiled_matches_spec(fmt, name, x, device):
    """The C++ quantizers and dequantizers of the K-quants give the spec's bytes and values. The CUDA
    ones do not exist yet: a CUDA tensor is refused with a clear error."""
    with np.errstate(all="ignore"):
        want = F.quantize(x, fmt)
        want_deq = F.dequantize(want, fmt)
    xt = torch.from_numpy(x).to(device)
    if device == "cuda":
        with pytest.raises(ValueError, match="no CUDA quantizer"):
            qk.quantize(xt, fmt)
        return
    got = qk.quantize(xt, fmt, check_finite=False)
    assert tuple(got.shape) == (x.shape[0], F.row_bytes(fmt, x.shape[1]))
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(qk.dequantize(got, fmt).numpy().view(np.uint32), want_deq.view(np.uint32))


def _random_blocks(fmt: str, n: int, seed: int) -> np.ndarray:
    """n blocks of random bytes (every packing pattern of scales and quants), one per row, with the
    float scale fields set to finite random values so that the values are finite."""
    rng = np.random.default_rng(seed)
    f = F.SPECS[fmt]
    b = rng.integers(0, 256, (n, f.block_bytes), dtype=np.uint8).view(f.dtype).reshape(n)
    for name in f.header:
        b[name] = rng.standard_normal(n).astype(b.dtype[name]) * 0.01
    return b.view(np.uint8).reshape(n, f.block_bytes)


@pytest.mark.parametrize("fmt", ["q4_0", "q4_1", "q8_0", *F.K_FORMATS])
def test_dequantizers_match_llama_cpp_on_any_bytes(fmt):
    """Our dequantizers (numpy spec and C++) give ggml's dequantize_row_* and gguf-py's values, bit
    for bit, on random bytes: every 6-bit scale/min packing of Q4_K, every ql/qh split of Q6_K."""
    q = _random_blocks(fmt, 4096, seed=len(fmt) + 7)
    ours = F.dequantize(q, fmt)
    np.testing.assert_array_equal(ours.view(np.uint32), ggml_dequantize(q, fmt).view(np.uint32))
    if fmt in GGUF_DEQUANTIZERS:
        np.testing.assert_array_equal(ours.view(np.uint32), gguf_dequantize(q, fmt).view(np.uint32))
    np.testing.assert_array_equal(qk.dequantize(torch.from_numpy(q), fmt).numpy().view(np.uint32), ours.view(np.uint32))


def test_q4_k_scale_packing_by_hand():
    """The 12 scale bytes of Q4_K: scales j < 4 in the low 6 bits of bytes 0-3 (mins: bytes 4-7);
    scales j >= 4 split into a low nibble in byte j + 4 and their top 2 bits in byte j - 4's top
    bits (mins: the high nibble of byte j + 4, top bits of byte j). Written out for two values."""
    sc = np.array([[1, 2, 3, 63, 0b110101, 5, 6, 7]], np.uint8)
    m = np.array([[9, 10, 11, 12, 13, 0b101110, 15, 63]], np.uint8)
    packed = F._pack_q4_k_scales(sc, m)[0]
    assert packed[4 + 4] == (0b0101 | (13 << 4))  # scale 4's low nibble, min 4's low nibble
    assert packed[0] >> 6 == 0b11 and packed[0] & 63 == 1  # scale 4's top bits above scale 0
    assert packed[9] >> 4 == 0b1110 and packed[5] >> 6 == 0b10  # min 5: low nibble, top bits
    back_sc, back_m = F.q4_k_scale_min(packed)
    np.testing.assert_array_equal(back_sc, sc[0])
    np.testing.assert_array_equal(back_m, m[0])


@pytest.mark.parametrize("fmt", ["q4_k", "q6_k"])
def test_k_quants_round_to_the_nearest_step_of_the_stored_scales(fmt):
    """After the scale search, ggml recomputes every quant from the stored scales: a value inside
    its sub-block's grid is within half a step (d * scale) of the value it dequantizes to, plus
    float32 rounding; a value outside the grid sits at its end (quant 0 or 15; 0 or 63 for Q6_K).
    Sub-blocks whose scale rounds to 0 keep the search's quants and dequantize to 0 (or -dmin * m)."""
    x = make_values((16, 1024), "normal", 11)
    q = F.quantize(x, fmt)
    y = F.dequantize(q, fmt).reshape(-1, 32 if fmt == "q4_k" else 16)
    b = F.as_blocks(q, fmt).reshape(-1)
    quants = F.unpack_quants(q, fmt).reshape(y.shape)
    if fmt == "q4_k":
        sc, m = F.q4_k_scale_min(b["scales"])
        step = (b["d"].astype(np.float32)[:, None] * sc).reshape(-1)
        lo = -(b["dmin"].astype(np.float32)[:, None] * m).reshape(-1)
        top = 15
    else:
        step = (b["d"].astype(np.float32)[:, None] * b["scales"]).reshape(-1)
        lo, top = -32 * step, 63
    xs = x.reshape(y.shape)
    live = step != 0
    assert live.mean() > 0.9  # the check below covers most sub-blocks
    err = np.abs(y - xs)[live] / np.abs(step[live])[:, None]
    inside = (xs[live] - lo[live][:, None]) / step[live][:, None]  # the value in steps above the grid's start
    below, above = inside < 0.5 - 1e-3, inside > top - 0.5 + 1e-3
    assert below.any() and above.any()  # the ends are exercised
    assert (err[~below & ~above] <= 0.5 + 1e-3).all()
    assert (quants[live][below] == 0).all() and (quants[live][above] == top).all()


@pytest.mark.parametrize("fmt", F.FORMATS)
def test_blocks_where_llama_cpp_is_undefined(fmt):
    """max |x| < 3.7e-37: 1/d overflows and llama.cpp casts inf to an integer (undefined
    behaviour). We quantize such a block as zeros; it dequantizes to 0 in both."""
    x = np.full((1, F.SPECS[fmt].block_size), np.finfo(np.float32).tiny, np.float32)
    ours = F.quantize(x, fmt)
    np.testing.assert_array_equal(F.dequantize(ours, fmt), 0)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(F.dequantize(ggml_quantize(x, fmt), fmt), 0)
    np.testing.assert_array_equal(qk.quantize(torch.from_numpy(x), fmt).numpy(), ours)


def test_q8_1_sum_modes_differ_only_in_s_and_ties():
    """The two meanings of s: d*sum(q) vs sum(x). Same d; quants almost always equal."""
    x = make_values((64, 256), "normal", 3)
    a = F.as_blocks(F.quantize(x, "q8_1", "d_sum_q"), "q8_1")
    b = F.as_blocks(F.quantize(x, "q8_1", "sum_x"), "q8_1")
    np.testing.assert_array_equal(a["d"], b["d"])
    assert (a["qs"] != b["qs"]).mean() < 1e-3
    assert (a["s"] != b["s"]).mean() > 0.5  # s is a different number in most blocks
    xs = x.reshape(-1, 32).sum(axis=1)
    np.testing.assert_allclose(b["s"].reshape(-1).astype(np.float32), xs, rtol=2e-3, atol=1e-2)


def test_q4_0_layout_low_nibble_then_high():
    """Element j in the low nibble of byte j, element j+16 in the high nibble."""
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = -8.0  # max magnitude, negative: d = 1, quant 0
    x[0, 1], x[0, 17] = 1.0, 3.0  # quants 9 and 11
    b = F.as_blocks(F.quantize(x, "q4_0"), "q4_0")[0, 0]
    assert float(b["d"]) == 1.0
    assert b["qs"][1] == 9 | (11 << 4)
    assert b["qs"][0] == 0 | (8 << 4)


@pytest.mark.parametrize("fmt", [f for f in F.FORMATS if F.SPECS[f].block_size == F.QK])
def test_roundtrip_error_is_bounded(fmt):
    """Dequantized values are within about half a quantization step of the input."""
    x = make_values((16, 512), "normal", 11, plant_edge_blocks=False)
    y = F.dequantize(F.quantize(x, fmt), fmt)
    d = F.as_blocks(F.quantize(x, fmt), fmt)["d"].astype(np.float32)
    err = np.abs(y - x).reshape(16, -1, 32) / np.abs(d)[..., None]
    # half a step from rounding (a whole step where Q4_0 clamps +8 to 7), plus the fp16 rounding
    # of d, relative 2^-11, times the largest quant (8, 15 or 127), plus for Q4_1 the fp16
    # rounding of m (relative 2^-11 of |m|, in steps of d)
    bound = {"q4_0": 1.0 + 8 / 2048, "q4_1": 0.5 + 15 / 2048}.get(fmt, 0.5 + 127 / 2048)
    if F.SPECS[fmt].min_field:
        m = F.as_blocks(F.quantize(x, fmt), fmt)["m"].astype(np.float32)
        bound = bound + (np.abs(m) / 2048 / np.abs(d))[..., None]
    assert (err <= bound + 1e-6).all()


def _q4_0_quants_fused(x: np.ndarray) -> np.ndarray:
    """Q4_0 nibbles as quantize_row_q4_0_ref computes them when the compiler fuses `x * id + 8.5f`
    into one FMA (a single rounding: the float64 product of two floats is exact), for comparison."""
    xb = x.reshape(-1, F.QK)
    imax = np.abs(xb).argmax(axis=1)  # the C code scales by the float32 d, not the stored fp16 one
    d32 = (xb[np.arange(len(xb)), imax] / np.float32(-8)).astype(np.float32).reshape(-1, 1)
    inv = np.where(d32 == 0, np.float32(0), np.float32(1) / d32).astype(np.float32)
    fused = (xb.astype(np.float64) * inv.astype(np.float64) + 8.5).astype(np.float32)
    return np.minimum(np.trunc(fused), 15).astype(np.uint8)


def test_fma_changes_q4_0_bytes_and_llama_cpps_references_do_not_fuse():
    """Chapter 2's "which quantizer, where" table: fusing `x * id + 8.5f` into an FMA moves a nibble
    now and then (llama.cpp PR #8939); gguf-py and the ggml build under test round the product and
    the sum separately, as our spec does. A block is searched where the two roundings differ."""
    rng = np.random.default_rng(0)  # about one block in 150,000 has a value where the roundings differ
    x = rng.standard_normal((300_000, F.QK)).astype(np.float32)
    spec = F.as_blocks(F.quantize(x, "q4_0"), "q4_0")["qs"].reshape(-1, F.QK // 2)  # one block per row
    nib = np.concatenate([spec & 0xF, spec >> 4], axis=1)
    fused = _q4_0_quants_fused(x)
    differ = np.nonzero((nib != fused).any(axis=1))[0]
    assert len(differ) > 0, "no block where an FMA would change a nibble: widen the search"
    rows = x[differ[:8]]
    np.testing.assert_array_equal(ggml_quantize(rows, "q4_0"), F.quantize(rows, "q4_0"))
    np.testing.assert_array_equal(gguf_quantize(rows, "q4_0"), F.quantize(rows, "q4_0"))


def test_the_eight_lane_quantizers_sum_order_is_the_warps():
    """cuda/common.cuh's quantize_q8_1_group8 gives a block to 8 lanes, lane g holding values
    4g .. 4g + 3, and adds s = sum(x) as lane xor 4, 2, 1 then inside the lane (values 0 + 2, 1 + 3,
    then the two): the same float32 additions as ggml-cuda's warp butterfly over value offsets
    16, 8, 4, 2, 1 (formats.butterfly_sum32), so the sum_x bytes are llama.cpp's. Emulated here in
    numpy, bit for bit, on values of very different sizes (where the order of additions shows)."""
    rng = np.random.default_rng(19)
    x = (rng.standard_normal((4000, 32)) * 10.0 ** rng.integers(-6, 7, (4000, 32))).astype(np.float32)
    t = x.reshape(-1, 8, 4).copy()  # [block, lane g, value k of the lane]
    lanes = np.arange(8)
    for off in (4, 2, 1):  # value offsets 16, 8, 4
        t = t + t[:, lanes ^ off, :]
    t01 = t[:, 0, 0] + t[:, 0, 2], t[:, 0, 1] + t[:, 0, 3]  # value offset 2
    group8 = (t01[0] + t01[1]).astype(np.float32)  # value offset 1
    warp = F.butterfly_sum32(x)
    assert group8.dtype == warp.dtype == np.float32
    assert np.array_equal(group8.view(np.uint32), warp.view(np.uint32))
    sequential = np.cumsum(x, axis=1, dtype=np.float32)[:, -1]
    assert not np.array_equal(sequential.view(np.uint32), warp.view(np.uint32))  # the order matters here
