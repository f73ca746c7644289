#!/usr/bin/env python3
"""Side by side, in one run against one fresh redis-server: the Redis ceiling, tollgate's
library and service, and the npm peers. Writes OUT/compare.md (tables, goals), compare.json
(every row, raw), compare.tsv and PNG plots (gnuplot). Run by scripts/bench (`make bench`)
and, with --smoke, by tests/bench_harness_test.sh.

  bench/compare.py --build build [--out bench/out] [--quick] [--smoke]

Rows (each names the command that produced it):
  ceiling   redis-benchmark running the seed's token bucket (bench/seed_token_bucket.lua)
            with EVALSHA, pipelined (-c 8 -P 64), and plain INCR, 1000 keys;
  library   build/bench/compare_driver: tollgate::Limiter over RedisStore, each algorithm,
            1/8/64 callers; three limits in one request; sync mode on one hot key; the
            token bucket open loop at half the ceiling (p50 at half load); metered work at
            the top callers: a charge of the token bucket, and a concurrency lease acquired
            and released (one decision = one lease = two store calls);
  peers     bench/peers/drive.js: rate-limiter-flexible (RateLimiterRedis, ioredis) and
            rate-limit-redis (express-rate-limit's store, driven directly), same keys and
            callers;
  service   `tollgate serve --redis`: HTTP through compare_driver --via http; gRPC through
            build/bench/grpc_load when it exists (else the row says pending).

Columns: decisions/s, p50/p99 latency, CPU seconds per million decisions of the limiter
process (the driver process for library and peer rows, in-process over the measured
interval; `tollgate serve` for service rows; redis-benchmark for the ceiling), Redis CPU per
million decisions and EVALSHA calls per decision (INFO cpu and INFO commandstats before and
after the row, warm-up included on both sides), and ratios to the ceiling and the best peer.

--smoke: a few hundred decisions per row, into a temporary directory; exits 1 unless every
row produced a number without errors and tollgate and both peers admitted the same count
for the same fixed-window workload (N requests over K keys, limit L: K x L admitted).
"""

import argparse
import datetime
import json
import os
import resource
import shlex
import shutil
import signal
import statistics
import socket
import subprocess
import sys
import tempfile
import time

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(SOURCE, "bench", "peers")
SEED_SCRIPT = os.path.join(SOURCE, "bench", "seed_token_bucket.lua")
HUGE = 1_000_000_000  # a limit nobody reaches: every check allowed, the figure is throughput
KEYS = 1000


def short_name(name):
    """A row's name for a plot label."""
    for long, short in (("seed token bucket script, EVALSHA", "ceiling: seed script"),
                        ("plain INCR", "ceiling: INCR"),
                        ("rate-limiter-flexible", "rate-limiter-flexible"),
                        ("rate-limit-redis", "rate-limit-redis"),
                        ("3 limits in one request", "tollgate 3 limits/request"),
                        ("sync mode", "tollgate sync, hot key"),
                        ("exact, one hot key", "tollgate fixed exact, hot key"),
                        ("open loop", "tollgate tb, half load"),
                        ("charge", "tollgate tb charge"),
                        ("acquire + release", "tollgate lease"),
                        ("HTTP", "tollgate serve HTTP"), ("gRPC", "tollgate serve gRPC")):
        if long in name:
            return short
    return name.replace(", exact", "")


def log(message):
    print(f"bench: {message}", flush=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """A minimal RESP client for the harness' own commands (INFO, SCRIPT LOAD, FLUSHALL)."""

    def __init__(self, port, deadline_s=10):
        end = time.monotonic() + deadline_s
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        self.file = self.sock.makefile("rb")

    def call(self, *args):
        out = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(f"${len(data)}\r\n".encode() + data + b"\r\n")
        self.sock.sendall(b"".join(out))
        return self._read()

    def _read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self.file.read(size + 2)[:-2].decode()
        if kind == b"*":
            return [self._read() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply {line!r}")

    def info(self, section):
        fields = {}
        for line in self.call("INFO", section).splitlines():
            if ":" in line and not line.startswith("#"):
                name, value = line.split(":", 1)
                fields[name] = value
        return fields

    def snapshot(self):
        """Redis CPU seconds and the call counts of every command, now."""
        cpu = self.info("cpu")
        calls = {}
        for name, value in self.info("commandstats").items():
            stats = dict(part.split("=") for part in value.split(","))
            calls[name.replace("cmdstat_", "")] = int(stats["calls"])
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), calls


def proc_cpu_seconds(pid):
    """User + system CPU of a live process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


class Harness:
    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(args.build)
        self.out = os.path.abspath(args.out)
        self.smoke = args.smoke
        self.quick = args.quick
        self.duration = 0 if self.smoke else (1.0 if self.quick else 5.0)
        self.warmup = 0.3 if self.quick else 1.0
        self.requests = args.requests
        self.callers = [8] if self.smoke else ([1, 64] if self.quick else [1, 8, 64])
        self.rows = []
        self.procs = []
        self.tmp = tempfile.mkdtemp(prefix="tollgate-compare.")
        self.driver = os.path.join(self.build, "bench", "compare_driver")
        self.tollgate = os.path.join(self.build, "tollgate")
        self.grpc_load = os.path.join(self.build, "bench", "grpc_load")
        self.failures = []
        self.redis_version = "?"

    # ---- processes ---------------------------------------------------------------------
    def start(self, argv, **kwargs):
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc

    def stop_all(self):
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_redis(self):
        self.redis_port = free_port()
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}"
        self.redis_proc = self.start(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.tmp, "--loglevel", "warning"])
        self.redis = Redis(self.redis_port)
        self.redis_version = self.redis.info("server").get("redis_version", "?")
        log(f"redis-server {self.redis_version} on 127.0.0.1:{self.redis_port}")

    # ---- one row -----------------------------------------------------------------------
    def measure(self, group, name, callers, command, run, limiter_pid=None, record=True):
        """Runs `run()` (returns the driver's JSON dict) with Redis counters around it; the
        row goes into the main table unless `record` is false."""
        self.redis.call("FLUSHALL")
        redis_cpu0, calls0 = self.redis.snapshot()
        limiter_cpu0 = proc_cpu_seconds(limiter_pid) if limiter_pid else None
        started = time.monotonic()
        row = {"group": group, "name": name, "callers": callers,
               "command": shlex.join(command) if isinstance(command, list) else command}
        try:
            result = run()
        except Exception as error:  # a failed row is reported, the run goes on
            row["error"] = str(error)[:300]
            self.failures.append(f"{name}: {row['error']}")
            log(f"  {name}: FAILED: {row['error']}")
            if record:
                self.rows.append(row)
            return row
        elapsed = time.monotonic() - started
        redis_cpu1, calls1 = self.redis.snapshot()
        row.update(result)
        if row.get("fallback_share", 0) > 0.01:  # see counting_fallback
            row["name"] += f" ({row['fallback_share']:.0%} answered by the local fallback)"
            if not self.smoke:
                self.failures.append(f"{name}: {row['fallback_share']:.0%} of the decisions "
                                     "came from the local fallback, not Redis")
        total = result.get("total_decisions") or result.get("decisions") or 0
        scripts = sum(calls1.get(c, 0) - calls0.get(c, 0) for c in ("evalsha", "eval"))
        row["redis_cpu_s_per_million"] = (redis_cpu1 - redis_cpu0) * 1e6 / total if total else 0
        row["evalsha_per_decision"] = scripts / total if total else 0
        row["evalsha_per_second"] = scripts / elapsed if elapsed > 0 else 0
        if limiter_pid:
            cpu = proc_cpu_seconds(limiter_pid) - limiter_cpu0
            row["cpu_s"] = cpu
            row["cpu_s_per_million"] = cpu * 1e6 / total if total else 0
        if result.get("errors"):
            self.failures.append(f"{name}: {result['errors']} errors")
        if not result.get("decisions"):
            self.failures.append(f"{name}: no decisions measured")
        log(f"  {name}: {row.get('per_second', 0):,.0f} decisions/s, p50 "
            f"{row.get('p50_us', 0):.0f} us, p99 {row.get('p99_us', 0):.0f} us")
        if record:
            self.rows.append(row)
        return row

    def run_json(self, argv, timeout_s=None):
        timeout_s = timeout_s or (20 if self.smoke else 60 + 3 * (self.duration + self.warmup))
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout_s, cwd=SOURCE)
        if done.returncode != 0:
            raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-300:]}")
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise RuntimeError(f"no result: {done.stderr.strip()[-300:]}")
        return json.loads(lines[-1])

    def amount(self):
        """The flags that say how long a driver runs."""
        if self.smoke:
            return ["--requests", str(self.requests)]
        return ["--duration-s", str(self.duration), "--warmup-s", str(self.warmup)]

    # ---- ceiling -----------------------------------------------------------------------
    def redis_benchmark(self, name, command_args, clients=8, pipeline=64, requests=None,
                        record=True):
        def run_once(requests):
            argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.redis_port), "-c",
                    str(clients), "-P", str(pipeline), "-r", str(KEYS), "-n", str(requests),
                    "--csv"] + command_args
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, timeout=300)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                raise RuntimeError(done.stderr.strip()[-300:])
            header, values = None, None
            for line in done.stdout.splitlines():
                cells = [cell.strip('"') for cell in line.split('","')]
                if cells and cells[0] == "test":
                    header = cells
                elif header and len(cells) == len(header):
                    values = dict(zip(header, cells))
            if values is None:
                raise RuntimeError(f"no CSV from redis-benchmark: {done.stdout[-300:]}")
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            per_second = float(values["rps"])
            return argv, {
                "decisions": requests, "total_decisions": requests, "errors": 0,
                "per_second": per_second, "seconds": requests / per_second,
                "p50_us": float(values.get("p50_latency_ms", 0)) * 1000,
                "p99_us": float(values.get("p99_latency_ms", 0)) * 1000,
                "cpu_s": cpu, "cpu_s_per_million": cpu * 1e6 / requests,
            }

        if self.smoke:
            requests = 2000
        elif requests is not None:
            pass
        else:
            # A short run sizes the real one to about `duration` seconds (and warms Redis).
            _, probe = run_once(50_000)
            requests = max(50_000, int(probe["per_second"] * self.duration))
        shown = ["redis-benchmark", "-p", "PORT", "-c", str(clients), "-P", str(pipeline), "-r",
                 str(KEYS), "-n", str(requests), "--csv"] + command_args
        return self.measure("ceiling", name, clients * pipeline, shown,
                            lambda: run_once(requests)[1], record=record)

    def ceiling(self):
        log("ceiling: redis-benchmark")
        with open(SEED_SCRIPT) as f:
            sha = self.redis.call("SCRIPT", "LOAD", f.read())
        self.seed_command = ["EVALSHA", sha, "1", "seed:{__rand_int__}", str(HUGE), str(HUGE)]
        self.ceiling_row = self.redis_benchmark("seed token bucket script, EVALSHA",
                                                self.seed_command)
        if not self.smoke:
            # The same script with only as many commands outstanding as the library's 64
            # callers keep: what Redis itself does at that concurrency.
            self.ceiling_64_row = self.redis_benchmark(
                "seed token bucket script, EVALSHA, 64 outstanding",
                ["EVALSHA", sha, "1", "seed:{__rand_int__}", str(HUGE), str(HUGE)],
                clients=1, pipeline=64)
        # tollgate's own check.lua is not replayed here: its arguments are binary (struct
        # '<Bddd', with zero bytes), which redis-benchmark cannot send. Its cost in Redis is
        # the Redis CPU column of the library rows, and the goals say how busy Redis was.
        self.redis_benchmark("plain INCR", ["INCR", "incr:{__rand_int__}"])

    # ---- library -----------------------------------------------------------------------
    def library(self):
        log("library: compare_driver (tollgate::Limiter over RedisStore / SyncStore)")
        if not os.access(self.driver, os.X_OK):
            raise RuntimeError(f"{self.driver} not built")
        base = [self.driver, "--via", "library", "--redis", self.redis_url]
        shown_base = ["compare_driver", "--via", "library", "--redis", "URL"]
        for algorithm in ("token_bucket", "fixed_window", "sliding_window"):
            for callers in self.callers:
                flags = ["--algorithm", algorithm, "--callers", str(callers), "--keys", str(KEYS)]
                self.measure("library", f"tollgate {algorithm}, exact", callers,
                             shown_base + flags + self.amount(),
                             lambda f=flags: self.run_json(base + f + self.amount()))
        if not self.smoke and not self.quick:
            # As many checks outstanding as the ceiling's redis-benchmark keeps (8 × 64).
            flags = ["--algorithm", "token_bucket", "--callers", "512", "--keys", str(KEYS)]
            self.measure("library", "tollgate token_bucket, exact", 512,
                         shown_base + flags + self.amount(),
                         lambda f=flags: self.run_json(base + f + self.amount()))
        top = max(self.callers)
        flags = ["--mode", "multi", "--callers", str(top), "--keys", str(KEYS)]
        self.multi_row = self.measure(
            "library", "tollgate 3 limits in one request (tb+fw+sw), exact", top,
            shown_base + flags + self.amount(), lambda: self.run_json(base + flags + self.amount()))
        flags = ["--algorithm", "fixed_window", "--callers", str(top), "--keys", "1"]
        self.hot_exact_row = self.measure(
            "library", "tollgate fixed_window, exact, one hot key", top,
            shown_base + flags + self.amount(), lambda: self.run_json(base + flags + self.amount()))
        threads = str(min(2, os.cpu_count() or 2))
        flags = ["--mode", "sync", "--algorithm", "fixed_window", "--callers", threads, "--keys",
                 "1", "--sync-interval-s", "0.1"]
        self.sync_row = self.measure(
            "library", "tollgate fixed_window, sync mode (100 ms), one hot key", int(threads),
            shown_base + flags + self.amount(), lambda: self.run_json(base + flags + self.amount()))
        # Metered work (issue 28) beside the checks above: a charge, and a lease taken and freed.
        flags = ["--mode", "charge", "--algorithm", "token_bucket", "--callers", str(top),
                 "--keys", str(KEYS)]
        self.charge_row = self.measure(
            "library", "tollgate token_bucket charge, exact", top,
            shown_base + flags + self.amount(), lambda: self.run_json(base + flags + self.amount()))
        flags = ["--mode", "lease", "--callers", str(top), "--keys", str(KEYS)]
        self.lease_row = self.measure(
            "library", "tollgate concurrency lease, acquire + release, exact", top,
            shown_base + flags + self.amount(), lambda: self.run_json(base + flags + self.amount()))
        # p50 at half the ceiling's load, open loop.
        ceiling = getattr(self, "ceiling_row", {}).get("per_second", 0)
        rate = max(1000, int(ceiling / 2)) if not self.smoke else 2000
        flags = ["--algorithm", "token_bucket", "--keys", str(KEYS), "--rate", str(rate)]
        self.half_row = self.measure(
            "library", f"tollgate token_bucket, exact, open loop at {rate:,}/s (half the ceiling)",
            0, shown_base + flags + self.amount(),
            lambda: self.run_json(base + flags + self.amount()))

    # ---- paired re-check ---------------------------------------------------------------
    PAIR_ROUNDS = 5
    PAIR_SECONDS = 3.0
    # The library's callers in each round: the headline's 64, and the ceiling's own 8 × 64.
    PAIR_CALLERS = (64, 512)

    def pairs(self):
        """The headline ratio (library token bucket / ceiling) measured again in rounds that
        alternate the two, a few seconds apart: on a shared machine the speed of the whole
        box drifts between rows a minute apart, and a ratio of two runs next to each other
        is what can be compared. Not in --quick or --smoke runs."""
        self.pair_rounds = []
        if self.smoke or self.quick or not getattr(self, "seed_command", None):
            return
        log(f"paired re-check: ceiling and library alternately, {self.PAIR_ROUNDS} rounds")
        base = [self.driver, "--via", "library", "--redis", self.redis_url]
        amount = ["--duration-s", str(self.PAIR_SECONDS), "--warmup-s", "1"]
        # redis-benchmark's request count for about PAIR_SECONDS at the ceiling's rate.
        requests = max(50_000,
                       int((self.ceiling_row.get("per_second") or 50_000) * self.PAIR_SECONDS))
        for index in range(self.PAIR_ROUNDS):
            ceiling = self.redis_benchmark(
                f"round {index + 1}: seed token bucket script, EVALSHA", self.seed_command,
                requests=requests, record=False)
            round_rows = {"ceiling": ceiling}
            for callers in self.PAIR_CALLERS:
                flags = ["--algorithm", "token_bucket", "--callers", str(callers), "--keys",
                         str(KEYS)]
                round_rows[callers] = self.measure(
                    "library", f"round {index + 1}: tollgate token_bucket, exact", callers,
                    flags, lambda f=flags: self.run_json(base + f + amount), record=False)
            self.pair_rounds.append(round_rows)

    def pair_ratios(self, callers):
        """The library-to-ceiling ratios of the paired rounds at `callers`, in round order."""
        ratios = []
        for round_rows in getattr(self, "pair_rounds", []):
            ceiling, library = round_rows["ceiling"], round_rows[callers]
            if ceiling.get("per_second") and library.get("per_second"):
                ratios.append(library["per_second"] / ceiling["per_second"])
        return ratios

    def pairs_markdown(self):
        if not getattr(self, "pair_rounds", None):
            return []
        lines = ["### Paired re-check: the ceiling and the library alternately", "",
                 f"After every row above, {self.PAIR_ROUNDS} rounds of three runs of "
                 f"{self.PAIR_SECONDS:g} s each (after 1 s of warm-up), one right after the "
                 "other: redis-benchmark running the seed script (8 × 64 outstanding), then the "
                 "library's exact token bucket at "
                 + " and at ".join(str(callers) for callers in self.PAIR_CALLERS)
                 + " callers (`compare_driver --via library --algorithm token_bucket --keys "
                 f"{KEYS} --callers N`). Each ratio compares runs seconds apart, not minutes.",
                 "",
                 "| round | ceiling/s | "
                 + " | ".join(f"library, {callers} callers/s | × ceiling"
                              for callers in self.PAIR_CALLERS) + " |",
                 "|---|---|" + "---|---|" * len(self.PAIR_CALLERS)]
        for index, round_rows in enumerate(self.pair_rounds):
            cells = [str(index + 1), f"{round_rows['ceiling'].get('per_second', 0):,.0f}"]
            for callers in self.PAIR_CALLERS:
                rate = round_rows[callers].get("per_second", 0)
                ceiling = round_rows["ceiling"].get("per_second", 0)
                cells += [f"{rate:,.0f}", f"{rate / ceiling:.2f}" if ceiling and rate else "—"]
            lines.append("| " + " | ".join(cells) + " |")
        return lines

    # ---- peers -------------------------------------------------------------------------
    def install_peers(self):
        if shutil.which("node") is None or shutil.which("npm") is None:
            raise RuntimeError("node and npm are needed for the peers (apt-get install nodejs npm)")
        stamp = os.path.join(PEERS, "node_modules", ".package-lock.json")
        lock = os.path.join(PEERS, "package-lock.json")
        if os.path.exists(stamp) and os.path.getmtime(stamp) >= os.path.getmtime(lock):
            return
        log("peers: npm ci --prefix bench/peers")
        done = subprocess.run(["npm", "ci", "--prefix", PEERS, "--no-audit", "--no-fund",
                               "--loglevel=error"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"npm ci failed: {done.stdout.strip()[-300:]}")

    def peers(self):
        log("peers: bench/peers/drive.js")
        try:
            self.install_peers()
        except Exception as error:
            for peer in ("rate-limiter-flexible", "rate-limit-redis"):
                self.rows.append({"group": "peer", "name": peer, "callers": 0,
                                  "command": "npm ci --prefix bench/peers", "error": str(error)})
            self.failures.append(str(error))
            log(f"  peers not run: {error}")
            return
        drive = os.path.join(PEERS, "drive.js")
        for peer, title in (("rlf", "rate-limiter-flexible (RateLimiterRedis, ioredis)"),
                            ("erl", "rate-limit-redis store of express-rate-limit (ioredis)")):
            for callers in self.callers:
                flags = ["--peer", peer, "--redis-port", str(self.redis_port), "--callers",
                         str(callers), "--keys", str(KEYS), "--limit", str(HUGE)]
                shown = ["node", "bench/peers/drive.js"] + flags + self.amount()
                shown[shown.index("--redis-port") + 1] = "PORT"
                self.measure("peer", title, callers, shown,
                             lambda f=flags: self.run_json(["node", drive] + f + self.amount()))

    # ---- agreement (smoke) -------------------------------------------------------------
    def agreement(self):
        """Same fixed-window workload through tollgate and both peers: same admitted count."""
        requests, keys, limit = 600, 10, 25
        expected = keys * min(limit, requests // keys)
        log(f"agreement: {requests} requests over {keys} keys, limit {limit}: "
            f"{expected} admitted expected")
        common = ["--requests", str(requests), "--keys", str(keys), "--limit", str(limit),
                  "--callers", "8"]
        results = {}
        # tollgate's fixed window is aligned to the epoch; a day-long window (skipped within
        # 2 minutes of midnight UTC) holds the whole run, like the peers' window from the
        # first hit. The token bucket refilling 1 per 1000 s does too.
        now = time.time()
        if 120 < now % 86400 < 86400 - 120:
            results["tollgate fixed_window"] = self.run_json(
                [self.driver, "--via", "library", "--redis", self.redis_url, "--algorithm",
                 "fixed_window", "--window-s", "86400", "--key-prefix", "agree-fw:"] + common)
        results["tollgate token_bucket"] = self.run_json(
            [self.driver, "--via", "library", "--redis", self.redis_url, "--algorithm",
             "token_bucket", "--refill", "0.001", "--key-prefix", "agree-tb:"] + common)
        drive = os.path.join(PEERS, "drive.js")
        for peer in ("rlf", "erl"):
            results[peer] = self.run_json(
                ["node", drive, "--peer", peer, "--redis-port", str(self.redis_port),
                 "--window-s", "3600", "--key-prefix", "agree:"] + common)
        self.agreement_results = results
        for name, result in results.items():
            ok = result["allowed"] == expected and result["errors"] == 0
            log(f"  {name}: allowed {result['allowed']} of {result['decisions']}"
                f" {'OK' if ok else 'MISMATCH'}")
            if not ok:
                self.failures.append(f"agreement: {name} allowed {result['allowed']}, "
                                     f"expected {expected}")

    # ---- service -----------------------------------------------------------------------
    def service(self):
        log("service: tollgate serve --redis")
        if not os.access(self.tollgate, os.X_OK):
            raise RuntimeError(f"{self.tollgate} not built")
        config = os.path.join(self.tmp, "bench.yaml")
        with open(config, "w") as f:
            # timeout 1s: a saturated loaded machine must not turn Redis answers into
            # fail_open fallbacks, which would be counted as (fast) decisions.
            f.write("limits:\n  bench:\n    algorithm: token_bucket\n"
                    f"    capacity: {HUGE}\n    refill_per_second: {HUGE / 60:.1f}\n"
                    "    timeout: 1s\n")
        envoy = os.path.join(self.tmp, "envoy.yaml")
        with open(envoy, "w") as f:
            # The same 1 s deadline (tollgate's extension field) for the same reason.
            f.write("domain: bench\ndescriptors:\n  - key: user\n"
                    f"    rate_limit: {{unit: second, requests_per_unit: {HUGE}, timeout: 1s}}\n")
        http_port, grpc_port = free_port(), free_port()
        argv = [self.tollgate, "serve", "--config", config, "--config", envoy, "--redis",
                self.redis_url,
                "--http", f"127.0.0.1:{http_port}", "--grpc", f"127.0.0.1:{grpc_port}",
                "--log-level", "warn"]
        serve = self.start(argv)
        end = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", http_port), timeout=1) as s:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if b" 200 " in s.recv(100):
                        break
            except OSError:
                pass
            if serve.poll() is not None or time.monotonic() > end:
                raise RuntimeError("tollgate serve did not become healthy")
            time.sleep(0.1)
        shown_serve = "tollgate serve --config bench.yaml --redis URL"
        callers_list = [8] if self.smoke else sorted({8, max(self.callers)})
        for callers in callers_list:
            flags = ["--via", "http", "--target", f"127.0.0.1:{http_port}", "--callers",
                     str(callers), "--keys", str(KEYS)]
            shown = f"{shown_serve}; compare_driver {' '.join(flags[:2])} --target HOST:PORT " \
                    f"{' '.join(flags[4:] + self.amount())}"
            self.measure("service", "tollgate serve, HTTP POST /v1/check", callers, shown,
                         self.counting_fallback(
                             http_port, lambda f=flags: self.run_json([self.driver] + f +
                                                                      self.amount())),
                         limiter_pid=serve.pid)
        if os.access(self.grpc_load, os.X_OK):
            self.grpc_rows(serve, http_port, grpc_port, shown_serve)
        else:
            self.rows.append({"group": "service", "name": "tollgate serve, gRPC (Envoy RLS)",
                              "callers": 0, "command": "bench/grpc_load",
                              "pending": "bench/grpc_load is not built yet"})
            log("  gRPC: pending (no bench/grpc_load)")

    @staticmethod
    def store_counts(http_port):
        """Decisions the server's Redis answered and its local fallback answered (/metrics)."""
        counts = {"tollgate_store_decisions_total": 0,
                  "tollgate_store_fallback_decisions_total": 0}
        with socket.create_connection(("127.0.0.1", http_port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            body = b""
            while chunk := s.recv(65536):
                body += chunk
        for line in body.decode(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] in counts:
                counts[parts[0]] = float(parts[1])
        return (counts["tollgate_store_decisions_total"],
                counts["tollgate_store_fallback_decisions_total"])

    def counting_fallback(self, http_port, run):
        """`run`, with the share of the server's decisions its fallback answered added to the
        result: a service row measures Redis only when that share is about 0 (a Redis call
        past its deadline is answered locally, and more cheaply)."""
        def wrapped():
            store0, fallback0 = self.store_counts(http_port)
            result = run()
            store1, fallback1 = self.store_counts(http_port)
            total = (store1 - store0) + (fallback1 - fallback0)
            result["fallback_share"] = (fallback1 - fallback0) / total if total else 0
            return result
        return wrapped

    def grpc_rows(self, serve, http_port, grpc_port, shown_serve):
        """gRPC (Envoy's RLS) through bench/grpc_load, the service's load generator."""
        for callers in ([8] if self.smoke else sorted({8, max(self.callers)})):
            amount = ["--requests", str(self.requests)] if self.smoke else \
                ["--duration", str(self.duration), "--warmup", str(self.warmup)]
            flags = ["--domain", "bench", "--key", "user", "--keys", str(KEYS), "--concurrency",
                     str(callers), "--channels", "2"] + amount
            shown = f"{shown_serve} --config envoy.yaml; grpc_load --target HOST:PORT " \
                    f"{' '.join(flags)}"
            self.measure("service", "tollgate serve, gRPC ShouldRateLimit (Envoy RLS)", callers,
                         shown, self.counting_fallback(
                             http_port, lambda f=flags: self.run_grpc_load(grpc_port, f)),
                         limiter_pid=serve.pid)

    def run_grpc_load(self, grpc_port, flags):
        argv = [self.grpc_load, "--target", f"127.0.0.1:{grpc_port}"] + flags
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=20 if self.smoke else 60 + 3 * (self.duration + self.warmup))
        result = None
        for line in done.stdout.splitlines():
            if line.startswith("result "):
                result = dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
        if result is None:
            raise RuntimeError(f"grpc_load exit {done.returncode}: "
                               f"{(done.stdout + done.stderr).strip()[-300:]}")
        calls = int(result["calls"])
        # grpc_load counts the measured window only; the Redis counters cover the warm-up too.
        total = calls if self.smoke else round(calls * (self.duration + self.warmup) /
                                               self.duration)
        return {"decisions": calls, "total_decisions": total, "errors": int(result["errors"]),
                "per_second": float(result["decisions_per_second"]),
                "seconds": float(result["seconds"]), "p50_us": float(result["p50_us"]),
                "p99_us": float(result["p99_us"])}

    # ---- report ------------------------------------------------------------------------
    def best_peer(self, callers):
        peers = [r for r in self.rows if r["group"] == "peer" and "error" not in r]
        same = [r for r in peers if r["callers"] == callers]
        pool = same or peers
        return max(pool, key=lambda r: r["per_second"]) if pool else None

    def write(self):
        os.makedirs(self.out, exist_ok=True)
        ceiling = getattr(self, "ceiling_row", None)
        ceiling_rate = ceiling.get("per_second") if ceiling and "error" not in ceiling else None
        for row in self.rows:
            if "per_second" not in row:
                continue
            row["x_ceiling"] = row["per_second"] / ceiling_rate if ceiling_rate else None
            peer = self.best_peer(row["callers"])
            row["x_best_peer"] = row["per_second"] / peer["per_second"] if peer else None
            row["best_peer"] = f"{peer['name']} @ {peer['callers']}" if peer else None
        with open(os.path.join(self.out, "compare.json"), "w") as f:
            json.dump({"redis_version": self.redis_version, "rows": self.rows}, f, indent=1)
        self.write_tsv()
        lines = self.markdown(ceiling_rate)
        with open(os.path.join(self.out, "compare.md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        self.plot()

    def write_tsv(self):
        with open(os.path.join(self.out, "compare.tsv"), "w") as f:
            f.write("series\tcallers\tper_second\tp50_us\tp99_us\n")
            for row in self.rows:
                if "per_second" in row:
                    f.write(f"{row['name']}\t{row['callers']}\t{row['per_second']:.1f}\t"
                            f"{row.get('p50_us', 0):.1f}\t{row.get('p99_us', 0):.1f}\n")

    def markdown(self, ceiling_rate):
        def rate(value):
            return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value / 1e3:.1f}k"

        def ratio(value):
            return f"{value:.2f}×" if value is not None else "–"

        load = os.getloadavg()
        lines = [
            "## Side by side: the Redis ceiling, tollgate, the peers (bench/compare.py)",
            "",
            f"One run against one fresh redis-server {self.redis_version} on 127.0.0.1, "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"{os.cpu_count()} cores, load average at the end {load[0]:.1f}. "
            f"{KEYS} keys, limits nobody reaches (every check allowed), "
            + (f"{self.duration:g} s per row after {self.warmup:g} s of warm-up."
               if not self.smoke else f"{self.requests} decisions per row (smoke).")
            + " Callers: checks kept outstanding (closed loop); redis-benchmark keeps 8 × 64.",
            "",
            "CPU s/M: CPU seconds per million decisions of the limiter process (library and "
            "peer rows: the driver process itself; service rows: `tollgate serve`; ceiling: "
            "redis-benchmark). Redis CPU s/M and EVALSHA/decision: from INFO before and after "
            "each row.",
            "",
            "| row | callers | decisions/s | p50 µs | p99 µs | CPU s/M | Redis CPU s/M | "
            "EVALSHA/decision | × ceiling | × best peer | command |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in self.rows:
            command = row["command"].replace("|", "\\|")
            if "error" in row or "pending" in row:
                what = "failed: " + row["error"] if "error" in row else "pending: " + row["pending"]
                lines.append(f"| {row['name']} | | {what} | | | | | | | | `{command}` |")
                continue
            callers = row["callers"] if row["callers"] else "open loop"
            lines.append(
                f"| {row['name']} | {callers} | {rate(row['per_second'])} | "
                f"{row.get('p50_us', 0):.0f} | {row.get('p99_us', 0):.0f} | "
                f"{row.get('cpu_s_per_million', 0):.1f} | "
                f"{row.get('redis_cpu_s_per_million', 0):.1f} | "
                f"{row.get('evalsha_per_decision', 0):.2f} | {ratio(row.get('x_ceiling'))} | "
                f"{ratio(row.get('x_best_peer'))} | `{command}` |")
        lines += ["", "Best peer: the fastest peer row with the same callers."]
        for row in self.rows:
            share = row.get("evalsha_per_decision")
            if row["group"] == "service" and share is not None and 0 < share < 0.95:
                lines.append(f"{row['name']} ({row['callers']} callers): {share:.2f} EVALSHA per "
                             "decision: the rest were answered without a Redis script, most "
                             "likely by the limit's fail_open fallback once its deadline (10 ms "
                             "unless the config sets one) passed on this machine.")
        lines += [""] + self.goals(ceiling_rate)
        pairs = self.pairs_markdown()
        if pairs:
            lines += [""] + pairs
        if not self.smoke:
            lines += ["", "Plots: `compare_callers.png` (decisions/s by callers), "
                          "`compare_rows.png` (every row)."]
        return lines

    def find(self, name_part, callers=None):
        for row in self.rows:
            if name_part in row["name"] and "per_second" in row and (
                    callers is None or row["callers"] == callers):
                return row
        return None

    def goals(self, ceiling_rate):
        top = max(self.callers)
        lines = ["### Goals (issues #3 and #8), from this run", ""]
        tb = self.find("tollgate token_bucket, exact", top)
        rlf = self.find("rate-limiter-flexible", top)

        def verdict(ok):
            return "**met**" if ok else "**not met**"

        if tb and ceiling_rate:
            x = tb["per_second"] / ceiling_rate
            lines.append(f"- Exact token bucket ≥ 0.9× the seed script's redis-benchmark "
                         f"ceiling: {x:.2f}× ({tb['per_second']:,.0f} vs {ceiling_rate:,.0f}/s, "
                         f"{top} callers) — {verdict(x >= 0.9)}.")
        tb512 = self.find("tollgate token_bucket, exact", 512)
        if tb512 and ceiling_rate:
            x = tb512["per_second"] / ceiling_rate
            lines.append(f"  With as many checks outstanding as redis-benchmark keeps (512): {x:.2f}× "
                         f"({tb512['per_second']:,.0f}/s) — {verdict(x >= 0.9)}.")
        for callers in self.PAIR_CALLERS:
            ratios = self.pair_ratios(callers)
            if ratios:
                median = statistics.median(ratios)
                lines.append(f"  Paired re-check at {callers} callers (ceiling and library "
                             f"alternately, below): {', '.join(f'{r:.2f}' for r in ratios)}× "
                             f"— median {median:.2f}× — {verdict(median >= 0.9)}.")
        c64 = getattr(self, "ceiling_64_row", None)
        if tb and c64 and "per_second" in c64:
            lines.append(f"  redis-benchmark itself with 64 outstanding (-c 1 -P 64): "
                         f"{c64['per_second']:,.0f}/s; the library's {top} callers do "
                         f"{tb['per_second'] / c64['per_second']:.2f}× that.")
        if tb and tb.get("redis_cpu_s_per_million"):
            busy = tb["redis_cpu_s_per_million"] * tb["per_second"] / 1e6
            seed_cost = self.ceiling_row.get("redis_cpu_s_per_million", 0)
            lines.append(f"  What bounds it: Redis was busy {busy:.0%} of the library row's time, "
                         f"at {tb['redis_cpu_s_per_million']:.1f} Redis CPU s per million checks "
                         f"(the seed script under redis-benchmark: {seed_cost:.1f})"
                         + (": the script's cost in Redis, not the client, is the limit."
                            if busy >= 0.85 else
                            ": Redis had time to spare, so the client side bounds the row."))
        if tb and rlf:
            x = tb["per_second"] / rlf["per_second"]
            lines.append(f"- Exact token bucket ≥ 2× rate-limiter-flexible ({top} callers): "
                         f"{x:.2f}× — {verdict(x >= 2)}.")
        multi = getattr(self, "multi_row", None)
        if multi and "per_second" in multi:
            x = multi["evalsha_per_decision"]
            lines.append(f"- Three limits in one request cost one round trip: "
                         f"{x:.3f} EVALSHA per request (INFO commandstats) — "
                         f"{verdict(x <= 1.01)}.")
        sync, hot = getattr(self, "sync_row", None), getattr(self, "hot_exact_row", None)
        if sync and hot and "per_second" in sync and "per_second" in hot:
            x = sync["per_second"] / hot["per_second"]
            fw = self.find("tollgate fixed_window, exact", top)
            extra = (f", {sync['per_second'] / fw['per_second']:.1f}× the 1000-key exact row"
                     if fw else "")
            lines.append(f"- Sync mode ≥ 10× exact: {x:.1f}× the exact fixed window on the same "
                         f"hot key{extra} — {verdict(x >= 10)}. Redis scripts while it ran: "
                         f"{sync['evalsha_per_second']:.1f}/s, bound 1 instance ÷ 100 ms = 10/s "
                         f"per hot key — {verdict(sync['evalsha_per_second'] <= 10.5)}.")
        lease, charge = getattr(self, "lease_row", None), getattr(self, "charge_row", None)
        if lease and "per_second" in lease:
            x = lease["evalsha_per_decision"]
            lines.append(f"- A lease costs at most 2 store round trips (acquire, release): "
                         f"{x:.3f} EVALSHA per lease (INFO commandstats) — {verdict(x <= 2.01)}.")
            if tb:
                x = lease["per_second"] / tb["per_second"]
                lines.append(f"- Leases per second ≥ 0.5× the token bucket's checks per second "
                             f"({top} callers): {x:.2f}× ({lease['per_second']:,.0f} leases/s; "
                             f"Redis CPU {lease.get('redis_cpu_s_per_million', 0):.1f} s per "
                             f"million leases against "
                             f"{tb.get('redis_cpu_s_per_million', 0):.1f} per million checks) "
                             f"— {verdict(x >= 0.5)}.")
        if charge and "per_second" in charge and tb:
            lines.append(f"- A charge beside a check ({top} callers): "
                         f"{charge['per_second'] / tb['per_second']:.2f}× the token bucket's "
                         f"checks per second, {charge['evalsha_per_decision']:.3f} EVALSHA per "
                         f"charge.")
        half = getattr(self, "half_row", None)
        if half and "per_second" in half:
            lines.append(f"- p50 at half the ceiling's load < 0.3 ms: {half['p50_us']:.0f} µs "
                         f"(achieved {half['per_second']:,.0f}/s) — "
                         f"{verdict(half['p50_us'] < 300)}.")
        return lines

    def plot(self):
        if self.smoke or shutil.which("gnuplot") is None:
            return
        series = {}
        for row in self.rows:
            if "per_second" in row and row["group"] in ("library", "peer") and row["callers"] and \
                    ("exact" in row["name"] or row["group"] == "peer") and \
                    "hot key" not in row["name"] and "3 limits" not in row["name"]:
                series.setdefault(row["name"], []).append((row["callers"], row["per_second"]))
        plots = []
        for index, (name, points) in enumerate(series.items()):
            path = os.path.join(self.tmp, f"series{index}.dat")
            with open(path, "w") as f:
                for callers, value in sorted(points):
                    f.write(f"{callers} {value}\n")
            plots.append(f"'{path}' using 1:2 with linespoints lw 2 title '{name}'")
        ceiling = getattr(self, "ceiling_row", {})
        if ceiling.get("per_second"):
            plots.append(f"{ceiling['per_second']} with lines lw 2 dt 2 lc rgb 'red' "
                         f"title 'ceiling: redis-benchmark, seed script'")
        script = f"""set terminal pngcairo size 1000,600 noenhanced
set output '{self.out}/compare_callers.png'
set title 'Decisions per second against one local Redis, by concurrent callers'
set logscale x 2
set xlabel 'callers (checks outstanding)'
set ylabel 'decisions/s'
set key outside bottom center
set grid
plot {', '.join(plots)}
"""
        bars = os.path.join(self.tmp, "bars.dat")
        measured = [row for row in self.rows if "per_second" in row]
        top_rate = max([row["per_second"] for row in measured] + [1000])
        with open(bars, "w") as f:
            for row in self.rows:
                if "per_second" in row:
                    label = f"{short_name(row['name'])} ({row['callers'] or 'open'})"
                    label = label.replace('"', "'")
                    f.write(f"\"{label}\" {row['per_second']}\n")
        script += f"""reset
set terminal pngcairo size 1200,900 noenhanced
set output '{self.out}/compare_rows.png'
set title 'Every row of the side-by-side run (decisions/s)'
set style fill solid 0.6
set boxwidth 0.7
set logscale x
set xlabel 'decisions/s (log)'
set ytics nomirror font ',9'
set yrange [{len(measured) - 0.4}:-0.6]
set xrange [100:{top_rate * 2:.0f}]
set grid x
plot '{bars}' using 2:0:(0):2:($0-0.35):($0+0.35):yticlabels(1) with boxxyerrorbars notitle
"""
        done = subprocess.run(["gnuplot"], input=script, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
        if done.returncode != 0:
            log(f"gnuplot failed: {done.stderr.strip()[-300:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--out", default=os.path.join(SOURCE, "bench", "out"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    harness = Harness(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        harness.start_redis()
        for step in (harness.ceiling, harness.library, harness.peers, harness.service,
                     harness.pairs):
            try:
                step()
            except Exception as error:
                harness.failures.append(f"{step.__name__}: {error}")
                log(f"{step.__name__} failed: {error}")
        if harness.smoke:
            try:
                harness.agreement()
            except Exception as error:
                harness.failures.append(f"agreement: {error}")
                log(f"agreement failed: {error}")
        harness.write()
    finally:
        harness.stop_all()
    log(f"wrote {os.path.join(harness.out, 'compare.md')}")
    if harness.failures:
        for failure in harness.failures:
            log(f"FAILED: {failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
