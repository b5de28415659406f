//! A bucket's CORS rules (`[[buckets.NAME.cors]]`), as S3's CORSRule: their shape in the
//! file and the checks that make them S3's (one `*` per origin or header, the five methods,
//! header names a browser can send). How a request is judged by them is the S3 surface's
//! (`s3api::cors`).

use serde::{Deserialize, Serialize};

/// The methods a rule may allow, as S3 takes them.
pub const CORS_METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "HEAD"];

/// S3's limit on the rules of one bucket.
pub const MAX_CORS_RULES: usize = 100;

/// One CORS rule, S3's CORSRule: a cross-origin request is allowed when its origin matches
/// one of `allowed_origins`, its method is one of `allowed_methods` and (in a preflight) every
/// header it asks for matches one of `allowed_headers`. The first matching rule answers.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CorsRule {
    /// The rule's name, as S3's `ID` (at most 255 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Origins (`https://app.example.com`), each with at most one `*` (`https://*.example.com`,
    /// or `*` for any).
    pub allowed_origins: Vec<String>,
    /// GET, PUT, POST, DELETE and HEAD.
    pub allowed_methods: Vec<String>,
    /// Request headers a preflight may ask for, compared without case, each with at most one
    /// `*` (`x-amz-*`, or `*` for any).
    #[serde(default)]
    pub allowed_headers: Vec<String>,
    /// Response headers the page's script may read (`ETag`, `Fencing-Token-Highest`).
    #[serde(default)]
    pub expose_headers: Vec<String>,
    /// How long a browser may keep a preflight's answer (`Access-Control-Max-Age`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::units::opt_int"
    )]
    pub max_age_secs: Option<u64>,
}

/// The first problem of a bucket's rules: (the field, what is wrong, how to fix it).
pub fn problem(rules: &[CorsRule]) -> Option<(&'static str, String, String)> {
    if rules.len() > MAX_CORS_RULES {
        return Some((
            "cors",
            format!("has {} CORS rules", rules.len()),
            format!("keep at most {MAX_CORS_RULES} rules, S3's limit: one rule may allow several origins"),
        ));
    }
    rules.iter().enumerate().find_map(|(i, rule)| {
        let (field, what, fix) = rule_problem(rule)?;
        let id = rule
            .id
            .as_ref()
            .map(|id| format!(" (id {id:?})"))
            .unwrap_or_default();
        Some((
            field,
            format!(
                "has a wrong CORS rule: [[...cors]] number {}{id} {what}",
                i + 1
            ),
            fix,
        ))
    })
}

fn rule_problem(rule: &CorsRule) -> Option<(&'static str, String, String)> {
    if rule.id.as_ref().is_some_and(|id| id.len() > 255) {
        return Some((
            "id",
            "with an id longer than 255 characters".into(),
            "shorten it".into(),
        ));
    }
    if rule.allowed_origins.is_empty() {
        return Some((
            "allowed_origins",
            "without allowed_origins".into(),
            "list the origins that may call, e.g. allowed_origins = [\"https://app.example.com\"]"
                .into(),
        ));
    }
    if let Some(o) = rule.allowed_origins.iter().find(|o| {
        o.is_empty() || o.matches('*').count() > 1 || !o.bytes().all(|b| b.is_ascii_graphic())
    }) {
        return Some((
            "allowed_origins",
            format!("with allowed origin {o:?}"),
            "write an origin as a browser sends it (\"https://app.example.com:8443\"), with at most one `*` (\"https://*.example.com\", or \"*\" for any origin)".into(),
        ));
    }
    if rule.allowed_methods.is_empty() {
        return Some((
            "allowed_methods",
            "without allowed_methods".into(),
            format!("list some of {CORS_METHODS:?}"),
        ));
    }
    if let Some(m) = rule
        .allowed_methods
        .iter()
        .find(|m| !CORS_METHODS.contains(&m.as_str()))
    {
        return Some((
            "allowed_methods",
            format!("with allowed method {m:?}"),
            format!("use only {CORS_METHODS:?}, in capitals, as S3 takes them"),
        ));
    }
    let bad_name = |h: &String, wildcard: bool| {
        h.is_empty()
            || h.matches('*').count() > usize::from(wildcard)
            || !h
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    if let Some(h) = rule.allowed_headers.iter().find(|h| bad_name(h, true)) {
        return Some((
            "allowed_headers",
            format!("with allowed header {h:?}"),
            "write header names (\"content-type\"), each with at most one `*` (\"x-amz-*\", or \"*\" for any)".into(),
        ));
    }
    if let Some(h) = rule.expose_headers.iter().find(|h| bad_name(h, false)) {
        return Some((
            "expose_headers",
            format!("with expose header {h:?}"),
            "write response header names without wildcards, e.g. expose_headers = [\"ETag\"]"
                .into(),
        ));
    }
    if rule.max_age_secs.is_some_and(|s| s > i32::MAX as u64) {
        return Some((
            "max_age_secs",
            format!("with max_age_secs = {}", rule.max_age_secs.unwrap_or_default()),
            "use at most 2147483647 seconds, S3's limit; browsers keep a preflight's answer 2 hours at most anyway".into(),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> CorsRule {
        CorsRule {
            id: None,
            allowed_origins: vec!["https://*.example.com".into()],
            allowed_methods: vec!["GET".into(), "PUT".into()],
            allowed_headers: vec!["*".into()],
            expose_headers: vec!["ETag".into()],
            max_age_secs: Some(600),
        }
    }

    #[test]
    fn rules_s3_takes_pass_and_each_mistake_is_named() {
        assert_eq!(problem(&[rule()]), None);
        let field = |edit: fn(&mut CorsRule)| {
            let mut r = rule();
            edit(&mut r);
            problem(&[rule(), r]).map(|(f, what, _)| (f, what))
        };
        let (f, what) =
            field(|r| r.allowed_origins = vec!["https://*.*.example.com".into()]).unwrap();
        assert_eq!(f, "allowed_origins");
        assert!(what.contains("number 2") && what.contains("*.*"), "{what}");
        assert_eq!(
            field(|r| r.allowed_origins.clear()).unwrap().0,
            "allowed_origins"
        );
        assert_eq!(
            field(|r| r.allowed_methods = vec!["get".into()]).unwrap().0,
            "allowed_methods"
        );
        assert_eq!(
            field(|r| r.allowed_methods = vec!["PATCH".into()])
                .unwrap()
                .0,
            "allowed_methods"
        );
        assert_eq!(
            field(|r| r.allowed_methods.clear()).unwrap().0,
            "allowed_methods"
        );
        assert_eq!(
            field(|r| r.allowed_headers = vec!["x-*-*".into()])
                .unwrap()
                .0,
            "allowed_headers"
        );
        assert_eq!(
            field(|r| r.allowed_headers = vec!["a b".into()]).unwrap().0,
            "allowed_headers"
        );
        assert_eq!(
            field(|r| r.expose_headers = vec!["x-*".into()]).unwrap().0,
            "expose_headers"
        );
        assert_eq!(
            field(|r| r.max_age_secs = Some(1 << 40)).unwrap().0,
            "max_age_secs"
        );
        assert_eq!(field(|r| r.id = Some("x".repeat(256))).unwrap().0, "id");
        assert_eq!(problem(&vec![rule(); 101]).unwrap().0, "cors");
    }
}
