"""fencegate's Python client: leases that renew themselves, fenced writes on the native API,
and boto3 bound to a token or a lease.

::

    import fencegate

    fg = fencegate.Client("http://127.0.0.1:8080")
    with fg.lease("nightly-report", ttl=10, bucket="default", key="report.csv") as lease:
        lease.put("default", "report.csv", b"rows")

`fencegate.boto3` adds the token to boto3's writes; every refusal is a `FencegateError`
subclass named after fencegate's error code (`fencegate.errors`).
"""

from . import errors
from .client import (
    DEFAULT_REGION,
    DEFAULT_URL,
    Client,
    DeleteResult,
    Fence,
    LeaseInfo,
    Object,
    ObjectInfo,
    S3Credentials,
    WriteResult,
)
from .errors import *  # noqa: F401,F403 - every error class is part of the package's API
from .lease import Lease

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Lease",
    "WriteResult",
    "DeleteResult",
    "Object",
    "ObjectInfo",
    "Fence",
    "LeaseInfo",
    "S3Credentials",
    "DEFAULT_REGION",
    "DEFAULT_URL",
    "__version__",
]
__all__ += errors.__all__
