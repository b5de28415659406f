"""Zombie writers of the table formats, fenced by fencegate through lease-bound S3 credentials.

These libraries cannot send a Fencing-Token header; a lease acquired with "s3_credentials": true
hands out an access key that carries the lease's token on every write it signs. Per system
(FG_SYSTEM: obstore, deltalake, lance, slatedb, iceberg), in bucket FG_BUCKET (scope = "prefix",
prefix_segments = 1: one scope per table directory; fencing = "required": only token-carrying
writes land):

  1. writer A acquires the table's lease (short TTL) with S3 credentials and writes its table
     through them;
  2. A pauses past its TTL (it sleeps);
  3. writer B acquires the lease (a new token: the scope's fence moves to it at the grant, and new
     credentials) and commits;
  4. A wakes and commits with its old credentials.

Asserted: A's library raises (the error named per system in EXPECTED, an error that stops A
rather than a conflict it retries: fencegate refused few of A's writes, and A gave up within
seconds; SlateDB, which may retry without end, within A's own deadline); nothing of A landed
after the pause (every object of the table that carries A's token, read by HEAD, is one A wrote
before the pause, unchanged, and the scope's highest token is B's); the table is what B left (its
versions and rows). Run by
tests/it/s3/tables.rs from .venv-tables, through fencegate only (there are no leases on a store
alone). FG_ENDPOINT is fencegate's address (development mode: the native API unsigned).

Exits non-zero, naming the step, at the first thing that fails; prints "<system> zombie passed"
at the end."""

import json
import os
import sys
import time
import urllib.request
from urllib.parse import quote
import uuid

ENDPOINT = os.environ["FG_ENDPOINT"].rstrip("/")
BUCKET = os.environ["FG_BUCKET"]
SYSTEM = os.environ["FG_SYSTEM"]
TABLE = f"{uuid.uuid4().hex[:8]}-{SYSTEM}"  # the table's directory: its scope, a fresh one
TTL_MS = 1500
# The libraries' own timeouts and backoffs are seconds; a retried conflict would take longer
# than this, or show as more refusals than A has writes in flight.
GIVES_UP_WITHIN_S = 15
MOST_REFUSALS = 4


def step(text):
    print(f"[{SYSTEM} zombie] {text}", flush=True)


def check(cond, what):
    if not cond:
        print(f"FAILED [{SYSTEM} zombie]: {what}", flush=True)
        sys.exit(1)


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{ENDPOINT}{path}", data=data, method=method)
    with urllib.request.urlopen(req) as r:
        text = r.read()
    return json.loads(text) if text else None


class Writer:
    """A lease on the table's scope and the S3 credentials that carry its token."""

    def __init__(self, holder):
        grant = call("POST", f"/v1/leases/{TABLE}",
                     {"holder": holder, "ttl_ms": TTL_MS, "bucket": BUCKET,
                      "key": f"{TABLE}/", "s3_credentials": True, "wait_ms": 10_000})
        self.holder = holder
        self.token = grant["token"]
        self.key = grant["s3_credentials"]["access_key_id"]
        self.secret = grant["s3_credentials"]["secret_access_key"]
        check(grant["scope"] == f"prefix:{BUCKET}/{TABLE}", f"the lease's scope: {grant['scope']}")
        step(f"{holder} holds the lease with token {self.token}")

    def object_store(self):
        """object_store's options (delta-rs, Lance)."""
        return {"aws_endpoint": ENDPOINT, "aws_access_key_id": self.key,
                "aws_secret_access_key": self.secret, "aws_region": "us-east-1",
                "allow_http": "true", "aws_virtual_hosted_style_request": "false"}


def objects():
    """The table's objects: key -> (etag, the token that wrote it, from a HEAD: a listing of an
    s3 backend does not carry the stored metadata)."""
    found, after = {}, None
    while True:
        query = f"prefix={TABLE}/" + (f"&start_after={after}" if after else "")
        page = call("GET", f"/v1/objects/{BUCKET}?{query}")
        for o in page["objects"]:
            head = urllib.request.Request(f"{ENDPOINT}/v1/objects/{BUCKET}/{quote(o['key'])}",
                                          method="HEAD")
            with urllib.request.urlopen(head) as r:
                found[o["key"]] = (r.headers["ETag"], int(r.headers["Fencing-Token"]))
        after = page["next_start_after"]
        if not after:
            return found


def stale_refusals():
    with urllib.request.urlopen(f"{ENDPOINT}/metrics") as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f'fencegate_stale_rejections_total{{bucket="{BUCKET}"}}'):
                return int(float(line.split()[-1]))
    return 0


def zombie(a_writes, b_commits, a_commits, table_is_bs):
    """The timeline above; each callable takes its Writer."""
    a = Writer("writer-a")
    a_writes(a)
    before = objects()
    check(before and all(t == a.token for _, t in before.values()),
          f"A's table, as listed: {before}")
    step(f"A wrote {len(before)} objects, then pauses past its TTL")
    time.sleep(TTL_MS / 1000 + 0.5)
    b = Writer("writer-b")
    check(b.token > a.token, f"B's token {b.token} is not above A's {a.token}")
    b_commits(b)
    step("A wakes up and commits with its old credentials")
    refusals, started = stale_refusals(), time.monotonic()
    try:
        a_commits(a)
        raised = None
    except Exception as e:  # noqa: BLE001 - what A's library raises is the finding
        raised = e
    took, refused = time.monotonic() - started, stale_refusals() - refusals
    step(f"A got {type(raised).__name__}: {str(raised)[:300]!r} after {took:.1f} s; "
         f"fencegate refused {refused} stale writes")
    check(raised is not None, "A's commit was accepted")
    want = EXPECTED[SYSTEM]
    check(isinstance(raised, want[0]()) and want[1] in str(raised),
          f"A's library raised {raised!r}, not {want[0]()} with {want[1]!r}")
    if isinstance(raised, StillRetrying):
        check(refused >= 1, f"{refused} stale writes refused while A's library was stuck")
    else:
        check(1 <= refused <= MOST_REFUSALS, f"{refused} stale writes refused: A retried")
    check(took < GIVES_UP_WITHIN_S, f"A took {took:.1f} s to give up: it retried")
    after = objects()
    kept = {k: v for k, v in after.items() if v[1] == a.token}
    # B may have replaced some of A's objects; none may have been written by A since.
    check(set(kept.items()) <= set(before.items()), f"objects written with A's token after "
          f"the pause: {sorted(set(kept.items()) - set(before.items()))}")
    check(all(t in (a.token, b.token) for _, t in after.values()), f"tokens: {after}")
    highest = call("GET", f"/v1/fences/{BUCKET}/{TABLE}/")["highest"]
    check(highest == b.token, f"the scope's highest token is {highest}, not B's {b.token}")
    table_is_bs(b)


class StillRetrying(Exception):
    """A's library kept retrying its refused write without end; the application's own deadline
    stopped it (see slatedb_zombie)."""


def obstore_exc(name):
    return lambda: getattr(__import__("obstore.exceptions", fromlist=[name]), name)


def slatedb_closed():
    return __import__("slatedb.uniffi", fromlist=["Error"]).Error.Closed, StillRetrying


# Per system: what A's library raises when fencegate refuses its write as stale (403
# StaleFencingToken), as (a callable giving the exception type, a part of its message).
EXPECTED = {
    # object_store maps the 403 to PermissionDenied, which it does not retry.
    "obstore": (obstore_exc("PermissionDeniedError"), "StaleFencingToken"),
    # The same error, wrapped as "Failed to parse parquet: External: ..." by the data writer.
    "deltalake": (lambda: __import__("deltalake.exceptions", fromlist=["x"]).DeltaError,
                  "StaleFencingToken"),
    "lance": (lambda: OSError, "StaleFencingToken"),
    # Arrow's S3 (the AWS SDK for C++) does not know the code: "AWS Error UNKNOWN (HTTP status
    # 403)", not retried.
    "iceberg": (lambda: OSError, "StaleFencingToken"),
    # Either SlateDB has seen B's epoch first (closed, FENCED), or its WAL flush retries the
    # 403 without end and only the application's deadline stops A: see slatedb_zombie.
    "slatedb": (slatedb_closed, "FENCED"),
}


def obstore_zombie():
    import obstore
    from obstore.store import S3Store

    def store(w):
        return S3Store(BUCKET, prefix=TABLE, endpoint=ENDPOINT, access_key_id=w.key,
                       secret_access_key=w.secret, region="us-east-1",
                       virtual_hosted_style_request=False, client_options={"allow_http": True})

    etag = {}

    def a_writes(a):
        etag["v1"] = obstore.put(store(a), "state", b"A v1", mode="create")["e_tag"]

    def b_commits(b):
        obstore.put(store(b), "state", b"B v2", mode={"e_tag": etag["v1"]})

    def a_commits(a):
        # A's compare-and-swap from the version it read: the fence refuses it before the etag
        # is compared, so A sees why (fenced), not a conflict to re-read and retry.
        obstore.put(store(a), "state", b"A v2", mode={"e_tag": etag["v1"]})

    def table_is_bs(b):
        check(bytes(obstore.get(store(b), "state").bytes()) == b"B v2", "B's update is not there")

    zombie(a_writes, b_commits, a_commits, table_is_bs)

    step("A's create of a new key is refused as well")
    a = Writer("writer-a2")
    obstore.put(store(a), "other", b"A", mode="create")
    time.sleep(TTL_MS / 1000 + 0.5)
    Writer("writer-b2")
    try:
        obstore.put(store(a), "created-late", b"A", mode="create")
        raised = None
    except Exception as e:  # noqa: BLE001
        raised = e
    check(isinstance(raised, EXPECTED["obstore"][0]()), f"A's late create: {raised!r}")
    check("created-late" not in {k.split("/")[-1] for k in objects()}, "A's late create landed")


def deltalake_zombie():
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    uri = f"s3://{BUCKET}/{TABLE}/delta"

    def opts(w):
        o = w.object_store()
        return {k.upper(): v for k, v in o.items()}

    zombie(lambda a: write_deltalake(uri, pa.table({"by": ["A"]}), storage_options=opts(a)),
           lambda b: write_deltalake(uri, pa.table({"by": ["B"]}), mode="append",
                                     storage_options=opts(b)),
           lambda a: write_deltalake(uri, pa.table({"by": ["A, late"]}), mode="append",
                                     storage_options=opts(a)),
           lambda b: deltalake_is_bs(DeltaTable(uri, storage_options=opts(b))))


def deltalake_is_bs(dt):
    rows = sorted(dt.to_pyarrow_table()["by"].to_pylist())
    check(dt.version() == 1 and rows == ["A", "B"], f"version {dt.version()}, rows {rows}")
    check(sorted(h["version"] for h in dt.history()) == [0, 1], f"history {dt.history()}")


def lance_zombie():
    import lance
    import pyarrow as pa

    uri = f"s3://{BUCKET}/{TABLE}/lance"

    def table_is_bs(b):
        ds = lance.dataset(uri, storage_options=b.object_store())
        rows = sorted(ds.to_table()["by"].to_pylist())
        check(ds.version == 2 and rows == ["A", "B"], f"version {ds.version}, rows {rows}")
        check([v["version"] for v in ds.versions()] == [1, 2], f"versions {ds.versions()}")

    zombie(lambda a: lance.write_dataset(pa.table({"by": ["A"]}), uri,
                                         storage_options=a.object_store()),
           lambda b: lance.write_dataset(pa.table({"by": ["B"]}), uri, mode="append",
                                         storage_options=b.object_store()),
           lambda a: lance.write_dataset(pa.table({"by": ["A, late"]}), uri, mode="append",
                                         storage_options=a.object_store()),
           table_is_bs)


def slatedb_zombie():
    import asyncio

    from slatedb.uniffi import DbBuilder, ObjectStore

    def store(w):
        # ObjectStore.resolve reads object_store's environment settings when called.
        os.environ.update(AWS_ENDPOINT=ENDPOINT, AWS_ALLOW_HTTP="true", AWS_REGION="us-east-1",
                          AWS_VIRTUAL_HOSTED_STYLE_REQUEST="false", AWS_ACCESS_KEY_ID=w.key,
                          AWS_SECRET_ACCESS_KEY=w.secret)
        return ObjectStore.resolve(f"s3://{BUCKET}/")

    path = f"{TABLE}/db"
    loop = asyncio.new_event_loop()
    run = loop.run_until_complete
    dbs = {}

    async def open_put(w, value):
        db = await DbBuilder(path, store(w)).build()
        await db.put(b"k", value)
        await db.flush()
        dbs[w.holder] = db

    async def a_commits():
        # SlateDB retries a refused WAL write without end (its flush and its shutdown then never
        # return), unless it has already read B's newer epoch, when it closes as FENCED: A
        # bounds the wait itself, and finds itself fenced in the database's status.
        db = dbs["writer-a"]
        try:
            await asyncio.wait_for(db.put(b"k", b"A, late"), 5)
            await asyncio.wait_for(db.flush(), 5)
        except TimeoutError:
            reason = db.status().close_reason
            raise StillRetrying(f"A's flush did not return within 5 s; its status: {reason}")

    async def table_is_bs():
        got = await dbs["writer-b"].get(b"k")
        check(got == b"B", f"B reads {got!r}")
        await dbs["writer-b"].shutdown()

    zombie(lambda a: run(open_put(a, b"A")), lambda b: run(open_put(b, b"B")),
           lambda a: run(a_commits()), lambda b: run(table_is_bs()))


def iceberg_zombie():
    import tempfile

    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    db = f"sqlite:///{tempfile.mkdtemp()}/catalog.db"
    schema = pa.schema([("by", pa.string())])
    tables = {}

    def catalog(w):
        return SqlCatalog("fg", **{"uri": db, "warehouse": f"s3://{BUCKET}/{TABLE}",
                                   "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
                                   "s3.endpoint": ENDPOINT, "s3.access-key-id": w.key,
                                   "s3.secret-access-key": w.secret, "s3.region": "us-east-1",
                                   "s3.force-virtual-addressing": "false"})

    def a_writes(a):
        cat = catalog(a)
        cat.create_namespace("ns")
        tables["a"] = cat.create_table("ns.t", schema=schema)
        tables["a"].append(pa.table({"by": ["A"]}, schema=schema))

    def table_is_bs(b):
        t = catalog(b).load_table("ns.t")
        rows = sorted(t.scan().to_arrow()["by"].to_pylist())
        check(rows == ["A", "B"] and len(t.snapshots()) == 2, f"{len(t.snapshots())} snapshots, rows {rows}")

    zombie(a_writes,
           lambda b: catalog(b).load_table("ns.t").append(pa.table({"by": ["B"]}, schema=schema)),
           lambda a: tables["a"].refresh().append(pa.table({"by": ["A, late"]}, schema=schema)),
           table_is_bs)


if __name__ == "__main__":
    {"obstore": obstore_zombie, "deltalake": deltalake_zombie, "lance": lance_zombie,
     "slatedb": slatedb_zombie, "iceberg": iceberg_zombie}[SYSTEM]()
    print(f"{SYSTEM} zombie passed", flush=True)
    # As tables_client.py: the native thread pools may abort the interpreter's teardown.
    sys.stderr.flush()
    os._exit(0)
