"""The decode kernel's launch plan (cuda/06_decode_tensor_cores/decode_plan.h) for GPUs of every
size of shared memory, through its operator: no GPU needed. What runs on a GPU with a capped plan is
tested in test_kernels.py (test_decode_kernels_within_less_shared_memory)."""

import pytest

from quantgemm_kernels import api

#: (SMs, opt-in shared memory per CTA in bytes) of GPUs the decode kernel runs on (sm_80 and later)
GPUS = {
    "H100 SXM / H200": (132, 227 * 1024),
    "H100 PCIe": (114, 227 * 1024),
    "A100": (108, 163 * 1024),
    "RTX 3090": (82, 99 * 1024),
    "A10": (72, 99 * 1024),
    "RTX 4090": (128, 99 * 1024),
    "L4": (58, 99 * 1024),
    "RTX 5090": (170, 99 * 1024),
}
FORMATS = ("q4_0", "q4_1", "q8_0")
#: layer shapes (M, K): Llama-3-8B's, ragged rows, K of one block, K not whole units of 8 blocks
SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096), (4093, 4096), (1, 32), (37, 288), (130, 2048),
          (11008, 4096), (4096, 11008), (8192, 28672), (300, 14336 + 32)]  # fmt: skip


def plan(fmt, T, M, K, gpu):
    packed, rg, stages, smem, chunk = api._ops().decode_plan(fmt, T, M, K, *GPUS[gpu])
    return {"packed": bool(packed), "rg": rg, "stages": stages, "smem": smem, "chunk": chunk}


@pytest.mark.parametrize("gpu", GPUS)
def test_every_plan_fits_the_gpu(gpu):
    """Every format, pass of 1 to 8 tokens and layer: the CTA's shared memory is within the GPU's
    opt-in limit, the ring has 1 to 3 stages, a K chunk is whole units of 8 blocks (at least 2, an
    even number) unless it is all of K, and packed rows (whole short rows a step) only where K is
    one launch of at most 4096."""
    sms, optin = GPUS[gpu]
    for fmt in FORMATS:
        for T in range(1, 9):
            for M, K in SHAPES:
                p = plan(fmt, T, M, K, gpu)
                where = f"{gpu} {fmt} T={T} M={M} K={K}: {p}"
                assert p["smem"] <= optin, where
                assert 1 <= p["stages"] <= 3 and p["rg"] in (1, 4), where
                assert p["chunk"] == K // 32 or (p["chunk"] % 16 == 0 and p["chunk"] >= 16), where
                assert not p["packed"] or (p["chunk"] == K // 32 and K <= 4096 and p["rg"] == 1), where


def test_hopper_plans_are_the_measured_rules():
    """On Hopper (227 KB) everything preferred fits; the plan is what the A/Bs in decode_plan.h chose."""
    h = "H100 SXM / H200"
    # Q4_0's long rows: 1 row a step at 1 and 2 tokens with 2 stages (two CTAs of 93 KB per SM at
    # one token), 4 rows a step from 3 tokens, 3 stages at 3 and 4
    assert plan("q4_0", 1, 4096, 14336, h) == {"packed": False, "rg": 1, "stages": 2, "smem": 93072, "chunk": 448}
    assert [plan("q4_0", T, 4096, 14336, h)["stages"] for T in range(1, 9)] == [2, 2, 3, 3, 2, 2, 2, 2]
    assert [plan("q4_0", T, 4096, 14336, h)["rg"] for T in range(1, 9)] == [1, 1, 4, 4, 4, 4, 4, 4]
    # Q4_0's rows of 4096 at 2 to 4 tokens: four rows a step with 3 stages where 4096 rows fill 132
    # SMs once; packed with fewer rows (1024) or more (14336), and at other token counts
    fours = [T for T in range(1, 9) if not plan("q4_0", T, 4096, 4096, h)["packed"]]
    assert fours == [2, 3, 4] and {plan("q4_0", T, 4096, 4096, h)["stages"] for T in fours} == {3}
    assert all(plan("q4_0", T, M, 4096, h)["packed"] for T in range(1, 9) for M in (1024, 14336))
    # Q8_0: 2 stages everywhere; rows of 4096 packed up to 3 tokens, four rows a step from 4
    assert {plan("q8_0", T, M, K, h)["stages"] for T in range(1, 9) for M, K in SHAPES} == {2}
    assert [plan("q8_0", T, 14336, 4096, h)["packed"] for T in range(1, 9)] == [True] * 3 + [False] * 5
    # K = 14336 is one launch up to 8 Q4_0 tokens; Q8_0's wider ring leaves room for 32 units at 8
    assert plan("q4_0", 8, 4096, 14336, h)["chunk"] == 448 and plan("q8_0", 8, 4096, 14336, h)["chunk"] == 256


@pytest.mark.parametrize("gpu", [g for g, (_, optin) in GPUS.items() if optin == 99 * 1024])
def test_gpus_of_99_kb_take_shallower_rings(gpu):
    """99 KB per CTA: Q8_0's ring of 2 steps per warp alone is 136 KB, so Q8_0 keeps 1 step per warp
    in flight; Q4_0's 3-step ring (108 KB) becomes 2 steps; Q4_0's rows of 4096 stay packed at 2 to 4
    tokens (the four-row layout wants its 3 stages); long rows are cut into shorter K chunks."""
    assert {plan("q8_0", T, M, K, gpu)["stages"] for T in range(1, 9) for M, K in SHAPES} == {1}
    assert {plan("q4_0", T, 4096, 14336, gpu)["stages"] for T in range(1, 9)} == {2}
    assert all(plan("q4_0", T, 4096, 4096, gpu)["packed"] for T in (1, 2, 3, 4))
    assert plan("q4_0", 8, 4096, 14336, gpu)["chunk"] < 448 and plan("q4_0", 1, 4096, 14336, gpu)["chunk"] == 448


def test_a100_keeps_the_preferred_rings():
    """163 KB per CTA: every preferred ring fits (Q8_0's 2 steps, Q4_0's 3); K is cut shorter."""
    a = "A100"
    assert {plan("q8_0", T, M, K, a)["stages"] for T in range(1, 9) for M, K in SHAPES} == {2}
    assert [plan("q4_0", T, 4096, 14336, a)["stages"] for T in range(1, 9)] == [2, 2, 3, 3, 2, 2, 2, 2]
    assert plan("q8_0", 8, 4096, 14336, a)["chunk"] == 64


def test_decode_plan_refuses_bad_input():
    ops = api._ops()
    with pytest.raises(RuntimeError, match="q4_0, q4_1 or q8_0"):
        ops.decode_plan("q6_k", 1, 4096, 4096, 132, 227 * 1024)
    for T in (0, 9):
        with pytest.raises(RuntimeError, match="1 to 8"):
            ops.decode_plan("q4_0", T, 4096, 4096, 132, 227 * 1024)
    with pytest.raises(RuntimeError, match="multiple of 32"):
        ops.decode_plan("q4_0", 1, 4096, 48, 132, 227 * 1024)
    with pytest.raises(RuntimeError, match="must be positive"):
        ops.decode_plan("q4_0", 1, 4096, 4096, 0, 227 * 1024)
    # a GPU whose shared memory cannot hold the smallest ring: a clear error, not a failed launch
    with pytest.raises(RuntimeError, match="bytes of shared memory per CTA.*this GPU allows 49152"):
        ops.decode_plan("q8_0", 1, 4096, 4096, 132, 48 * 1024)


def test_decode_smem_cap_is_set_and_restored():
    ops = api._ops()
    before = ops.decode_smem_cap(99 * 1024)
    try:
        assert ops.decode_smem_cap(163 * 1024) == 99 * 1024
    finally:
        assert ops.decode_smem_cap(before) == 163 * 1024
    with pytest.raises(RuntimeError, match="0 \\(no cap\\) or positive"):
        ops.decode_smem_cap(-1)
