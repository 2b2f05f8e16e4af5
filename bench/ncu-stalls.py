#!/usr/bin/env python3
"""ncu-stalls.py — summary of an ncu SASS source page (the CSV that
`ncu -i REP --page source --csv --print-source sass` writes, gzipped or
not): total stall samples and executed instructions, the share of each
stall reason, and the N instructions with the most samples (index, share,
times executed, main reason, SASS text).

Usage: bench/ncu-stalls.py FILE.csv[.gz] [N]   (N = 25 by default)
"""
import csv
import gzip
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    top_n = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    # Row 0 names the kernel; row 1 is the header.
    hdr, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(hdr)}
    col_s = ix["Warp Stall Sampling (All Samples)"]
    col_e = ix["Instructions Executed"]
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    num = lambda r, c: int(r[c] or 0)
    total = sum(num(r, col_s) for r in data) or 1
    print(path, "samples", total, "instructions", sum(num(r, col_e) for r in data))
    share = {s: sum(num(r, ix[s]) for r in data) * 100.0 / total for s in stalls}
    print(" ".join(f"{k[6:]}={v:.1f}" for k, v in sorted(share.items(), key=lambda x: -x[1])
                   if v >= 1))
    top = sorted(range(len(data)), key=lambda i: -num(data[i], col_s))[:top_n]
    for i in sorted(top):
        r = data[i]
        main_reason = max(stalls, key=lambda h: num(r, ix[h]))
        print(f"{i:5d} {num(r, col_s) * 100.0 / total:5.1f}% ex={r[col_e]:>8} "
              f"{main_reason[6:]:12s} {r[1].strip()[:70]}")


if __name__ == "__main__":
    main()
