"""Table formats and object_store through fencegate's S3 endpoint, as a drop-in gateway: obstore's
PutMode.Create and PutMode.Update, delta-rs (`deltalake`), Iceberg (`pyiceberg`: SQL catalog on
SQLite, PyArrowFileIO on S3) and Lance (`pylance`), each with writers racing on one table, and
SlateDB (`slatedb`), whose newer writer must fence the older.

Run by tests/it/s3/tables.rs from .venv-tables (scripts/test installs it), once per system
(FG_SYSTEM) and target (FG_TARGET):
  fencegate  fencegate on the fs backend, or on the s3 backend over a store that ignores
             If-Match and If-None-Match (moto behind a proxy that drops them; fencegate runs
             there with conditional_writes = "fencegate"): every race must end as the system's
             protocol promises (one creator wins, a stale update is refused, every commit a
             version, no gap, no row lost);
  store      that store alone, the negative control: where the loss is certain it is asserted
             (every racing creator told it won, a stale update accepted); where it depends on
             timing (lost commits, an older writer not fenced) what holds whatever the timing
             is asserted and what was lost is printed.
FG_ENDPOINT, FG_BUCKET and AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY say where and as whom.

Exits non-zero, naming the step, at the first thing that fails; prints "<system> passed" at the
end."""

import logging
import os
import sys
import tempfile
import threading
import uuid

ENDPOINT = os.environ["FG_ENDPOINT"]
BUCKET = os.environ["FG_BUCKET"]
SYSTEM = os.environ["FG_SYSTEM"]
TARGET = os.environ["FG_TARGET"]
assert TARGET in ("fencegate", "store"), TARGET
GATED = TARGET == "fencegate"
KEY = os.environ["AWS_ACCESS_KEY_ID"]
SECRET = os.environ["AWS_SECRET_ACCESS_KEY"]
RUN = uuid.uuid4().hex[:8]  # a fresh prefix, so a rerun against the same store starts clean


def step(text):
    print(f"[{SYSTEM} via {TARGET}] {text}", flush=True)


def check(cond, what):
    if not cond:
        print(f"FAILED [{SYSTEM} via {TARGET}]: {what}", flush=True)
        sys.exit(1)


def race(n, body):
    """Runs body(k) for k in 0..n on n threads released together; returns the exceptions
    raised (the libraries here do their I/O in Rust or C++ with the GIL released, so threads
    really race)."""
    gate = threading.Barrier(n)
    errors = []

    def run(k):
        gate.wait()
        try:
            body(k)
        except Exception as e:  # noqa: BLE001 - every failure is reported by the caller
            errors.append(f"writer {k}: {e!r}"[:400])

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def race_broke_the_store(errors):
    """Judges the writers' failures in a race on one table. Through fencegate none may fail. On
    the store alone a writer may read an object that another is writing over at the same time
    (the create-if-absent its library relies on is ignored), and fail: that is printed as what
    the store lost, and the checks that need every writer to have finished are skipped."""
    if GATED or not errors:
        check(not errors, f"a writer failed: {errors}")
        return False
    step(f"the store alone: {len(errors)} writer(s) failed mid-race: {errors}")
    return True


def obstore_modes():
    import obstore
    from obstore.exceptions import AlreadyExistsError, PreconditionError
    from obstore.store import S3Store

    def store(**extra):
        return S3Store(BUCKET, endpoint=ENDPOINT, access_key_id=KEY, secret_access_key=SECRET,
                       region="us-east-1", virtual_hosted_style_request=False,
                       client_options={"allow_http": True}, **extra)

    s = store()
    rounds, racers, doubled = 10, 8, 0
    step(f"PutMode.Create: {racers} writers race to create each of {rounds} keys")
    for r in range(rounds):
        key = f"{RUN}/create-{r}"
        won = []

        def create(k):
            try:
                obstore.put(s, key, f"writer {k}".encode(), mode="create")
                won.append(k)
            except AlreadyExistsError:
                pass

        errors = race(racers, create)
        check(not errors, f"round {r}: {errors}")
        stored = bytes(obstore.get(s, key).bytes())
        check(len(won) >= 1, f"round {r}: no writer created the key")
        if not GATED:
            # Nothing checks If-None-Match: every writer is told it created the key.
            check(len(won) == racers, f"round {r}: only {len(won)} creators on a store without conditions")
        check(stored in [f"writer {k}".encode() for k in won],
              f"round {r}: stored {stored!r}, written by none of the winners {won}")
        if GATED:
            check(len(won) == 1, f"round {r}: {len(won)} writers were told they created it")
            check(stored == f"writer {won[0]}".encode(), f"round {r}: stored {stored!r}")
        doubled += len(won) > 1
    step(f"rounds with more than one creator: {doubled} of {rounds}")

    # obstore sends PutMode.Update as If-Match on a single PutObject (a mode is never sent as
    # a multipart upload), with or without object_store's conditional_put = "etag".
    for extra in ({}, {"conditional_put": "etag"}):
        us = store(**extra)
        step(f"PutMode.Update {extra or '(defaults)'}: a stale etag is refused")
        key = f"{RUN}/update-{len(extra)}"
        first = obstore.put(us, key, b"v1")
        obstore.put(us, key, b"v2", mode={"e_tag": first["e_tag"]})
        try:
            obstore.put(us, key, b"v3", mode={"e_tag": first["e_tag"]})
            refused = None
        except PreconditionError as e:
            refused = e
        if GATED:
            check(refused is not None, "an update with a stale etag was accepted")
            check(bytes(obstore.get(us, key).bytes()) == b"v2", "the stale update changed the object")
        else:
            # The control: nothing checks If-Match, and the stale update overwrites.
            check(refused is None, "the store alone refused a stale update: it has conditions")
            check(bytes(obstore.get(us, key).bytes()) == b"v3", "the stale update did not land")


def deltalake_appends():
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    # delta-rs 1.x commits a version by writing _delta_log/<version>.json with If-None-Match
    # (PutMode::Create): neither a lock provider nor AWS_S3_ALLOW_UNSAFE_RENAME is set.
    opts = {"AWS_ENDPOINT_URL": ENDPOINT, "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false"}
    uri = f"s3://{BUCKET}/{RUN}/delta"
    writers, appends = 4, 5
    step(f"{writers} writers x {appends} appends on one table")
    write_deltalake(uri, pa.table({"w": [-1], "i": [-1]}), storage_options=opts)

    def append(k):
        for i in range(appends):
            write_deltalake(uri, pa.table({"w": [k], "i": [i]}), mode="append",
                            storage_options=opts)

    if race_broke_the_store(race(writers, append)):
        return
    dt = DeltaTable(uri, storage_options=opts)
    versions = sorted(h["version"] for h in dt.history())
    rows = dt.to_pyarrow_table()
    got = set(zip(rows["w"].to_pylist(), rows["i"].to_pylist()))
    check(versions == list(range(dt.version() + 1)), f"a gap in the history: {versions}")
    check(rows.num_rows == len(got) == dt.version() + 1,
          f"{rows.num_rows} rows ({len(got)} distinct) in {dt.version() + 1} versions")
    lost = writers * appends - dt.version()
    step(f"version {dt.version()}, {rows.num_rows} rows; commits lost: {lost}")
    if GATED:
        check(lost == 0, f"{lost} commits were acknowledged and lost")
        want = {(k, i) for k in range(writers) for i in range(appends)} | {(-1, -1)}
        check(got == want, f"rows missing: {sorted(want - got)}")


def iceberg_appends():
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import CommitFailedException

    # The SQL catalog commits by compare-and-swap of the table's metadata location in SQLite;
    # the files on S3 (data, manifests, metadata) are new names each time, so no store condition
    # is relied on: the control on the store alone is expected to hold as well.
    props = {"uri": f"sqlite:///{tempfile.mkdtemp()}/catalog.db",
             "warehouse": f"s3://{BUCKET}/{RUN}/iceberg",
             "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
             "s3.endpoint": ENDPOINT, "s3.access-key-id": KEY, "s3.secret-access-key": SECRET,
             "s3.region": "us-east-1", "s3.force-virtual-addressing": "false"}
    conflicts = []

    class Count(logging.Handler):
        def emit(self, record):
            if "concurrent update" in record.getMessage():
                conflicts.append(record.getMessage())

    logging.getLogger("pyiceberg").addHandler(Count())
    schema = pa.schema([("w", pa.int64()), ("i", pa.int64())])
    catalog = SqlCatalog("fg", **props)
    catalog.create_namespace("ns")
    catalog.create_table("ns.t", schema=schema)

    def append(table, k, i):
        # pyiceberg retries a refused commit itself (4 times); past that the writer reloads.
        while True:
            try:
                table.append(pa.table({"w": [k], "i": [i]}, schema=schema))
                return
            except CommitFailedException as e:
                conflicts.append(repr(e))
                table = table.refresh()

    step("a writer with a stale table handle commits after another writer")
    stale = catalog.load_table("ns.t")
    append(catalog.load_table("ns.t"), -1, 0)
    before = len(conflicts)
    append(stale, -1, 1)
    check(len(conflicts) > before, "the stale handle's commit was taken without a conflict")

    writers, appends = 4, 3
    step(f"{writers} writers x {appends} appends, one catalog connection each")

    def writer(k):
        table = SqlCatalog("fg", **props).load_table("ns.t")
        for i in range(appends):
            append(table, k, i)
            table = table.refresh()

    errors = race(writers, writer)
    check(not errors, f"a writer failed: {errors}")
    table = catalog.load_table("ns.t")
    rows = table.scan().to_arrow()
    got = set(zip(rows["w"].to_pylist(), rows["i"].to_pylist()))
    want = {(k, i) for k in range(writers) for i in range(appends)} | {(-1, 0), (-1, 1)}
    step(f"{len(table.snapshots())} snapshots, {rows.num_rows} rows, "
         f"{len(conflicts)} conflicts detected")
    check(rows.num_rows == len(want) and got == want, f"rows missing: {sorted(want - got)}")
    check(len(table.snapshots()) == len(want), f"{len(table.snapshots())} snapshots")


def lance_appends():
    import lance
    import pyarrow as pa

    # Lance commits version N by writing _versions/N.manifest with If-None-Match
    # (object_store's PutMode::Create), and retries an append on a conflict.
    opts = {"aws_endpoint": ENDPOINT, "aws_access_key_id": KEY, "aws_secret_access_key": SECRET,
            "aws_region": "us-east-1", "allow_http": "true",
            "aws_virtual_hosted_style_request": "false"}
    uri = f"s3://{BUCKET}/{RUN}/lance"
    writers, appends = 4, 5
    step(f"{writers} writers x {appends} appends on one dataset")
    lance.write_dataset(pa.table({"w": [-1], "i": [-1]}), uri, storage_options=opts)

    def append(k):
        for i in range(appends):
            lance.write_dataset(pa.table({"w": [k], "i": [i]}), uri, mode="append",
                                storage_options=opts)

    if race_broke_the_store(race(writers, append)):
        return
    ds = lance.dataset(uri, storage_options=opts)
    versions = sorted(v["version"] for v in ds.versions())
    rows = ds.to_table()
    got = set(zip(rows["w"].to_pylist(), rows["i"].to_pylist()))
    check(versions == list(range(1, ds.version + 1)), f"a gap in the versions: {versions}")
    check(rows.num_rows == len(got) == ds.version,
          f"{rows.num_rows} rows ({len(got)} distinct) in {ds.version} versions")
    lost = writers * appends + 1 - ds.version
    step(f"version {ds.version}, {rows.num_rows} rows; commits lost: {lost}")
    if GATED:
        check(lost == 0, f"{lost} commits were acknowledged and lost")
        want = {(k, i) for k in range(writers) for i in range(appends)} | {(-1, -1)}
        check(got == want, f"rows missing: {sorted(want - got)}")


def slatedb_fencing():
    import asyncio

    from slatedb.uniffi import CloseReason, DbBuilder, Error, ObjectStore

    # SlateDB resolves an s3:// URL with object_store's environment settings. A writer claims
    # the database by writing the next manifest (and its WAL files) only if absent, with a new
    # writer epoch; an older writer that then tries to write finds the newer epoch and closes.
    os.environ.update(AWS_ENDPOINT=ENDPOINT, AWS_ALLOW_HTTP="true", AWS_REGION="us-east-1",
                      AWS_VIRTUAL_HOSTED_STYLE_REQUEST="false")

    async def run():
        store = ObjectStore.resolve(f"s3://{BUCKET}/")
        path = f"{RUN}/slatedb"
        step("writer A opens the database and writes; writer B opens it after")
        old = await DbBuilder(path, store).build()
        await old.put(b"k", b"from A")
        await old.flush()
        new = await DbBuilder(path, store).build()
        check(await new.get(b"k") == b"from A", "B does not read A's durable write")
        await new.put(b"k", b"from B")
        await new.flush()
        step("writer A writes again: it must find itself fenced")
        try:
            await old.put(b"k", b"from A, fenced")
            await old.flush()
            fenced = None
        except Error.Closed as e:
            fenced = e
        if not GATED:
            # Whether A finds B's epoch depends on which manifest write lands last when nothing
            # checks If-None-Match: printed, not asserted.
            step(f"the older writer {'was' if fenced else 'was NOT'} fenced")
            return
        check(fenced is not None, "the older writer wrote after the newer one opened")
        check(fenced.reason == CloseReason.FENCED, f"closed, but not fenced: {fenced!r}")
        check(await new.get(b"k") == b"from B", "the fenced writer's write is visible")
        await new.put(b"k2", b"B goes on")
        await new.flush()
        reader = await DbBuilder(path, store).build()
        check(await reader.get(b"k") == b"from B", "a later writer reads the fenced write")
        await reader.shutdown()

    asyncio.run(run())


if __name__ == "__main__":
    {"obstore": obstore_modes, "deltalake": deltalake_appends, "iceberg": iceberg_appends,
     "lance": lance_appends, "slatedb": slatedb_fencing}[SYSTEM]()
    print(f"{SYSTEM} passed", flush=True)
    # Leave without the interpreter's teardown: with deltalake and pyarrow loaded, their native
    # thread pools sometimes abort it ("terminate called without an active exception") after
    # everything was checked, which would fail a run that passed.
    sys.stderr.flush()
    os._exit(0)
