"""fencegate's refusals as exceptions: one class per error code, all under `FencegateError`.

fencegate answers every refusal with a status and a stable code (docs/reference.md holds the
table). The native API sends the code in a JSON body, the S3 gateway in S3's XML; both become
the same class here, so ``except fencegate.StaleFencingToken`` works for a write through
`fencegate.Client`, a `fencegate.Lease` and a boto3 client with `fencegate.boto3` hooks alike.

A code this package does not know becomes a plain `FencegateError` with that code.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    # The base, the groups and the local errors
    "FencegateError",
    "FencingError",
    "AuthError",
    "LeaseError",
    "TemporaryError",
    "LeaseLost",
    "Redirected",
    # One class per code fencegate answers with (tests check the list against ERRORS_BY_CODE)
    "AccessDenied",
    "AuthorizationHeaderMalformed",
    "BackendUnavailable",
    "BadDigest",
    "BypassDetected",
    "ClockSkewed",
    "CommitInProgress",
    "CommitUnresolved",
    "EntityTooLarge",
    "FenceStoreUnavailable",
    "FencingScopeMismatch",
    "FencingTokenRequired",
    "IdempotencyKeyInUse",
    "IdempotencyKeyMismatch",
    "IncompleteBody",
    "InternalError",
    "InvalidAccessKeyId",
    "InvalidArgument",
    "InvalidBucketState",
    "InvalidConfiguration",
    "InvalidDigest",
    "InvalidFencingScope",
    "InvalidFencingToken",
    "InvalidIdempotencyKey",
    "InvalidKey",
    "InvalidLeaseName",
    "InvalidPartNumber",
    "InvalidTtl",
    "LeaseHeld",
    "MethodNotAllowed",
    "MissingCredentials",
    "NoSuchBucket",
    "NoSuchKey",
    "NoSuchLease",
    "NoSuchRoute",
    "NoSuchUpload",
    "NotLeaseHolder",
    "OperationAborted",
    "OperationNotImplemented",
    "PreconditionFailed",
    "ReloadFailed",
    "RequestHeaderSectionTooLarge",
    "RequestTimeTooSkewed",
    "RequestTimeout",
    "RestartRequired",
    "ScopeChangeRefused",
    "SignatureDoesNotMatch",
    "SlowDown",
    "StaleFencingToken",
    "StoreKeptDifferentBytes",
    "StoreRefusedRequest",
    "TlsReloadFailed",
    "TlsRequired",
    "TokenJumpTooLarge",
    "TokenSpaceExhausted",
    "TooManyLeases",
    "TooManyUploads",
    "ERRORS_BY_CODE",
    "error_for",
    "make_error",
    "redirected",
]


class FencegateError(Exception):
    """A request fencegate refused (or, for `LeaseLost`, one this package refused to send).

    Attributes:
        code: the error code, e.g. ``"StaleFencingToken"``.
        status: the HTTP status, or None when nothing was sent.
        message: fencegate's own explanation.
        request_id: the answer's request id (the S3 gateway's ``x-amz-request-id``), or None.
        retry_after: seconds to wait before retrying, from ``Retry-After``, or None.
        body: the error's fields as fencegate sent them (the JSON body, or the S3 ``Error``).
        headers: the answer's headers, names in lower case.
    """

    code: str = ""
    #: What to do next, where fencegate's message cannot know (it names no Python call).
    hint: str = ""

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        status: Optional[int] = None,
        request_id: Optional[str] = None,
        retry_after: Optional[float] = None,
        body: Optional[Mapping[str, Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.code = code or type(self).code or "Unknown"
        self.status = status
        self.message = message
        self.request_id = request_id
        self.retry_after = retry_after
        self.body: Dict[str, Any] = dict(body or {})
        self.headers: Dict[str, str] = {k.lower(): v for k, v in (headers or {}).items()}
        # Not super().__init__: a class made by fencegate.boto3 also derives from botocore's
        # ClientError, whose __init__ takes other arguments.
        Exception.__init__(self, message)

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else "not sent"
        text = f"{self.code} ({where}): {self.message}"
        if self.hint:
            text += ("" if text.endswith((".", "?", "!")) else ".") + " " + self.hint
        if self.request_id:
            text += f" [request id {self.request_id}]"
        return text

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Keyword-only fields survive pickling (multiprocessing hands exceptions across).
        return (_rebuild, (type(self), self.message, self.__dict__.copy()))


def _rebuild(cls: Type[FencegateError], message: str, state: Dict[str, Any]) -> FencegateError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


def _int_or_none(value: Any) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# ---- Groups, to catch a family at once ------------------------------------------------------


class FencingError(FencegateError):
    """The write's token (or scope) was refused: nothing was written."""


class AuthError(FencegateError):
    """The request's credentials or signature were refused."""


class LeaseError(FencegateError):
    """A lease request (acquire, renew, release) was refused, or a lease is lost."""


class TemporaryError(FencegateError):
    """fencegate or its store cannot answer now; nothing was written. Retry the same request
    (with the same `Idempotency-Key`, if it had one) after `retry_after` seconds."""


# ---- Fencing ---------------------------------------------------------------------------------


_STALE_WORDS = re.compile(r"token (\d+) is below the highest token (\d+) recorded for scope (.+?); a newer lock holder exists")


class StaleFencingToken(FencingError):
    """The token is below the highest recorded for the scope: a newer lock holder exists.

    Stop this work: retrying does not help. `highest` is the newer holder's token, `token` the
    one refused (when known) and `scope` the scope it was checked against.
    """

    code = "StaleFencingToken"

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.highest: Optional[int] = _int_or_none(
            self.body.get("highest", self.body.get("Highest"))
        )
        if self.highest is None:
            self.highest = _int_or_none(self.headers.get("fencing-token-highest"))
        self.scope: Optional[str] = self.body.get("scope")
        self.token: Optional[int] = _int_or_none(self.body.get("token"))
        # The S3 gateway's XML error carries only Code and Message: the token and scope are in
        # the message's words, which the server keeps stable for this reason.
        said = _STALE_WORDS.search(str(message))
        if said:
            if self.token is None:
                self.token = int(said.group(1))
            if self.highest is None:
                self.highest = int(said.group(2))
            if self.scope is None:
                self.scope = said.group(3)


class FencingTokenRequired(FencingError):
    """The bucket requires a token on every write and delete, and none was sent."""

    code = "FencingTokenRequired"
    hint = "Pass token= to the write, or write through a Lease (lease.put, lease.delete)."


class InvalidFencingToken(FencingError):
    """The token is not a decimal unsigned 64-bit integer (or disagrees with lease-bound
    credentials)."""

    code = "InvalidFencingToken"


class TokenJumpTooLarge(FencingError):
    """The token is more than the bucket's `max_token_jump` above the scope's highest."""

    code = "TokenJumpTooLarge"


class TokenSpaceExhausted(FencingError):
    """A token above 18446744073709551615 would be needed."""

    code = "TokenSpaceExhausted"


class FencingScopeMismatch(FencingError):
    """The object belongs to another lock's `Fencing-Scope` than the one sent."""

    code = "FencingScopeMismatch"


class InvalidFencingScope(FencingError):
    """`Fencing-Scope` missing or malformed in a header-scoped bucket, or sent to another."""

    code = "InvalidFencingScope"


class BypassDetected(FencingError):
    """The object changed behind fencegate's back; fencegate refused to overwrite it."""

    code = "BypassDetected"


# ---- Credentials -----------------------------------------------------------------------------


class MissingCredentials(AuthError):
    """The server has keys and the request was not signed."""

    code = "MissingCredentials"
    hint = (
        "Give fencegate.Client(url, access_key_id=..., secret_access_key=...) a key from the "
        "server's [keys], or set FENCEGATE_ACCESS_KEY_ID and FENCEGATE_SECRET_ACCESS_KEY (the "
        "client does not read AWS_*: those may be another service's)."
    )


class InvalidAccessKeyId(AuthError):
    """The access key id is not in the server's [keys] (nor a live lease credential)."""

    code = "InvalidAccessKeyId"
    hint = (
        "Check access_key_id against the server's [keys]; lease-bound credentials end with "
        "their lease (after a grace period) and with a restart: acquire the lease again."
    )


class SignatureDoesNotMatch(AuthError):
    """The signature is wrong: usually the secret, or the region (`region=`)."""

    code = "SignatureDoesNotMatch"
    hint = "Check the secret and that region= is the server's [s3] region."


class RequestTimeTooSkewed(AuthError):
    """This machine's clock is more than 15 minutes off the server's."""

    code = "RequestTimeTooSkewed"
    hint = "Fix this machine's clock (NTP); signatures carry the time."


class AccessDenied(AuthError):
    """The key lacks the permission the request needs (the message names it)."""

    code = "AccessDenied"
    hint = (
        "Grant the key that permission in the server's [keys], or use another key; a client "
        "given no key sends unsigned requests (set FENCEGATE_ACCESS_KEY_ID and "
        "FENCEGATE_SECRET_ACCESS_KEY, or pass access_key_id= and secret_access_key=)."
    )


class AuthorizationHeaderMalformed(AuthError):
    """A malformed `Authorization` header, an unsigned fencing header, or a body unlike its
    `x-amz-content-sha256`."""

    code = "AuthorizationHeaderMalformed"


# ---- Leases ----------------------------------------------------------------------------------


class LeaseHeld(LeaseError):
    """Someone else holds the lease; `holder` says who, `retry_after` when to try again."""

    code = "LeaseHeld"
    hint = "Pass wait= (seconds) to Client.lease to wait for it."

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.holder: Optional[str] = self.body.get("holder")


class NotLeaseHolder(LeaseError):
    """Renew or release by another holder, token or secret: the lease is someone else's."""

    code = "NotLeaseHolder"


class NoSuchLease(LeaseError):
    """The lease is not held (it expired, was released, or fencegate restarted)."""

    code = "NoSuchLease"


class TooManyLeases(LeaseError):
    """The key holds `[leases] max_live_per_key` live leases already."""

    code = "TooManyLeases"
    hint = "Release leases this key no longer needs."


class InvalidLeaseName(LeaseError):
    """Lease names are 1-200 characters of letters, digits, `.`, `_`, `-`, `:` and `/`."""

    code = "InvalidLeaseName"


class InvalidTtl(LeaseError):
    """The TTL is 0 or over 24 hours."""

    code = "InvalidTtl"


class LeaseLost(LeaseError):
    """The lease was lost (a renewal was refused, its TTL passed, or a newer token was recorded);
    this package refused to send the write, so nothing was sent (`status` is None).

    Stop the work the lease guarded: another holder may have the lock. Acquire the lease again
    (a new token) to start over.
    """

    code = "LeaseLost"


class Redirected(FencegateError):
    """The answer was a redirect (3xx), which this package never follows.

    fencegate answers none, so something else answered: a proxy, a login page, a host that
    moved. Following it would send the request (an object's bytes, a lease's secret in a renew
    or release) to wherever it points, and take that host's answer as fencegate's. Point
    `fencegate.Client` at fencegate's own URL.

    Attributes:
        location: where the redirect pointed (its ``Location`` header; empty without one).
    """

    code = "Redirected"

    def __init__(self, message: str, *, location: str = "", **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.location = location


#: The longest `Location` a `Redirected` repeats: enough to recognise the host and path.
_LOCATION_SHOWN = 300


def redirected(status: int, headers: Mapping[str, str], *, what: str) -> Redirected:
    """The exception for a 3xx answer to `what`."""
    lower = {k.lower(): v for k, v in headers.items()}
    location = str(lower.get("location", ""))[:_LOCATION_SHOWN]
    message = (
        f"{what} answered HTTP {status}, a redirect to {location!r}, which is never followed: "
        "fencegate does not redirect, so something else answered; point the client at "
        "fencegate's own URL"
    )
    return Redirected(message, location=location, status=status, headers=lower)


# ---- Temporary: retry ------------------------------------------------------------------------


class OperationAborted(TemporaryError):
    """A write raced a DeleteBucket of its bucket (or the reverse)."""

    code = "OperationAborted"


class SlowDown(TemporaryError):
    """Bodies signed over their own hash hold all the room fencegate keeps for them."""

    code = "SlowDown"


class BackendUnavailable(TemporaryError):
    """The store behind fencegate is unreachable or failing."""

    code = "BackendUnavailable"


class CommitUnresolved(TemporaryError):
    """An earlier request to the store for this object got no answer and may still land."""

    code = "CommitUnresolved"


class CommitInProgress(TemporaryError):
    """Cluster mode: another instance's commit of the object is in progress."""

    code = "CommitInProgress"


class ClockSkewed(TemporaryError):
    """Cluster mode: the instance's clock runs too far ahead of the store's."""

    code = "ClockSkewed"


class IdempotencyKeyInUse(TemporaryError):
    """The first request with this `Idempotency-Key` is still being received or committed."""

    code = "IdempotencyKeyInUse"


class FenceStoreUnavailable(TemporaryError):
    """The fence table (RocksDB, or etcd without a quorum) cannot be read or written."""

    code = "FenceStoreUnavailable"


class RequestTimeout(TemporaryError):
    """The client stalled mid-body for longer than the server's `body_idle_timeout_secs`."""

    code = "RequestTimeout"


# ---- Everything else -------------------------------------------------------------------------


class PreconditionFailed(FencegateError):
    """`If-Match` / `If-None-Match` was not met."""

    code = "PreconditionFailed"


class NoSuchBucket(FencegateError):
    """No bucket of that name is configured."""

    code = "NoSuchBucket"


class NoSuchKey(FencegateError):
    """No object under that key."""

    code = "NoSuchKey"


class InvalidBucketState(FencegateError):
    """CreateBucket of a deleted bucket whose scope `[bucket_defaults]` would change."""

    code = "InvalidBucketState"


class InvalidKey(FencegateError):
    """The key is empty, over 1024 bytes, has control characters or `.`/`..` segments."""

    code = "InvalidKey"


class EntityTooLarge(FencegateError):
    """The body is over the server's `max_body_bytes`."""

    code = "EntityTooLarge"


class BadDigest(FencegateError):
    """The body is not what its `Content-MD5` or checksum says: nothing was written."""

    code = "BadDigest"


class InvalidDigest(FencegateError):
    """The `Content-MD5` is not a base64 MD5."""

    code = "InvalidDigest"


class StoreRefusedRequest(FencegateError):
    """The store refused what the request carried (e.g. a key too long for it)."""

    code = "StoreRefusedRequest"


class StoreKeptDifferentBytes(FencegateError):
    """The store answered with the digest of other bytes than were sent; nothing is
    acknowledged."""

    code = "StoreKeptDifferentBytes"


class InvalidIdempotencyKey(FencegateError):
    """The `Idempotency-Key` is empty, over 255 characters, not visible ASCII, or sent twice."""

    code = "InvalidIdempotencyKey"


class IdempotencyKeyMismatch(FencegateError):
    """The same `Idempotency-Key` came with another body, token or operation."""

    code = "IdempotencyKeyMismatch"
    hint = "Use a new Idempotency-Key for a different request."


class InvalidArgument(FencegateError):
    """A malformed request: fencegate's message says which field."""

    code = "InvalidArgument"


class TlsRequired(FencegateError):
    """Plain HTTP was sent to a TLS listener."""

    code = "TlsRequired"
    hint = "Use an https:// URL."


class TlsReloadFailed(FencegateError):
    """Admin reload: the certificate or key could not be read."""

    code = "TlsReloadFailed"


class InvalidConfiguration(FencegateError):
    """Admin reload: the configuration file does not validate."""

    code = "InvalidConfiguration"


class ReloadFailed(FencegateError):
    """Admin reload failed inside fencegate; nothing was applied (the log says why)."""

    code = "ReloadFailed"


class ScopeChangeRefused(FencegateError):
    """Admin reload would change a bucket's scope."""

    code = "ScopeChangeRefused"


class RestartRequired(FencegateError):
    """Admin reload changed a setting read at start-up only."""

    code = "RestartRequired"


class IncompleteBody(FencegateError):
    """The body ended before its `Content-Length`, or broke off mid-stream."""

    code = "IncompleteBody"


class RequestHeaderSectionTooLarge(FencegateError):
    """The request line and headers are over the server's `max_header_bytes`."""

    code = "RequestHeaderSectionTooLarge"


class NoSuchRoute(FencegateError):
    """fencegate serves no such path (is the URL fencegate's?)."""

    code = "NoSuchRoute"


class MethodNotAllowed(FencegateError):
    """The route does not take this method."""

    code = "MethodNotAllowed"


class NoSuchUpload(FencegateError):
    """S3 gateway: the multipart upload does not exist (aborted, expired or dropped)."""

    code = "NoSuchUpload"


class TooManyUploads(FencegateError):
    """S3 gateway: too many multipart uploads open for the key or the bucket."""

    code = "TooManyUploads"


class InvalidPartNumber(FencegateError):
    """S3 gateway: `partNumber` beyond the object's parts."""

    code = "InvalidPartNumber"


class OperationNotImplemented(FencegateError):
    """An operation or option fencegate does not implement (code ``NotImplemented``; the class
    is named otherwise so as not to shadow Python's ``NotImplemented``)."""

    code = "NotImplemented"


class InternalError(FencegateError):
    """A fault inside fencegate: a bug; report it with the server's log line."""

    code = "InternalError"


def _codes() -> Dict[str, Type[FencegateError]]:
    found: Dict[str, Type[FencegateError]] = {}
    pending = list(FencegateError.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        # This package's own refusals: fencegate never answers with them.
        if cls.code and cls not in (LeaseLost, Redirected):
            found[cls.code] = cls
    return found


#: Every code fencegate answers with, to its class.
ERRORS_BY_CODE: Dict[str, Type[FencegateError]] = _codes()


def error_for(code: str) -> Type[FencegateError]:
    """The class for a code; `FencegateError` itself for a code this package does not know."""
    return ERRORS_BY_CODE.get(code, FencegateError)


def make_error(
    status: int,
    headers: Mapping[str, str],
    fields: Optional[Mapping[str, Any]],
    *,
    what: str,
    token: Optional[int] = None,
) -> FencegateError:
    """The exception for a refusal: `fields` are the error's fields (the native API's JSON
    body, or the S3 ``Error`` element), `what` names the request for an answer without a code.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    fields = dict(fields or {})
    code = str(fields.get("error") or fields.get("Code") or "")
    message = str(fields.get("message") or fields.get("Message") or "")
    if not code:
        message = (
            f"{what} answered HTTP {status}: {message}"
            if message
            else f"{what} answered HTTP {status} without an error code; is the URL fencegate's?"
        )
    request_id = (
        lower.get("x-amz-request-id")
        or lower.get("x-request-id")
        or fields.get("RequestId")
        or fields.get("request_id")
    )
    retry_after: Optional[float] = None
    if lower.get("retry-after", "").strip().isdigit():
        retry_after = float(lower["retry-after"])
    err = error_for(code)(
        message,
        code=code or None,
        status=status,
        request_id=request_id,
        retry_after=retry_after,
        body=fields,
        headers=lower,
    )
    if isinstance(err, StaleFencingToken) and err.token is None:
        err.token = token
    return err
