#!/usr/bin/env python3
"""scripts/bench-wire's summary: RESULTS HEAD UPDATE BENCHMARKS.md.

RESULTS has one line per (round, program, load): `round=R prog=P kind=K
requests=N seconds=S bytes=B errors=E runs=X run_ns=T` (bench_wire load's
first line). Prints, per load, each program's kernel run time per packet
(median and quartiles over the rounds) and the per-round ratios to the
reference program `ref` (also net of the floor `pass`), then the headline
rows of BENCHMARKS.md as markdown; with UPDATE = 1 writes them there
(replacing the rows that start with `| XDP on the wire`).
"""

import re
import statistics
import sys
import time

LOADS = {
    "short": "short connections",
    "paced": "established (paced keep-alive)",
    "bulk": "bulk (one stream)",
}
NAMES = {
    "ref": "minimal (ref_lb)",
    "dr": "rvs DR",
    "nat": "rvs NAT",
    "fnat": "rvs FULLNAT",
    "dr0": "rvs DR, before",
    "nat0": "rvs NAT, before",
    "fnat0": "rvs FULLNAT, before",
    "pass": "XDP_PASS floor",
}
ROW = "| XDP on the wire"


def quart(xs):
    """(median, q1, q3) of xs."""
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return statistics.median(xs), q[0], q[2]


def fmt(q, unit=""):
    m, a, b = q
    if unit == "x":
        return f"{m:.2f}× [{a:.2f}–{b:.2f}]"
    return f"{m:,.0f} [{a:,.0f}–{b:,.0f}]"


def main():
    results, head, update, bench = sys.argv[1:5]
    rows = []
    with open(results) as f:
        for line in f:
            kv = dict(p.split("=", 1) for p in line.split())
            rows.append(kv)
    head = open(head).read().strip()
    # per[(load, prog)][round] = ns per packet; info for the other columns.
    per, info = {}, {}
    for r in rows:
        runs, ns = int(r["runs"]), int(r["run_ns"])
        key = (r["kind"], r["prog"])
        if runs == 0:
            print(f"round {r['round']} {key}: no runs counted", file=sys.stderr)
            continue
        per.setdefault(key, {})[r["round"]] = ns / runs
        i = info.setdefault(key, {"pkt": [], "rps": [], "err": 0, "mbps": []})
        req, secs = int(r["requests"]), float(r["seconds"])
        if req:
            i["pkt"].append(runs / req)
        i["rps"].append(req / secs)
        i["mbps"].append(int(r["bytes"]) * 8 / secs / 1e6)
        i["err"] += int(r["errors"])
    loads = [k for k in LOADS if any(l == k for l, _ in per)]
    progs = [p for p in NAMES if any(q == p for _, q in per)]
    med = {}
    for load in loads:
        print(f"\n{LOADS[load]}: kernel run time per packet of the director's program, ns "
              "(median [quartiles] over rounds); ratio to ref per round")
        for prog in progs:
            v = per.get((load, prog))
            if not v:
                continue
            q = quart(list(v.values()))
            med[(load, prog)] = q
            i = info[(load, prog)]
            extra = (f"{statistics.median(i['pkt']):.1f} packets/request, "
                     if i["pkt"] and load != "bulk" else "")
            rate = (f"{statistics.median(i['mbps']):,.0f} Mbit/s" if load == "bulk"
                    else f"{statistics.median(i['rps']):,.0f} requests/s")
            line = f"  {NAMES[prog]:<18} {fmt(q):>24} ns  ({extra}{rate}, errors {i['err']})"
            ref = per.get((load, "ref"), {})
            floor = per.get((load, "pass"), {})
            if prog != "ref" and ref:
                rat = [v[k] / ref[k] for k in v if k in ref]
                if rat:
                    med[(load, prog, "x")] = quart(rat)
                    line += f"  ratio {fmt(quart(rat), 'x')}"
                net = [(v[k] - floor[k]) / (ref[k] - floor[k])
                       for k in v if k in ref and k in floor and ref[k] > floor[k]]
                if net and prog != "pass":
                    med[(load, prog, "net")] = quart(net)
                    line += f", net of floor {fmt(quart(net), 'x')}"
            print(line)
        # --before: each program against its build before, per round.
        for prog in ("dr", "nat", "fnat"):
            a, b = per.get((load, prog), {}), per.get((load, prog + "0"), {})
            rat = [a[k] / b[k] for k in a if k in b]
            if rat:
                print(f"  {NAMES[prog]} / before: {fmt(quart(rat), 'x')} "
                      f"(per round: {' '.join(f'{x:.2f}' for x in rat)})")
    md = markdown(loads, med, head)
    print("\nBENCHMARKS.md headline rows:\n")
    print("\n".join(md))
    if update == "1":
        write(bench, md)


def markdown(loads, med, head):
    """The headline rows, one per load."""
    m = re.search(r"\((.*?), (\d+) CPUs, (\w+|\?), load ([\d. ]+)\)", head)
    kernel, commit, loadavg = (m.group(1), m.group(3), m.group(4)) if m else ("?", "?", "?")
    cmd = head.lstrip("# ").split(" (")[0]
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    # BENCHMARKS.md's machines: A = the AMD EPYC guest, B = the Intel Xeon one.
    cpu = open("/proc/cpuinfo").read()
    machine = "A" if "AMD" in cpu else "B" if "Intel" in cpu else "?"
    out = []
    for load in loads:
        rvs = [p for p in ("dr", "nat", "fnat") if (load, p) in med]
        if (load, "ref") not in med or not rvs:
            continue
        value = " / ".join(f"{med[(load, p)][0]:,.0f}" for p in rvs) + " ns"
        names = " / ".join(NAMES[p].replace("rvs ", "") for p in rvs)
        ratio = " / ".join(f"{med[(load, p, 'x')][0]:.2f}×" for p in rvs)
        quarts = "; ".join(f"{med[(load, p, 'x')][1]:.2f}–{med[(load, p, 'x')][2]:.2f}" for p in rvs)
        floor = (f"; XDP_PASS floor {med[(load, 'pass')][0]:,.0f} ns" if (load, "pass") in med else "")
        net = ""
        if all((load, p, "net") in med for p in rvs):
            net = "; net of the floor " + " / ".join(f"{med[(load, p, 'net')][0]:.2f}×" for p in rvs)
        out.append(
            f"{ROW}: {LOADS[load]} | rvs {names}, kernel run time per packet (BPF stats), TCP | "
            f"{value} | minimal balancer `bpf/ref_lb.c` (DR), {med[(load, 'ref')][0]:,.0f} ns{floor} | "
            f"{ratio} (quartiles {quarts}{net}) | `{cmd}` | {when} | {commit} | "
            f"{machine}, {kernel}, load {loadavg.strip()} |")
    return out


def write(path, md):
    """Replace the wire rows of BENCHMARKS.md's headline table (or put
    them first in it)."""
    lines = open(path).read().split("\n")
    old = [i for i, l in enumerate(lines) if l.startswith(ROW)]
    if old:
        at = old[0]
        lines = [l for l in lines if not l.startswith(ROW)]
    else:
        sep = next(i for i, l in enumerate(lines) if l.startswith("|---|"))
        at = sep + 1
    lines[at:at] = md
    open(path, "w").write("\n".join(lines))
    print(f"\n{path}: {len(md)} rows written", file=sys.stderr)


if __name__ == "__main__":
    main()
