//! The gcs fake's authentication, modelling GCS's XML API for the gcs backend's tests (no
//! emulator honours generation preconditions, nor checks a signature): the service account
//! (docs/notes/gcs-vectors/sa.json), the OAuth JWT-bearer grant at `/token`, bearer tokens,
//! and V4 signed requests (GOOG4-RSA-SHA256), whose canonical request is rebuilt from the
//! request as received, as docs/notes/gcs-groundwork.md §3 describes — independently of any
//! signer (the unit test reproduces Google's own library's vector).

use super::xml::{error, error_with};
use super::Inner;
use aws_lc_rs::signature::{KeyPair, RsaKeyPair, UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};
use axum::body::Body;
use axum::http::{header, HeaderMap, Response, StatusCode};
use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use base64::Engine;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What V4 signing leaves unencoded: `A-Za-z0-9-_.~`.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Google's token endpoint, the `aud` google-auth puts in its assertions.
pub const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// A service account: its email and its RSA key pair.
pub struct Account {
    pub email: String,
    pub key: RsaKeyPair,
    /// DER `RSAPublicKey`, as `UnparsedPublicKey` takes it.
    pub public_key: Vec<u8>,
}

impl Account {
    pub fn from_json(json: &str) -> Account {
        let sa: serde_json::Value = serde_json::from_str(json).unwrap();
        let pem = sa["private_key"].as_str().unwrap();
        let key = RsaKeyPair::from_pkcs8(&pem_der(pem)).unwrap();
        Account {
            email: sa["client_email"].as_str().unwrap().to_string(),
            public_key: key.public_key().as_ref().to_vec(),
            key,
        }
    }

    /// RSASSA-PKCS1-v1_5 / SHA-256 over `msg`.
    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        let mut sig = vec![0; self.key.public_modulus_len()];
        self.key
            .sign(
                &aws_lc_rs::signature::RSA_PKCS1_SHA256,
                &aws_lc_rs::rand::SystemRandom::new(),
                msg,
                &mut sig,
            )
            .unwrap();
        sig
    }
}

/// A PEM block's DER (`-----BEGIN …-----` lines dropped, the rest base64).
pub fn pem_der(pem: &str) -> Vec<u8> {
    let b64: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .map(str::trim)
        .collect();
    B64.decode(b64).unwrap()
}

fn unix(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// A new bearer token and its lifetime in seconds.
pub(super) fn issue_token(fake: &Inner, now: SystemTime) -> (String, u64) {
    let lifetime = fake.knobs.lock().unwrap().token_lifetime.unwrap_or(3599);
    let mut tokens = fake.tokens.lock().unwrap();
    let token = format!(
        "ya29.fake-{}-{}",
        tokens.len(),
        hex::encode(rand::random::<[u8; 12]>())
    );
    tokens.insert(token.clone(), now + Duration::from_secs(lifetime));
    (token, lifetime)
}

pub(super) fn check_bearer(
    fake: &Inner,
    headers: &HeaderMap,
    now: SystemTime,
) -> Result<(), Response<Body>> {
    let refused = |details: &str| {
        Err(error(
            StatusCode::UNAUTHORIZED,
            "AuthenticationRequired",
            "Authentication required.",
            details,
        ))
    };
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return refused("no Authorization header and no X-Goog-Signature");
    };
    let Some(token) = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")) else {
        return refused("Authorization is not `Bearer <token>`");
    };
    match fake.tokens.lock().unwrap().get(token.trim()) {
        None => refused("unknown bearer token"),
        Some(expiry) if *expiry <= now => refused("the bearer token has expired"),
        Some(_) => Ok(()),
    }
}

fn json(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json; charset=utf-8")
        .body(Body::from(value.to_string()))
        .unwrap()
}

/// `POST /token`: the JWT-bearer grant, as oauth2.googleapis.com answers it.
pub(super) fn token_endpoint(fake: &Inner, body: &[u8], now: SystemTime) -> Response<Body> {
    let form: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    let get = |n: &str| form.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    let grant = get("grant_type").unwrap_or("");
    if grant != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "unsupported_grant_type",
                "error_description": format!("Invalid grant_type: {grant}")}),
        );
    }
    match check_assertion(fake, get("assertion").unwrap_or(""), now) {
        Ok(()) => {
            let (token, lifetime) = issue_token(fake, now);
            json(
                StatusCode::OK,
                serde_json::json!({"access_token": token, "expires_in": lifetime,
                    "token_type": "Bearer"}),
            )
        }
        Err(description) => json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "invalid_grant", "error_description": description}),
        ),
    }
}

fn check_assertion(fake: &Inner, jwt: &str, now: SystemTime) -> Result<(), String> {
    let parts: Vec<&str> = jwt.split('.').collect();
    let [h, c, s] = parts[..] else {
        return Err("Invalid JWT: not header.claims.signature".into());
    };
    let decode = |p: &str| B64URL.decode(p.trim_end_matches('='));
    let header: serde_json::Value = decode(h)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or("Invalid JWT: the header is not base64url JSON")?;
    let claims: serde_json::Value = decode(c)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or("Invalid JWT: the claims are not base64url JSON")?;
    let sig = decode(s).map_err(|_| "Invalid JWT Signature.")?;
    if header["alg"] != "RS256" {
        return Err(format!("Invalid JWT: alg {} is not RS256", header["alg"]));
    }
    UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &fake.account.public_key)
        .verify(format!("{h}.{c}").as_bytes(), &sig)
        .map_err(|_| "Invalid JWT Signature.")?;
    if claims["iss"] != fake.account.email.as_str() {
        return Err(format!(
            "Invalid JWT: iss {} is not the key's account",
            claims["iss"]
        ));
    }
    let aud = claims["aud"].as_str().unwrap_or("");
    if aud != fake.token_uri && aud != GOOGLE_TOKEN_URI {
        return Err(format!("Invalid JWT: aud {aud:?} is not the token URI"));
    }
    let (Some(iat), Some(exp)) = (claims["iat"].as_i64(), claims["exp"].as_i64()) else {
        return Err("Invalid JWT: iat and exp must be numbers".into());
    };
    if exp <= unix(now) || exp > iat + 3600 || iat > unix(now) + 300 {
        return Err(
            "Invalid JWT: Token must be a short-lived token (60 minutes) and in a \
                    reasonable timeframe. Check your iat and exp values in the JWT claim."
                .into(),
        );
    }
    Ok(())
}

/// Why a V4 signed request is refused.
#[derive(Debug)]
pub enum V4Error {
    /// 400 `ExpiredToken`: now is past X-Goog-Date + X-Goog-Expires.
    Expired(String),
    /// 400: more than 15 minutes before X-Goog-Date.
    NotYetValid(String),
    /// 400: a parameter missing or malformed.
    Malformed(String),
    /// 403: a header named in X-Goog-SignedHeaders is not in the request.
    MissingHeader(String),
    /// 403 `SignatureDoesNotMatch`, with what the fake signed.
    BadSignature {
        canonical: String,
        string_to_sign: String,
    },
}

impl V4Error {
    pub fn response(&self) -> Response<Body> {
        let bad = StatusCode::BAD_REQUEST;
        match self {
            V4Error::Expired(d) => error(bad, "ExpiredToken", "The provided token has expired.", d),
            V4Error::NotYetValid(d) => error(
                bad,
                "InvalidArgument",
                "The signed request is not valid yet.",
                d,
            ),
            V4Error::Malformed(d) => error(bad, "AuthorizationQueryParametersError", d, ""),
            V4Error::MissingHeader(h) => error(
                StatusCode::FORBIDDEN,
                "SignatureDoesNotMatch",
                "Access denied.",
                &format!("the signed header {h:?} is not in the request"),
            ),
            V4Error::BadSignature {
                canonical,
                string_to_sign,
            } => error_with(
                StatusCode::FORBIDDEN,
                "SignatureDoesNotMatch",
                "Access denied.",
                "The request signature we calculated does not match the signature you provided. \
                 Check your Google secret key and signing method.",
                &format!(
                    "<StringToSign>{}</StringToSign><CanonicalRequest>{}</CanonicalRequest>",
                    super::xml::escape(string_to_sign),
                    super::xml::escape(canonical)
                ),
            ),
        }
    }
}

/// The query's parameters as sent (not decoded).
fn raw_params(query: &str) -> Vec<(&str, &str)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect()
}

fn decoded(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// The V4 canonical request of a request as received: `path` percent-encoded as sent,
/// `query` raw (X-Goog-Signature is left out), `headers` the request's (those
/// X-Goog-SignedHeaders names are read).
pub fn canonical_request(
    method: &str,
    path: &str,
    query: &str,
    headers: &HeaderMap,
) -> Result<String, V4Error> {
    let mut pairs: Vec<(String, String)> = raw_params(query)
        .into_iter()
        .map(|(k, v)| (decoded(k), decoded(v)))
        .filter(|(k, _)| k != "X-Goog-Signature")
        .map(|(k, v)| {
            let enc = |s: &str| utf8_percent_encode(s, UNRESERVED).to_string();
            (enc(&k), enc(&v))
        })
        .collect();
    pairs.sort();
    let canonical_query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let signed = raw_params(query)
        .into_iter()
        .find(|(k, _)| *k == "X-Goog-SignedHeaders")
        .map(|(_, v)| decoded(v))
        .ok_or_else(|| V4Error::Malformed("X-Goog-SignedHeaders is missing".into()))?;
    let mut canonical_headers = String::new();
    for name in signed.split(';') {
        let values: Vec<String> = headers
            .get_all(name)
            .iter()
            .map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        if values.is_empty() {
            return Err(V4Error::MissingHeader(name.to_string()));
        }
        canonical_headers += &format!("{name}:{}\n", values.join(","));
    }
    let payload = headers
        .get("x-goog-content-sha256")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("UNSIGNED-PAYLOAD");
    Ok(format!(
        "{method}\n{path}\n{}\n{canonical_headers}\n{signed}\n{payload}",
        canonical_query.join("&")
    ))
}

/// `GOOG4-RSA-SHA256\n<date>\n<scope>\n<hex sha256(canonical)>`.
pub fn string_to_sign(goog_date: &str, scope: &str, canonical: &str) -> String {
    format!(
        "GOOG4-RSA-SHA256\n{goog_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    )
}

fn parse_goog_date(s: &str) -> Option<SystemTime> {
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let t = time::PrimitiveDateTime::parse(s, &format)
        .ok()?
        .assume_utc();
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(t.unix_timestamp()).ok()?))
}

/// Checks a V4 signed request (X-Goog-* query parameters) at `now` against `email`'s key.
pub fn verify_v4(
    method: &str,
    path: &str,
    query: &str,
    headers: &HeaderMap,
    now: SystemTime,
    email: &str,
    public_key: &[u8],
) -> Result<(), V4Error> {
    let raw = raw_params(query);
    let get = |n: &str| {
        raw.iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| decoded(v))
            .ok_or_else(|| V4Error::Malformed(format!("{n} is missing")))
    };
    if get("X-Goog-Algorithm")? != "GOOG4-RSA-SHA256" {
        return Err(V4Error::Malformed(
            "X-Goog-Algorithm is not GOOG4-RSA-SHA256".into(),
        ));
    }
    let (date, credential) = (get("X-Goog-Date")?, get("X-Goog-Credential")?);
    let expires: u64 = get("X-Goog-Expires")?
        .parse()
        .ok()
        .filter(|e| (1..=604_800).contains(e))
        .ok_or_else(|| V4Error::Malformed("X-Goog-Expires is not 1..=604800".into()))?;
    let signature = hex::decode(get("X-Goog-Signature")?)
        .map_err(|_| V4Error::Malformed("X-Goog-Signature is not hex".into()))?;
    let signed_at = parse_goog_date(&date)
        .ok_or_else(|| V4Error::Malformed(format!("X-Goog-Date {date:?}")))?;
    let Some((who, scope)) = credential.split_once('/') else {
        return Err(V4Error::Malformed(format!(
            "X-Goog-Credential {credential:?}"
        )));
    };
    if scope != format!("{}/auto/storage/goog4_request", &date[..8]) {
        return Err(V4Error::Malformed(format!(
            "the credential scope {scope:?} does not match X-Goog-Date {date}"
        )));
    }
    let signed_headers = get("X-Goog-SignedHeaders")?;
    if !signed_headers.split(';').any(|h| h == "host") {
        return Err(V4Error::Malformed(
            "X-Goog-SignedHeaders must include host".into(),
        ));
    }
    let ends = signed_at + Duration::from_secs(expires);
    if now > ends {
        return Err(V4Error::Expired(format!(
            "Request signature expired at: {}",
            httpdate::fmt_http_date(ends)
        )));
    }
    if now + Duration::from_secs(900) < signed_at {
        return Err(V4Error::NotYetValid(format!("X-Goog-Date {date}")));
    }
    let canonical = canonical_request(method, path, query, headers)?;
    let string_to_sign = string_to_sign(&date, scope, &canonical);
    let key = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, public_key);
    if who != email || key.verify(string_to_sign.as_bytes(), &signature).is_err() {
        return Err(V4Error::BadSignature {
            canonical,
            string_to_sign,
        });
    }
    Ok(())
}
