"""End-to-end S3 clients against a running fencegate: the real aws cli and boto3, then hostile
requests signed with botocore's SigV4 and sent raw. Run by tests/it/s3/clients.rs, which starts
fencegate and passes FG_ENDPOINT; the venv (scripts/test) provides awscli and boto3.

Exits non-zero, naming the step, at the first thing that does not behave as docs/s3.md says."""

import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import urllib.parse

import boto3
import botocore
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

ENDPOINT = os.environ["FG_ENDPOINT"]
KEY, SECRET = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
AWS = os.path.join(os.path.dirname(sys.executable), "aws")
step_no = 0


def step(text):
    global step_no
    step_no += 1
    print(f"[{step_no:02}] {text}", flush=True)


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def aws(*args, ok=True):
    quiet = ["--only-show-errors"] if args[:2] in (("s3", "cp"), ("s3", "sync"), ("s3", "rm")) else []
    cmd = [AWS, "--endpoint-url", ENDPOINT, *args, *quiet]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if ok and r.returncode != 0:
        print(f"FAILED: {' '.join(args)}\n{r.stdout}\n{r.stderr}", flush=True)
        sys.exit(1)
    return r


s3 = boto3.client(
    "s3",
    endpoint_url=ENDPOINT,
    region_name="us-east-1",
    config=botocore.config.Config(s3={"addressing_style": "path"}),
)
work = tempfile.mkdtemp()

# ---- the aws cli ------------------------------------------------------------------------
step("aws s3 cp a small file with --metadata fencing-token=5")
small = os.path.join(work, "small.txt")
with open(small, "w") as f:
    f.write("hello from the aws cli\n")
aws("s3", "cp", small, "s3://default/small.txt", "--metadata", "fencing-token=5")
head = s3.head_object(Bucket="default", Key="small.txt")
check(head["Metadata"].get("fencing-token") == "5", f"token recorded: {head['Metadata']}")

step("aws s3 cp a 100 MiB file (a multipart upload) with --metadata fencing-token=6")
big = os.path.join(work, "big.bin")
with open(big, "wb") as f:
    for i in range(100):
        f.write(hashlib.sha256(str(i).encode()).digest() * (1024 * 1024 // 32))
aws("s3", "cp", big, "s3://default/big.bin", "--metadata", "fencing-token=6")
back = os.path.join(work, "big.back")
aws("s3", "cp", "s3://default/big.bin", back)
check(open(big, "rb").read() == open(back, "rb").read(), "the 100 MiB file reads back intact")
etag = s3.head_object(Bucket="default", Key="big.bin")["ETag"]
check(etag.endswith('-13"'), f"the cli sent 13 parts of 8 MiB: ETag {etag}")

step("aws s3 ls lists buckets and keys")
out = aws("s3", "ls").stdout
check("default" in out and "shared" in out, f"buckets listed: {out}")
out = aws("s3", "ls", "s3://default/").stdout
check("small.txt" in out and "big.bin" in out, f"keys listed: {out}")

step("aws s3 sync a folder with --metadata fencing-token=7")
folder = os.path.join(work, "folder")
os.makedirs(os.path.join(folder, "sub"))
for name in ["a.txt", "b.txt", "sub/c.txt"]:
    with open(os.path.join(folder, name), "w") as f:
        f.write(f"content of {name}\n")
aws("s3", "sync", folder, "s3://shared/folder/", "--metadata", "fencing-token=7")
out = aws("s3", "ls", "--recursive", "s3://shared/folder/").stdout
check(all(n in out for n in ["folder/a.txt", "folder/b.txt", "folder/sub/c.txt"]), out)

step("aws s3 rm on a bucket whose deletes are not fenced")
aws("s3", "rm", "s3://shared/folder/a.txt")
out = aws("s3", "ls", "--recursive", "s3://shared/folder/").stdout
check("folder/a.txt" not in out and "folder/b.txt" in out, out)

step("aws s3 rm on a bucket with fenced deletes is refused (the cli cannot send a token)")
r = aws("s3", "rm", "s3://default/small.txt", ok=False)
check(r.returncode != 0 and "FencingTokenRequired" in r.stderr, r.stderr)

step("a stale token fails in the aws cli with StaleFencingToken")
r = aws("s3", "cp", small, "s3://default/small.txt", "--metadata", "fencing-token=4", ok=False)
check(r.returncode != 0 and "StaleFencingToken" in r.stderr, r.stderr)
check(s3.head_object(Bucket="default", Key="small.txt")["Metadata"]["fencing-token"] == "5",
      "the stale write changed nothing")

# ---- boto3 with the Fencing-Token header -------------------------------------------------
step("boto3 adds Fencing-Token through an event hook")
token = {"value": None}


def add_token(request, **_):
    if token["value"] is not None:
        request.headers["Fencing-Token"] = str(token["value"])


s3.meta.events.register("before-sign.s3.*", add_token)
token["value"] = 10
s3.put_object(Bucket="default", Key="small.txt", Body=b"written by 10")
check(s3.get_object(Bucket="default", Key="small.txt")["Body"].read() == b"written by 10", "read back")

step("boto3 with a stale header token gets 409 StaleFencingToken and the highest token")
token["value"] = 9
try:
    s3.put_object(Bucket="default", Key="small.txt", Body=b"zombie")
    check(False, "a stale put was accepted")
except ClientError as e:
    code = e.response["Error"]["Code"]
    status = e.response["ResponseMetadata"]["HTTPStatusCode"]
    highest = e.response["ResponseMetadata"]["HTTPHeaders"].get("fencing-token-highest")
    check((code, status, highest) == ("StaleFencingToken", 409, "10"), (code, status, highest))
token["value"] = 11
s3.delete_object(Bucket="default", Key="small.txt")
token["value"] = None

# ---- lease-bound credentials: the aws cli fenced with no token anywhere ------------------
import json
import urllib.request


def lease_call(method, name, body):
    req = urllib.request.Request(f"{ENDPOINT}/v1/leases/{name}", method=method,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        text = resp.read()
        return json.loads(text) if text else None


def aws_as(cred, *args):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=cred["access_key_id"],
               AWS_SECRET_ACCESS_KEY=cred["secret_access_key"])
    cmd = [AWS, "--endpoint-url", ENDPOINT, *args, "--only-show-errors"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


step("aws s3 cp with lease-bound credentials carries the lease's token")
bound = {"ttl_ms": 60000, "bucket": "default", "key": "leased.txt", "s3_credentials": True}
grant_a = lease_call("POST", "leased", dict(bound, holder="cli-a"))
r = aws_as(grant_a["s3_credentials"], "s3", "cp", small, "s3://default/leased.txt")
check(r.returncode == 0, r.stderr)
meta = s3.head_object(Bucket="default", Key="leased.txt")["Metadata"]
check(meta.get("fencing-token") == str(grant_a["token"]), f"token from the lease: {meta}")

step("once the next holder's lease is granted, the old credentials are fenced out")
lease_call("DELETE", "leased", {"holder": "cli-a", "token": grant_a["token"],
                               "secret": grant_a["lease_secret"]})
grant_b = lease_call("POST", "leased", dict(bound, holder="cli-b"))
check(grant_b["token"] > grant_a["token"], "tokens grow")
r = aws_as(grant_a["s3_credentials"], "s3", "cp", small, "s3://default/leased.txt")
check(r.returncode != 0 and "StaleFencingToken" in r.stderr, r.stderr)
r = aws_as(grant_b["s3_credentials"], "s3", "cp", small, "s3://default/leased.txt")
check(r.returncode == 0, r.stderr)

# ---- hostile requests, signed properly so only their content is wrong ---------------------
creds = Credentials(KEY, SECRET)
host = urllib.parse.urlparse(ENDPOINT).netloc


def signed(method, path, body=b"", headers=None, payload_hash=None):
    """Signs a request with SigV4 and returns (request line + headers) as bytes."""
    url = f"{ENDPOINT}{path}"
    req = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    req.headers["X-Amz-Content-SHA256"] = payload_hash or hashlib.sha256(body).hexdigest()
    S3SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    target = urllib.parse.urlsplit(url)
    line = f"{method} {target.path}{'?' + target.query if target.query else ''} HTTP/1.1\r\n"
    hdrs = "".join(f"{k}: {v}\r\n" for k, v in req.headers.items())
    return (line + f"Host: {host}\r\n" + hdrs).encode()


def raw(head, body=b"", close_early=False, extra=b""):
    """Sends head + body over a fresh socket; returns (status, response text)."""
    h, p = host.split(":")
    with socket.create_connection((h, int(p)), timeout=30) as s:
        s.sendall(head + extra + b"\r\n" + body)
        if close_early:
            s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            data += chunk
            if b"\r\n\r\n" in data:
                head_part, _, rest = data.partition(b"\r\n\r\n")
                length = [l for l in head_part.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if length and len(rest) >= int(length[0].split(b":")[1]):
                    break
    text = data.decode(errors="replace")
    status = int(text.split(" ", 2)[1]) if text.startswith("HTTP/") else 0
    return status, text


def upload_id(key):
    token["value"] = 20
    uid = s3.create_multipart_upload(Bucket="default", Key=key)["UploadId"]
    token["value"] = None
    return uid


def visible(key):
    try:
        s3.head_object(Bucket="default", Key=key)
        return True
    except ClientError:
        return False


step("malformed XML in CompleteMultipartUpload is a 400 and completes nothing")
uid = upload_id("hostile-xml")
body = b"<CompleteMultipartUpload><Part><PartNumber>1</Part>"
head = signed("POST", f"/default/hostile-xml?uploadId={uid}", body,
              {"Content-Length": str(len(body))})
status, text = raw(head, body)
check(status == 400 and "MalformedXML" in text, text)
check(not visible("hostile-xml"), "nothing visible")

step("part numbers 0 and 10001 are refused")
for n in (0, 10001):
    body = b"part"
    head = signed("PUT", f"/default/hostile-xml?partNumber={n}&uploadId={uid}", body,
                  {"Content-Length": str(len(body))})
    status, text = raw(head, body)
    check(status == 400, f"part {n}: {text}")

step("a completion listing 10001 parts is refused")
parts = "".join(f"<Part><PartNumber>{i}</PartNumber><ETag>\"x\"</ETag></Part>" for i in range(1, 10002))
body = f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode()
head = signed("POST", f"/default/hostile-xml?uploadId={uid}", body,
              {"Content-Length": str(len(body))})
status, text = raw(head, body)
check(400 <= status < 500, text)
check(not visible("hostile-xml"), "nothing visible")

step("a PutObject without Content-Length is refused")
body = b"5\r\nhello\r\n0\r\n\r\n"
head = signed("PUT", "/default/no-length", b"", {"Transfer-Encoding": "chunked", "Fencing-Token": "30"},
              payload_hash="UNSIGNED-PAYLOAD")
status, text = raw(head, body)
check(400 <= status < 500, text)
check(not visible("no-length"), "nothing visible")

step("a body shorter than its Content-Length leaves no object")
head = signed("PUT", "/default/short-body", b"", {"Content-Length": "1000", "Fencing-Token": "30"},
              payload_hash="UNSIGNED-PAYLOAD")
status, text = raw(head, b"only ten b", close_early=True)
check(status == 0 or 400 <= status < 500, text)
check(not visible("short-body"), "nothing visible")

step("a client stalling mid-body is cut off and never holds the key's lock")
import threading
stalled = {}


def stall():
    head = signed("PUT", "/default/stall", b"", {"Content-Length": "100", "Fencing-Token": "40"},
                  payload_hash="UNSIGNED-PAYLOAD")
    h, p = host.split(":")
    with socket.create_connection((h, int(p)), timeout=30) as sock:
        sock.sendall(head + b"\r\n" + b"first")
        data = sock.recv(65536)  # blocks until the server gives up on the body
        stalled["answer"] = data.decode(errors="replace")


t = threading.Thread(target=stall)
t.start()
token["value"] = 41
s3.put_object(Bucket="default", Key="stall", Body=b"written by 41 while 40 stalled")
token["value"] = None
t.join(timeout=20)
answer = stalled.get("answer", "")
check(" 408 " in answer.split("\r\n")[0] and "RequestTimeout" in answer, f"the stalled upload: {answer[:300]}")
check(s3.get_object(Bucket="default", Key="stall")["Body"].read() == b"written by 41 while 40 stalled",
      "the stalled writer left nothing")

step("the server still serves after all that")
check(s3.list_objects_v2(Bucket="default")["KeyCount"] >= 1, "listing works")
print("e2e: aws cli and boto3 behave as documented; hostile input refused", flush=True)
