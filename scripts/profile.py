#!/usr/bin/env python3
"""Where fencegate's CPU goes: `perf record` of the fencegate process under S5 (4 KiB fenced PUTs,
s3 backend on ministack in safe mode) and S1 (4 KiB fenced PUTs, fs backend), each drawn as a
flame graph with inferno into docs/performance/<scenario>-<label>.svg, with the functions that
take the most CPU themselves in <scenario>-<label>.txt. Run through scripts/profile, which
installs perf and inferno. Compare a change's pictures with those of the commit before it.
"""
import argparse, collections, os, subprocess, sys, tempfile, threading

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


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("label", help="names the pictures, e.g. before or after-lean-commit")
    ap.add_argument("--secs", type=float, default=8, help="seconds of load sampled (default 8)")
    ap.add_argument("--only", choices=["s5", "s1"], help="one scenario")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="fencegate-profile-")
    try:
        if args.only in (None, "s5"):
            s5(work, args.label, args.secs)
        if args.only in (None, "s1"):
            s1(work, args.label, args.secs)
    finally:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
