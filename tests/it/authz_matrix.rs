//! The authorization matrix (docs/security.md): every route of the native, lease, S3 and
//! admin surfaces, times every kind of caller, each cell asserted. The table is printed, so a
//! failing run shows the whole picture, not only the first wrong cell.
//! Lease credentials minted by every combination of permissions are in `lease_reach.rs`.
//!
//! Allowed means authentication and authorization passed: the answer is then whatever the
//! operation gives (200, or a domain answer such as 404 NoSuchKey or 409 NotLeaseHolder),
//! never 401 or 403.

use crate::common;
use common::sign::{send, send_json as json_call, Creds};
use common::Server;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The admin surface's bearer token (written to a file the configuration names).
const BEARER: &str = "matrix-admin-bearer-token-0123456789";

const CONFIG: &str = r#"
[admin]
bearer_token_file = "TOKEN_FILE"

[buckets.data]
[buckets.other]

[bucket_defaults]

[leases]
credential_grace_secs = 1

[keys.admin]
access_key_id = "admin-key"
secret_access_key = "admin-secret-0123456"
admin = true

[keys.writer]
access_key_id = "writer-key"
secret_access_key = "writer-secret-0123456"
buckets = { "data" = ["read", "write", "delete", "fence", "lease"], "new-*" = ["write", "delete"] }
lease_names = ["jobs-*"]

[keys.reader]
access_key_id = "reader-key"
secret_access_key = "reader-secret-0123456"
buckets = { "data" = ["read"] }

[keys.elsewhere]
access_key_id = "elsewhere-key"
secret_access_key = "elsewhere-secret"
buckets = { "other" = ["read", "write", "delete", "fence", "lease"] }
lease_names = ["other-*"]
"#;

const ADMIN: Creds = Creds {
    key: "admin-key",
    secret: "admin-secret-0123456",
};
const WRITER: Creds = Creds {
    key: "writer-key",
    secret: "writer-secret-0123456",
};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Caller {
    None,
    BadSignature,
    UnknownKey,
    Reader,
    OtherBucketKey,
    LeaseCredsOtherKey,
    LeaseCredsAfterGrace,
    Writer,
    Admin,
    /// `Authorization: Bearer` with `[admin]`'s token.
    AdminToken,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Route {
    NativePut,
    NativeGet,
    NativeHead,
    NativeDelete,
    NativeList,
    FenceShow,
    FenceAdvance,
    LeaseAcquire,
    LeaseShow,
    LeaseRenew,
    LeaseRelease,
    S3Put,
    S3Get,
    S3Delete,
    S3List,
    S3CreateBucket,
    S3DeleteBucket,
    /// GetObjectTagging: a read.
    S3GetTagging,
    /// DeleteObjectTagging: a write on AWS, a no-op here, never open to a reader.
    S3DeleteTagging,
    AdminMetrics,
    AdminLeases,
    AdminLeaseGet,
    AdminStatus,
    AdminRevoke,
    AdminReset,
}

/// What a cell must answer: allowed, or refused with this status and code.
#[derive(Debug, PartialEq)]
enum Expect {
    Allowed,
    Refused(u16, &'static str),
}

fn admin_route(route: Route) -> bool {
    matches!(
        route,
        Route::AdminMetrics
            | Route::AdminLeases
            | Route::AdminLeaseGet
            | Route::AdminStatus
            | Route::AdminRevoke
            | Route::AdminReset
    )
}

fn native(route: Route) -> bool {
    !matches!(
        route,
        Route::S3Put
            | Route::S3Get
            | Route::S3Delete
            | Route::S3List
            | Route::S3CreateBucket
            | Route::S3DeleteBucket
            | Route::S3GetTagging
            | Route::S3DeleteTagging
    )
}

fn reads(route: Route) -> bool {
    matches!(
        route,
        Route::NativeGet
            | Route::NativeHead
            | Route::NativeList
            | Route::FenceShow
            | Route::S3Get
            | Route::S3List
            | Route::S3GetTagging
    )
}

fn lease_route(route: Route) -> bool {
    matches!(
        route,
        Route::LeaseAcquire | Route::LeaseShow | Route::LeaseRenew | Route::LeaseRelease
    )
}

fn expected(caller: Caller, route: Route) -> Expect {
    use Expect::*;
    let denied = Refused(403, "AccessDenied");
    match caller {
        Caller::None if native(route) => Refused(401, "MissingCredentials"),
        Caller::None => Refused(403, "AccessDenied"),
        Caller::BadSignature => Refused(403, "SignatureDoesNotMatch"),
        Caller::UnknownKey | Caller::LeaseCredsAfterGrace => Refused(403, "InvalidAccessKeyId"),
        // The bearer token opens the admin surface and nothing else: elsewhere it is not a
        // signature at all.
        Caller::AdminToken if admin_route(route) => Allowed,
        Caller::AdminToken if native(route) => Refused(400, "AuthorizationHeaderMalformed"),
        // An Authorization header that is not SigV4 is refused before s3s (review round 10).
        Caller::AdminToken => Refused(403, "AccessDenied"),
        Caller::Admin => Allowed,
        // Administration needs admin = true (or the bearer token).
        _ if admin_route(route) => denied,
        // The writer's patterns reach bucket `data`, leases `jobs-*`, and creating and
        // deleting `new-*` buckets, which is what the matrix's bucket routes target.
        Caller::Writer => Allowed,
        Caller::Reader if reads(route) => Allowed,
        Caller::Reader => denied,
        // Its key reaches bucket `other` and leases `other-*` only.
        Caller::OtherBucketKey if lease_route(route) => Allowed,
        Caller::OtherBucketKey => denied,
        // Bound to data/leased.txt: S3 reads of its bucket only; the matrix writes data/k,
        // outside the lease's scope. On the native API, where they would carry no token, they
        // are refused outright.
        Caller::LeaseCredsOtherKey if reads(route) && !native(route) => Allowed,
        Caller::LeaseCredsOtherKey => denied,
    }
}

struct Fixture {
    s: Server,
    c: reqwest::Client,
    lease_creds: Creds,
    expired_creds: Creds,
}

impl Fixture {
    async fn start(dir: &std::path::Path) -> Fixture {
        let token_file = dir.join("admin-token");
        std::fs::write(&token_file, format!("{BEARER}\n")).unwrap();
        let config = CONFIG.replace("TOKEN_FILE", token_file.to_str().unwrap());
        let s = Server::start(&dir.join("data"), Some(&config));
        let c = common::client();
        // An object to read, and two leases with credentials: one live, one past its grace.
        let put = c
            .put(s.object_url("data", "k"))
            .header("Fencing-Token", "1")
            .body("v");
        assert_eq!(json_call(&c, put, Some(WRITER)).await.0, 200);
        // A fence for the admin reset to lower, and a lease for it to revoke.
        let advance = c
            .post(s.url("/v1/fences/data/reset-me"))
            .header("Fencing-Token", "50");
        assert_eq!(json_call(&c, advance, Some(WRITER)).await.0, 200);
        let victim = c
            .post(s.url("/v1/leases/jobs-victim"))
            .json(&json!({"holder": "v", "ttl_ms": 60000}));
        assert_eq!(json_call(&c, victim, Some(WRITER)).await.0, 200);
        let mut grants = Vec::new();
        for (name, key) in [("jobs-live", "leased.txt"), ("jobs-gone", "gone.txt")] {
            let acquire = c.post(s.url(&format!("/v1/leases/{name}"))).json(&json!({
                "holder": "w", "ttl_ms": 60000, "bucket": "data", "key": key, "s3_credentials": true
            }));
            let (status, g) = json_call(&c, acquire, Some(WRITER)).await;
            assert_eq!(status, 200, "{g}");
            grants.push(g);
        }
        let gone = &grants[1];
        let release = c.delete(s.url("/v1/leases/jobs-gone")).json(&json!({
            "holder": "w", "token": gone["token"], "secret": gone["lease_secret"]
        }));
        assert_eq!(json_call(&c, release, Some(WRITER)).await.0, 204);
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        Fixture {
            lease_creds: common::sign::lease_creds(&grants[0]),
            expired_creds: common::sign::lease_creds(gone),
            s,
            c,
        }
    }

    fn creds(&self, caller: Caller) -> Option<Creds> {
        match caller {
            Caller::None => None,
            Caller::BadSignature => Some(Creds {
                key: "writer-key",
                secret: "not-the-secret",
            }),
            Caller::UnknownKey => Some(Creds {
                key: "nobody-key",
                secret: "nobody-secret",
            }),
            Caller::Reader => Some(Creds {
                key: "reader-key",
                secret: "reader-secret-0123456",
            }),
            Caller::OtherBucketKey => Some(Creds {
                key: "elsewhere-key",
                secret: "elsewhere-secret",
            }),
            Caller::LeaseCredsOtherKey => Some(self.lease_creds),
            Caller::LeaseCredsAfterGrace => Some(self.expired_creds),
            Caller::Writer => Some(WRITER),
            Caller::Admin => Some(ADMIN),
            Caller::AdminToken => None,
        }
    }

    /// Sends `route` as `caller`; returns the status and the error code, if any.
    async fn call(&self, caller: Caller, route: Route, n: usize, token: u64) -> (u16, String) {
        let (s, c) = (&self.s, &self.c);
        let lease = |suffix: &str| {
            let prefix = if caller == Caller::OtherBucketKey {
                "other"
            } else {
                "jobs"
            };
            s.url(&format!("/v1/leases/{prefix}-{suffix}-{n}"))
        };
        let token = token.to_string();
        let req = match route {
            Route::NativePut => c
                .put(s.object_url("data", "k"))
                .header("Fencing-Token", &token)
                .body("x"),
            Route::NativeGet => c.get(s.object_url("data", "k")),
            Route::NativeHead => c.head(s.object_url("data", "k")),
            Route::NativeDelete => c
                .delete(s.object_url("data", "absent"))
                .header("Fencing-Token", &token),
            Route::NativeList => c.get(s.url("/v1/objects/data")),
            Route::FenceShow => c.get(s.url("/v1/fences/data/k")),
            Route::FenceAdvance => c
                .post(s.url("/v1/fences/data/advanced"))
                .header("Fencing-Token", &token),
            Route::LeaseAcquire => c
                .post(lease("a"))
                .json(&json!({"holder": "h", "ttl_ms": 60000})),
            Route::LeaseShow => c.get(lease("a")),
            Route::LeaseRenew => c
                .put(lease("a"))
                .json(&json!({"holder": "h", "token": 1, "secret": "x", "ttl_ms": 1000})),
            Route::LeaseRelease => c
                .delete(lease("a"))
                .json(&json!({"holder": "h", "token": 1, "secret": "x"})),
            Route::S3Put => c
                .put(s.url("/data/s3k"))
                .header("Fencing-Token", &token)
                .body("x"),
            Route::S3Get => c.get(s.url("/data/k")),
            Route::S3Delete => c
                .delete(s.url("/data/s3absent"))
                .header("Fencing-Token", &token),
            Route::S3List => c.get(s.url("/data?list-type=2")),
            Route::S3CreateBucket => c.put(s.url("/new-b")),
            Route::S3DeleteBucket => c.delete(s.url("/new-b")),
            Route::S3GetTagging => c.get(s.url("/data/k?tagging")),
            Route::S3DeleteTagging => c.delete(s.url("/data/k?tagging")),
            Route::AdminMetrics => c.get(s.url("/metrics")),
            Route::AdminLeases => c.get(s.url("/admin/leases")),
            Route::AdminLeaseGet => c.get(s.url("/admin/leases/jobs-victim")),
            Route::AdminStatus => c.get(s.url("/admin/status")),
            Route::AdminRevoke => c.delete(s.url("/admin/leases/jobs-victim")),
            // Refused callers ask for 1; the admin key for 40, then the bearer for 30. Had a
            // refused reset landed first, both allowed ones would fail (not below 1).
            Route::AdminReset => c.post(s.url(&format!(
                "/admin/fences/data/reset-me?reset_to={}",
                match caller {
                    Caller::Admin => 40,
                    Caller::AdminToken => 30,
                    _ => 1,
                }
            ))),
        };
        let req = if caller == Caller::AdminToken {
            req.bearer_auth(BEARER)
        } else {
            req
        };
        let resp = send(c, req, self.creds(caller)).await;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let code = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .or_else(|| {
                text.split("<Code>")
                    .nth(1)
                    .and_then(|r| r.split("</Code>").next())
                    .map(str::to_string)
            })
            .unwrap_or_default();
        (status, code)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_times_every_caller() {
    let dir = tempfile::tempdir().unwrap();
    let fx = Fixture::start(dir.path()).await;
    let callers = [
        Caller::None,
        Caller::BadSignature,
        Caller::UnknownKey,
        Caller::Reader,
        Caller::OtherBucketKey,
        Caller::LeaseCredsOtherKey,
        Caller::LeaseCredsAfterGrace,
        Caller::Writer,
        Caller::Admin,
        Caller::AdminToken,
    ];
    let routes = [
        Route::NativePut,
        Route::NativeGet,
        Route::NativeHead,
        Route::NativeDelete,
        Route::NativeList,
        Route::FenceShow,
        Route::FenceAdvance,
        Route::LeaseAcquire,
        Route::LeaseShow,
        Route::LeaseRenew,
        Route::LeaseRelease,
        Route::S3Put,
        Route::S3Get,
        Route::S3Delete,
        Route::S3List,
        Route::S3CreateBucket,
        Route::S3DeleteBucket,
        Route::S3GetTagging,
        Route::S3DeleteTagging,
        Route::AdminMetrics,
        Route::AdminLeases,
        Route::AdminLeaseGet,
        Route::AdminStatus,
        Route::AdminRevoke,
        Route::AdminReset,
    ];
    let mut table = String::new();
    let mut wrong = Vec::new();
    let mut revoked_by_admin = false;
    let _ = write!(table, "{:<16}", "route");
    for c in &callers {
        let _ = write!(table, " {:<22}", format!("{c:?}"));
    }
    table.push('\n');
    for (n, route) in routes.iter().enumerate() {
        let _ = write!(table, "{:<16}", format!("{route:?}"));
        for (i, caller) in callers.iter().enumerate() {
            // Refused callers send higher tokens than the writer (and the admin, last, a lower
            // one): had a refused write or advance been applied, the writer's would be stale.
            let token = 100 + 10 * n as u64 + (callers.len() - 1 - i) as u64;
            let (status, code) = fx.call(*caller, *route, n, token).await;
            if (*caller, *route) == (Caller::Admin, Route::AdminRevoke) {
                // The first allowed revoke finds the lease still held: no refused one ended it.
                revoked_by_admin = status == 200;
            }
            let ok = match expected(*caller, *route) {
                Expect::Allowed => status != 401 && status != 403,
                // A HEAD answer has no body to carry the code.
                Expect::Refused(s, c) => {
                    status == s && (code == c || (*route == Route::NativeHead && code.is_empty()))
                }
            };
            let cell = format!("{}{status} {code}", if ok { "" } else { "!" });
            let _ = write!(table, " {:<22}", cell.chars().take(22).collect::<String>());
            if !ok {
                wrong.push(format!(
                    "{caller:?} x {route:?}: got {status} {code}, expected {:?}",
                    expected(*caller, *route)
                ));
            }
        }
        table.push('\n');
    }
    println!("{table}");
    assert!(wrong.is_empty(), "{table}\n{}", wrong.join("\n"));
    // Nothing a refused caller sent changed anything: the object and the advanced fence carry
    // the writer's token (route 0 and route 6), which would be stale otherwise.
    let writer_at = callers.iter().position(|c| *c == Caller::Writer).unwrap();
    let writer_token = |n: u64| 100 + 10 * n + (callers.len() - 1 - writer_at) as u64;
    let get = fx.c.get(fx.s.object_url("data", "k"));
    let resp = send(&fx.c, get, Some(ADMIN)).await;
    assert_eq!(
        resp.headers()["fencing-token"],
        writer_token(0).to_string().as_str()
    );
    let show = fx.c.get(fx.s.url("/v1/fences/data/advanced"));
    let (_, fence) = json_call(&fx.c, show, Some(ADMIN)).await;
    assert_eq!(fence["highest"], writer_token(6), "{fence}");
    assert!(
        revoked_by_admin,
        "the admin key's revoke found the lease held"
    );
    let show = fx.c.get(fx.s.url("/v1/fences/data/reset-me"));
    let (_, fence) = json_call(&fx.c, show, Some(ADMIN)).await;
    assert_eq!(
        fence["highest"], 30,
        "only the admin resets applied: {fence}"
    );
}
