//! The gcs fake's routing and object operations, modelling GCS's XML API for the gcs backend's
//! tests (no emulator honours generation preconditions): each request is counted, may meet a
//! scripted outage, is authorised (bearer or V4 signature), then answered; every upload,
//! compose and delete checks its precondition and writes under the one store lock, so a race
//! of creators has exactly one winner.

use super::xml::{self, error, invalid, not_found_bucket, not_found_key, precondition_failed};
use super::{auth, crc32c, verify_v4, Inner, Obj};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, Request, Response, StatusCode};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use md5::Digest;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

pub(super) async fn handle(State(fake): State<Arc<Inner>>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let storage = parts.uri.path() != "/token";
    if let Some(delay) = storage.then(|| fake.take_hold(false)).flatten() {
        tokio::time::sleep(delay).await;
    }
    let now = fake.now();
    let mut resp = match axum::body::to_bytes(body, 1 << 30).await {
        Ok(body) => fake.dispatch(&parts, body, now),
        Err(e) => invalid(&format!("the body could not be read: {e}")),
    };
    if let Some(delay) = storage.then(|| fake.take_hold(true)).flatten() {
        tokio::time::sleep(delay).await;
    }
    let date = httpdate::fmt_http_date(now).parse().unwrap();
    resp.headers_mut().insert(header::DATE, date);
    resp
}

/// 501 `NotImplemented`: what the fake does not model is refused, never ignored.
fn not_modelled(what: &str) -> Response<Body> {
    error(
        StatusCode::NOT_IMPLEMENTED,
        "NotImplemented",
        &format!("the gcs fake does not model {what}"),
        "",
    )
}

/// The query's parameters, percent-decoded.
fn params(query: &str) -> Vec<(String, String)> {
    let dec = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (dec(k), dec(v)),
            None => (dec(p), String::new()),
        })
        .collect()
}

pub(super) fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `x-goog-if-generation-match`: Ok(None) when absent.
fn if_generation_match(headers: &HeaderMap) -> Result<Option<i64>, Response<Body>> {
    match headers.get("x-goog-if-generation-match") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .filter(|g| *g >= 0)
            .map(Some)
            .ok_or_else(|| invalid("x-goog-if-generation-match is not a generation")),
    }
}

/// Whether `want` (0: no live object) holds for `live`; the 412 when it does not.
fn check_generation(want: Option<i64>, live: Option<&Obj>) -> Result<(), Response<Body>> {
    let Some(want) = want else { return Ok(()) };
    let live_gen = live.map(|o| o.generation).unwrap_or(0);
    if want == live_gen {
        Ok(())
    } else {
        Err(precondition_failed(format!(
            "x-goog-if-generation-match: {want}; the live generation is {live_gen}"
        )))
    }
}

fn metadata_of(headers: &HeaderMap) -> BTreeMap<String, String> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            let key = name.as_str().strip_prefix("x-goog-meta-")?;
            Some((key.to_string(), value.to_str().ok()?.to_string()))
        })
        .collect()
}

/// The headers an object answer carries: on an upload or compose, ETag, generations, hashes,
/// stored length and encoding (and the component count); a read (`read`) adds the storage
/// class, Last-Modified and the `x-goog-meta-*` metadata.
fn object_headers(
    b: axum::http::response::Builder,
    o: &Obj,
    read: bool,
) -> axum::http::response::Builder {
    let mut b = b
        .header(header::ETAG, o.etag())
        .header("x-goog-generation", o.generation.to_string())
        .header("x-goog-metageneration", o.metageneration.to_string())
        .header("x-goog-stored-content-length", o.data.len().to_string())
        .header("x-goog-stored-content-encoding", "identity");
    for h in o.hashes() {
        b = b.header("x-goog-hash", h);
    }
    if let Some(n) = o.component_count {
        b = b.header("x-goog-component-count", n.to_string());
    }
    if read {
        b = b
            .header("x-goog-storage-class", "STANDARD")
            .header(header::LAST_MODIFIED, httpdate::fmt_http_date(o.updated));
        for (k, v) in &o.metadata {
            b = b.header(format!("x-goog-meta-{k}"), v);
        }
    }
    b
}

impl Inner {
    fn count(&self, method: &Method, kind: &'static str) {
        *self
            .counts
            .lock()
            .unwrap()
            .entry((method.to_string(), kind))
            .or_default() += 1;
    }

    fn dispatch(
        &self,
        parts: &axum::http::request::Parts,
        body: Bytes,
        now: SystemTime,
    ) -> Response<Body> {
        let (method, path) = (&parts.method, parts.uri.path());
        let query = parts.uri.query().unwrap_or("");
        if path == "/token" && method == Method::POST {
            self.count(method, "token");
            return auth::token_endpoint(self, &body, now);
        }
        if path.starts_with("/storage/v1/") && *method == Method::GET {
            self.count(method, "list");
            return super::json::list(self, path, &params(query), &parts.headers, now);
        }
        if path.starts_with("/storage/v1/") || path.starts_with("/upload/storage/v1/") {
            return not_modelled("the JSON API beyond its object listing");
        }
        let params = params(query);
        let rest = path.strip_prefix('/').unwrap_or(path);
        let (raw_bucket, raw_object) = match rest.split_once('/') {
            Some((b, o)) if !o.is_empty() => (b, Some(o)),
            Some((b, _)) => (b, None),
            None => (rest, None),
        };
        let has = |n: &str| param(&params, n).is_some();
        let kind = match raw_object {
            Some(_) if has("compose") => "compose",
            Some(_) => "object",
            None if *method == Method::GET => "list",
            None => "bucket",
        };
        self.count(method, kind);
        {
            let mut k = self.knobs.lock().unwrap();
            if k.fail_next > 0 {
                k.fail_next -= 1;
                let status = StatusCode::from_u16(k.fail_status).unwrap();
                let code = if k.fail_status == 503 {
                    "ServiceUnavailable"
                } else {
                    "InternalError"
                };
                return error(
                    status,
                    code,
                    "We encountered an internal error. Please try again.",
                    "fail_next",
                );
            }
        }
        let authorised = if has("X-Goog-Algorithm") {
            verify_v4(
                method.as_str(),
                path,
                query,
                &parts.headers,
                now,
                &self.account.email,
                &self.account.public_key,
            )
            .map_err(|e| e.response())
        } else {
            auth::check_bearer(self, &parts.headers, now)
        };
        if let Err(resp) = authorised {
            return resp;
        }
        // A signed payload hash (instead of UNSIGNED-PAYLOAD) must be the body's.
        if let Some(v) = parts.headers.get("x-goog-content-sha256") {
            let hash = hex::encode(sha2::Sha256::digest(&body));
            if v != "UNSIGNED-PAYLOAD" && v.as_bytes() != hash.as_bytes() {
                return error(
                    StatusCode::BAD_REQUEST,
                    "BadDigest",
                    "The x-goog-content-sha256 you specified did not match what we received.",
                    &format!("the body's SHA-256 is {hash}"),
                );
            }
        }
        fn decode(s: &str) -> Result<std::borrow::Cow<'_, str>, std::str::Utf8Error> {
            percent_encoding::percent_decode_str(s).decode_utf8()
        }
        let (Ok(bucket), Ok(object)) = (decode(raw_bucket), raw_object.map(decode).transpose())
        else {
            return invalid("the path is not percent-encoded UTF-8");
        };
        let headers = &parts.headers;
        // A condition the fake would otherwise ignore silently, as the weak emulators do.
        if let Some(h) = headers.keys().find(|h| {
            let h = h.as_str();
            (h.starts_with("x-goog-if-") && h != "x-goog-if-generation-match")
                || h.starts_with("if-")
                || h.starts_with("x-goog-copy-source")
        }) {
            return not_modelled(&format!("the header {h}"));
        }
        let known: &[&str] = match (&object, method) {
            (None, _) => &[
                "list-type",
                "prefix",
                "delimiter",
                "max-keys",
                "continuation-token",
                "start-after",
                "marker",
                "encoding-type",
            ],
            (Some(_), &Method::PUT) => &["compose"],
            (Some(_), &Method::GET | &Method::HEAD) => &["generation"],
            (Some(_), _) => &[],
        };
        if let Some((p, _)) = params
            .iter()
            .find(|(p, _)| !p.starts_with("X-Goog-") && !known.contains(&p.as_str()))
        {
            return not_modelled(&format!("the query parameter {p:?} on {method}"));
        }
        match (object, method.clone()) {
            (None, Method::GET) => {
                let store = self.store.lock().unwrap();
                if !store.buckets.contains(bucket.as_ref()) {
                    return not_found_bucket();
                }
                xml::list(&store.objects, &bucket, &params)
            }
            (None, Method::HEAD) => {
                if !self.store.lock().unwrap().buckets.contains(bucket.as_ref()) {
                    return not_found_bucket();
                }
                Response::new(Body::empty())
            }
            (Some(name), Method::PUT) if has("compose") => {
                self.compose(&bucket, &name, headers, &body, now)
            }
            (Some(name), Method::PUT) => self.upload(&bucket, &name, headers, body, now),
            (Some(name), m) if m == Method::GET || m == Method::HEAD => {
                self.read(&bucket, &name, &params, headers, m == Method::HEAD)
            }
            (Some(name), Method::DELETE) => self.delete(&bucket, &name, headers),
            _ => not_modelled(&format!("{method} {path}?{query}")),
        }
    }

    fn upload(
        &self,
        bucket: &str,
        name: &str,
        headers: &HeaderMap,
        body: Bytes,
        now: SystemTime,
    ) -> Response<Body> {
        let want = match if_generation_match(headers) {
            Ok(w) => w,
            Err(r) => return r,
        };
        let md5: [u8; 16] = md5::Md5::digest(&body).into();
        let crc = crc32c(&body);
        let (ignore_put, ignore_md5) = {
            let k = self.knobs.lock().unwrap();
            (k.ignore_put, k.ignore_md5)
        };
        if !ignore_md5 {
            if let Err(r) = check_digests(headers, &md5, crc) {
                return r;
            }
        }
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_string();
        let mut store = self.store.lock().unwrap();
        if !store.buckets.contains(bucket) {
            return not_found_bucket();
        }
        let key = (bucket.to_string(), name.to_string());
        if !ignore_put {
            if let Err(r) = check_generation(want, store.objects.get(&key)) {
                return r;
            }
        }
        let obj = Obj {
            generation: store.next_generation(),
            metageneration: 1,
            data: body,
            md5: Some(md5),
            crc32c: crc,
            content_type,
            metadata: metadata_of(headers),
            component_count: None,
            updated: now,
        };
        let resp = object_headers(Response::builder(), &obj, false)
            .header(header::CONTENT_LENGTH, "0")
            .body(Body::empty())
            .unwrap();
        store.objects.insert(key, obj);
        resp
    }

    fn compose(
        &self,
        bucket: &str,
        name: &str,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Response<Body> {
        let want = match if_generation_match(headers) {
            Ok(w) => w,
            Err(r) => return r,
        };
        let components = match xml::parse_compose(body) {
            Ok(c) => c,
            Err(e) => return invalid(&e),
        };
        if components.is_empty() || components.len() > 32 {
            return invalid(&format!(
                "a compose request takes 1 to 32 components, not {}",
                components.len()
            ));
        }
        let ignore = self.knobs.lock().unwrap().ignore_compose;
        let mut store = self.store.lock().unwrap();
        if !store.buckets.contains(bucket) {
            return not_found_bucket();
        }
        let (mut data, mut count) = (Vec::new(), 0u32);
        for c in &components {
            let Some(src) = store.objects.get(&(bucket.to_string(), c.name.clone())) else {
                return not_found_key(bucket, &c.name);
            };
            if !ignore {
                // A pinned generation that is not the live one names an object that does
                // not exist (no versioning); IfGenerationMatch is a precondition.
                if c.generation.is_some_and(|g| g != src.generation) {
                    return not_found_key(bucket, &c.name);
                }
                if let Some(g) = c.if_generation_match.filter(|g| *g != src.generation) {
                    return precondition_failed(format!(
                        "component {:?}: IfGenerationMatch {g}; the live generation is {}",
                        c.name, src.generation
                    ));
                }
            }
            data.extend_from_slice(&src.data);
            count += src.component_count.unwrap_or(1);
        }
        let key = (bucket.to_string(), name.to_string());
        if !ignore {
            if let Err(r) = check_generation(want, store.objects.get(&key)) {
                return r;
            }
        }
        let data = Bytes::from(data);
        let obj = Obj {
            generation: store.next_generation(),
            metageneration: 1,
            md5: None,
            crc32c: crc32c(&data),
            data,
            content_type: headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("application/octet-stream")
                .to_string(),
            metadata: metadata_of(headers),
            component_count: Some(count),
            updated: now,
        };
        let resp = object_headers(Response::builder(), &obj, false)
            .header(header::CONTENT_LENGTH, "0")
            .body(Body::empty())
            .unwrap();
        store.objects.insert(key, obj);
        resp
    }

    fn read(
        &self,
        bucket: &str,
        name: &str,
        params: &[(String, String)],
        headers: &HeaderMap,
        head: bool,
    ) -> Response<Body> {
        let want = match if_generation_match(headers) {
            Ok(w) => w,
            Err(r) => return r,
        };
        let obj = {
            let store = self.store.lock().unwrap();
            if !store.buckets.contains(bucket) {
                return not_found_bucket();
            }
            match store.objects.get(&(bucket.to_string(), name.to_string())) {
                Some(o) => o.clone(),
                None => return not_found_key(bucket, name),
            }
        };
        if let Some(g) = param(params, "generation") {
            if g.parse::<i64>().ok() != Some(obj.generation) {
                return not_found_key(bucket, name);
            }
        }
        if let Err(r) = check_generation(want, Some(&obj)) {
            return r;
        }
        let len = obj.data.len() as u64;
        let range = headers
            .get(header::RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_range);
        let b = object_headers(Response::builder(), &obj, true)
            .header(header::CONTENT_TYPE, &obj.content_type)
            .header(header::ACCEPT_RANGES, "bytes");
        let (b, body) = match range {
            None => (b.header(header::CONTENT_LENGTH, len), obj.data.clone()),
            Some(r) => {
                let (start, end) = match r {
                    (Some(a), _) if a >= len => {
                        return error(
                            StatusCode::RANGE_NOT_SATISFIABLE,
                            "InvalidRange",
                            "The requested range cannot be satisfied.",
                            &format!("bytes {a}- of an object of {len} bytes"),
                        )
                    }
                    (Some(a), Some(b)) => (a, b.min(len - 1)),
                    (Some(a), None) => (a, len - 1),
                    (None, Some(n)) if n > 0 && len > 0 => (len - n.min(len), len - 1),
                    (None, _) => {
                        return error(
                            StatusCode::RANGE_NOT_SATISFIABLE,
                            "InvalidRange",
                            "The requested range cannot be satisfied.",
                            "",
                        )
                    }
                };
                (
                    b.status(StatusCode::PARTIAL_CONTENT)
                        .header(header::CONTENT_RANGE, format!("bytes {start}-{end}/{len}"))
                        .header(header::CONTENT_LENGTH, end - start + 1),
                    obj.data.slice(start as usize..=end as usize),
                )
            }
        };
        b.body(if head {
            Body::empty()
        } else {
            Body::from(body)
        })
        .unwrap()
    }

    fn delete(&self, bucket: &str, name: &str, headers: &HeaderMap) -> Response<Body> {
        let want = match if_generation_match(headers) {
            Ok(w) => w,
            Err(r) => return r,
        };
        let ignore = self.knobs.lock().unwrap().ignore_delete;
        let mut store = self.store.lock().unwrap();
        if !store.buckets.contains(bucket) {
            return not_found_bucket();
        }
        let key = (bucket.to_string(), name.to_string());
        let Some(live) = store.objects.get(&key) else {
            return not_found_key(bucket, name);
        };
        if !ignore {
            if let Err(r) = check_generation(want, Some(live)) {
                return r;
            }
        }
        store.objects.remove(&key);
        Response::builder()
            .status(StatusCode::NO_CONTENT)
            .body(Body::empty())
            .unwrap()
    }
}

/// `bytes=a-b`, `bytes=a-`, `bytes=-n` (one range; anything else is ignored, as HTTP allows).
fn parse_range(v: &str) -> Option<(Option<u64>, Option<u64>)> {
    let spec = v.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let num = |s: &str| -> Option<Option<u64>> {
        let s = s.trim();
        if s.is_empty() {
            Some(None)
        } else {
            s.parse().ok().map(Some)
        }
    };
    let (a, b) = (num(a)?, num(b)?);
    match (a, b) {
        (None, None) => None,
        (Some(a), Some(b)) if b < a => None,
        r => Some(r),
    }
}

/// `Content-MD5` (base64) and `x-goog-hash: crc32c=…,md5=…` against the body.
fn check_digests(headers: &HeaderMap, md5: &[u8; 16], crc: u32) -> Result<(), Response<Body>> {
    let bad = |what: &str| {
        error(
            StatusCode::BAD_REQUEST,
            "BadDigest",
            "The MD5 you specified did not match what we received.",
            what,
        )
    };
    let malformed = |what: &str| {
        error(
            StatusCode::BAD_REQUEST,
            "InvalidDigest",
            "The Content-MD5 you specified is not valid.",
            what,
        )
    };
    if let Some(v) = headers.get("content-md5") {
        let given = v.to_str().ok().and_then(|s| B64.decode(s.trim()).ok());
        match given {
            Some(g) if g.len() == 16 => {
                if g != md5 {
                    return Err(bad(&format!("Content-MD5 {v:?}")));
                }
            }
            _ => return Err(malformed(&format!("Content-MD5 {v:?}"))),
        }
    }
    for v in headers.get_all("x-goog-hash") {
        for item in v.to_str().unwrap_or("").split(',') {
            let Some((alg, value)) = item.trim().split_once('=') else {
                return Err(malformed(&format!("x-goog-hash {v:?}")));
            };
            let Ok(raw) = B64.decode(value) else {
                return Err(malformed(&format!("x-goog-hash {v:?}")));
            };
            let ok = match alg {
                "md5" => raw == md5,
                "crc32c" => raw == crc.to_be_bytes(),
                _ => true,
            };
            if !ok {
                return Err(bad(&format!("x-goog-hash {item}")));
            }
        }
    }
    Ok(())
}
