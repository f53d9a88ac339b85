"""tools/bank_conflicts/record.py DIR OUT COMMAND: the bank-conflict record of tools/bank_conflicts/run.sh.

Reads DIR/bank-time-pad{0,1}.txt (tiled.cu's timings), DIR/bank-ncu-pad{0,1}.csv (Nsight
Compute's counters, --csv) and DIR/bank-sass-pad{0,1}.txt (the shared-memory instructions in the
SASS, counted) and writes OUT/bank-conflicts.json: per build, the counters as Nsight
Compute printed them and the shared-memory wavefronts per warp and K step (the unit of
quantgemm_kernels.lanes.bank_table, whose model the chapter sets beside them).
"""

import csv
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

N = M = K = 2048
TILE = 32
WARPS = (N // TILE) * (M // TILE) * (TILE * TILE // 32)  # CTAs x warps per CTA (one tile per CTA)
K_STEPS = K // TILE


def ncu_metrics(path: Path) -> dict:
    text = path.read_text()
    start = text.find('"ID"')
    if start < 0:
        raise SystemExit(f"{path}: no CSV table from Nsight Compute:\n{text[-2000:]}")
    out = {}
    for row in csv.DictReader(text[start:].splitlines()):
        value = row["Metric Value"].replace(",", "")
        out[row["Metric Name"]] = {"value": float(value), "unit": row["Metric Unit"]}
    return out


def timing(path: Path) -> dict:
    text = path.read_text()
    nmse = re.search(r"nmse (\S+)", text)
    m = re.search(r"median_ms (\S+) q1_ms (\S+) q3_ms (\S+) min_ms (\S+)", text)
    if not (nmse and m):
        raise SystemExit(f"{path}: no timing in\n{text}")
    med, q1, q3, mn = (float(x) for x in m.groups())
    return {
        "check_nmse_256": float(nmse.group(1)),
        "median_ms": med,
        "q1_ms": q1,
        "q3_ms": q3,
        "min_ms": mn,
        "calls": 20,
    }


def main() -> None:
    src, out, command = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    gpu = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    builds = {}
    for pad in (1, 0):
        metrics = ncu_metrics(src / f"bank-ncu-pad{pad}.csv")
        sass = {}
        for line in (src / f"bank-sass-pad{pad}.txt").read_text().splitlines():
            count, op = line.split()
            sass[op] = int(count)
        ld = metrics["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"]["value"]
        st = metrics["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"]["value"]
        builds[f"pad{pad}"] = {
            "tiles": f"[32][{32 + pad}]",
            "ncu": metrics,
            "wavefronts_per_warp_and_k_step": {
                "load": ld / WARPS / K_STEPS,
                "store": st / WARPS / K_STEPS,
                "total": (ld + st) / WARPS / K_STEPS,
            },
            "sass_shared_instructions": sass,
            "time": timing(src / f"bank-time-pad{pad}.txt"),
        }
    record = {
        "what": "chapter 1's tiled CUDA kernel (cuda/01_fp32/2_tiled.cu) with its padded shared tiles "
        "[32][33] and with the padding removed by sed ([32][32]), N = M = K = 2048, float32",
        "gpu": gpu,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "ncu_command": command,
        "timing": "CUDA events around each of 20 calls after 3 warm-up calls (warm: the 32 MB of "
        "operands stay in L2); the kernel is bound by its shared-memory loads, not DRAM",
        "warps": WARPS,
        "k_steps": K_STEPS,
        "builds": builds,
    }
    (out / "bank-conflicts.json").write_text(json.dumps(record, indent=2) + "\n")
    for name, b in builds.items():
        w = b["wavefronts_per_warp_and_k_step"]
        print(
            f"{name} {b['tiles']}: {w['total']:.1f} wavefronts per warp and K step "
            f"(load {w['load']:.1f}, store {w['store']:.1f}); median {b['time']['median_ms']:.3f} ms"
        )


if __name__ == "__main__":
    main()
