//! CORS on the S3 endpoint, per bucket, by the rules of its configuration
//! (`[[buckets.NAME.cors]]`, `config::cors`) as S3 judges them. A preflight (`OPTIONS` with
//! `Origin` and `Access-Control-Request-Method`) is answered here, without a signature and
//! before s3s, which would demand one. Every other answer to a request whose origin and method
//! a rule allows, errors included (a 409 for a stale token is what a page most needs to read),
//! gets that rule's `Access-Control-*` headers on the way out. GetBucketCors reads the rules
//! back; they are set in the configuration file only, which a reload (SIGHUP) applies, so
//! PutBucketCors and the DeleteBucketCors of configured rules are refused.

use super::answer;
use super::convert::s3_error;
use super::S3Gateway;
use crate::catalog::Catalog;
use crate::config::CorsRule;
use crate::gate::Gate;
use axum::response::Response;
use http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use s3s::{S3Error, S3ErrorCode, S3Result};
use std::sync::Arc;

/// What a preflight answer varies by, as S3 sends it.
const VARY: &str = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method";

/// The rules of every bucket, found by the bucket a request names.
#[derive(Clone)]
pub struct Cors {
    gate: Arc<Gate>,
    catalog: Arc<Catalog>,
    /// `[s3] domain`, lowercase: `bucket.domain` names the bucket.
    domain: Option<String>,
}

impl Cors {
    pub fn new(gate: Arc<Gate>, catalog: Arc<Catalog>, domain: Option<String>) -> Cors {
        Cors {
            gate,
            catalog,
            domain: domain.map(|d| d.to_ascii_lowercase()),
        }
    }

    /// The bucket a request names, as s3s finds it: the host's `bucket.domain` when a domain
    /// is configured, else the path's first segment.
    fn bucket_of(&self, uri: &Uri, headers: &HeaderMap) -> Option<String> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| uri.authority().map(|a| a.as_str()));
        if let (Some(domain), Some(host)) = (&self.domain, host) {
            if let Some(bucket) = super::host_bucket(domain, host) {
                return Some(bucket.to_string());
            }
        }
        let first = uri.path().trim_start_matches('/').split('/').next()?;
        let bucket = percent_encoding::percent_decode_str(first)
            .decode_utf8()
            .ok()?;
        (!bucket.is_empty()).then(|| bucket.into_owned())
    }

    /// The rules of the bucket a request names; `None` when it names none that is served.
    /// With `discover`, a bucket another instance created is looked for first: not for an
    /// unsigned preflight, which would make every made-up name a read of the shared table
    /// (such a bucket is found by the instance's own periodic look).
    async fn rules(&self, uri: &Uri, headers: &HeaderMap, discover: bool) -> Option<Vec<CorsRule>> {
        let bucket = self.bucket_of(uri, headers)?;
        if discover {
            if let Err(e) = self.catalog.discover(&bucket).await {
                tracing::warn!(bucket = %bucket, error = %e, "could not look for a bucket created through another instance");
            }
        }
        self.gate
            .bucket(&bucket)
            .ok()
            .map(|b| b.policy.cors.clone())
    }

    /// The answer to an `OPTIONS` request, S3's: 200 with the matching rule's headers, 400
    /// without `Origin` or `Access-Control-Request-Method`, 403 `AccessForbidden` when no rule
    /// allows it.
    pub async fn preflight(&self, uri: &Uri, headers: &HeaderMap) -> Response {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return refused(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "Insufficient information. Origin request header needed.",
            );
        };
        let Some(method) = headers
            .get(header::ACCESS_CONTROL_REQUEST_METHOD)
            .and_then(|m| m.to_str().ok())
        else {
            return refused(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "Invalid Access-Control-Request-Method: a CORS preflight (OPTIONS) names the method of the request it asks for in that header",
            );
        };
        let forbidden = |why: &str| {
            refused(
                StatusCode::FORBIDDEN,
                "AccessForbidden",
                &format!("CORSResponse: {why}"),
            )
        };
        // A bucket that does not exist is answered as one without rules: an unsigned request
        // learns nothing of which buckets exist.
        let rules = self.rules(uri, headers, false).await.unwrap_or_default();
        if rules.is_empty() {
            return forbidden("CORS is not enabled for this bucket (fencegate: set [[buckets.NAME.cors]] rules in its configuration)");
        }
        let asked = requested_headers(headers);
        let origin_text = origin.to_str().unwrap_or_default();
        let Some((rule, any_origin)) = matching(&rules, origin_text, method, &asked) else {
            return forbidden("This CORS request is not allowed. This is usually because the evaluation of Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.");
        };
        let mut resp = Response::new(axum::body::Body::empty());
        let out = resp.headers_mut();
        allow(out, rule, origin, any_origin);
        if !asked.is_empty() {
            insert(out, header::ACCESS_CONTROL_ALLOW_HEADERS, &asked.join(", "));
        }
        if let Some(age) = rule.max_age_secs {
            out.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from(age));
        }
        out.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
        resp
    }

    /// The headers an answer to `req` gets, when it comes from an origin with a method that a
    /// rule of its bucket allows.
    pub async fn allowed(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Option<HeaderMap> {
        let origin = headers.get(header::ORIGIN)?;
        let rules = self.rules(uri, headers, true).await?;
        let (rule, any_origin) = matching(&rules, origin.to_str().ok()?, method.as_str(), &[])?;
        let mut out = HeaderMap::new();
        allow(&mut out, rule, origin, any_origin);
        Some(out)
    }
}

/// Adds `allowed` (from [`Cors::allowed`]) to an answer, whoever made it.
pub fn apply(mut resp: Response, allowed: Option<HeaderMap>) -> Response {
    for (name, value) in allowed.into_iter().flatten() {
        if let Some(name) = name {
            resp.headers_mut().append(name, value);
        }
    }
    resp
}

/// The headers of every allowed request: its origin (or `*` for a rule allowing any, as S3
/// answers, without credentials), the rule's methods and exposed headers, and what the
/// answer varies by.
fn allow(headers: &mut HeaderMap, rule: &CorsRule, origin: &HeaderValue, any_origin: bool) {
    if any_origin {
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
    } else {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    insert(
        headers,
        header::ACCESS_CONTROL_ALLOW_METHODS,
        &rule.allowed_methods.join(", "),
    );
    if !rule.expose_headers.is_empty() {
        insert(
            headers,
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            &rule.expose_headers.join(", "),
        );
    }
    headers.append(header::VARY, HeaderValue::from_static(VARY));
}

/// Inserts a value built from validated rules or from a request's own header values.
fn insert(headers: &mut HeaderMap, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

/// The headers a preflight asks for, lowercase.
fn requested_headers(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect()
}

/// The first rule allowing `origin`, `method` and every header of `asked`, and whether it
/// allows any origin (`*`).
fn matching<'a>(
    rules: &'a [CorsRule],
    origin: &str,
    method: &str,
    asked: &[String],
) -> Option<(&'a CorsRule, bool)> {
    rules.iter().find_map(|rule| {
        let allowed_origin = rule.allowed_origins.iter().find(|o| wildcard(o, origin))?;
        let methods = rule.allowed_methods.iter().any(|m| m == method);
        let headers = asked.iter().all(|h| {
            rule.allowed_headers
                .iter()
                .any(|a| wildcard(&a.to_ascii_lowercase(), h))
        });
        (methods && headers).then_some((rule, allowed_origin == "*"))
    })
}

/// `value` matches `pattern`, whose one `*` stands for any run of characters.
fn wildcard(pattern: &str, value: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == value,
        Some((head, tail)) => {
            value.len() >= head.len() + tail.len()
                && value.starts_with(head)
                && value.ends_with(tail)
        }
    }
}

fn refused(status: StatusCode, code: &str, message: &str) -> Response {
    answer::error(status, code, message)
}

/// GetBucketCors: the bucket's configured rules, or S3's 404 `NoSuchCORSConfiguration`.
pub fn configured(gw: &S3Gateway, bucket: &str) -> S3Result<s3s::dto::GetBucketCorsOutput> {
    let rules = gw
        .gate
        .bucket(bucket)
        .map_err(s3_error)?
        .policy
        .cors
        .clone();
    if rules.is_empty() {
        return Err(super::bucket_config::not_configured(
            "NoSuchCORSConfiguration",
            "CORS configuration",
            bucket,
        ));
    }
    let listed = |v: Vec<String>| (!v.is_empty()).then_some(v);
    let rules = rules
        .into_iter()
        .map(|r| s3s::dto::CORSRule {
            allowed_headers: listed(r.allowed_headers),
            allowed_methods: r.allowed_methods,
            allowed_origins: r.allowed_origins,
            expose_headers: listed(r.expose_headers),
            id: r.id,
            max_age_seconds: r.max_age_secs.and_then(|s| i32::try_from(s).ok()),
        })
        .collect();
    Ok(s3s::dto::GetBucketCorsOutput {
        cors_rules: Some(rules),
    })
}

/// PutBucketCors, and DeleteBucketCors of configured rules: refused as AWS refuses an
/// operation the caller may not make (403 `AccessDenied`), since the rules live in the
/// configuration file, which every instance of a cluster reads and a reload applies: a rule
/// set here would be a second copy, lost or contradicted by the next reload.
pub fn set_in_file(op: &str, bucket: &str) -> S3Error {
    let mut err = S3Error::with_message(
        S3ErrorCode::AccessDenied,
        format!("{op} is not allowed: fencegate takes a bucket's CORS rules from its configuration file; set them as [[buckets.{bucket}.cors]] there and reload (SIGHUP or POST /admin/reload)"),
    );
    err.set_status_code(StatusCode::FORBIDDEN);
    err
}

/// DeleteBucketCors: the no-op it is on AWS for a bucket without rules; refused for
/// configured ones.
pub fn delete(gw: &S3Gateway, bucket: &str) -> S3Result<()> {
    let entry = gw.gate.bucket(bucket).map_err(s3_error)?;
    if entry.policy.cors.is_empty() {
        return Ok(());
    }
    Err(set_in_file("DeleteBucketCors", bucket))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CorsRule {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        CorsRule {
            id: None,
            allowed_origins: own(origins),
            allowed_methods: own(methods),
            allowed_headers: own(headers),
            expose_headers: vec![],
            max_age_secs: None,
        }
    }

    #[test]
    fn wildcards_stand_for_one_run_of_characters() {
        assert!(wildcard("https://*.example.com", "https://app.example.com"));
        assert!(!wildcard("https://*.example.com", "https://example.com"));
        assert!(!wildcard("https://*.example.com", "http://app.example.com"));
        assert!(wildcard("*", "null"));
        assert!(wildcard(
            "https://app.example.com",
            "https://app.example.com"
        ));
        assert!(!wildcard(
            "https://app.example.com",
            "https://app.example.co"
        ));
        // The head and the tail may not overlap.
        assert!(!wildcard("ab*ba", "aba"));
    }

    #[test]
    fn the_first_rule_allowing_origin_method_and_headers_answers() {
        let rules = [
            rule(&["https://a.test"], &["GET"], &[]),
            rule(
                &["https://*.test"],
                &["GET", "PUT"],
                &["x-amz-*", "Content-Type"],
            ),
            rule(&["*"], &["GET"], &["*"]),
        ];
        let asked = |h: &[&str]| h.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (r, any) = matching(&rules, "https://a.test", "GET", &[]).unwrap();
        assert!(r == &rules[0] && !any);
        let (r, _) = matching(&rules, "https://a.test", "PUT", &asked(&["content-type"])).unwrap();
        assert!(r == &rules[1]);
        assert!(matching(&rules, "https://a.test", "PUT", &asked(&["fencing-token"])).is_none());
        let (r, any) =
            matching(&rules, "https://b.other", "GET", &asked(&["fencing-token"])).unwrap();
        assert!(r == &rules[2] && any);
        assert!(matching(&rules, "https://b.other", "DELETE", &[]).is_none());
        assert!(matching(&rules, "https://b.other", "get", &[]).is_none());
    }
}
