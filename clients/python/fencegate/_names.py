"""Names and values checked before a request is built: what `requests` would rewrite (dot
segments) or send in an encoding of its own (non-ASCII header values) is refused here, with
nothing sent, and paths are encoded once, as S3 signs them."""

from __future__ import annotations

from typing import Mapping
from urllib.parse import quote

from .errors import InvalidArgument, InvalidKey


def _segment(name: str) -> str:
    # RFC 3986's unreserved characters stay as they are, so the path in the server's log reads
    # as the name it is; everything else is encoded once, as S3 signs it.
    return quote(name, safe="-._~")


def _key_path(key: str) -> str:
    return "/".join(_segment(part) for part in key.split("/"))


#: Why a `.` or `..` path segment cannot be sent, for the local refusals.
_DOT_SEGMENTS = (
    "fencegate refuses `.` and `..` path segments (400 InvalidKey), because HTTP clients "
    "rewrite them before sending (`requests` sends a/../b as b), so the request would reach "
    "another key or bucket; nothing was sent"
)


def _check_object_names(bucket: str, key: str) -> None:
    """Refuses, without sending, a bucket or key that `requests` would rewrite (RFC 3986's
    dot-segment removal): a write meant for ``a/../victim`` would land on ``victim``, or fail
    signed as a misleading `SignatureDoesNotMatch`."""
    if bucket in (".", ".."):
        what = f"the bucket {bucket!r} is a `.` or `..` path segment"
    elif any(part in (".", "..") for part in key.split("/")):
        what = f"the key {key!r} has a `.` or `..` segment"
    else:
        return
    message = f"{what}: {_DOT_SEGMENTS}"
    raise InvalidKey(message, status=400, body={"error": InvalidKey.code, "message": message})


def _check_metadata(metadata: Mapping[str, str]) -> None:
    """Refuses, without sending, a metadata value fencegate would refuse: it stores printable
    ASCII only (a byte outside it is not a header value every store returns intact), and an
    HTTP client sends other characters in an encoding of its own, which signed requests
    report as a misleading `SignatureDoesNotMatch`."""
    for name, value in metadata.items():
        if isinstance(value, str) and not all(" " <= c <= "~" for c in value):
            message = (
                f"metadata {name!r} = {value!r}: header values must be printable ASCII "
                "(fencegate refuses others, tabs included, with 400 InvalidArgument); nothing "
                "was sent. Encode the value, with urllib.parse.quote or as an RFC 2047 encoded "
                "word (=?UTF-8?B?...?=), and decode it when reading it back"
            )
            raise InvalidArgument(
                message, status=400, body={"error": InvalidArgument.code, "message": message}
            )
