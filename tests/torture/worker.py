#!/usr/bin/env python3
"""A torture-test worker: takes a lease, fences, reads, appends its id, writes; records every
operation. Run by tests/torture.rs, one process per worker, so it can be paused with SIGSTOP.

Usage: worker.py GATE_URL LEASE_URL BUCKET WORKER_ID KEYS SECONDS HISTORY_FILE SEED
"""
import json, random, sys, time, urllib.error, urllib.request

gate, lease, bucket, wid, keys, secs, history, seed = sys.argv[1:9]
keys = keys.split(",")
rng = random.Random(int(seed))
deadline = time.monotonic() + float(secs)
out = open(history, "a", buffering=1)


def call(method, url, body=None, headers=None, timeout=5):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except Exception:
        return None, b""  # timeout, refused, reset: outcome unknown


def record(**kv):
    out.write(json.dumps(kv) + "\n")


seq = 0
while time.monotonic() < deadline:
    key = rng.choice(keys)
    status, body = call("POST", f"{lease}/acquire?name={key}&holder={wid}")
    if status != 200:
        time.sleep(0.01)
        continue
    token = json.loads(body)["token"]
    # The new holder fences out the previous one before reading anything.
    status, _ = call("POST", f"{gate}/v1/fences/{bucket}/{key}", headers={"Fencing-Token": str(token)})
    if status != 200:
        continue
    status, body = call("GET", f"{gate}/v1/objects/{bucket}/{key}")
    if status == 200:
        items = json.loads(body)
    elif status == 404:
        items = []
    else:
        continue
    time.sleep(rng.uniform(0, 0.03))  # "work" between read and write: where pauses hurt
    seq += 1
    item = f"{wid}-{seq}"
    t0 = time.monotonic()
    status, _ = call("PUT", f"{gate}/v1/objects/{bucket}/{key}", body=json.dumps(items + [item]).encode(),
                     headers={"Fencing-Token": str(token), "Content-Type": "application/json"})
    t1 = time.monotonic()
    result = "ok" if status == 200 else "fail" if status in (409, 428, 400) else "unknown"
    record(key=key, token=token, item=item, t0=t0, t1=t1, result=result, status=status)
    call("POST", f"{lease}/release?name={key}&holder={wid}")
