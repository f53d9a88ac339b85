"""Summarize Nsight Compute's per-instruction source page (ncu -i REPORT --page source --csv
--print-source sass) of one kernel: warp-stall samples and executed warp instructions by opcode, and
the most sampled instructions with the three before each (a stall is charged to the instruction that
waits, often the one after the operation it waits for) and, for a branch on an mbarrier's try_wait,
that try_wait (its address names the barrier). Usage: python sass_summary.py IN.csv > OUT.txt"""
import collections
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
kernel, hdr, data = rows[0][1], rows[1], rows[2:]
S, E, SRC = (hdr.index(h) for h in ("Warp Stall Sampling (All Samples)", "Instructions Executed", "Source"))
samples = [int(r[S] or 0) for r in data]
executed = [int(r[E] or 0) for r in data]
text = [" ".join(r[SRC].split()) for r in data]
opcode = [next((w for w in t.split() if not w.startswith("@")), "?").split(".")[0] for t in text]
total_s, total_e = sum(samples), sum(executed)
print(f"kernel: {kernel}")
print(f"samples: {total_s}  warp instructions executed: {total_e}")
print("by opcode: share of samples, share of executed instructions")
by_s, by_e = collections.Counter(), collections.Counter()
for o, s, e in zip(opcode, samples, executed):
    by_s[o] += s
    by_e[o] += e
for o, s in by_s.most_common(16):
    print(f"  {o:12s} {100 * s / total_s:5.1f} % {100 * by_e[o] / total_e:5.1f} %")
print("most sampled instructions (share of samples, times executed), each after the three before it:")
for j in sorted(range(len(data)), key=lambda j: -samples[j])[:6]:
    print(f"  {100 * samples[j] / total_s:5.1f} %  x{executed[j]}  {text[j]}")
    for q in range(max(0, j - 3), j):
        print(f"              before: {text[q]}")
    if opcode[j] == "BRA" and text[j].startswith("@"):  # a branch on a predicate: the try_wait that set it
        pred = text[j].split()[0].lstrip("@!")
        for q in range(j - 1, max(0, j - 80), -1):
            if "PHASECHK" in text[q] and f" {pred}," in text[q]:
                print(f"              tests ({j - q} earlier): {text[q]}")
                break
