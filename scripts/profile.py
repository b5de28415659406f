#!/usr/bin/env python3
"""Where fencegate's CPU goes: `perf record` of the fencegate process under S5 (4 KiB fenced PUTs,
s3 backend on ministack in safe mode) and S1 (4 KiB fenced PUTs, fs backend), each drawn as a
flame graph with inferno into docs/performance/<scenario>-<label>.svg, with the functions that
take the most CPU themselves in <scenario>-<label>.txt. Run through scripts/profile, which
installs perf and inferno. Compare a change's pictures with those of the commit before it.

And where one client's PUT waits (`--only s12`): `perf trace` of every syscall fencegate makes
while one client writes 4 KiB objects in a loop, cut into requests at the client's request
and read as a timeline of the steps that wait (the intent's WAL write and fdatasync, the
store request, the staging file's fsync, the rename, the directory fsync, the answer), each
as the median ms after the request was read, into docs/performance/s12-<label>.txt. perf
trace slows every syscall a little, so the steps are to be compared with each other and with
another build's, not with S12's latencies.
"""
import argparse, collections, os, re, statistics, subprocess, sys, tempfile, threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

OUT = os.path.join(bench.ROOT, "docs", "performance")


# Where a sample's stack passes, by a marker in its frames' names.
PARTS = [
    ("the AWS SDK's request pipeline (aws-sdk-s3, smithy runtime, SigV4 signing)", ("aws_sdk_s3", "aws_smithy", "aws_sigv4", "aws_runtime")),
    ("the fence table (RocksDB)", ("rocksdb", "RocksFenceStore")),
    ("the HTTP server and client (hyper, axum)", ("hyper::", "axum::")),
    ("the S3 protocol (s3s)", ("s3s::",)),
    ("MD5", ("md5::",)),
    ("SHA-256", ("sha2::",)),
    ("allocation (malloc, free)", ("malloc", "_int_free", "libc_free", "cfree")),
    ("the kernel's network stack (tcp_, ip_)", ("tcp_", "ip_finish", "__dev_queue_xmit")),
    ("file system calls (fsync, rename, open, write)", ("fsync", "do_renameat", "do_sys_open", "ext4_", "vfs_write")),
    ("thread wake-ups and switches (futex, scheduling)", ("futex", "finish_task_switch", "schedule")),
]


def record(pid, data, secs, run_load):
    """perf samples `pid` (call graphs from DWARF: the release binary has no frame pointers)
    while `run_load` runs for `secs`."""
    perf = subprocess.Popen(["perf", "record", "-q", "-F", "499", "--call-graph", "dwarf,16384",
                             "-p", str(pid), "-o", data, "--", "sleep", str(secs)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    loader = threading.Thread(target=run_load)
    loader.start()
    perf.wait()
    loader.join()
    if perf.returncode != 0:
        raise SystemExit(f"perf record failed ({perf.returncode}); is perf_event_paranoid <= 1?")


def draw(data, name, title):
    script = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True, check=True).stdout
    folded = subprocess.run(["inferno-collapse-perf"], input=script, capture_output=True, text=True, check=True).stdout
    svg = subprocess.run(["inferno-flamegraph", "--title", title, "--width", "1600"], input=folded,
                         capture_output=True, text=True, check=True).stdout
    with open(os.path.join(OUT, name + ".svg"), "w") as f:
        f.write(svg)
    own, within, total = collections.Counter(), collections.Counter(), 0
    for line in folded.splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        own[stack.split(";")[-1]] += n
        for part, markers in PARTS:
            if any(m in stack for m in markers):
                within[part] += n
    total = max(total, 1)
    lines = [f"{title}", "", "Share of fencegate's CPU spent within each part (a stack can be in several):"]
    lines += [f"{100 * within[part] / total:5.1f}%  {part}" for part, _ in PARTS]
    lines += ["", "The 30 functions that take the most CPU themselves:"]
    lines += [f"{100 * n / total:5.1f}%  {fn}" for fn, n in own.most_common(30)]
    with open(os.path.join(OUT, name + ".txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    bench.log(f"wrote docs/performance/{name}.svg and .txt")


def s5(work, label, secs):
    store, port = bench.start_store("ministack", work)
    try:
        g = bench.Fencegate(work, "profile-s5", bench.s3_config(port, "ministack", "profile"))
        bench.load(g.objects("fenced"), "distinct", 2)  # warm: connections and the table
        record(g.proc.pid, os.path.join(work, "s5.data"), secs,
               lambda: bench.load(g.objects("fenced"), "distinct", secs))
        g.stop()
    finally:
        store.terminate()
        store.wait()
    draw(os.path.join(work, "s5.data"), f"s5-ministack-{label}",
         f"S5 fenced 4 KiB PUT, s3 backend on ministack (safe mode), {label}")


def s1(work, label, secs):
    g = bench.Fencegate(work, "profile-s1", bench.FS_CONFIG)
    bench.load(g.objects("fenced"), "distinct", 2)
    record(g.proc.pid, os.path.join(work, "s1.data"), secs,
           lambda: bench.load(g.objects("fenced"), "distinct", secs))
    g.stop()
    draw(os.path.join(work, "s1.data"), f"s1-fs-{label}", f"S1 fenced 4 KiB PUT, fs backend, {label}")


# perf trace's lines: a finished call, and the start of one another thread finishes later.
TRACE_DONE = re.compile(r"^\s*([0-9.]+) \(\s*([0-9.]+) ms\): (\S+?)/(\d+)\s+(?:\.\.\. \[continued\]: )?(\w+)\((.*)\)\s+= (-?\d+)")
TRACE_OPEN = re.compile(r"^\s*([0-9.]+) \(\s*\): (\S+?)/(\d+)\s+(\w+)\((.*)\)\s+\.\.\.\s*$")


def syscalls(path):
    """The calls of a `perf trace` output, in the order they began, each with its start and end
    (ms), thread, name, arguments and result."""
    out, unfinished = [], {}
    for line in open(path):
        m = TRACE_OPEN.match(line)
        if m:
            unfinished[(m.group(3), m.group(4))] = m.group(5)
            continue
        m = TRACE_DONE.match(line)
        if m:
            args = unfinished.pop((m.group(4), m.group(5)), "") if "[continued]" in line else m.group(6)
            start = float(m.group(1))
            out.append(dict(start=start, end=start + float(m.group(2)), call=m.group(5), args=args, ret=int(m.group(7))))
    return sorted(out, key=lambda e: e["start"])


def fd_of(e):
    m = re.match(r"fd: (\d+)", e["args"])
    return int(m.group(1)) if m else None


def is_wal(e):
    return "fences/" in e["args"] and ".log>" in e["args"]


def is_send(e, fd):
    return e["call"] in ("writev", "sendto", "write") and fd_of(e) == fd


# The steps of one PUT, in the order they first happen after the request was read; each a test
# on a syscall (the client's connection, the milestones seen so far).
S12_STEPS = {
    "s3": [
        ("intent written to the WAL", lambda e, c, s: e["call"] == "write" and is_wal(e)),
        ("intent fdatasync", lambda e, c, s: e["call"] == "fdatasync" and is_wal(e)),
        ("store request sent", lambda e, c, s: e["call"] in ("writev", "sendto", "write") and fd_of(e) != c and not is_wal(e) and e["ret"] > 4000),
        ("store answer read", lambda e, c, s: e["call"] in ("recvfrom", "read") and fd_of(e) != c),
        ("outcome written to the WAL (not synced)", lambda e, c, s: e["call"] == "write" and is_wal(e)),
        ("answer sent to the client", lambda e, c, s: is_send(e, c)),
    ],
    "fs": [
        ("body written to its staging file", lambda e, c, s: e["call"] in ("writev", "write") and fd_of(e) != c and not is_wal(e) and e["ret"] > 4000),
        ("staging file fsync", lambda e, c, s: e["call"] == "fsync" and "objects" not in e["args"]),
        ("intent written to the WAL", lambda e, c, s: e["call"] == "write" and is_wal(e)),
        ("intent fdatasync", lambda e, c, s: e["call"] == "fdatasync" and is_wal(e)),
        ("rename into place", lambda e, c, s: e["call"].startswith("rename")),
        ("directory fsync", lambda e, c, s: e["call"] == "fsync" and "objects" in e["args"]),
        ("outcome written to the WAL (not synced)", lambda e, c, s: e["call"] == "write" and is_wal(e)),
        ("answer sent to the client", lambda e, c, s: is_send(e, c)),
    ],
}


def timeline(path, steps):
    """Each step's median start and end (ms after the request was read) over the requests
    whose every step was seen, and the median request."""
    calls = syscalls(path)
    client = next((fd_of(e) for e in calls if e["call"] == "recvfrom" and e["ret"] >= 4096), None)
    reads = [i for i, e in enumerate(calls) if e["call"] == "recvfrom" and fd_of(e) == client and e["ret"] >= 4096]
    seen_steps = {name: [] for name, _ in steps}
    totals = []
    for a, b in zip(reads, reads[1:]):
        t0, rest, seen = calls[a]["end"], calls[a + 1:b], {}
        for name, test in steps:
            hit = next((e for e in rest if e["start"] >= max([x["start"] for x in seen.values()], default=0) and test(e, client, seen)), None)
            if hit is None:
                break
            seen[name] = hit
        else:
            for name, _ in steps:
                seen_steps[name].append((seen[name]["start"] - t0, seen[name]["end"] - t0))
            totals.append(seen[steps[-1][0]]["end"] - t0)
    return seen_steps, totals


def s12(work, label, secs):
    """perf trace of one client's PUTs, on the s3 backend (ministack) and the fs backend."""
    lines = [f"S12 one client's fenced 4 KiB PUTs, where each waits ({label}): ms after the request was read, median start .. end of each step",
             "(perf trace adds to every syscall: compare steps and builds, not these with S12's latencies)"]
    store, port = bench.start_store("ministack", work)
    try:
        for kind, config in (("s3", bench.s3_config(port, "ministack", "profile-s12")), ("fs", bench.FS_CONFIG)):
            g = bench.Fencegate(work, f"profile-s12-{kind}", config)
            bench.load(g.objects("fenced"), "distinct", 1, concurrency=1)
            data = os.path.join(work, f"s12-{kind}.trace")
            loader = threading.Thread(target=lambda: bench.load(g.objects("fenced"), "distinct", secs + 2, concurrency=1))
            loader.start()
            subprocess.run(["perf", "trace", "-p", str(g.proc.pid), "-o", data, "--", "sleep", str(secs)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            loader.join()
            g.stop()
            steps, totals = timeline(data, S12_STEPS[kind])
            lines += ["", f"{kind} backend, {len(totals)} requests traced:"]
            lines += [f"  {statistics.median(s for s, _ in v):6.3f} .. {statistics.median(e for _, e in v):6.3f}  {name}"
                      for name, v in steps.items() if v]
            if totals:
                lines.append(f"  {statistics.median(totals):6.3f}  the whole request, read to answered")
    finally:
        store.terminate()
        store.wait()
    with open(os.path.join(OUT, f"s12-{label}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    bench.log(f"wrote docs/performance/s12-{label}.txt")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("label", help="names the pictures, e.g. before or after-lean-commit")
    ap.add_argument("--secs", type=float, default=8, help="seconds of load sampled (default 8)")
    ap.add_argument("--only", choices=["s5", "s1", "s12"], help="one scenario (s12 only when named)")
    ap.add_argument("--bin", help="the fencegate binary to profile (default: the one scripts/profile builds)")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    if args.bin:
        bench.FENCEGATE = os.path.abspath(args.bin)
    work = tempfile.mkdtemp(prefix="fencegate-profile-")
    try:
        if args.only == "s12":
            s12(work, args.label, min(args.secs, 2))
        if args.only in (None, "s5"):
            s5(work, args.label, args.secs)
        if args.only in (None, "s1"):
            s1(work, args.label, args.secs)
    finally:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
