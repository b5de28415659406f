//! The admin command line (docs/operations.md, "The command line"): `fencegate fences
//! get|advance|list` and `fencegate leases list|revoke`, run as the real binary against a
//! running instance, in development mode and with keys (the bearer token, a SigV4 admin key, a
//! key that is not an admin), its tables and its --json checked for the values the server
//! holds; the admin routes they use (`/admin/fences/...`) with their bad input; the list's
//! pages on RocksDB and, when etcd and ministack are installed, on a shared etcd table.

use crate::common;
use common::sign::{send_json as call, Creds};
use common::Server;
use serde_json::{json, Value};
use std::process::Command;

/// Every variable the CLI reads, so that the caller's environment changes nothing.
const CLI_ENV: [&str; 7] = [
    "FENCEGATE_URL",
    "FENCEGATE_ADMIN_TOKEN",
    "FENCEGATE_ACCESS_KEY_ID",
    "FENCEGATE_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "FENCEGATE_CA_FILE",
];

pub(super) struct Run {
    pub ok: bool,
    pub out: String,
    pub err: String,
}

impl Run {
    pub fn json(&self) -> Value {
        assert!(self.ok, "the command failed: {}", self.err);
        serde_json::from_str(&self.out).unwrap_or_else(|e| panic!("{e}: {}", self.out))
    }

    /// The table's rows below its header, each split into its cells.
    pub fn rows(&self) -> Vec<Vec<String>> {
        assert!(self.ok, "the command failed: {}", self.err);
        self.out
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect()
    }

    pub fn header(&self) -> Vec<String> {
        let first = self.out.lines().next().unwrap_or_default();
        first.split_whitespace().map(str::to_string).collect()
    }
}

/// Runs `fencegate ARGS` against `url` with only the environment `env`.
pub(super) fn cli(url: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(common::binary());
    cmd.args(args).arg("--url").arg(url);
    for var in CLI_ENV {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("the fencegate binary runs");
    Run {
        ok: out.status.success(),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub(super) fn base(s: &Server) -> String {
    format!("http://{}", s.addr)
}

/// A fence advanced through the native API (`POST /v1/fences`), signed for `creds` if given.
async fn native_advance(
    c: &reqwest::Client,
    s: &Server,
    key: &str,
    token: u64,
    creds: Option<Creds>,
) {
    let req = c
        .post(s.url(&format!("/v1/fences/default/{key}")))
        .header("Fencing-Token", token.to_string());
    let (status, body) = call(c, req, creds).await;
    assert_eq!(status, 200, "{key}: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_development_mode_fences_are_shown_and_advanced_never_lowered() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = common::client();
    let url = base(&s);
    let put = |token: u64| {
        c.put(s.object_url("default", "report.csv"))
            .header("Fencing-Token", token.to_string())
            .body(format!("v{token}"))
    };
    assert_eq!(call(&c, put(33), None).await.0, 200);

    let get = cli(&url, &["fences", "get", "default", "report.csv"], &[]);
    assert_eq!(
        get.header(),
        ["BUCKET", "KEY", "SCOPE", "HIGHEST", "TOMBSTONE", "ETAG"]
    );
    let rows = get.rows();
    assert_eq!(rows.len(), 1, "{}", get.out);
    assert_eq!(
        rows[0][..5],
        [
            "default",
            "report.csv",
            "object:default/report.csv",
            "33",
            "no"
        ]
    );
    let info = cli(
        &url,
        &["fences", "get", "default", "report.csv", "--json"],
        &[],
    )
    .json();
    assert_eq!(info["scope"], "object:default/report.csv");
    assert_eq!(info["highest"], 33);
    assert_eq!(info["tombstone"], false);
    assert_eq!(info["etag"].as_str(), Some(rows[0][5].as_str()));

    // Advance: the new holder's token, and the old holder is fenced out without a write.
    let adv = cli(
        &url,
        &["fences", "advance", "default", "report.csv", "40"],
        &[],
    );
    assert_eq!(adv.header(), ["SCOPE", "WAS", "HIGHEST", "ADVANCED"]);
    assert_eq!(
        adv.rows(),
        [["object:default/report.csv", "33", "40", "yes"]]
    );
    let info = cli(
        &url,
        &["fences", "get", "default", "report.csv", "--json"],
        &[],
    )
    .json();
    assert_eq!(info["highest"], 40);
    assert_eq!(call(&c, put(39), None).await.0, 409);
    assert_eq!(
        s.awaited_log_lines(&["fence advanced by an admin", "dev-mode", "token=40"], 1)
            .len(),
        1,
        "the audit line names the principal"
    );

    // Below or equal: nothing changes, the answer says so, and the command succeeds.
    for lower in ["35", "40"] {
        let adv = cli(
            &url,
            &[
                "fences",
                "advance",
                "default",
                "report.csv",
                lower,
                "--json",
            ],
            &[],
        )
        .json();
        assert_eq!(adv["advanced"], false, "{adv}");
        assert_eq!(adv["was"], 40);
        assert_eq!(adv["fence"]["highest"], 40);
    }
    let adv = cli(
        &url,
        &["fences", "advance", "default", "report.csv", "35"],
        &[],
    );
    assert_eq!(
        adv.rows(),
        [["object:default/report.csv", "40", "40", "no"]]
    );
    assert!(adv.err.contains("nothing changed"), "{}", adv.err);
    assert_eq!(
        call(&c, put(40), None).await.0,
        200,
        "the fence is still 40"
    );

    // The edges of the token space.
    let adv = cli(
        &url,
        &["fences", "advance", "default", "zero", "0", "--json"],
        &[],
    )
    .json();
    assert_eq!(
        (adv["was"].clone(), adv["fence"]["highest"].clone()),
        (Value::Null, json!(0))
    );
    assert_eq!(adv["advanced"], true);
    let top = "18446744073709551615";
    let adv = cli(
        &url,
        &["fences", "advance", "default", "top", top, "--json"],
        &[],
    )
    .json();
    assert_eq!(adv["fence"]["highest"], json!(u64::MAX));
    let get = cli(&url, &["fences", "get", "default", "top"], &[]);
    assert_eq!(get.rows()[0][3], top);
    let adv = cli(
        &url,
        &["fences", "advance", "default", "top", top, "--json"],
        &[],
    )
    .json();
    assert_eq!(adv["advanced"], false, "at the top already: {adv}");
    for bad in ["18446744073709551616", "abc", "-1", "+5", "0x10", "", "1 2"] {
        let run = cli(
            &url,
            &["fences", "advance", "default", "report.csv", bad],
            &[],
        );
        assert!(!run.ok, "{bad:?} was accepted: {}", run.out);
        assert!(
            run.err.contains("400 InvalidArgument") && run.err.contains("advance_to"),
            "{bad:?}: {}",
            run.err
        );
    }
    let info = cli(
        &url,
        &["fences", "get", "default", "report.csv", "--json"],
        &[],
    )
    .json();
    assert_eq!(info["highest"], 40, "no refused advance changed the fence");

    let run = cli(&url, &["fences", "get", "nope", "k"], &[]);
    assert!(!run.ok);
    assert!(run.err.contains("404 NoSuchBucket"), "{}", run.err);
    assert!(run.err.contains("hint:"), "{}", run.err);
    // Sent, `a/../b` would become `b` on the way (URL parsers resolve dot segments).
    native_advance(&c, &s, "b", 5, None).await;
    let run = cli(&url, &["fences", "get", "default", "a/../b"], &[]);
    assert!(!run.ok, "{}", run.out);
    assert!(run.err.contains("InvalidKey"), "{}", run.err);

    // Nobody listening: the URL and what to check.
    let run = cli(
        "http://127.0.0.1:1",
        &["fences", "get", "default", "k"],
        &[],
    );
    assert!(!run.ok);
    assert!(
        run.err
            .contains("cannot reach fencegate at http://127.0.0.1:1"),
        "{}",
        run.err
    );
    assert!(run.err.contains("FENCEGATE_URL"), "{}", run.err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_lease_is_gone_and_its_holder_cannot_renew() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = common::client();
    let url = base(&s);
    let (status, grant) = call(
        &c,
        c.post(s.url("/v1/leases/nightly-report")).json(&json!({
            "holder": "worker-a", "ttl_ms": 600000, "bucket": "default", "key": "report.csv"
        })),
        None,
    )
    .await;
    assert_eq!(status, 200, "{grant}");
    let token = grant["token"].as_u64().unwrap();
    // A second lease with S3 credentials: the table names the key id a client signs with.
    let (status, spark) = call(
        &c,
        c.post(s.url("/v1/leases/spark")).json(&json!({
            "holder": "spark-job", "ttl_ms": 600000, "bucket": "default", "key": "out.parquet",
            "s3_credentials": true
        })),
        None,
    )
    .await;
    assert_eq!(status, 200, "{spark}");
    let spark_key = spark["s3_credentials"]["access_key_id"].as_str().unwrap();

    let list = cli(&url, &["leases", "list"], &[]);
    assert_eq!(
        list.header(),
        [
            "NAME",
            "HOLDER",
            "TOKEN",
            "EXPIRES_IN",
            "BOUND_TO",
            "S3_ACCESS_KEY_ID",
            "PRINCIPAL"
        ]
    );
    let rows = list.rows();
    assert_eq!(rows.len(), 2, "{}", list.out);
    let spark_row = rows.iter().find(|r| r[0] == "spark").unwrap();
    assert_eq!(
        spark_row[4..],
        ["default/out.parquet", spark_key, "dev-mode"]
    );
    let rows: Vec<_> = rows.iter().filter(|r| r[0] == "nightly-report").collect();
    let shown_token = token.to_string();
    assert_eq!(
        rows[0][..3],
        ["nightly-report", "worker-a", shown_token.as_str()]
    );
    assert!(rows[0][3].ends_with('s'), "{}", list.out);
    assert_eq!(rows[0][4..], ["default/report.csv", "-", "dev-mode"]);
    let listed = cli(&url, &["leases", "list", "--json"], &[]).json();
    let first = listed["leases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "nightly-report")
        .unwrap();
    assert_eq!(first["holder"], "worker-a");
    assert_eq!(first["token"], token);
    assert!(first.get("lease_secret").is_none());
    // --json prints the server's answer as it came, not the client's reading of it.
    let served: serde_json::Value = common::client()
        .get(format!("{url}/admin/leases"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed, served);

    let revoke = cli(&url, &["leases", "revoke", "nightly-report"], &[]);
    assert_eq!(
        revoke.header(),
        ["NAME", "HOLDER", "TOKEN", "CREDENTIALS_REVOKED"]
    );
    assert_eq!(
        revoke.rows(),
        [["nightly-report", "worker-a", shown_token.as_str(), "0"]]
    );
    assert_eq!(
        s.awaited_log_lines(&["lease revoked", "dev-mode"], 1).len(),
        1
    );

    // The holder finds out at its next renewal.
    let (status, body) = call(
        &c,
        c.put(s.url("/v1/leases/nightly-report")).json(&json!({
            "holder": "worker-a", "token": token, "secret": grant["lease_secret"], "ttl_ms": 600000
        })),
        None,
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("NoSuchLease")),
        "{body}"
    );
    let listed = cli(&url, &["leases", "list", "--json"], &[]).json();
    let names: Vec<_> = listed["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["spark"], "{listed}");
    let run = cli(&url, &["leases", "revoke", "nightly-report"], &[]);
    assert!(!run.ok);
    assert!(run.err.contains("404 NoSuchLease"), "{}", run.err);
    assert!(run.err.contains("leases list"), "{}", run.err);
    // The next grant fences the revoked holder's token out.
    let (status, next) = call(
        &c,
        c.post(s.url("/v1/leases/nightly-report")).json(&json!({
            "holder": "worker-b", "ttl_ms": 600000, "bucket": "default", "key": "report.csv"
        })),
        None,
    )
    .await;
    assert_eq!(status, 200, "{next}");
    assert!(next["token"].as_u64().unwrap() > token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_is_listed_by_prefix_page_after_page() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = common::client();
    let url = base(&s);
    for i in 1..=7u64 {
        native_advance(&c, &s, &format!("a/{i}"), 10 + i, None).await;
    }
    for i in 1..=3u64 {
        native_advance(&c, &s, &format!("b/{i}"), 20 + i, None).await;
    }
    let (status, body) = call(
        &c,
        c.delete(s.object_url("default", "b/1"))
            .header("Fencing-Token", "30"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // Three pages of three behind one table.
    let list = cli(
        &url,
        &[
            "fences",
            "list",
            "default",
            "--prefix",
            "a/",
            "--page-size",
            "3",
        ],
        &[],
    );
    assert_eq!(
        list.header(),
        [
            "SCOPE",
            "HIGHEST",
            "TOMBSTONE",
            "PENDING",
            "LOCK_SCOPE",
            "ETAG"
        ]
    );
    let rows = list.rows();
    let want: Vec<Vec<String>> = (1..=7u64)
        .map(|i| {
            let mut row = vec![format!("object:default/a/{i}"), (10 + i).to_string()];
            row.extend(["no", "no", "-", "-"].map(str::to_string));
            row
        })
        .collect();
    assert_eq!(rows, want);
    assert!(!list.err.contains("more rows"), "{}", list.err);

    // A limit stops early and names where to go on; going on finishes the listing.
    let first = cli(
        &url,
        &[
            "fences",
            "list",
            "default",
            "--prefix",
            "a/",
            "--page-size",
            "3",
            "--limit",
            "5",
            "--json",
        ],
        &[],
    )
    .json();
    let keys = |v: &Value| -> Vec<String> {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["key"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(keys(&first), ["a/1", "a/2", "a/3", "a/4", "a/5"]);
    let token = first["next_continuation_token"]
        .as_str()
        .unwrap()
        .to_string();
    let table = cli(
        &url,
        &[
            "fences", "list", "default", "--prefix", "a/", "--limit", "5",
        ],
        &[],
    );
    assert!(table.err.contains("--continuation-token"), "{}", table.err);
    let rest = cli(
        &url,
        &[
            "fences",
            "list",
            "default",
            "--prefix",
            "a/",
            "--continuation-token",
            &token,
            "--json",
        ],
        &[],
    )
    .json();
    assert_eq!(keys(&rest), ["a/6", "a/7"]);
    assert_eq!(rest["next_continuation_token"], Value::Null);

    // The whole bucket, the tombstone of the delete included.
    let all = cli(&url, &["fences", "list", "default", "--json"], &[]).json();
    assert_eq!(all["rows"].as_array().unwrap().len(), 10, "{all}");
    let b1 = &all["rows"][7];
    assert_eq!(b1["scope"], "object:default/b/1");
    assert_eq!(
        (b1["highest"].clone(), b1["tombstone"].clone()),
        (json!(30), json!(true))
    );
    assert_eq!(all["rows"][8]["tombstone"], false);
    let run = cli(
        &url,
        &["fences", "list", "default", "--page-size", "1001"],
        &[],
    );
    assert!(!run.ok);
    assert!(run.err.contains("--page-size"), "{}", run.err);
    let run = cli(&url, &["fences", "list", "nope"], &[]);
    assert!(run.err.contains("404 NoSuchBucket"), "{}", run.err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_caps_a_page_and_refuses_bad_listing_input() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = common::client();
    let url = base(&s);
    // More rows than one page holds.
    let total = 1005u64;
    let mut tasks = futures::stream::iter(0..total)
        .map(|i| {
            let req = c
                .post(s.url(&format!("/v1/fences/default/many/{i:04}")))
                .header("Fencing-Token", (i + 1).to_string());
            async move { req.send().await.unwrap().status().as_u16() }
        })
        .buffer_unordered(32);
    use futures::StreamExt;
    while let Some(status) = tasks.next().await {
        assert_eq!(status, 200);
    }
    let page = |query: &str| c.get(s.url(&format!("/admin/fences/default?{query}")));
    let (status, first) = call(&c, page("prefix=many/"), None).await;
    assert_eq!(status, 200, "{first}");
    let rows = first["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1000, "the server's cap");
    assert_eq!(rows[999]["scope"], "object:default/many/0999");
    assert_eq!(rows[999]["highest"], 1000);
    let next = first["next_continuation_token"].as_str().unwrap();
    assert_eq!(next, "object:default/many/0999");
    let (status, second) = call(
        &c,
        page(&format!("prefix=many/&continuation_token={}", enc(next))),
        None,
    )
    .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["rows"].as_array().unwrap().len(), 5);
    assert_eq!(second["rows"][4]["highest"], total);
    assert_eq!(second["next_continuation_token"], Value::Null);

    for bad in [
        "max_rows=1001",
        "max_rows=0",
        "max_rows=abc",
        "max_rows=-1",
        "prefix=many/&continuation_token=object%3Aother%2Fx",
        "prefix=many/&continuation_token=object%3Adefault%2Fzzz",
        "prefix=many/&prefix=other/",
        "prefix=%01",
    ] {
        let (status, body) = call(&c, page(bad), None).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("InvalidArgument")),
            "{bad}: {body}"
        );
    }
    let (status, body) = call(&c, c.get(s.url("/admin/fences/nope")), None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("NoSuchBucket")),
        "{body}"
    );
    // advance_to and reset_to: one, and exactly one.
    let change = |query: &str| c.post(s.url(&format!("/admin/fences/default/many/0001?{query}")));
    for bad in ["", "advance_to=5&reset_to=1", "advance_to=5&advance_to=6"] {
        let (status, body) = call(&c, change(bad), None).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("InvalidArgument")),
            "{bad}: {body}"
        );
    }

    // The CLI follows every page when asked for all.
    let all = cli(
        &url,
        &[
            "fences", "list", "default", "--prefix", "many/", "--limit", "0", "--json",
        ],
        &[],
    )
    .json();
    assert_eq!(all["rows"].as_array().unwrap().len() as u64, total);
    assert_eq!(all["next_continuation_token"], Value::Null);
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

const TOKEN: &str = "admin-bearer-token-for-the-cli-tests-01";
const WRITER: Creds = Creds {
    key: "app-key",
    secret: "app-secret-0123456",
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keys_the_bearer_token_and_admin_keys_work_and_others_are_told_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let admin_port = common::moto::free_port();
    let config = format!(
        r#"
[admin]
listen = "127.0.0.1:{admin_port}"
bearer_token_file = "{}"

[keys.ops]
access_key_id = "ops-key"
secret_access_key = "ops-secret-0123456"
admin = true

[keys.app]
access_key_id = "app-key"
secret_access_key = "app-secret-0123456"
buckets = {{ "default" = ["read", "write", "delete", "fence", "lease"] }}
lease_names = ["*"]

[buckets.default]
"#,
        token_file.display()
    );
    let s = Server::start(&dir.path().join("data"), Some(&config));
    let c = common::client();
    let admin_url = format!("http://127.0.0.1:{admin_port}");
    let tf = token_file.to_str().unwrap();
    native_advance(&c, &s, "dir one/a+b", 7, Some(WRITER)).await;
    native_advance(&c, &s, "dir one/a b", 8, Some(WRITER)).await;
    native_advance(&c, &s, "dir one/c", 9, Some(WRITER)).await;

    let ops = [
        ("FENCEGATE_ACCESS_KEY_ID", "ops-key"),
        ("FENCEGATE_SECRET_ACCESS_KEY", "ops-secret-0123456"),
    ];
    let aws_ops = [
        ("AWS_ACCESS_KEY_ID", "ops-key"),
        ("AWS_SECRET_ACCESS_KEY", "ops-secret-0123456"),
    ];
    let bearer = [("FENCEGATE_ADMIN_TOKEN", TOKEN)];
    let get = ["fences", "get", "default", "dir one/a+b", "--json"];
    for (how, env) in [
        ("bearer", &bearer[..]),
        ("key", &ops[..]),
        ("aws key", &aws_ops[..]),
    ] {
        let info = cli(&admin_url, &get, env).json();
        assert_eq!(info["highest"], 7, "{how}: {info}");
    }
    let info = cli(
        &admin_url,
        &[&get[..], &["--token-file", tf][..]].concat(),
        &[],
    )
    .json();
    assert_eq!(info["highest"], 7);

    // The query is signed too, a space and a `+` in it.
    let listed = cli(
        &admin_url,
        &[
            "fences",
            "list",
            "default",
            "--prefix",
            "dir one/a",
            "--page-size",
            "1",
            "--json",
        ],
        &ops,
    )
    .json();
    let scopes: Vec<&str> = listed["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["scope"].as_str().unwrap())
        .collect();
    assert_eq!(
        scopes,
        ["object:default/dir one/a b", "object:default/dir one/a+b"]
    );
    let listed = cli(
        &admin_url,
        &[
            "fences",
            "list",
            "default",
            "--prefix",
            "dir one/a+",
            "--json",
        ],
        &ops,
    )
    .json();
    assert_eq!(listed["rows"].as_array().unwrap().len(), 1, "{listed}");

    let adv = cli(
        &admin_url,
        &["fences", "advance", "default", "dir one/c", "12", "--json"],
        &ops,
    )
    .json();
    assert_eq!(
        (adv["was"].clone(), adv["fence"]["highest"].clone()),
        (json!(9), json!(12))
    );
    assert_eq!(
        s.awaited_log_lines(&["fence advanced by an admin", "key:ops", "token=12"], 1)
            .len(),
        1
    );
    let adv = cli(
        &admin_url,
        &[
            "fences",
            "advance",
            "default",
            "dir one/c",
            "13",
            "--token-file",
            tf,
            "--json",
        ],
        &[],
    )
    .json();
    assert_eq!(adv["fence"]["highest"], 13);
    assert_eq!(
        s.awaited_log_lines(
            &["fence advanced by an admin", "admin-token", "token=13"],
            1
        )
        .len(),
        1
    );

    // A key that is not an admin's: refused, and told what would do.
    let writer = [
        ("FENCEGATE_ACCESS_KEY_ID", "app-key"),
        ("FENCEGATE_SECRET_ACCESS_KEY", "app-secret-0123456"),
    ];
    let run = cli(
        &admin_url,
        &["fences", "advance", "default", "dir one/c", "99"],
        &writer,
    );
    assert!(!run.ok);
    assert!(run.err.contains("403 AccessDenied"), "{}", run.err);
    assert!(run.err.contains("admin = true"), "{}", run.err);
    let info = cli(
        &admin_url,
        &["fences", "get", "default", "dir one/c", "--json"],
        &ops,
    )
    .json();
    assert_eq!(info["highest"], 13, "the refused advance changed nothing");

    // No credentials, wrong ones, half of a pair, the wrong listener.
    let run = cli(&admin_url, &["leases", "list"], &[]);
    assert!(!run.ok);
    assert!(run.err.contains("401 MissingCredentials"), "{}", run.err);
    assert!(run.err.contains("FENCEGATE_ADMIN_TOKEN"), "{}", run.err);
    let run = cli(
        &admin_url,
        &["leases", "list"],
        &[("FENCEGATE_ADMIN_TOKEN", "not-the-token")],
    );
    assert!(run.err.contains("403 AccessDenied"), "{}", run.err);
    assert!(run.err.contains("bearer token was refused"), "{}", run.err);
    let run = cli(
        &admin_url,
        &["leases", "list"],
        &[
            ("FENCEGATE_ACCESS_KEY_ID", "ops-key"),
            ("FENCEGATE_SECRET_ACCESS_KEY", "wrong"),
        ],
    );
    assert!(run.err.contains("403 SignatureDoesNotMatch"), "{}", run.err);
    let run = cli(
        &admin_url,
        &["leases", "list"],
        &[("FENCEGATE_ACCESS_KEY_ID", "ops-key")],
    );
    assert!(!run.ok);
    assert!(
        run.err.contains("FENCEGATE_SECRET_ACCESS_KEY is not"),
        "{}",
        run.err
    );
    let run = cli(&base(&s), &["leases", "list"], &bearer);
    assert!(!run.ok);
    assert!(run.err.contains("404 NoSuchRoute"), "{}", run.err);
    assert!(run.err.contains("[admin] listen"), "{}", run.err);

    // Leases with the bearer token: listed with the key that holds them, and revoked.
    let (status, grant) = call(
        &c,
        c.post(s.url("/v1/leases/etl"))
            .json(&json!({"holder": "spark", "ttl_ms": 600000})),
        Some(WRITER),
    )
    .await;
    assert_eq!(status, 200, "{grant}");
    let rows = cli(&admin_url, &["leases", "list"], &bearer).rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0][0].as_str(),
            rows[0][1].as_str(),
            rows[0][4].as_str(),
            rows[0][6].as_str()
        ),
        ("etl", "spark", "-", "key:app")
    );
    let run = cli(&admin_url, &["leases", "revoke", "etl", "--json"], &ops);
    assert_eq!(run.json()["lease"]["holder"], "spark");
    assert_eq!(
        s.awaited_log_lines(&["lease revoked", "key:ops"], 1).len(),
        1
    );
    let (status, body) = call(
        &c,
        c.put(s.url("/v1/leases/etl")).json(&json!({
            "holder": "spark", "token": grant["token"], "secret": grant["lease_secret"], "ttl_ms": 600000
        })),
        Some(WRITER),
    )
    .await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_https_the_cli_trusts_the_ca_file_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let (pem, key) = (dir.path().join("live.pem"), dir.path().join("live.key"));
    std::fs::write(&pem, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    let config = format!(
        "[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n\n[buckets.default]\n",
        pem.display(),
        key.display()
    );
    let s = Server::start(&dir.path().join("data"), Some(&config));
    let url = format!("https://127.0.0.1:{}", s.addr.port());
    let run = cli(&url, &["fences", "advance", "default", "k", "3"], &[]);
    assert!(!run.ok, "an unknown CA was trusted: {}", run.out);
    assert!(run.err.contains("--ca-file"), "{}", run.err);
    let pem = pem.to_str().unwrap();
    let run = cli(
        &url,
        &["fences", "advance", "default", "k", "3", "--ca-file", pem],
        &[],
    );
    assert_eq!(run.rows(), [["object:default/k", "-", "3", "yes"]]);
    let run = cli(
        &url,
        &["fences", "get", "default", "k", "--json"],
        &[("FENCEGATE_CA_FILE", pem)],
    );
    assert_eq!(run.json()["highest"], 3);
    let run = cli(
        &url,
        &[
            "fences",
            "get",
            "default",
            "k",
            "--ca-file",
            "/nonexistent.pem",
        ],
        &[],
    );
    assert!(!run.ok);
    assert!(run.err.contains("/nonexistent.pem"), "{}", run.err);
}

/// Something other than fencegate answering with a redirect: the command names where it
/// pointed and sends nothing there (it would carry the admin's credentials).
#[test]
fn the_cli_names_a_redirect_and_does_not_follow_it() {
    use std::io::{Read, Write};
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = format!(
        "http://{}/admin/fences/default/k",
        elsewhere.local_addr().unwrap()
    );
    elsewhere.set_nonblocking(true).unwrap();
    let redirecting = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", redirecting.local_addr().unwrap());
    let answer = format!(
        "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    std::thread::spawn(move || {
        for conn in redirecting.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = [0u8; 4096];
            let _ = conn.read(&mut head);
            let _ = conn.write_all(answer.as_bytes());
        }
    });
    let run = cli(
        &url,
        &["fences", "get", "default", "k"],
        &[("FENCEGATE_ADMIN_TOKEN", "a-token-that-must-stay-here-0123")],
    );
    assert!(!run.ok, "{}", run.out);
    assert!(
        run.err.contains("307") && run.err.contains(&target) && run.err.contains("not followed"),
        "{}",
        run.err
    );
    assert!(
        elsewhere.accept().is_err(),
        "the redirect was followed to {target}"
    );
}

/// Makes `name`.pem and `name`.key with OpenSSL's usual one-liner (docs/security.md, "A test
/// certificate"), for `san`; OpenSSL 3 marks such a certificate as a CA (CA:TRUE).
fn openssl_certificate(dir: &std::path::Path, name: &str, san: &str) -> std::path::PathBuf {
    let (pem, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args([
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=localhost",
        ])
        .args(["-addext", &format!("subjectAltName={san}"), "-days", "1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&pem)
        .output()
        .expect("openssl runs (the test makes its certificate as docs/security.md does)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&pem)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"),
        "the one-liner no longer makes a CA certificate: this test checks nothing"
    );
    pem
}

fn tls_server(dir: &std::path::Path, name: &str) -> Server {
    let config = format!(
        "[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n\n[buckets.default]\n",
        dir.join(format!("{name}.pem")).display(),
        dir.join(format!("{name}.key")).display()
    );
    Server::start(&dir.join(format!("data-{name}")), Some(&config))
}

/// The certificate OpenSSL 3's one-liner makes is marked as a CA, which WebPKI refuses as a
/// server's own: the command line takes it when it is the very certificate FENCEGATE_CA_FILE
/// holds, as curl does, and still checks the name. A CA file that does not vouch for the
/// server is refused with a hint that says why, not one that asks for the file again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_https_the_cli_accepts_the_openssl_one_liners_certificate_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let pem = openssl_certificate(dir.path(), "live", "DNS:localhost,IP:127.0.0.1");
    let pem = pem.to_str().unwrap();
    let s = tls_server(dir.path(), "live");
    for host in ["127.0.0.1", "localhost"] {
        let url = format!("https://{host}:{}", s.addr.port());
        let run = cli(
            &url,
            &["fences", "advance", "default", "k", "3"],
            &[("FENCEGATE_CA_FILE", pem)],
        );
        assert!(run.ok, "{host}: {}", run.err);
        let run = cli(
            &url,
            &["fences", "get", "default", "k", "--ca-file", pem, "--json"],
            &[],
        );
        assert_eq!(run.json()["highest"], 3, "{host}");
    }
    let url = format!("https://127.0.0.1:{}", s.addr.port());

    // Another one-liner certificate in the file: not the server's, so not trusted.
    let other = openssl_certificate(dir.path(), "other", "DNS:localhost,IP:127.0.0.1");
    let other = other.to_str().unwrap();
    let run = cli(
        &url,
        &["fences", "get", "default", "k"],
        &[("FENCEGATE_CA_FILE", other)],
    );
    assert!(
        !run.ok,
        "a certificate the file does not hold was trusted: {}",
        run.out
    );
    assert!(
        run.err.contains(other)
            && run.err.contains("CA:TRUE")
            && !run.err.contains("pass --ca-file"),
        "{}",
        run.err
    );

    // The pinned certificate for another name: refused for the name, as WebPKI would.
    let elsewhere = openssl_certificate(dir.path(), "elsewhere", "DNS:elsewhere.example");
    let s = tls_server(dir.path(), "elsewhere");
    let url = format!("https://127.0.0.1:{}", s.addr.port());
    let pinned = [("FENCEGATE_CA_FILE", elsewhere.to_str().unwrap())];
    let run = cli(&url, &["fences", "get", "default", "k"], &pinned);
    assert!(
        !run.ok,
        "a certificate for another name was trusted: {}",
        run.out
    );
    assert!(
        run.err.contains("does not name the host of --url"),
        "{}",
        run.err
    );
}

/// The list on a fence table shared on etcd: rows advanced through one instance are listed,
/// page after page, through the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_etcd_table_the_list_pages_through_rows_of_every_instance() {
    let etcd = Command::new("etcd").arg("--version").output();
    if !etcd.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: etcd is not installed (scripts/test installs etcd-server)");
        return;
    }
    let ministack =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-ministack/bin/ministack");
    if !ministack.exists() {
        eprintln!(
            "SKIPPED: ministack is not installed at {} (scripts/test installs it)",
            ministack.display()
        );
        return;
    }
    let cluster = common::cluster::Cluster::up(2, "ministack");
    let c = common::client();
    for i in 1..=5u64 {
        let (status, body) = call(
            &c,
            c.post(cluster.url(1, &format!("/v1/fences/default/shared/{i}")))
                .header("Fencing-Token", (100 + i).to_string()),
            None,
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let url2 = cluster.url(2, "");
    let listed = cli(
        &url2,
        &[
            "fences",
            "list",
            "default",
            "--prefix",
            "shared/",
            "--page-size",
            "2",
            "--json",
        ],
        &[],
    )
    .json();
    let highest: Vec<u64> = listed["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["highest"].as_u64().unwrap())
        .collect();
    assert_eq!(highest, [101, 102, 103, 104, 105], "{listed}");
    let page = cli(
        &url2,
        &[
            "fences", "list", "default", "--prefix", "shared/", "--limit", "2", "--json",
        ],
        &[],
    )
    .json();
    assert_eq!(page["next_continuation_token"], "object:default/shared/2");
    let rest = cli(
        &url2,
        &[
            "fences",
            "list",
            "default",
            "--prefix",
            "shared/",
            "--continuation-token",
            "object:default/shared/2",
            "--json",
        ],
        &[],
    )
    .json();
    assert_eq!(rest["rows"].as_array().unwrap().len(), 3);
    // An advance through instance 2 is seen through instance 1.
    let adv = cli(
        &url2,
        &["fences", "advance", "default", "shared/1", "200", "--json"],
        &[],
    )
    .json();
    assert_eq!(adv["was"], 101);
    let info = cli(
        &cluster.url(1, ""),
        &["fences", "get", "default", "shared/1", "--json"],
        &[],
    )
    .json();
    assert_eq!(info["highest"], 200);

    // `status` lists etcd's members as each answers: one leader; a member killed answers no
    // more, and the instance stays ready while the others keep a quorum.
    let status = cli(&url2, &["status", "--json"], &[]).json();
    assert_eq!(status["fence_store"]["kind"], "etcd", "{status}");
    let members = status["fence_store"]["members"].as_array().unwrap().clone();
    assert_eq!(members.len(), 3, "{status}");
    assert!(members.iter().all(|m| m["ok"] == true), "{status}");
    let leaders: Vec<&Value> = members.iter().filter(|m| m["leader"] == true).collect();
    assert_eq!(leaders.len(), 1, "{status}");
    assert!(status["fence_store"].get("rows").is_none(), "{status}");
    let leader = cluster.leader();
    let follower = ["etcd1", "etcd2", "etcd3"]
        .into_iter()
        .find(|m| *m != leader)
        .unwrap();
    let port = cluster.var(&format!("{}_CLIENT", follower.to_uppercase()));
    cluster.signal(follower, "KILL");
    let run = cli(&url2, &["status"], &[]);
    assert!(run.ok, "{}\n{}", run.out, run.err);
    let row = run
        .out
        .lines()
        .find(|l| l.starts_with(&format!("http://127.0.0.1:{port} ")))
        .unwrap_or_else(|| panic!("no row for the killed member (port {port}):\n{}", run.out));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1..3], ["no", "no"], "{}", run.out);
}

/// The admin commands an operator reaches for without curl: `fences reset` lowers a fence
/// advanced too far (and refuses one that would not lower it), `reload` reads the keys and
/// policies again and says what changed, and `leases revoke` of nothing gives an operator's
/// advice, not a worker's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_reload_and_revoke_speak_to_an_operator() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = common::client();
    let url = base(&s);
    native_advance(&c, &s, "mistake.csv", 9_000_000, None).await;
    let reset = cli(
        &url,
        &["fences", "reset", "default", "mistake.csv", "40"],
        &[],
    );
    assert_eq!(reset.header(), ["SCOPE", "WAS", "HIGHEST"], "{}", reset.err);
    assert_eq!(
        reset.rows()[0],
        ["object:default/mistake.csv", "9000000", "40"]
    );
    assert!(reset.err.contains("accepted again"), "{}", reset.err);
    let write = |token: u64| {
        c.put(s.object_url("default", "mistake.csv"))
            .header("Fencing-Token", token.to_string())
            .body("after the reset")
    };
    assert_eq!(call(&c, write(41), None).await.0, 200);
    let again = cli(
        &url,
        &["fences", "reset", "default", "mistake.csv", "99"],
        &[],
    );
    assert!(!again.ok, "{}", again.out);
    assert!(again.err.contains("InvalidArgument"), "{}", again.err);

    let reload = cli(&url, &["reload"], &[]);
    assert_eq!(reload.json()["reloaded"], true, "{}", reload.out);

    let revoke = cli(&url, &["leases", "revoke", "never-held"], &[]);
    assert!(!revoke.ok);
    assert!(revoke.err.contains("nothing was revoked"), "{}", revoke.err);
    assert!(!revoke.err.contains("acquire"), "{}", revoke.err);
}
