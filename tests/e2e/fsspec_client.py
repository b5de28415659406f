"""fsspec (s3fs over aiobotocore) as deployed: over https with its default settings, writing a
20 MB file (a multipart upload, 5 MiB blocks) and a small one, reading both back, listing them,
and seeing a stale write refused. In a venv of its own (.venv-fsspec), as s3fs pins the
aiobotocore, and so the botocore, that it was released with. Run by tests/it/s3/aws_chunked.rs,
which starts fencegate with TLS and passes FG_ENDPOINT and AWS_CA_BUNDLE.

Exits non-zero, naming the step, at the first thing that fails."""

import hashlib
import os
import sys

import s3fs

ENDPOINT = os.environ["FG_ENDPOINT"]
BUCKET = os.environ.get("FG_BUCKET", "bkt")
FENCED = os.environ.get("FG_FENCED_BUCKET")


def step(text):
    print(f"[fsspec] {text}", flush=True)


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


fs = s3fs.S3FileSystem(
    endpoint_url=ENDPOINT,
    client_kwargs={"verify": os.environ["AWS_CA_BUNDLE"], "region_name": "us-east-1"},
    config_kwargs={"s3": {"addressing_style": "path"}},
)

step("s3fs writes 20 MB in 5 MiB blocks (a multipart upload) and reads it back")
data = os.urandom(20 * 1024 * 1024)
with fs.open(f"{BUCKET}/fsspec-big.bin", "wb", block_size=5 * 1024 * 1024) as f:
    for i in range(0, len(data), 1 << 20):
        f.write(data[i:i + (1 << 20)])
with fs.open(f"{BUCKET}/fsspec-big.bin", "rb") as f:
    back = f.read()
check(hashlib.md5(back).digest() == hashlib.md5(data).digest(), "s3fs read back other bytes")

step("s3fs pipe and cat of a small file, and a listing that shows both")
fs.pipe(f"{BUCKET}/fsspec-small.txt", b"small rows")
check(fs.cat(f"{BUCKET}/fsspec-small.txt") == b"small rows", "s3fs read back another small file")
fs.invalidate_cache()
names = {p.rsplit("/", 1)[-1] for p in fs.ls(BUCKET)}
check({"fsspec-big.bin", "fsspec-small.txt"} <= names, f"the listing shows {sorted(names)}")

if FENCED:
    step("a stale token, carried as metadata, is refused and the newer object stays")
    # s3fs passes open()'s extra arguments to PutObject and CreateMultipartUpload.
    with fs.open(f"{FENCED}/fsspec-f.txt", "wb", Metadata={"fencing-token": "9"}) as f:
        f.write(b"token 9")
    try:
        with fs.open(f"{FENCED}/fsspec-f.txt", "wb", Metadata={"fencing-token": "8"}) as f:
            f.write(b"token 8")
        check(False, "a stale write through s3fs was accepted")
    except (OSError, PermissionError) as e:
        check("StaleFencingToken" in repr(e) or "409" in repr(e) or "Conflict" in repr(e),
              f"the stale write failed otherwise: {e!r}")
    fs.invalidate_cache()
    check(fs.cat(f"{FENCED}/fsspec-f.txt") == b"token 9", "the stale write changed the object")

print("fsspec passed", flush=True)
