"""The fencegate package against a real fencegate binary.

The server: `fencegate serve --config CONFIG --listen 127.0.0.1:PORT --data-dir DIR`, a fresh
DIR or one these tests used before (every test picks names of its own), with CONFIG:

    [buckets.default]            # tokens required, one scope per object, as the embedded default

    [buckets.capped]
    max_token_jump = 1000        # for TokenJumpTooLarge

    [keys.admin]
    access_key_id = "fgpy-admin"
    secret_access_key = "fgpy-admin-secret-0123456789"
    admin = true

    [keys.reader]
    access_key_id = "fgpy-reader"
    secret_access_key = "fgpy-reader-secret-0123456789"
    buckets = { "default" = ["read"] }

Then, from the checkout's root:

    FENCEGATE_URL=http://127.0.0.1:PORT .venv/bin/python -m unittest discover -s clients/python/tests -v

The tests import the package from this checkout (clients/python), whatever is installed, and
need boto3 (the `boto3` extra). They take about 15 seconds: leases run out on the clock.
"""

from __future__ import annotations

import http.client
import json
import os
import pickle
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple
from urllib.parse import urlsplit

import requests

PACKAGE_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PACKAGE_DIR))

import fencegate  # noqa: E402
import fencegate.boto3  # noqa: E402
from fencegate.errors import make_error  # noqa: E402

URL = os.environ.get("FENCEGATE_URL", fencegate.DEFAULT_URL).rstrip("/")
ADMIN = ("fgpy-admin", "fgpy-admin-secret-0123456789")
READER = ("fgpy-reader", "fgpy-reader-secret-0123456789")
REFERENCE = PACKAGE_DIR.parents[1] / "docs" / "reference.md"
EXAMPLE = PACKAGE_DIR.parents[1] / "examples" / "python" / "lease_client.py"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin(**kwargs: Any) -> fencegate.Client:
    return fencegate.Client(URL, *ADMIN, **kwargs)


class CountingSession(requests.Session):
    """A session that records every request it sends, to prove one was not, and can play
    an unreachable fencegate."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: List[Tuple[str, str]] = []
        #: When set, every request fails as if fencegate could not be reached.
        self.unreachable = False
        self._lock = threading.Lock()

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        if self.unreachable:
            raise requests.ConnectionError(f"(test) {request.url} is unreachable")
        with self._lock:
            self.sent.append((str(request.method), str(request.url)))
        return super().send(request, **kwargs)

    def writes_to(self, path: str) -> List[Tuple[str, str]]:
        with self._lock:
            return [(m, u) for m, u in self.sent if m != "GET" and u.endswith(path)]


class ProxyRequest(BaseHTTPRequestHandler):
    """One request through a `Proxy`: the test's `intercept` answers it (late, never, in a
    trickle, with a reset) or lets it be forwarded."""

    protocol_version = "HTTP/1.1"
    server: "_ProxyServer"
    body: bytes

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _any(self) -> None:
        proxy = self.server.proxy
        length = int(self.headers.get("Content-Length") or 0)
        self.body = self.rfile.read(length) if length else b""
        proxy.record(self.command, self.path)
        if not proxy.intercept(self):
            self.reply(*self.forward())

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

    def forward(self) -> Tuple[int, Dict[str, str], bytes]:
        """Sends the request on to the proxy's upstream as it came (Host included, so that a
        signature still matches); its status, headers and body."""
        up = urlsplit(self.server.proxy.upstream)
        conn = http.client.HTTPConnection(up.hostname or "127.0.0.1", up.port or 80, timeout=60)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                conn.putheader(name, value)
            conn.endheaders(self.body or None)
            answer = conn.getresponse()
            return answer.status, dict(answer.getheaders()), answer.read()
        finally:
            conn.close()

    def reply(self, status: int, headers: Dict[str, str], data: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def reply_json(self, status: int, fields: Dict[str, Any], **headers: str) -> None:
        self.reply(
            status, {"Content-Type": "application/json", **headers}, json.dumps(fields).encode()
        )

    def reset(self) -> None:
        """Drops the connection unanswered, with a TCP reset."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def trickle(self, data: bytes, every: float) -> None:
        """Sends `data` a byte at a time, `every` seconds apart, until the proxy closes."""
        for byte in data:
            if self.server.proxy.closing.wait(every):
                return
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                return

    def stall(self) -> None:
        """Answers nothing, and keeps the connection open until the proxy closes."""
        self.server.proxy.closing.wait(60)
        self.close_connection = True


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    proxy: "Proxy"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a connection the test reset or the client dropped on purpose


class Proxy:
    """A misbehaving network between the package and the tests' fencegate: an HTTP proxy in a
    thread of its own, as a context manager. `intercept(request)` returns True when it
    answered the `ProxyRequest` itself; the rest are forwarded."""

    def __init__(self, intercept: Callable[[ProxyRequest], bool], upstream: str = URL) -> None:
        self.intercept = intercept
        self.upstream = upstream
        self.closing = threading.Event()
        self.seen: List[Tuple[str, str]] = []
        self._lock = threading.Lock()
        self._server = _ProxyServer(("127.0.0.1", 0), ProxyRequest)
        self._server.proxy = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "Proxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()

    def record(self, method: str, path: str) -> None:
        with self._lock:
            self.seen.append((method, path))

    def requests(self, method: str, prefix: str) -> List[str]:
        with self._lock:
            return [p for m, p in self.seen if m == method and p.startswith(prefix)]


def is_renewal(request: ProxyRequest) -> bool:
    return request.command == "PUT" and request.path.startswith("/v1/leases/")


def setUpModule() -> None:
    try:
        requests.get(f"{URL}/healthz", timeout=5).raise_for_status()
    except requests.RequestException as e:
        raise RuntimeError(
            f"no fencegate at {URL} ({e}): start one with the configuration at the top of "
            f"{__file__} and set FENCEGATE_URL"
        ) from None
    try:
        admin().fence("default", "probe")
    except fencegate.FencegateError as e:
        raise RuntimeError(
            f"the fencegate at {URL} refused the tests' admin key ({e}): start it with the "
            f"configuration at the top of {__file__}"
        ) from None


class Package(unittest.TestCase):
    """What the package promises about itself: no server."""

    def test_the_version_is_the_servers(self) -> None:
        cargo = PACKAGE_DIR.parents[1] / "Cargo.toml"
        if not cargo.exists():
            self.skipTest(f"{cargo} is not here (the package was copied out of its checkout)")
        found = re.search(r'^version = "([^"]+)"', cargo.read_text(), re.M)
        assert found is not None
        self.assertEqual(fencegate.__version__, found.group(1))

    def test_it_ships_its_type_hints(self) -> None:
        self.assertTrue((PACKAGE_DIR / "fencegate" / "py.typed").is_file())

    def test_everything_exported_exists(self) -> None:
        missing = [name for name in fencegate.__all__ if not hasattr(fencegate, name)]
        self.assertEqual(missing, [])


class ErrorTable(unittest.TestCase):
    """The error classes against docs/reference.md, and their construction: no server."""

    def test_every_code_in_the_reference_table_has_its_class(self) -> None:
        if not REFERENCE.exists():
            self.skipTest(f"{REFERENCE} is not here (the package was copied out of its checkout)")
        codes = set()
        for line in REFERENCE.read_text().splitlines():
            if not line.startswith("| ") or line.startswith(("| ---", "| case")):
                continue
            codes.update(re.findall(r"`([A-Z][A-Za-z]+)`", line.strip().strip("|").split("|")[-1]))
        self.assertGreater(len(codes), 50, "the table was not parsed")
        missing = sorted(c for c in codes if c not in fencegate.ERRORS_BY_CODE)
        self.assertEqual(missing, [], "codes of docs/reference.md without an exception class")
        for code in codes:
            cls = fencegate.ERRORS_BY_CODE[code]
            self.assertEqual(cls.code, code)
            self.assertIs(getattr(fencegate, cls.__name__), cls, f"{cls.__name__} not exported")
            self.assertTrue(cls.__doc__, f"{cls.__name__} has no docstring")

    def test_an_unknown_code_is_the_base_class_with_its_code(self) -> None:
        err = make_error(418, {}, {"error": "Teapot", "message": "short and stout"}, what="PUT /x")
        self.assertIs(type(err), fencegate.FencegateError)
        self.assertEqual((err.code, err.status, err.message), ("Teapot", 418, "short and stout"))

    def test_an_answer_without_a_code_says_what_answered(self) -> None:
        err = make_error(502, {}, None, what="PUT /v1/objects/default/k")
        self.assertIs(type(err), fencegate.FencegateError)
        self.assertIn("PUT /v1/objects/default/k answered HTTP 502", str(err))

    def test_highest_comes_from_the_header_when_the_body_lacks_it(self) -> None:
        err = make_error(
            409,
            {"Fencing-Token-Highest": "34", "Retry-After": "2", "x-amz-request-id": "R1"},
            {"Code": "StaleFencingToken", "Message": "token 33 is below 34"},
            what="PutObject",
            token=33,
        )
        assert isinstance(err, fencegate.StaleFencingToken)
        self.assertEqual((err.highest, err.token, err.retry_after), (34, 33, 2.0))
        self.assertEqual(err.request_id, "R1")
        self.assertIn("[request id R1]", str(err))

    def test_errors_survive_pickling(self) -> None:
        err = make_error(
            409,
            {},
            {"error": "LeaseHeld", "holder": "w2", "message": "held"},
            what="POST /v1/leases/x",
        )
        again = pickle.loads(pickle.dumps(err))
        assert isinstance(again, fencegate.LeaseHeld)
        self.assertEqual((again.holder, again.status, str(again)), ("w2", 409, str(err)))


class NativeApi(unittest.TestCase):
    def setUp(self) -> None:
        self.fg = admin()
        self.key = unique("native") + "/r é port.csv"

    def test_put_get_head_delete_round_trip(self) -> None:
        put = self.fg.put(
            "default",
            self.key,
            b"id,total\n1,42\n",
            token=7,
            content_type="text/csv",
            metadata={"owner": "etl"},
        )
        self.assertEqual((put.token, put.size), (7, 14))
        self.assertEqual(put.scope, f"object:default/{self.key}")
        got = self.fg.get("default", self.key)
        self.assertEqual(got.body, b"id,total\n1,42\n")
        self.assertEqual(
            (got.token, got.content_type, got.metadata), (7, "text/csv", {"owner": "etl"})
        )
        self.assertEqual(got.etag, put.etag)
        head = self.fg.head("default", self.key)
        self.assertEqual((head.size, head.token, head.etag), (14, 7, put.etag))
        gone = self.fg.delete("default", self.key, token=7)
        self.assertTrue(gone.existed)
        with self.assertRaises(fencegate.NoSuchKey):
            self.fg.get("default", self.key)
        # HEAD answers without a body; the exact code is still found.
        with self.assertRaises(fencegate.NoSuchKey) as caught:
            self.fg.head("default", self.key)
        self.assertEqual(caught.exception.status, 404)
        with self.assertRaises(fencegate.NoSuchBucket):
            self.fg.head("no-such-bucket", self.key)
        fence = self.fg.fence("default", self.key)
        self.assertEqual((fence.highest, fence.tombstone), (7, True))

    def test_a_file_body_is_signed_and_sent_whole(self) -> None:
        data = os.urandom(300_000)
        with tempfile.TemporaryFile() as f:
            f.write(b"not sent" + data)
            f.seek(len(b"not sent"))
            self.fg.put("default", self.key, f, token=1)
        self.assertEqual(self.fg.get("default", self.key).body, data)

    def test_a_stale_token_is_refused_with_the_highest(self) -> None:
        self.fg.put("default", self.key, b"by 34", token=34)
        with self.assertRaises(fencegate.StaleFencingToken) as caught:
            self.fg.put("default", self.key, b"by 33", token=33)
        err = caught.exception
        self.assertEqual(
            (err.status, err.code, err.highest, err.token), (409, "StaleFencingToken", 34, 33)
        )
        self.assertEqual(err.scope, f"object:default/{self.key}")
        self.assertIsInstance(err, fencegate.FencingError)
        self.assertEqual(self.fg.get("default", self.key).body, b"by 34")

    def test_a_delete_and_a_fence_advance_are_fenced_too(self) -> None:
        self.fg.advance_fence("default", self.key, 50)
        with self.assertRaises(fencegate.StaleFencingToken) as caught:
            self.fg.delete("default", self.key, token=49)
        self.assertEqual(caught.exception.highest, 50)
        absent = self.fg.delete("default", self.key, token=50)
        self.assertFalse(absent.existed)
        with self.assertRaises(fencegate.StaleFencingToken):
            self.fg.put("default", self.key, b"after the tombstone", token=49)

    def test_a_write_without_a_token_says_how_to_send_one(self) -> None:
        with self.assertRaises(fencegate.FencingTokenRequired) as caught:
            self.fg.put("default", self.key, b"no token")
        self.assertEqual(caught.exception.status, 428)
        self.assertIn("Pass token=", str(caught.exception))

    def test_a_token_far_ahead_is_refused(self) -> None:
        with self.assertRaises(fencegate.TokenJumpTooLarge) as caught:
            self.fg.put("capped", self.key, b"x", token=5000)
        self.assertEqual(caught.exception.status, 400)
        self.fg.put("capped", self.key, b"x", token=900)

    def test_an_idempotent_retry_is_replayed(self) -> None:
        first = self.fg.put("default", self.key, b"once", token=3, idempotency_key=unique("run"))
        self.assertFalse(first.replayed)
        key = unique("retry")
        self.fg.put("default", self.key, b"twice", token=3, idempotency_key=key)
        again = self.fg.put("default", self.key, b"twice", token=3, idempotency_key=key)
        self.assertTrue(again.replayed)
        with self.assertRaises(fencegate.IdempotencyKeyMismatch):
            self.fg.put("default", self.key, b"other bytes", token=3, idempotency_key=key)

    def test_credentials_are_checked(self) -> None:
        with self.assertRaises(fencegate.MissingCredentials) as caught:
            fencegate.Client(URL).put("default", self.key, b"x", token=1)
        self.assertEqual(caught.exception.status, 401)
        self.assertIn("access_key_id=", str(caught.exception))
        with self.assertRaises(fencegate.AccessDenied) as denied:
            fencegate.Client(URL, *READER).put("default", self.key, b"x", token=1)
        self.assertEqual((denied.exception.status, denied.exception.code), (403, "AccessDenied"))
        with self.assertRaises(fencegate.SignatureDoesNotMatch):
            fencegate.Client(URL, ADMIN[0], "not-the-secret-0123456789").get("default", self.key)
        with self.assertRaises(fencegate.InvalidAccessKeyId):
            fencegate.Client(URL, "no-such-key", ADMIN[1]).get("default", self.key)
        # The reader may read what the admin wrote.
        self.fg.put("default", self.key, b"readable", token=1)
        self.assertEqual(fencegate.Client(URL, *READER).get("default", self.key).body, b"readable")

    def test_dot_segments_are_refused_before_sending(self) -> None:
        # requests removes them (RFC 3986), so a/../victim would be sent as victim.
        session = CountingSession()
        fg = admin(session=session)
        prefix = unique("dots")
        victim = f"{prefix}/victim"
        keys = [f"{prefix}/a/../victim", f"./{prefix}", f"../other/{prefix}", f"{prefix}/x/."]
        calls: List[Tuple[str, Callable[[str, str], Any]]] = [
            ("put", lambda b, k: fg.put(b, k, b"meant for another key", token=1)),
            ("get", fg.get),
            ("head", fg.head),
            ("delete", lambda b, k: fg.delete(b, k, token=1)),
            ("fence", fg.fence),
            ("advance_fence", lambda b, k: fg.advance_fence(b, k, 1)),
            ("lease", lambda b, k: fg.lease(unique("py-dots"), ttl=5, bucket=b, key=k)),
        ]
        cases = [("default", k) for k in keys] + [(".", "x"), ("..", f"default/{prefix}")]
        for what, call in calls:
            for bucket, key in cases:
                with self.subTest(call=what, bucket=bucket, key=key):
                    with self.assertRaises(fencegate.InvalidKey) as caught:
                        call(bucket, key)
                    err = caught.exception
                    self.assertEqual((err.status, err.code), (400, "InvalidKey"))
                    self.assertIn("rewrite", err.message)
        for name in (".", ".."):
            with self.assertRaises(fencegate.InvalidLeaseName):
                fg.lease(name, ttl=5)
            with self.assertRaises(fencegate.InvalidLeaseName):
                fg.lease_info(name)
        with fg.lease(unique("py-dots"), ttl=30, bucket="default", key=victim) as lease:
            sent_before = list(session.sent)
            with self.assertRaises(fencegate.InvalidKey):
                lease.put("default", keys[0], b"through the lease")
            self.assertEqual(session.sent, sent_before)
        self.assertEqual([m for m, u in session.sent if "/v1/objects/" in u], [], session.sent)
        with self.assertRaises(fencegate.NoSuchKey):
            self.fg.get("default", victim)

    def test_a_non_ascii_metadata_value_is_refused_before_sending(self) -> None:
        session = CountingSession()
        fg = admin(session=session)
        for value in ("é", "tab\there", "日本"):
            with self.subTest(value=value):
                with self.assertRaises(fencegate.InvalidArgument) as caught:
                    fg.put("default", self.key, b"x", token=1, metadata={"k": value})
                self.assertEqual(caught.exception.status, 400)
                self.assertIn("printable ASCII", caught.exception.message)
                self.assertIn("RFC 2047", caught.exception.message)
        self.assertEqual(session.sent, [])
        # What the message suggests is stored and read back as written.
        word = "=?UTF-8?B?w6k=?="
        fg.put("default", self.key, b"x", token=1, metadata={"k": word, "q": "%C3%A9"})
        self.assertEqual(fg.get("default", self.key).metadata, {"k": word, "q": "%C3%A9"})

    def test_the_key_comes_from_the_environment_when_not_given(self) -> None:
        saved = {
            k: os.environ.get(k) for k in ("FENCEGATE_ACCESS_KEY_ID", "FENCEGATE_SECRET_ACCESS_KEY")
        }
        os.environ["FENCEGATE_ACCESS_KEY_ID"], os.environ["FENCEGATE_SECRET_ACCESS_KEY"] = ADMIN
        try:
            fg = fencegate.Client(URL)
            self.assertEqual(fg.access_key_id, ADMIN[0])
            self.assertEqual(fg.put("default", self.key, b"signed", token=2).token, 2)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class Leases(unittest.TestCase):
    def setUp(self) -> None:
        self.fg = admin()
        self.name = unique("py-lease")
        self.key = unique("leased") + ".csv"

    def test_acquire_renew_release(self) -> None:
        lease = self.fg.lease(self.name, ttl=3, holder="worker-a", bucket="default", key=self.key)
        try:
            self.assertEqual(lease.scope, f"object:default/{self.key}")
            self.assertEqual(lease.bound, ("default", self.key))
            granted = self.fg.lease_info(self.name)
            self.assertEqual((granted.holder, granted.token), ("worker-a", lease.token))
            # The grant fenced the key at the lease's token before any write.
            self.assertEqual(self.fg.fence("default", self.key).highest, lease.token)
            # Past the TTL and more: only the background renewals keep it.
            time.sleep(4.5)
            self.assertFalse(lease.lost.is_set(), lease.lost_reason)
            renewed = self.fg.lease_info(self.name)
            self.assertEqual(renewed.token, lease.token)
            self.assertGreater(renewed.expires_at_ms, granted.expires_at_ms + 3000)
            self.assertEqual(lease.put("default", self.key, b"rows").token, lease.token)
        finally:
            self.assertTrue(lease.release())
        with self.assertRaises(fencegate.NoSuchLease):
            self.fg.lease_info(self.name)
        self.assertFalse(lease.release(), "a second release sends nothing and says so")
        with self.assertRaises(fencegate.LeaseLost) as caught:
            lease.put("default", self.key, b"after the release")
        self.assertIsNone(caught.exception.status)
        self.assertFalse(lease.lost.is_set(), "a release is not a loss")

    def test_the_context_manager_releases_even_when_the_block_raises(self) -> None:
        with self.assertRaises(KeyError):
            with self.fg.lease(self.name, ttl=30) as lease:
                raise KeyError("the work failed")
        self.assertTrue(lease.released)
        with self.assertRaises(fencegate.NoSuchLease):
            self.fg.lease_info(self.name)
        # Released, not expired: the next holder need not wait out the 30 s.
        with self.fg.lease(self.name, ttl=30) as next_holder:
            self.assertGreater(next_holder.token, lease.token)

    def test_a_held_lease_is_refused_or_waited_for(self) -> None:
        first = self.fg.lease(self.name, ttl=30, holder="worker-a")
        try:
            with self.assertRaises(fencegate.LeaseHeld) as caught:
                self.fg.lease(self.name, ttl=30, holder="worker-b")
            self.assertEqual(caught.exception.holder, "worker-a")
            self.assertIsNotNone(caught.exception.retry_after)
            self.assertIn("wait=", str(caught.exception))
            threading.Timer(0.5, first.release).start()
            started = time.monotonic()
            with self.fg.lease(self.name, ttl=30, holder="worker-b", wait=20) as second:
                self.assertLess(time.monotonic() - started, 15)
                self.assertGreater(second.token, first.token)
                self.assertEqual(self.fg.lease_info(self.name).holder, "worker-b")
        finally:
            first.release()

    def test_a_failed_renewal_loses_the_lease_and_stops_its_writes(self) -> None:
        session = CountingSession()
        fg = admin(session=session)
        calls = []
        lease = fg.lease(self.name, ttl=1.5, bucket="default", key=self.key, on_lost=calls.append)
        with lease:
            lease.put("default", self.key, b"before")
            # Someone with the secret ends the lease behind the holder's back: the next
            # renewal is refused.
            self.fg._release_lease(lease.name, lease.holder, lease.token, lease.secret)
            self.assertTrue(lease.lost.wait(timeout=5), "the failed renewal was not noticed")
            self.assertIn("NoSuchLease", lease.lost_reason or "")
            self.assertEqual(calls, [lease], "on_lost runs once, with the lease")
            before = len(session.writes_to(self.key))
            with self.assertRaises(fencegate.LeaseLost) as caught:
                lease.put("default", self.key, b"after")
            self.assertIn("NoSuchLease", str(caught.exception))
            self.assertEqual(len(session.writes_to(self.key)), before, "the write was sent")
        self.assertEqual(self.fg.get("default", self.key).body, b"before")
        self.assertEqual(calls, [lease])

    def test_an_unanswered_renewal_loses_the_lease(self) -> None:
        session = CountingSession()
        lease = admin(session=session).lease(self.name, ttl=1.5)
        with lease:
            session.unreachable = True
            self.assertTrue(lease.lost.wait(timeout=5))
            self.assertIn("ConnectionError", lease.lost_reason or "")
            session.unreachable = False

    def test_a_stale_write_through_a_lease_loses_it(self) -> None:
        with self.fg.lease(self.name, ttl=30, bucket="default", key=self.key) as lease:
            self.fg.advance_fence("default", self.key, lease.token + 1)
            with self.assertRaises(fencegate.StaleFencingToken) as caught:
                lease.put("default", self.key, b"stale")
            self.assertEqual(caught.exception.highest, lease.token + 1)
            self.assertTrue(lease.lost.is_set())
            with self.assertRaises(fencegate.LeaseLost):
                lease.delete("default", self.key)

    def test_a_host_resumed_past_the_ttl_finds_the_lease_lost(self) -> None:
        import fencegate._clock

        lease = self.fg.lease(self.name, ttl=30, bucket="default", key=self.key)
        read = fencegate._clock._read
        try:
            # A suspend of a minute, as CLOCK_BOOTTIME counts it; the renewal thread, asleep
            # on CLOCK_MONOTONIC (which did not count it), still notices within a second.
            fencegate._clock._read = lambda: read() + 60
            self.assertTrue(lease.lost.wait(timeout=2.5), "the lease outlived the suspend")
            self.assertIn("TTL", lease.lost_reason or "")
            with self.assertRaises(fencegate.LeaseLost):
                lease.put("default", self.key, b"after the suspend")
        finally:
            fencegate._clock._read = read
            lease.release()

    def test_bad_arguments_are_refused_with_the_servers_reason(self) -> None:
        with self.assertRaises(fencegate.InvalidLeaseName):
            self.fg.lease("bad name", ttl=1)
        with self.assertRaises(fencegate.InvalidArgument) as caught:
            self.fg.lease(self.name, ttl=1, s3_credentials=True)
        self.assertIn("bucket", caught.exception.message)
        with self.assertRaises(ValueError):
            self.fg.lease(self.name, ttl=0)


class LeaseClock(unittest.TestCase):
    """When a lease's TTL starts, and the clock it runs on: no server."""

    def test_a_grant_counts_from_the_request_plus_what_the_server_waited(self) -> None:
        from fencegate.client import _grant_time

        sent, arrived = 100.0, 103.0
        self.assertEqual(_grant_time(sent, arrived, {"waited_ms": 0}), 100.0)
        self.assertEqual(_grant_time(sent, arrived, {"waited_ms": 1500}), 101.5)
        # Never later than the answer's arrival, whatever the field says.
        self.assertEqual(_grant_time(sent, arrived, {"waited_ms": 9000}), arrived)
        # A fencegate that does not say: from the request's departure, never its arrival.
        for grant in (
            {},
            {"waited_ms": "1500"},
            {"waited_ms": -1},
            {"waited_ms": True},
            {"waited_ms": float("nan")},
        ):
            with self.subTest(grant=grant):
                self.assertEqual(_grant_time(sent, arrived, grant), sent)

    def test_the_lease_clock_counts_suspended_time(self) -> None:
        import fencegate._clock

        boottime = getattr(time, "CLOCK_BOOTTIME", None)
        if boottime is None:
            self.assertIs(fencegate._clock._read, time.monotonic)
        else:
            self.assertAlmostEqual(fencegate._clock.now(), time.clock_gettime(boottime), delta=0.05)


class Zombie(unittest.TestCase):
    """The classic failure: A pauses past its TTL, B takes the lease and writes, A wakes up."""

    def test_a_paused_holder_is_stopped_locally_and_by_the_fence(self) -> None:
        name, key = unique("py-zombie"), unique("zombie") + ".csv"
        a_session = CountingSession()
        fg_a, fg_b = admin(session=a_session), admin()
        lost_calls: List[fencegate.Lease] = []
        a = fg_a.lease(
            name, ttl=1, holder="worker-a", bucket="default", key=key, on_lost=lost_calls.append
        )
        try:
            a.put("default", key, b"A: first draft")
            with a.renewals_paused():
                self.assertTrue(a.lost.wait(timeout=5), "A's TTL passed and A did not notice")
            self.assertEqual(lost_calls, [a])
            self.assertIn("TTL", a.lost_reason or "")

            # A's next write raises without being sent: the server still has A's draft and
            # A's session sent no write after the one that made it.
            with self.assertRaises(fencegate.LeaseLost):
                a.put("default", key, b"A: late report")
            self.assertEqual(len(a_session.writes_to(key)), 1)
            draft = fg_b.get("default", key)
            self.assertEqual((draft.body, draft.token), (b"A: first draft", a.token))

            # B takes the lease (once the server has seen it expire) and writes.
            with fg_b.lease(
                name, ttl=30, holder="worker-b", bucket="default", key=key, wait=10
            ) as b:
                self.assertGreater(b.token, a.token)
                b.put("default", key, b"B: complete report")
                # The fence refuses A's token whatever A's clock says: here, sent without
                # the lease's local check.
                with self.assertRaises(fencegate.StaleFencingToken) as caught:
                    fg_a.put("default", key, b"A: late report", token=a.token)
                self.assertEqual(caught.exception.highest, b.token)
                final = fg_b.get("default", key)
                self.assertEqual((final.body, final.token), (b"B: complete report", b.token))
        finally:
            a.release()


class MisbehavingNetwork(unittest.TestCase):
    """Leases and reads through a `Proxy` that delays, trickles, stalls or resets answers."""

    def setUp(self) -> None:
        self.fg = admin()
        self.name = unique("py-net")
        self.key = unique("net") + ".csv"

    def test_a_delayed_grant_counts_its_ttl_from_the_request(self) -> None:
        ttl = 1.0
        # The answer to the acquire comes after the TTL: the server may have given the lease
        # to someone else by then. With waited_ms (a fencegate that answers it) and without.
        for waited_ms in (0, None):
            with self.subTest(waited_ms=waited_ms):

                def intercept(request: ProxyRequest) -> bool:
                    if request.command == "POST" and request.path.startswith("/v1/leases/"):
                        status, headers, data = request.forward()
                        grant = json.loads(data)
                        if waited_ms is not None:
                            grant["waited_ms"] = waited_ms
                        time.sleep(ttl + 0.5)
                        request.reply_json(status, grant)
                        return True
                    if is_renewal(request):
                        request.stall()
                        return True
                    return False

                name = unique("py-delayed")
                with Proxy(intercept) as proxy:
                    fg = fencegate.Client(proxy.url, *ADMIN)
                    lease = fg.lease(name, ttl=ttl, bucket="default", key=self.key, wait=5)
                    with self.assertRaises(fencegate.LeaseLost):
                        lease.put("default", self.key, b"after the lease ran out")
                    self.assertEqual(proxy.requests("PUT", "/v1/objects/"), [])
                    self.assertTrue(lease.lost.is_set())
                    lease.release()

    def test_a_grant_that_waited_counts_its_ttl_from_when_the_server_granted_it(self) -> None:
        ttl = 1.0

        def intercept(request: ProxyRequest) -> bool:
            if request.command == "POST" and request.path.startswith("/v1/leases/"):
                status, headers, data = request.forward()
                time.sleep(1.2)
                # As if the server waited 500 ms for the lease before granting it.
                request.reply_json(status, {**json.loads(data), "waited_ms": 500})
                return True
            if is_renewal(request):
                request.stall()
                return True
            return False

        with Proxy(intercept) as proxy:
            started = time.monotonic()
            lease = fencegate.Client(proxy.url, *ADMIN).lease(self.name, ttl=ttl, wait=5)
            # Held on arrival: counted from the request alone, it would have run out already.
            lease.check()
            self.assertTrue(lease.lost.wait(timeout=5))
            lost_after = time.monotonic() - started
            # From the request plus the wait: not from the request alone, nor the arrival.
            self.assertGreaterEqual(lost_after, 1.5)
            self.assertLess(lost_after, 1.9)
            lease.release()

    def test_a_trickling_renewal_loses_the_lease_at_its_deadline(self) -> None:
        def intercept(request: ProxyRequest) -> bool:
            if is_renewal(request):
                # Each byte well within any read timeout: only a bound on the whole catches it.
                request.trickle(b"HTTP/1.1 200 OK\r\n" * 100, every=0.1)
                return True
            return False

        lost_at: List[float] = []
        with Proxy(intercept) as proxy:
            started = time.monotonic()
            lease = fencegate.Client(proxy.url, *ADMIN).lease(
                self.name, ttl=1.5, on_lost=lambda _: lost_at.append(time.monotonic())
            )
            self.assertTrue(lease.lost.wait(timeout=4), "the lease outlived its TTL")
            self.assertEqual(len(lost_at), 1)
            self.assertLess(lost_at[0] - started, 1.5 + 0.3)
            self.assertIn("TTL", lease.lost_reason or "")
            self.assertEqual(len(proxy.requests("PUT", "/v1/leases/")), 1)
            lease.release()

    def test_release_does_not_wait_for_a_hung_renewal(self) -> None:
        renewing, released, answered = threading.Event(), threading.Event(), threading.Event()

        def intercept(request: ProxyRequest) -> bool:
            if is_renewal(request):
                renewing.set()
                # Held until the release went through, then answered as a success: too late.
                released.wait(30)
                request.reply_json(200, {"token": 0, "expires_at_ms": 2**62})
                answered.set()
                return True
            if request.command == "DELETE" and request.path.startswith("/v1/leases/"):
                request.reply(*request.forward())
                released.set()
                return True
            return False

        with Proxy(intercept) as proxy:
            lease = fencegate.Client(proxy.url, *ADMIN).lease(self.name, ttl=6)
            expires = lease.expires_at_ms
            self.assertTrue(renewing.wait(timeout=5))
            started = time.monotonic()
            with lease:
                pass  # the context manager's exit releases
            self.assertLess(time.monotonic() - started, 1.5, "release waited for the renewal")
            self.assertTrue(lease.released)
            with self.assertRaises(fencegate.NoSuchLease):
                self.fg.lease_info(self.name)
            self.assertTrue(answered.wait(timeout=5))
            time.sleep(2.5)  # past the next renewal it would have made
            self.assertEqual(len(proxy.requests("PUT", "/v1/leases/")), 1)
            self.assertEqual(lease.expires_at_ms, expires, "the late answer was taken")
            self.assertFalse(lease.lost.is_set())
            with self.assertRaises(fencegate.LeaseLost) as caught:
                lease.check()
            self.assertIn("released", str(caught.exception))

    def test_a_transient_renewal_failure_is_retried_until_the_deadline(self) -> None:
        def reset(request: ProxyRequest) -> None:
            request.reset()

        def unavailable(request: ProxyRequest) -> None:
            # Retry-After past the TTL: retried anyway while there is time.
            request.reply_json(
                503, {"error": "BackendUnavailable", "message": "(test)"}, **{"Retry-After": "30"}
            )

        def server_error(request: ProxyRequest) -> None:
            request.reply(502, {"Content-Type": "text/html"}, b"<h1>Bad Gateway</h1>")

        for fail in (reset, unavailable, server_error):
            with self.subTest(fail=fail.__name__):
                failed: List[int] = []

                def intercept(request: ProxyRequest) -> bool:
                    if is_renewal(request) and len(failed) < 2:
                        failed.append(1)
                        fail(request)
                        return True
                    return False

                name = unique("py-transient")
                with Proxy(intercept) as proxy:
                    lease = fencegate.Client(proxy.url, *ADMIN).lease(name, ttl=1.5)
                    time.sleep(2.5)
                    self.assertFalse(lease.lost.is_set(), lease.lost_reason)
                    self.assertGreaterEqual(len(proxy.requests("PUT", "/v1/leases/")), 3)
                    self.assertEqual(self.fg.lease_info(name).token, lease.token)
                    self.assertTrue(lease.release())

    def test_head_does_not_download_the_object_a_refused_head_asks_about(self) -> None:
        size = 256 * 2**20
        written: List[int] = [0]
        done = threading.Event()

        def intercept(request: ProxyRequest) -> bool:
            # A fake fencegate: HEAD refused without a body, the GET that follows answered
            # with the whole object (it appeared in between).
            if request.command == "HEAD":
                request.reply(404, {}, b"")
            else:
                request.send_response(200)
                request.send_header("Content-Length", str(size))
                request.end_headers()
                chunk = b"x" * 2**20
                try:
                    for _ in range(size // len(chunk)):
                        request.wfile.write(chunk)
                        written[0] += len(chunk)
                except OSError:
                    request.close_connection = True
                done.set()
            return True

        with Proxy(intercept) as proxy:
            with self.assertRaises(fencegate.FencegateError) as caught:
                fencegate.Client(proxy.url).head("default", self.key)
            self.assertEqual(caught.exception.status, 404)
            self.assertTrue(done.wait(timeout=30))
        self.assertLess(written[0], size // 4, "the GET's body was downloaded")


class Redirects(unittest.TestCase):
    """A 3xx is an error naming its Location, and nothing follows it: a `Proxy` passes the
    acquire to the real fencegate and answers every other request with a 307 to a second
    listener, which accepts whatever comes (a 200, as the host in the audit did) and records
    it. No secret shows in the errors or in any repr."""

    def test_a_redirect_is_an_error_and_nothing_follows_it(self) -> None:
        def take_anything(request: ProxyRequest) -> bool:
            request.reply_json(200, {"token": "999", "etag": "elsewhere"})
            return True

        def redirect(request: ProxyRequest) -> bool:
            if request.command == "POST" and request.path.startswith("/v1/leases/"):
                return False
            request.reply(307, {"Location": elsewhere.url + request.path}, b"")
            return True

        name, key = unique("py-redirect"), unique("redirect") + ".csv"
        with Proxy(take_anything) as elsewhere, Proxy(redirect) as proxy:
            fg = fencegate.Client(proxy.url, *ADMIN)
            lease = fg.lease(name, ttl=30, bucket="default", key=key, s3_credentials=True)
            try:
                object_path = f"/v1/objects/default/{key}"
                calls: List[Tuple[str, Callable[[], Any]]] = [
                    (object_path, lambda: lease.put("default", key, b"object bytes")),
                    (object_path, lambda: fg.put("default", key, b"bytes", lease.token)),
                    (object_path, lambda: fg.get("default", key)),
                    (object_path, lambda: fg.head("default", key)),
                    (object_path, lambda: lease.delete("default", key)),
                    (f"/v1/fences/default/{key}", lambda: fg.fence("default", key)),
                    (f"/v1/leases/{name}", lambda: fg.lease_info(name)),
                    # The release carries the lease's secret in its body: the call the audit saw
                    # re-sent to the other host.
                    (f"/v1/leases/{name}", lease.release),
                ]
                secrets = [lease.secret, ADMIN[1], lease.s3_credentials.secret_access_key]
                for path, call in calls:
                    with self.subTest(path=path, call=call):
                        with self.assertRaises(fencegate.Redirected) as caught:
                            call()
                        err = caught.exception
                        self.assertEqual((err.status, err.location), (307, elsewhere.url + path))
                        text = f"{err} {err!r}"
                        self.assertIn(elsewhere.url + path, text)
                        for secret in secrets:
                            self.assertNotIn(secret, text)
                self.assertEqual(elsewhere.seen, [], "a request followed the redirect")
                for shown in (repr(lease), repr(lease.s3_credentials), repr(fg), repr(fg._signer)):
                    for secret in secrets:
                        self.assertNotIn(secret, shown)
            finally:
                admin()._release_lease(name, lease.holder, lease.token, lease.secret)

    def test_a_session_of_the_callers_does_not_follow_either(self) -> None:
        # The redirect points at fencegate itself: followed, the request would be answered.
        session = requests.Session()
        with Proxy(lambda r: (r.reply(307, {"Location": URL + r.path}, b""), True)[1]) as proxy:
            fg = fencegate.Client(proxy.url, *ADMIN, session=session)
            with self.assertRaises(fencegate.Redirected) as caught:
                fg.advance_fence("default", unique("redirect"), 5)
            self.assertTrue(caught.exception.location.startswith(URL + "/v1/fences/default/"))
            self.assertNotIn("Redirected", fencegate.ERRORS_BY_CODE)


class Boto3(unittest.TestCase):
    def setUp(self) -> None:
        self.fg = admin()
        self.key = unique("boto3") + ".csv"

    def test_a_stale_boto3_write_raises_stale_fencing_token_with_the_highest(self) -> None:
        s3 = fencegate.boto3.with_token(self.fg.s3_client(), 42)
        s3.put_object(Bucket="default", Key=self.key, Body=b"written with 42")
        self.assertEqual(self.fg.get("default", self.key).token, 42)
        fencegate.boto3.with_token(s3, 41)
        from botocore.exceptions import ClientError

        with self.assertRaises(fencegate.StaleFencingToken) as caught:
            s3.put_object(Bucket="default", Key=self.key, Body=b"late")
        err = caught.exception
        self.assertEqual((err.highest, err.status), (42, 409))
        # The S3 error has no token or scope fields: they are read from its message.
        self.assertEqual((err.token, err.scope), (41, f"object:default/{self.key}"))
        self.assertTrue(err.request_id, "S3 answers carry a request id")
        # Still the ClientError botocore raises, for code written against it.
        assert isinstance(err, ClientError), type(err).__mro__
        self.assertEqual(err.response["Error"]["Code"], "StaleFencingToken")
        self.assertEqual(self.fg.get("default", self.key).body, b"written with 42")
        # Deletes carry the token too.
        with self.assertRaises(fencegate.StaleFencingToken):
            s3.delete_object(Bucket="default", Key=self.key)
        fencegate.boto3.with_token(s3, 43)
        s3.delete_object(Bucket="default", Key=self.key)
        self.assertEqual(self.fg.fence("default", self.key).highest, 43)

    def test_botocore_sends_dot_segments_as_written(self) -> None:
        # Unlike requests, botocore does not remove them: fencegate refuses the key itself
        # (InvalidArgument, S3's code for it), so no hook of this package needs to.
        s3 = fencegate.boto3.with_token(self.fg.s3_client(), 1)
        urls: List[str] = []
        s3.meta.events.register("before-send.s3", lambda request, **_: urls.append(request.url))
        prefix = unique("boto3-dots")
        for key in (f"{prefix}/a/../victim", f"{prefix}/./x", f"{prefix}/x/."):
            with self.subTest(key=key):
                with self.assertRaises(fencegate.InvalidArgument):
                    s3.put_object(Bucket="default", Key=key, Body=b"x")
                self.assertTrue(urls[-1].endswith("/default/" + key), urls[-1])
        with self.assertRaises(fencegate.NoSuchKey):
            self.fg.get("default", f"{prefix}/victim")

    def test_typed_errors_keep_botocores_modelled_class(self) -> None:
        s3 = self.fg.s3_client()
        with self.assertRaises(s3.exceptions.NoSuchKey) as caught:
            s3.get_object(Bucket="default", Key=self.key)
        self.assertIsInstance(caught.exception, fencegate.NoSuchKey)

    def test_translate_types_a_plain_clients_error(self) -> None:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import ClientError

        plain = boto3.client(
            "s3",
            endpoint_url=URL,
            region_name="us-east-1",
            aws_access_key_id=ADMIN[0],
            aws_secret_access_key=ADMIN[1],
            config=Config(s3={"addressing_style": "path"}),
        )
        with self.assertRaises(ClientError) as caught:
            plain.put_object(Bucket="default", Key=self.key, Body=b"no token")
        self.assertNotIsInstance(caught.exception, fencegate.FencegateError)
        typed = fencegate.boto3.translate(caught.exception)
        self.assertIsInstance(typed, fencegate.FencingTokenRequired)
        self.assertEqual(typed.status, 428)

    def test_lease_credentials_carry_the_token_and_stop_with_the_lease(self) -> None:
        name = unique("py-s3")
        a = self.fg.lease(name, ttl=1, bucket="default", key=self.key, s3_credentials=True)
        try:
            s3 = a.s3_client()
            sent: List[str] = []
            s3.meta.events.register(
                "before-send.s3", lambda request, **_: sent.append(request.method)
            )
            s3.put_object(Bucket="default", Key=self.key, Body=b"A via boto3")
            self.assertEqual(self.fg.get("default", self.key).token, a.token)
            with a.renewals_paused():
                self.assertTrue(a.lost.wait(timeout=5))
            count = len(sent)
            with self.assertRaises(fencegate.LeaseLost):
                s3.put_object(Bucket="default", Key=self.key, Body=b"A, late")
            self.assertEqual(len(sent), count, "the lost lease's boto3 write was sent")

            with self.fg.lease(name, ttl=30, bucket="default", key=self.key, wait=10) as b:
                # A's credentials still sign (the grace period), but the fence refuses them.
                creds = a.s3_credentials
                assert creds is not None
                import boto3

                raw = fencegate.boto3.typed_errors(
                    boto3.client(
                        "s3",
                        endpoint_url=URL,
                        region_name="us-east-1",
                        aws_access_key_id=creds.access_key_id,
                        aws_secret_access_key=creds.secret_access_key,
                    )
                )
                with self.assertRaises(fencegate.StaleFencingToken) as caught:
                    raw.put_object(Bucket="default", Key=self.key, Body=b"A, later")
                self.assertEqual(caught.exception.highest, b.token)
                # 403 to lease credentials: their libraries retry a 409 as a lost race.
                self.assertEqual(caught.exception.status, 403)
                self.assertEqual(self.fg.get("default", self.key).body, b"A via boto3")
        finally:
            a.release()

    def test_with_token_bound_to_a_lease_refuses_once_it_is_lost(self) -> None:
        name = unique("py-bound")
        with self.fg.lease(name, ttl=30, bucket="default", key=self.key) as lease:
            s3 = fencegate.boto3.with_token(self.fg.s3_client(), lease)
            s3.put_object(Bucket="default", Key=self.key, Body=b"with the lease's token")
            self.assertEqual(self.fg.get("default", self.key).token, lease.token)
            self.fg.advance_fence("default", self.key, lease.token + 5)
            with self.assertRaises(fencegate.StaleFencingToken):
                s3.put_object(Bucket="default", Key=self.key, Body=b"stale")
            self.assertTrue(lease.lost.is_set(), "a stale boto3 write loses the lease")
            with self.assertRaises(fencegate.LeaseLost):
                s3.put_object(Bucket="default", Key=self.key, Body=b"after the loss")
            # A plain token replaces the lease, and its check with it.
            fencegate.boto3.with_token(s3, lease.token + 5)
            s3.put_object(Bucket="default", Key=self.key, Body=b"with a token of its own")
            self.assertEqual(self.fg.get("default", self.key).token, lease.token + 5)


class Documentation(unittest.TestCase):
    """The README's Python blocks and the example run as written."""

    def run_python(self, *args: str) -> str:
        env = dict(
            os.environ,
            FENCEGATE_URL=URL,
            FENCEGATE_ACCESS_KEY_ID=ADMIN[0],
            FENCEGATE_SECRET_ACCESS_KEY=ADMIN[1],
            AWS_CONFIG_FILE=os.devnull,
            AWS_SHARED_CREDENTIALS_FILE=os.devnull,
            PYTHONPATH=os.pathsep.join(
                filter(None, [str(PACKAGE_DIR), os.environ.get("PYTHONPATH")])
            ),
        )
        done = subprocess.run(
            [sys.executable, *args], env=env, capture_output=True, text=True, timeout=120
        )
        self.assertEqual(done.returncode, 0, f"{args[-1]} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def test_the_readme_blocks_print_what_they_show(self) -> None:
        text = (PACKAGE_DIR / "README.md").read_text()
        blocks = re.findall(r"```python\n(.*?)```", text, re.S)
        self.assertGreaterEqual(len(blocks), 3)
        for block in blocks:
            # Names of their own, so that each block starts on fresh scopes as a reader's does
            # on a fresh fencegate, however often these tests ran against this one.
            suffix = uuid.uuid4().hex[:8]
            source = block.replace("nightly-report", f"nightly-report-{suffix}")
            for name in ("nightly.csv", "boto3.csv"):
                source = source.replace(name, f"{suffix}-{name}")
            out = " ".join(self.run_python("-c", source).split())
            shown = [
                row.strip()[1:].strip()
                for row in block.splitlines()
                if row.strip().startswith("#   ")
            ]
            self.assertTrue(shown, f"a README block shows no output:\n{block}")
            for line in shown:
                self.assertIn(" ".join(line.split()), out, f"block:\n{block}")

    def test_the_lease_example_runs(self) -> None:
        if not EXAMPLE.exists():
            self.skipTest(f"{EXAMPLE} is not here (the package was copied out of its checkout)")
        out = self.run_python(str(EXAMPLE))
        self.assertEqual(out.strip().splitlines()[-1], "OK")


if __name__ == "__main__":
    unittest.main()
