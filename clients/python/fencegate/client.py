"""The native API: objects and fences under ``/v1``, and the leases that mint tokens."""

from __future__ import annotations

import io
import json
import os
import socket
import uuid
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import requests

from . import _clock
from ._signing import Body, Signer
from .errors import (
    FencegateError,
    InvalidLeaseName,
    LeaseHeld,
    make_error,
    redirected,
)
from ._names import _check_metadata, _check_object_names, _key_path, _segment
from .lease import Lease
from .results import (
    DeleteResult,
    Fence,
    LeaseInfo,
    Object,
    ObjectInfo,
    S3Credentials,
    WriteResult,
    _bound,
    _fence,
    _object_info,
    _write_result,
)

__all__ = [
    "Client",
    "WriteResult",
    "DeleteResult",
    "ObjectInfo",
    "Object",
    "Fence",
    "LeaseInfo",
    "S3Credentials",
    "DEFAULT_REGION",
    "DEFAULT_URL",
]

#: Where fencegate listens unless told otherwise.
DEFAULT_URL = "http://127.0.0.1:8080"

#: The region fencegate's signatures name unless its ``[s3] region`` says otherwise.
DEFAULT_REGION = "us-east-1"

#: The longest one acquire may wait on the server (``wait_ms`` is at most 60000); longer waits
#: are made of several.
_MAX_SERVER_WAIT = 60.0


def _grant_time(sent: float, arrived: float, grant: Mapping[str, Any]) -> float:
    """When an acquire's grant happened at the earliest, on the lease clock: the TTL counts from
    there, so that this process believes the lease over no later than fencegate does.

    The server answers ``waited_ms``, how long it waited for the lease to be free before
    granting it; the grant came at least that long after the request left (`sent`), and no
    later than the answer `arrived`. A fencegate too old to answer it leaves only `sent`: after
    a wait, that may find the lease lost early (at once, if the wait outlasted the TTL), never
    late.
    """
    waited = grant.get("waited_ms")
    if isinstance(waited, bool) or not isinstance(waited, (int, float)) or not waited >= 0:
        return sent
    return min(sent + waited / 1000, arrived)


def _token_header(token: int) -> str:
    if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < 2**64:
        raise ValueError(f"a fencing token is an integer from 0 to 2**64 - 1; got {token!r}")
    return str(token)


def _default_holder() -> str:
    # Unique per lease object: a second acquire by the same holder name takes the lease over
    # with a new token, which two leases of one process must never do to each other by chance.
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Client:
    """A fencegate endpoint.

    With a key (`access_key_id` and `secret_access_key`) every request is signed with SigV4
    by botocore's signer, its ``Fencing-Token`` header included. Without one, requests are
    unsigned, which only a fencegate without ``[keys]`` (development mode) accepts.

    Args:
        url: fencegate's base URL; unset, ``$FENCEGATE_URL``, else ``http://127.0.0.1:8080``
            (the server's default).
        access_key_id: a key from the server's ``[keys]``; unset,
            ``$FENCEGATE_ACCESS_KEY_ID`` (with ``$FENCEGATE_SECRET_ACCESS_KEY``) if set.
        secret_access_key: its secret.
        region: the region signatures name (the server's ``[s3] region``).
        timeout: seconds to wait for each answer (a waiting acquire adds its wait).
        session: the `requests.Session` to send with (connection pooling, proxies, TLS
            settings); a new one by default.

    Every method raises a `fencegate.FencegateError` subclass for a refusal, `fencegate.Redirected`
    for a 3xx answer (never followed: fencegate does not redirect, and following would carry
    the request's body and secrets elsewhere), and `requests`' own exceptions when fencegate
    cannot be reached.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        access_key_id: Optional[str] = None,
        secret_access_key: Optional[str] = None,
        *,
        region: str = DEFAULT_REGION,
        timeout: float = 10.0,
        session: Optional[requests.Session] = None,
    ) -> None:
        if url is None:
            url = os.environ.get("FENCEGATE_URL") or DEFAULT_URL
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://; got {url!r}")
        if access_key_id is None and secret_access_key is None:
            access_key_id = os.environ.get("FENCEGATE_ACCESS_KEY_ID") or None
            secret_access_key = os.environ.get("FENCEGATE_SECRET_ACCESS_KEY") or None
            given = "FENCEGATE_ACCESS_KEY_ID and FENCEGATE_SECRET_ACCESS_KEY"
        else:
            given = "access_key_id and secret_access_key"
        if (access_key_id is None) != (secret_access_key is None):
            raise ValueError(
                f"give both {given}, or neither (unsigned requests, which only a fencegate "
                "without [keys] accepts)"
            )
        self.url = url.rstrip("/")
        self.region = region
        self.timeout = timeout
        self.session = session if session is not None else requests.Session()
        self._signer: Optional[Signer] = None
        self._secret_access_key = secret_access_key
        if access_key_id is not None and secret_access_key is not None:
            self._signer = Signer(access_key_id, secret_access_key, region)

    def __repr__(self) -> str:
        key = self._signer.access_key_id if self._signer else None
        return f"Client({self.url!r}, access_key_id={key!r}, region={self.region!r})"

    @property
    def access_key_id(self) -> Optional[str]:
        """The key requests are signed with, or None for unsigned requests."""
        return self._signer.access_key_id if self._signer else None

    def s3_client(self, session: Any = None, **kwargs: Any) -> Any:
        """A boto3 S3 client for this fencegate, signed with this client's key (unsigned,
        as development mode accepts, without one), its fencegate refusals typed
        (`fencegate.boto3.typed_errors`). Add a token with `fencegate.boto3.with_token`.
        Needs boto3 (``pip install 'fencegate[boto3]'``).

        Args:
            session: a `boto3.session.Session` to make the client from (the default session
                otherwise).
            **kwargs: passed to ``boto3.client``; a ``config`` is merged over path-style
                addressing.
        """
        from .boto3 import client_for

        return client_for(self, session=session, **kwargs)

    def _credentials(self) -> Optional[Tuple[str, str]]:
        if self._signer is None or self._secret_access_key is None:
            return None
        return (self._signer.access_key_id, self._secret_access_key)

    # ---- Objects -----------------------------------------------------------------------------

    def put(
        self,
        bucket: str,
        key: str,
        body: Body,
        token: Optional[int] = None,
        *,
        content_type: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        if_match: Optional[str] = None,
        if_none_match: bool = False,
        idempotency_key: Optional[str] = None,
        fencing_scope: Optional[str] = None,
    ) -> WriteResult:
        """Writes `body` to `bucket`/`key` with `token` (``Fencing-Token``).

        Args:
            body: bytes, text (sent as UTF-8), or a binary file (signing reads it once for
                its hash, so with a key it must be able to seek).
            token: the lock's fencing token; required by buckets with ``fencing = "required"``.
            content_type: the object's ``Content-Type``.
            metadata: user metadata, sent as ``x-amz-meta-NAME``.
            if_match: write only over this ETag.
            if_none_match: write only if the key has no object.
            idempotency_key: the same key on a retry makes the write take effect once.
            fencing_scope: the lock's name, in a bucket with ``scope = "header"``.

        Raises:
            StaleFencingToken: a newer token is recorded; stop, retrying does not help.
            FencingTokenRequired: the bucket needs a token.
            InvalidKey: `bucket` or `key` is (or has) a `.` or `..` path segment, which HTTP
                clients rewrite; nothing was sent (every call naming a key refuses these).
            InvalidArgument: a `metadata` value is not printable ASCII; nothing was sent.
        """
        path = self._object_path(bucket, key)
        _check_metadata(metadata or {})
        headers: Dict[str, str] = {}
        if content_type is not None:
            headers["Content-Type"] = content_type
        for name, value in (metadata or {}).items():
            headers[f"x-amz-meta-{name}"] = value
        if if_match is not None:
            headers["If-Match"] = if_match
        if if_none_match:
            headers["If-None-Match"] = "*"
        self._write_headers(headers, token, idempotency_key, fencing_scope)
        resp = self._send("PUT", path, headers=headers, body=body, token=token)
        return _write_result(resp, bucket, key)

    def get(self, bucket: str, key: str) -> Object:
        """Reads an object whole.

        Raises:
            NoSuchKey: there is no object (or it was deleted).
            NoSuchBucket: no such bucket is configured.
        """
        resp = self._send("GET", self._object_path(bucket, key))
        info = _object_info(resp, bucket, key)
        return Object(body=resp.content, **vars(info))

    def head(self, bucket: str, key: str) -> ObjectInfo:
        """An object's metadata, without its bytes.

        Raises:
            NoSuchKey: there is no object (or it was deleted).
        """
        path = self._object_path(bucket, key)
        resp = self._send("HEAD", path, check=False)
        if resp.ok:
            return _object_info(resp, bucket, key)
        raise self._head_refusal(resp, path)

    def delete(
        self,
        bucket: str,
        key: str,
        token: Optional[int] = None,
        *,
        idempotency_key: Optional[str] = None,
        fencing_scope: Optional[str] = None,
    ) -> DeleteResult:
        """Deletes `bucket`/`key` with `token`, leaving a tombstone that keeps the token.

        Deleting a key that has no object succeeds (``existed`` is False) and still records
        the token, so a late writer with an older one cannot create it afterwards.
        """
        path = self._object_path(bucket, key)
        headers: Dict[str, str] = {}
        self._write_headers(headers, token, idempotency_key, fencing_scope)
        resp = self._send("DELETE", path, headers=headers, token=token)
        written = _write_result(resp, bucket, key)
        return DeleteResult(existed=bool(resp.json().get("existed")), **vars(written))

    def fence(self, bucket: str, key: str) -> Fence:
        """The scope `key` maps to and the highest token recorded for it."""
        resp = self._send("GET", self._fence_path(bucket, key))
        return _fence(resp.json(), bucket, key)

    def advance_fence(
        self, bucket: str, key: str, token: int, *, fencing_scope: Optional[str] = None
    ) -> Fence:
        """Raises the scope's highest token to `token` without writing: a new lock holder
        fences out the old one before its first write."""
        path = self._fence_path(bucket, key)
        headers: Dict[str, str] = {}
        self._write_headers(headers, token, None, fencing_scope)
        resp = self._send("POST", path, headers=headers, token=token)
        return _fence(resp.json(), bucket, key)

    # ---- Leases ------------------------------------------------------------------------------

    def lease(
        self,
        name: str,
        ttl: float,
        *,
        holder: Optional[str] = None,
        bucket: Optional[str] = None,
        key: Optional[str] = None,
        wait: float = 0.0,
        s3_credentials: bool = False,
        on_lost: Optional[Callable[[Lease], None]] = None,
    ) -> Lease:
        """Acquires the lease `name` and renews it in the background every third of `ttl`.

        Use it as a context manager, which releases the lease on exit::

            with fg.lease("nightly-report", ttl=10, bucket="default", key="report.csv") as lease:
                lease.put("default", "report.csv", b"rows")

        Args:
            ttl: seconds the lease lasts without a renewal (at most 24 h).
            holder: who holds it, as ``GET /v1/leases/{name}`` shows; unique per call unless
                given (an acquire by the current holder's name takes the lease over).
            bucket, key: bind the lease to the scope `key` maps to: the grant advances that
                fence, so the previous holder is fenced out before this one writes.
            wait: seconds to wait for a held lease to be free (0: fail at once). The TTL counts
                from the grant, which the server's ``waited_ms`` places; a fencegate that does
                not answer it has the TTL counted from the request's departure, so a lease
                waited for longer than its TTL is lost at once.
            s3_credentials: also get S3 credentials bound to the lease (needs `bucket` and
                `key`), for `Lease.s3_client` and clients that cannot send a header.
            on_lost: called once, with the lease, when it is lost (from the renewal thread,
                or from the thread whose write found it lost).

        Raises:
            LeaseHeld: someone else holds it and `wait` ran out; `holder` says who.
            InvalidKey: `bucket` or `key` is (or has) a `.` or `..` segment; nothing was sent.
        """
        if ttl <= 0:
            raise ValueError(f"ttl is in seconds and must be above 0; got {ttl!r}")
        holder = holder if holder is not None else _default_holder()
        path = self._lease_path(name)
        if bucket is not None and key is not None:
            # Not part of the path, but the scope a write to them would name: refused alike.
            _check_object_names(bucket, key)
        body: Dict[str, Any] = {"holder": holder, "ttl_ms": max(1, round(ttl * 1000))}
        if bucket is not None or key is not None:
            body["bucket"], body["key"] = bucket, key
        if s3_credentials:
            body["s3_credentials"] = True
        deadline = _clock.now() + max(0.0, wait)
        while True:
            waiting = min(max(0.0, deadline - _clock.now()), _MAX_SERVER_WAIT)
            body["wait_ms"] = int(waiting * 1000)
            sent = _clock.now()
            try:
                resp = self._send("POST", path, json_body=body, timeout=self.timeout + waiting)
                break
            except LeaseHeld:
                if _clock.now() >= deadline:
                    raise
        arrived = _clock.now()
        grant = resp.json()
        creds = grant.get("s3_credentials")
        return Lease(
            self,
            name=name,
            holder=holder,
            ttl=grant.get("ttl_ms", body["ttl_ms"]) / 1000,
            token=int(grant["token"]),
            secret=grant["lease_secret"],
            scope=grant.get("scope"),
            bound=_bound(grant),
            s3_credentials=S3Credentials(**creds) if creds else None,
            expires_at_ms=int(grant["expires_at_ms"]),
            # Not the answer's arrival: a delayed answer may come after the server gave the
            # lease to someone else.
            granted_after=_grant_time(sent, arrived, grant),
            on_lost=on_lost,
        )

    def lease_info(self, name: str) -> LeaseInfo:
        """Who holds the lease `name`, with which token, until when.

        Raises:
            NoSuchLease: nobody holds it.
        """
        info = self._send("GET", self._lease_path(name)).json()
        return LeaseInfo(
            name=info["name"],
            holder=info["holder"],
            token=int(info["token"]),
            ttl=info["ttl_ms"] / 1000,
            expires_at_ms=int(info["expires_at_ms"]),
            scope=info.get("scope"),
            bound=_bound(info),
        )

    # ---- Plumbing (Lease uses these too) -----------------------------------------------------

    def _renew_lease(
        self, name: str, holder: str, token: int, secret: str, ttl: float, timeout: float
    ) -> Dict[str, Any]:
        body = {
            "holder": holder,
            "token": token,
            "secret": secret,
            "ttl_ms": max(1, round(ttl * 1000)),
        }
        answer: Dict[str, Any] = self._send(
            "PUT", self._lease_path(name), json_body=body, timeout=timeout
        ).json()
        return answer

    def _release_lease(self, name: str, holder: str, token: int, secret: str) -> None:
        body = {"holder": holder, "token": token, "secret": secret}
        self._send("DELETE", self._lease_path(name), json_body=body)

    def _lease_path(self, name: str) -> str:
        if name in (".", ".."):
            # Any other name is one segment whatever it holds: its slashes are encoded.
            message = (
                f"the lease name {name!r} is a `.` or `..` path segment, which HTTP clients "
                "rewrite before sending (fencegate refuses `..` in a lease name anyway); "
                "nothing was sent"
            )
            raise InvalidLeaseName(
                message, status=400, body={"error": InvalidLeaseName.code, "message": message}
            )
        return f"/v1/leases/{_segment(name)}"

    def _object_path(self, bucket: str, key: str) -> str:
        _check_object_names(bucket, key)
        return f"/v1/objects/{_segment(bucket)}/{_key_path(key)}"

    def _fence_path(self, bucket: str, key: str) -> str:
        _check_object_names(bucket, key)
        return f"/v1/fences/{_segment(bucket)}/{_key_path(key)}"

    @staticmethod
    def _write_headers(
        headers: Dict[str, str],
        token: Optional[int],
        idempotency_key: Optional[str],
        fencing_scope: Optional[str],
    ) -> None:
        if token is not None:
            headers["Fencing-Token"] = _token_header(token)
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        if fencing_scope is not None:
            headers["Fencing-Scope"] = fencing_scope

    def _send(
        self,
        method: str,
        path: str,
        *,
        headers: Optional[Dict[str, str]] = None,
        body: Optional[Body] = None,
        json_body: Optional[Mapping[str, Any]] = None,
        timeout: Optional[float] = None,
        token: Optional[int] = None,
        check: bool = True,
        stream: bool = False,
    ) -> requests.Response:
        """Signs (with a key) and sends a request; raises the refusal's exception unless
        `check` is False. With `stream`, the body is read only when asked for (or never, once
        the answer is closed)."""
        headers = dict(headers or {})
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        data = _prepare_body(body, signed=self._signer is not None)
        url = self.url + path
        if self._signer is not None:
            headers = self._signer.sign(method, url, headers, data)
        resp = self.session.request(
            method,
            url,
            headers=headers,
            data=data,
            timeout=timeout if timeout is not None else self.timeout,
            stream=stream,
            # Never followed, whatever the session says: requests re-sends the body and every
            # header but Authorization (a lease's secret, an object) to wherever a 307 points.
            allow_redirects=False,
        )
        if 300 <= resp.status_code < 400:
            resp.close()
            raise redirected(resp.status_code, resp.headers, what=f"{method} {path}")
        if check and not resp.ok:
            raise _refusal(resp, f"{method} {path}", token)
        return resp

    def _head_refusal(self, resp: requests.Response, path: str) -> FencegateError:
        # A HEAD answer has no body to carry the code: ask again with a GET, whose refusal
        # does (a read, so asking twice changes nothing). Streamed, so that a GET that succeeds
        # is closed before its body, the whole object, is downloaded; only a refusal's is read.
        again = self._send("GET", path, check=False, stream=True)
        try:
            if not again.ok:
                return _refusal(again, f"HEAD {path}", None)
        finally:
            again.close()
        fields = {
            "message": f"HEAD {path} was refused without a body, and a GET a moment "
            "later was not: the object changed in between; ask again"
        }
        return make_error(resp.status_code, resp.headers, fields, what=f"HEAD {path}")


def _prepare_body(body: Optional[Body], signed: bool) -> Optional[Any]:
    if body is None:
        return None
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, bytes):
        return body
    if not hasattr(body, "read"):
        raise TypeError(f"a body is bytes, str or a binary file; got {type(body).__name__}")
    if signed and not (hasattr(body, "seekable") and body.seekable()):
        raise TypeError(
            "a signed request's body is hashed before it is sent, so a file body must be able "
            "to seek; read it into bytes first, or open it from disk"
        )
    if isinstance(body, io.TextIOBase):
        raise TypeError("open the file in binary mode ('rb'): bodies are bytes")
    return body


def _refusal(resp: requests.Response, what: str, token: Optional[int]) -> FencegateError:
    try:
        fields = resp.json()
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        text = resp.text.strip()[:200]
        fields = {"message": text} if text else None
    return make_error(resp.status_code, resp.headers, fields, what=what, token=token)
