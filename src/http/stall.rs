//! The listeners' backstop for request bodies: every body a connection sends is cut off after
//! a stretch without bytes, whoever reads it. Handlers bound the bodies they stream with their
//! own, shorter timer (`body_idle_timeout_secs`, 408 with a message); this one also covers what
//! is read before any handler, such as a body buffered to check its signature, so a client
//! trickling one byte a minute cannot hold a connection, or a shutdown, forever.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

/// The error a stalled body ends with.
#[derive(Debug, thiserror::Error)]
#[error("the request body stalled: no bytes for {secs} s")]
pub struct StalledBody {
    pub secs: u64,
}

impl StalledBody {
    /// The stall somewhere in `error`'s chain (bodies are wrapped by each layer they cross).
    pub fn in_chain<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a StalledBody> {
        let mut current = Some(error);
        while let Some(e) = current {
            if let Some(stalled) = e.downcast_ref::<StalledBody>() {
                return Some(stalled);
            }
            current = e.source();
        }
        None
    }
}

/// Wraps every request's body in [`IdleBody`].
pub async fn bound_bodies(State(idle): State<Duration>, req: Request, next: Next) -> Response {
    next.run(req.map(|b| Body::new(IdleBody::new(b, idle))))
        .await
}

/// A body that fails with [`StalledBody`] when no frame arrives for `idle`.
pub struct IdleBody {
    inner: Body,
    idle: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl IdleBody {
    pub fn new(inner: Body, idle: Duration) -> IdleBody {
        IdleBody {
            inner,
            idle,
            sleep: None,
        }
    }
}

impl http_body::Body for IdleBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.sleep = None;
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        let idle = this.idle;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(StalledBody {
                secs: idle.as_secs(),
            })))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
