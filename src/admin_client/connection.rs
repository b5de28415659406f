//! Reaching a running instance's admin surface: the address and TLS settings, the first
//! credentials found (bearer token, admin key, environment), requests signed as
//! [`crate::client`] signs them, and refusals turned into errors that say what to change.

use crate::api::status::Status;
use crate::gate::{AdminAdvance, AdminReset, FenceInfo, FenceListing};
use crate::lease::{LeaseListing, LeaseShown, Revoked};
use clap::Args;
use fencegate_client::signing::{self as client, SigningKey};
use serde_json::Value;

/// An admin answer: typed for the tables, and the server's JSON as it came, for `--json`.
pub struct Answer<T> {
    pub typed: T,
    pub json: Value,
}
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
    /// `fencegate status` found the instance not ready (the answer was printed).
    #[error("{0}")]
    NotReady(String),
    #[error("fencegate answered {status} with something that is not its JSON: {body}")]
    BadAnswer { status: u16, body: String },
    /// Never followed: fencegate answers no redirect, so something else answered, and
    /// following it would carry the admin's credentials there.
    #[error("{url} answered {status}, a redirect to {location:?}, which is not followed: fencegate never redirects; point --url (or FENCEGATE_URL) at the instance itself")]
    Redirected {
        url: String,
        status: u16,
        location: String,
    },
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
    /// The CA file trusted besides the system's roots, for the hint when trust fails.
    ca_file: Option<PathBuf>,
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
        // Named in the instance's access lines, so an operator's commands stand out.
        let agent = concat!("fencegate-cli/", env!("CARGO_PKG_VERSION"));
        let http =
            super::trust::http_client(conn.ca_file.as_deref(), agent, Duration::from_secs(60))?;
        Ok(AdminClient {
            http,
            base,
            credentials: credentials(conn)?,
            https,
            ca_file: conn.ca_file.clone(),
        })
    }

    /// Sends `method path?query` with the credentials; the answer, read as the wire type the
    /// admin surface serializes (`api/admin.rs`) and kept as the server's JSON for `--json`,
    /// or the refusal.
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> Result<Answer<T>, AdminError> {
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
        if resp.status().is_redirection() {
            let location = resp.headers().get(reqwest::header::LOCATION);
            return Err(AdminError::Redirected {
                url,
                status,
                location: location
                    .map(|v| {
                        String::from_utf8_lossy(v.as_bytes())
                            .chars()
                            .take(300)
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        }
        let text = resp.text().await.map_err(|e| self.unreachable(&e))?;
        let body: Value = serde_json::from_str(&text).map_err(|_| AdminError::BadAnswer {
            status,
            body: text.chars().take(300).collect(),
        })?;
        if (200..300).contains(&status) {
            let typed = T::deserialize(&body).map_err(|_| AdminError::BadAnswer {
                status,
                body: text.chars().take(300).collect(),
            })?;
            return Ok(Answer { typed, json: body });
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
        let detail = error_chain(e);
        let lower = detail.to_ascii_lowercase();
        let hint = if self.https && (lower.contains("certificate") || lower.contains("tls")) {
            super::trust::untrusted_hint(self.ca_file.as_deref(), &detail)
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
    ) -> Result<Answer<FenceInfo>, AdminError> {
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
    ) -> Result<Answer<AdminAdvance>, AdminError> {
        self.change_fence(bucket, key, ("advance_to", token), scope)
            .await
    }

    /// `POST /admin/fences/{bucket}/{key}?reset_to=N`.
    pub async fn reset(
        &self,
        bucket: &str,
        key: &str,
        token: &str,
        scope: Option<&str>,
    ) -> Result<Answer<AdminReset>, AdminError> {
        self.change_fence(bucket, key, ("reset_to", token), scope)
            .await
    }

    /// A fence change, `?advance_to=N` or `?reset_to=N`, with the lock's name if given.
    async fn change_fence<T: serde::de::DeserializeOwned>(
        &self,
        bucket: &str,
        key: &str,
        change: (&str, &str),
        scope: Option<&str>,
    ) -> Result<Answer<T>, AdminError> {
        let headers: Vec<(&str, &str)> = scope.map(|s| ("Fencing-Scope", s)).into_iter().collect();
        self.call(
            reqwest::Method::POST,
            &Self::fence_path(bucket, key)?,
            &[change],
            &headers,
        )
        .await
    }

    /// `POST /admin/reload`: the server's account of what changed.
    pub async fn reload(&self) -> Result<Answer<Value>, AdminError> {
        self.call(reqwest::Method::POST, "/admin/reload", &[], &[])
            .await
    }

    /// One page of `GET /admin/fences/{bucket}`.
    pub async fn fence_page(
        &self,
        bucket: &str,
        prefix: &str,
        continuation: Option<&str>,
        max_rows: usize,
    ) -> Result<Answer<FenceListing>, AdminError> {
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
    pub async fn leases(&self) -> Result<Answer<LeaseListing>, AdminError> {
        self.call(reqwest::Method::GET, "/admin/leases", &[], &[])
            .await
    }

    /// `GET /admin/leases/{name}`.
    pub async fn lease(&self, name: &str) -> Result<Answer<LeaseShown>, AdminError> {
        let path = format!("/admin/leases/{}", client::urlencode(name));
        self.call(reqwest::Method::GET, &path, &[], &[]).await
    }

    /// `GET /admin/status`.
    pub async fn status(&self) -> Result<Answer<Status>, AdminError> {
        self.call(reqwest::Method::GET, "/admin/status", &[], &[])
            .await
    }

    /// `DELETE /admin/leases/{name}`.
    pub async fn revoke(&self, name: &str) -> Result<Answer<Revoked>, AdminError> {
        let path = format!("/admin/leases/{}", client::urlencode(name));
        self.call(reqwest::Method::DELETE, &path, &[], &[]).await
    }
}

/// An error with its causes: they say what failed (refused, TLS, timeout), and reqwest's own
/// text does not.
pub(super) fn error_chain(e: &reqwest::Error) -> String {
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let _ = write!(detail, ": {s}");
        source = s.source();
    }
    detail
}
