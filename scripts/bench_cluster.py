"""S11, cluster mode, for scripts/bench (`--s11`, `--cluster` and the full run) and
scripts/bench-ab (`--s11`): two instances on a 3-member etcd over ministack against one
instance on RocksDB and the store alone, with etcd's requests per write (its Prometheus
metrics) and what one etcd round trip costs (examples/etcd_rtt.rs)."""
import json, os, re, subprocess, time, urllib.request

import bench as b


def load_parallel(targets, mode, secs):
    """bench_load on several URLs at once [(url, concurrency)]; req/s summed, latencies the
    worst of the parts."""
    procs = [subprocess.Popen([b.LOAD, "--url", url, "--mode", mode, "--secs", str(secs), "--concurrency", str(n)],
                              stdout=subprocess.PIPE, text=True) for url, n in targets]
    parts = []
    for p in procs:
        out, _ = p.communicate()
        parts.append(json.loads(out.strip().splitlines()[-1]))
    if any(r["errors"] or r["rejected"] for r in parts):
        raise SystemExit(f"{mode}: failed or refused requests in {parts}")
    r = dict(parts[0])
    for k in ("rps", "ok", "rejected", "errors"):
        r[k] = sum(x[k] for x in parts)
    for k in ("p50_ms", "p99_ms", "p999_ms"):
        r[k] = max(x[k] for x in parts)
    return r


def etcd_rtt_binary():
    return os.path.join(b.REL, "examples", "etcd_rtt")


def etcd_requests(endpoints):
    """etcd's gRPC requests handled so far, by method (Range, Txn, Put, LeaseGrant...), summed
    over the members (each request is handled by the one member it was sent to), from each
    member's Prometheus metrics on its client URL."""
    counts = {}
    for e in endpoints:
        text = urllib.request.urlopen(f"{e}/metrics", timeout=5).read().decode()
        for line in text.splitlines():
            if not line.startswith("grpc_server_handled_total{"):
                continue
            labels, value = line.rsplit(" ", 1)
            method = re.search(r'grpc_method="([^"]+)"', labels).group(1)
            counts[method] = counts.get(method, 0) + float(value)
    return counts


def counted(endpoints, fn):
    """Runs fn (a load run) and adds to its result the etcd requests it made per accepted
    write, by method."""
    before = etcd_requests(endpoints)
    r = fn()
    after = etcd_requests(endpoints)
    writes = max(r["ok"], 1)
    r["etcd_per_write"] = {m: (after[m] - before.get(m, 0)) / writes for m in after if after[m] - before.get(m, 0) > 0}
    return r


def cpu_of(groups, fn):
    """Runs fn and adds to its result the CPU ms per request each group of processes
    ({name: [pid, ...]}) spent on it."""
    cpu = lambda pids: sum(b.cpu_secs(p) for p in pids)
    before = {name: cpu(pids) for name, pids in groups.items()}
    r = fn()
    total = max(r["ok"] + r["rejected"], 1)
    r["cpu_ms"] = {name: (cpu(pids) - before[name]) * 1000 / total for name, pids in groups.items()}
    return r


S11_NAMES = ("the store alone (ministack)", "one instance, fence table on RocksDB", "two instances, fence table on a 3-member etcd")


def s11(work, secs, rounds):
    """S11, cluster mode (docs/cluster.md): S5-style fenced 4 KiB PUTs through two instances
    sharing a 3-member etcd over ministack (`scripts/cluster up`), against one instance with its
    fence table on RocksDB over the same ministack, and the store alone: one client (latency)
    and 16 clients (throughput; through both instances, 8 each). Alternated for `rounds`, the
    median round of each. Also: etcd's requests per fenced write, by kind (its metrics, before
    and after each cluster run), and what one round trip costs (examples/etcd_rtt.rs)."""
    os.makedirs(work, exist_ok=True)
    cdir = os.path.join(work, "cluster")
    out = subprocess.run([os.path.join(b.ROOT, "scripts", "cluster"), "up", cdir, "--instances", "2", "--bin", b.FENCEGATE],
                         check=True, capture_output=True, text=True, env=dict(os.environ, RUST_LOG="warn")).stdout
    env = dict(l.split("=", 1) for l in out.splitlines() if "=" in l)
    endpoints = env["ETCD_ENDPOINTS_CSV"].split(",")
    runs = {(n, c): [] for n in S11_NAMES for c in (1, 16)}
    try:
        g = b.Fencegate(work, "s11-rocks", f"""[backends.store]
kind = "s3"
endpoint = "http://127.0.0.1:{env['STORE_PORT']}"
access_key_id = "test"
secret_access_key = "test"

[buckets.default]
backend = "store"
backend_bucket = "fencegate-cluster"
backend_prefix = "rocks/"
""")
        pid = lambda name: int(open(os.path.join(cdir, f"{name}.pid")).read())
        # CPU per write of each part (all share the cores): where the throughput goes.
        groups = {"store": [pid("store")], "etcd": [pid(f"etcd{i}") for i in (1, 2, 3)], "fencegate": [pid("fg1"), pid("fg2")]}
        store = f"http://127.0.0.1:{env['STORE_PORT']}/fencegate-cluster/alone"
        inst = lambda n: f"http://127.0.0.1:{env[f'FG{n}_PORT']}/v1/objects/default"
        for r in range(rounds):
            b.log(f"S11 round {r + 1}/{rounds}")
            for c in (1, 16):
                runs[(S11_NAMES[0], c)].append(cpu_of({"store": groups["store"]}, lambda: b.load(store, "s3", secs, concurrency=c)))
                rocks = {"store": groups["store"], "fencegate": [g.proc.pid]}
                runs[(S11_NAMES[1], c)].append(cpu_of(rocks, lambda: b.load(g.objects("default") + f"/c{c}", "distinct", secs, concurrency=c)))
                if c == 1:
                    two = lambda: b.load(inst(1) + "/c1", "distinct", secs, concurrency=1)
                else:
                    two = lambda: load_parallel([(inst(1) + "/c16a", 8), (inst(2) + "/c16b", 8)], "distinct", secs)
                runs[(S11_NAMES[2], c)].append(counted(endpoints, lambda: cpu_of(groups, two)))
        g.stop()
        rtt = json.loads(subprocess.run([etcd_rtt_binary(), "--endpoint", endpoints[0], "--n", "1000"], check=True,
                                        capture_output=True, text=True).stdout.strip().splitlines()[-1])
    finally:
        subprocess.run([os.path.join(b.ROOT, "scripts", "cluster"), "down", cdir], capture_output=True)
    return {k: b.median_run(v) for k, v in runs.items()}, rtt


def s11_table(s11_runs, rtt):
    r = s11_runs
    rows = ["| S11 fenced 4 KiB PUT, cluster mode (ministack) | one client: req/s | p50 ms | p99 ms | 16 clients: req/s | p50 ms | p99 ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n in S11_NAMES:
        one, many = r[(n, 1)], r[(n, 16)]
        rows.append(f"| {n} | {one['rps']:.0f} | {one['p50_ms']:.2f} | {one['p99_ms']:.2f} | {many['rps']:.0f} | {many['p50_ms']:.2f} | {many['p99_ms']:.2f} |")
    rows += ["", "| S11 CPU ms per 4 KiB PUT at 16 clients | store | fencegate | etcd (3 members) |", "| --- | ---: | ---: | ---: |"]
    for n in S11_NAMES:
        cpu = r[(n, 16)].get("cpu_ms", {})
        cell = lambda k: f"{cpu[k]:.2f}" if k in cpu else "-"
        rows.append(f"| {n} | {cell('store')} | {cell('fencegate')} | {cell('etcd')} |")
    kinds = ["| etcd requests per fenced write (all members) | " + " | ".join(["one client", "16 clients"]) + " |", "| --- | ---: | ---: |"]
    per = {c: r[(S11_NAMES[2], c)].get("etcd_per_write", {}) for c in (1, 16)}
    for m in sorted(set(per[1]) | set(per[16]), key=lambda m: -per[1].get(m, 0)):
        kinds.append(f"| {m} | {per[1].get(m, 0):.2f} | {per[16].get(m, 0):.2f} |")
    kinds.append(f"| all | {sum(per[1].values()):.2f} | {sum(per[16].values()):.2f} |")
    cost = ["| one etcd round trip (examples/etcd_rtt, one connection, the instances' first member) | p50 ms | p99 ms |", "| --- | ---: | ---: |"]
    for k, what in (("range", "a linearizable range of one key"), ("put", "a put"), ("txn_cas_put", "a compare-and-swap Txn (compare a mod_revision, put), as an intent"),
                    ("txn_two_ranges", "a read-only Txn of two keys (a row and its floor)")):
        cost.append(f"| {what} | {rtt[k]['p50_ms']:.2f} | {rtt[k]['p99_ms']:.2f} |")
    return rows + [""] + kinds + [""] + cost


def s11_checks(s11_runs, rtt):
    r = s11_runs
    ratio = r[(S11_NAMES[2], 16)]["rps"] / r[(S11_NAMES[1], 16)]["rps"]
    added = r[(S11_NAMES[2], 1)]["p50_ms"] - r[(S11_NAMES[0], 1)]["p50_ms"]
    trip = rtt["txn_cas_put"]["p50_ms"]
    bound = 2 * trip + 0.3
    return [
        ("S11 cluster throughput (two instances, 16 clients) >= 0.5 x one instance on RocksDB", f"{ratio:.2f}", ratio >= 0.5),
        ("S11 one client: the cluster's p50 above the store's <= two etcd round trips + 0.3 ms",
         f"+{added:.2f} ms = {added / trip:.1f} round trips of {trip:.2f} ms (bound {bound:.2f} ms)", added <= bound),
    ]


def s11_text(s11_runs, rtt, command):
    return "\n".join([
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores; command: `{command}`. "
        "Store: ministack; etcd: 3 members (Debian etcd-server) on the same machine; the median of the alternated rounds shown. "
        "Every setup shares the cores with the store and etcd, so these compare setups, not hardware.",
        "",
        *s11_table(s11_runs, rtt),
        "",
        "| target | figure | |",
        "| --- | --- | --- |",
        *[f"| {t} | {f} | {'met' if ok else 'MISSED'} |" for t, f, ok in s11_checks(s11_runs, rtt)],
    ]) + "\n"
