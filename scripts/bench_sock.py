#!/usr/bin/env python3
"""bench_sock.py: the sock data plane vs a direct connection, the proxy data
plane and nftables DNAT, in one run on loopback (driver: scripts/bench-sock).

One nginx backend (`return 200 "ok\\n"`, one worker, pinned on CPU 0); wrk
(`-t1 -c32 --latency`, pinned on CPU 1) measures, for each path:
  * new connections/s and their latency (`Connection: close`),
  * keep-alive requests/s and latency p50/p99.
Paths:
  direct  wrk -> 127.0.0.1:BACKEND
  sock    wrk inside a cgroup -> VIP 127.79.0.1:80; rvsd --dataplane sock
          (programs attached to that cgroup) puts the backend into connect()
  proxy   wrk -> 127.0.0.1:PROXY; rvsd --dataplane proxy (pinned on CPU 0,
          beside the backend: the machine has two cores)
  dnat    wrk -> 127.79.0.2:80; an nftables `nat output` rule DNATs to the
          backend
wrk's latency starts at a request's first write, so it leaves out connect(),
where the sock plane's programs run, and with `Connection: close` it moves with
which CPU is the bottleneck (time a connection waits in wrk's own loop before
its write is not counted; time it waits for nginx is): its p50 is not a
per-connection cost. So each path is also measured one connection at a time
by crates/sock/examples/connect_latency (pinned on CPU 1, in the cgroup for
sock): connect() alone, and the whole cycle connect + request + response +
close; and the mean latency under load is given as connections / rate
(Little's law), which counts all of a connection's time.
The method is made for a noisy, shared 2-core machine: the paths are run in
--rounds rounds, every path once per round (each round starts at the next path,
so none always runs first), each repetition on a freshly started rvsd / freshly
added nft rule; the table gives each path's median over the rounds and, for the
ratios, the median of the **per-round** ratios (the two paths measured a minute
apart, not medians of separate blocks), with the sock / direct interquartile
range and how many rounds were within 5 %. Every client (wrk, connect_latency)
runs in a cgroup v2 of its own: sock in the one the programs are attached to,
the other paths in an empty sibling, so the cgroup is not a difference between
paths. rvsd's own CPU time (/proc/PID/stat, all threads) is read over each of
its paths' measurements and reported per second.
Everything started is stopped and the nft table and cgroups removed, also on
failure or Ctrl-C. Bounded: each wrk run has a -d and a subprocess timeout.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

VIP_SOCK = "127.79.0.1"
VIP_DNAT = "127.79.0.2"
NFT_TABLE = "rvs_bench_sock"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(host, port, limit=10.0):
    end = time.time() + limit
    while time.time() < end:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{host}:{port} did not open")


def wait_path(path, limit=10.0):
    end = time.time() + limit
    while time.time() < end:
        if os.path.exists(path):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{path} did not appear")


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="rvs-bench-sock-")
        self.procs = []
        self.cgroup = None
        self.plain = None
        self.nft = False
        self.stats_was = None
        # Per phase of the sock path: {program: [(runs, ns)]} (--prog-stats).
        self.progs = {}

    # ---------------------------------------------------------------- setup
    def spawn(self, cmd, **kw):
        p = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, **kw)
        self.procs.append(p)
        return p

    def stop(self, p):
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=5)
        if p in self.procs:
            self.procs.remove(p)

    def backend(self):
        port = free_port()
        conf = os.path.join(self.tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""daemon off; worker_processes 1; pid {self.tmp}/nginx.pid;
error_log {self.tmp}/nginx.err; events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{port} reuseport backlog=4096; location / {{ return 200 "ok\\n"; }} }} }}
""")
        self.spawn(["taskset", "-c", "0", "nginx", "-c", conf, "-p", self.tmp])
        wait_port("127.0.0.1", port)
        return port

    def cgroup_make(self):
        root = None
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[2] == "cgroup2":
                    root = parts[1]
                    break
        if root is None:
            raise RuntimeError("no cgroup v2 hierarchy mounted")
        self.cgroup_root = root
        self.cgroup = os.path.join(root, f"rvsbenchsock{os.getpid()}")
        os.mkdir(self.cgroup)
        # The other paths' clients: a sibling with nothing attached.
        self.plain = os.path.join(root, f"rvsbenchplain{os.getpid()}")
        os.mkdir(self.plain)

    def rvsd(self, plane, extra):
        sock = os.path.join(self.tmp, f"rvsd-{plane}.sock")
        if os.path.exists(sock):
            os.unlink(sock)
        cmd = ["taskset", "-c", "0", self.args.rvsd, "--dataplane", plane, "--socket", sock,
               "--log-level", "warn"] + extra
        p = self.spawn(cmd)
        wait_path(sock)
        time.sleep(0.2)
        return p, sock

    def adm(self, sock, *a):
        subprocess.run([self.args.rvsadm, *a], env={**os.environ, "RVS_SOCKET": sock},
                       check=True, timeout=10, stdout=subprocess.DEVNULL)

    def nft_add(self, backend):
        rules = f"""table ip {NFT_TABLE} {{
  chain out {{
    type nat hook output priority -100; policy accept;
    ip daddr {VIP_DNAT} tcp dport 80 dnat to 127.0.0.1:{backend}
  }}
}}
"""
        subprocess.run(["nft", "-f", "-"], input=rules.encode(), check=True, timeout=10)
        self.nft = True

    def cleanup(self):
        self.stats_on(False)
        for p in list(self.procs):
            self.stop(p)
        if self.nft:
            subprocess.run(["nft", "delete", "table", "ip", NFT_TABLE], timeout=10)
            self.nft = False
        for cg in (self.cgroup, self.plain):
            if not cg or not os.path.isdir(cg):
                continue
            for _ in range(50):
                try:
                    with open(os.path.join(cg, "cgroup.procs")) as f:
                        pids = f.read().split()
                    for pid in pids:
                        with open(os.path.join(self.cgroup_root, "cgroup.procs"), "w") as f:
                            f.write(pid)
                    os.rmdir(cg)
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                print(f"bench_sock: could not remove cgroup {cg}", file=sys.stderr)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------- measure
    @staticmethod
    def in_cgroup(cgroup, cmd):
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && shift && exec "$@"',
                cgroup, "--"] + cmd

    def wrk(self, url, close, cgroup):
        a = self.args
        cmd = ["taskset", "-c", "1", "wrk", "-t1", f"-c{a.connections}", f"-d{a.duration}s",
               "--latency"]
        if close:
            cmd += ["-H", "Connection: close"]
        cmd.append(url)
        cmd = self.in_cgroup(cgroup, cmd)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.duration + 30,
                             check=True).stdout
        rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        errs = re.search(r"Socket errors: (.*)", out)
        non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        if non2xx:
            raise RuntimeError(f"{url}: non-2xx answers: {out}")

        def pct(p):
            m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
            v, unit = float(m.group(1)), m.group(2)
            return v * {"us": 1, "ms": 1000, "s": 1e6}[unit]

        return {"rate": rate, "p50": pct(50), "p99": pct(99),
                "mean": a.connections * 1e6 / rate if rate else 0.0,
                "errors": errs.group(1) if errs else ""}

    def cycle(self, addr, cgroup):
        """One connection at a time (connect_latency): connect() and the
        whole cycle, p50/p99 in µs."""
        a = self.args
        cmd = ["taskset", "-c", "1", a.connect_latency, addr, str(a.cycles), "200"]
        cmd = self.in_cgroup(cgroup, cmd)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=150,
                             check=True).stdout
        return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", out)}

    @staticmethod
    def cpu_ticks(pid):
        """utime + stime of process `pid`, all its threads (clock ticks)."""
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    def prog_stats(self):
        """run_cnt / run_time_ns of the BPF programs attached to the sock
        path's cgroup, by name (`bpftool`; counted while
        kernel.bpf_stats_enabled)."""
        def bpftool(*a):
            return json.loads(subprocess.run(["bpftool", "--json", *a], capture_output=True,
                                             text=True, timeout=30, check=True).stdout)

        got = {}
        for att in bpftool("cgroup", "show", self.cgroup):
            prog = bpftool("prog", "show", "id", str(att["id"]))
            name = prog.get("name", "?")
            cnt, ns = got.get(name, (0, 0))
            got[name] = (cnt + prog.get("run_cnt", 0), ns + prog.get("run_time_ns", 0))
        return got

    def stats_on(self, on):
        """Turn kernel.bpf_stats_enabled on (remembering the old value) or back."""
        path = "/proc/sys/kernel/bpf_stats_enabled"
        if on:
            with open(path) as f:
                self.stats_was = f.read().strip()
            with open(path, "w") as f:
                f.write("1")
        elif self.stats_was is not None:
            with open(path, "w") as f:
                f.write(self.stats_was)
            self.stats_was = None

    def run_path(self, name, backend):
        """One repetition of path `name`: a dict of figures keyed (kind, name)."""
        stop = None
        cg = self.plain
        if name == "direct":
            url = f"http://127.0.0.1:{backend}/"
        elif name == "sock":
            stop, sock = self.rvsd("sock", ["--cgroup", self.cgroup])
            self.adm(sock, "-A", "-t", f"{VIP_SOCK}:80", "-s", "rr")
            self.adm(sock, "-a", "-t", f"{VIP_SOCK}:80", "-r", f"127.0.0.1:{backend}", "-m")
            url = f"http://{VIP_SOCK}:80/"
            cg = self.cgroup
        elif name == "proxy":
            port = free_port()
            stop, sock = self.rvsd("proxy", [])
            self.adm(sock, "-A", "-t", f"127.0.0.1:{port}", "-s", "rr")
            self.adm(sock, "-a", "-t", f"127.0.0.1:{port}", "-r", f"127.0.0.1:{backend}", "-m")
            wait_port("127.0.0.1", port)
            url = f"http://127.0.0.1:{port}/"
        elif name == "dnat":
            self.nft_add(backend)
            url = f"http://{VIP_DNAT}:80/"
        else:
            raise ValueError(name)
        out = {}
        progs = name == "sock" and self.args.prog_stats
        try:
            if progs:
                self.stats_on(True)
                before = self.prog_stats()
            t0 = time.monotonic()
            c0 = self.cpu_ticks(stop.pid) if stop is not None else 0
            for kind, close in (("close", True), ("keep", False)):
                for k, v in self.wrk(url, close, cg).items():
                    out[(kind, k)] = v
                if progs:
                    before = self.note_progs(kind, before)
            if self.args.cycles:
                for k, v in self.cycle(url.split("//")[1].rstrip("/"), cg).items():
                    out[("one", k)] = v
                if progs:
                    self.note_progs("one", before)
            if stop is not None:
                ticks = self.cpu_ticks(stop.pid) - c0
                out[("rvsd", "cpu_ms_per_s")] = (ticks * 1000 / os.sysconf("SC_CLK_TCK")
                                                 / (time.monotonic() - t0))
        finally:
            if progs:
                self.stats_on(False)
            if stop is not None:
                self.stop(stop)
            if name == "dnat":
                subprocess.run(["nft", "delete", "table", "ip", NFT_TABLE], timeout=10)
                self.nft = False
        return out

    def note_progs(self, phase, before):
        now = self.prog_stats()
        for prog, (cnt, ns) in now.items():
            c0, n0 = before.get(prog, (0, 0))
            self.progs.setdefault(phase, {}).setdefault(prog, []).append((cnt - c0, ns - n0))
        return now

    def main(self):
        a = self.args
        self.cgroup_make()
        backend = self.backend()
        paths = a.paths.split(",")
        res = {p: [] for p in paths}
        t0 = time.time()
        load = [os.getloadavg()[0]]
        for rnd in range(a.rounds):
            # Each round starts at the next path: no path always runs first.
            order = paths[rnd % len(paths):] + paths[:rnd % len(paths)]
            for p in order:
                res[p].append(self.run_path(p, backend))
                shown = {f"{k[0]}.{k[1]}": v for k, v in res[p][-1].items()
                         if not isinstance(v, str)}
                print(f"round {rnd + 1} {p}: {shown}", file=sys.stderr)
            load.append(os.getloadavg()[0])
        took = time.time() - t0
        self.report(paths, res, took, load)

    def report(self, paths, res, took, load):
        a = self.args
        rows = [
            ("New connections/s (wrk `Connection: close`)", "higher", ("close", "rate"), "{:,.0f}"),
            ("↳ latency p50, new connection (µs)", "lower", ("close", "p50"), "{:,.0f}"),
            ("↳ latency p99, new connection (µs)", "lower", ("close", "p99"), "{:,.0f}"),
            ("↳ mean latency, new connection (µs, connections / rate)", "lower",
             ("close", "mean"), "{:,.0f}"),
            ("Keep-alive requests/s (wrk)", "higher", ("keep", "rate"), "{:,.0f}"),
            ("↳ latency p50, keep-alive (µs)", "lower", ("keep", "p50"), "{:,.0f}"),
            ("↳ latency p99, keep-alive (µs)", "lower", ("keep", "p99"), "{:,.0f}"),
        ]
        if a.cycles:
            rows += [
                ("One connection at a time: connect() p50 (µs)", "lower",
                 ("one", "connect_p50_us"), "{:,.1f}"),
                ("↳ connect() p99 (µs)", "lower", ("one", "connect_p99_us"), "{:,.1f}"),
                ("↳ connect + request + response + close, p50 (µs)", "lower",
                 ("one", "cycle_p50_us"), "{:,.1f}"),
                ("↳ connect + request + response + close, p99 (µs)", "lower",
                 ("one", "cycle_p99_us"), "{:,.1f}"),
            ]
        n = a.rounds

        def med(p, key):
            return statistics.median(r[key] for r in res[p])

        def ratios(p, q, key):
            """Per-round ratios p / q (rounds where both measured > 0)."""
            return [x[key] / y[key] for x, y in zip(res[p], res[q]) if y[key] > 0]

        def quartiles(v):
            if len(v) < 2:
                return v[0], v[0]
            q = statistics.quantiles(v, n=4, method="inclusive")
            return q[0], q[2]

        lines = []
        lines.append(f"Machine: nproc {os.cpu_count()}, kernel {os.uname().release}. "
                     f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; run took "
                     f"{took / 60:.1f} min; load average (1 min) {load[0]:.2f} at start, "
                     f"{load[-1]:.2f} at end (after each round: "
                     + ", ".join(f"{x:.1f}" for x in load[1:]) + ").")
        lines.append(f"wrk `-t1 -c{a.connections} -d{a.duration}s --latency` on CPU 1, nginx "
                     f"(1 worker) on CPU 0, rvsd (sock, proxy) on CPU 0; **{n} rounds**, every "
                     "path once per round (rotating which goes first), each on a freshly "
                     "started rvsd / freshly added nft rule; path columns: median over the "
                     "rounds; ratio columns: **median of the per-round ratios**; clients in a "
                     "cgroup v2 each (sock: the programs' cgroup; others: an empty sibling); "
                     f"rvsd binary `{a.rvsd}`."
                     + (f" One-at-a-time rows: `connect_latency` on CPU 1, {a.cycles} "
                        "connections after 200 unmeasured ones, per round."
                        if a.cycles else ""))
        lines.append("")
        ratio_cols = []
        if "direct" in paths:
            ratio_cols += [(p, "direct") for p in paths if p != "direct"]
        if "sock" in paths:
            ratio_cols += [("sock", p) for p in paths if p not in ("sock", "direct")]
        spread = "sock" in paths and "direct" in paths
        head = "| metric | better | " + " | ".join(paths)
        head += "".join(f" | {p} / {q}" for p, q in ratio_cols)
        if spread:
            head += " | sock / direct, quartiles | rounds sock within 5 % of direct"
        head += " |"
        lines.append(head)
        lines.append("|" + "---|" * (head.count("|") - 1))
        for title, better, key, fmt in rows:
            cells = [fmt.format(med(p, key)) for p in paths]
            cells += [f"{statistics.median(ratios(p, q, key)):.2f}×" for p, q in ratio_cols]
            if spread:
                v = ratios("sock", "direct", key)
                lo, hi = quartiles(v)
                ok = sum(1 for x in v if (x <= 1.05 if better == "lower" else x >= 0.95))
                cells += [f"{lo:.2f}–{hi:.2f}×", f"{ok} / {len(v)}"]
            lines.append(f"| {title} | {better} | " + " | ".join(cells) + " |")
        cpu = [p for p in paths if res[p] and ("rvsd", "cpu_ms_per_s") in res[p][0]]
        if cpu:
            lines.append("")
            lines.append("rvsd's own CPU time while its path was measured (ms per second, "
                         "median over the rounds): " + ", ".join(
                             f"{p} {med(p, ('rvsd', 'cpu_ms_per_s')):.2f}" for p in cpu) + ".")
        if self.progs:
            lines.append("")
            lines.append("The sock programs' own cost (kernel.bpf_stats_enabled: run_cnt, "
                         "run_time_ns; summed over the rounds), per phase of the sock path:")
            lines.append("")
            lines.append("| phase | program | runs | ns per run | runs per connection | "
                         "ns per connection |")
            lines.append("|---|---|---|---|---|---|")
            conns = {"one": a.cycles + 200}
            for phase in ("close", "keep", "one"):
                for prog, v in sorted(self.progs.get(phase, {}).items()):
                    runs = sum(x[0] for x in v)
                    ns = sum(x[1] for x in v)
                    if runs == 0:
                        continue
                    per = ""
                    if phase in conns:
                        c = conns[phase] * len(v)
                        per = f"{runs / c:.2f} | {ns / c:,.0f}"
                    else:
                        per = "– | –"
                    lines.append(f"| {phase} | {prog} | {runs:,} | {ns / runs:,.0f} | {per} |")
        text = "\n".join(lines) + "\n"
        print(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rvsd", default="target/release/rvsd")
    ap.add_argument("--rvsadm", default="target/release/rvsadm")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", "--reps", dest="rounds", type=int, default=10,
                    help="rounds: every path measured once per round (default 10)")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--paths", default="direct,sock,proxy,dnat")
    ap.add_argument("--out")
    ap.add_argument("--connect-latency", default="target/release/examples/connect_latency",
                    help="the connect_latency example (cargo build --release -p rvs-sock "
                         "--example connect_latency)")
    ap.add_argument("--cycles", type=int, default=2000,
                    help="connections one at a time per path and round (0: none)")
    ap.add_argument("--prog-stats", action="store_true",
                    help="also count the sock programs' runs and run time (turns "
                         "kernel.bpf_stats_enabled on while the sock path is measured: "
                         "every BPF program on the machine pays for it then)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_sock: needs root (cgroup programs, nftables)")
    b = Bench(args)

    def bye(*_):
        b.cleanup()
        sys.exit(1)

    signal.signal(signal.SIGTERM, bye)
    signal.signal(signal.SIGINT, bye)
    try:
        b.main()
    finally:
        b.cleanup()


if __name__ == "__main__":
    main()
