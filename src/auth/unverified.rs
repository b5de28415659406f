//! Bodies held before their signature is checked: a SigV4 signature over the body's own hash
//! (curl signs this way when no `x-amz-content-sha256` is sent) can only be checked with the
//! whole body in hand. Anyone who knows an access key id (every presigned URL shows one) can
//! send such a body, so what they can make fencegate hold is bounded twice: each body by
//! [`MAX_BODY`], and all of them together, over every connection, by one process-wide budget
//! (`[server] max_unverified_body_bytes`). A body's share is taken when its head arrives: its
//! `Content-Length`, or the whole 1 MiB for a body sent without one, and its buffer is
//! allocated at that size once, never grown, so memory held never exceeds what was charged.
//! A body that would overdraw the budget is refused at once with 503 `SlowDown` rather than
//! waited for, unread, and its connection closed, so a refusal holds nothing. A body over
//! 1 MiB, a client's mistake rather than load, is read past and dropped (up to 4 MiB, for
//! 10 s) so that the client, still sending, hears why instead of a reset.

use super::AuthError;
use axum::body::{Body, Bytes};
use bytes::BytesMut;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

pub use crate::config::{
    DEFAULT_UNVERIFIED_BODY_BYTES as DEFAULT_BUDGET, MAX_UNVERIFIED_BODY as MAX_BODY,
};
/// The longest that reading such a body may take (at least 17 KiB/s for the largest).
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The process-wide budget, shared by the native API and the admin surface.
#[derive(Clone)]
pub struct UnverifiedBodies {
    budget: Arc<Semaphore>,
    total: usize,
}

impl UnverifiedBodies {
    pub fn new(total: usize) -> UnverifiedBodies {
        UnverifiedBodies {
            budget: Arc::new(Semaphore::new(total.min(Semaphore::MAX_PERMITS))),
            total,
        }
    }

    /// Bytes of the budget not held by a body now.
    pub fn available(&self) -> usize {
        self.budget.available_permits()
    }

    /// Reads `body` whole, its share of the budget held until this returns: the body is then
    /// either refused or checked against its signature by the caller. The share (the declared
    /// `Content-Length`, or [`MAX_BODY`] without one) is taken before a byte is read, and the
    /// buffer allocated at that size.
    pub async fn read(&self, body: Body, declared: Option<u64>) -> Result<Bytes, AuthError> {
        if declared.is_some_and(|n| n > MAX_BODY as u64) {
            return Err(refused(body, declared, too_large()).await);
        }
        let share = declared.map_or(MAX_BODY, |n| n as usize);
        let mut held = Held {
            budget: &self.budget,
            bytes: 0,
        };
        // A request without a body (a GET, a DELETE) takes nothing. One past the budget is
        // refused unread: reading past it would hold its connection's buffer for as long.
        if share > 0 {
            held.take(share, self.total)?;
        }
        let read = async {
            let mut stream = body.into_data_stream();
            let mut buf = BytesMut::with_capacity(share);
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| {
                    match crate::http::StalledBody::in_chain(e.into_inner().as_ref()) {
                        Some(stalled) => AuthError::Stalled(stalled.secs),
                        None => AuthError::Malformed("the request body was cut short".into()),
                    }
                })?;
                // Within the share, so the buffer never grows past what was charged (hyper
                // holds a body to its Content-Length; the share of one without is the bound).
                if buf.len() + chunk.len() > share {
                    return Err(too_large());
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(buf.freeze())
        };
        tokio::time::timeout(DEADLINE, read)
            .await
            .map_err(|_| AuthError::Stalled(DEADLINE.as_secs()))?
    }
}

/// Bodies refused as too large are read past and dropped, up to this many bytes, so that the
/// client, still sending, hears the refusal instead of a reset connection.
const DRAIN_LIMIT: u64 = 4 * 1024 * 1024;
/// The longest that reading past a refused body may take.
const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// `refusal`, once the body it refuses has been read past and dropped, where its declared
/// length is small enough to be worth it; nothing of it is kept. Larger or slower bodies are
/// left unread: the refusal closes the connection.
async fn refused(body: Body, declared: Option<u64>, refusal: AuthError) -> AuthError {
    if declared.is_some_and(|n| n <= DRAIN_LIMIT) {
        let mut stream = body.into_data_stream();
        let drain = async { while let Some(Ok(_)) = stream.next().await {} };
        let _ = tokio::time::timeout(DRAIN_DEADLINE, drain).await;
    }
    refusal
}

fn too_large() -> AuthError {
    AuthError::Malformed(format!(
        "a body signed without x-amz-content-sha256 is at most {MAX_BODY} bytes; for larger bodies send x-amz-content-sha256: UNSIGNED-PAYLOAD (curl: -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD') or the body's SHA-256, and sign it"
    ))
}

/// The part of the budget one body holds, given back when it is dropped.
struct Held<'a> {
    budget: &'a Semaphore,
    bytes: usize,
}

impl Held<'_> {
    fn take(&mut self, n: usize, total: usize) -> Result<(), AuthError> {
        let permits = u32::try_from(n).map_err(|_| AuthError::Busy(total))?;
        match self.budget.try_acquire_many(permits) {
            Ok(p) => {
                p.forget();
                self.bytes += n;
                crate::metrics::unverified_body_bytes(n as f64);
                Ok(())
            }
            Err(_) => {
                // Logged as every refusal is, on the audit target, by the caller.
                crate::metrics::unverified_body_refused();
                Err(AuthError::Busy(total))
            }
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.budget.add_permits(self.bytes);
        crate::metrics::unverified_body_bytes(-(self.bytes as f64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_is_charged_while_read_and_the_budget_given_back() {
        let bodies = UnverifiedBodies::new(10);
        let got = bodies
            .read(Body::from("0123456789"), Some(10))
            .await
            .unwrap();
        assert_eq!(&got[..], b"0123456789");
        assert_eq!(bodies.available(), 10);
    }

    #[tokio::test]
    async fn a_body_over_the_budget_is_refused_and_holds_nothing() {
        let bodies = UnverifiedBodies::new(10);
        let e = bodies.read(Body::from("0123456789A"), Some(11)).await;
        assert_eq!(e.unwrap_err(), AuthError::Busy(10));
        assert_eq!(bodies.available(), 10);
    }

    #[tokio::test]
    async fn a_body_without_a_length_takes_the_largest_share() {
        let bodies = UnverifiedBodies::new(MAX_BODY + 5);
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, std::io::Error>>();
        let first = {
            let bodies = bodies.clone();
            tokio::spawn(async move { bodies.read(Body::from_stream(rx), None).await })
        };
        while bodies.available() != 5 {
            tokio::task::yield_now().await;
        }
        let e = bodies.read(Body::from("123456"), Some(6)).await;
        assert_eq!(e.unwrap_err(), AuthError::Busy(MAX_BODY + 5));
        tx.unbounded_send(Ok(Bytes::from_static(b"abc"))).unwrap();
        drop(tx);
        assert_eq!(&first.await.unwrap().unwrap()[..], b"abc");
        assert_eq!(bodies.available(), MAX_BODY + 5);
    }

    #[tokio::test]
    async fn bodies_in_flight_share_one_budget() {
        let bodies = UnverifiedBodies::new(8);
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, std::io::Error>>();
        tx.unbounded_send(Ok(Bytes::from_static(b"12345"))).unwrap();
        let first = {
            let bodies = bodies.clone();
            tokio::spawn(async move { bodies.read(Body::from_stream(rx), Some(5)).await })
        };
        while bodies.available() != 3 {
            tokio::task::yield_now().await;
        }
        // The second body finds 3 bytes left of 8 and is refused; the first is not disturbed.
        let e = bodies.read(Body::from("1234"), Some(4)).await;
        assert_eq!(e.unwrap_err(), AuthError::Busy(8));
        drop(tx);
        assert_eq!(&first.await.unwrap().unwrap()[..], b"12345");
        assert_eq!(bodies.available(), 8);
    }

    #[tokio::test]
    async fn a_declared_length_is_charged_before_a_byte_is_read() {
        let bodies = UnverifiedBodies::new(10);
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, std::io::Error>>();
        let first = {
            let bodies = bodies.clone();
            tokio::spawn(async move { bodies.read(Body::from_stream(rx), Some(8)).await })
        };
        while bodies.available() != 2 {
            tokio::task::yield_now().await;
        }
        let e = bodies.read(Body::from("123"), Some(3)).await;
        assert_eq!(e.unwrap_err(), AuthError::Busy(10));
        tx.unbounded_send(Ok(Bytes::from_static(b"12345678")))
            .unwrap();
        drop(tx);
        assert_eq!(first.await.unwrap().unwrap().len(), 8);
        assert_eq!(bodies.available(), 10);
    }

    #[tokio::test]
    async fn a_request_without_a_body_takes_nothing_even_when_the_budget_is_spent() {
        let bodies = UnverifiedBodies::new(4);
        let (_tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, std::io::Error>>();
        let holder = {
            let bodies = bodies.clone();
            tokio::spawn(async move { bodies.read(Body::from_stream(rx), Some(4)).await })
        };
        while bodies.available() != 0 {
            tokio::task::yield_now().await;
        }
        let empty = Body::empty();
        let declared = http_body::Body::size_hint(&empty).exact();
        assert_eq!(declared, Some(0));
        assert!(bodies.read(empty, declared).await.unwrap().is_empty());
        holder.abort();
    }

    #[tokio::test]
    async fn a_declared_length_over_the_bound_is_refused_before_reading() {
        let bodies = UnverifiedBodies::new(DEFAULT_BUDGET);
        let e = bodies
            .read(Body::from("x"), Some(MAX_BODY as u64 + 1))
            .await
            .unwrap_err();
        assert_eq!(e.code(), "AuthorizationHeaderMalformed");
    }
}
