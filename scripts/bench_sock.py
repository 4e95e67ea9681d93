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
Every repetition starts its balancer afresh; figures are medians of --reps.
Everything started is stopped and the nft table and cgroup removed, also on
failure or Ctrl-C. Bounded: each wrk run has a -d and a subprocess timeout.
"""

import argparse
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
        self.nft = False

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
        for p in list(self.procs):
            self.stop(p)
        if self.nft:
            subprocess.run(["nft", "delete", "table", "ip", NFT_TABLE], timeout=10)
            self.nft = False
        if self.cgroup and os.path.isdir(self.cgroup):
            for _ in range(50):
                try:
                    with open(os.path.join(self.cgroup, "cgroup.procs")) as f:
                        pids = f.read().split()
                    for pid in pids:
                        with open(os.path.join(self.cgroup_root, "cgroup.procs"), "w") as f:
                            f.write(pid)
                    os.rmdir(self.cgroup)
                    break
                except OSError:
                    time.sleep(0.05)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------- measure
    def wrk(self, url, close, in_cgroup):
        a = self.args
        cmd = ["taskset", "-c", "1", "wrk", "-t1", f"-c{a.connections}", f"-d{a.duration}s",
               "--latency"]
        if close:
            cmd += ["-H", "Connection: close"]
        cmd.append(url)
        if in_cgroup:
            cmd = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && shift && exec "$@"',
                   self.cgroup, "--"] + cmd
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

    def cycle(self, addr, in_cgroup):
        """One connection at a time (connect_latency): connect() and the
        whole cycle, p50/p99 in µs."""
        a = self.args
        cmd = ["taskset", "-c", "1", a.connect_latency, addr, str(a.cycles), "200"]
        if in_cgroup:
            cmd = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && shift && exec "$@"',
                   self.cgroup, "--"] + cmd
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=150,
                             check=True).stdout
        return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", out)}

    def run_path(self, name, backend):
        """One repetition of path `name`: (close, keepalive) figures."""
        stop = None
        in_cg = False
        if name == "direct":
            url = f"http://127.0.0.1:{backend}/"
        elif name == "sock":
            stop, sock = self.rvsd("sock", ["--cgroup", self.cgroup])
            self.adm(sock, "-A", "-t", f"{VIP_SOCK}:80", "-s", "rr")
            self.adm(sock, "-a", "-t", f"{VIP_SOCK}:80", "-r", f"127.0.0.1:{backend}", "-m")
            url = f"http://{VIP_SOCK}:80/"
            in_cg = True
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
        try:
            close = self.wrk(url, True, in_cg)
            keep = self.wrk(url, False, in_cg)
            one = self.cycle(url.split("//")[1].rstrip("/"), in_cg) if self.args.cycles else {}
        finally:
            if stop is not None:
                self.stop(stop)
            if name == "dnat":
                subprocess.run(["nft", "delete", "table", "ip", NFT_TABLE], timeout=10)
                self.nft = False
        return close, keep, one

    def main(self):
        a = self.args
        self.cgroup_make()
        backend = self.backend()
        paths = a.paths.split(",")
        res = {p: [] for p in paths}
        t0 = time.time()
        load0 = os.getloadavg()[0]
        for rep in range(a.reps):
            for p in paths:
                res[p].append(self.run_path(p, backend))
                print(f"rep {rep + 1} {p}: close {res[p][-1][0]} keep {res[p][-1][1]} "
                      f"one {res[p][-1][2]}", file=sys.stderr)
        took = time.time() - t0
        med = {}
        for p in paths:
            med[p] = {
                (kind, k): statistics.median(r[i][k] for r in res[p])
                for i, kind in ((0, "close"), (1, "keep"))
                for k in ("rate", "p50", "p99", "mean")
            }
            if a.cycles:
                for k in ("connect_p50_us", "connect_p99_us", "cycle_p50_us", "cycle_p99_us"):
                    med[p][("one", k)] = statistics.median(r[2][k] for r in res[p])
        self.report(paths, med, took, load0)

    def report(self, paths, med, took, load0):
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
        lines = []
        lines.append(f"Machine: nproc {os.cpu_count()}, kernel {os.uname().release}. "
                     f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; run took "
                     f"{took / 60:.1f} min; load average (1 min) {load0:.2f} at start, "
                     f"{os.getloadavg()[0]:.2f} at end.")
        lines.append(f"wrk `-t1 -c{a.connections} -d{a.duration}s --latency` on CPU 1, nginx "
                     f"(1 worker) on CPU 0, rvsd (proxy) on CPU 0; median of {a.reps} "
                     "repetitions, each on a freshly started rvsd / freshly added nft rule; "
                     f"rvsd binary `{a.rvsd}`."
                     + (f" One-at-a-time rows: `connect_latency` on CPU 1, {a.cycles} "
                        "connections after 200 unmeasured ones, per repetition."
                        if a.cycles else ""))
        lines.append("")
        head = "| metric | better | " + " | ".join(paths)
        ratios = [p for p in paths if p != "direct"] if "direct" in paths else []
        head += "".join(f" | {p} / direct" for p in ratios) + " |"
        if "sock" in paths:
            head = head[:-1] + "".join(f"| sock / {p} " for p in paths
                                       if p not in ("sock", "direct")) + "|"
        lines.append(head)
        lines.append("|" + "---|" * (head.count("|") - 1))
        for title, better, key, fmt in rows:
            cells = [fmt.format(med[p][key]) for p in paths]
            r = [f"{med[p][key] / med['direct'][key]:.2f}×" for p in ratios]
            if "sock" in paths:
                r += [f"{med['sock'][key] / med[p][key]:.2f}×" for p in paths
                      if p not in ("sock", "direct")]
            lines.append(f"| {title} | {better} | " + " | ".join(cells + r) + " |")
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
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--paths", default="direct,sock,proxy,dnat")
    ap.add_argument("--out")
    ap.add_argument("--connect-latency", default="target/release/examples/connect_latency",
                    help="the connect_latency example (cargo build --release -p rvs-sock "
                         "--example connect_latency)")
    ap.add_argument("--cycles", type=int, default=2000,
                    help="connections one at a time per path and repetition (0: none)")
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
