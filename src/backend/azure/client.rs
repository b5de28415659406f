//! Requests to the Blob service: the account and its shared key (from the configuration or the
//! environment Azure's tools read; a SAS token of the user's own is refused), Shared Key
//! signing, the per-request SAS a commit carries, and one pooled HTTP client that never
//! retries a write by itself.

use super::errors::{answered, unanswered, AzFailure};
use crate::backend::spool::Spooled;
use crate::backend::BackendError;
use crate::config::AzureBackendConfig;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::time::Duration;

/// The REST version every request names; Azurite 3.37 and Azure both serve it.
pub const API_VERSION: &str = "2021-08-06";

/// Characters a blob name keeps unescaped in a URL path (RFC 3986's unreserved, and `/`).
const PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');
/// A query value: unreserved characters only.
const QUERY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One storage account's blob service.
pub struct AzureClient {
    http: reqwest::Client,
    /// The service URL without a trailing slash (`https://acct.blob.core.windows.net`, or
    /// Azurite's `http://127.0.0.1:10000/devstoreaccount1`).
    endpoint: String,
    /// The URL path of the service (`""`, or `/devstoreaccount1`): it is part of the signed
    /// resource.
    base_path: String,
    pub account: String,
    /// The account's shared key (decoded): it signs each request, or the SAS a commit carries.
    key: Vec<u8>,
    pub read_attempts: u32,
}

/// One request: method, container, blob (may be empty: a container request), query, headers.
pub struct Request<'a> {
    pub method: reqwest::Method,
    pub container: &'a str,
    pub blob: &'a str,
    pub query: Vec<(&'static str, String)>,
    pub headers: Vec<(String, String)>,
    /// A SAS this request is authorized by instead of a Shared Key signature: the service
    /// refuses it once the SAS has expired, however long the request was in flight.
    pub sas: Option<String>,
    /// The body, and the range of it sent.
    pub body: Option<(Spooled, u64, u64)>,
}

impl<'a> Request<'a> {
    pub fn new(method: reqwest::Method, container: &'a str, blob: &'a str) -> Request<'a> {
        Request {
            method,
            container,
            blob,
            query: Vec::new(),
            headers: Vec::new(),
            sas: None,
            body: None,
        }
    }

    pub fn query(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.query.push((name, value.into()));
        self
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    pub fn sas(mut self, sas: String) -> Self {
        self.sas = Some(sas);
        self
    }

    pub fn body(mut self, body: Spooled) -> Self {
        let len = body.len();
        self.body = Some((body, 0, len));
        self
    }

    /// `len` bytes of `body` from `start`.
    pub fn body_range(mut self, body: &Spooled, start: u64, len: u64) -> Self {
        self.body = Some((body.clone(), start, len));
        self
    }
}

/// The parts of `AZURE_STORAGE_CONNECTION_STRING` fencegate reads.
#[derive(Default)]
struct ConnectionString {
    account: Option<String>,
    key: Option<String>,
    sas: Option<String>,
    endpoint: Option<String>,
}

fn parse_connection_string(text: &str) -> ConnectionString {
    let mut out = ConnectionString::default();
    for part in text.split(';').filter(|p| !p.is_empty()) {
        let Some((name, value)) = part.split_once('=') else {
            continue;
        };
        let value = Some(value.to_string());
        match name {
            "AccountName" => out.account = value,
            "AccountKey" => out.key = value,
            "SharedAccessSignature" => out.sas = value,
            "BlobEndpoint" => out.endpoint = value,
            _ => {}
        }
    }
    out
}

fn env(names: &[&str]) -> Option<String> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
}

impl AzureClient {
    /// The client of an `[backends.NAME]` table of kind `azure`, its unset fields read from
    /// the environment. The error names what is missing, never a secret.
    pub fn build(cfg: &AzureBackendConfig) -> Result<AzureClient, String> {
        let conn = env(&["AZURE_STORAGE_CONNECTION_STRING"])
            .map(|c| parse_connection_string(&c))
            .unwrap_or_default();
        let account = cfg
            .account
            .clone()
            .or(conn.account)
            .or_else(|| env(&["AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_ACCOUNT_NAME"]))
            .ok_or("no storage account: set account, or AZURE_STORAGE_ACCOUNT (or AZURE_STORAGE_CONNECTION_STRING)")?;
        let key = cfg
            .access_key
            .clone()
            .or(conn.key)
            .or_else(|| env(&["AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY"]));
        let sas = cfg
            .sas_token
            .clone()
            .or(conn.sas)
            .or_else(|| env(&["AZURE_STORAGE_SAS_TOKEN"]));
        let key = match (key, sas) {
            (Some(key), _) => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(key.trim())
                    .map_err(|_| "the account key is not base64; copy it from the portal's access keys")?
            }
            // Refused until each commit carries an expiry of its own (docs/backends.md).
            (None, Some(_)) => return Err("a SAS token (sas_token or AZURE_STORAGE_SAS_TOKEN) is not taken: a commit it authorized could land until it expires; set access_key (or AZURE_STORAGE_KEY), with which fencegate signs a SAS for each commit that expires with the commit's deadline".into()),
            (None, None) => return Err("no credentials: set access_key, or AZURE_STORAGE_KEY (or AZURE_STORAGE_CONNECTION_STRING)".into()),
        };
        let endpoint = cfg
            .endpoint
            .clone()
            .or(conn.endpoint)
            .unwrap_or_else(|| format!("https://{account}.blob.core.windows.net"));
        let endpoint = endpoint.trim_end_matches('/').to_string();
        let url = reqwest::Url::parse(&endpoint)
            .map_err(|e| format!("endpoint {endpoint:?} is not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("endpoint {endpoint:?} is neither http nor https"));
        }
        let base_path = url.path().trim_end_matches('/').to_string();
        Ok(AzureClient {
            http: http_client(cfg)?,
            endpoint,
            base_path,
            account,
            key,
            read_attempts: cfg.read_attempts.max(1),
        })
    }

    /// The URL-path-encoded `container/blob`.
    fn path(container: &str, blob: &str) -> String {
        match blob.is_empty() {
            true => format!("/{container}"),
            false => format!("/{container}/{}", utf8_percent_encode(blob, PATH)),
        }
    }

    /// The blob's URL, as a Copy Blob source names it; with `sas`, authorized by it.
    pub fn blob_url(&self, container: &str, blob: &str, sas: Option<&str>) -> String {
        let url = format!("{}{}", self.endpoint, Self::path(container, blob));
        match sas {
            Some(sas) => format!("{url}?{sas}"),
            None => url,
        }
    }

    /// A service SAS for one blob (`sr=b`) with `permissions` (`r`, `cw`, `d`), valid until
    /// `expiry`: a request it authorizes is refused by the service after that, however long it
    /// was in flight (learn.microsoft.com, "Create a service SAS", version 2020-12-06 and later:
    /// sixteen fields).
    pub fn sas(
        &self,
        container: &str,
        blob: &str,
        permissions: &str,
        expiry: std::time::SystemTime,
    ) -> String {
        let se = humantime::format_rfc3339_seconds(expiry).to_string();
        let resource = format!("/blob/{}/{container}/{blob}", self.account);
        let to_sign = sas_string_to_sign(permissions, &se, &resource);
        let sig = hmac_sha256(&self.key, to_sign.as_bytes());
        format!(
            "sv={API_VERSION}&sr=b&sp={permissions}&se={}&sig={}",
            utf8_percent_encode(&se, QUERY),
            utf8_percent_encode(&sig, QUERY)
        )
    }

    /// Sends `req` once; an answer that is not 2xx is read into an [`AzFailure`].
    pub async fn send(&self, op: &str, req: Request<'_>) -> Result<reqwest::Response, AzFailure> {
        let path = Self::path(req.container, req.blob);
        let mut query: Vec<(String, String)> = req
            .query
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        query.sort();
        let mut url = format!("{}{path}", self.endpoint);
        let mut pairs: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", utf8_percent_encode(v, QUERY)))
            .collect();
        if let Some(sas) = &req.sas {
            pairs.push(sas.clone());
        }
        if !pairs.is_empty() {
            url = format!("{url}?{}", pairs.join("&"));
        }
        let mut headers = req.headers;
        headers.push(("x-ms-version".into(), API_VERSION.into()));
        headers.push((
            "x-ms-date".into(),
            httpdate::fmt_http_date(std::time::SystemTime::now()),
        ));
        let length = req.body.as_ref().map_or(0, |b| b.2);
        if req.sas.is_none() {
            let key = &self.key;
            let resource = format!("/{}{}{}", self.account, self.base_path, path);
            let to_sign = string_to_sign(req.method.as_str(), &headers, length, &resource, &query);
            let signature = hmac_sha256(key, to_sign.as_bytes());
            headers.push((
                "authorization".into(),
                format!("SharedKey {}:{signature}", self.account),
            ));
        }
        let mut builder = self.http.request(req.method.clone(), &url);
        for (name, value) in &headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder = match req.body {
            Some((body, start, len)) => builder
                .header("content-length", length)
                .body(reqwest::Body::wrap_stream(body.stream_range(start, len))),
            None if matches!(req.method, reqwest::Method::PUT) => {
                builder.header("content-length", 0)
            }
            None => builder,
        };
        let response = builder.send().await.map_err(|e| unanswered(op, e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let code = response
            .headers()
            .get("x-ms-error-code")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = response.text().await.unwrap_or_default();
        let message = between(&text, "<Message>", "</Message>").unwrap_or_default();
        let message = message.lines().next().unwrap_or("").to_string();
        Err(answered(op, status, &code, &message))
    }

    /// [`Self::send`] for a request that changes nothing, again after a fault that may pass
    /// (no answer, a 5xx, throttling), up to `read_attempts` times.
    pub async fn read<'a>(
        &self,
        op: &str,
        req: impl Fn() -> Request<'a>,
    ) -> Result<reqwest::Response, AzFailure> {
        let mut attempt = 1;
        loop {
            match self.send(op, req()).await {
                Err(AzFailure::Fault(
                    BackendError::Timeout(_)
                    | BackendError::Unreachable(_)
                    | BackendError::Throttled(_)
                    | BackendError::Failing(_)
                    | BackendError::Refused { status: 429, .. },
                )) if attempt < self.read_attempts => {
                    tokio::time::sleep(Duration::from_millis(100 << attempt.min(5))).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

impl AzureClient {
    /// How far this machine's clock runs ahead of the service's, in ms (a range: the Date
    /// header has whole seconds, and the answer takes time), from any answer's Date.
    pub async fn clock_offset(&self) -> Result<(i64, i64), String> {
        let before = crate::wall_clock::now_ms() as i64;
        let response = self.http.head(&self.endpoint).send().await.map_err(|e| {
            format!(
                "cannot reach the store to compare clocks: {}",
                e.without_url()
            )
        })?;
        let after = crate::wall_clock::now_ms() as i64;
        let date = response
            .headers()
            .get("date")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .ok_or("the store's answer has no Date header to compare clocks with")?;
        let store = date
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        Ok((before - store - 999, after - store))
    }
}

/// The text between the first `open` and the `close` after it.
pub fn between<'t>(text: &'t str, open: &str, close: &str) -> Option<&'t str> {
    let start = text.find(open)? + open.len();
    let end = text[start..].find(close)? + start;
    Some(&text[start..end])
}

/// A service SAS's string to sign: permissions, start, expiry, resource, identifier, IP,
/// protocol, version, resource type, snapshot time, encryption scope, and five response
/// headers, one per line.
fn sas_string_to_sign(permissions: &str, expiry: &str, resource: &str) -> String {
    format!("{permissions}\n\n{expiry}\n{resource}\n\n\n\n{API_VERSION}\nb\n\n\n\n\n\n\n")
}

/// Shared Key's string to sign (learn.microsoft.com, "Authorize with Shared Key", version
/// 2015-02-21 and later): the standard headers in their fixed order, the `x-ms-` headers
/// sorted, then the resource and its query parameters sorted, values decoded.
fn string_to_sign(
    method: &str,
    headers: &[(String, String)],
    length: u64,
    resource: &str,
    query: &[(String, String)],
) -> String {
    let get = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v.as_str())
    };
    let length = match length {
        0 => String::new(),
        n => n.to_string(),
    };
    let mut out = format!(
        "{method}\n{}\n{}\n{length}\n{}\n{}\n\n{}\n{}\n{}\n{}\n{}\n",
        get("content-encoding"),
        get("content-language"),
        get("content-md5"),
        get("content-type"),
        get("if-modified-since"),
        get("if-match"),
        get("if-none-match"),
        get("if-unmodified-since"),
        get("range"),
    );
    let mut ms: Vec<&(String, String)> = headers
        .iter()
        .filter(|(n, _)| n.starts_with("x-ms-"))
        .collect();
    ms.sort();
    for (name, value) in ms {
        out += &format!("{name}:{}\n", value.trim());
    }
    out += resource;
    for (name, value) in query {
        out += &format!("\n{}:{value}", name.to_ascii_lowercase());
    }
    out
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> String {
    use base64::Engine;
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, key);
    let tag = aws_lc_rs::hmac::sign(&key, data);
    base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
}

/// The pooled HTTP client: the configured timeouts, the system roots and the optional CA
/// file, redirects never followed ([`crate::backend::store_http`]).
fn http_client(cfg: &AzureBackendConfig) -> Result<reqwest::Client, String> {
    crate::backend::store_http::client(&crate::backend::store_http::Settings {
        connect_timeout: Duration::from_secs(cfg.connect_timeout_secs),
        read_timeout: Duration::from_secs(cfg.read_timeout_secs),
        call_timeout: Duration::from_secs(cfg.call_timeout_secs),
        ca_file: cfg.ca_file.as_deref(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The string to sign for a Put Blob with a condition, as the Shared Key rules lay it out:
    /// thirteen lines, the x-ms- headers sorted, the resource with the account twice for an
    /// emulator-style path, and the query sorted.
    #[test]
    fn string_to_sign_follows_the_shared_key_layout() {
        let headers = vec![
            ("x-ms-version".to_string(), API_VERSION.to_string()),
            ("if-match".to_string(), "\"0x1\"".to_string()),
            ("x-ms-blob-type".to_string(), "BlockBlob".to_string()),
            ("content-type".to_string(), "text/plain".to_string()),
        ];
        let s = string_to_sign(
            "PUT",
            &headers,
            5,
            "/devstoreaccount1/devstoreaccount1/c/a%20b",
            &[
                ("blockid".into(), "AA==".into()),
                ("comp".into(), "block".into()),
            ],
        );
        assert_eq!(
            s,
            "PUT\n\n\n5\n\ntext/plain\n\n\n\"0x1\"\n\n\n\nx-ms-blob-type:BlockBlob\nx-ms-version:2021-08-06\n/devstoreaccount1/devstoreaccount1/c/a%20b\nblockid:AA==\ncomp:block"
        );
    }

    /// The layout Azurite 3.37 accepted for version 2021-08-06 (docs/notes/azurite-behaviour.md).
    #[test]
    fn a_service_sas_signs_sixteen_fields() {
        assert_eq!(
            sas_string_to_sign("rcwd", "2026-12-06T17:32:42Z", "/blob/devstoreaccount1/cont/f1"),
            "rcwd\n\n2026-12-06T17:32:42Z\n/blob/devstoreaccount1/cont/f1\n\n\n\n2021-08-06\nb\n\n\n\n\n\n\n"
        );
    }

    #[test]
    fn a_connection_string_gives_account_key_and_endpoint() {
        let c = parse_connection_string("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;");
        assert_eq!(c.account.as_deref(), Some("devstoreaccount1"));
        assert_eq!(c.key.as_deref(), Some("a2V5"));
        assert_eq!(
            c.endpoint.as_deref(),
            Some("http://127.0.0.1:10000/devstoreaccount1")
        );
        assert!(c.sas.is_none());
    }
}
