//! What happens to a request body a handler answered without reading to its end: a stale token
//! refused at the early check, an authentication refusal, a 413. The connection must stay in a
//! defined state, whatever the client sent after its head (botocore sends the body in the same
//! write as `Expect: 100-continue`): the next request is never parsed from leftover body bytes.
//!
//! So the rest of such a body is read and dropped when it is small (at most [`DRAIN_MAX`] bytes
//! within [`DRAIN_TIME`]), and the connection carries on; otherwise the answer says
//! `Connection: close`, and the connection is closed after it is sent (the listener lingers,
//! reading what the client still sends, so the client reads the answer instead of a reset:
//! `server/linger.rs`).

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// The most of an unread body read and dropped to keep its connection.
pub const DRAIN_MAX: u64 = 64 * 1024;
/// How long that may take.
pub const DRAIN_TIME: Duration = Duration::from_secs(1);

/// Where a handler's unread body comes back to when the handler drops it.
type Slot = Arc<parking_lot::Mutex<Option<Body>>>;

/// The layer: hands the handler a body that returns its unread rest, then drains or closes.
pub async fn settle_unread_bodies(req: Request, next: Next) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let slot: Slot = Default::default();
    let returning = slot.clone();
    let req = req.map(|inner| {
        Body::new(Returning {
            inner: Some(inner),
            slot: returning,
        })
    });
    let mut resp = next.run(req).await;
    let Some(rest) = slot.lock().take() else {
        return resp;
    };
    if resp.headers().get(header::CONNECTION) == Some(&HeaderValue::from_static("close")) {
        return resp;
    }
    let small = rest.size_hint().upper().is_some_and(|n| n <= DRAIN_MAX);
    let drained = small
        && tokio::time::timeout(DRAIN_TIME, drain(rest, DRAIN_MAX))
            .await
            .is_ok_and(|done| done);
    if !drained {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// Reads `body` to its end, dropping it: true if it ended within `max` bytes, without error.
async fn drain(mut body: Body, max: u64) -> bool {
    let mut read = 0u64;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    read += data.len() as u64;
                    if read > max {
                        return false;
                    }
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// A request body that, dropped before its end, puts its unread rest into the slot.
struct Returning {
    inner: Option<Body>,
    slot: Slot,
}

impl http_body::Body for Returning {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.inner.as_mut() {
            Some(inner) => Pin::new(inner).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            if !inner.is_end_stream() {
                *self.slot.lock() = Some(inner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::put;
    use axum::Router;
    use tower::ServiceExt;

    fn app() -> Router {
        Router::new()
            // Answers at once, never reading the body (an early refusal).
            .route(
                "/refuse",
                put(|| async { (axum::http::StatusCode::CONFLICT, "stale") }),
            )
            .route(
                "/read",
                put(|body: Bytes| async move { body.len().to_string() }),
            )
            .layer(axum::middleware::from_fn(settle_unread_bodies))
    }

    fn put_req(path: &str, body: Vec<u8>) -> Request {
        Request::builder()
            .method("PUT")
            .uri(path)
            .header(header::CONTENT_LENGTH, body.len())
            .body(Body::from(body))
            .unwrap()
    }

    #[tokio::test]
    async fn a_small_unread_body_is_drained_and_the_connection_kept() {
        let resp = app()
            .oneshot(put_req("/refuse", vec![b'x'; 10]))
            .await
            .unwrap();
        assert_eq!(resp.status(), 409);
        assert!(resp.headers().get(header::CONNECTION).is_none());
    }

    #[tokio::test]
    async fn a_large_unread_body_closes_the_connection() {
        let resp = app()
            .oneshot(put_req("/refuse", vec![b'x'; DRAIN_MAX as usize + 1]))
            .await
            .unwrap();
        assert_eq!(resp.status(), 409);
        assert_eq!(resp.headers()[header::CONNECTION], "close");
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_changes_nothing() {
        let resp = app()
            .oneshot(put_req("/read", vec![b'x'; 200_000]))
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert!(resp.headers().get(header::CONNECTION).is_none());
    }
}
