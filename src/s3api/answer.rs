//! What every S3 answer carries, whoever built it (s3s, an operation, a refusal before s3s):
//! a request id in `x-amz-request-id`, repeated as `<RequestId>` in an error's XML so that a
//! client's error report and the server's log name the same request, `Content-Type:
//! application/xml` on every error document (s3s drops it when an error carries headers of its
//! own, as `Fencing-Token-Highest`), no body on a 304, and 206 on an answer with a
//! Content-Range (s3s makes it so for GetObject only; HeadObject with a `partNumber` answers
//! one too). `error` writes the errors fencegate answers before or around s3s.

use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, StatusCode};

/// Error bodies are small XML documents; anything larger is passed through untouched.
const MAX_ERROR_BODY: usize = 64 * 1024;

pub use crate::http::request_id;

/// An S3 error document, for the refusals made before s3s reads a request.
pub fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>{}</Message></Error>",
        escape(code),
        escape(message)
    );
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    crate::metrics::codes::ErrorCode::mark(&mut resp, code);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    resp
}

/// What AWS says with the errors s3s answers without a message.
const MESSAGES: [(&str, &str); 3] = [
    ("SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your key and signing method."),
    ("InvalidBucketName", "The specified bucket is not valid: bucket names follow S3's naming rules."),
    ("KeyTooLongError", "Your key is too long: keys are at most 1024 bytes."),
];

/// The error document, with AWS's message added where s3s gave none.
fn with_message(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains("<Message>") {
        return text.into();
    }
    let found = MESSAGES
        .iter()
        .find(|(code, _)| text.contains(&format!("<Code>{code}</Code>")));
    match (found, text.find("</Code>")) {
        (Some((_, message)), Some(at)) => {
            let at = at + "</Code>".len();
            format!("{}<Message>{message}</Message>{}", &text[..at], &text[at..]).into()
        }
        _ => text.into(),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Stamps `id` on an answer.
pub async fn finish(resp: Response, id: &str) -> Response {
    let (mut parts, body) = resp.into_parts();
    if let Ok(v) = HeaderValue::from_str(id) {
        parts.headers.insert("x-amz-request-id", v.clone());
        parts.headers.insert("x-amz-id-2", v);
    }
    if parts.status == StatusCode::OK && parts.headers.contains_key(http::header::CONTENT_RANGE) {
        parts.status = StatusCode::PARTIAL_CONTENT;
    }
    if parts.status == StatusCode::NOT_MODIFIED {
        parts.headers.remove(http::header::CONTENT_TYPE);
        parts.headers.remove(http::header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::empty());
    }
    // An error without a type may still be s3s's XML, whose headers an error of ours replaced.
    let typed = parts.headers.get(http::header::CONTENT_TYPE);
    let maybe_xml = typed.is_none_or(|t| t.as_bytes().starts_with(b"application/xml"));
    if !parts.status.is_client_error() && !parts.status.is_server_error() || !maybe_xml {
        return Response::from_parts(parts, body);
    }
    let bytes = match axum::body::to_bytes(body, MAX_ERROR_BODY).await {
        Ok(bytes) => bytes,
        Err(_) => return Response::from_parts(parts, Body::empty()),
    };
    let text = String::from_utf8_lossy(&bytes);
    if !text.contains("<Error>") {
        return Response::from_parts(parts, Body::from(bytes));
    }
    parts.headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    let text = with_message(&text);
    let stamped = match text.rfind("</Error>") {
        Some(end) if !text.contains("<RequestId>") => {
            format!(
                "{}<RequestId>{id}</RequestId>{}",
                &text[..end],
                &text[end..]
            )
        }
        _ => text.into_owned(),
    };
    parts.headers.insert(
        http::header::CONTENT_LENGTH,
        HeaderValue::from(stamped.len()),
    );
    let code = stamped
        .split_once("<Code>")
        .and_then(|(_, rest)| rest.split_once("</Code>"))
        .map(|(code, _)| code.to_string());
    let mut resp = Response::from_parts(parts, Body::from(stamped));
    if let Some(code) = code {
        crate::metrics::codes::ErrorCode::mark(&mut resp, &code);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(resp: Response) -> String {
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn xml(status: u16, body: &str) -> Response {
        Response::builder()
            .status(status)
            .header("content-type", "application/xml")
            .header("content-length", body.len())
            .body(Body::from(body.to_string()))
            .unwrap()
    }

    #[tokio::test]
    async fn errors_carry_the_id_of_their_header() {
        let resp = finish(xml(404, "<Error><Code>NoSuchKey</Code></Error>"), "ABC").await;
        assert_eq!(resp.headers()["x-amz-request-id"], "ABC");
        assert_eq!(resp.headers()["content-length"], "63");
        assert_eq!(
            body_of(resp).await,
            "<Error><Code>NoSuchKey</Code><RequestId>ABC</RequestId></Error>"
        );
    }

    #[tokio::test]
    async fn an_error_whose_headers_were_replaced_is_still_typed_as_xml() {
        let bare = Response::builder()
            .status(409)
            .header("fencing-token-highest", "5")
            .body(Body::from(
                "<?xml version=\"1.0\"?><Error><Code>StaleFencingToken</Code></Error>",
            ))
            .unwrap();
        let resp = finish(bare, "ID").await;
        assert_eq!(resp.headers()["content-type"], "application/xml");
        assert_eq!(resp.headers()["fencing-token-highest"], "5");
        assert!(body_of(resp)
            .await
            .ends_with("<RequestId>ID</RequestId></Error>"));
        let ours = finish(
            error(StatusCode::FORBIDDEN, "AccessDenied", "a <b> & c"),
            "X",
        )
        .await;
        assert_eq!(ours.headers()["content-type"], "application/xml");
        assert!(body_of(ours)
            .await
            .contains("<Message>a &lt;b&gt; &amp; c</Message><RequestId>X</RequestId>"));
    }

    #[tokio::test]
    async fn errors_s3s_sends_without_a_message_get_aws_message() {
        let resp = finish(
            xml(403, "<Error><Code>SignatureDoesNotMatch</Code></Error>"),
            "S",
        )
        .await;
        assert_eq!(
            body_of(resp).await,
            "<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match the signature you provided. Check your key and signing method.</Message><RequestId>S</RequestId></Error>"
        );
        let resp = finish(
            xml(400, "<Error><Code>InvalidBucketName</Code></Error>"),
            "B",
        )
        .await;
        assert!(body_of(resp)
            .await
            .contains("<Message>The specified bucket is not valid"));
        // A message s3s gave is kept, and a code without a known message is left as it is.
        let kept = finish(
            xml(
                400,
                "<Error><Code>KeyTooLongError</Code><Message>mine</Message></Error>",
            ),
            "K",
        )
        .await;
        assert!(body_of(kept).await.contains("<Message>mine</Message>"));
        let bare = finish(xml(404, "<Error><Code>NoSuchKey</Code></Error>"), "N").await;
        assert!(!body_of(bare).await.contains("<Message>"));
    }

    #[tokio::test]
    async fn successes_and_not_modified_keep_or_lose_their_body() {
        let ok = finish(xml(200, "<ListBucketResult/>"), "A").await;
        assert_eq!(ok.headers()["x-amz-request-id"], "A");
        assert_eq!(body_of(ok).await, "<ListBucketResult/>");
        let not_modified = finish(xml(304, "<Error><Code>NotModified</Code></Error>"), "B").await;
        assert!(not_modified.headers().get("content-type").is_none());
        assert_eq!(body_of(not_modified).await, "");
    }

    #[test]
    fn ids_look_like_s3s() {
        let id = request_id();
        assert_eq!(id.len(), 16);
        assert!(id
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()));
    }
}
