"""SigV4 for the native API, with botocore's own signer.

fencegate checks native requests as S3 does: the path signed as sent (encoded once, never
normalised), the body covered by ``x-amz-content-sha256``, and every fencing header among the
signed ones. botocore's `S3SigV4Auth` does exactly that; this module only carries the request
between it and `requests`.
"""

from __future__ import annotations

from typing import IO, Dict, Optional, Union

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

#: What a request body may be: bytes, text (sent as UTF-8), or a binary file open for reading.
Body = Union[bytes, bytearray, memoryview, str, IO[bytes]]


class Signer:
    """Signs requests for one access key."""

    def __init__(self, access_key_id: str, secret_access_key: str, region: str) -> None:
        self.access_key_id = access_key_id
        self.region = region
        self._auth = S3SigV4Auth(Credentials(access_key_id, secret_access_key), "s3", region)

    def __repr__(self) -> str:
        return f"Signer(access_key_id={self.access_key_id!r}, region={self.region!r})"

    def sign(
        self, method: str, url: str, headers: Dict[str, str], body: Optional[Body]
    ) -> Dict[str, str]:
        """The headers to send: `headers` plus the date, the body's SHA-256 and `Authorization`.

        A file body is read once for its hash and put back where it was, so that `requests`
        sends it from the same position.
        """
        request = AWSRequest(method=method, url=url, headers=headers, data=body or b"")
        self._auth.add_auth(request)
        return dict(request.headers.items())
