"""Appendix C: the INT8 conv1d + SiLU kernel and its simulations.

The faithful simulation must equal the CPU kernel (and the CUDA kernel) bit for bit, the int8
output and the float32 SiLU output both; the source document's float simulation must not.
"""

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from quantgemm_kernels.appendices import simulation as S
from quantgemm_kernels.reference import nmse

from conftest import ROOT, requires_cuda

# (batch, channels, time, width): batch 1, channels 1, width > time, width 1, odd sizes.
SHAPES = [
    (1, 1, 1, 1),
    (1, 1, 2, 4),
    (1, 3, 17, 4),
    (2, 64, 256, 4),
    (3, 5, 100, 7),
    (1, 8, 3, 16),
    (4, 1, 33, 2),
    (1, 16, 1, 4),
]


def run_both(inp, **kw):
    q, z = S.conv1d_silu_int8(*inp, return_float=True, **kw)
    qs, zs = S.simulate_faithful(*inp, return_float=True, **({"exp": S.exp_libm} if kw.get("libm_exp") else {}))
    return q, z, qs, zs


@pytest.mark.parametrize("shape", SHAPES, ids=[f"B{b}C{c}T{t}W{w}" for b, c, t, w in SHAPES])
@pytest.mark.parametrize("per_channel,with_bias", [(False, True), (True, True), (False, False)])
def test_cpu_kernel_equals_faithful_simulation_bitwise(shape, per_channel, with_bias):
    inp = S.make_inputs(*shape, seed=sum(shape), x_scale_per_channel=per_channel, with_bias=with_bias)
    q, z, qs, zs = run_both(inp)
    assert q.dtype == torch.int8 and q.shape == shape[:3] and z.dtype == torch.float32
    assert S.compare_int8(q, qs)["mismatches"] == 0
    assert S.same_bits(z, zs)


def test_many_seeds_bitwise():
    """Fifty seeded layers, about 400k outputs: not one bit differs."""
    n = 0
    for seed in range(50):
        inp = S.make_inputs(2, 32, 128, 4, seed=seed)
        q, z, qs, zs = run_both(inp)
        assert np.array_equal(q.numpy(), qs) and S.same_bits(z, zs), seed
        n += q.numel()
    assert n == 50 * 2 * 32 * 128


def test_causal_padding_and_taps_by_hand():
    """One channel, width 3, by hand: the last tap is the current step, earlier taps look back."""
    x = torch.tensor([[[10, -20, 30, 40]]], dtype=torch.int8)
    w = torch.tensor([[1, 2, 3]], dtype=torch.int8)
    acc = S._int_conv(x, w)[0, 0]
    assert acc.tolist() == [3 * 10, 2 * 10 + 3 * -20, 1 * 10 + 2 * -20 + 3 * 30, 1 * -20 + 2 * 30 + 3 * 40]
    one = torch.ones(1)
    q, z = S.conv1d_silu_int8(x, w, one, one, None, 1.0, return_float=True)
    expected = [round_away(a / (1 + math.exp(-a))) for a in acc.tolist()]
    assert q[0, 0].tolist() == [max(-128, min(127, e)) for e in expected]


def round_away(v: float) -> int:
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def test_simulate_float_with_all_fixes_is_the_faithful_simulation():
    inp = S.make_inputs(2, 16, 200, 4, seed=7, x_scale_per_channel=True)
    assert np.array_equal(S.simulate_float(*inp, fixes=S.FIXES), S.simulate_faithful(*inp))


def test_seed_mode2_simulation_differs_and_is_less_accurate():
    inp = S.make_inputs(2, 64, 512, 4, seed=3)
    q = S.conv1d_silu_int8(*inp).numpy()
    wrong = S.simulate_seed_mode2(*inp)
    d = S.compare_int8(wrong, q)
    assert d["mismatches"] > 0.05 * d["n"]  # the double rounding alone moves many outputs
    assert d["max_steps"] >= 1
    ref = S.ideal(*inp[:5])
    err_kernel = nmse(q.astype(np.float64) * inp.out_scale, ref)
    err_wrong = nmse(wrong.astype(np.float64) * inp.out_scale, ref)
    assert err_wrong > 1.2 * err_kernel


def test_kernel_is_within_half_a_step_of_the_ideal():
    """One rounding at the end: every output lies within half a quantization step of the float64
    ideal, plus float32 noise (out_scale is calibrated, so nothing clamps)."""
    inp = S.make_inputs(2, 64, 256, 4, seed=11)
    q = S.conv1d_silu_int8(*inp).numpy().astype(np.float64)
    steps = S.ideal(*inp[:5]) / inp.out_scale
    assert np.abs(q - steps).max() <= 0.5 + 1e-4


def test_exp_portable_is_accurate():
    x = np.concatenate(
        [
            np.linspace(-87, 88, 400_001, dtype=np.float32),
            np.random.default_rng(0).standard_normal(100_000).astype(np.float32) * 5,
        ]
    )
    e = S.exp_portable(x)
    assert e.dtype == np.float32
    ulps = np.abs(e.astype(np.float64) - np.exp(x.astype(np.float64))) / np.spacing(e).astype(np.float64)
    assert ulps.max() < 1.5
    assert S.exp_portable(np.float32(0)) == 1.0


def test_round_half_away_matches_c_roundf():
    edge = np.array(
        [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 8388607.5, 1e30, 0.0, -0.0, 126.5, -127.5],
        dtype=np.float32,
    )
    rand = (np.random.default_rng(1).standard_normal(20_000) * 100).astype(np.float32)
    v = np.concatenate([edge, rand, np.round(rand) + np.float32(0.5)])
    got = S.round_half_away(v)
    want = np.array([math.copysign(math.floor(abs(float(a)) + 0.5), float(a)) for a in v], dtype=np.float32)
    assert np.array_equal(got, want)
    assert S.round_half_away(np.float32(2.5)) == 3 and np.round(np.float32(2.5)) == 2  # the trap


def test_libm_exp_kernel_equals_simulation_calling_libm():
    """With the platform's expf the CPU kernel is reproduced by calling the same function."""
    try:
        S.exp_libm(np.zeros(1, np.float32))
    except (OSError, AttributeError):
        pytest.skip("no C math library loadable through ctypes here")
    inp = S.make_inputs(1, 16, 128, 4, seed=5)
    q, z, qs, zs = run_both(inp, libm_exp=True)
    assert np.array_equal(q.numpy(), qs) and S.same_bits(z, zs)


def test_empty_inputs_give_empty_outputs():
    for shape in [(0, 4, 10, 4), (2, 4, 0, 4), (2, 0, 10, 4)]:
        inp = S.make_inputs(*shape, seed=0)
        q, z = S.conv1d_silu_int8(*inp, return_float=True)
        assert q.shape == shape[:3] and z.shape == shape[:3]
        assert S.simulate_faithful(*inp).shape == shape[:3]


def bad_cases():
    inp = S.make_inputs(2, 4, 8, 3, seed=0)
    x, w, sx, sw, b, so = inp
    C = 4
    return [
        ("x float", lambda: S.conv1d_silu_int8(x.float(), w, sx, sw, b, so), TypeError, "x must be torch.int8"),
        ("x 2-D", lambda: S.conv1d_silu_int8(x[0], w, sx, sw, b, so), ValueError, "3-D"),
        ("w channels", lambda: S.conv1d_silu_int8(x, w[:3], sx, sw, b, so), ValueError, "channels=4"),
        ("width 0", lambda: S.conv1d_silu_int8(x, w[:, :0], sx, sw, b, so), ValueError, "width must be in"),
        (
            "width too large",
            lambda: S.conv1d_silu_int8(x, torch.zeros(C, 1025, dtype=torch.int8), sx, sw, b, so),
            ValueError,
            "width must be in",
        ),
        (
            "x non-contiguous",
            lambda: S.conv1d_silu_int8(x.transpose(0, 2).contiguous().transpose(0, 2), w, sx, sw, b, so),
            ValueError,
            "contiguous",
        ),
        (
            "x_scale length",
            lambda: S.conv1d_silu_int8(x, w, torch.ones(3), sw, b, so),
            ValueError,
            "x_scale must be 1-D",
        ),
        ("x_scale float64", lambda: S.conv1d_silu_int8(x, w, sx.double(), sw, b, so), TypeError, "float32"),
        ("x_scale negative", lambda: S.conv1d_silu_int8(x, w, -sx, sw, b, so), ValueError, "positive"),
        ("w_scale per tensor", lambda: S.conv1d_silu_int8(x, w, sx, sw[:1], b, so), ValueError, "w_scale must be 1-D"),
        ("w_scale NaN", lambda: S.conv1d_silu_int8(x, w, sx, torch.full((C,), float("nan")), b, so), ValueError, "NaN"),
        (
            "bias length",
            lambda: S.conv1d_silu_int8(x, w, sx, sw, torch.zeros(C + 1), so),
            ValueError,
            "bias must be 1-D",
        ),
        ("bias Inf", lambda: S.conv1d_silu_int8(x, w, sx, sw, torch.full((C,), float("inf")), so), ValueError, "Inf"),
        ("out_scale 0", lambda: S.conv1d_silu_int8(x, w, sx, sw, b, 0.0), ValueError, "out_scale"),
        ("out_scale NaN", lambda: S.conv1d_silu_int8(x, w, sx, sw, b, float("nan")), ValueError, "out_scale"),
        ("out_scale underflows float32", lambda: S.conv1d_silu_int8(x, w, sx, sw, b, 1e-50), ValueError, "out_scale"),
        ("out_scale overflows float32", lambda: S.conv1d_silu_int8(x, w, sx, sw, b, 1e39), ValueError, "out_scale"),
        ("out_scale tensor", lambda: S.conv1d_silu_int8(x, w, sx, sw, b, torch.tensor(so)), TypeError, "out_scale"),
        ("unknown fix", lambda: S.simulate_float(*inp, fixes=("round_twice",)), ValueError, "unknown fixes"),
    ]


@pytest.mark.parametrize("what,call,exc,msg", bad_cases(), ids=[c[0] for c in bad_cases()])
def test_bad_input_raises(what, call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


COMPILED_OP_CHECKS = textwrap.dedent("""
    import torch
    from quantgemm_kernels.appendices import simulation as S
    x, w, sx, sw, b, so = S.make_inputs(1, 4, 8, 3, seed=0)
    S.conv1d_silu_int8(x, w, sx, sw, b, so)  # builds/loads the extension
    op = torch.ops.quantgemm_appendix_c.conv1d_silu_int8
    cases = [
        ("w has 3 channels", lambda: op(x, w[:3].contiguous(), sx, sw, b, so, False, False)),
        ("x_scale must have 4", lambda: op(x, w, torch.ones(2), sw, b, so, False, False)),
        ("x must be int8", lambda: op(x.float(), w, sx, sw, b, so, False, False)),
        ("out_scale", lambda: op(x, w, sx, sw, b, -1.0, False, False)),
        ("width", lambda: op(x, w[:, :0].contiguous(), sx, sw, b, so, False, False)),
    ]
    for expected, call in cases:
        try:
            call()
            print("NO ERROR", expected)
        except RuntimeError as e:  # the C++ layer raises RuntimeError (check.h's QG_CHECK)
            print("RuntimeError" if expected in str(e) else "WRONG MESSAGE " + str(e), flush=True)
""")


def run_child(code: str) -> subprocess.CompletedProcess:
    """Run Python code in a child process: a crash there (a C++ exception mishandled across the
    extension boundary segfaults) fails the calling test instead of killing the test session."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)


def test_compiled_op_checks_too():
    """Past the Python checks, the C++ binding still raises instead of touching memory."""
    r = run_child(COMPILED_OP_CHECKS)
    assert r.returncode == 0, f"child exited with {r.returncode}: {r.stdout[-500:]} {r.stderr[-1500:]}"
    assert r.stdout.split() == ["RuntimeError"] * 5, r.stdout


# ------------------------------------------------------------------------------ CUDA (skipped without a GPU)
def to_cuda(inp):
    return S.Conv1dInputs(*[t.cuda() if isinstance(t, torch.Tensor) else t for t in inp])


@requires_cuda
@pytest.mark.parametrize("shape", SHAPES, ids=[f"B{b}C{c}T{t}W{w}" for b, c, t, w in SHAPES])
def test_cuda_kernel_equals_cpu_kernel_and_simulation_bitwise(shape):
    for per_channel in (False, True):
        inp = S.make_inputs(*shape, seed=sum(shape) + 1, x_scale_per_channel=per_channel)
        q_cpu, z_cpu = S.conv1d_silu_int8(*inp, return_float=True)
        q_gpu, z_gpu = S.conv1d_silu_int8(*to_cuda(inp), return_float=True)
        qs, zs = S.simulate_faithful(*inp, return_float=True)
        assert np.array_equal(q_gpu.cpu().numpy(), q_cpu.numpy()) and np.array_equal(q_gpu.cpu().numpy(), qs)
        assert S.same_bits(z_gpu, z_cpu) and S.same_bits(z_gpu, zs)


@requires_cuda
def test_cuda_many_seeds_bitwise():
    for seed in range(20):
        inp = S.make_inputs(4, 64, 1000, 4, seed=100 + seed)
        q_gpu, z_gpu = S.conv1d_silu_int8(*to_cuda(inp), return_float=True)
        qs, zs = S.simulate_faithful(*inp, return_float=True)
        assert np.array_equal(q_gpu.cpu().numpy(), qs) and S.same_bits(z_gpu, zs), seed


@requires_cuda
def test_cuda_libm_exp_stays_within_one_step():
    """With CUDA's expf instead of exp_portable the bits may differ from the CPU's, by an ulp of z."""
    inp = S.make_inputs(2, 64, 512, 4, seed=9)
    q_cpu = S.conv1d_silu_int8(*inp, libm_exp=True)
    q_gpu = S.conv1d_silu_int8(*to_cuda(inp), libm_exp=True).cpu()
    assert S.compare_int8(q_cpu, q_gpu)["max_steps"] <= 1


@requires_cuda
def test_cuda_mixed_devices_raise():
    x, w, sx, sw, b, so = S.make_inputs(1, 4, 8, 3, seed=0)
    with pytest.raises(ValueError, match="x is on"):
        S.conv1d_silu_int8(x.cuda(), w.cuda(), sx, sw.cuda(), b.cuda(), so)
    code = textwrap.dedent("""
        import torch
        from quantgemm_kernels.appendices import simulation as S
        x, w, sx, sw, b, so = S.make_inputs(1, 4, 8, 3, seed=0)
        S.conv1d_silu_int8(x, w, sx, sw, b, so)
        try:  # the compiled op, past the Python checks: x on the CPU, the rest on the GPU
            torch.ops.quantgemm_appendix_c.conv1d_silu_int8(x, w.cuda(), sx.cuda(), sw.cuda(), b.cuda(), so, False, False)
        except RuntimeError as e:
            print("RuntimeError", "x is on" in str(e))
    """)
    r = run_child(code)
    assert r.returncode == 0 and r.stdout.split() == ["RuntimeError", "True"], (
        r.returncode,
        r.stdout,
        r.stderr[-1500:],
    )
