#!/usr/bin/env python3
"""Raw-HTTP probe of a GCS JSON-API emulator's conditional semantics.
usage: probe.py BASE_URL [BUCKET]   e.g. probe.py http://127.0.0.1:4443
Prints one line per request: verdict, method, path?query, status, body (truncated)."""
import base64, hashlib, json, sys, threading, urllib.parse, uuid
import requests

BASE = sys.argv[1].rstrip("/")
B = sys.argv[2] if len(sys.argv) > 2 else "fg-" + uuid.uuid4().hex[:6]
S = requests.Session()
results = []


def q(s):
    return urllib.parse.quote(s, safe="")


def req(label, method, path, expect=None, **kw):
    try:
        r = S.request(method, BASE + path, timeout=20, **kw)
        st, body = r.status_code, r.text
    except Exception as e:  # noqa
        st, body, r = "EXC", repr(e), None
    ok = "" if expect is None else ("PASS" if st in (expect if isinstance(expect, tuple) else (expect,)) else "FAIL")
    line = f"[{ok or 'info':4}] {label}: {method} {path} -> {st} {body[:260]!r}"
    print(line, flush=True)
    results.append((label, ok, st))
    return r


def js(r):
    try:
        return r.json()
    except Exception:
        return {}


def upload(name, data, extra="", label="upload", expect=None):
    return req(label, "POST", f"/upload/storage/v1/b/{B}/o?uploadType=media&name={q(name)}{extra}", expect,
               data=data, headers={"Content-Type": "application/octet-stream"})


def multipart(name, data, meta_extra=None, extra="", label="multipart", expect=None):
    meta = {"name": name, "contentType": "application/octet-stream", "metadata": {"fencegate-token": "7"}}
    meta.update(meta_extra or {})
    bnd = "fgBOUNDARY" + uuid.uuid4().hex
    body = (f"--{bnd}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{json.dumps(meta)}\r\n"
            f"--{bnd}\r\nContent-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{bnd}--\r\n".encode()
    return req(label, "POST", f"/upload/storage/v1/b/{B}/o?uploadType=multipart{extra}", expect,
               data=body, headers={"Content-Type": f"multipart/related; boundary={bnd}"})


def gen(r):
    return int(js(r).get("generation", 0) or 0)


print("#### target", BASE, "bucket", B)
req("create bucket", "POST", "/storage/v1/b?project=test", (200, 409), json={"name": B})

print("## 1. media upload preconditions")
r1 = upload("obj", b"v1", "&ifGenerationMatch=0", "create ifGenerationMatch=0", 200)
g1 = gen(r1)
print("   generation =", g1, "md5Hash =", js(r1).get("md5Hash"), "crc32c =", js(r1).get("crc32c"),
      "expected md5", base64.b64encode(hashlib.md5(b"v1").digest()).decode())
upload("obj", b"v1b", "&ifGenerationMatch=0", "create again ifGenerationMatch=0 (must 412)", 412)
upload("obj", b"v2", f"&ifGenerationMatch={g1 + 12345}", "overwrite wrong generation (must 412)", 412)
r2 = upload("obj", b"v2", f"&ifGenerationMatch={g1}", "overwrite right generation (200)", 200)
g2 = gen(r2)
print("   new generation =", g2)
req("GET media ifGenerationMatch wrong", "GET", f"/storage/v1/b/{B}/o/obj?alt=media&ifGenerationMatch={g1}", 412)
r = req("GET media current", "GET", f"/storage/v1/b/{B}/o/obj?alt=media", 200)
print("   body =", r.content if r is not None else None, "x-goog-generation =", r.headers.get("x-goog-generation") if r is not None else None)
req("PATCH metadata ifGenerationMatch wrong", "PATCH", f"/storage/v1/b/{B}/o/obj?ifGenerationMatch={g1}", 412,
    json={"metadata": {"a": "b"}})
req("PATCH metadata ifMetagenerationMatch wrong", "PATCH", f"/storage/v1/b/{B}/o/obj?ifMetagenerationMatch=999", 412,
    json={"metadata": {"a": "b"}})

print("## 2. delete preconditions")
req("DELETE ifGenerationMatch wrong (must 412)", "DELETE", f"/storage/v1/b/{B}/o/obj?ifGenerationMatch={g1}", 412)
req("DELETE ifGenerationMatch right (204)", "DELETE", f"/storage/v1/b/{B}/o/obj?ifGenerationMatch={g2}", 204)
req("DELETE again (404)", "DELETE", f"/storage/v1/b/{B}/o/obj", 404)
req("GET deleted (404)", "GET", f"/storage/v1/b/{B}/o/obj", 404)

print("## 3. compose")
gp1 = gen(upload("part1", b"AAA", "&ifGenerationMatch=0", "part1", 200))
gp2 = gen(upload("part2", b"BBB", "&ifGenerationMatch=0", "part2", 200))
cbody = {"sourceObjects": [{"name": "part1"}, {"name": "part2"}], "destination": {"contentType": "application/octet-stream"}}
rc = req("compose dest ifGenerationMatch=0 (200)", "POST", f"/storage/v1/b/{B}/o/composed/compose?ifGenerationMatch=0", 200, json=cbody)
print("   compose result gen", gen(rc), "componentCount", js(rc).get("componentCount"), "md5Hash", js(rc).get("md5Hash"), "crc32c", js(rc).get("crc32c"))
req("compose dest ifGenerationMatch=0 again (412)", "POST", f"/storage/v1/b/{B}/o/composed/compose?ifGenerationMatch=0", 412, json=cbody)
req("compose dest ifGenerationMatch wrong (412)", "POST", f"/storage/v1/b/{B}/o/composed/compose?ifGenerationMatch=1", 412, json=cbody)
bad = {"sourceObjects": [{"name": "part1", "objectPreconditions": {"ifGenerationMatch": gp1 + 999}}, {"name": "part2"}],
       "destination": {"contentType": "application/octet-stream"}}
req("compose source objectPreconditions.ifGenerationMatch wrong (412)", "POST", f"/storage/v1/b/{B}/o/composed2/compose?ifGenerationMatch=0", 412, json=bad)
good = {"sourceObjects": [{"name": "part1", "objectPreconditions": {"ifGenerationMatch": gp1}}, {"name": "part2", "generation": gp2}],
        "destination": {"contentType": "application/octet-stream", "metadata": {"fencegate-token": "9"}}}
rc = req("compose source preconditions right (200)", "POST", f"/storage/v1/b/{B}/o/composed2/compose?ifGenerationMatch=0", 200, json=good)
print("   metadata", js(rc).get("metadata"))
r = req("GET composed2 media", "GET", f"/storage/v1/b/{B}/o/composed2?alt=media", 200)
print("   body =", r.content if r is not None else None)

print("## 4. rewrite / copy")
gs = gen(upload("src", b"SRC", "&ifGenerationMatch=0", "src", 200))
req("rewrite ifSourceGenerationMatch wrong (412)", "POST", f"/storage/v1/b/{B}/o/src/rewriteTo/b/{B}/o/dst?ifGenerationMatch=0&ifSourceGenerationMatch={gs + 999}", 412, json={})
rr = req("rewrite both right (200)", "POST", f"/storage/v1/b/{B}/o/src/rewriteTo/b/{B}/o/dst?ifGenerationMatch=0&ifSourceGenerationMatch={gs}", 200, json={})
print("   rewrite done=", js(rr).get("done"), "resource.gen=", js(rr).get("resource", {}).get("generation"))
req("rewrite dest exists ifGenerationMatch=0 (412)", "POST", f"/storage/v1/b/{B}/o/src/rewriteTo/b/{B}/o/dst?ifGenerationMatch=0", 412, json={})
req("copyTo ifSourceGenerationMatch wrong (412)", "POST", f"/storage/v1/b/{B}/o/src/copyTo/b/{B}/o/dst2?ifGenerationMatch=0&ifSourceGenerationMatch={gs + 999}", 412, json={})
req("copyTo right (200)", "POST", f"/storage/v1/b/{B}/o/src/copyTo/b/{B}/o/dst2?ifGenerationMatch=0&ifSourceGenerationMatch={gs}", 200, json={})
req("copyTo dest exists ifGenerationMatch=0 (412)", "POST", f"/storage/v1/b/{B}/o/src/copyTo/b/{B}/o/dst2?ifGenerationMatch=0", 412, json={})

print("## 5. multipart upload + md5")
data = b"hello multipart"
good_md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
rm = multipart("mp", data, {"md5Hash": good_md5}, "&ifGenerationMatch=0", "multipart right md5 + ifGenerationMatch=0 (200)", 200)
print("   md5Hash", js(rm).get("md5Hash"), "expected", good_md5, "metadata", js(rm).get("metadata"), "size", js(rm).get("size"))
multipart("mp", data, None, "&ifGenerationMatch=0", "multipart again ifGenerationMatch=0 (412)", 412)
wrong_md5 = base64.b64encode(hashlib.md5(b"other").digest()).decode()
multipart("mp-badmd5", data, {"md5Hash": wrong_md5}, "&ifGenerationMatch=0", "multipart wrong md5Hash (GCS: 400)", 400)
req("GET mp-badmd5 (should be 404 if refused)", "GET", f"/storage/v1/b/{B}/o/mp-badmd5", 404)
multipart("mp-badcrc", data, {"crc32c": "AAAAAA=="}, "&ifGenerationMatch=0", "multipart wrong crc32c (GCS: 400)", 400)
upload("media-badmd5", data, "&ifGenerationMatch=0", "media upload no md5 (200)", 200)

print("## 5b. resumable upload with ifGenerationMatch")
r = req("resumable init ifGenerationMatch=0", "POST", f"/upload/storage/v1/b/{B}/o?uploadType=resumable&name=res&ifGenerationMatch=0", 200,
        json={"name": "res"}, headers={"X-Upload-Content-Type": "application/octet-stream"})
loc = r.headers.get("Location") if r is not None else None
print("   Location", loc)
if loc:
    p = urllib.parse.urlsplit(loc)
    req("resumable PUT data", "PUT", p.path + "?" + p.query, (200, 201), data=b"RES")
    r = req("resumable init again ifGenerationMatch=0 (412 at init or at finalize)", "POST",
            f"/upload/storage/v1/b/{B}/o?uploadType=resumable&name=res&ifGenerationMatch=0", None,
            json={"name": "res"}, headers={"X-Upload-Content-Type": "application/octet-stream"})
    loc2 = r.headers.get("Location") if r is not None else None
    if loc2 and r.status_code == 200:
        p = urllib.parse.urlsplit(loc2)
        req("resumable 2nd PUT data (must 412)", "PUT", p.path + "?" + p.query, 412, data=b"RES2")

print("## 6. listing")
for n in ["l/a", "l/b/1", "l/b/2", "l/c", "l/10", "l/B", "l/a/x", "l/~", "l/%"]:
    upload(n, b"x", "", "list seed " + n)
items, prefixes, tok, pages = [], [], None, 0
while True:
    path = f"/storage/v1/b/{B}/o?prefix=l/&delimiter=/&maxResults=2" + (f"&pageToken={q(tok)}" if tok else "")
    r = req(f"list page {pages}", "GET", path, 200)
    j = js(r)
    items += [i["name"] for i in j.get("items", [])]
    prefixes += j.get("prefixes", [])
    tok = j.get("nextPageToken")
    pages += 1
    if not tok or pages > 20:
        break
print("   pages", pages, "items", items, "prefixes", prefixes)
r = req("list all prefix=l/ no delimiter", "GET", f"/storage/v1/b/{B}/o?prefix=l/", 200)
print("   order", [i["name"] for i in js(r).get("items", [])])
r = req("list startOffset/endOffset", "GET", f"/storage/v1/b/{B}/o?prefix=l/&startOffset=l/b&endOffset=l/c", 200)
print("   offset items", [i["name"] for i in js(r).get("items", [])])
r = req("list fields=items(name,generation),nextPageToken", "GET", f"/storage/v1/b/{B}/o?prefix=l/&maxResults=1&fields=items(name,generation),nextPageToken", 200)

print("## 7. race of 8 creators ifGenerationMatch=0")
for rnd in range(3):
    name = f"race{rnd}"
    sts = []
    barrier = threading.Barrier(8)

    def go(i):
        s = requests.Session()
        barrier.wait()
        try:
            rr = s.post(f"{BASE}/upload/storage/v1/b/{B}/o?uploadType=media&name={name}&ifGenerationMatch=0",
                        data=f"w{i}".encode(), headers={"Content-Type": "application/octet-stream"}, timeout=20)
            sts.append(rr.status_code)
        except Exception as e:
            sts.append(repr(e))
    ts = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    wins = sum(1 for s in sts if s == 200)
    print(f"[{'PASS' if wins == 1 else 'FAIL'}] race round {rnd}: statuses {sorted(map(str, sts))} winners={wins}")
    results.append((f"race{rnd}", "PASS" if wins == 1 else "FAIL", wins))

print("## 8. V4 signed URL, expired")
upload("signed", b"S", "", "signed seed")
sig = ("X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=fg%40p.iam.gserviceaccount.com%2F20000101%2Fauto%2Fstorage%2Fgoog4_request"
       "&X-Goog-Date=20000101T000000Z&X-Goog-Expires=1&X-Goog-SignedHeaders=host&X-Goog-Signature=" + "00" * 256)
req("XML-path GET expired signed URL (GCS: 400 ExpiredToken)", "GET", f"/{B}/signed?{sig}", (400, 401, 403))
req("XML-path PUT expired signed URL (GCS: 400)", "PUT", f"/{B}/signed2?{sig}", (400, 401, 403), data=b"Z")
req("JSON GET media + expired signature params", "GET", f"/storage/v1/b/{B}/o/signed?alt=media&{sig}", (400, 401, 403))
req("JSON upload + expired signature params", "POST", f"/upload/storage/v1/b/{B}/o?uploadType=media&name=signed3&{sig}", (400, 401, 403), data=b"Z")

print("#### SUMMARY", BASE)
np_ = sum(1 for r in results if r[1] == "PASS"); nf = sum(1 for r in results if r[1] == "FAIL")
print(f"{np_} passed, {nf} failed")
for r in results:
    if r[1] == "FAIL":
        print("   FAIL:", r[0], "->", r[2])
