//! The JSON API's object listing (`GET /storage/v1/b/BUCKET/o`), which the gcs backend lists
//! with because its items carry each object's metadata (the XML API's do not): `prefix`,
//! `startOffset` (inclusive), `maxResults` (at most 1000) and `pageToken`, in byte order, as
//! cloud.google.com's "Objects: list" describes them. Anything else is refused as not modelled.

use super::ops::param;
use super::{auth, Inner};
use axum::body::Body;
use axum::http::{header, HeaderMap, Response, StatusCode};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use std::time::SystemTime;

fn json(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json; charset=UTF-8")
        .body(Body::from(value.to_string()))
        .unwrap()
}

fn failure(status: StatusCode, reason: &str, message: &str) -> Response<Body> {
    json(
        status,
        serde_json::json!({"error": {"code": status.as_u16(), "message": message,
            "errors": [{"domain": "global", "reason": reason, "message": message}]}}),
    )
}

fn rfc3339(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        t.month() as u8,
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// `GET /storage/v1/b/BUCKET/o`, authorised by a bearer token.
pub(super) fn list(
    fake: &Inner,
    path: &str,
    params: &[(String, String)],
    headers: &HeaderMap,
    now: SystemTime,
) -> Response<Body> {
    if let Err(resp) = auth::check_bearer(fake, headers, now) {
        return resp;
    }
    let Some(bucket) = path
        .strip_prefix("/storage/v1/b/")
        .and_then(|rest| rest.strip_suffix("/o"))
        .and_then(|b| percent_encoding::percent_decode_str(b).decode_utf8().ok())
    else {
        return failure(
            StatusCode::NOT_IMPLEMENTED,
            "notImplemented",
            &format!("the gcs fake models only the object listing of the JSON API, not {path}"),
        );
    };
    let known = ["prefix", "startOffset", "maxResults", "pageToken"];
    if let Some((p, _)) = params.iter().find(|(p, _)| !known.contains(&p.as_str())) {
        return failure(
            StatusCode::NOT_IMPLEMENTED,
            "notImplemented",
            &format!("the gcs fake does not model the listing parameter {p:?}"),
        );
    }
    let prefix = param(params, "prefix").unwrap_or("");
    let max = match param(params, "maxResults").map(str::parse::<usize>) {
        None => 1000,
        Some(Ok(n)) if n > 0 => n.min(1000),
        Some(_) => return failure(StatusCode::BAD_REQUEST, "invalid", "Invalid maxResults"),
    };
    // The page token is the last name of the page before (opaque to clients).
    let after = match param(params, "pageToken") {
        Some(token) => match B64
            .decode(token)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
        {
            Some(name) => Some(name),
            None => return failure(StatusCode::BAD_REQUEST, "invalid", "Invalid pageToken"),
        },
        None => None,
    };
    let start = param(params, "startOffset").unwrap_or("");
    let store = fake.store.lock().unwrap();
    if !store.buckets.contains(bucket.as_ref()) {
        return failure(
            StatusCode::NOT_FOUND,
            "notFound",
            "The specified bucket does not exist.",
        );
    }
    let mut items = Vec::new();
    let mut next = None;
    let matching = store
        .objects
        .range((bucket.to_string(), String::new())..)
        .take_while(|((b, _), _)| b == bucket.as_ref())
        .filter(|((_, name), _)| name.starts_with(prefix) && name.as_str() >= start)
        .filter(|((_, name), _)| after.as_ref().is_none_or(|a| name > a));
    for ((_, name), o) in matching {
        if items.len() == max {
            next = items
                .last()
                .and_then(|i: &serde_json::Value| i["name"].as_str())
                .map(|n| B64.encode(n));
            break;
        }
        let mut item = serde_json::json!({
            "kind": "storage#object",
            "name": name,
            "bucket": bucket,
            "generation": o.generation.to_string(),
            "metageneration": o.metageneration.to_string(),
            "contentType": o.content_type,
            "size": o.data.len().to_string(),
            "crc32c": B64.encode(o.crc32c.to_be_bytes()),
            "updated": rfc3339(o.updated),
            "etag": B64.encode(o.generation.to_be_bytes()),
        });
        if let Some(md5) = o.md5 {
            item["md5Hash"] = B64.encode(md5).into();
        }
        if let Some(n) = o.component_count {
            item["componentCount"] = n.into();
        }
        if !o.metadata.is_empty() {
            item["metadata"] = serde_json::to_value(&o.metadata).unwrap();
        }
        items.push(item);
    }
    let mut page = serde_json::json!({"kind": "storage#objects"});
    if !items.is_empty() {
        page["items"] = items.into();
    }
    if let Some(token) = next {
        page["nextPageToken"] = token.into();
    }
    json(StatusCode::OK, page)
}
