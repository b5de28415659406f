#!/usr/bin/env python3
"""fencegate's benchmark: scenarios S0-S12, one table, written into BENCHMARKS.md.

Run through scripts/bench, which builds the binaries and sets CARGO_TARGET_DIR. Every
comparison is a ratio of setups measured alternately in this one run, never against figures
from another run. Load comes from examples/bench_load.rs (closed loop, HDR histogram).
"""
import argparse, json, os, platform, re, shutil, socket, statistics, subprocess, sys, tempfile, time, urllib.request

import bench_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release")
FENCEGATE = os.path.join(REL, "fencegate")
LOAD = os.path.join(REL, "examples", "bench_load")
POPULATE = os.path.join(REL, "examples", "bench_populate")
STORE_ALONE = os.path.join(REL, "examples", "bench_store_alone")
MOTO = os.path.join(ROOT, ".venv", "bin", "moto_server")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_http(url, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except Exception:
            time.sleep(0.02)
    raise SystemExit(f"{url} did not answer within {timeout} s")


class Fencegate:
    def __init__(self, work, name, config):
        self.data = os.path.join(work, name)
        self.port = free_port()
        cfg = os.path.join(work, name + ".toml")
        with open(cfg, "w") as f:
            f.write(config)
        started = time.time()
        self.proc = subprocess.Popen(
            [FENCEGATE, "serve", "--config", cfg, "--data-dir", self.data, "--listen", f"127.0.0.1:{self.port}"],
            env=dict(os.environ, RUST_LOG="warn"), stderr=open(os.path.join(work, name + ".log"), "w"))
        wait_http(f"http://127.0.0.1:{self.port}/healthz")
        self.startup_s = time.time() - started

    def objects(self, bucket):
        return f"http://127.0.0.1:{self.port}/v1/objects/{bucket}"

    def peak_rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def load(url, mode, secs, concurrency=64, extra=()):
    out = subprocess.run([LOAD, "--url", url, "--mode", mode, "--secs", str(secs), "--concurrency", str(concurrency), *extra],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    if r["errors"] or (mode in ("distinct", "unfenced", "s3") and r["rejected"]):
        raise SystemExit(f"{mode} on {url}: {r['errors']} failed and {r['rejected']} refused requests")
    return r


def cpu_secs(pid):
    """User + system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def switches(pid):
    """Context switches of every thread of a process so far (voluntary: it waited on another
    thread, the disk or the network; involuntary: it was preempted)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass  # the thread ended meanwhile
    return total


def measured(pids, fn):
    """Runs fn and adds to its result the CPU ms per request each of `pids` spent on it."""
    before = {name: (cpu_secs(pid), switches(pid)) for name, pid in pids.items()}
    r = fn()
    total = max(r["ok"] + r["rejected"], 1)
    r["cpu_ms"] = {name: (cpu_secs(pid) - before[name][0]) * 1000 / total for name, pid in pids.items()}
    r["switches"] = {name: (switches(pid) - before[name][1]) / total for name, pid in pids.items()}
    return r


def median_run(runs):
    """The run with the median throughput (its latencies belong to it)."""
    return sorted(runs, key=lambda r: r["rps"])[len(runs) // 2]


FS_CONFIG = '[buckets.fenced]\n\n[buckets.open]\nfencing = "off"\n'


def store_alone(work, secs, r, concurrency=64):
    """S0: what the fs backend's disk can do with nothing in front (examples/bench_store_alone.rs)."""
    d = os.path.join(work, f"s0-{r}")
    out = subprocess.run([STORE_ALONE, "--dir", d, "--secs", str(secs), "--concurrency", str(concurrency)],
                         check=True, capture_output=True, text=True).stdout
    shutil.rmtree(d, ignore_errors=True)
    return json.loads(out.strip().splitlines()[-1])


def s1_to_s4(work, secs, rounds):
    g = Fencegate(work, "s1", FS_CONFIG)
    s0, s1, s4 = [], [], []
    for r in range(rounds):
        log(f"S0/S1/S4 round {r + 1}/{rounds}")
        s0.append(store_alone(work, secs, r))
        s1.append(measured({"fencegate": g.proc.pid}, lambda: load(g.objects("fenced"), "distinct", secs)))
        s4.append(load(g.objects("open"), "unfenced", secs))
    log("S2, S3, /healthz")
    s2 = load(g.objects("fenced"), "hot", secs, concurrency=8)
    s3 = load(g.objects("fenced"), "stale", secs)
    health = load(f"http://127.0.0.1:{g.port}/healthz", "healthz", secs)
    g.stop()
    return median_run(s0), median_run(s1), s2, s3, median_run(s4), health


MINISTACK = os.path.join(ROOT, ".venv-ministack", "bin", "ministack")


def start_store(kind, work):
    """An S3 store on a free port with bucket `bench-store`: ministack (honours conditional
    writes and keeps connections alive: what a safe-mode user runs) or moto (neither)."""
    port = free_port()
    if kind == "moto":
        argv, env = [MOTO, "-H", "127.0.0.1", "-p", str(port)], os.environ
    else:
        if not os.path.exists(MINISTACK):
            raise SystemExit("ministack is not installed: run scripts/test once (it installs .venv-ministack)")
        argv = [MINISTACK]
        env = dict(os.environ, GATEWAY_PORT=str(port), BIND_HOST="127.0.0.1", S3_PERSIST="0", TMPDIR=work)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{port}/")
    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/bench-store", method="PUT"))
    return proc, port


def start_nginx(work, name, store_port):
    """nginx as a plain keep-alive reverse proxy to the store: the floor for any proxy.
    Returns (master process, port, worker pid)."""
    port = free_port()
    prefix = os.path.join(work, name)
    os.makedirs(prefix, exist_ok=True)
    user = "user root;\n" if os.geteuid() == 0 else ""
    with open(os.path.join(prefix, "nginx.conf"), "w") as f:
        f.write(f"""{user}worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body; proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fcgi; uwsgi_temp_path {prefix}/uwsgi; scgi_temp_path {prefix}/scgi;
  upstream store {{ server 127.0.0.1:{store_port}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    client_max_body_size 0;
    location / {{
      proxy_pass http://store;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_request_buffering off;
      proxy_buffering off;
    }}
  }}
}}
""")
    nginx = subprocess.Popen([NGINX, "-p", prefix, "-c", os.path.join(prefix, "nginx.conf")], stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{port}/")
    worker = int(subprocess.run(["pgrep", "-P", str(nginx.pid)], capture_output=True, text=True).stdout.split()[0])
    return nginx, port, worker


def s3_config(store_port, kind, prefix):
    """fencegate's s3 backend on the store: safe mode on ministack; on moto, which ignores
    conditions, only with the unsafe opt-in."""
    unsafe = "unsafe_no_conditional_writes = true\n" if kind == "moto" else ""
    return f"""[backends.store]
kind = "s3"
endpoint = "http://127.0.0.1:{store_port}"
access_key_id = "test"
secret_access_key = "test"
{unsafe}
[buckets.fenced]
backend = "store"
backend_bucket = "bench-store"
backend_prefix = "{prefix}/"
"""


def s5_on(kind, work, secs, rounds, s9=False):
    """S5 on one store: 4 KiB PUTs straight to it, through nginx and through fencegate
    (fenced), alternated for `rounds`; the median round of each, and (s9) S9 on the same store."""
    started = []
    direct, proxied, fenced = [], [], []
    try:
        store, port = start_store(kind, work)
        started.append(store)
        nginx, nginx_port, nginx_worker = start_nginx(work, f"nginx-{kind}", port)
        started.append(nginx)
        g = Fencegate(work, f"s5-{kind}", s3_config(port, kind, "fenced"))
        for r in range(rounds):
            log(f"S5 ({kind}) round {r + 1}/{rounds}")
            direct.append(measured({"store": store.pid}, lambda: load(f"http://127.0.0.1:{port}/bench-store", "s3", secs)))
            proxied.append(measured({"store": store.pid, "proxy": nginx_worker}, lambda: load(f"http://127.0.0.1:{nginx_port}/bench-store", "s3", secs)))
            fenced.append(measured({"store": store.pid, "proxy": g.proc.pid}, lambda: load(g.objects("fenced"), "distinct", secs)))
        g.stop()
        s9_run = None
        if s9:
            log(f"S9: 200 concurrent 7 MB uploads to the s3 backend ({kind})")
            # Keys of its own: S5's objects, unknown to this fresh fence table, would be bypasses.
            g = Fencegate(work, f"s9-{kind}", s3_config(port, kind, "s9"))
            s9_run = load(g.objects("fenced"), "distinct", 1, concurrency=200, extra=("--size", str(7_000_000)))
            s9_run["peak_rss_mib"] = g.peak_rss_mib()
            g.stop()
    finally:
        for p in reversed(started):
            p.terminate()
            p.wait()
    return median_run(direct), median_run(proxied), median_run(fenced), s9_run


def s12(work, secs, rounds):
    """S12, one client writing 4 KiB objects one after another, as a worker's loop does: on
    ministack straight, through nginx and through fencegate's s3 backend (fenced); on disk, the
    single-thread durable write (S0 with one writer) and fencegate's fs backend (fenced).
    Alternated for `rounds`; the median round of each, with its p50 and p99."""
    names = ("ministack alone", "through nginx", "fencegate, s3 backend", "durable write alone", "fencegate, fs backend")
    runs = {n: [] for n in names}
    started = []
    try:
        store, port = start_store("ministack", work)
        started.append(store)
        nginx, nginx_port, _ = start_nginx(work, "nginx-s12", port)
        started.append(nginx)
        s3g = Fencegate(work, "s12-s3", s3_config(port, "ministack", "s12"))
        fsg = Fencegate(work, "s12-fs", FS_CONFIG)
        for r in range(rounds):
            log(f"S12 round {r + 1}/{rounds}")
            runs[names[0]].append(load(f"http://127.0.0.1:{port}/bench-store", "s3", secs, concurrency=1))
            runs[names[1]].append(load(f"http://127.0.0.1:{nginx_port}/bench-store", "s3", secs, concurrency=1))
            runs[names[2]].append(load(s3g.objects("fenced"), "distinct", secs, concurrency=1))
            runs[names[3]].append(store_alone(work, secs, f"s12-{r}", concurrency=1))
            runs[names[4]].append(load(fsg.objects("fenced"), "distinct", secs, concurrency=1))
        s3g.stop()
        fsg.stop()
    finally:
        for p in reversed(started):
            p.terminate()
            p.wait()
    return {n: median_run(rs) for n, rs in runs.items()}


def s12_table(s12_runs):
    rows = ["| S12 one client, 4 KiB PUTs in a loop | req/s | p50 ms | p99 ms | p99.9 ms |",
            "| --- | ---: | ---: | ---: | ---: |"]
    return rows + [f"| {n} | {fmt(r)} |" for n, r in s12_runs.items()]


def s12_checks(s12_runs):
    r = s12_runs
    s3_added = r["fencegate, s3 backend"]["p50_ms"] - r["ministack alone"]["p50_ms"]
    nginx_added = r["through nginx"]["p50_ms"] - r["ministack alone"]["p50_ms"]
    fs_added = r["fencegate, fs backend"]["p50_ms"] - r["durable write alone"]["p50_ms"]
    return [
        ("S12 s3, one client: fencegate adds <= 0.3 ms to the store's p50", f"{s3_added:+.2f} ms (nginx {nginx_added:+.2f} ms)", s3_added <= 0.3),
        ("S12 fs, one client: <= 0.15 ms above the single-thread durable write's p50", f"{fs_added:+.2f} ms", fs_added <= 0.15),
    ]


def s5(work, secs, rounds):
    """S5 on ministack in safe mode (what users run), then on moto (the secondary rows); S9 on
    ministack."""
    safe = s5_on("ministack", work, secs, rounds, s9=True)
    moto = s5_on("moto", work, secs, rounds)
    return safe, moto


def s5_table(safe, moto):
    rows, cpu = [], [
        "| S5 CPU per 4 KiB PUT (ms) | store | proxy |",
        "| --- | ---: | ---: |",
    ]
    for name, (direct, proxied, fenced, _) in (("ministack, safe mode", safe), ("moto, unsafe_no_conditional_writes", moto)):
        rows += [
            f"| S5 4 KiB PUT straight to the store ({name}) | {fmt(direct)} |",
            f"| S5 through nginx ({name}) | {fmt(proxied)} |",
            f"| S5 through fencegate, fenced ({name}) | {fmt(fenced)} |",
        ]
        cpu += [
            f"| {name}: straight to the store | {direct['cpu_ms']['store']:.2f} | - |",
            f"| {name}: through nginx | {proxied['cpu_ms']['store']:.2f} | {proxied['cpu_ms']['proxy']:.3f} |",
            f"| {name}: through fencegate | {fenced['cpu_ms']['store']:.2f} | {fenced['cpu_ms']['proxy']:.3f} |",
        ]
    return rows, cpu


VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
AZURITE = os.path.join(ROOT, "tests", "e2e", "azurite", "node_modules", ".bin", "azurite-blob")
# Azurite's development account (public, the same in every Azurite).
AZ_ACCOUNT = "devstoreaccount1"
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
# Container `bench-store` and a SAS that lets the load write blobs in it for a day (the Azure
# SDK for Python in .venv, which scripts/test installs).
AZ_SETUP = """
import datetime, sys
from azure.storage.blob import BlobServiceClient, ContainerSasPermissions, generate_container_sas
endpoint, account, key = sys.argv[1:4]
conn = f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};BlobEndpoint={endpoint};"
BlobServiceClient.from_connection_string(conn).create_container("bench-store")
print(generate_container_sas(account, "bench-store", account_key=key,
    permission=ContainerSasPermissions(write=True, create=True),
    expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)))
"""


def start_azurite(work):
    """Azurite's blob service (in memory, as the tests run it) on a free port, with container
    `bench-store`: (process, port, a SAS for writing into it)."""
    if not os.path.exists(AZURITE):
        raise SystemExit("Azurite is not installed: run scripts/test once (it runs npm ci in tests/e2e/azurite)")
    port = free_port()
    proc = subprocess.Popen([AZURITE, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
                             "--skipApiVersionCheck", "--disableProductStyleUrl", "--disableTelemetry",
                             "--blobKeepAliveTimeout", "120", "--silent"],
                            cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{port}/")
    endpoint = f"http://127.0.0.1:{port}/{AZ_ACCOUNT}"
    sas = subprocess.run([VENV_PYTHON, "-c", AZ_SETUP, endpoint, AZ_ACCOUNT, AZ_KEY],
                         check=True, capture_output=True, text=True).stdout.strip()
    return proc, port, sas


def azure_s5(work, secs, rounds):
    """S5 on Azurite: 4 KiB Put Blobs straight to it (a container SAS) and through
    fencegate's azure backend (fenced PUTs), alternated for `rounds`; the median round of
    each."""
    started = []
    direct, fenced = [], []
    try:
        store, port, sas = start_azurite(work)
        started.append(store)
        g = Fencegate(work, "s5-azure", f"""[backends.store]
kind = "azure"
account = "{AZ_ACCOUNT}"
access_key = "{AZ_KEY}"
endpoint = "http://127.0.0.1:{port}/{AZ_ACCOUNT}"

[buckets.fenced]
backend = "store"
backend_bucket = "bench-store"
backend_prefix = "fenced/"
""")
        sas_arg = ("--sas", sas)
        for r in range(rounds):
            log(f"S5 (Azurite) round {r + 1}/{rounds}")
            direct.append(measured({"store": store.pid}, lambda: load(f"http://127.0.0.1:{port}/{AZ_ACCOUNT}/bench-store", "azure", secs, extra=sas_arg)))
            fenced.append(measured({"store": store.pid, "proxy": g.proc.pid}, lambda: load(g.objects("fenced"), "distinct", secs)))
        g.stop()
    finally:
        for p in reversed(started):
            p.terminate()
            p.wait()
    return median_run(direct), median_run(fenced)


def azure_table(args, runs):
    direct, fenced = runs
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    head = (f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores; command: "
            f"`scripts/bench --azure --secs {args.secs:g} --rounds {args.rounds}`. Store: Azurite 3.37 (node {node}, "
            "in memory, one process); 64 clients in every setup, the median of the alternated rounds shown. "
            "fencegate's azure backend commits each PUT with one Put Blob carrying its SAS, Content-MD5 and "
            "If-None-Match: * or If-Match.")
    rows = [
        "| scenario | req/s | p50 ms | p99 ms | p99.9 ms |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| S5 4 KiB Put Blob straight to Azurite | {fmt(direct)} |",
        f"| S5 through fencegate, fenced (Azurite) | {fmt(fenced)} |",
        "",
        "| S5 CPU per 4 KiB PUT (ms), Azurite | Azurite | fencegate |",
        "| --- | ---: | ---: |",
        f"| straight to Azurite | {direct['cpu_ms']['store']:.2f} | - |",
        f"| through fencegate | {fenced['cpu_ms']['store']:.2f} | {fenced['cpu_ms']['proxy']:.3f} |",
    ]
    return "\n".join([head, ""] + rows) + "\n"


def s10(work, rounds, size_mb=200):
    """S10: 200 MB in 8 MiB parts and its completion, and a 200 MB single PUT, straight to
    ministack, through fencegate's fs backend and through its s3 backend on that ministack
    (safe mode), alternated; the median round of each, with fencegate's CPU per MB."""
    store, port = start_store("ministack", work)
    fs = s3g = None
    try:
        fs = Fencegate(work, "s10-fs", FS_CONFIG)
        s3g = Fencegate(work, "s10-s3", s3_config(port, "ministack", "s10"))
        targets = [("ministack alone", f"http://127.0.0.1:{port}", "bench-store", None),
                   ("fencegate, fs backend", f"http://127.0.0.1:{fs.port}", "fenced", fs.proc.pid),
                   ("fencegate, s3 backend (ministack)", f"http://127.0.0.1:{s3g.port}", "fenced", s3g.proc.pid)]
        runs = {name: [] for name, *_ in targets}
        for r in range(rounds):
            log(f"S10 round {r + 1}/{rounds}")
            for name, endpoint, bucket, pid in targets:
                runs[name].append(s10_run(endpoint, bucket, pid, f"r{r}", size_mb))
    finally:
        for g in (fs, s3g):
            if g:
                g.stop()
        store.terminate()
        store.wait()
    median = lambda rs, k: sorted(x[k] for x in rs)[len(rs) // 2]
    return {name: {k: (median(rs, k) if rs[0][k] is not None else None) for k in rs[0]} for name, rs in runs.items()}


def s10_run(endpoint, bucket, pid, tag, size_mb=200):
    """One S10 round on one target (bench_s10.py), with the CPU per MB of the process `pid`
    (None: not measured) over both uploads' bytes, the parts' and the single PUT's."""
    before = cpu_secs(pid) if pid else 0
    out = subprocess.run([VENV_PYTHON, os.path.join(ROOT, "scripts", "bench_s10.py"), endpoint, bucket,
                          str(size_mb), tag], check=True, capture_output=True, text=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    res["cpu_ms_per_mb"] = (cpu_secs(pid) - before) * 1000 / (2 * res["mb"]) if pid else None
    return res


def s10_table(s10_runs):
    rows = ["| S10 200 MB | parts (8 MiB) s | completion s | single PUT s | fencegate CPU ms per MB |",
            "| --- | ---: | ---: | ---: | ---: |"]
    for name, r in s10_runs.items():
        cpu = f"{r['cpu_ms_per_mb']:.1f}" if r["cpu_ms_per_mb"] is not None else "-"
        rows.append(f"| {name} | {r['parts_s']:.2f} | {r['complete_s']:.3f} | {r['single_s']:.2f} | {cpu} |")
    return rows


def write_block(name, text):
    path = os.path.join(ROOT, "BENCHMARKS.md")
    doc = open(path).read()
    begin, end = f"<!-- scripts/bench{name}:begin -->", f"<!-- scripts/bench{name}:end -->"
    block = f"{begin}\n{text}{end}"
    if begin in doc:
        doc = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, doc, flags=re.S)
    else:
        doc += f"\n## scripts/bench{name}\n\n" + block + "\n"
    open(path, "w").write(doc)
    log("wrote the table into BENCHMARKS.md")


def s6(work):
    log("S6: 1 GiB PUT and GET")
    g = Fencegate(work, "s6", FS_CONFIG)
    path = os.path.join(work, "1gib.bin")
    block = bytes(range(256)) * 4096
    with open(path, "wb") as f:
        for _ in range((1 << 30) // len(block)):
            f.write(block)
    url = g.objects("fenced") + "/big.bin"
    t = time.time()
    subprocess.run(["curl", "-sf", "-o", "/dev/null", "-T", path, "-H", "Fencing-Token: 1", url], check=True)
    put_s = time.time() - t
    t = time.time()
    subprocess.run(["curl", "-sf", "-o", "/dev/null", url], check=True)
    get_s = time.time() - t
    rss = g.peak_rss_mib()
    g.stop()
    os.remove(path)
    return 1024 / put_s, 1024 / get_s, rss


def s7(work, secs, sizes, rounds=1):
    """S7: each table populated once, then the sizes alternated for `rounds`; per size the
    median round (its latencies belong to it) and the median start-up."""
    datas = {}
    for n in sizes:
        log(f"S7: populating {n} scopes")
        datas[n] = os.path.join(work, f"s7-{n}")
        subprocess.run([POPULATE, "--dir", os.path.join(datas[n], "fences"), "--rows", str(n)], check=True)
    size = {n: sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(datas[n], "fences")) for f in fs)
            for n in sizes}
    runs = {n: [] for n in sizes}
    for r in range(rounds):
        for n in sizes:
            log(f"S7: {n} scopes, round {r + 1}/{rounds}")
            g = Fencegate(work, f"s7-{n}", FS_CONFIG)
            runs[n].append((load(g.objects("fenced"), "spread", secs, extra=("--keys", str(n))), g.startup_s))
            g.stop()
    for n in sizes:
        shutil.rmtree(datas[n])
    return [(n, median_run([x for x, _ in runs[n]]), size[n] / n, statistics.median(s for _, s in runs[n])) for n in sizes]


def s7_tables(growth):
    rows = [f"| S7 fenced PUTs over {n:,} scopes | {fmt(r)} |" for n, r, _, _ in growth]
    table = ["| S7 scopes | bytes per scope on disk | start-up s |", "| ---: | ---: | ---: |"]
    table += [f"| {n:,} | {per:.1f} | {start:.2f} |" for n, _, per, start in growth]
    return rows, table


def s7_checks(growth):
    small, big = growth[0], growth[-1]
    p99 = big[1]["p99_ms"] / small[1]["p99_ms"]
    return [
        (f"S7 p99 at {big[0]:,} scopes <= 1.3 x p99 at {small[0]:,}", f"{big[1]['p99_ms']:.2f} / {small[1]['p99_ms']:.2f} ms = {p99:.2f}", p99 <= 1.3),
        (f"S7 start-up with {big[0]:,} scopes < 5 s", f"{big[3]:.2f} s", big[3] < 5),
    ]


def fmt(r):
    return f"{r['rps']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['p999_ms']:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--secs", type=float, default=8, help="seconds per load run (default 8)")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of compared setups (default 3)")
    ap.add_argument("--growth", default="10000,1000000,10000000", help="scope counts for S7")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    ap.add_argument("--cluster", action="store_true", help="run only S11 (cluster mode: two instances on etcd; needs etcd-server and ministack) and write it into its own block of BENCHMARKS.md")
    ap.add_argument("--s11", action="store_true", help="run only S11 (cluster mode) and print it with its targets and etcd's requests per write; BENCHMARKS.md is left alone")
    ap.add_argument("--s5", action="store_true", help="run only S5 (ministack, safe mode, and moto) and print it; BENCHMARKS.md is left alone")
    ap.add_argument("--azure", action="store_true", help="run only S5 on Azurite (the azure backend) and write it into its own block of BENCHMARKS.md")
    ap.add_argument("--s10", action="store_true", help="run only S10 (200 MB uploads and completions) and print it; BENCHMARKS.md is left alone")
    ap.add_argument("--s7", action="store_true", help="run only S7 (the --growth sizes, alternated for --rounds) and print it with its targets; BENCHMARKS.md is left alone")
    ap.add_argument("--s12", action="store_true", help="run only S12 (one client, s3 and fs) and print it with its targets; BENCHMARKS.md is left alone")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="fencegate-bench-", dir=os.path.join(ROOT, "target") if os.path.isdir(os.path.join(ROOT, "target")) else None)
    if args.s10:
        try:
            print("\n".join(s10_table(s10(work, args.rounds))))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    if args.s7:
        try:
            growth = s7(work, args.secs, [int(x) for x in args.growth.split(",")], args.rounds)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        rows, table = s7_tables(growth)
        print("\n".join(["| scenario | req/s | p50 ms | p99 ms | p99.9 ms |", "| --- | ---: | ---: | ---: | ---: |"] + rows + [""] + table + [""]
                        + [f"| {t} | {f} | {'met' if ok else 'MISSED'} |" for t, f, ok in s7_checks(growth)]))
        return
    if args.s12:
        try:
            runs = s12(work, args.secs, args.rounds)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print("\n".join(s12_table(runs) + [""] + [f"| {t} | {f} | {'met' if ok else 'MISSED'} |" for t, f, ok in s12_checks(runs)]))
        return
    if args.s5:
        try:
            rows, cpu_table = s5_table(*s5(work, args.secs, args.rounds))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print("\n".join(["| scenario | req/s | p50 ms | p99 ms | p99.9 ms |", "| --- | ---: | ---: | ---: | ---: |"] + rows + [""] + cpu_table))
        return
    if args.azure:
        try:
            text = azure_table(args, azure_s5(work, args.secs, args.rounds))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(text)
        if not args.no_write:
            write_block(" --azure", text)
        return
    if args.cluster or args.s11:
        flag = "--cluster" if args.cluster else "--s11"
        try:
            text = bench_cluster.s11_text(*bench_cluster.s11(work, args.secs, args.rounds), f"scripts/bench {flag} --secs {args.secs:g} --rounds {args.rounds}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(text)
        if args.cluster and not args.no_write:
            write_block(" --cluster", text)
        return
    try:
        s0, s1, s2, s3, s4, health = s1_to_s4(work, args.secs, args.rounds)
        safe, moto = s5(work, args.secs, args.rounds)
        direct, proxied, fenced, s9 = safe
        s10_runs = s10(work, args.rounds)
        s12_runs = s12(work, args.secs, args.rounds)
        # S11 needs etcd (Debian's etcd-server); without it the run goes on and says so.
        s11_runs = bench_cluster.s11(work, args.secs, args.rounds) if shutil.which("etcd") else None
        put_mbs, get_mbs, rss = s6(work)
        growth = s7(work, args.secs, [int(x) for x in args.growth.split(",")], args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = [
        "| scenario | req/s | p50 ms | p99 ms | p99.9 ms |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| S0 the store alone: 64 threads writing 4 KiB files durably (write, fsync, rename, directory fsync) | {fmt(s0)} |",
        f"| S1 fenced 4 KiB PUT, 64 clients, distinct keys, fs | {fmt(s1)} |",
        f"| S2 one hot scope, 8 writers, increasing tokens ({s2['rejected']} of {s2['ok'] + s2['rejected']} overtaken) | {fmt(s2)} |",
        f"| S3 stale writes, rejected (409) | {fmt(s3)} |",
        f"| S3 reference: GET /healthz | {fmt(health)} |",
        f"| S4 = S1 on a bucket with fencing off | {fmt(s4)} |",
    ]
    s5_rows, cpu_table = s5_table(safe, moto)
    rows += s5_rows
    s7_rows, table_growth = s7_tables(growth)
    rows += s7_rows
    stream = [
        "| S6 streaming 1 GiB through fencegate (fs) | MB/s |",
        "| --- | ---: |",
        f"| PUT | {put_mbs:.0f} |",
        f"| GET | {get_mbs:.0f} |",
        f"| peak RSS of fencegate | {rss:.0f} MiB |",
    ]
    memory = [
        "| S9 200 concurrent 7 MB PUTs, s3 backend (ministack, safe mode) | |",
        "| --- | ---: |",
        f"| uploads accepted | {s9['ok']} |",
        f"| peak RSS of fencegate | {s9['peak_rss_mib']:.0f} MiB |",
    ]
    large = s10_table(s10_runs)
    one_client = s12_table(s12_runs)
    cluster = bench_cluster.s11_table(*s11_runs) + [""] if s11_runs else []

    ratio = lambda a, b: a["rps"] / b["rps"]
    nginx_overhead = 1 - ratio(proxied, direct)
    fg_overhead = 1 - ratio(fenced, direct)
    fg_cpu = s1["cpu_ms"]["fencegate"]
    proxy_cpu = fenced["cpu_ms"]["proxy"]
    checks = [
        ("fs at the disk's pace (S1 >= 0.85 x S0, the store alone)", f"S1/S0 = {ratio(s1, s0):.2f}", ratio(s1, s0) >= 0.85),
        ("fencegate CPU per fenced fs write <= 0.25 ms", f"{fg_cpu:.3f} ms", fg_cpu <= 0.25),
        ("fencing costs at most 30% (S1 >= 0.7 x S4)", f"S1/S4 = {ratio(s1, s4):.2f}", ratio(s1, s4) >= 0.7),
        ("stale rejections >= 5 x S1", f"S3/S1 = {ratio(s3, s1):.1f}", ratio(s3, s1) >= 5),
        ("stale rejections >= 0.5 x /healthz", f"S3/healthz = {ratio(s3, health):.2f}", ratio(s3, health) >= 0.5),
        ("S5 (ministack, safe mode): fencegate CPU per fenced 4 KiB PutObject <= 0.15 ms", f"fencegate {proxy_cpu:.3f} ms, nginx {proxied['cpu_ms']['proxy']:.3f} ms", proxy_cpu <= 0.15),
        ("S5 (ministack, safe mode): throughput >= 0.95 x the store alone", f"fencegate {ratio(fenced, direct):.2f}, nginx {ratio(proxied, direct):.2f} (throughput lost: nginx {nginx_overhead:.0%}, fencegate {fg_overhead:.0%})", ratio(fenced, direct) >= 0.95),
        ("S10 CompleteMultipartUpload of 200 MB on fs <= 0.2 s", f"{s10_runs['fencegate, fs backend']['complete_s']:.3f} s", s10_runs["fencegate, fs backend"]["complete_s"] <= 0.2),
        ("S10 fencegate CPU per MB uploaded on fs <= 5 ms", f"{s10_runs['fencegate, fs backend']['cpu_ms_per_mb']:.1f} ms", s10_runs["fencegate, fs backend"]["cpu_ms_per_mb"] <= 5),
        ("S10 200 MB single PUT through fs <= 1.1 x straight to ministack", f"{s10_runs['fencegate, fs backend']['single_s']:.2f} s / {s10_runs['ministack alone']['single_s']:.2f} s", s10_runs["fencegate, fs backend"]["single_s"] <= 1.1 * s10_runs["ministack alone"]["single_s"]),
        ("S10 200 MB single PUT through the s3 backend <= 1.2 x straight to ministack", f"{s10_runs['fencegate, s3 backend (ministack)']['single_s']:.2f} s / {s10_runs['ministack alone']['single_s']:.2f} s", s10_runs["fencegate, s3 backend (ministack)"]["single_s"] <= 1.2 * s10_runs["ministack alone"]["single_s"]),
        *s12_checks(s12_runs),
        *(bench_cluster.s11_checks(*s11_runs) if s11_runs else [("S11 cluster mode", "not run: etcd is not installed (apt-get install etcd-server etcd-client)", False)]),
        ("S9 200 concurrent 7 MB uploads (s3) peak RSS < 256 MiB", f"{s9['peak_rss_mib']:.0f} MiB", s9["peak_rss_mib"] < 256 and s9["ok"] >= 200),
        ("S6 peak RSS < 64 MiB", f"{rss:.0f} MiB", rss < 64),
        *s7_checks(growth),
    ]
    targets = ["| target | figure | |", "| --- | --- | --- |"] + [f"| {t} | {f} | {'met' if ok else 'MISSED'} |" for t, f, ok in checks]

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    moto = subprocess.run([os.path.join(ROOT, ".venv", "bin", "python"), "-c", "import moto; print(moto.__version__)"], capture_output=True, text=True).stdout.strip()
    nginx_v = subprocess.run([NGINX, "-v"], capture_output=True, text=True).stderr.strip()
    head = [
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores ({cpu}), {platform.platform()}; "
        f"{rustc}; moto {moto}; {nginx_v}. Command: `scripts/bench --secs {args.secs:g} --rounds {args.rounds} --growth {args.growth}`. "
        f"Each load run lasts {args.secs:g} s; compared setups alternate for {args.rounds} rounds and the median round is shown.",
    ]
    text = "\n".join(head + [""] + rows + [""] + cpu_table + [""] + large + [""] + one_client + [""] + cluster + stream + [""] + memory + [""] + table_growth + [""] + targets) + "\n"
    print(text)
    if not args.no_write:
        path = os.path.join(ROOT, "BENCHMARKS.md")
        doc = open(path).read()
        block = f"<!-- scripts/bench:begin -->\n{text}<!-- scripts/bench:end -->"
        if "<!-- scripts/bench:begin -->" in doc:
            doc = re.sub(r"<!-- scripts/bench:begin -->.*?<!-- scripts/bench:end -->", lambda _: block, doc, flags=re.S)
        else:
            doc += "\n## scripts/bench\n\n" + block + "\n"
        open(path, "w").write(doc)
        log("wrote the table into BENCHMARKS.md")


if __name__ == "__main__":
    main()
