"""A held lease: its token, a background renewal, and writes that stop once it is lost."""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Tuple, Type, TypeVar

from . import _clock
from .errors import (
    FencegateError,
    LeaseLost,
    NoSuchLease,
    NotLeaseHolder,
    StaleFencingToken,
    TemporaryError,
)

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

    The lease is *lost* when a renewal is refused (a 4xx answer such as `NoSuchLease` or
    `NotLeaseHolder`: the server ended it or gave it to another holder), when its TTL passes
    without a successful renewal (a paused or suspended process finds this when it wakes), or
    when a write through it is refused as stale. A renewal that gets no answer, a transport
    error or a 5xx is retried until the TTL runs out, since the server may still hold the lease
    for most of it. Then every later write through the lease raises `LeaseLost` without
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
        on_lost: Optional[Callable[[Lease], None]],
    ) -> None:
        """Made by `Client.lease`. `granted_after` is a time on the lease clock
        (`fencegate._clock.now`) no later than the server's grant: the TTL counts from it, so
        that this process believes the lease over no later than the server does."""
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
        self._keeper = _Keeper(self, granted_after, on_lost)
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

        It does not wait for a renewal in flight (one may hang on a dead connection): the
        server orders the two, and a renewal answered after the release is ignored.
        """
        if not self._keeper.stop():
            return False
        try:
            self.client._release_lease(self.name, self.holder, self.token, self.secret)
        except (NoSuchLease, NotLeaseHolder):
            return False
        return True


#: The longest `release` waits for the renewal thread to stop (it only runs `on_lost` or waits
#: on a condition; a renewal in flight runs in a thread of its own, which nothing waits for).
_STOP_JOIN = 1.0

#: The first pause before a failed renewal is tried again, doubled after each failure up to
#: `_MAX_RETRY` (and always within the time left before the deadline).
_FIRST_RETRY = 0.2
_MAX_RETRY = 2.0

#: The longest the renewal thread sleeps at once. `threading.Condition.wait` counts its timeout
#: on CLOCK_MONOTONIC, which stands still while the machine is suspended; waking this often
#: rereads the lease clock, which does not, so a resumed host finds its lease lost within this
#: much of waking.
_MAX_SLEEP = 1.0


def _describe(e: BaseException) -> str:
    return str(e) if isinstance(e, FencegateError) else f"{type(e).__name__}: {e}"


def _refused(e: BaseException) -> bool:
    """Whether a renewal's failure means the server will not renew the lease: a 4xx refusal
    (`NoSuchLease`, `NotLeaseHolder`, a bad secret...). No answer, a transport error, a 5xx or
    a refusal fencegate says to retry (a `TemporaryError`, such as `FenceStoreUnavailable`)
    says nothing about the lease, which the server may still hold."""
    return (
        isinstance(e, FencegateError)
        and e.status is not None
        and 400 <= e.status < 500
        and not isinstance(e, TemporaryError)
    )


class _Keeper:
    """A lease's clock, its lost state and the thread that renews it.

    The keeper's thread only schedules: each renewal runs in a thread of its own, so that a
    renewal whose answer never ends (a trickle no read timeout catches) cannot keep the keeper
    from finding the lease lost at its deadline, nor `release` from going ahead. One renewal
    is in flight at a time; its answer counts only if it comes before the deadline, and not
    after a release or a loss.

    The threads hold the `Lease` only through a weak reference, so that a lease dropped
    without a release stops being renewed instead of being held for as long as the process
    lives.

    Deadlines are measured on the lease clock (`fencegate._clock`, which keeps counting while
    the machine is suspended) from when each grant or renewal request was sent: the server
    counts its TTL from when it answered, which is later, so this process believes the lease
    over no later than fencegate does.
    """

    def __init__(
        self,
        lease: Lease,
        granted_after: float,
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
        # Past already when the grant's answer came late: renewed at once, counting the
        # deadline from that renewal's departure.
        self._next_renewal = granted_after + self._ttl / 3
        self._paused = 0
        self._in_flight = False
        self._retry_delay = _FIRST_RETRY
        #: The last renewal's failure that left the lease held, for the reason once it is lost.
        self._last_error: Optional[str] = None
        #: A renewal's refusal, for the keeper's thread to act on.
        self._refusal: Optional[str] = None
        self.stopped = False
        self.reason: Optional[str] = None
        self._thread = threading.Thread(
            target=self._run, name=f"fencegate-lease-{self._name}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, join: bool = True) -> bool:
        """Stops renewing; False if it was stopped already. Waits at most `_STOP_JOIN` for the
        keeper's thread, and never for a renewal in flight."""
        with self._cond:
            if self.stopped:
                return False
            self.stopped = True
            self._cond.notify_all()
        if join and threading.current_thread() is not self._thread:
            self._thread.join(_STOP_JOIN)
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
            expired = _clock.now() >= self._deadline
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
        reason = f"its TTL of {self._ttl:g} s passed without a successful renewal"
        if self._last_error is not None:
            reason += f" (the last attempt: {self._last_error})"
        return reason

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self.stopped or self._lost:
                        return
                    now = _clock.now()
                    if now >= self._deadline:
                        refusal, expired = None, True
                        break
                    if self._refusal is not None:
                        refusal, expired = self._refusal, False
                        break
                    due = not self._paused and not self._in_flight
                    if due and now >= self._next_renewal:
                        refusal, expired = None, False
                        self._in_flight = True
                        break
                    wake = min(self._next_renewal, self._deadline) if due else self._deadline
                    self._cond.wait(min(wake - now, _MAX_SLEEP))
            if expired:
                self.lose(self._expired_reason())
                return
            if refusal is not None:
                self.lose(f"a renewal was refused: {refusal}")
                return
            threading.Thread(
                target=self._renew, name=f"fencegate-renew-{self._name}", daemon=True
            ).start()

    def _renew(self) -> None:
        """One renewal, in a thread of its own; reports to the keeper's thread."""
        with self._cond:
            if self.stopped or self._lost:
                self._in_flight = False
                return
        sent = _clock.now()
        answer: Optional[Mapping[str, Any]] = None
        error: Optional[BaseException] = None
        try:
            # Each read waits no longer than the client's timeout, so that a dead connection
            # leaves time to try again before the deadline; the keeper bounds the whole.
            answer = self._client._renew_lease(
                self._name,
                self._holder,
                self._token,
                self._secret,
                self._ttl,
                timeout=max(min(self._client.timeout, self._deadline - sent), 0.1),
            )
            if not isinstance(answer, dict):
                raise ValueError(f"the renewal's answer is not a JSON object: {answer!r}")
        except Exception as e:
            error = e
        with self._cond:
            self._in_flight = False
            self._cond.notify_all()
            # Too late to count: the lease was released or lost meanwhile, or the deadline
            # passed (the keeper loses it; an answer after it cannot undo that).
            if self.stopped or self._lost or _clock.now() >= self._deadline:
                return
            if error is None:
                self._deadline = sent + self._ttl
                self._next_renewal = sent + self._ttl / 3
                self._retry_delay = _FIRST_RETRY
                self._last_error = None
            elif _refused(error):
                self._refusal = _describe(error)
                return
            else:
                self._last_error = _describe(error)
                delay = self._retry_delay
                if isinstance(error, FencegateError) and error.retry_after is not None:
                    delay = max(delay, error.retry_after)
                # Never past the deadline: a retry halfway there still has a chance.
                left = self._deadline - _clock.now()
                self._next_renewal = _clock.now() + max(min(delay, left / 2), 0.05)
                self._retry_delay = min(self._retry_delay * 2, _MAX_RETRY)
        if error is not None:
            log.info(
                "renewing lease %s failed (%s); trying again while its TTL lasts",
                self._name,
                _describe(error),
            )
            return
        lease = self._lease()
        if lease is not None and answer is not None and "expires_at_ms" in answer:
            lease.expires_at_ms = int(answer["expires_at_ms"])
