// The AWS SDK for JavaScript v3 as a browser-less app deploys it: over https, its default
// checksums, a multipart upload whose parts are file streams (the SDK cannot know their length
// up front, so they go aws-chunked without a Content-Length: 411 before), read back whole.
// Run by tests/e2e/tls_clients.py with FG_ENDPOINT, FG_CA (the CA to trust), FG_BIG (a file),
// FG_BUCKET and the AWS_* credentials. Exits non-zero naming what failed.
import { S3Client, CreateMultipartUploadCommand, UploadPartCommand, CompleteMultipartUploadCommand, GetObjectCommand } from "@aws-sdk/client-s3";
import { NodeHttpHandler } from "@smithy/node-http-handler";
import https from "node:https";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";

const bucket = process.env.FG_BUCKET;
const s3 = new S3Client({
  endpoint: process.env.FG_ENDPOINT, region: "us-east-1", forcePathStyle: true,
  requestHandler: new NodeHttpHandler({ httpsAgent: new https.Agent({ ca: fs.readFileSync(process.env.FG_CA) }) }),
});
const big = fs.readFileSync(process.env.FG_BIG);
const md5 = (b) => crypto.createHash("md5").update(b).digest("hex");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fg-js-"));
const key = "js-big.bin";
const up = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }));
const PART = 8 * 1024 * 1024;
const parts = [];
for (let i = 0, n = 1; i < big.length; i += PART, n++) {
  const file = path.join(dir, `part${n}`);
  fs.writeFileSync(file, big.subarray(i, i + PART));
  const r = await s3.send(new UploadPartCommand({ Bucket: bucket, Key: key, UploadId: up.UploadId, PartNumber: n, Body: fs.createReadStream(file) }));
  parts.push({ PartNumber: n, ETag: r.ETag, ChecksumCRC32: r.ChecksumCRC32 });
}
await s3.send(new CompleteMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: up.UploadId, MultipartUpload: { Parts: parts } }));
const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
const bytes = Buffer.from(await got.Body.transformToByteArray());
fs.rmSync(dir, { recursive: true });
if (md5(bytes) !== md5(big)) {
  console.log("FAILED: the JS SDK read back other bytes");
  process.exit(1);
}
console.log(`js: ${parts.length} stream parts uploaded and read back`);
