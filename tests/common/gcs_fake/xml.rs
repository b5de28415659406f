//! The gcs fake's XML bodies, modelling GCS's XML API for the gcs backend's tests (no emulator
//! honours generation preconditions): `<Error>` answers, `<ComposeRequest>` parsing, and
//! object listings (`ListBucketResult`, list-type=2 and the older form) in byte order, with
//! common prefixes never repeated across pages.

use super::ops::param;
use super::Obj;
use axum::body::{Body, Bytes};
use axum::http::{header, Response, StatusCode};
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use quick_xml::events::Event;
use std::collections::BTreeMap;
use std::time::UNIX_EPOCH;

const DECL: &str = "<?xml version='1.0' encoding='UTF-8'?>";

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// `<Error><Code>…</Code><Message>…</Message><Details>…</Details>EXTRA</Error>`; `extra` is
/// XML already (SignatureDoesNotMatch's StringToSign, say).
pub fn error_body(code: &str, message: &str, details: &str, extra: &str) -> String {
    let details = if details.is_empty() {
        String::new()
    } else {
        format!("<Details>{}</Details>", escape(details))
    };
    format!(
        "{DECL}<Error><Code>{code}</Code><Message>{}</Message>{details}{extra}</Error>",
        escape(message)
    )
}

/// An XML error answer as GCS's XML API gives it.
pub fn error(status: StatusCode, code: &str, message: &str, details: &str) -> Response<Body> {
    error_with(status, code, message, details, "")
}

pub fn error_with(
    status: StatusCode,
    code: &str,
    message: &str,
    details: &str,
    extra: &str,
) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/xml; charset=UTF-8")
        .body(Body::from(error_body(code, message, details, extra)))
        .unwrap()
}

/// 404 `NoSuchKey`, with GCS's `No such object: bucket/name` details.
pub fn not_found_key(bucket: &str, name: &str) -> Response<Body> {
    error(
        StatusCode::NOT_FOUND,
        "NoSuchKey",
        "The specified key does not exist.",
        &format!("No such object: {bucket}/{name}"),
    )
}

pub fn not_found_bucket() -> Response<Body> {
    error(
        StatusCode::NOT_FOUND,
        "NoSuchBucket",
        "The specified bucket does not exist.",
        "",
    )
}

pub fn precondition_failed(details: String) -> Response<Body> {
    error(
        StatusCode::PRECONDITION_FAILED,
        "PreconditionFailed",
        "At least one of the pre-conditions you specified did not hold.",
        &details,
    )
}

pub fn invalid(message: &str) -> Response<Body> {
    error(StatusCode::BAD_REQUEST, "InvalidArgument", message, "")
}

/// One `<Component>` of a compose request.
#[derive(Debug, Default)]
pub struct Component {
    pub name: String,
    pub generation: Option<i64>,
    pub if_generation_match: Option<i64>,
}

/// `<ComposeRequest><Component><Name>n</Name><Generation>g</Generation>?
/// <IfGenerationMatch>g</IfGenerationMatch>?</Component>…</ComposeRequest>` (IfGenerationMatch
/// also taken inside `<ObjectPreconditions>`).
pub fn parse_compose(body: &[u8]) -> Result<Vec<Component>, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the compose request is not UTF-8")?;
    let mut reader = quick_xml::Reader::from_str(text);
    let (mut path, mut out, mut value) = (Vec::<String>::new(), Vec::new(), String::new());
    let bad = |e: String| format!("the compose request is not a ComposeRequest: {e}");
    loop {
        match reader.read_event().map_err(|e| bad(e.to_string()))? {
            Event::Start(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                if name == "Component" {
                    out.push(Component::default());
                }
                path.push(name);
                value.clear();
            }
            Event::Text(t) => value += &t.decode().map_err(|e| bad(e.to_string()))?,
            Event::GeneralRef(r) => {
                let c = match r.resolve_char_ref().map_err(|e| bad(e.to_string()))? {
                    Some(c) => c,
                    None => match r.decode().map_err(|e| bad(e.to_string()))?.as_ref() {
                        "amp" => '&',
                        "lt" => '<',
                        "gt" => '>',
                        "quot" => '"',
                        "apos" => '\'',
                        other => return Err(bad(format!("unknown entity &{other};"))),
                    },
                };
                value.push(c);
            }
            Event::End(_) => {
                let at: Vec<&str> = path.iter().map(String::as_str).collect();
                let v = std::mem::take(&mut value);
                let num = |v: &str| v.trim().parse::<i64>().map_err(|_| bad(format!("{v:?}")));
                match (at.as_slice(), out.last_mut()) {
                    (["ComposeRequest", "Component", "Name"], Some(c)) => c.name = v,
                    (["ComposeRequest", "Component", "Generation"], Some(c)) => {
                        c.generation = Some(num(&v)?)
                    }
                    (["ComposeRequest", "Component", .., "IfGenerationMatch"], Some(c)) => {
                        c.if_generation_match = Some(num(&v)?)
                    }
                    _ => {}
                }
                path.pop();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if out.iter().any(|c| c.name.is_empty()) {
        return Err(bad("a Component without a Name".into()));
    }
    Ok(out)
}

fn rfc3339(t: std::time::SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap();
    let dt = time::OffsetDateTime::from_unix_timestamp(d.as_secs() as i64).unwrap();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        dt.year(),
        u8::from(dt.month()),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        d.subsec_millis()
    )
}

/// One entry of a page: an object or a common prefix.
enum Entry<'a> {
    Object(&'a str, &'a Obj),
    Prefix(String),
}

/// `GET /bucket[?list-type=2&prefix=&delimiter=&max-keys=&continuation-token=&start-after=]`
/// (without list-type=2: the older form, `marker` / `NextMarker`).
pub fn list(
    objects: &BTreeMap<(String, String), Obj>,
    bucket: &str,
    params: &[(String, String)],
) -> Response<Body> {
    let v2 = param(params, "list-type") == Some("2");
    let prefix = param(params, "prefix").unwrap_or("");
    let delimiter = param(params, "delimiter").filter(|d| !d.is_empty());
    let max_keys = match param(params, "max-keys").map(str::parse::<usize>) {
        None => 1000,
        Some(Ok(n)) => n.min(1000),
        Some(Err(_)) => return invalid("max-keys is not a number"),
    };
    let url = param(params, "encoding-type") == Some("url");
    // Where the page starts: after a name, and past every name under a common prefix
    // already given (the continuation token says which).
    let (after, skip_prefix) = match (v2, param(params, "continuation-token")) {
        (true, Some(token)) => {
            let decoded = B64URL
                .decode(token)
                .ok()
                .and_then(|b| String::from_utf8(b).ok());
            match decoded.as_deref().and_then(|d| d.split_at_checked(2)) {
                Some(("k:", name)) => (Some(name.to_string()), None),
                Some(("p:", p)) => (Some(p.to_string()), Some(p.to_string())),
                _ => return invalid("continuation-token is not one this bucket gave"),
            }
        }
        (true, None) => (param(params, "start-after").map(String::from), None),
        (false, _) => (param(params, "marker").map(String::from), None),
    };
    let start = after.clone().unwrap_or_default().max(prefix.to_string());
    let mut entries: Vec<Entry> = Vec::new();
    let mut truncated = false;
    for ((_, name), obj) in objects.range((bucket.to_string(), start)..) {
        if !name.starts_with(prefix) {
            if name.as_str() > prefix {
                break;
            }
            continue;
        }
        if after.as_deref().is_some_and(|a| name.as_str() <= a)
            || skip_prefix.as_deref().is_some_and(|p| name.starts_with(p))
        {
            continue;
        }
        let rest = &name[prefix.len()..];
        let entry = match delimiter.and_then(|d| rest.find(d).map(|i| i + d.len())) {
            Some(end) => {
                let p = format!("{prefix}{}", &rest[..end]);
                if matches!(entries.last(), Some(Entry::Prefix(last)) if *last == p) {
                    continue;
                }
                Entry::Prefix(p)
            }
            None => Entry::Object(name, obj),
        };
        if entries.len() == max_keys {
            truncated = true;
            break;
        }
        entries.push(entry);
    }
    let enc = |s: &str| {
        if url {
            percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
        } else {
            escape(s)
        }
    };
    let tag = |name: &str, v: &str| {
        if v.is_empty() {
            format!("<{name}/>")
        } else {
            format!("<{name}>{}</{name}>", enc(v))
        }
    };
    let mut xml = format!(
        "{DECL}<ListBucketResult xmlns='http://doc.s3.amazonaws.com/2006-03-01'>{}{}",
        tag("Name", bucket),
        tag("Prefix", prefix)
    );
    if let Some(d) = delimiter {
        xml += &tag("Delimiter", d);
    }
    if url {
        xml += "<EncodingType>url</EncodingType>";
    }
    let next = entries.last().filter(|_| truncated).map(|e| match e {
        Entry::Object(name, _) => (format!("k:{name}"), name.to_string()),
        Entry::Prefix(p) => (format!("p:{p}"), p.clone()),
    });
    if v2 {
        if let Some(t) = param(params, "continuation-token") {
            xml += &format!("<ContinuationToken>{}</ContinuationToken>", escape(t));
        }
        if let Some(s) = param(params, "start-after") {
            xml += &tag("StartAfter", s);
        }
        xml += &format!(
            "<KeyCount>{}</KeyCount><MaxKeys>{max_keys}</MaxKeys>",
            entries.len()
        );
        xml += &format!("<IsTruncated>{truncated}</IsTruncated>");
        if let Some((token, _)) = &next {
            xml += &format!(
                "<NextContinuationToken>{}</NextContinuationToken>",
                B64URL.encode(token)
            );
        }
    } else {
        xml += &tag("Marker", param(params, "marker").unwrap_or(""));
        if let Some((_, marker)) = &next {
            xml += &tag("NextMarker", marker);
        }
        xml += &format!("<IsTruncated>{truncated}</IsTruncated>");
    }
    let mut prefixes = String::new();
    for e in &entries {
        match e {
            Entry::Object(name, o) => {
                xml += &format!(
                    "<Contents>{}<Generation>{}</Generation><MetaGeneration>{}</MetaGeneration>\
                     <LastModified>{}</LastModified><ETag>{}</ETag><Size>{}</Size></Contents>",
                    tag("Key", name),
                    o.generation,
                    o.metageneration,
                    rfc3339(o.updated),
                    o.etag(),
                    o.data.len()
                )
            }
            Entry::Prefix(p) => {
                prefixes += &format!("<CommonPrefixes>{}</CommonPrefixes>", tag("Prefix", p))
            }
        }
    }
    xml += &prefixes;
    xml += "</ListBucketResult>";
    Response::builder()
        .header(header::CONTENT_TYPE, "application/xml; charset=UTF-8")
        .body(Body::from(Bytes::from(xml)))
        .unwrap()
}
