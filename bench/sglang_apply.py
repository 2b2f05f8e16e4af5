#!/usr/bin/env python3
"""sglang_apply.py — what one apply() of the SGLang linear method costs
end to end (until it returns, and until the stream has y) (client/python/projd_sglang.py: the registration lookups, the
stream sync, the PROJECT round trip, the daemon's work), for one copy of
the module or two side by side (an A/B in the same run, the applies of A
and B alternating), what the bare round trip under it costs (project() of one op on buffers
registered once), and what the two ways of naming a tensor's allocation
cost alone (projd.cuda_describe against projd.cuda_allocation).

Usage: sglang_apply.py URL DIR_A [DIR_B] [--reps N] [--json OUT] [--ring SIDES]
                       [--gap-us G] [--breakdown [--gaps G,...] [--no-table]]
  URL    a projd on the cuda backend (bench/sglang-apply.sh starts one)
  DIR_*  folders holding a projd_sglang.py (the binding is the one on
         sys.path, i.e. client/python); B is timed against A
  --ring A, B or AB: those sides' clients attach a shared-memory ring
         (projd.Client(ring=True)); the same folder twice with --ring B
         is nng against the ring
  --gap-us G: the host is busy for G µs (a spin) before each timed apply,
         as a model's other layers keep it between two projections: the
         daemon's and the client's threads that spin for ring.spin_us may
         have gone to sleep by then
  --breakdown: then time the pieces of one apply() at each m on the last
         side's client, one at a time (the tensor, the stream, the events,
         the lookup, the op array, the round trip with and without events,
         after each gap: 0 and 200 µs and --gap-us, or --gaps); --no-table
         skips the A/B table (and project(), the lookup) before it
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


def spin_us(us):
    """Keep the host busy for us microseconds (a gap between projections)."""
    if us > 0:
        end = time.perf_counter() + us * 1e-6
        while time.perf_counter() < end:
            pass


def median_us(fn, reps, gap=0.0):
    ts = []
    for _ in range(reps):
        spin_us(gap)
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def breakdown(side, xs, ms, reps, gaps):
    """The pieces of one apply() on side's client, timed one at a time:
    what the binding adds around the round trip, and the round trip with
    the apply's events (ACCEPT_REPLY: the reply at launch) and without
    (the reply once y is written), after each gap."""
    _, _, mod, client, meth, layer, L = side
    dev = torch.cuda.current_device()
    stream = torch.cuda.current_stream(dev)
    ev_x = torch.cuda.Event(interprocess=True)
    ev_y = torch.cuda.Event(interprocess=True)
    hx, hy = bytes(ev_x.ipc_handle()), bytes(ev_y.ipc_handle())
    out = {}
    for m in ms:
        y = torch.empty(m, L.n, dtype=torch.bfloat16, device="cuda")
        rx, ry = client.register_device_pointer(xs[m].data_ptr()), client.register_device_pointer(y.data_ptr())
        packed = projd.PackedOps(1)
        packed.set(0, L.index, m, L.n, rx.id, rx.offset, L.k, ry.id, ry.offset, L.n)
        torch.cuda.synchronize()
        p = xs[m].data_ptr()

        def with_events(flags=projd.PF_ACCEPT_REPLY):
            ev_x.record(stream)
            client.project_packed(packed, 1, flags, hx, hy)
            stream.wait_event(ev_y)

        row = {
            "torch.empty": median_us(lambda: torch.empty(m, L.n, dtype=torch.bfloat16, device="cuda"), reps),
            "current_stream": median_us(lambda: torch.cuda.current_stream(dev), reps),
            "event record": median_us(lambda: ev_x.record(stream), reps),
            "stream wait_event": median_us(lambda: stream.wait_event(ev_y), reps),
            "cuda_allocation": median_us(lambda: projd.cuda_allocation(p), reps),
            "PackedOps.set": median_us(
                lambda: packed.set(0, L.index, m, L.n, rx.id, rx.offset, L.k, ry.id, ry.offset, L.n), reps),
            "Op list + project's checks": median_us(lambda: client._ops(
                [projd.Op(layer=L.index, m=m, n=L.n, x_buf=rx.id, x_off=rx.offset, x_ld=L.k,
                          y_buf=ry.id, y_off=ry.offset, y_ld=L.n)]), reps),
        }
        for _ in range(50):
            with_events()
        torch.cuda.synchronize()
        for g in gaps:
            row["round trip, reply at completion, gap %g" % g] = median_us(
                lambda: client.project_packed(packed, 1), reps, g)
            row["round trip + events, reply at completion, gap %g" % g] = median_us(lambda: with_events(0), reps, g)
            torch.cuda.synchronize()
            row["round trip + events, reply at launch, gap %g" % g] = median_us(with_events, reps, g)
            torch.cuda.synchronize()
            row["apply(), gap %g" % g] = median_us(lambda: meth.apply(layer, xs[m]), reps, g)
            torch.cuda.synchronize()
        client.unregister(rx.id)
        client.unregister(ry.id)
        out[m] = {k: round(v, 2) for k, v in row.items()}
    return out


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
    ap.add_argument("--gap-us", type=float, default=0.0,
                    help="host busy this many µs before each timed apply (default 0)")
    ap.add_argument("--breakdown", action="store_true",
                    help="then time the pieces of an apply() on the last side's client")
    ap.add_argument("--gaps", help="the breakdown's gaps in µs, comma-separated (default 0,200 and --gap-us)")
    ap.add_argument("--no-table", action="store_true", help="only the breakdown")
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
    for m in ms if not a.no_table else ():
        for s in sides:  # warm: registrations made, graphs and caches primed
            for _ in range(50):
                s[4].apply(s[5], xs[m])
        ts = {s[0]: [] for s in sides}
        tss = {s[0]: [] for s in sides}
        stream = torch.cuda.current_stream()
        for _ in range(a.reps):  # alternate, so drift hits both alike
            for s in sides:
                spin_us(a.gap_us)
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
    for m in ms if not a.no_table else ():
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
    print("layer %s (%d x %d), %d applies per side and m, medians in us, host busy %g us before each"
          % (L.name, L.n, L.k, a.reps, a.gap_us))
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
    parts = None
    if a.breakdown:
        gaps = sorted({0.0, 200.0, a.gap_us}) if not a.gaps else [float(g) for g in a.gaps.split(",")]
        parts = breakdown(sides[-1], xs, ms, a.reps, gaps)
        names = list(parts[ms[0]])
        print("breakdown on %s's client%s, medians in us:" % (sides[-1][0], " (ring)" if sides[-1][0] in a.ring else ""))
        print("%-48s" % "piece" + "".join("%10s" % ("m=%d" % m) for m in ms))
        for k in names:
            print("%-48s" % k + "".join("%10.1f" % parts[m][k] for m in ms))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"layer": L.name, "n": L.n, "k": L.k, "reps": a.reps, "dirs": a.dirs, "ring": a.ring,
                       "gap_us": a.gap_us, "device": torch.cuda.get_device_name(), "rows": rows,
                       "lookup": look, "breakdown": parts}, f, indent=1)
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
