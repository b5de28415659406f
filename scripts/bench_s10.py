"""S10, one target: a 200 MB multipart upload in 8 MiB parts (its parts, then its completion,
timed apart) and a 200 MB single PutObject, with boto3 (signing UNSIGNED-PAYLOAD over plain
http, as the aws cli does, so the client hashes nothing). Run by scripts/bench.py with the test
venv's python. Prints one JSON line: parts_s, complete_s, single_s.

Usage: bench_s10.py ENDPOINT BUCKET SIZE_MB TAG"""
import json, os, sys, time

import boto3
from botocore.config import Config

endpoint, bucket, size_mb, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="fencegate",
                  aws_secret_access_key="fencegate-dev-secret", region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path", "payload_signing_enabled": False},
                                retries={"max_attempts": 1}))
part = os.urandom(8 << 20)
n = max(1, size_mb // 8)
meta = {"fencing-token": "1"}
key = f"s10/{tag}-multipart"
t0 = time.perf_counter()
up = s3.create_multipart_upload(Bucket=bucket, Key=key, Metadata=meta)
parts = [{"PartNumber": i, "ETag": s3.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"],
                                                  PartNumber=i, Body=part)["ETag"]}
         for i in range(1, n + 1)]
t1 = time.perf_counter()
s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up["UploadId"],
                             MultipartUpload={"Parts": parts})
t2 = time.perf_counter()
whole = part * n
t3 = time.perf_counter()
s3.put_object(Bucket=bucket, Key=f"s10/{tag}-single", Body=whole, Metadata=meta)
t4 = time.perf_counter()
for k in (key, f"s10/{tag}-single"):
    assert s3.head_object(Bucket=bucket, Key=k)["ContentLength"] == n * len(part)
print(json.dumps({"parts_s": t1 - t0, "complete_s": t2 - t1, "single_s": t4 - t3, "mb": n * 8}))
