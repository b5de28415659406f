"""What the native API answers, as values: written and deleted objects, objects read, fences and
leases, and how each is read off an answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

import requests


@dataclass(frozen=True)
class WriteResult:
    """What fencegate recorded for a write."""

    bucket: str
    key: str
    #: The fence scope the token was checked against, e.g. ``object:default/report.csv``.
    scope: Optional[str]
    #: The token recorded with the write (None for an unfenced write).
    token: Optional[int]
    etag: Optional[str]
    size: int
    #: True when an `Idempotency-Key` retry was answered with the first request's result.
    replayed: bool


@dataclass(frozen=True)
class DeleteResult(WriteResult):
    """What fencegate recorded for a delete (a tombstone keeps the token either way)."""

    #: False when there was no object (the delete still recorded its token).
    existed: bool


@dataclass(frozen=True)
class ObjectInfo:
    """An object's metadata, as GET and HEAD answer it."""

    bucket: str
    key: str
    etag: Optional[str]
    #: The token of the write that made this version.
    token: Optional[int]
    size: int
    content_type: Optional[str]
    last_modified: Optional[str]
    #: User metadata (``x-amz-meta-*``), names without the prefix.
    metadata: Dict[str, str]


@dataclass(frozen=True)
class Object(ObjectInfo):
    """An object's bytes and metadata."""

    body: bytes = field(repr=False)


@dataclass(frozen=True)
class Fence:
    """A key's scope and the highest token recorded for it."""

    bucket: str
    key: str
    scope: str
    highest: Optional[int]
    etag: Optional[str]
    #: True when the object was deleted (the tombstone keeps the token).
    tombstone: bool


@dataclass(frozen=True)
class S3Credentials:
    """Lease-bound S3 credentials: every write signed with them carries the lease's token."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    #: The bucket they may read and write.
    bucket: str
    #: The scope they are confined to.
    scope: str


@dataclass(frozen=True)
class LeaseInfo:
    """A lease as ``GET /v1/leases/{name}`` shows it (never its secrets)."""

    name: str
    holder: str
    token: int
    ttl: float
    #: When it runs out, in milliseconds since the epoch on the server's clock.
    expires_at_ms: int
    scope: Optional[str]
    #: ``(bucket, key)`` for a lease bound to a scope.
    bound: Optional[Tuple[str, str]]


def _int(value: Any) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _write_result(resp: requests.Response, bucket: str, key: str) -> WriteResult:
    answer = resp.json()
    return WriteResult(
        bucket=answer.get("bucket", bucket),
        key=answer.get("key", key),
        scope=answer.get("scope"),
        token=_int(answer.get("token")),
        etag=answer.get("etag"),
        size=int(answer.get("size") or 0),
        replayed=resp.headers.get("Idempotent-Replayed", "").lower() == "true",
    )


def _object_info(resp: requests.Response, bucket: str, key: str) -> ObjectInfo:
    h = resp.headers
    return ObjectInfo(
        bucket=bucket,
        key=key,
        etag=h.get("ETag"),
        token=_int(h.get("Fencing-Token")),
        size=int(h.get("Content-Length") or 0),
        content_type=h.get("Content-Type"),
        last_modified=h.get("Last-Modified"),
        metadata={
            name[len("x-amz-meta-") :]: value
            for name, value in ((n.lower(), v) for n, v in h.items())
            if name.startswith("x-amz-meta-")
        },
    )


def _fence(answer: Mapping[str, Any], bucket: str, key: str) -> Fence:
    return Fence(
        bucket=answer.get("bucket", bucket),
        key=answer.get("key", key),
        scope=answer["scope"],
        highest=_int(answer.get("highest")),
        etag=answer.get("etag"),
        tombstone=bool(answer.get("tombstone")),
    )


def _bound(answer: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
    bound = answer.get("bound")
    return (bound["bucket"], bound["key"]) if bound else None
