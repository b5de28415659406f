//! The HTTP kit every surface shares (native API, S3 gateway, admin), as garage's `api/common`
//! serves its APIs: fencegate's request headers read into the gate's types (`headers.rs`),
//! declared digests checked as a body streams (`digests.rs`), the listener's stalled-body
//! cut-off (`stall.rs`), what becomes of a body a handler did not read (`unread.rs`),
//! body-stream errors told apart (`body.rs`), JSON error answers (`error.rs`) and request ids. It names no surface: the surfaces import it.

pub mod body;
pub mod digests;
pub mod error;
pub mod headers;
pub mod stall;
pub mod unread;

pub use stall::{bound_bodies, StalledBody};

/// A new request id: 16 upper-case hex digits, as S3's are.
pub fn request_id() -> String {
    format!("{:016X}", rand::random::<u64>())
}
