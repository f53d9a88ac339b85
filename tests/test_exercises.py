"""The chapters' exercises (quantgemm_kernels.exercises).

Kernel exercises: every reference body passes; every starter body compiles and fails with a
message that names the shape, the first wrong output and the NMSE; typical wrong bodies get the
hint meant for them; a body that does not compile gives the compiler's messages with the body's
own line numbers; a body that crashes or never ends is reported, and the test process lives on.
CUDA exercises run where CUDA can be built and are skipped elsewhere (where nvcc is installed
without a GPU, their scaffolds and reference bodies are still compiled).

Numpy exercises: each checker accepts the solution printed in its chapter and rejects a typical
mistake (these checks sat in hidden notebook cells before the checkers moved into the package).
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import time

import numpy as np
import pytest

from quantgemm_kernels import exercises as E
from quantgemm_kernels import formats


def _param(name):
    ok, why = E.available(name)
    return pytest.param(name, marks=[] if ok else [pytest.mark.skip(reason=why)])


ALL = [_param(n) for n in E.names()]


def test_every_chapter_has_a_kernel_exercise():
    for device in ("cpu", "cuda"):
        chapters = {E.KERNEL_EXERCISES[n].chapter for n in E.names(device)}
        assert {1, 3, 4, 6} <= chapters, (device, chapters)


@pytest.mark.parametrize("name", ALL)
def test_reference_body_passes(name):
    v = E.diagnose(name, E.solution(name))
    assert v.ok, v.message
    assert v.message.startswith("Correct")


@pytest.mark.parametrize("name", ALL)
def test_starter_compiles_and_fails_with_a_useful_message(name):
    v = E.diagnose(name, E.starter(name))
    assert not v.ok
    assert "does not compile" not in v.message, v.message
    if E.KERNEL_EXERCISES[name].kind == "gemm":
        assert "wrong on M=1, N=1, K=32 (C is [N, M] = [1, 1])" in v.message, v.message
        assert "First wrong output C[0, 0]" in v.message and "expected" in v.message and "got" in v.message
        assert "NMSE" in v.message and "> 1e-08" in v.message
        assert "Hint:" in v.message, v.message  # the starters compute a known wrong thing
    else:
        assert "deadlock" in v.message or "race" in v.message, v.message


def _sub(name, old, new, count=1):
    body = E.solution(name)
    assert body.count(old) >= count, (name, old)
    return body.replace(old, new)


# (exercise, wrong body, fragments its message must contain)
WRONG = [
    ("ch1_tile", lambda: _sub("ch1_tile", "int k = k0; k < k0 + tk", "int k = 0; k < tk"), ["M=7, N=1, K=96", "k0"]),
    ("ch1_tile", lambda: _sub("ch1_tile", "float s = acc[i][j];", "float s = 0;"), ["last K slice"]),
    ("ch3_nibbles", lambda: _sub("ch3_nibbles", " - 8;", ";", 2), ["nibbles 0..15 as they are"]),
    (
        "ch3_nibbles",
        lambda: _sub("ch3_nibbles", "x[j + 16]", "x[2 * j + 1]").replace("lo * x[j]", "lo * x[2 * j]"),
        ["Nibble order"],
    ),
    ("ch3_nibbles", lambda: _sub("ch3_nibbles", "return sum * fp16_to_fp32(b->d);", "return sum;"), ["scale"]),
    ("ch4_q8_1", lambda: _sub("ch4_q8_1", " - 8.0f * s_a", ""), ["-8 * s_a term is missing"]),
    ("ch4_q8_1", lambda: _sub("ch4_q8_1", "- 8.0f * s_a", "+ 8.0f * s_a"), ["sign"]),
    (
        "ch4_q8_1",
        lambda: (
            _sub("ch4_q8_1", "(w->qs[j] & 0x0F) *", "((w->qs[j] & 0x0F) - 8) *")
            .replace("(w->qs[j] >> 4) *", "((w->qs[j] >> 4) - 8) *")
            .replace(" - 8.0f * s_a", "")
        ),
        ["signed formula"],
    ),
    (
        "ch6_ring",
        lambda: "*stage = t % stages; *full_parity = (t / stages) & 1; *empty_parity = (t / stages) & 1;",
        ["deadlock", "empty[0] for parity 0"],
    ),
    ("ch6_ring", lambda: "*stage = t % stages; *full_parity = 0; *empty_parity = 1;", ["race", "refilled stage 0"]),
    (
        "ch6_ring",
        lambda: "*stage = 0; *full_parity = (t / stages) & 1; *empty_parity = 1 ^ ((t / stages) & 1);",
        ["stage"],
    ),
    ("ch6_ring", lambda: "*stage = t; *full_parity = 0; *empty_parity = 1;", ["a stage is 0..0"]),
    (
        "ch6_warp_dot_cuda",
        lambda: _sub("ch6_warp_dot_cuda", "sum += __shfl_xor_sync", "sum += 0 * __shfl_xor_sync"),
        ["warp reduction"],
    ),
    (
        "ch4_dp4a_cuda",
        lambda: _sub("ch4_dp4a_cuda", "a[i + 4]", "a[2 * i + 1]").replace("a[i], sumi", "a[2 * i], sumi"),
        ["a[i + 4]"],
    ),
    ("ch1_tile_cuda", lambda: _sub("ch1_tile_cuda", "As[ty][k] * Ws[tx][k]", "As[tx][k] * Ws[ty][k]"), ["Ws[tx]"]),
]


@pytest.mark.parametrize(
    "name,make_body,fragments",
    [pytest.param(*w, marks=_param(w[0]).marks, id=f"{w[0]}-{i}") for i, w in enumerate(WRONG)],
)
def test_wrong_body_gets_a_message_that_helps(name, make_body, fragments):
    v = E.diagnose(name, make_body())
    assert not v.ok
    for f in fragments:
        assert f in v.message, (f, v.message)
    if E.KERNEL_EXERCISES[name].kind == "gemm":
        assert "First wrong output" in v.message and "NMSE" in v.message, v.message


def test_compile_error_names_the_body_line():
    body = "    float s = 0.0f;\n    s += undeclared_thing(b->qs[0]);\n    return s\n"
    t0 = time.perf_counter()
    v = E.diagnose("ch3_nibbles", body)
    assert not v.ok
    assert v.message.startswith("Your body does not compile")
    assert "your code:2:" in v.message and "undeclared_thing" in v.message, v.message
    assert "your code:3:" in v.message, v.message  # the missing ';'
    assert " -c " not in v.message and "ninja" not in v.message  # no build commands
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = E.diagnose("ch3_nibbles", body)  # cached with its messages: no second compile
    assert again.message == v.message
    assert time.perf_counter() - t0 < max(first, 1.0)


def test_unclosed_brace_is_explained():
    v = E.diagnose("ch3_nibbles", "    float s = 0.0f;\n    for (int j = 0; j < 16; j++) {\n    return s;\n")
    assert not v.ok and "unclosed brace" in v.message, v.message


def test_a_second_checkout_sharing_the_cache_reads_its_own_paths(tmp_path, monkeypatch):
    """CI's failure: a checkout elsewhere compiled the same body first, into the same cache, and its
    stored compiler output named its own scaffold path, which this checkout's reading did not know.
    The build tag includes the scaffold's folder, so each checkout compiles and reads its own."""
    body = "    float s = 0.0f;\n    for (int j = 0; j < 16; j++) {\n    return s;\n"
    shutil.copytree(E.CSRC, tmp_path / "elsewhere" / "csrc")
    other = tmp_path / "elsewhere" / "csrc" / "exercises"
    monkeypatch.setenv("QUANTGEMM_CACHE", str(tmp_path / "cache"))
    with monkeypatch.context() as m:
        m.setattr(E, "EXERCISES_DIR", other)
        m.setattr(E, "CSRC", other.parent)
        first = E.diagnose("ch3_nibbles", body)
    assert "unclosed brace" in first.message, first.message
    here = E.diagnose("ch3_nibbles", body)
    assert "unclosed brace" in here.message and other.as_posix() not in here.message, here.message


def test_nvcc_messages_are_read_too(tmp_path):
    """nvcc writes file(line): error; the body's file becomes "your code" there as well."""
    body_file = (tmp_path / "your_code.txt").as_posix()
    scaffold = (E.EXERCISES_DIR / "ch6_warp_dot_cuda.cu").as_posix()
    raw = (
        "Error building extension 'qgex_x': [1/2] /usr/local/cuda/bin/nvcc -DX -c x.cu -o x.cuda.o\n"
        "FAILED: x.cuda.o\n/usr/local/cuda/bin/nvcc -DX -c x.cu -o x.cuda.o\n"
        f'{body_file}(2): error: identifier "undefined_thing" is undefined\n      s += undefined_thing;\n'
        f'           ^\n\n{scaffold}(22): error: expected a ";"\n  }}\n  ^\n\n'
        "2 errors detected in the compilation.\nninja: build stopped: subcommand failed.\n"
    )
    msg = E._readable_compiler_output(raw, tmp_path)
    assert msg.startswith("Your body does not compile: 2 errors (lines counted from the first line of your body).")
    assert 'your code(2): error: identifier "undefined_thing"' in msg
    assert "scaffold ch6_warp_dot_cuda.cu(22)" in msg and "missing ';'" in msg
    assert "nvcc" not in msg and "ninja" not in msg and str(tmp_path) not in msg


def test_check_prints_and_never_raises_for_the_readers_mistakes(capsys):
    assert E.check("ch3_nibbles", "    return nonsense;\n") is False
    assert "does not compile" in capsys.readouterr().out
    assert E.check("ch3_nibbles", E.solution("ch3_nibbles")) is True
    assert capsys.readouterr().out.startswith("Correct")


def test_crash_is_reported_not_fatal():
    v = E.diagnose("ch3_nibbles", "    *(volatile int*)nullptr = 1;\n    return 0.0f;\n")
    assert not v.ok
    # SIGSEGV, or SIGILL where the compiler turns the null store into a trap
    assert re.search(r"crashed \(SIG(SEGV|ILL)\)", v.message) and "M=1, N=1, K=32" in v.message, v.message


def test_what_the_body_prints_follows_the_verdict():
    v = E.diagnose("ch3_nibbles", '    printf("block scale %g\\n", fp16_to_fp32(b->d));\n' + E.solution("ch3_nibbles"))
    assert v.ok and "Your code printed (the first 30 of" in v.message and "  | block scale " in v.message, v.message
    crash = E.diagnose("ch1_tile", '    printf("reached\\n");\n    *(volatile int*)nullptr = 1;\n')
    assert "crashed" in crash.message and "  | reached" in crash.message, crash.message  # unbuffered


def test_endless_loop_is_stopped(monkeypatch):
    monkeypatch.setattr(E, "RUN_TIMEOUT_S", 3)
    v = E.diagnose("ch1_tile", "    for (volatile int spin = 0; spin >= 0; spin = spin * 0) {}\n")
    assert not v.ok and "did not finish within 3 s" in v.message, v.message


def test_show_prints_the_starter_not_the_solution(capsys):
    for name in E.names():
        E.show(name)
        out = capsys.readouterr().out
        assert E.starter(name).strip().splitlines()[0].strip() in out
        assert "your code: begin" in out and "your code: end" in out
        sol = [ln.strip() for ln in E.solution(name).splitlines() if ln.strip() not in E.starter(name)]
        assert not any(ln in out for ln in sol if len(ln) > 12), name


def test_misuse_raises_clearly():
    with pytest.raises(ValueError, match="no kernel exercise 'nope'"):
        E.diagnose("nope", "")
    with pytest.raises(TypeError, match="body must be a string"):
        E.diagnose("ch1_tile", None)


@pytest.mark.skipif(E.available("ch1_tile_cuda")[0], reason="CUDA can be built here: the exercises run")
def test_cuda_exercise_says_why_it_is_not_checked(capsys):
    assert E.check("ch1_tile_cuda", E.solution("ch1_tile_cuda")) is False
    assert "Not checked here" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("name", E.names("cuda"))
def test_cuda_scaffold_and_reference_compile_with_nvcc(name, tmp_path):
    """Compile only (no GPU needed): the CUDA scaffold with its reference body and with its starter."""
    ex = E.KERNEL_EXERCISES[name]
    for which in (ex.solution, ex.starter):
        body = E._body_text(which)
        body_file = tmp_path / "your_code.txt"
        body_file.write_text(body)
        src = tmp_path / f"{name}.cu"
        src.write_text(E._assemble(ex, body, body_file))
        cmd = ["nvcc", "-c", "-O2", "-arch=sm_90a", f"-I{E.CSRC}", f"-I{E.EXERCISES_DIR}", str(src),
               "-o", str(tmp_path / "x.o")]  # fmt: skip
        p = subprocess.run(cmd, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr


# ---- the model of chapter 6's ring, on its own ----


@pytest.mark.parametrize("stages", [1, 2, 3, 5, 8])
def test_ring_model_accepts_the_schedule_and_rejects_off_by_one_parities(stages):
    steps = 5 * stages + 1
    good = [E.ring_reference(t, stages) for t in range(steps)]
    for policy in ("producer_first", "consumer_first", "random"):
        assert E.simulate_ring(good, stages, policy, seed=stages) is None
    flipped_full = [(s, f ^ 1, e) for s, f, e in good]
    assert "race" in E.simulate_ring(flipped_full, stages, "consumer_first")
    flipped_empty = [(s, f, e ^ 1) for s, f, e in good]
    assert "deadlock" in E.simulate_ring(flipped_empty, stages)


# ---- numpy exercises: each checker accepts the solution and rejects a typical mistake ----


def test_chapter1_checkers():
    flops, nbytes = 2 * 4096 * 4096, 4 * (4096 * 4096 + 2 * 4096)
    assert E.check_decode_costs(flops, nbytes, flops / nbytes)
    assert not E.check_decode_costs(4096 * 4096, nbytes, 0.25)
    assert not E.check_decode_costs(None, None, None)
    assert E.check_gemm(lambda A, W: A @ W.T)
    assert not E.check_gemm(lambda A, W: W @ A.T)

    def median_timer(fn, warmup, reps):
        for _ in range(warmup):
            fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts))

    def mean_timer(fn, warmup, reps):
        t0 = time.perf_counter()
        for _ in range(warmup + reps):
            fn()
        return (time.perf_counter() - t0) / (warmup + reps)

    assert E.check_timer(median_timer)
    assert not E.check_timer(mean_timer)


def _dequant_q4_0(raw, interleaved=False):
    d = np.frombuffer(raw[:2], dtype="<f2")[0].astype(np.float32)
    qs = np.frombuffer(raw[2:18], dtype=np.uint8)
    if interleaved:
        nib = np.stack([qs & 0x0F, qs >> 4], axis=1).reshape(-1)
    else:
        nib = np.concatenate([qs & 0x0F, qs >> 4])
    return (nib.astype(np.float32) - 8) * d


def _quant_q8_0(xb, rounding=formats.roundf):
    d = np.float32(np.abs(xb).max() / np.float32(127))
    inv = np.float32(1) / d if d != 0 else np.float32(0)
    q = rounding((xb * inv).astype(np.float32)).astype(np.int8)
    return np.array(d, dtype="<f2").tobytes() + q.tobytes()


def _block_dot_q4_0_q8_1(w_raw, a_raw, with_offset=True):
    d_w = float(np.frombuffer(w_raw[:2], "<f2")[0])
    d_a, s = (float(v) for v in np.frombuffer(a_raw[:4], "<f2"))
    qs = np.frombuffer(w_raw[2:18], np.uint8)
    q_w = np.concatenate([qs & 0x0F, qs >> 4]).astype(np.int32)
    sumi = int(np.dot(q_w, np.frombuffer(a_raw[4:36], np.int8).astype(np.int32)))
    return d_w * (d_a * sumi - (8 * s if with_offset else 0))


def test_chapter2_checkers():
    assert E.check_dequant_q4_0(_dequant_q4_0)
    assert not E.check_dequant_q4_0(lambda raw: _dequant_q4_0(raw, interleaved=True))
    assert E.check_quantize_q8_0(_quant_q8_0)
    assert not E.check_quantize_q8_0(lambda xb: _quant_q8_0(xb, np.round))
    assert E.check_block_dot(_block_dot_q4_0_q8_1)
    assert not E.check_block_dot(lambda w, a: _block_dot_q4_0_q8_1(w, a, with_offset=False))


def test_chapter3_checkers():
    M, K = 4096, 4096
    nbytes = M * (K // 32) * 18 + 4 * K + 4 * M
    assert E.check_w4a16_bytes(nbytes, 2 * M * K / nbytes)
    bad = M * K // 2 + 4 * K + 4 * M
    assert not E.check_w4a16_bytes(bad, 2 * M * K / bad)

    def dot(a, w_bytes, offset=8.0):
        acc = 0.0
        for b, blk in enumerate(w_bytes.reshape(-1, 18)):
            d = float(blk[:2].view(np.float16)[0])
            q = np.concatenate([blk[2:] & 0x0F, blk[2:] >> 4]).astype(np.float64)
            a_b = a[32 * b : 32 * b + 32].astype(np.float64)
            acc += d * (a_b @ q - offset * a_b.sum())
        return acc

    def ridge(M, K, balance):
        N = 1
        while 2.0 * M * N * K / (M * (K // 32) * 18 + 4 * N * K + 4 * N * M) < balance:
            N += 1
        return N

    assert E.check_w4a16_dot(dot) and not E.check_w4a16_dot(lambda a, w: dot(a, w, offset=0.0))
    assert E.check_ridge_n(ridge) and not E.check_ridge_n(lambda M, K, bal: ridge(M, K, bal) - 1)
    assert (ridge(4096, 4096, 20.0), ridge(4096, 4096, 295.0)) == (6, 117)  # the solution's printed numbers


def test_chapter4_checkers():
    def dp4a(a, b, c):
        def byte(x, t):
            v = (x >> (8 * t)) & 0xFF
            return v - 256 if v >= 128 else v

        return c + sum(byte(a, t) * byte(b, t) for t in range(4))

    def dp4a_unsigned(a, b, c):
        return c + sum(((a >> 8 * t) & 0xFF) * ((b >> 8 * t) & 0xFF) for t in range(4))

    def sumi(w_words, a_words, dp4a_fn, partner=4, mask_hi=True):
        s = 0
        for i in range(4):
            v = w_words[i]
            hi = ((v >> 4) & 0x0F0F0F0F) if mask_hi else E._i32(v >> 4)
            s = dp4a_fn(v & 0x0F0F0F0F, a_words[i if partner == 4 else 2 * i], s)
            s = dp4a_fn(hi, a_words[i + 4 if partner == 4 else 2 * i + 1], s)
        return s

    assert E.check_dp4a(dp4a) and not E.check_dp4a(dp4a_unsigned)
    assert E.check_block_sumi(sumi)
    assert not E.check_block_sumi(lambda w, a, f: sumi(w, a, f, partner=1))
    assert not E.check_block_sumi(lambda w, a, f: sumi(w, a, f, mask_hi=False))
    assert E.check_overflow_c(2048) and not E.check_overflow_c(2047) and not E.check_overflow_c(3000)


def test_chapter5_checkers():
    from quantgemm_kernels import llamacpp

    info = llamacpp.available()
    if not (info["importable"] and info["type_traits"]):
        pytest.skip(f"chapter 5's checkers run ggml's vec_dot and quantizers: {info['error'] or 'not reachable'}")

    def dot(w_raw, a_raw, offset=8):
        d_w = float(np.frombuffer(w_raw[:2], "<f2")[0])
        d_a = float(np.frombuffer(a_raw[:2], "<f2")[0])
        qs = np.frombuffer(w_raw[2:18], np.uint8)
        q_w = np.concatenate([qs & 0x0F, qs >> 4]).astype(np.int32) - offset
        return d_w * d_a * int(np.dot(q_w, np.frombuffer(a_raw[2:34], np.int8).astype(np.int32)))

    def schedule(M, N, n_sm, floor=False):
        tiles = (M // 128) * (N // 128) if floor else -(-M // 128) * -(-N // 128)
        waves = -(-tiles // n_sm) if tiles else 1
        return tiles, 100 * tiles // (n_sm * waves) < 90

    def q8_0_simd(x, rounding=np.rint):
        amax = np.float32(np.abs(x).max())
        inv = np.float32(127) / amax if amax != 0 else np.float32(0)
        q = rounding((x * inv).astype(np.float32)).astype(np.int8)
        return np.array(amax / np.float32(127), dtype="<f2").tobytes() + q.tobytes()

    assert E.check_vec_dot_q4_0_q8_0(dot)
    assert not E.check_vec_dot_q4_0_q8_0(lambda w, a: dot(w, a, offset=0))
    assert E.check_mmq_schedule(schedule)
    assert not E.check_mmq_schedule(lambda M, N, n: schedule(M, N, n, floor=True))
    assert E.check_quantize_q8_0_simd(q8_0_simd)
    assert not E.check_quantize_q8_0_simd(lambda x: q8_0_simd(x, formats.roundf))


def test_chapter6_checkers():
    assert E.check_bank(lambda u, i, p: ((u * (16 + p) + 2 * i) * 4) % 32)
    assert not E.check_bank(lambda u, i, p: ((u * 16 + 2 * i) * 4) % 32)
    assert E.check_unit(lambda bb: (math.lcm(bb, 16) // bb, math.lcm(bb, 16) // 16))
    assert not E.check_unit(lambda bb: (16, bb))
    assert E.check_magic_range(-(2**22), 2**22)
    assert not E.check_magic_range(-(2**22) + 1, 2**22)
    assert not E.check_magic_range(-(2**23), 2**23)
    # the solution text's claims
    assert max(math.lcm(b, 16) // b for b in range(2, 200, 2)) == 8
    assert 16 * 8 * 127 * 32 == 520192 and 32 * 15 * 127 == 60960 and 32 * 127 * 127 == 516128
    assert 8 * 520192 <= 2**22 < 9 * 516128  # 'about 8 times over' for both


def test_chapter6_fragment_checker():
    """Exercise 6 (step 7's register fragment): the solution passes for Q8_0 (and the same idea
    for Q4_0 with step 2's masks); exchanged registers, reversed bytes and offsets that forget the
    block's d each fail, with the hint that names the mistake."""

    def word(raw, row, off):
        return int.from_bytes(raw[row, off : off + 4].tobytes(), "little")

    def solution(raw, lane):
        g, t = lane // 4, lane % 4
        return [
            word(raw, g, 2 + 4 * t),
            word(raw, g + 8, 2 + 4 * t),
            word(raw, g, 18 + 4 * t),
            word(raw, g + 8, 18 + 4 * t),
        ]

    def q4_0(raw, lane):
        g, t = lane // 4, lane % 4
        v0, v1 = word(raw, g, 2 + 4 * t), word(raw, g + 8, 2 + 4 * t)
        lo = [((v << 4) & 0xF0F0F0F0) ^ 0x80808080 for v in (v0, v1)]  # q4_0_signed_lo
        hi = [(v & 0xF0F0F0F0) ^ 0x80808080 for v in (v0, v1)]  # q4_0_signed_hi
        return [lo[0], lo[1], hi[0], hi[1]]

    assert E.check_fragment(solution)
    assert E.check_fragment(q4_0, fmt="q4_0")
    assert not E.check_fragment(lambda raw, lane: None)

    def swapped(raw, lane):
        return [solution(raw, lane)[i] for i in (0, 2, 1, 3)]

    def reversed_bytes(raw, lane):
        return [int.from_bytes(r.to_bytes(4, "little")[::-1], "little") for r in solution(raw, lane)]

    def no_d(raw, lane):
        return [word(raw, lane // 4 + 8 * (i % 2), 4 * (lane % 4) + 16 * (i // 2)) for i in range(4)]

    assert not E.check_fragment(swapped)
    assert not E.check_fragment(reversed_bytes)
    assert not E.check_fragment(no_d)


def test_f16_fragment_checker():
    """Exercise 7: step 8's fp16 fragment (Q8_0, and Q4_0 through the same rule)."""

    def solution(raw, lane, half, fmt="q8_0"):
        g, t = lane // 4, lane % 4
        offset = 8 if fmt == "q4_0" else 0

        def value(row, k):
            d = raw[row, :2].view(np.float16)[0]
            if fmt == "q8_0":
                q = int(raw[row, 2 + k].view(np.int8))
            else:
                byte = int(raw[row, 2 + k % 16])
                q = (byte & 15) if k < 16 else (byte >> 4)
            return np.float16(np.float32(d) * np.float32(q - offset))

        def reg(row, k):
            lo, hi = (int(np.array([value(row, k + e)]).view(np.uint16)[0]) for e in (0, 1))
            return hi << 16 | lo

        k0 = 16 * half + 2 * t
        return [reg(g, k0), reg(g + 8, k0), reg(g, k0 + 8), reg(g + 8, k0 + 8)]

    assert E.check_f16_fragment(solution)
    assert E.check_f16_fragment(lambda raw, lane, half: solution(raw, lane, half, "q4_0"), fmt="q4_0")
    assert not E.check_f16_fragment(lambda raw, lane, half: None)
    assert not E.check_f16_fragment(lambda raw, lane, half: [solution(raw, lane, half)[i] for i in (0, 2, 1, 3)])
    assert not E.check_f16_fragment(
        lambda raw, lane, half: [(r >> 16) | (r & 0xFFFF) << 16 for r in solution(raw, lane, half)]
    )

    def no_d(raw, lane, half):
        raw = raw.copy()
        raw[:, :2] = np.array([1.0], np.float16).view(np.uint8)  # every d as 1: the quants themselves
        return solution(raw, lane, half)

    assert not E.check_f16_fragment(no_d)


def test_tile_tokens_checker():
    """Exercise 8's checker: the rule of gemm.h passes, rules that ignore the waves, the split or the
    rounding below 128 tokens fail."""

    def solution(N, M, K, sms, waves_rule=True, split_rule=True):
        if N <= 128:
            return next(w for w in (16, 32, 64, 128) if N <= w)
        rows, n128, n256 = -(-M // 128), -(-N // 128), -(-N // 256)
        waves = lambda tiles: -(-tiles // sms)  # noqa: E731
        if not waves_rule:
            return 256 if N > 256 else 128
        if 10 * waves(rows * n128) > 17 * waves(rows * n256):
            return 256
        splits = lambda tiles: E.f16_tile_splits_reference(tiles, K, sms)  # noqa: E731
        if split_rule and 2 * n256 == n128 and splits(rows * n256) > 1 and K >= 8192:
            return 256
        return 128

    assert E.check_tile_tokens(solution)
    assert not E.check_tile_tokens(lambda N, M, K, sms: None)
    assert not E.check_tile_tokens(lambda N, M, K, sms: solution(N, M, K, sms, waves_rule=False))
    assert not E.check_tile_tokens(lambda N, M, K, sms: solution(N, M, K, sms, split_rule=False))
    assert not E.check_tile_tokens(lambda N, M, K, sms: 128 if N <= 128 else solution(N, M, K, sms))
    from quantgemm_kernels import api

    plan = api._ops().f16_plan  # the split helper the exercise gives is the launcher's
    for N, M, K in [(512, 4096, 14336), (16, 4096, 4096), (700, 257, 1056), (1, 128, 14336), (300, 300, 512)]:
        nt, splits, tiles, whole = plan(N, M, K, 132)
        assert whole == 0 or splits == 1  # one wave: every tile split, or none
        assert E.f16_tile_splits_reference(-(-M // 128) * -(-N // nt), K, 132) == splits


def test_last_wave_checker():
    """Exercise 9's checker: gemm.h's f16_plan rule passes; rules that never split the last wave,
    split it even when more than half full, or forget that split tiles are those after whole waves fail."""

    def solution(tiles, K, sms, tail=True, half=True, whole_waves=True):
        s = E.f16_tile_splits_reference(tiles, K, sms)
        if s > 1:
            return s, 0
        left = tiles % sms if whole_waves else tiles - tiles // sms
        if tail and tiles > sms and left > 0:
            ts = (
                E.f16_tile_splits_reference(left, K, sms) if half else max(2, E.f16_tile_splits_reference(left, K, sms))
            )
            if ts > 1:
                return ts, tiles - left
        return 1, tiles

    assert E.check_last_wave(solution)
    assert not E.check_last_wave(lambda tiles, K, sms: None)
    assert not E.check_last_wave(lambda tiles, K, sms: solution(tiles, K, sms, tail=False))
    assert not E.check_last_wave(lambda tiles, K, sms: solution(tiles, K, sms, half=False))
    assert not E.check_last_wave(lambda tiles, K, sms: solution(tiles, K, sms, whole_waves=False))


def test_chapter7_checkers():
    gguf = pytest.importorskip("gguf")
    from quantgemm_kernels.model import smollm2_path

    try:
        path = smollm2_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}

    def block(raw, mode="ok"):
        d, m = raw[0:4].view("<f2").astype(np.float32)
        if mode == "interleaved":
            q = np.stack([raw[4:] & 0x0F, raw[4:] >> 4], 1).reshape(-1)
        else:
            q = np.concatenate([raw[4:] & 0x0F, raw[4:] >> 4])
        return q.astype(np.float32) * d + (m if mode != "no_min" else np.float32(0))

    def gemm(Aq, Wq, mode="ok"):
        wb, ab = formats.as_blocks(Wq, "q4_1"), formats.as_blocks(Aq, "q8_1")
        qw = formats.unpack_quants(Wq, "q4_1").reshape(*wb.shape, 32).astype(np.int64)
        qa = formats.unpack_quants(Aq, "q8_1").reshape(*ab.shape, 32).astype(np.int64)
        sumi = np.einsum("nbj,mbj->nmb", qa, qw)
        d_w, m_w = wb["d"].astype(np.float64)[None], wb["m"].astype(np.float64)[None]
        d_a, s_a = ab["d"].astype(np.float64)[:, None], ab["s"].astype(np.float64)[:, None]
        return (d_w * d_a * sumi + (m_w * s_a if mode == "ok" else 0.0)).sum(axis=2)

    assert E.check_q4_1_block(block, tensors)
    assert not E.check_q4_1_block(lambda r: block(r, "interleaved"), tensors)
    assert not E.check_q4_1_block(lambda r: block(r, "no_min"), tensors)
    assert E.check_gemm_q4_1(gemm, tensors) and not E.check_gemm_q4_1(lambda a, w: gemm(a, w, "no_min"), tensors)
    assert E.check_tensor_types(lambda r: {t.name: t.tensor_type.name for t in r.tensors}, reader)
    assert not E.check_tensor_types(lambda r: {t.name: "Q4_1" for t in r.tensors}, reader)
