//! A lingering close, as nginx's `lingering_close`: when fencegate closes a connection whose
//! client is still sending (an answer with `Connection: close` to a request whose body was not
//! read, `http/unread.rs`), closing the socket at once would make the kernel answer the unread
//! bytes with a reset, and the client could lose the answer it was sent. So the connection's
//! write side is shut (the client sees the end of the answer) and what the client still sends
//! is read and dropped, for at most [`LINGER_TIME`] and [`LINGER_MAX`] bytes, before the socket
//! closes. The connection keeps its place in the connection budget until then.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

/// Longest a closed connection is read from.
pub const LINGER_TIME: Duration = Duration::from_secs(2);
/// Most bytes read from it.
pub const LINGER_MAX: usize = 4 * 1024 * 1024;

/// A TCP connection that lingers when dropped (in a task of its own), holding its permit and
/// counted as open until then.
pub struct Lingering {
    stream: Option<TcpStream>,
    permit: Option<(OwnedSemaphorePermit, crate::metrics::OpenConnection)>,
}

impl Lingering {
    pub fn new(stream: TcpStream, permit: OwnedSemaphorePermit) -> Lingering {
        Lingering {
            stream: Some(stream),
            permit: Some((permit, crate::metrics::OpenConnection::new())),
        }
    }

    fn stream(&mut self) -> &mut TcpStream {
        self.stream.as_mut().expect("present until dropped")
    }
}

impl AsyncRead for Lingering {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(self.stream()).poll_read(cx, buf)
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.stream()).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.stream()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.stream()).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.stream()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_write_vectored())
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let (Some(stream), permit) = (self.stream.take(), self.permit.take()) else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                linger(stream).await;
                drop(permit);
            });
        }
    }
}

/// Shuts the write side, then reads until the client closes, or the time or byte bound.
async fn linger(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let mut buf = vec![0u8; 16 * 1024];
    let mut read = 0;
    let deadline = tokio::time::Instant::now() + LINGER_TIME;
    while read < LINGER_MAX {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => read += n,
            _ => break,
        }
    }
}
