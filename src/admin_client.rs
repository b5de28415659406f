//! The admin command line: `fencegate fences get|advance|list` and `fencegate leases
//! list|revoke` talk to a running instance through its admin surface (`/admin/...`,
//! src/api/admin.rs), and print aligned tables, or the server's JSON with `--json`.
//!
//! Credentials, first found wins: `--token-file` (the `[admin]` bearer token), an access key
//! named by `--access-key-id` / `--secret-access-key-file`, `FENCEGATE_ADMIN_TOKEN`, the pair
//! `FENCEGATE_ACCESS_KEY_ID` / `FENCEGATE_SECRET_ACCESS_KEY`, the pair `AWS_ACCESS_KEY_ID` /
//! `AWS_SECRET_ACCESS_KEY`; none at all is anonymous, which only development mode accepts
//! (from loopback). Keys sign with SigV4 exactly as [`crate::client`] does. Secrets come from
//! files or the environment, never from the command line (where `ps` would show them).
//!
//! A refusal prints the server's code and message and a hint of what to change, and the
//! command exits 1.

use crate::client::{self, SigningKey};
use clap::Args;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How to reach the instance, and how to print.
#[derive(Args, Debug, Clone)]
pub struct Connection {
    /// The instance's admin surface. With `[admin] listen` set, that listener's address
    /// (the native port answers 404 there).
    #[arg(
        long,
        env = "FENCEGATE_URL",
        default_value = "http://127.0.0.1:8080",
        value_name = "URL"
    )]
    pub url: String,
    /// A file holding `[admin]`'s bearer token (else FENCEGATE_ADMIN_TOKEN).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Sign with this access key (a key with admin = true); its secret comes from
    /// --secret-access-key-file, FENCEGATE_SECRET_ACCESS_KEY or AWS_SECRET_ACCESS_KEY.
    #[arg(long, value_name = "ID")]
    pub access_key_id: Option<String>,
    /// A file holding the access key's secret.
    #[arg(long, value_name = "FILE")]
    pub secret_access_key_file: Option<PathBuf>,
    /// PEM certificates to trust for https (a private CA), besides the system's roots.
    #[arg(long, env = "FENCEGATE_CA_FILE", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Print the server's JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What went wrong, each with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{status} {code}: {message}\nhint: {hint}")]
    Refused {
        status: u16,
        code: String,
        message: String,
        hint: String,
    },
    #[error("cannot reach fencegate at {url}: {detail}\nhint: {hint}")]
    Unreachable {
        url: String,
        detail: String,
        hint: String,
    },
    #[error("{0}")]
    Credentials(String),
    #[error("{0}")]
    Usage(String),
    #[error("fencegate answered {status} with something that is not its JSON: {body}")]
    BadAnswer { status: u16, body: String },
}

/// The credentials a request is sent with.
enum Credentials {
    Bearer(String),
    Key(SigningKey),
    Anonymous,
}

impl Credentials {
    fn describe(&self) -> String {
        match self {
            Credentials::Bearer(_) => "the bearer token".into(),
            Credentials::Key(k) => format!("access key {}", k.access_key_id),
            Credentials::Anonymous => "no credentials".into(),
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn read_secret(path: &Path, what: &str) -> Result<String, AdminError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        AdminError::Credentials(format!("cannot read {what} from {}: {e}", path.display()))
    })?;
    let text = text.trim().to_string();
    if text.is_empty() {
        return Err(AdminError::Credentials(format!(
            "{} is empty; it should hold {what}",
            path.display()
        )));
    }
    Ok(text)
}

fn key(access_key_id: String, secret: String) -> Credentials {
    Credentials::Key(SigningKey {
        access_key_id,
        secret,
        // fencegate takes any region in the credential scope; S3 clients default to this one.
        region: "us-east-1".into(),
    })
}

fn credentials(conn: &Connection) -> Result<Credentials, AdminError> {
    if let Some(path) = &conn.token_file {
        return Ok(Credentials::Bearer(read_secret(path, "the bearer token")?));
    }
    if conn.access_key_id.is_some() || conn.secret_access_key_file.is_some() {
        let id = conn
            .access_key_id
            .clone()
            .or_else(|| env("FENCEGATE_ACCESS_KEY_ID"))
            .ok_or_else(|| {
                AdminError::Credentials(
                    "--secret-access-key-file needs --access-key-id (or FENCEGATE_ACCESS_KEY_ID)"
                        .into(),
                )
            })?;
        let secret = match &conn.secret_access_key_file {
            Some(path) => read_secret(path, "the secret access key")?,
            None => env("FENCEGATE_SECRET_ACCESS_KEY")
                .or_else(|| env("AWS_SECRET_ACCESS_KEY"))
                .ok_or_else(|| {
                    AdminError::Credentials(format!(
                        "no secret for access key {id}: pass --secret-access-key-file FILE or set FENCEGATE_SECRET_ACCESS_KEY"
                    ))
                })?,
        };
        return Ok(key(id, secret));
    }
    if let Some(token) = env("FENCEGATE_ADMIN_TOKEN") {
        return Ok(Credentials::Bearer(token.trim().to_string()));
    }
    for (id_var, secret_var) in [
        ("FENCEGATE_ACCESS_KEY_ID", "FENCEGATE_SECRET_ACCESS_KEY"),
        ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    ] {
        match (env(id_var), env(secret_var)) {
            (Some(id), Some(secret)) => return Ok(key(id, secret)),
            (Some(_), None) => {
                return Err(AdminError::Credentials(format!(
                    "{id_var} is set but {secret_var} is not: set both, or neither"
                )))
            }
            (None, Some(_)) => {
                return Err(AdminError::Credentials(format!(
                    "{secret_var} is set but {id_var} is not: set both, or neither"
                )))
            }
            (None, None) => {}
        }
    }
    Ok(Credentials::Anonymous)
}

/// A connection to one instance's admin surface.
pub struct AdminClient {
    http: reqwest::Client,
    base: String,
    credentials: Credentials,
    https: bool,
}

const SET_CREDENTIALS: &str = "set FENCEGATE_ADMIN_TOKEN (or --token-file FILE) to [admin]'s bearer token, or FENCEGATE_ACCESS_KEY_ID and FENCEGATE_SECRET_ACCESS_KEY to a key with admin = true";

impl AdminClient {
    pub fn new(conn: &Connection) -> Result<AdminClient, AdminError> {
        let base = conn.url.trim_end_matches('/').to_string();
        let https = base.starts_with("https://");
        if !https && !base.starts_with("http://") {
            return Err(AdminError::Usage(format!(
                "--url {base:?} must start with http:// or https://"
            )));
        }
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        if let Some(path) = &conn.ca_file {
            use rustls::pki_types::{pem::PemObject, CertificateDer};
            let unusable = |e: &dyn std::fmt::Display| {
                AdminError::Usage(format!(
                    "--ca-file {}: {e}; it must hold PEM certificates",
                    path.display()
                ))
            };
            let mut added = 0;
            for cert in CertificateDer::pem_file_iter(path).map_err(|e| unusable(&e))? {
                roots
                    .add(cert.map_err(|e| unusable(&e))?)
                    .map_err(|e| unusable(&e))?;
                added += 1;
            }
            if added == 0 {
                return Err(unusable(&"no certificate found"));
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| AdminError::Usage(format!("TLS set-up: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| AdminError::Usage(format!("the HTTP client: {e}")))?;
        Ok(AdminClient {
            http,
            base,
            credentials: credentials(conn)?,
            https,
        })
    }

    /// Sends `method path?query` with the credentials; the answer's JSON, or the refusal.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> Result<Value, AdminError> {
        let mut url = format!("{}{path}", self.base);
        // Encoded by hand, every byte but letters and digits: form encoding's `+` for a space
        // would be read as `+` by the signature's canonical query.
        for (i, (k, v)) in query.iter().enumerate() {
            let sep = if i == 0 { '?' } else { '&' };
            let _ = write!(url, "{sep}{k}={}", client::urlencode(v));
        }
        let mut req = self.http.request(method, &url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Credentials::Bearer(token) = &self.credentials {
            req = req.bearer_auth(token);
        }
        let mut req = req
            .build()
            .map_err(|e| AdminError::Usage(format!("bad request to {url}: {e}")))?;
        if let Credentials::Key(key) = &self.credentials {
            client::sign(&mut req, key).map_err(|e| AdminError::Credentials(e.to_string()))?;
        }
        let resp = self
            .http
            .execute(req)
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| self.unreachable(&e))?;
        let body: Value = serde_json::from_str(&text).map_err(|_| AdminError::BadAnswer {
            status,
            body: text.chars().take(300).collect(),
        })?;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let code = body["error"].as_str().unwrap_or("").to_string();
        let message = body["message"].as_str().unwrap_or("").to_string();
        let hint = self.hint(status, &code, &message);
        Err(AdminError::Refused {
            status,
            code,
            message,
            hint,
        })
    }

    fn unreachable(&self, e: &reqwest::Error) -> AdminError {
        // The cause chain says what failed (refused, TLS, timeout); reqwest's own text does not.
        let mut detail = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            let _ = write!(detail, ": {s}");
            source = s.source();
        }
        let lower = detail.to_ascii_lowercase();
        let hint = if self.https && (lower.contains("certificate") || lower.contains("tls")) {
            "the server's certificate is not trusted: pass --ca-file with the PEM of its CA (or set FENCEGATE_CA_FILE)".to_string()
        } else if e.is_timeout() {
            "the instance did not answer in time; is it overloaded or paused?".to_string()
        } else {
            "is fencegate running there? Point --url (or FENCEGATE_URL) at its admin surface: [admin] listen when set, else [server] listen".to_string()
        };
        AdminError::Unreachable {
            url: self.base.clone(),
            detail,
            hint,
        }
    }

    fn hint(&self, status: u16, code: &str, message: &str) -> String {
        let used = self.credentials.describe();
        match (status, code) {
            (401, _) => format!("the admin surface wants credentials and got {used}: {SET_CREDENTIALS}"),
            (403, "AccessDenied") if matches!(self.credentials, Credentials::Key(_)) => format!(
                "{used} may not use the admin surface: use a key with admin = true in [keys], or the bearer token (FENCEGATE_ADMIN_TOKEN)"
            ),
            (403, "AccessDenied") if matches!(self.credentials, Credentials::Bearer(_)) => {
                "the bearer token was refused: check it against [admin] bearer_token_file / bearer_token_env, or sign with an admin key instead".into()
            }
            (403, "InvalidAccessKeyId") => format!(
                "{used} is not in the instance's [keys]: check FENCEGATE_ACCESS_KEY_ID (or AWS_ACCESS_KEY_ID)"
            ),
            (403, "SignatureDoesNotMatch") => format!(
                "the secret of {used} is wrong: check FENCEGATE_SECRET_ACCESS_KEY (or AWS_SECRET_ACCESS_KEY)"
            ),
            (403, "RequestTimeTooSkewed") => {
                "this machine's clock is more than 15 minutes off the server's: fix the clock (NTP)".into()
            }
            (403, _) => format!("refused for {used}: {SET_CREDENTIALS}"),
            (404, "NoSuchRoute") if message.contains("admin listener") => {
                "this is the native listener; the admin surface has its own ([admin] listen): point --url (or FENCEGATE_URL) at it".into()
            }
            (404, "NoSuchRoute") => {
                "no such admin route here: is --url an instance of this fencegate version?".into()
            }
            (404, "NoSuchBucket") => {
                "no such bucket on this instance: `fencegate check-config FILE` lists the configured buckets".into()
            }
            (404, "NoSuchLease") => "`fencegate leases list` shows the live leases".into(),
            (400, "InvalidFencingScope") => {
                "a header-scoped bucket needs the lock's name: pass --scope NAME".into()
            }
            (400, "TokenJumpTooLarge") => {
                "the bucket's max_token_jump limits how far one advance may go: advance in steps, or raise max_token_jump".into()
            }
            (400, _) => "fix the argument the message names".into(),
            (409, "TokenSpaceExhausted") => "no token is above 18446744073709551615".into(),
            (s, _) if s >= 500 => format!(
                "the instance could not do it now; retry{}",
                if code.is_empty() { String::new() } else { format!(" ({code})") }
            ),
            _ => "see the message".into(),
        }
    }

    /// The key is checked here first: a URL's `..` segment, encoded or not, is resolved by
    /// the URL parser before it is sent, so `a/../b` would show the fence of `b`.
    fn fence_path(bucket: &str, key: &str) -> Result<String, AdminError> {
        crate::gate::scope::validate_key(key).map_err(|e| {
            AdminError::Usage(format!("{e}; fencegate refuses such keys (400 InvalidKey)"))
        })?;
        Ok(format!(
            "/admin/fences/{}/{}",
            client::urlencode(bucket),
            client::urlencode_key(key)
        ))
    }

    /// `GET /admin/fences/{bucket}/{key}`.
    pub async fn fence(
        &self,
        bucket: &str,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Value, AdminError> {
        let headers: Vec<(&str, &str)> = scope.map(|s| ("Fencing-Scope", s)).into_iter().collect();
        self.call(
            reqwest::Method::GET,
            &Self::fence_path(bucket, key)?,
            &[],
            &headers,
        )
        .await
    }

    /// `POST /admin/fences/{bucket}/{key}?advance_to=N`.
    pub async fn advance(
        &self,
        bucket: &str,
        key: &str,
        token: &str,
        scope: Option<&str>,
    ) -> Result<Value, AdminError> {
        let headers: Vec<(&str, &str)> = scope.map(|s| ("Fencing-Scope", s)).into_iter().collect();
        self.call(
            reqwest::Method::POST,
            &Self::fence_path(bucket, key)?,
            &[("advance_to", token)],
            &headers,
        )
        .await
    }

    /// One page of `GET /admin/fences/{bucket}`.
    pub async fn fence_page(
        &self,
        bucket: &str,
        prefix: &str,
        continuation: Option<&str>,
        max_rows: usize,
    ) -> Result<Value, AdminError> {
        let max_rows = max_rows.to_string();
        let mut query = vec![("max_rows", max_rows.as_str())];
        if !prefix.is_empty() {
            query.push(("prefix", prefix));
        }
        if let Some(c) = continuation {
            query.push(("continuation_token", c));
        }
        let path = format!("/admin/fences/{}", client::urlencode(bucket));
        self.call(reqwest::Method::GET, &path, &query, &[]).await
    }

    /// `GET /admin/leases`.
    pub async fn leases(&self) -> Result<Value, AdminError> {
        self.call(reqwest::Method::GET, "/admin/leases", &[], &[])
            .await
    }

    /// `DELETE /admin/leases/{name}`.
    pub async fn revoke(&self, name: &str) -> Result<Value, AdminError> {
        let path = format!("/admin/leases/{}", client::urlencode(name));
        self.call(reqwest::Method::DELETE, &path, &[], &[]).await
    }
}

/// `fences list`: which rows, and how many at most.
#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    /// The bucket whose fence rows to list.
    pub bucket: String,
    /// Only rows of keys (and prefix scopes) starting with this.
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// Print at most this many rows (0: every row, however many; they are held in memory).
    /// When more remain, the token to continue with is printed (stderr, or
    /// next_continuation_token with --json).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub limit: usize,
    /// Rows asked per request (1 to 1000, the server's cap).
    #[arg(long, default_value_t = crate::gate::MAX_FENCE_PAGE, value_name = "N")]
    pub page_size: usize,
    /// Start after this token, from an earlier listing's next_continuation_token.
    #[arg(long, value_name = "TOKEN")]
    pub continuation_token: Option<String>,
}

/// A shown value, `-` for none.
fn shown(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::Bool(true) => "yes".into(),
        Value::Bool(false) => "no".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Columns padded to their widest cell, two spaces apart; the last one unpadded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count() + 2;
                out.push_str(cell);
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

/// `fencegate fences get`.
pub async fn get(
    conn: &Connection,
    bucket: &str,
    key: &str,
    scope: Option<&str>,
) -> Result<(), AdminError> {
    let info = AdminClient::new(conn)?.fence(bucket, key, scope).await?;
    if conn.json {
        print_json(&info);
    } else {
        print!("{}", fence_table(&info));
    }
    Ok(())
}

fn fence_table(info: &Value) -> String {
    table(
        &["BUCKET", "KEY", "SCOPE", "HIGHEST", "TOMBSTONE", "ETAG"],
        &[vec![
            shown(&info["bucket"]),
            shown(&info["key"]),
            shown(&info["scope"]),
            shown(&info["highest"]),
            shown(&info["tombstone"]),
            shown(&info["etag"]),
        ]],
    )
}

/// `fencegate fences advance`. The token is checked by the server, which owns the grammar.
pub async fn advance(
    conn: &Connection,
    bucket: &str,
    key: &str,
    token: &str,
    scope: Option<&str>,
) -> Result<(), AdminError> {
    let done = AdminClient::new(conn)?
        .advance(bucket, key, token, scope)
        .await?;
    if conn.json {
        print_json(&done);
        return Ok(());
    }
    let fence = &done["fence"];
    print!(
        "{}",
        table(
            &["SCOPE", "WAS", "HIGHEST", "ADVANCED"],
            &[vec![
                shown(&fence["scope"]),
                shown(&done["was"]),
                shown(&fence["highest"]),
                shown(&done["advanced"]),
            ]],
        )
    );
    if done["advanced"] == Value::Bool(false) {
        eprintln!(
            "note: the fence already stood at {}, at or above {token}: nothing changed (an advance never lowers a fence)",
            shown(&fence["highest"])
        );
    }
    Ok(())
}

/// `fencegate fences list`: pages until `limit` rows or the end.
pub async fn list(conn: &Connection, args: &ListArgs) -> Result<(), AdminError> {
    if !(1..=crate::gate::MAX_FENCE_PAGE).contains(&args.page_size) {
        return Err(AdminError::Usage(format!(
            "--page-size {} must be 1 to {}",
            args.page_size,
            crate::gate::MAX_FENCE_PAGE
        )));
    }
    let admin = AdminClient::new(conn)?;
    let mut rows: Vec<Value> = Vec::new();
    let mut next = args.continuation_token.clone();
    loop {
        let want = match args.limit {
            0 => args.page_size,
            limit => args.page_size.min(limit - rows.len()),
        };
        let page = admin
            .fence_page(&args.bucket, &args.prefix, next.as_deref(), want)
            .await?;
        if let Some(found) = page["rows"].as_array() {
            rows.extend(found.iter().cloned());
        }
        next = page["next_continuation_token"].as_str().map(str::to_string);
        if next.is_none() || (args.limit != 0 && rows.len() >= args.limit) {
            break;
        }
    }
    if conn.json {
        print_json(&serde_json::json!({
            "bucket": args.bucket,
            "prefix": args.prefix,
            "rows": rows,
            "next_continuation_token": next,
        }));
    } else {
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    shown(&r["scope"]),
                    shown(&r["highest"]),
                    shown(&r["tombstone"]),
                    shown(&r["pending"]),
                    shown(&r["bound_to"]),
                    shown(&r["etag"]),
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                &[
                    "SCOPE",
                    "HIGHEST",
                    "TOMBSTONE",
                    "PENDING",
                    "BOUND_TO",
                    "ETAG"
                ],
                &cells
            )
        );
        if let Some(token) = &next {
            eprintln!(
                "more rows: continue with --continuation-token '{}' (or --limit 0 for all)",
                token.replace('\'', "'\\''")
            );
        }
    }
    Ok(())
}

/// Milliseconds from now until `at_ms` (Unix), shown as seconds.
fn remaining(at_ms: &Value) -> String {
    let Some(at) = at_ms.as_u64() else {
        return "-".into();
    };
    let now = crate::wall_clock::now_ms();
    if at <= now {
        "expired".into()
    } else {
        format!("{:.1}s", (at - now) as f64 / 1000.0)
    }
}

fn binding(lease: &Value) -> String {
    match (
        lease["bound"]["bucket"].as_str(),
        lease["bound"]["key"].as_str(),
    ) {
        (Some(b), Some(k)) => format!("{b}/{k}"),
        _ => "-".into(),
    }
}

/// `fencegate leases list`.
pub async fn leases(conn: &Connection) -> Result<(), AdminError> {
    let listed = AdminClient::new(conn)?.leases().await?;
    if conn.json {
        print_json(&listed);
        return Ok(());
    }
    let empty = Vec::new();
    let cells: Vec<Vec<String>> = listed["leases"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|l| {
            vec![
                shown(&l["name"]),
                shown(&l["holder"]),
                shown(&l["token"]),
                remaining(&l["expires_at_ms"]),
                binding(l),
                shown(&l["principal"]),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "NAME",
                "HOLDER",
                "TOKEN",
                "EXPIRES_IN",
                "BOUND_TO",
                "PRINCIPAL"
            ],
            &cells
        )
    );
    let grace: Vec<&str> = listed["credentials_in_grace"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if !grace.is_empty() {
        println!(
            "S3 credentials still working after their lease ended: {}",
            grace.join(", ")
        );
    }
    Ok(())
}

/// `fencegate leases revoke`.
pub async fn revoke(conn: &Connection, name: &str) -> Result<(), AdminError> {
    let revoked = AdminClient::new(conn)?.revoke(name).await?;
    if conn.json {
        print_json(&revoked);
        return Ok(());
    }
    let lease = &revoked["lease"];
    print!(
        "{}",
        table(
            &["NAME", "HOLDER", "TOKEN", "CREDENTIALS_REVOKED"],
            &[vec![
                name.to_string(),
                shown(&lease["holder"]),
                shown(&lease["token"]),
                shown(&revoked["credentials"]),
            ]],
        )
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_on_the_widest_cell() {
        let t = table(
            &["SCOPE", "HIGHEST"],
            &[
                vec!["object:b/a-long-key".into(), "7".into()],
                vec!["object:b/k".into(), "18446744073709551615".into()],
            ],
        );
        assert_eq!(
            t,
            "SCOPE                HIGHEST\n\
             object:b/a-long-key  7\n\
             object:b/k           18446744073709551615\n"
        );
    }

    #[test]
    fn values_show_as_an_operator_reads_them() {
        assert_eq!(shown(&Value::Null), "-");
        assert_eq!(shown(&Value::Bool(true)), "yes");
        assert_eq!(shown(&serde_json::json!(u64::MAX)), "18446744073709551615");
        assert_eq!(shown(&serde_json::json!("x")), "x");
    }
}
