"""A held lease: its token, a background renewal, and writes that stop once it is lost."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Tuple, Type, TypeVar

from .errors import FencegateError, LeaseLost, NoSuchLease, NotLeaseHolder, StaleFencingToken

if TYPE_CHECKING:
    from types import TracebackType

    from ._signing import Body
    from .client import Client, DeleteResult, Fence, S3Credentials, WriteResult

__all__ = ["Lease"]

T = TypeVar("T")

log = logging.getLogger("fencegate")
# A library leaves logging's output to the application (a lost lease is logged as a warning).
log.addHandler(logging.NullHandler())


class Lease:
    """A lease held from fencegate, renewed in the background until released.

    Made by `Client.lease`. Used as a context manager it is released on exit; otherwise call
    `release`. A lease dropped without either stops being renewed and runs out at its TTL.

    The lease is *lost* when a renewal fails, when its TTL passes without a successful
    renewal (a paused process finds this when it wakes), or when a write through it is
    refused as stale. Then every later write through the lease raises `LeaseLost` without
    sending anything, `on_lost` runs once, and `lost` is set (after `on_lost` returns, so that
    a thread waiting on it finds the callback's work done).

    `lost` is advice, for liveness: it tells a worker to stop. Safety does not rest on it: a
    write with a superseded token is refused by the fence (`StaleFencingToken`) whatever this
    process's clock says, including a write sent just before the lease was found lost.

    Attributes:
        name: the lease's name.
        holder: the holder name it was acquired for.
        token: the fencing token the grant minted; send it with every write.
        secret: the lease's secret, which renew and release need (for callers who manage the
            lease by other means).
        ttl: seconds it lasts without a renewal.
        scope: the fence scope a bound lease advanced, e.g. ``object:default/report.csv``.
        bound: ``(bucket, key)`` for a bound lease.
        s3_credentials: lease-bound S3 credentials, when acquired with ``s3_credentials=True``.
        expires_at_ms: its expiry on the server's clock, as of the last grant or renewal.
        lost: a `threading.Event`, set once the lease is lost and `on_lost` has run.
    """

    def __init__(
        self,
        client: Client,
        *,
        name: str,
        holder: str,
        ttl: float,
        token: int,
        secret: str,
        scope: Optional[str],
        bound: Optional[Tuple[str, str]],
        s3_credentials: Optional[S3Credentials],
        expires_at_ms: int,
        granted_after: float,
        renew_now: bool,
        on_lost: Optional[Callable[[Lease], None]],
    ) -> None:
        self.client = client
        self.name = name
        self.holder = holder
        self.ttl = ttl
        self.token = token
        self.secret = secret
        self.scope = scope
        self.bound = bound
        self.s3_credentials = s3_credentials
        self.expires_at_ms = expires_at_ms
        self.lost = threading.Event()
        self._keeper = _Keeper(self, granted_after, renew_now, on_lost)
        # The renewal thread holds the lease only weakly; this stops it once the lease is gone.
        weakref.finalize(self, self._keeper.stop, join=False)
        self._keeper.start()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "released" if self.released else "held"
        return (
            f"Lease(name={self.name!r}, holder={self.holder!r}, token={self.token}, "
            f"scope={self.scope!r}, {state})"
        )

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self.released:
            return
        try:
            self.release()
        except Exception:
            if exc_type is None:
                raise
            # The error that ended the block matters more than a failed release; the lease
            # runs out at its TTL anyway.
            log.warning("releasing lease %s failed", self.name, exc_info=True)

    # ---- State ---------------------------------------------------------------------------------

    @property
    def released(self) -> bool:
        """Whether `release` was called."""
        return self._keeper.stopped

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the lease was lost, or None while it is not."""
        return self._keeper.reason

    def check(self) -> None:
        """Raises `LeaseLost` if the lease is lost or released; returns otherwise.

        Call it before a write made by other means (another client, a subprocess) with
        `token`, as the lease's own writes do.
        """
        self._keeper.check()

    @contextlib.contextmanager
    def renewals_paused(self) -> Iterator[None]:
        """A test hook: no renewal is sent inside the block, as if this process were paused
        (a GC pause, a stopped VM). The TTL still runs: past it the lease is lost, and stays
        lost after the block. Renewals resume after the block if it is not.

        ::

            with lease.renewals_paused():
                assert lease.lost.wait(timeout=lease.ttl * 2)
        """
        self._keeper.pause()
        try:
            yield
        finally:
            self._keeper.resume()

    # ---- Writes --------------------------------------------------------------------------------

    def put(
        self,
        bucket: str,
        key: str,
        body: Body,
        *,
        content_type: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        if_match: Optional[str] = None,
        if_none_match: bool = False,
        idempotency_key: Optional[str] = None,
        fencing_scope: Optional[str] = None,
    ) -> WriteResult:
        """`Client.put` with this lease's token.

        Raises:
            LeaseLost: the lease is lost or released; nothing was sent.
            StaleFencingToken: a newer holder's token is recorded; the lease is now lost.
        """
        return self._fenced(
            self.client.put,
            bucket,
            key,
            body,
            self.token,
            content_type=content_type,
            metadata=metadata,
            if_match=if_match,
            if_none_match=if_none_match,
            idempotency_key=idempotency_key,
            fencing_scope=fencing_scope,
        )

    def delete(
        self,
        bucket: str,
        key: str,
        *,
        idempotency_key: Optional[str] = None,
        fencing_scope: Optional[str] = None,
    ) -> DeleteResult:
        """`Client.delete` with this lease's token (raises as `put` does)."""
        return self._fenced(
            self.client.delete,
            bucket,
            key,
            self.token,
            idempotency_key=idempotency_key,
            fencing_scope=fencing_scope,
        )

    def advance_fence(self, bucket: str, key: str, *, fencing_scope: Optional[str] = None) -> Fence:
        """`Client.advance_fence` to this lease's token (raises as `put` does)."""
        return self._fenced(
            self.client.advance_fence, bucket, key, self.token, fencing_scope=fencing_scope
        )

    def _fenced(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        self._keeper.check()
        try:
            return call(*args, **kwargs)
        except StaleFencingToken as e:
            self._keeper.lose(
                f"a write was refused: token {e.highest} is recorded for "
                f"{e.scope or 'its scope'}, above this lease's {self.token}"
            )
            raise

    def s3_client(self, session: Any = None, **kwargs: Any) -> Any:
        """A boto3 S3 client signed with this lease's S3 credentials: every write through it
        carries the lease's token, and raises `LeaseLost` without sending once the lease is
        lost. Needs boto3 (``pip install 'fencegate[boto3]'``) and a lease acquired with
        ``s3_credentials=True``.

        Args:
            session: a `boto3.session.Session` to make the client from (the default session
                otherwise).
            **kwargs: passed to ``boto3.client``; a ``config`` is merged over path-style
                addressing.
        """
        from .boto3 import lease_client

        return lease_client(self, session=session, **kwargs)

    def release(self) -> bool:
        """Stops the renewals and ends the lease now, so the next holder need not wait for
        the TTL. Returns False when the lease had already ended on the server (expired, or
        taken by another holder), True when this call ended it. Calling it again returns
        False without sending anything.
        """
        if not self._keeper.stop():
            return False
        try:
            self.client._release_lease(self.name, self.holder, self.token, self.secret)
        except (NoSuchLease, NotLeaseHolder):
            return False
        return True


class _Keeper:
    """A lease's clock, its lost state and the thread that renews it.

    The thread holds the `Lease` only through a weak reference, so that a lease dropped
    without a release stops being renewed instead of being held for as long as the process
    lives.

    Deadlines are measured on the monotonic clock from when each grant or renewal request was
    sent: the server counts its TTL from when it answered, which is later, so this process
    believes the lease over no later than fencegate does.
    """

    def __init__(
        self,
        lease: Lease,
        granted_after: float,
        renew_now: bool,
        on_lost: Optional[Callable[[Lease], None]],
    ) -> None:
        self._lease = weakref.ref(lease)
        self._client = lease.client
        self._name = lease.name
        self._holder = lease.holder
        self._token = lease.token
        self._secret = lease.secret
        self._ttl = lease.ttl
        self._lost_event = lease.lost
        self._lost = False
        self._on_lost = on_lost
        self._cond = threading.Condition()
        self._deadline = granted_after + self._ttl
        self._next_renewal = time.monotonic() if renew_now else granted_after + self._ttl / 3
        self._paused = 0
        self.stopped = False
        self.reason: Optional[str] = None
        self._thread = threading.Thread(
            target=self._run, name=f"fencegate-lease-{self._name}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, join: bool = True) -> bool:
        """Stops renewing; False if it was stopped already."""
        with self._cond:
            if self.stopped:
                return False
            self.stopped = True
            self._cond.notify_all()
        if join and threading.current_thread() is not self._thread:
            # A renewal in flight is bounded by its timeout, never longer than the TTL.
            self._thread.join(self._ttl + 1)
        return True

    def pause(self) -> None:
        with self._cond:
            self._paused += 1

    def resume(self) -> None:
        with self._cond:
            self._paused -= 1
            self._cond.notify_all()

    def check(self) -> None:
        with self._cond:
            if self.stopped and not self._lost:
                raise LeaseLost(
                    f"lease {self._name!r} (token {self._token}) was released, so nothing "
                    "was sent; acquire it again to write"
                )
            expired = time.monotonic() >= self._deadline
        if expired:
            self.lose(self._expired_reason())
        if self._lost:
            raise LeaseLost(
                f"lease {self._name!r} (token {self._token}) is lost ({self.reason}), so "
                "nothing was sent. Stop this work: another holder may have the lock. Acquire "
                "the lease again for a new token."
            )

    def lose(self, reason: str) -> None:
        """Marks the lease lost (once), which stops its writes, runs `on_lost`, then sets the
        `lost` event."""
        with self._cond:
            if self._lost:
                return
            self.reason = reason
            self._lost = True
            self._cond.notify_all()
        log.warning("lease %s (token %s) is lost: %s", self._name, self._token, reason)
        lease = self._lease()
        try:
            if self._on_lost is not None and lease is not None:
                self._on_lost(lease)
        except Exception:
            log.exception("the on_lost callback of lease %s raised", self._name)
        finally:
            self._lost_event.set()

    def _expired_reason(self) -> str:
        return f"its TTL of {self._ttl:g} s passed without a successful renewal"

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self.stopped or self._lost:
                        return
                    now = time.monotonic()
                    if now >= self._deadline:
                        expired = True
                        break
                    if not self._paused and now >= self._next_renewal:
                        expired = False
                        break
                    wake = (
                        self._deadline if self._paused else min(self._next_renewal, self._deadline)
                    )
                    self._cond.wait(wake - now)
            if expired:
                self.lose(self._expired_reason())
                return
            if not self._renew():
                return

    def _renew(self) -> bool:
        sent = time.monotonic()
        try:
            # An answer after the deadline would be too late to matter: wait no longer.
            answer = self._client._renew_lease(
                self._name,
                self._holder,
                self._token,
                self._secret,
                self._ttl,
                timeout=max(self._deadline - sent, 0.1),
            )
        except Exception as e:
            # Whatever went wrong (a refusal, no answer, an answer that is not fencegate's),
            # the lease was not renewed.
            if not self.stopped:
                what = str(e) if isinstance(e, FencegateError) else f"{type(e).__name__}: {e}"
                self.lose(f"a renewal failed: {what}")
            return False
        with self._cond:
            if self._lost:
                return False
            self._deadline = sent + self._ttl
            self._next_renewal = sent + self._ttl / 3
        lease = self._lease()
        if lease is not None and "expires_at_ms" in answer:
            lease.expires_at_ms = int(answer["expires_at_ms"])
        return True
