//! CORS on the S3 endpoint: preflights answered by a bucket's `[[buckets.NAME.cors]]` rules
//! without a signature (path and virtual-host style), `Access-Control-*` on the answers a rule
//! allows (a 200, a 409 for a stale token, a 403), GetBucketCors reading the rules back,
//! PutBucketCors and DeleteBucketCors refused, and the configuration's checks.

use super::fixture::{error_code, refused};
use crate::common;
use crate::common::sign::{send, Creds};
use aws_sdk_s3::types::{CorsConfiguration, CorsRule};
use common::Server;

const APP: &str = "https://app.test";

/// Bucket `web` (tokens required) with two rules, the first for APP, the second GET from
/// anywhere; bucket `plain` with none.
const CONFIG: &str = r#"
[s3]
domain = "s3.test"

[buckets.web]
fencing = "required"

[[buckets.web.cors]]
id = "app"
allowed_origins = ["https://app.test", "https://*.app.test"]
allowed_methods = ["GET", "PUT", "HEAD"]
allowed_headers = ["content-type", "x-amz-*"]
expose_headers = ["ETag", "Fencing-Token-Highest"]
max_age_secs = 600

[[buckets.web.cors]]
allowed_origins = ["*"]
allowed_methods = ["GET"]

[buckets.plain]
fencing = "optional"
"#;

const DEV: Creds = Creds {
    key: "fencegate",
    secret: "fencegate-dev-secret",
};

fn start() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), Some(CONFIG));
    (dir, server)
}

/// An unsigned OPTIONS request with these headers: (status, headers, body).
async fn options(
    http: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = http.request(reqwest::Method::OPTIONS, url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.text().await.unwrap())
}

fn header<'a>(h: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    h.get(name).map_or("", |v| v.to_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflights_are_answered_by_the_buckets_rules_without_a_signature() {
    let (_dir, server) = start();
    let http = reqwest::Client::new();
    let object = server.url("/web/docs/a.txt");
    let (status, h, body) = options(
        &http,
        &object,
        &[
            ("Origin", APP),
            ("Access-Control-Request-Method", "PUT"),
            (
                "Access-Control-Request-Headers",
                "Content-Type, X-Amz-Meta-Fencing-Token",
            ),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&h, "access-control-allow-origin"), APP);
    assert_eq!(header(&h, "access-control-allow-credentials"), "true");
    assert_eq!(header(&h, "access-control-allow-methods"), "GET, PUT, HEAD");
    assert_eq!(
        header(&h, "access-control-allow-headers"),
        "content-type, x-amz-meta-fencing-token"
    );
    assert_eq!(
        header(&h, "access-control-expose-headers"),
        "ETag, Fencing-Token-Highest"
    );
    assert_eq!(header(&h, "access-control-max-age"), "600");
    assert!(header(&h, "vary").contains("Origin"), "{h:?}");
    assert!(!header(&h, "x-amz-request-id").is_empty());
    // A subdomain by the rule's wildcard, and the bucket itself as well as its objects.
    let (status, h, _) = options(
        &http,
        &server.url("/web"),
        &[
            ("Origin", "https://eu.app.test"),
            ("Access-Control-Request-Method", "HEAD"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        header(&h, "access-control-allow-origin"),
        "https://eu.app.test"
    );
    // Any origin may GET, by the second rule: `*`, without credentials, as S3 answers.
    let (status, h, _) = options(
        &http,
        &object,
        &[
            ("Origin", "https://elsewhere.test"),
            ("Access-Control-Request-Method", "GET"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(header(&h, "access-control-allow-origin"), "*");
    assert!(h.get("access-control-allow-credentials").is_none());
    assert!(h.get("access-control-expose-headers").is_none());

    // Refused: a method, an origin or a header no rule allows, a bucket without rules, a
    // bucket that does not exist.
    for (url, origin, method, asked, why) in [
        (&object, APP, "DELETE", "", "not allowed"),
        (&object, "https://elsewhere.test", "PUT", "", "not allowed"),
        (&object, "https://app.test.evil", "PUT", "", "not allowed"),
        (&object, APP, "PUT", "fencing-token", "not allowed"),
        (&object, APP, "put", "", "not allowed"),
        (&server.url("/plain/a"), APP, "GET", "", "not enabled"),
        // A bucket that does not exist reads as one without rules: no existence oracle.
        (&server.url("/nowhere/a"), APP, "GET", "", "not enabled"),
        (&server.url("/"), APP, "GET", "", "not enabled"),
    ] {
        let mut headers = vec![
            ("Origin", origin),
            ("Access-Control-Request-Method", method),
        ];
        if !asked.is_empty() {
            headers.push(("Access-Control-Request-Headers", asked));
        }
        let (status, h, body) = options(&http, url, &headers).await;
        assert_eq!(status, 403, "{url} {origin} {method} {asked}: {body}");
        assert_eq!(error_code(&body), "AccessForbidden", "{body}");
        assert!(
            body.contains("CORSResponse") && body.contains(why),
            "{body}"
        );
        assert!(h.get("access-control-allow-origin").is_none());
    }
    // Not a preflight at all: 400, naming the missing header.
    let (status, _, body) =
        options(&http, &object, &[("Access-Control-Request-Method", "GET")]).await;
    assert_eq!((status, error_code(&body).as_str()), (400, "BadRequest"));
    assert!(body.contains("Origin"), "{body}");
    let (status, _, body) = options(&http, &object, &[("Origin", APP)]).await;
    assert_eq!((status, error_code(&body).as_str()), (400, "BadRequest"));
    assert!(body.contains("Access-Control-Request-Method"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflights_find_the_bucket_in_virtual_host_style() {
    let (_dir, server) = start();
    let http = reqwest::Client::builder()
        .resolve("web.s3.test", server.addr)
        .resolve("plain.s3.test", server.addr)
        .resolve("s3.test", server.addr)
        .build()
        .unwrap();
    let port = server.addr.port();
    let asked = [("Origin", APP), ("Access-Control-Request-Method", "PUT")];
    let (status, h, body) = options(
        &http,
        &format!("http://web.s3.test:{port}/docs/a.txt"),
        &asked,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&h, "access-control-allow-origin"), APP);
    // The path does not name the bucket in this style: `plain` has no rules, whatever follows.
    let (status, _, body) = options(
        &http,
        &format!("http://plain.s3.test:{port}/web/a.txt"),
        &asked,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("not enabled"), "{body}");
    // The domain itself is path style.
    let (status, _, body) =
        options(&http, &format!("http://s3.test:{port}/web/a.txt"), &asked).await;
    assert_eq!(status, 200, "{body}");
}

/// Signs and sends a PUT of `body` to `url` with `token`, with `origin` when given.
async fn put(
    http: &reqwest::Client,
    url: &str,
    token: u64,
    origin: Option<&str>,
    creds: Creds,
) -> reqwest::Response {
    let mut req = http
        .put(url)
        .header("Fencing-Token", token.to_string())
        .body(format!("written with {token}"));
    if let Some(o) = origin {
        req = req.header("Origin", o);
    }
    send(http, req, Some(creds)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_a_rule_allows_carry_its_headers_errors_included() {
    let (_dir, server) = start();
    let http = reqwest::Client::new();
    let url = server.url("/web/a.txt");
    let allowed = |resp: &reqwest::Response, origin: &str| {
        let h = resp.headers();
        assert_eq!(header(h, "access-control-allow-origin"), origin, "{h:?}");
        assert_eq!(header(h, "access-control-allow-credentials"), "true");
        assert_eq!(
            header(h, "access-control-expose-headers"),
            "ETag, Fencing-Token-Highest"
        );
        assert!(header(h, "vary").contains("Origin"), "{h:?}");
    };
    let ok = put(&http, &url, 5, Some(APP), DEV).await;
    assert_eq!(ok.status(), 200);
    allowed(&ok, APP);
    assert!(ok.headers().contains_key("etag"));
    // A zombie's write: the 409 a page must be able to read.
    let stale = put(&http, &url, 3, Some(APP), DEV).await;
    assert_eq!(stale.status(), 409);
    allowed(&stale, APP);
    assert_eq!(
        error_code(&stale.text().await.unwrap()),
        "StaleFencingToken"
    );
    // A signature that does not match: 403, with the headers too.
    let wrong = Creds {
        key: "fencegate",
        secret: "not-the-secret",
    };
    let denied = put(&http, &url, 9, Some(APP), wrong).await;
    assert_eq!(denied.status(), 403);
    allowed(&denied, APP);
    // A GET from any origin, by the second rule.
    let get = send(
        &http,
        http.get(&url).header("Origin", "https://elsewhere.test"),
        Some(DEV),
    )
    .await;
    assert_eq!(get.status(), 200);
    assert_eq!(header(get.headers(), "access-control-allow-origin"), "*");
    assert!(get
        .headers()
        .get("access-control-allow-credentials")
        .is_none());
    // No header for an origin or method no rule allows, without an Origin, or on a bucket
    // without rules; the request itself is served as ever.
    let other = put(&http, &url, 6, Some("https://elsewhere.test"), DEV).await;
    assert_eq!(other.status(), 200);
    assert!(other.headers().get("access-control-allow-origin").is_none());
    let none = put(&http, &url, 7, None, DEV).await;
    assert_eq!(none.status(), 200);
    assert!(none.headers().get("access-control-allow-origin").is_none());
    let plain = put(&http, &server.url("/plain/a.txt"), 1, Some(APP), DEV).await;
    assert_eq!(plain.status(), 200);
    assert!(plain.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_bucket_cors_answers_the_rules_and_setting_them_is_the_files() {
    let (_dir, server) = start();
    let c = common::moto::client_with(&server.url(""), DEV.key, DEV.secret);
    let got = c.get_bucket_cors().bucket("web").send().await.unwrap();
    let rules = got.cors_rules();
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].id(), Some("app"));
    assert_eq!(
        rules[0].allowed_origins(),
        ["https://app.test", "https://*.app.test"]
    );
    assert_eq!(rules[0].allowed_methods(), ["GET", "PUT", "HEAD"]);
    assert_eq!(rules[0].allowed_headers(), ["content-type", "x-amz-*"]);
    assert_eq!(rules[0].expose_headers(), ["ETag", "Fencing-Token-Highest"]);
    assert_eq!(rules[0].max_age_seconds(), Some(600));
    assert_eq!(rules[1].allowed_origins(), ["*"]);
    assert!(rules[1].expose_headers().is_empty() && rules[1].max_age_seconds().is_none());
    let (status, code, _, _) = refused(c.get_bucket_cors().bucket("plain").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchCORSConfiguration"));
    let (status, code, _, _) = refused(c.get_bucket_cors().bucket("nowhere").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchBucket"));

    let config = CorsConfiguration::builder()
        .cors_rules(
            CorsRule::builder()
                .allowed_origins("https://other.test")
                .allowed_methods("GET")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    for bucket in ["web", "plain"] {
        let (status, code, _, body) = refused(
            c.put_bucket_cors()
                .bucket(bucket)
                .cors_configuration(config.clone())
                .send()
                .await,
        );
        assert_eq!((status, code.as_str()), (403, "AccessDenied"), "{body}");
        assert!(
            body.contains(&format!("[[buckets.{bucket}.cors]]")),
            "{body}"
        );
    }
    let (status, code, _, body) = refused(c.delete_bucket_cors().bucket("web").send().await);
    assert_eq!((status, code.as_str()), (403, "AccessDenied"), "{body}");
    // Nothing to delete: the no-op it is on AWS.
    c.delete_bucket_cors().bucket("plain").send().await.unwrap();
    // The rules are as configured still.
    let got = c.get_bucket_cors().bucket("web").send().await.unwrap();
    assert_eq!(got.cors_rules().len(), 2);
}

#[test]
fn check_config_names_the_bucket_and_the_fix() {
    let rule = |body: &str| {
        format!("[buckets.web]\nfencing = \"optional\"\n\n[[buckets.web.cors]]\n{body}\n")
    };
    for (body, names, fix) in [
        (
            "allowed_origins = [\"https://*.*.app.test\"]\nallowed_methods = [\"GET\"]",
            "\"https://*.*.app.test\"",
            "at most one `*`",
        ),
        (
            "allowed_origins = [\"*\"]\nallowed_methods = [\"PATCH\"]",
            "\"PATCH\"",
            "\"GET\", \"PUT\", \"POST\", \"DELETE\", \"HEAD\"",
        ),
        (
            "allowed_origins = []\nallowed_methods = [\"GET\"]",
            "without allowed_origins",
            "allowed_origins = [",
        ),
        (
            "allowed_origins = [\"*\"]\nallowed_methods = [\"GET\"]\nallowed_headers = [\"x-*-*\"]",
            "\"x-*-*\"",
            "at most one `*`",
        ),
        (
            "allowed_origins = [\"*\"]\nallowed_methods = [\"GET\"]\nexpose_headers = [\"x-amz-*\"]",
            "\"x-amz-*\"",
            "without wildcards",
        ),
    ] {
        let text = rule(body);
        let e = fencegate::config::parse(&text, "cors.toml")
            .expect_err(body)
            .to_string();
        assert!(e.starts_with("cors.toml:4:"), "{e}");
        assert!(e.contains("bucket \"web\"") && e.contains(names), "{e}");
        assert!(e.contains(fix), "{e}");
    }
    let e = fencegate::config::parse(
        &rule("allowed_origins = [\"*\"]\nallowed_method = [\"GET\"]"),
        "cors.toml",
    )
    .expect_err("a misspelt field")
    .to_string();
    assert!(e.contains("allowed_method"), "{e}");
    let e = fencegate::config::parse(
        "[bucket_defaults]\n\n[[bucket_defaults.cors]]\nallowed_origins = [\"*\"]\nallowed_methods = [\"OPTIONS\"]\n",
        "cors.toml",
    )
    .expect_err("a created bucket's rule")
    .to_string();
    assert!(
        e.contains("[bucket_defaults]") && e.contains("\"OPTIONS\""),
        "{e}"
    );
    let ok = fencegate::config::parse(CONFIG, "cors.toml").unwrap();
    assert!(
        ok.describe().contains(
            "bucket web: cors: 2 rule(s) for origins https://app.test, https://*.app.test, *"
        ),
        "{}",
        ok.describe()
    );
}

/// The rules are the file's: a reload applies a change to them, to preflights and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_changed_rules() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, Some(CONFIG));
    let http = reqwest::Client::new();
    let asked = [
        ("Origin", "https://new.test"),
        ("Access-Control-Request-Method", "PUT"),
    ];
    let (status, _, _) = options(&http, &server.url("/plain/a"), &asked).await;
    assert_eq!(status, 403);
    let changed = CONFIG.replace(
        "[buckets.plain]\nfencing = \"optional\"\n",
        "[buckets.plain]\nfencing = \"optional\"\n\n[[buckets.plain.cors]]\nallowed_origins = [\"https://new.test\"]\nallowed_methods = [\"PUT\"]\n",
    );
    assert_ne!(changed, CONFIG);
    std::fs::write(data.with_extension("toml"), changed).unwrap();
    let reload = http.post(server.url("/admin/reload")).send().await.unwrap();
    assert_eq!(reload.status(), 200, "{}", reload.text().await.unwrap());
    let (status, h, body) = options(&http, &server.url("/plain/a"), &asked).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        header(&h, "access-control-allow-origin"),
        "https://new.test"
    );
    let written = put(
        &http,
        &server.url("/plain/a"),
        1,
        Some("https://new.test"),
        DEV,
    )
    .await;
    assert_eq!(written.status(), 200);
    assert_eq!(
        header(written.headers(), "access-control-allow-origin"),
        "https://new.test"
    );
}
