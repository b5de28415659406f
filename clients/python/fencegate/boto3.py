"""boto3 through the fence: a token on every write, and fencegate's refusals as typed errors.

::

    import boto3, fencegate.boto3

    s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:8080", ...)
    fencegate.boto3.with_token(s3, 42)          # or with_token(s3, lease)
    try:
        s3.put_object(Bucket="default", Key="report.csv", Body=b"rows")
    except fencegate.StaleFencingToken as e:
        print("a newer holder has token", e.highest)

Everything here works through botocore's event hooks on the client it is given:

- the token is set as the ``Fencing-Token`` header in ``before-sign``, so it is among the
  signed headers as fencegate demands, on every operation that writes (`WRITE_OPERATIONS`).
  The header rather than the metadata ``x-amz-meta-fencing-token``: deletes, aborts and
  multipart completions carry no metadata;
- an ``after-call`` hook raises a refusal with a fencegate code as that code's
  `fencegate.FencegateError` subclass. The exception is *also* the `ClientError` botocore
  would have raised (the modelled class where botocore has one, such as
  ``s3.exceptions.NoSuchKey``), with the same ``response``, so existing ``except ClientError``
  code keeps working. S3's own codes that fencegate shares no class for (``InvalidPart``,
  ``MalformedXML``, ...) are left to botocore.

`fencegate.Client.s3_client` and `fencegate.Lease.s3_client` make boto3 clients with these hooks;
they need boto3 (``pip install 'fencegate[boto3]'``), the hooks botocore alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Type, TypeVar, Union

from botocore.exceptions import ClientError

from .errors import ERRORS_BY_CODE, FencegateError, StaleFencingToken, _rebuild, make_error

if TYPE_CHECKING:
    from .client import Client
    from .lease import Lease

__all__ = ["WRITE_OPERATIONS", "with_token", "typed_errors", "translate"]

#: The S3 operations that write, and so carry a token.
WRITE_OPERATIONS: Tuple[str, ...] = (
    "PutObject",
    "CopyObject",
    "DeleteObject",
    "DeleteObjects",
    "CreateMultipartUpload",
    "UploadPart",
    "UploadPartCopy",
    "CompleteMultipartUpload",
    "AbortMultipartUpload",
)

C = TypeVar("C")

_TYPED: Dict[Tuple[Type[FencegateError], Type[ClientError]], Type[Any]] = {}


def with_token(client: C, token: Union[int, Lease]) -> C:
    """Sends `token` as ``Fencing-Token`` on every write through the boto3 S3 `client`, and
    makes its refusals typed (`typed_errors`). Returns the same client.

    Given a `fencegate.Lease`, it sends the lease's token, and once the lease is lost every
    write raises `fencegate.LeaseLost` before anything is sent. Calling it again replaces the
    token.
    """
    from .lease import Lease

    lease = token if isinstance(token, Lease) else None
    value = _token_value(lease.token if lease is not None else token)

    def add_token(request: Any, **_: Any) -> None:
        request.headers["Fencing-Token"] = value

    for op in WRITE_OPERATIONS:
        _register(client, f"before-sign.s3.{op}", add_token, f"fencegate-token-{op}")
    # A token replaces the lease an earlier call bound, with its checks.
    _unbind_lease(client, "token")
    if lease is not None:
        _bind_lease(client, lease, "token")
    return typed_errors(client)


def typed_errors(client: C) -> C:
    """Makes every refusal with a fencegate code raise that code's `fencegate.FencegateError`
    subclass, which is also the `ClientError` botocore would have raised. Returns the client.
    """

    def raise_typed(http_response: Any, parsed: Dict[str, Any], model: Any, **_: Any) -> None:
        if http_response.status_code < 300:
            return
        code = parsed.get("Error", {}).get("Code")
        if code in ERRORS_BY_CODE:
            modelled = client.exceptions.from_code(code)  # type: ignore[attr-defined]
            raise _typed_error(parsed, model.name, modelled)

    _register(client, "after-call.s3", raise_typed, "fencegate-typed-errors")
    return client


def translate(error: ClientError) -> ClientError:
    """The typed twin of a botocore `ClientError` (``raise fencegate.boto3.translate(e)``),
    for a client made without `typed_errors`; `error` itself when its code is not
    fencegate's."""
    if isinstance(error, FencegateError):
        return error
    code = error.response.get("Error", {}).get("Code")
    if code not in ERRORS_BY_CODE:
        return error
    typed = _typed_error(error.response, error.operation_name, type(error))
    typed.__cause__ = error
    return typed


def client_for(fg: Client, session: Any = None, **kwargs: Any) -> Any:
    """`Client.s3_client`: a boto3 S3 client for the same fencegate, signed with the same
    key (unsigned, as development mode accepts, when the `Client` has none)."""
    return _s3_client(fg, fg._credentials(), session, kwargs)


def lease_client(lease: Lease, session: Any = None, **kwargs: Any) -> Any:
    """`Lease.s3_client`: a boto3 S3 client signed with the lease's S3 credentials."""
    creds = lease.s3_credentials
    if creds is None:
        raise ValueError(
            f"lease {lease.name!r} has no S3 credentials: acquire it with "
            "s3_credentials=True (and bucket= and key=, the scope they are confined to)"
        )
    client = _s3_client(
        lease.client, (creds.access_key_id, creds.secret_access_key), session, kwargs
    )
    _bind_lease(client, lease, "credentials")
    return client


def _s3_client(
    fg: Client, credentials: Optional[Tuple[str, str]], session: Any, kwargs: Dict[str, Any]
) -> Any:
    try:
        import boto3
    except ImportError as e:
        raise ImportError("a boto3 client needs boto3: pip install 'fencegate[boto3]'") from e
    from botocore import UNSIGNED
    from botocore.config import Config

    # Path style: fencegate serves bucket.host/key only with [s3] domain set.
    config = Config(s3={"addressing_style": "path"})
    if credentials is None:
        config = config.merge(Config(signature_version=UNSIGNED))
    user_config = kwargs.pop("config", None)
    if user_config is not None:
        config = config.merge(user_config)
    kwargs.setdefault("endpoint_url", fg.url)
    kwargs.setdefault("region_name", fg.region)
    if credentials is not None:
        kwargs.setdefault("aws_access_key_id", credentials[0])
        kwargs.setdefault("aws_secret_access_key", credentials[1])
    maker = session if session is not None else boto3
    return typed_errors(maker.client("s3", config=config, **kwargs))


def _bind_lease(client: Any, lease: Lease, how: str) -> None:
    """Writes through `client` check the lease first (`LeaseLost`, nothing sent), and a
    stale refusal marks the lease lost, as the lease's own writes do. `how` tells a binding
    by token from one by the lease's credentials, so that a new token replaces only the
    former."""

    def check(**_: Any) -> None:
        lease.check()

    def note_stale(http_response: Any, parsed: Dict[str, Any], model: Any, **_: Any) -> None:
        # 403 where the write was signed with the lease's credentials, 409 with a token.
        if http_response.status_code in (403, 409) and model.name in WRITE_OPERATIONS:
            if parsed.get("Error", {}).get("Code") == StaleFencingToken.code:
                highest = http_response.headers.get("fencing-token-highest", "a newer token")
                lease._keeper.lose(
                    f"an S3 {model.name} was refused: {highest} is recorded, above this "
                    f"lease's {lease.token}"
                )

    for op in WRITE_OPERATIONS:
        _register(client, f"before-sign.s3.{op}", check, f"fencegate-lease-{how}-{op}")
    # First, so that the lease is marked lost before raise_typed raises.
    _register(client, "after-call.s3", note_stale, f"fencegate-lease-{how}-stale", first=True)


def _unbind_lease(client: Any, how: str) -> None:
    events = client.meta.events
    for op in WRITE_OPERATIONS:
        events.unregister(f"before-sign.s3.{op}", unique_id=f"fencegate-lease-{how}-{op}")
    events.unregister("after-call.s3", unique_id=f"fencegate-lease-{how}-stale")


def _register(client: Any, event: str, handler: Any, unique_id: str, first: bool = False) -> None:
    events = client.meta.events
    # botocore keeps the first handler of a unique_id: drop it, so that a second call
    # (a new token, another lease) replaces it.
    events.unregister(event, unique_id=unique_id)
    if first:
        events.register_first(event, handler, unique_id=unique_id)
    else:
        events.register(event, handler, unique_id=unique_id)


def _token_value(token: Any) -> str:
    if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < 2**64:
        raise ValueError(
            f"a fencing token is an integer from 0 to 2**64 - 1, or a fencegate.Lease; "
            f"got {token!r}"
        )
    return str(token)


def _typed_error(
    response: Dict[str, Any], operation: str, botocore_class: Type[ClientError]
) -> ClientError:
    meta = response.get("ResponseMetadata", {})
    headers = meta.get("HTTPHeaders", {})
    fields = dict(response.get("Error", {}))
    if meta.get("RequestId"):
        fields.setdefault("RequestId", meta["RequestId"])
    ours = make_error(meta.get("HTTPStatusCode", 0), headers, fields, what=operation)
    cls = _typed_class(type(ours), botocore_class)
    # Built by hand: the two bases' __init__ take different arguments.
    err: Any = Exception.__new__(cls)
    err.__dict__.update(ours.__dict__)
    Exception.__init__(err, ours.message)
    # What botocore's ClientError carries, for code that reads it.
    err.response = response
    err.operation_name = operation
    typed: ClientError = err
    return typed


def _typed_class(ours: Type[FencegateError], theirs: Type[ClientError]) -> Type[Any]:
    cls = _TYPED.get((ours, theirs))
    if cls is None:
        cls = type(
            ours.__name__,
            (ours, theirs),
            {
                "__module__": ours.__module__,
                # Pickled as the plain fencegate class: this one is made at run time, so
                # nothing could find it by name to unpickle it.
                "__reduce__": lambda self: (_rebuild, (ours, self.message, _state(self))),
            },
        )
        _TYPED[(ours, theirs)] = cls
    return cls


def _state(err: Any) -> Dict[str, Any]:
    # botocore's response holds its raw HTTP objects; the fencegate fields are what travel.
    return {k: v for k, v in err.__dict__.items() if k not in ("response", "operation_name")}
