#!/usr/bin/env python3
"""fencegate's own leases from Python, with the fencegate package: acquire, write (native API
and boto3), renewals in the background, release, and a stale token refused.

    pip install './clients/python[boto3]'        # scripts/test installs it in .venv
    FENCEGATE_URL=http://127.0.0.1:8080 .venv/bin/python examples/python/lease_client.py

Against a fencegate with [keys], set FENCEGATE_ACCESS_KEY_ID and FENCEGATE_SECRET_ACCESS_KEY
too. Prints each step and "OK" at the end; exits 1 on any unexpected answer.
"""

import sys
import time

try:
    import boto3

    import fencegate
    import fencegate.boto3
except ImportError as e:
    sys.exit(f"{e}: install the client with: pip install './clients/python[boto3]'")

LEASE = "py-demo"
BUCKET, KEY = "default", "py-demo.txt"
TTL = 6.0


class Unexpected(Exception):
    pass


def step(msg):
    print(f"- {msg}", flush=True)


def acquire(fg, holder):
    # wait: if a previous run died holding the lease, wait for its TTL rather than fail.
    return fg.lease(
        LEASE, ttl=TTL, holder=holder, bucket=BUCKET, key=KEY, s3_credentials=True, wait=TTL + 2
    )


def main():
    fg = fencegate.Client()  # $FENCEGATE_URL, else http://127.0.0.1:8080
    # 1. Acquire, bound to default/py-demo.txt: the grant advances that fence at once, so
    #    whoever wrote it before is fenced out before we write at all.
    with acquire(fg, "worker-1") as a:
        if a.s3_credentials is None or a.scope != f"object:{BUCKET}/{KEY}":
            raise Unexpected(f"grant lacks S3 credentials or the bound scope: {a}")
        step(
            f"worker-1 acquired lease {LEASE}: token {a.token}, scope {a.scope}, "
            f"S3 key {a.s3_credentials.access_key_id}"
        )

        # 2. Native write with the lease's token.
        w = a.put(BUCKET, KEY, b"written by worker-1 (native API)\n")
        step(f"native PUT with Fencing-Token {a.token} -> recorded token {w.token}")

        # 3. boto3 with the lease-bound credentials: no token header, the key carries it.
        s3 = a.s3_client()
        body = b"written by worker-1 (boto3, lease credentials)\n"
        s3.put_object(Bucket=BUCKET, Key=KEY, Body=body)
        got = fg.get(BUCKET, KEY)
        if got.body != body or got.token != a.token:
            raise Unexpected(
                f"read back {got.body!r} with token {got.token}, "
                f"expected boto3's body and {a.token}"
            )
        step(f"boto3 put_object with the lease credentials -> ok; object carries token {a.token}")

        # 4. Renewed in the background every third of the TTL.
        granted = fg.lease_info(LEASE).expires_at_ms
        time.sleep(TTL / 3 + 1)
        renewed = fg.lease_info(LEASE)
        if a.lost.is_set() or renewed.token != a.token or renewed.expires_at_ms <= granted:
            raise Unexpected(f"no renewal: {renewed}, lost: {a.lost_reason}")
        step(
            f"renewed in the background: token still {renewed.token}, expires at "
            f"{renewed.expires_at_ms} (was {granted})"
        )
    # 5. Released on leaving the block.
    if not a.released:
        raise Unexpected("the lease was not released at the end of its block")
    step("released")

    # 6. Another holder acquires: a larger token, recorded on the fence immediately.
    with acquire(fg, "worker-2") as b:
        if b.token <= a.token:
            raise Unexpected(f"worker-2's token {b.token} is not above {a.token}")
        step(f"worker-2 acquired lease {LEASE}: token {b.token}")

        # 7. worker-1's released lease sends nothing; its old token, sent anyway, is refused.
        try:
            a.put(BUCKET, KEY, b"late write by worker-1\n")
            raise Unexpected("the released lease sent a write")
        except fencegate.LeaseLost:
            step("worker-1's released lease refuses to write (nothing sent)")
        try:
            fg.put(BUCKET, KEY, b"late write by worker-1\n", token=a.token)
            raise Unexpected(f"the write with the old token {a.token} was accepted")
        except fencegate.StaleFencingToken as e:
            if e.highest != b.token:
                raise Unexpected(f"expected the highest token {b.token}: {e}") from e
            step(
                f"native PUT with the old token {a.token} -> {e.status} {e.code}, "
                f"highest {e.highest}"
            )

        # The old lease credentials, copied elsewhere, still sign for a grace period (30 s by
        # default) so that a write in flight is judged by the fence; the fence refuses it.
        creds = a.s3_credentials
        zombie = fencegate.boto3.typed_errors(
            boto3.client(
                "s3",
                endpoint_url=fg.url,
                region_name=fg.region,
                aws_access_key_id=creds.access_key_id,
                aws_secret_access_key=creds.secret_access_key,
            )
        )
        try:
            zombie.put_object(Bucket=BUCKET, Key=KEY, Body=b"late write by worker-1 (boto3)\n")
            raise Unexpected("boto3 write with the released lease's credentials was accepted")
        except (fencegate.StaleFencingToken, fencegate.InvalidAccessKeyId) as e:
            step(f"boto3 put_object with worker-1's old credentials -> {e.status} {e.code}")

        got = fg.get(BUCKET, KEY)
        if got.body != body:
            raise Unexpected(f"the object changed after the refused writes: {got.body!r}")
        step("the object still holds worker-1's last accepted write")
    step("worker-2 released")
    print("OK")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (Unexpected, fencegate.FencegateError, OSError) as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
