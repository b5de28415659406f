"""boto3, the aws cli, pyarrow, minio-py, obstore and the AWS SDK for JavaScript v3 as deployed: over https, with their default settings (request
checksums "when_supported", so over TLS every PutObject and UploadPart goes aws-chunked with a
CRC trailer and no Content-Length), uploading 20 MB (a multipart upload) and small files, and
reading them back. Run by tests/it/s3/aws_chunked.rs, which starts fencegate with TLS and passes
FG_ENDPOINT and AWS_CA_BUNDLE (both clients trust the certificate through it).

Exits non-zero, naming the step, at the first thing that fails."""

import hashlib
import json
import os
import ssl
import subprocess
import sys
import tempfile
import urllib.request

import boto3
import botocore
from botocore.exceptions import ClientError

ENDPOINT = os.environ["FG_ENDPOINT"]
AWS = os.path.join(os.path.dirname(sys.executable), "aws")
BUCKET = os.environ.get("FG_BUCKET", "bkt")
step_no = 0

for setting in ("AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION"):
    if setting in os.environ:
        print(f"FAILED: {setting} is set; this test runs the clients' defaults", flush=True)
        sys.exit(1)


def step(text):
    global step_no
    step_no += 1
    print(f"[{step_no:02}] {text}", flush=True)


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def aws(*args):
    quiet = ["--only-show-errors"] if args[0] == "s3" else []
    cmd = [AWS, "--endpoint-url", ENDPOINT, *args, *quiet]
    r = subprocess.run(cmd, capture_output=True, text=True)
    check(r.returncode == 0, f"aws {' '.join(args)}\n{r.stdout}\n{r.stderr}")
    return r


work = tempfile.mkdtemp()
big = os.path.join(work, "big.bin")
with open(big, "wb") as f:
    f.write(os.urandom(20 * 1024 * 1024))
big_md5 = hashlib.md5(open(big, "rb").read()).hexdigest()

s3 = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1",
                  config=botocore.config.Config(s3={"addressing_style": "path"}))
check(s3.meta.config.request_checksum_calculation == "when_supported",
      f"boto3's checksum default is {s3.meta.config.request_checksum_calculation}")

# What goes on the wire, seen by a botocore event hook: aws-chunked parts, no Content-Length.
seen = []


def record(request, **_):
    if request.method == "PUT":
        text = lambda v: v.decode() if isinstance(v, bytes) else v
        seen.append((request.url, text(request.headers.get("x-amz-content-sha256")),
                     text(request.headers.get("Content-Length"))))


s3.meta.events.register("before-send.s3.*", record)

step("boto3 upload_file of 20 MB (multipart, aws-chunked parts with CRC32 trailers)")
s3.upload_file(big, BUCKET, "boto3-big.bin")
parts = [s for s in seen if "partNumber=" in s[0]]
check(len(parts) >= 2, f"boto3 sent {len(parts)} parts: {seen}")
check(all(s[1] == "STREAMING-UNSIGNED-PAYLOAD-TRAILER" and s[2] is None for s in parts),
      f"the parts were not aws-chunked without a Content-Length: {parts}")
out = os.path.join(work, "boto3-big.out")
s3.download_file(BUCKET, "boto3-big.bin", out)
check(hashlib.md5(open(out, "rb").read()).hexdigest() == big_md5, "boto3 read back other bytes")

step("boto3 put_object (aws-chunked) with a fencing token, then a stale one refused")
s3.put_object(Bucket=BUCKET, Key="small.txt", Body=b"hello over tls", Metadata={"fencing-token": "9"})
got = s3.get_object(Bucket=BUCKET, Key="small.txt")["Body"].read()
check(got == b"hello over tls", f"read back {got!r}")
try:
    s3.put_object(Bucket=BUCKET, Key="small.txt", Body=b"stale", Metadata={"fencing-token": "3"})
    check(False, "a stale aws-chunked put was accepted")
except ClientError as e:
    check(e.response["ResponseMetadata"]["HTTPStatusCode"] == 409, f"stale put: {e.response}")
got = s3.get_object(Bucket=BUCKET, Key="small.txt")["Body"].read()
check(got == b"hello over tls", f"after the stale put: {got!r}")

step("lease-bound credentials over https: a write carries the lease's token; once the next holder "
     "is granted, the old credentials' writes (boto3, the aws cli) are 403 StaleFencingToken")
CA = ssl.create_default_context(cafile=os.environ["AWS_CA_BUNDLE"])


def lease_call(method, name, body):
    req = urllib.request.Request(f"{ENDPOINT}/v1/leases/{name}", method=method,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=CA) as resp:
        text = resp.read()
        return json.loads(text) if text else None


def aws_as(cred, *args):
    """The aws cli with `cred`'s keys; its result whatever it is."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID=cred["access_key_id"],
               AWS_SECRET_ACCESS_KEY=cred["secret_access_key"])
    return subprocess.run([AWS, "--endpoint-url", ENDPOINT, *args], capture_output=True,
                          text=True, env=env)


bound = {"ttl_ms": 60000, "bucket": BUCKET, "key": "leased.txt", "s3_credentials": True}
grant_a = lease_call("POST", "tls-leased", dict(bound, holder="tls-a"))
cred_a = grant_a["s3_credentials"]
s3_a = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1",
                    aws_access_key_id=cred_a["access_key_id"],
                    aws_secret_access_key=cred_a["secret_access_key"],
                    config=botocore.config.Config(s3={"addressing_style": "path"}))
s3_a.put_object(Bucket=BUCKET, Key="leased.txt", Body=b"from a")
meta = s3.head_object(Bucket=BUCKET, Key="leased.txt")["Metadata"]
check(meta.get("fencing-token") == str(grant_a["token"]), f"token from the lease: {meta}")
lease_call("DELETE", "tls-leased", {"holder": "tls-a", "token": grant_a["token"],
                                    "secret": grant_a["lease_secret"]})
grant_b = lease_call("POST", "tls-leased", dict(bound, holder="tls-b"))
check(grant_b["token"] > grant_a["token"], "tokens grow")
try:
    s3_a.put_object(Bucket=BUCKET, Key="leased.txt", Body=b"late a")
    check(False, "the old holder's boto3 put was accepted")
except ClientError as e:
    status = e.response["ResponseMetadata"]["HTTPStatusCode"]
    code = e.response["Error"]["Code"]
    check((status, code) == (403, "StaleFencingToken"), f"late put: {e.response}")
late = os.path.join(work, "late.txt")
with open(late, "wb") as f:
    f.write(b"late a, cli")
r = aws_as(cred_a, "s3api", "put-object", "--bucket", BUCKET, "--key", "leased.txt", "--body", late)
check(r.returncode != 0 and "StaleFencingToken" in r.stderr, f"late cli put: {r.stderr}")
got = s3.get_object(Bucket=BUCKET, Key="leased.txt")["Body"].read()
check(got == b"from a", f"after the late puts: {got!r}")

step("keys under .fencegate-probe/ are fencegate's own: 400 InvalidArgument to boto3 and the aws cli")
try:
    s3.put_object(Bucket=BUCKET, Key=".fencegate-probe/claim", Body=b"mine")
    check(False, "a put under .fencegate-probe/ was accepted")
except ClientError as e:
    status = e.response["ResponseMetadata"]["HTTPStatusCode"]
    code = e.response["Error"]["Code"]
    check((status, code) == (400, "InvalidArgument"), f"reserved put: {e.response}")
r = aws_as({"access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
            "secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"]},
           "s3api", "put-object", "--bucket", BUCKET, "--key", ".fencegate-probe/claim",
           "--body", late)
check(r.returncode != 0 and "InvalidArgument" in r.stderr, f"reserved cli put: {r.stderr}")
listed = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
check(not any(k.startswith(".fencegate-probe") for k in listed), f"listed: {listed}")

step("aws s3 cp of 20 MB up and down, defaults")
aws("s3", "cp", big, f"s3://{BUCKET}/cli-big.bin")
out = os.path.join(work, "cli-big.out")
aws("s3", "cp", f"s3://{BUCKET}/cli-big.bin", out)
check(hashlib.md5(open(out, "rb").read()).hexdigest() == big_md5, "the aws cli read back other bytes")

step("aws s3api put-object of a small file")
small = os.path.join(work, "small.txt")
with open(small, "wb") as f:
    f.write(b"small")
aws("s3api", "put-object", "--bucket", BUCKET, "--key", "cli-small.txt", "--body", small)
got = s3.get_object(Bucket=BUCKET, Key="cli-small.txt")["Body"].read()
check(got == b"small", f"read back {got!r}")

step("pyarrow S3FileSystem (the AWS SDK for C++: every file a multipart upload, CRC64NVME trailers)")
import pyarrow as pa  # noqa: E402
import pyarrow.fs as pafs  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

host = ENDPOINT.split("://", 1)[1]
arrow = pafs.S3FileSystem(
    access_key=os.environ["AWS_ACCESS_KEY_ID"], secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
    region="us-east-1", scheme="https", endpoint_override=host,
    tls_ca_file_path=os.environ["AWS_CA_BUNDLE"],
)
table = pa.table({"n": list(range(1000)), "s": [f"row {i}" for i in range(1000)]})
pq.write_table(table, f"{BUCKET}/arrow/small.parquet", filesystem=arrow)
check(pq.read_table(f"{BUCKET}/arrow/small.parquet", filesystem=arrow).equals(table),
      "pyarrow read back another table")
with arrow.open_output_stream(f"{BUCKET}/arrow/big.bin") as out:
    out.write(open(big, "rb").read())
with arrow.open_input_stream(f"{BUCKET}/arrow/big.bin") as inp:
    check(hashlib.md5(inp.read()).hexdigest() == big_md5, "pyarrow read back other bytes")

step("minio-py fput_object of 20 MB and back")
import minio  # noqa: E402
import urllib3  # noqa: E402

CA = os.environ["AWS_CA_BUNDLE"]
mc = minio.Minio(host, access_key=os.environ["AWS_ACCESS_KEY_ID"],
                 secret_key=os.environ["AWS_SECRET_ACCESS_KEY"], secure=True, region="us-east-1",
                 http_client=urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=CA))
mc.fput_object(BUCKET, "minio-big.bin", big)
out = os.path.join(work, "minio-big.out")
mc.fget_object(BUCKET, "minio-big.bin", out)
check(hashlib.md5(open(out, "rb").read()).hexdigest() == big_md5, "minio-py read back other bytes")

step("obstore (Rust object_store): 20 MB in 5 MiB parts, and a create that must not overwrite")
os.environ["SSL_CERT_FILE"] = CA  # object_store trusts the CA through it
import obstore  # noqa: E402
from obstore.store import S3Store  # noqa: E402

store = S3Store(BUCKET, endpoint=ENDPOINT, access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"], region="us-east-1",
                virtual_hosted_style_request=False)
obstore.put(store, "obstore-big.bin", open(big, "rb").read(), chunk_size=5 * 1024 * 1024)
got = bytes(obstore.get(store, "obstore-big.bin").bytes())
check(hashlib.md5(got).hexdigest() == big_md5, "obstore read back other bytes")
obstore.put(store, "obstore-once.txt", b"first", mode="create")
try:
    obstore.put(store, "obstore-once.txt", b"second", mode="create")
    check(False, "obstore's second create was accepted")
except Exception as e:  # obstore.exceptions.AlreadyExistsError
    check(type(e).__name__ == "AlreadyExistsError", f"obstore's second create: {e!r}")
check(bytes(obstore.get(store, "obstore-once.txt").bytes()) == b"first", "the create overwrote")

step("the AWS SDK for JavaScript v3: UploadPart with stream bodies (tests/e2e/js/upload.mjs)")
js = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js")
check(os.path.isdir(os.path.join(js, "node_modules", "@aws-sdk")),
      "tests/e2e/js/node_modules is missing: scripts/test installs it (npm)")
r = subprocess.run(["node", os.path.join(js, "upload.mjs")], capture_output=True, text=True,
                   env=dict(os.environ, FG_CA=CA, FG_BIG=big, FG_BUCKET=BUCKET), timeout=300)
check(r.returncode == 0 and "read back" in r.stdout, f"node: {r.stdout}\n{r.stderr}")

print("every tls client passed: boto3, aws, pyarrow, minio-py, obstore, js", flush=True)
