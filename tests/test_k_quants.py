"""Chapter 8's helpers (quantgemm_kernels.k_quants) and its exercise checkers.

* The bit map of Q4_K's 12 scale bytes is a second reading of ggml's packing: assembling the
  scales and mins bit by bit from it gives ``formats.q4_k_scale_min`` on random bytes, and every
  bit of the 16 six-bit fields appears exactly once.
* The drawing draws one cell per bit and refuses anything but 12 bytes.
* The exercise checkers accept the chapter's solutions and reject the typical mistakes with the
  hint for each (the hidden-solution pattern of the other chapters, tests/test_exercises.py).
"""

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from quantgemm_kernels import exercises as E
from quantgemm_kernels import formats as F
from quantgemm_kernels import k_quants as KQ


def test_bit_map_covers_every_field_bit_once():
    seen = [bit for row in KQ.q4_k_scale_bits() for bit in row]
    assert len(seen) == 96 and len(set(seen)) == 96
    assert set(seen) == {(f, j, k) for f in ("sc", "m") for j in range(8) for k in range(6)}


def test_bit_map_decodes_as_ggml_packs():
    r = np.random.default_rng(0)
    cases = [r.integers(0, 256, 12, dtype=np.uint8) for _ in range(300)]
    cases += [np.full(12, 0xFF, np.uint8), np.zeros(12, np.uint8)]
    cases += [
        b["scales"]
        for b in F.as_blocks(F.quantize(r.standard_normal((4, 512)).astype(np.float32), "q4_k"), "q4_k").reshape(-1)
    ]
    for q in cases:
        sc, m = KQ.decode_q4_k_scales_by_map(q)
        want_sc, want_m = F.q4_k_scale_min(q)
        np.testing.assert_array_equal(sc, want_sc)
        np.testing.assert_array_equal(m, want_m)
    # the packing written by the quantizer, read back through the map: 6-bit fields round-trip
    ls, lm = r.integers(0, 64, (1, 8)), r.integers(0, 64, (1, 8))
    sc, m = KQ.decode_q4_k_scales_by_map(F._pack_q4_k_scales(ls, lm)[0])
    np.testing.assert_array_equal(sc, ls[0])
    np.testing.assert_array_equal(m, lm[0])


@pytest.mark.parametrize("fmt", F.FORMATS)
def test_bits_by_field_add_up(fmt):
    parts = KQ.bits_by_field(fmt)
    assert set(parts) == set(F.SPECS[fmt].dtype.names)
    assert sum(parts.values()) == pytest.approx(F.bits_per_weight(fmt), abs=1e-12)


def test_bits_per_value_of_the_chapter():
    assert [F.bits_per_weight(f) for f in ("q4_0", "q4_1", "q4_k", "q6_k")] == [4.5, 5.0, 4.5, 6.5625]


def test_draw_q4_k_scales():
    from matplotlib.patches import Rectangle

    q = F.quantize(np.random.default_rng(1).standard_normal((1, 256)).astype(np.float32), "q4_k")[0, 4:16]
    fig = KQ.draw_q4_k_scales(q)
    ax = fig.axes[0]
    assert sum(isinstance(p, Rectangle) for p in ax.patches) == 96
    texts = [t.get_text() for t in ax.texts]
    assert "sc5.4" in texts and "m7.0" in texts and f"0x{int(q[0]):02x}" in texts
    sc, m = F.q4_k_scale_min(q)
    assert any(t.startswith("sc = ") and t.split("\n")[0].split()[2:] == [str(int(v)) for v in sc] for t in texts)
    with pytest.raises(ValueError, match="12 bytes"):
        KQ.draw_q4_k_scales(np.zeros(11, np.uint8))


# ---- exercise checkers -----------------------------------------------------------------------


def _scale_min(q, j, mistake=None):
    if j < 4:
        if mistake == "no_mask":
            return int(q[j]), int(q[j + 4])
        return q[j] & 63, q[j + 4] & 63
    if mistake == "nibbles_only":
        return q[j + 4] & 0xF, q[j + 4] >> 4
    if mistake == "swapped":
        return q[j + 4] >> 4 | (q[j - 4] >> 6) << 4, q[j + 4] & 0xF | (q[j] >> 6) << 4
    if mistake == "min_high_bits":
        return q[j + 4] & 0xF | (q[j - 4] >> 6) << 4, q[j + 4] >> 4 | (q[j - 4] >> 6) << 4
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def test_check_q4_k_scale_min(capsys):
    assert E.check_q4_k_scale_min(_scale_min)
    assert "Correct" in capsys.readouterr().out
    hints = {
        "no_mask": "mask with 63",
        "nibbles_only": "only the low 4 bits",
        "swapped": "low nibble of byte j + 4",
        "min_high_bits": "bits 6-7 of byte j",
    }
    for mistake, hint in hints.items():
        assert not E.check_q4_k_scale_min(lambda q, j, m=mistake: _scale_min(q, j, m))
        assert hint in capsys.readouterr().out, mistake
    assert not E.check_q4_k_scale_min(lambda q, j: None)
    assert "returned None" in capsys.readouterr().out


def _q4_k_dot(w, a, mistake=None):
    sc, m = (v.astype(np.int64) for v in F.q4_k_scale_min(w["scales"]))
    qs = w["qs"].reshape(4, 1, 32)
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).reshape(8, 32).astype(np.int64)
    dots = (q * a["qs"].reshape(8, 32)).sum(axis=1)
    bsum = a["bsums"].astype(np.int64).reshape(8, 2).sum(axis=1)
    if mistake == "one_bsum":
        bsum = a["bsums"].astype(np.int64)[:8]
    da = float(a["d"])
    first = float(w["d"]) * da * (sc * dots).sum()
    min_term = float(w["dmin"]) * (da if mistake != "no_da" else 1.0) * (m * bsum).sum()
    return {None: first - min_term, "one_bsum": first - min_term, "no_da": first - min_term}.get(
        mistake, {"no_min": first, "plus": first + min_term}.get(mistake)
    )


def test_check_q4_k_dot(capsys):
    assert E.check_q4_k_dot(_q4_k_dot)
    assert "Correct" in capsys.readouterr().out
    hints = {
        "no_min": "min term is missing",
        "plus": "subtracted, not added",
        "no_da": "needs d_a too",
        "one_bsum": "two bsums",
    }
    for mistake, hint in hints.items():
        assert not E.check_q4_k_dot(lambda w, a, m=mistake: _q4_k_dot(w, a, m))
        assert hint in capsys.readouterr().out, mistake
