#!/usr/bin/env python3
"""fencegate's own leases from Python: acquire, write (native API and boto3), renew, release,
and a stale token refused.

    FENCEGATE_URL=http://127.0.0.1:8080 .venv/bin/python examples/python/lease_client.py

Needs `requests` and `boto3` (both in the repository's .venv). Prints each step; exits 1 on any
unexpected answer.
"""

import os
import sys

import boto3
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

URL = os.environ.get("FENCEGATE_URL", "http://127.0.0.1:8080").rstrip("/")
LEASE = "py-demo"
BUCKET, KEY = "default", "py-demo.txt"
TTL_MS = 10_000


class Unexpected(Exception):
    pass


def step(msg):
    print(f"- {msg}", flush=True)


def expect(resp, status):
    if resp.status_code != status:
        raise Unexpected(
            f"{resp.request.method} {resp.url}: expected HTTP {status}, got {resp.status_code}: {resp.text}"
        )
    return resp


def acquire(holder):
    # wait_ms: if a previous run died holding the lease, wait for its TTL rather than fail.
    body = {"holder": holder, "ttl_ms": TTL_MS, "wait_ms": TTL_MS + 2000,
            "bucket": BUCKET, "key": KEY, "s3_credentials": True}
    return expect(requests.post(f"{URL}/v1/leases/{LEASE}", json=body, timeout=30), 200).json()


def release(grant):
    body = {"holder": grant["holder"], "token": grant["token"], "secret": grant["lease_secret"]}
    return requests.delete(f"{URL}/v1/leases/{LEASE}", json=body, timeout=10)


def native_put(token, data):
    return requests.put(f"{URL}/v1/objects/{BUCKET}/{KEY}", data=data,
                        headers={"Fencing-Token": str(token)}, timeout=10)


def s3_client(creds):
    return boto3.client(
        "s3",
        endpoint_url=URL,
        aws_access_key_id=creds["access_key_id"],
        aws_secret_access_key=creds["secret_access_key"],
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def main():
    held = []
    try:
        # 1. Acquire, bound to default/py-demo.txt: the grant advances that fence at once,
        #    so whoever wrote it before is fenced out before we write at all.
        a = acquire("worker-1")
        held.append(a)
        creds = a.get("s3_credentials")
        if not creds or a.get("scope") != f"object:{BUCKET}/{KEY}":
            raise Unexpected(f"grant lacks S3 credentials or the bound scope: {a}")
        step(f"worker-1 acquired lease {LEASE}: token {a['token']}, scope {a['scope']}, "
             f"S3 key {creds['access_key_id']}")

        # 2. Native write with the token.
        r = expect(native_put(a["token"], b"written by worker-1 (native API)\n"), 200).json()
        step(f"native PUT with Fencing-Token {a['token']} -> 200, recorded token {r['token']}")

        # 3. boto3 with the lease-bound credentials: no token header, the key carries it.
        s3 = s3_client(creds)
        body = b"written by worker-1 (boto3, lease credentials)\n"
        s3.put_object(Bucket=BUCKET, Key=KEY, Body=body)
        got = expect(requests.get(f"{URL}/v1/objects/{BUCKET}/{KEY}", timeout=10), 200)
        if got.content != body or got.headers.get("Fencing-Token") != str(a["token"]):
            raise Unexpected(f"read back {got.content!r} with token "
                             f"{got.headers.get('Fencing-Token')}, expected boto3's body and {a['token']}")
        step(f"boto3 put_object with the lease credentials -> ok; object carries token {a['token']}")

        # 4. Renew.
        r = expect(requests.put(f"{URL}/v1/leases/{LEASE}", timeout=10, json={
            "holder": a["holder"], "token": a["token"], "secret": a["lease_secret"],
            "ttl_ms": TTL_MS}), 200).json()
        step(f"renewed: token still {r['token']}, expires at {r['expires_at_ms']} (was {a['expires_at_ms']})")

        # 5. Release.
        expect(release(a), 204)
        held.remove(a)
        step("released -> 204")

        # 6. Another holder acquires: a larger token, recorded on the fence immediately.
        b = acquire("worker-2")
        held.append(b)
        if b["token"] <= a["token"]:
            raise Unexpected(f"worker-2's token {b['token']} is not above {a['token']}")
        step(f"worker-2 acquired lease {LEASE}: token {b['token']}")

        # 7. worker-1, a zombie now, writes with its old token: refused.
        r = expect(native_put(a["token"], b"late write by worker-1\n"), 409)
        err = r.json()
        if err.get("error") != "StaleFencingToken" or err.get("highest") != b["token"] \
                or r.headers.get("fencing-token-highest") != str(b["token"]):
            raise Unexpected(f"expected StaleFencingToken with highest {b['token']}: {r.headers} {err}")
        step(f"native PUT with the old token {a['token']} -> 409 {err['error']}, highest {err['highest']}")

        # The old lease credentials still sign for a grace period (30 s by default) so that a
        # write in flight is judged by the fence; the fence refuses it.
        try:
            s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"late write by worker-1 (boto3)\n")
            raise Unexpected("boto3 write with the released lease's credentials was accepted")
        except ClientError as e:
            code = e.response["Error"]["Code"]
            status = e.response["ResponseMetadata"]["HTTPStatusCode"]
            if code not in ("StaleFencingToken", "InvalidAccessKeyId"):
                raise Unexpected(f"boto3 zombie write: unexpected error {code} ({status})")
            step(f"boto3 put_object with worker-1's old credentials -> {status} {code}")

        got = expect(requests.get(f"{URL}/v1/objects/{BUCKET}/{KEY}", timeout=10), 200)
        if got.content != body:
            raise Unexpected(f"the object changed after the refused writes: {got.content!r}")
        step("the object still holds worker-1's last accepted write")

        expect(release(b), 204)
        held.remove(b)
        step("worker-2 released -> 204")
        print("OK")
        return 0
    except (Unexpected, requests.RequestException, ClientError) as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        for g in held:
            release(g)


if __name__ == "__main__":
    sys.exit(main())
