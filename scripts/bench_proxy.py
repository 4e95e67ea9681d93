#!/usr/bin/env python3
"""bench_proxy.py: the measuring half of scripts/bench-proxy (stdlib only).

Starts backends (one nginx worker serving `return 200 "ok\\n"` on three
ports, one `iperf3 -s`), then for each balancer (HAProxy `mode tcp`, nginx
`stream`, rvs `--dataplane proxy` when given) pinned alone on CPU 1 measures,
per repetition, on a freshly started balancer:

  mem   RSS growth per idle connection (K idle sockets held by this process)
  cps   new connections/s: wrk -H 'Connection: close'
  ka    keep-alive requests/s: wrk (default keep-alive)
  tp1   iperf3 through the balancer, one stream
  tp4   iperf3 through the balancer, four streams

with the balancer's CPU time (utime+stime of its whole process tree, from
/proc/PID/stat) taken around each phase. Medians over the repetitions go
into one Markdown table. Every started process is in its own process group,
recorded in WORKDIR/pgids, and killed on any exit (the bash driver kills
leftovers and removes WORKDIR).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
HTTP_BACKENDS = 3


class BenchError(Exception):
    """A balancer or tool misbehaved; the current balancer's run is abandoned."""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


# --------------------------------------------------------------------------
# processes


class Procs:
    """Starts processes in their own process groups and always stops them."""

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.pgfile = os.path.join(workdir, "pgids")
        self.live: dict[int, subprocess.Popen] = {}

    def _record(self) -> None:
        with open(self.pgfile, "w") as f:
            f.write("".join(f"{pg}\n" for pg in self.live))

    def start(self, name: str, argv: list[str], cpu: int, env=None, capture=False):
        logpath = os.path.join(self.workdir, f"{name}.log")
        out = subprocess.PIPE if capture else open(logpath, "ab")
        p = subprocess.Popen(
            ["taskset", "-c", str(cpu)] + argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if not capture else open(logpath, "ab"),
            start_new_session=True,
            env=env,
        )
        p.bench_name = name  # type: ignore[attr-defined]
        p.bench_log = logpath  # type: ignore[attr-defined]
        self.live[p.pid] = p
        self._record()
        return p

    def stop(self, p: subprocess.Popen, grace: float = 5.0) -> None:
        if p.pid not in self.live:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # Children of a leader that exited first (nginx workers) may linger.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        del self.live[p.pid]
        self._record()

    def stop_all(self) -> None:
        for p in list(self.live.values()):
            self.stop(p, grace=2.0)

    def run(self, name: str, argv: list[str], cpu: int, timeout: float, env=None) -> tuple[int, str]:
        """Runs a bounded client (wrk, iperf3, rvsadm); returns (rc, stdout)."""
        p = self.start(name, argv, cpu, env=env, capture=True)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop(p)
            raise BenchError(f"{name}: no result within {timeout:.0f} s")
        self.stop(p)
        return p.returncode, out.decode(errors="replace")


def log_tail(p, n: int = 15) -> str:
    try:
        with open(p.bench_log, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


# --------------------------------------------------------------------------
# /proc


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    return s[s.rfind(")") + 2 :].split()


def tree(root: int) -> list[int]:
    """root and all its descendants (nginx master + worker, etc.)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            f = _stat_fields(int(d))
            if f:
                children.setdefault(int(f[1]), []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cpu_seconds(root: int) -> float:
    """utime+stime of every process in the tree (each covers all its threads),
    plus what exited children were charged to their waiting parents."""
    ticks = 0
    for pid in tree(root):
        f = _stat_fields(pid)
        if f:
            # fields 14..17 of stat: utime stime cutime cstime
            ticks += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return ticks / CLK_TCK


def rss_kib(root: int) -> int:
    total = 0
    for pid in tree(root):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def established_on(ports: list[int]) -> dict[int, int]:
    """Count ESTABLISHED IPv4 sockets whose local port is one of ports
    (the backend side of connections the balancer opened)."""
    want = {p: 0 for p in ports}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split(None, 4)
            if parts[3] != "01":
                continue
            port = int(parts[1].rsplit(":", 1)[1], 16)
            if port in want:
                want[port] += 1
    return want


# --------------------------------------------------------------------------
# ports


def pick_ports(n: int) -> list[int]:
    """Free TCP ports on 127.0.0.1 below the ephemeral range, so a client
    connect() never takes one while a balancer restarts."""
    lo, _hi = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    top = max(min(lo, 32000), 12000)
    ports: list[int] = []
    tries = 0
    while len(ports) < n:
        tries += 1
        if tries > 5000:
            raise BenchError("no free ports")
        p = random.randrange(10000, top)
        if p in ports:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            continue
        finally:
            s.close()
        ports.append(p)
    return ports


def wait_listening(port: int, proc, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"{proc.bench_name} exited ({proc.returncode}):\n{log_tail(proc)}")
        s = socket.socket()
        s.settimeout(0.5)
        try:
            s.connect(("127.0.0.1", port))
            return
        except OSError:
            time.sleep(0.1)
        finally:
            s.close()
    raise BenchError(f"nothing listening on 127.0.0.1:{port} after {timeout:.0f} s")


# --------------------------------------------------------------------------
# configs


def nginx_stream_module() -> str | None:
    """load_module path, or None when the binary has stream built in."""
    v = subprocess.run(["nginx", "-V"], capture_output=True, text=True).stderr
    if re.search(r"--with-stream(\s|$)", v):
        return None
    for p in ("/usr/lib/nginx/modules/ngx_stream_module.so", "/usr/share/nginx/modules/ngx_stream_module.so"):
        if os.path.exists(p):
            return p
    raise BenchError("nginx has no stream module")


def nginx_common(work: str, name: str) -> str:
    return (
        f"worker_processes 1;\ndaemon off;\nmaster_process on;\nuser root;\n"
        f"pid {work}/{name}.pid;\nerror_log {work}/{name}.err warn;\n"
        f"worker_rlimit_nofile 20000;\nevents {{ worker_connections 10000; }}\n"
    )


def backend_nginx_conf(work: str, ports: list[int]) -> str:
    tmp = f"{work}/nginx-tmp"
    os.makedirs(tmp, exist_ok=True)
    listens = "".join(f"    listen 127.0.0.1:{p} backlog=4096;\n" for p in ports)
    return nginx_common(work, "backend") + (
        "http {\n  access_log off;\n  default_type text/plain;\n"
        f"  client_body_temp_path {tmp}/cb; proxy_temp_path {tmp}/px;\n"
        f"  fastcgi_temp_path {tmp}/fc; uwsgi_temp_path {tmp}/uw; scgi_temp_path {tmp}/sc;\n"
        # keep-alive connections live for the whole phase (the default of
        # 1000 requests would turn part of the keep-alive phase into reconnects)
        "  keepalive_requests 1000000000; keepalive_timeout 300s;\n"
        "  client_header_timeout 300s;\n"
        f"  server {{\n{listens}"
        '    location / { return 200 "ok\\n"; }\n  }\n}\n'
    )


def haproxy_conf(http_port: int, tp_port: int, backends: list[int], iperf: int) -> str:
    servers = "".join(f"  server s{i} 127.0.0.1:{p}\n" for i, p in enumerate(backends, 1))
    return (
        "global\n  nbthread 1\n  maxconn 8000\n\n"
        "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 300s\n  timeout server 300s\n\n"
        f"frontend http_fe\n  bind 127.0.0.1:{http_port}\n  default_backend http_be\n\n"
        f"backend http_be\n  balance roundrobin\n{servers}\n"
        f"frontend tp_fe\n  bind 127.0.0.1:{tp_port}\n  default_backend tp_be\n\n"
        f"backend tp_be\n  balance roundrobin\n  server i1 127.0.0.1:{iperf}\n"
    )


def nginx_stream_conf(work: str, http_port: int, tp_port: int, backends: list[int], iperf: int) -> str:
    mod = nginx_stream_module()
    servers = "".join(f"    server 127.0.0.1:{p};\n" for p in backends)
    return (
        (f"load_module {mod};\n" if mod else "")
        + nginx_common(work, "nginx-lb")
        + "stream {\n"
        f"  upstream http_be {{\n{servers}  }}\n"
        f"  upstream tp_be {{\n    server 127.0.0.1:{iperf};\n  }}\n"
        f"  server {{ listen 127.0.0.1:{http_port} backlog=4096; proxy_pass http_be; }}\n"
        f"  server {{ listen 127.0.0.1:{tp_port} backlog=4096; proxy_pass tp_be; }}\n"
        "}\n"
    )


# --------------------------------------------------------------------------
# balancers


class Balancer:
    """One balancer under test: start() must leave it listening on both ports."""

    key = ""
    title = ""

    def __init__(self, h: "Harness"):
        self.h = h
        self.proc = None
        self.http_port, self.tp_port = pick_ports(2)

    def start(self) -> None:
        raise NotImplementedError

    def ready(self) -> None:
        wait_listening(self.http_port, self.proc)
        wait_listening(self.tp_port, self.proc)

    def stop(self) -> None:
        if self.proc is not None:
            self.h.procs.stop(self.proc)
            self.proc = None


class HAProxy(Balancer):
    key, title = "haproxy", "HAProxy"

    def start(self) -> None:
        cfg = os.path.join(self.h.work, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(haproxy_conf(self.http_port, self.tp_port, self.h.http_ports, self.h.iperf_port))
        # -db: foreground, no daemon, no master process.
        self.proc = self.h.procs.start("haproxy", ["haproxy", "-db", "-f", cfg], cpu=1)
        self.ready()


class NginxStream(Balancer):
    key, title = "nginx", "nginx"

    def start(self) -> None:
        cfg = os.path.join(self.h.work, "nginx-lb.conf")
        with open(cfg, "w") as f:
            f.write(nginx_stream_conf(self.h.work, self.http_port, self.tp_port, self.h.http_ports, self.h.iperf_port))
        argv = ["nginx", "-p", self.h.work, "-e", f"{self.h.work}/nginx-lb.err", "-c", cfg]
        self.proc = self.h.procs.start("nginx-lb", argv, cpu=1)
        self.ready()


class Rvs(Balancer):
    key, title = "rvs", "rvs"

    def start(self) -> None:
        a = self.h.args
        sock = os.path.join(self.h.work, "rvs.sock")
        if os.path.exists(sock):
            os.unlink(sock)
        env = dict(os.environ, RVS_SOCKET=sock)
        argv = [a.rvsd, "--dataplane", "proxy", "--socket", sock, "--log-level", "warn"]
        self.proc = self.h.procs.start("rvsd", argv, cpu=1, env=env)
        deadline = time.monotonic() + 10
        while not os.path.exists(sock):
            if self.proc.poll() is not None:
                raise BenchError(f"rvsd exited ({self.proc.returncode}):\n{log_tail(self.proc)}")
            if time.monotonic() > deadline:
                raise BenchError(f"rvsd: no control socket {sock} after 10 s")
            time.sleep(0.05)
        cmds = [["-A", "-t", f"127.0.0.1:{self.http_port}", "-s", "rr"]]
        cmds += [
            ["-a", "-t", f"127.0.0.1:{self.http_port}", "-r", f"127.0.0.1:{p}", "-m", "-w", "1"]
            for p in self.h.http_ports
        ]
        cmds += [["-A", "-t", f"127.0.0.1:{self.tp_port}", "-s", "rr"]]
        cmds += [["-a", "-t", f"127.0.0.1:{self.tp_port}", "-r", f"127.0.0.1:{self.h.iperf_port}", "-m", "-w", "1"]]
        for i, c in enumerate(cmds):
            # The socket file can appear before the daemon answers: retry the
            # first command for a few seconds.
            for attempt in range(50 if i == 0 else 1):
                rc, out = self.h.procs.run("rvsadm", [a.rvsadm] + c, cpu=0, timeout=10, env=env)
                if rc == 0:
                    break
                time.sleep(0.1)
            if rc != 0:
                raise BenchError(f"rvsadm {' '.join(c)} failed ({rc}): {out.strip()}")
        self.ready()


# --------------------------------------------------------------------------
# load generators and their parsers

_UNIT_US = {"us": 1.0, "ms": 1000.0, "s": 1e6, "m": 60e6}


def _lat_us(txt: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", txt)
    if not m:
        raise BenchError(f"wrk latency {txt!r}")
    return float(m.group(1)) * _UNIT_US[m.group(2)]


def parse_wrk(out: str) -> dict:
    r: dict = {}
    m = re.search(r"^\s*(\d+) requests in ([\d.]+)(\w+)", out, re.M)
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", out, re.M)
    if not m or not rps:
        raise BenchError(f"wrk output not understood:\n{out}")
    r["requests"] = int(m.group(1))
    r["rps"] = float(rps.group(1))
    for pct in ("50", "99"):
        lm = re.search(rf"^\s+{pct}%\s+(\S+)", out, re.M)
        if lm:
            r[f"p{pct}_us"] = _lat_us(lm.group(1))
    errs = 0
    em = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if em:
        errs += sum(int(x) for x in em.groups())
    nm = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if nm:
        errs += int(nm.group(1))
    r["errors"] = errs
    return r


class Harness:
    def __init__(self, args):
        self.args = args
        self.work = args.workdir
        self.procs = Procs(self.work)
        self.http_ports: list[int] = []
        self.iperf_port = 0
        self.backend = None
        self.iperf = None

    # backends on CPU 0 -----------------------------------------------------
    def start_backends(self) -> None:
        self.http_ports = pick_ports(HTTP_BACKENDS)
        cfg = os.path.join(self.work, "backend.conf")
        with open(cfg, "w") as f:
            f.write(backend_nginx_conf(self.work, self.http_ports))
        argv = ["nginx", "-p", self.work, "-e", f"{self.work}/backend.err", "-c", cfg]
        self.backend = self.procs.start("backend-nginx", argv, cpu=0)
        for p in self.http_ports:
            wait_listening(p, self.backend)
        self.start_iperf()
        log(f"backends: nginx (1 worker) on {self.http_ports}, iperf3 -s on {self.iperf_port}")

    def start_iperf(self) -> None:
        if self.iperf is not None:
            self.procs.stop(self.iperf)
        if not self.iperf_port:
            self.iperf_port = pick_ports(1)[0]
        self.iperf = self.procs.start("iperf3-server", ["iperf3", "-s", "-p", str(self.iperf_port), "-B", "127.0.0.1"], cpu=0)
        wait_listening(self.iperf_port, self.iperf)

    # phases ----------------------------------------------------------------
    def wrk(self, lb: Balancer, secs: int, close: bool) -> dict:
        a = self.args
        argv = ["wrk", "-t1", f"-c{a.connections}", f"-d{secs}s", "--timeout", "2s", "--latency"]
        if close:
            argv += ["-H", "Connection: close"]
        argv.append(f"http://127.0.0.1:{lb.http_port}/")
        c0, t0 = cpu_seconds(lb.proc.pid), time.monotonic()
        rc, out = self.procs.run("wrk", argv, cpu=0, timeout=secs + 30)
        c1, t1 = cpu_seconds(lb.proc.pid), time.monotonic()
        if rc != 0:
            raise BenchError(f"wrk exited {rc}:\n{out}")
        r = parse_wrk(out)
        if r["requests"] == 0:
            raise BenchError(f"wrk: no request completed through {lb.title}:\n{out}")
        cpu = c1 - c0
        r["cpu_s"] = cpu
        r["cpu_us_per_req"] = cpu * 1e6 / r["requests"]
        r["busy"] = cpu / (t1 - t0)
        return r

    def iperf3(self, lb: Balancer, secs: int, streams: int) -> dict:
        argv = ["iperf3", "-c", "127.0.0.1", "-p", str(lb.tp_port), "-t", str(secs),
                "-P", str(streams), "-J", "--connect-timeout", "3000"]
        for attempt in (1, 2):
            c0, t0 = cpu_seconds(lb.proc.pid), time.monotonic()
            rc, out = self.procs.run("iperf3", argv, cpu=0, timeout=secs + 30)
            c1, t1 = cpu_seconds(lb.proc.pid), time.monotonic()
            try:
                j = json.loads(out)
            except ValueError:
                j = {}
            if rc == 0 and j.get("end", {}).get("sum_received", {}).get("bytes", 0) > 0:
                break
            # An aborted test can leave iperf3 -s stuck: restart it and retry once.
            log(f"iperf3 failed (rc {rc}): {j.get('error', out[-300:])!s}; restarting iperf3 -s")
            self.start_iperf()
        else:
            raise BenchError("iperf3 failed twice")
        recv = j["end"]["sum_received"]
        cpu = c1 - c0
        gb = recv["bytes"] / 1e9
        return {
            "gbps": recv["bits_per_second"] / 1e9,
            "bytes": recv["bytes"],
            "cpu_s": cpu,
            "cpu_ms_per_gb": cpu * 1e3 / gb if gb > 0 else float("nan"),
            "busy": cpu / (t1 - t0),
        }

    def idle_memory(self, lb: Balancer, k: int) -> dict:
        """RSS growth of the balancer's tree per idle relayed connection."""
        pid = lb.proc.pid
        # Warm-up: a few connections opened and closed, so one-time
        # initialisation (first pools, lazy allocations) is not charged.
        warm = [socket.create_connection(("127.0.0.1", lb.http_port), timeout=5) for _ in range(50)]
        time.sleep(0.3)
        for s in warm:
            s.close()
        # Let the warm-up connections' closes reach the backends first, so
        # they are not in the baseline count.
        time.sleep(1.0)
        base_est = sum(established_on(self.http_ports).values())
        before = rss_kib(pid)
        socks = []
        try:
            deadline = time.monotonic() + 60
            for _ in range(k):
                if time.monotonic() > deadline:
                    raise BenchError(f"opening {k} idle connections took over 60 s")
                s = socket.socket()
                s.settimeout(5)
                s.connect(("127.0.0.1", lb.http_port))
                socks.append(s)
            # Wait (bounded) until the balancer has opened its side to the backends.
            deadline = time.monotonic() + 20
            while True:
                est = established_on(self.http_ports)
                n = sum(est.values()) - base_est
                if n >= k or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            time.sleep(1.0)
            after = rss_kib(pid)
            dist = "/".join(str(v) for v in est.values())
        finally:
            for s in socks:
                s.close()
        if n < k:
            raise BenchError(f"only {n} of {k} idle connections reached the backends through {lb.title}")
        return {"bytes_per_conn": (after - before) * 1024 / k, "rss_before_kib": before,
                "rss_after_kib": after, "backend_split": dist}

    def run_balancer_once(self, lb: Balancer) -> dict:
        a = self.args
        r: dict = {}
        lb.start()
        try:
            r["mem"] = self.idle_memory(lb, a.idle_conns)
            log(f"  {lb.title}: idle {a.idle_conns}: {r['mem']['bytes_per_conn']:.0f} B/conn "
                f"(RSS {r['mem']['rss_before_kib']} -> {r['mem']['rss_after_kib']} KiB, backends {r['mem']['backend_split']})")
            time.sleep(0.5)
            self.wrk(lb, 1, close=False)  # warm-up, not recorded
            r["cps"] = self.wrk(lb, a.duration, close=True)
            log(f"  {lb.title}: cps {r['cps']['rps']:.0f}/s p50 {r['cps'].get('p50_us', 0):.0f} us "
                f"p99 {r['cps'].get('p99_us', 0):.0f} us cpu {r['cps']['cpu_us_per_req']:.1f} us/conn "
                f"busy {r['cps']['busy']:.0%} err {r['cps']['errors']}")
            time.sleep(0.5)
            r["ka"] = self.wrk(lb, a.duration, close=False)
            log(f"  {lb.title}: keep-alive {r['ka']['rps']:.0f}/s p50 {r['ka'].get('p50_us', 0):.0f} us "
                f"p99 {r['ka'].get('p99_us', 0):.0f} us cpu {r['ka']['cpu_us_per_req']:.2f} us/req "
                f"busy {r['ka']['busy']:.0%} err {r['ka']['errors']}")
            for streams in (1, 4):
                time.sleep(0.5)
                t = self.iperf3(lb, a.duration, streams)
                r[f"tp{streams}"] = t
                log(f"  {lb.title}: iperf3 -P {streams}: {t['gbps']:.2f} Gbit/s, "
                    f"cpu {t['cpu_ms_per_gb']:.0f} ms/GB busy {t['busy']:.0%}")
        finally:
            lb.stop()
        return r


# --------------------------------------------------------------------------
# report

# (label, better, getter path, format)
ROWS = [
    ("New connections/s (wrk `Connection: close`)", "higher", ("cps", "rps"), "{:,.0f}"),
    ("  latency p50, new connection (µs)", "lower", ("cps", "p50_us"), "{:,.0f}"),
    ("  latency p99, new connection (µs)", "lower", ("cps", "p99_us"), "{:,.0f}"),
    ("  balancer CPU per connection (µs)", "lower", ("cps", "cpu_us_per_req"), "{:,.1f}"),
    ("  balancer CPU busy", "", ("cps", "busy"), "{:.0%}"),
    ("Keep-alive requests/s (wrk)", "higher", ("ka", "rps"), "{:,.0f}"),
    ("  latency p50, keep-alive (µs)", "lower", ("ka", "p50_us"), "{:,.0f}"),
    ("  latency p99, keep-alive (µs)", "lower", ("ka", "p99_us"), "{:,.0f}"),
    ("  balancer CPU per request (µs)", "lower", ("ka", "cpu_us_per_req"), "{:,.2f}"),
    ("  balancer CPU busy", "", ("ka", "busy"), "{:.0%}"),
    ("Throughput, 1 stream (Gbit/s, iperf3)", "higher", ("tp1", "gbps"), "{:,.2f}"),
    ("  balancer CPU per GB relayed (ms)", "lower", ("tp1", "cpu_ms_per_gb"), "{:,.0f}"),
    ("  balancer CPU busy", "", ("tp1", "busy"), "{:.0%}"),
    ("Throughput, 4 streams (Gbit/s, iperf3 -P 4)", "higher", ("tp4", "gbps"), "{:,.2f}"),
    ("  balancer CPU per GB relayed (ms)", "lower", ("tp4", "cpu_ms_per_gb"), "{:,.0f}"),
    ("  balancer CPU busy", "", ("tp4", "busy"), "{:.0%}"),
    ("Memory per idle connection (bytes, RSS)", "lower", ("mem", "bytes_per_conn"), "{:,.0f}"),
]


def median_of(runs: list[dict], path) -> float | None:
    vals = []
    for r in runs:
        v = r.get(path[0], {}).get(path[1])
        if v is not None:
            vals.append(v)
    return statistics.median(vals) if vals else None


def tool_version(argv: list[str], need_ok: bool = False) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    if need_ok and p.returncode != 0:  # (wrk -v exits 1 after printing its version)
        return "?"
    txt = (p.stdout + p.stderr).strip().splitlines()
    return txt[0].strip() if txt else "?"


def machine_facts(args) -> list[str]:
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    facts = [
        f"nproc {os.cpu_count()}, CPU {cpu}, {mem_kib / 2**20:.0f} GiB RAM, "
        f"kernel {platform.release()}",
        "tools: " + "; ".join([
            re.sub(r" - https?://\S*", "", tool_version(["haproxy", "-v"])).replace("HAProxy version ", "HAProxy "),
            tool_version(["nginx", "-v"]).replace("nginx version: ", ""),
            tool_version(["iperf3", "--version"]).split(" (")[0],
            re.sub(r"\s*\[.*", "", tool_version(["wrk", "-v"])),
            f"Python {platform.python_version()}",
        ]),
    ]
    if args.rvsd:
        facts[-1] += f"; rvsd: {tool_version([args.rvsd, '--version'], need_ok=True)}"
    return facts


def report(args, lbs: list[Balancer], results: dict, notes: list[str], started: float, elapsed: float) -> str:
    ran_rvs = "rvs" in results and any(results["rvs"])
    cols = ["HAProxy", "nginx", "rvs"]
    keys = ["haproxy", "nginx", "rvs"]
    head = "| metric | better | " + " | ".join(cols) + (" | rvs / HAProxy |" if ran_rvs else " |")
    sep = "|---|---|" + "---|" * len(cols) + ("---|" if ran_rvs else "")
    lines = [head, sep]
    for label, better, path, fmt in ROWS:
        cells = []
        med = {}
        for k in keys:
            if k not in results:
                cells.append("not run")
                continue
            v = median_of(results[k], path)
            med[k] = v
            cells.append(fmt.format(v) if v is not None else "failed")
        row = f"| {label.replace('  ', '↳ ')} | {better} | " + " | ".join(cells) + " |"
        if ran_rvs:
            h, r = med.get("haproxy"), med.get("rvs")
            row += f" {r / h:.2f}× |" if better and h and r is not None else " |"
        lines.append(row)
    reps = args.reps
    q = " (quick mode: smoke test, not for BENCHMARKS.md)" if args.quick else ""
    out = [
        f"## Userspace proxy: rvs vs HAProxy vs nginx{q}",
        "",
        f"Command: `{args.cmdline}`",
        "",
        "Machine: " + machine_facts(args)[0] + ".",
        machine_facts(args)[1] + ".",
        f"Date: {time.strftime('%Y-%m-%d', time.localtime(started))}; run took {elapsed / 60:.1f} min; "
        f"load average (1 min) {args.load_before:.2f} at start, {os.getloadavg()[0]:.2f} at end "
        "(other work on the machine makes rates noisy; CPU-per-unit rows are steadier).",
        "",
        f"Each balancer pinned alone on CPU 1 (`taskset -c 1`; HAProxy `mode tcp`, `nbthread 1`, "
        f"roundrobin; nginx `stream`, `worker_processes 1`); wrk, iperf3 and the backends on CPU 0 "
        f"(one nginx worker answering `return 200 \"ok\\n\"` on {HTTP_BACKENDS} ports; one `iperf3 -s`). "
        f"wrk `-t1 -c{args.connections} -d{args.duration}s --latency`; iperf3 `-t {args.duration}`. "
        f"Median of {reps} repetition{'s' if reps != 1 else ''}, each on a freshly started balancer; "
        f"CPU = utime+stime of the balancer's process tree over the phase; memory = VmRSS growth with "
        f"{args.idle_conns} idle relayed connections, divided by {args.idle_conns}. GB = 10^9 bytes.",
        "",
        *lines,
        "",
    ]
    errs = {k: sum(r.get(p, {}).get("errors", 0) for r in results[k] for p in ("cps", "ka")) for k in results}
    if any(errs.values()):
        out.append("wrk errors (socket errors + non-2xx, all repetitions): "
                   + ", ".join(f"{k} {v}" for k, v in errs.items()) + ".")
        out.append("")
    for n in notes:
        out.append(f"- {n}")
    if notes:
        out.append("")
    if args.reps > 1:
        out.append("<details><summary>Per-repetition values (median taken)</summary>")
        out.append("")
        for label, _better, path, fmt in ROWS:
            if label.endswith("busy"):
                continue
            vals = []
            for k in results:
                xs = [r.get(path[0], {}).get(path[1]) for r in results[k]]
                vals.append(f"{k} " + " / ".join(fmt.format(x) if x is not None else "-" for x in xs))
            out.append(f"- {label.strip()}: " + "; ".join(vals))
        out.append("")
        out.append("</details>")
        out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--cmdline", default="scripts/bench-proxy")
    ap.add_argument("--quick", action="store_true", help="3 s phases, 1 repetition (smoke test)")
    ap.add_argument("--out", help="also write the Markdown report here (and raw data to OUT.json)")
    ap.add_argument("--rvsd", help="rvsd binary; with --rvsadm, adds the rvs column")
    ap.add_argument("--rvsadm", help="rvsadm binary")
    ap.add_argument("--duration", type=int, help="seconds per phase (default 10, quick 3)")
    ap.add_argument("--reps", type=int, help="repetitions, median taken (default 3, quick 1)")
    ap.add_argument("--idle-conns", type=int, default=2000)
    ap.add_argument("--connections", type=int, default=32, help="wrk -c")
    ap.add_argument("--balancers", default="haproxy,nginx,rvs")
    ap.add_argument("--no-install", action="store_true", help="(driver) do not apt-get install")
    a = ap.parse_args()
    if a.duration is None:
        a.duration = 3 if a.quick else 10
    if a.reps is None:
        a.reps = 1 if a.quick else 3
    if not (1 <= a.duration <= 120 and 1 <= a.reps <= 20 and 1 <= a.idle_conns <= 8000 and 1 <= a.connections <= 1000):
        ap.error("--duration 1..120, --reps 1..20, --idle-conns 1..8000, --connections 1..1000")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < 2 * a.idle_conns + 1000:
        ap.error(f"open-file limit {hard} too low for --idle-conns {a.idle_conns}")

    h = Harness(a)
    notes: list[str] = []
    wanted = [b.strip() for b in a.balancers.split(",") if b.strip()]
    classes = {"haproxy": HAProxy, "nginx": NginxStream, "rvs": Rvs}
    lbs: list[Balancer] = []
    for w in wanted:
        if w not in classes:
            ap.error(f"unknown balancer {w}")
        if w == "rvs":
            if not (a.rvsd and a.rvsadm):
                notes.append("rvs: not run (give `--rvsd PATH --rvsadm PATH` to add it).")
                log("rvs: skipped (no --rvsd/--rvsadm given)")
                continue
            for b in (a.rvsd, a.rvsadm):
                if not (os.path.isfile(b) and os.access(b, os.X_OK)):
                    ap.error(f"{b}: not an executable file")
            a.rvsd, a.rvsadm = os.path.abspath(a.rvsd), os.path.abspath(a.rvsadm)
    started = time.time()
    a.load_before = os.getloadavg()[0]
    results: dict[str, list[dict]] = {}
    try:
        h.start_backends()
        for w in wanted:
            if w == "rvs" and not (a.rvsd and a.rvsadm):
                continue
            lbs.append(classes[w](h))
            results[w] = []
        for rep in range(1, a.reps + 1):
            for lb in lbs:
                log(f"rep {rep}/{a.reps}: {lb.title} on 127.0.0.1:{lb.http_port} (http) / :{lb.tp_port} (iperf3)")
                try:
                    results[lb.key].append(h.run_balancer_once(lb))
                except BenchError as e:
                    log(f"  {lb.title} failed: {e}")
                    notes.append(f"{lb.title}, repetition {rep}: failed: {str(e).splitlines()[0]}")
                if h.backend.poll() is not None:
                    raise BenchError("backend nginx died:\n" + log_tail(h.backend))
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); stopping everything")
        h.procs.stop_all()
        return 130
    except BenchError as e:
        log(f"error: {e}")
        h.procs.stop_all()
        return 1
    finally:
        h.procs.stop_all()
    elapsed = time.time() - started
    md = report(a, lbs, results, notes, started, elapsed)
    print(md)
    if a.out:
        with open(a.out, "w") as f:
            f.write(md)
        with open(a.out + ".json", "w") as f:
            json.dump({"cmdline": a.cmdline, "results": results, "notes": notes}, f, indent=1)
        log(f"wrote {a.out} and {a.out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
