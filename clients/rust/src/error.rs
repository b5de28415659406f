//! What a request to fencegate can end in: one variant for each refusal a worker acts on
//! differently, and the rest by code.

use std::time::Duration;

/// An error from fencegate or from the way to it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The write's token is below the scope's highest: a newer holder exists. Stop working;
    /// retrying with the same token can never succeed.
    #[error("stale fencing token {token}: the highest recorded is {highest}; a newer holder exists, stop writing")]
    Stale { token: u64, highest: u64 },
    /// The bucket requires a token and the request had none.
    #[error("fencing token required: {message}")]
    TokenRequired { message: String },
    /// The token is further above the scope's highest than the bucket's `max_token_jump`.
    #[error("token jump too large: {message}")]
    TokenJumpTooLarge { message: String },
    /// Someone else holds the lease; acquire again after `retry_after`, or acquire with
    /// [`crate::AcquireOptions::wait`].
    #[error("lease held by {holder}; retry after {retry_after:?}")]
    Held {
        holder: String,
        retry_after: Duration,
    },
    /// The lease was lost (a renewal failed or its TTL passed) before this write: nothing was
    /// sent. Someone else may hold the lock now.
    #[error("lease {name} was lost before this write; nothing was sent. Acquire it again")]
    LeaseLost { name: String },
    /// The key or the lease may not do this (403), or the request is not signed as the server
    /// requires (401).
    #[error("fencegate refused access ({status} {code}): {message}")]
    Denied {
        status: u16,
        code: String,
        message: String,
    },
    /// A bucket or key this client will not send: a `.` or `..` path segment, which HTTP
    /// clients resolve away before sending (the request would reach another key, or another
    /// bucket), and which fencegate refuses anyway.
    #[error("invalid key {key:?}: {message}")]
    InvalidKey { key: String, message: String },
    /// The object (`NoSuchKey`) or the bucket (`NoSuchBucket`) does not exist.
    #[error("{code}: {message}")]
    NotFound { code: String, message: String },
    /// Any other refusal, by its code (docs/reference.md lists them all).
    #[error("fencegate answered {status} {code}: {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// The answer was a redirect (3xx), which this client never follows: fencegate answers
    /// none, so something else answered (a proxy, a login page, a moved host), and following
    /// it would send the request's body and secrets there. `location` is where it pointed
    /// (empty without a `Location` header); point the client at fencegate's own URL.
    #[error("{status} redirect to {location:?} not followed: fencegate never redirects, so something else answered; point the client at fencegate's own URL")]
    Redirected { status: u16, location: String },
    #[error("cannot reach fencegate: {0}")]
    Http(#[from] reqwest::Error),
    #[error("cannot sign the request: {0}")]
    Signing(String),
}

impl Error {
    /// fencegate's error code (`StaleFencingToken`, `LeaseHeld`, ...), where it answered one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Stale { .. } => Some("StaleFencingToken"),
            Error::TokenRequired { .. } => Some("FencingTokenRequired"),
            Error::TokenJumpTooLarge { .. } => Some("TokenJumpTooLarge"),
            Error::Held { .. } => Some("LeaseHeld"),
            Error::InvalidKey { .. } => Some("InvalidKey"),
            Error::Denied { code, .. } | Error::Api { code, .. } | Error::NotFound { code, .. } => {
                Some(code.as_str()).filter(|c| !c.is_empty())
            }
            Error::LeaseLost { .. }
            | Error::Redirected { .. }
            | Error::Http(_)
            | Error::Signing(_) => None,
        }
    }
}

/// The longest `Location` an error repeats: enough to recognise the host and path.
const LOCATION_SHOWN: usize = 300;

/// The error a 3xx answer is: its status and where it pointed.
pub(crate) fn redirected(resp: &reqwest::Response) -> Error {
    let location = resp
        .headers()
        .get(reqwest::header::LOCATION)
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .chars()
                .take(LOCATION_SHOWN)
                .collect()
        })
        .unwrap_or_default();
    Error::Redirected {
        status: resp.status().as_u16(),
        location,
    }
}

#[derive(serde::Deserialize)]
struct ErrorBody {
    error: String,
    #[serde(default)]
    message: String,
    highest: Option<u64>,
    holder: Option<String>,
}

/// The error a refusal's answer describes. `token` is the one the request carried; `head`:
/// the request was a HEAD, whose refusals have no body.
pub(crate) async fn refusal(resp: reqwest::Response, token: Option<u64>, head: bool) -> Error {
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(1), Duration::from_secs);
    let highest_header = resp
        .headers()
        .get("fencing-token-highest")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let text = resp.text().await.unwrap_or_default();
    let Ok(b) = serde_json::from_str::<ErrorBody>(&text) else {
        if !head {
            // Not fencegate's answer (a proxy's page?): its status and its first words.
            let shown: String = text.chars().take(200).collect();
            return Error::Api {
                status,
                code: String::new(),
                message: format!("an answer without fencegate's error body: {shown}"),
            };
        }
        // A HEAD's refusal has no body: its status is all there is.
        return match status {
            404 => Error::NotFound {
                code: "NoSuchKey".into(),
                message: "no such object".into(),
            },
            401 | 403 => Error::Denied {
                status,
                code: String::new(),
                message: "refused without a body (a HEAD request)".into(),
            },
            _ => Error::Api {
                status,
                code: String::new(),
                message: "no error body".into(),
            },
        };
    };
    match b.error.as_str() {
        "StaleFencingToken" => Error::Stale {
            token: token.unwrap_or_default(),
            highest: b.highest.or(highest_header).unwrap_or_default(),
        },
        "FencingTokenRequired" => Error::TokenRequired { message: b.message },
        "TokenJumpTooLarge" => Error::TokenJumpTooLarge { message: b.message },
        "LeaseHeld" => Error::Held {
            holder: b.holder.unwrap_or_default(),
            retry_after,
        },
        "NoSuchKey" | "NoSuchBucket" => Error::NotFound {
            code: b.error,
            message: b.message,
        },
        _ if status == 401 || status == 403 => Error::Denied {
            status,
            code: b.error,
            message: b.message,
        },
        _ => Error::Api {
            status,
            code: b.error,
            message: b.message,
        },
    }
}
