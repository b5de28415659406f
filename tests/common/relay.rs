//! A TCP relay that can hold a request in flight: the writes a client sends while `hold` is set
//! are kept and delivered whole only on `release`, on an upstream connection kept open. It
//! plays the network that delays a commit past its deadline, for the store backends whose
//! commits carry an expiry (a SAS on azure, a signed URL on gcs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A TCP relay that, while `hold` is set, keeps the writes clients send and delivers them only on
/// `release`, on an upstream connection it keeps open: a request held in flight that reaches
/// the service whole, long after its sender gave up.
pub struct Relay {
    pub port: u16,
    pub hold: Arc<AtomicBool>,
    pub release: tokio::sync::watch::Sender<bool>,
}

impl Relay {
    pub async fn start(upstream: std::net::SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = Arc::new(AtomicBool::new(false));
        let (release, released) = tokio::sync::watch::channel(false);
        let holding = hold.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (hold, mut released) = (holding.clone(), released.clone());
                tokio::spawn(async move {
                    let Ok(up) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut ur, mut uw) = up.into_split();
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut ur, &mut cw).await;
                    });
                    let (mut kept, mut keeping, mut buf) = (Vec::new(), false, vec![0u8; 65536]);
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        // Only writes: the reads before a commit go through.
                        keeping |= hold.load(Ordering::SeqCst) && buf[..n].starts_with(b"PUT ");
                        if keeping {
                            kept.extend_from_slice(&buf[..n]);
                        } else if uw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                    if keeping {
                        let _ = released.wait_for(|r| *r).await;
                        let _ = uw.write_all(&kept).await;
                        // Open while the service reads and applies it.
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    }
                });
            }
        });
        Relay {
            port,
            hold,
            release,
        }
    }
}
