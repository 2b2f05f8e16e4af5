#!/usr/bin/env python3
"""sglang_apply.py — what one apply() of the SGLang linear method costs
end to end (until it returns, and until the stream has y) (client/python/projd_sglang.py: the registration lookups, the
stream sync, the PROJECT round trip, the daemon's work), for one copy of
the module or two side by side (an A/B in the same run, the applies of A
and B alternating), what the bare round trip under it costs (project() of one op on buffers
registered once), and what the two ways of naming a tensor's allocation
cost alone (projd.cuda_describe against projd.cuda_allocation).

Usage: sglang_apply.py URL DIR_A [DIR_B] [--reps N] [--json OUT] [--ring SIDES]
  URL    a projd on the cuda backend (bench/sglang-apply.sh starts one)
  DIR_*  folders holding a projd_sglang.py (the binding is the one on
         sys.path, i.e. client/python); B is timed against A
  --ring A, B or AB: those sides' clients attach a shared-memory ring
         (projd.Client(ring=True)); the same folder twice with --ring B
         is nng against the ring
Prints a table, medians in microseconds; --json writes them.
"""

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "client", "python"))

import torch  # noqa: E402

import projd  # noqa: E402


def load_module(folder, tag):
    spec = importlib.util.spec_from_file_location("projd_sglang_" + tag, os.path.join(folder, "projd_sglang.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def median_us(fn, reps):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("dirs", nargs="+", metavar="DIR")
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--json")
    ap.add_argument("--ring", default="", choices=["", "A", "B", "AB"],
                    help="sides whose client sends through a shared-memory ring")
    ap.add_argument("--profile", action="store_true",
                    help="then profile the last module's apply() at m = 1 (cProfile, top functions)")
    a = ap.parse_args()
    if len(a.dirs) > 2:
        ap.error("one or two module folders")
    torch.manual_seed(1)
    sides = []
    for tag, d in zip("AB", a.dirs):
        mod = load_module(d, tag)
        ring = tag in a.ring
        client = projd.Client(a.url, name="sglang_apply-" + tag, ring=ring)  # each copy its own cache
        if ring:
            d += " (ring)"

        L = client.layers[0]
        meth = mod.ProjdLinearMethod(L.name, client)
        layer = torch.nn.Module()
        meth.create_weights(layer, L.k, [L.n], L.k, L.n, torch.bfloat16)
        sides.append((tag, d, mod, client, meth, layer, L))
    L = sides[0][6]
    ms = [m for m in (1, 8, 64) if m <= L.max_m]
    xs = {m: torch.randn(m, L.k).to(torch.bfloat16).cuda() for m in ms}
    rows = []
    for m in ms:
        for s in sides:  # warm: registrations made, graphs and caches primed
            for _ in range(50):
                s[4].apply(s[5], xs[m])
        ts = {s[0]: [] for s in sides}
        tss = {s[0]: [] for s in sides}
        stream = torch.cuda.current_stream()
        for _ in range(a.reps):  # alternate, so drift hits both alike
            for s in sides:
                t0 = time.perf_counter()
                s[4].apply(s[5], xs[m])
                t1 = time.perf_counter()
                stream.synchronize()  # and until y is written
                t2 = time.perf_counter()
                ts[s[0]].append(t1 - t0)
                tss[s[0]].append(t2 - t0)
        med = {k: statistics.median(v) * 1e6 for k, v in ts.items()}
        meds = {k: statistics.median(v) * 1e6 for k, v in tss.items()}
        rows.append({"m": m, **{"apply_us_" + k: round(v, 2) for k, v in med.items()},
                     **{"apply_sync_us_" + k: round(v, 2) for k, v in meds.items()}})
    # The bare round trip under apply(): project() of one op on buffers
    # registered once, no lookup, no stream sync (the binding and the daemon).
    c0 = sides[0][3]
    bare = {}
    for m in ms:
        y = torch.empty(m, L.n, dtype=torch.bfloat16, device="cuda")
        rx, ry = c0.register_device_pointer(xs[m].data_ptr()), c0.register_device_pointer(y.data_ptr())
        torch.cuda.synchronize()
        op = projd.Op(layer=L.index, m=m, n=L.n, x_buf=rx.id, x_off=rx.offset, x_ld=L.k,
                      y_buf=ry.id, y_off=ry.offset, y_ld=L.n)
        for _ in range(50):
            c0.project([op])
        bare[m] = round(median_us(lambda: c0.project([op]), a.reps), 2)
        c0.unregister(rx.id)
        c0.unregister(ry.id)
    for r in rows:
        r["project_us"] = bare[r["m"]]
    p = xs[ms[0]].data_ptr()
    look = {
        "cuda_describe_us": round(median_us(lambda: projd.cuda_describe(p), a.reps), 2),
        "cuda_allocation_us": round(median_us(lambda: projd.cuda_allocation(p), a.reps), 2),
    }
    print("layer %s (%d x %d), %d applies per side and m, medians in us" % (L.name, L.n, L.k, a.reps))
    for tag, d, *_ in sides:
        print("  %s: %s" % (tag, d))
    print("apply: until apply() returns; +sync: until the stream has y (apply, then a stream sync)")
    head = "%6s %10s %10s %10s" % ("m", "project()", "A apply", "A +sync")
    if len(sides) == 2:
        head += " %10s %10s %8s %8s" % ("B apply", "B +sync", "A/B", "A/B sync")
    print(head)
    for r in rows:
        line = "%6d %10.1f %10.1f %10.1f" % (r["m"], r["project_us"], r["apply_us_A"], r["apply_sync_us_A"])
        if len(sides) == 2:
            line += " %10.1f %10.1f %8.3f %8.3f" % (
                r["apply_us_B"], r["apply_sync_us_B"], r["apply_us_A"] / r["apply_us_B"],
                r["apply_sync_us_A"] / r["apply_sync_us_B"])
        print(line)
    print("lookup alone: cuda_describe %.1f us, cuda_allocation %.1f us (%.1fx)"
          % (look["cuda_describe_us"], look["cuda_allocation_us"],
             look["cuda_describe_us"] / look["cuda_allocation_us"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"layer": L.name, "n": L.n, "k": L.k, "reps": a.reps, "dirs": a.dirs,
                       "device": torch.cuda.get_device_name(), "rows": rows, "lookup": look}, f, indent=1)
    if a.profile:
        import cProfile
        import pstats

        s = sides[-1]
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(a.reps):
            s[4].apply(s[5], xs[ms[0]])
        prof.disable()
        torch.cuda.synchronize()
        print("profile of %s's apply() at m = %d, %d calls:" % (s[0], ms[0], a.reps))
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(25)
    for s in sides:
        s[2].release_registrations(s[3])
        s[3].close()


if __name__ == "__main__":
    main()
