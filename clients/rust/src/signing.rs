//! SigV4 for fencegate's native and admin APIs, with the AWS SDKs' own signer (aws-sigv4), and
//! the path encoding the signature covers.

use crate::Error;

/// An access key from fencegate's `[keys]`, its secret and the region signatures name.
#[derive(Clone)]
pub struct SigningKey {
    pub access_key_id: String,
    pub secret: String,
    pub region: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret stays out of every log line and panic message.
        f.debug_struct("SigningKey")
            .field("access_key_id", &self.access_key_id)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// Everything but RFC 3986's unreserved characters is encoded, so a path in the server's
/// access log reads as the name it is (`stale.csv`, `job-c`, not `stale%2Ecsv`).
const UNRESERVED_KEPT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One path segment or query value, encoded.
pub fn urlencode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED_KEPT).to_string()
}

/// An object key, encoded; its `/` separators are kept.
pub fn urlencode_key(key: &str) -> String {
    key.split('/').map(urlencode).collect::<Vec<_>>().join("/")
}

/// Signs `req` with SigV4 as S3 clients do: `x-amz-content-sha256` carries the body's SHA-256
/// when the body is in memory, `UNSIGNED-PAYLOAD` when it streams. Every header present is
/// signed, `Fencing-Token` among them, as fencegate demands.
pub fn sign(req: &mut reqwest::Request, key: &SigningKey) -> Result<(), Error> {
    use aws_sigv4::http_request::{
        sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest,
        SigningSettings, UriPathNormalizationMode,
    };
    let fail = |e: &dyn std::fmt::Display| Error::Signing(e.to_string());
    let identity = aws_credential_types::Credentials::new(
        &key.access_key_id,
        &key.secret,
        None,
        None,
        "fencegate-client",
    )
    .into();
    let mut settings = SigningSettings::default();
    // The path is sent as encoded here, once: S3's convention, which fencegate verifies.
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(&key.region)
        .name("s3")
        .time(std::time::SystemTime::now())
        .settings(settings)
        .build()
        .map_err(|e| fail(&e))?
        .into();
    let in_memory = req.body().map(|b| b.as_bytes());
    let body = match in_memory {
        Some(None) => SignableBody::UnsignedPayload,
        Some(Some(bytes)) => SignableBody::Bytes(bytes),
        None => SignableBody::Bytes(&[]),
    };
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let signable = SignableRequest::new(
        req.method().as_str(),
        req.url().as_str(),
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        body,
    )
    .map_err(|e| fail(&e))?;
    let (instructions, _) = sign(signable, &params).map_err(|e| fail(&e))?.into_parts();
    for (name, value) in instructions.headers() {
        let name =
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|e| fail(&e))?;
        let value = reqwest::header::HeaderValue::from_str(value).map_err(|e| fail(&e))?;
        req.headers_mut().insert(name, value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_unreserved_characters() {
        assert_eq!(urlencode("stale.csv"), "stale.csv");
        assert_eq!(urlencode("job-c_1~x"), "job-c_1~x");
        assert_eq!(urlencode("a b/c?d#e%"), "a%20b%2Fc%3Fd%23e%25");
        assert_eq!(urlencode_key("dir/r é.csv"), "dir/r%20%C3%A9.csv");
    }

    #[test]
    fn a_key_prints_without_its_secret() {
        let key = SigningKey {
            access_key_id: "AKID".into(),
            secret: "s3cr3t".into(),
            region: "us-east-1".into(),
        };
        let shown = format!("{key:?}");
        assert!(
            shown.contains("AKID") && !shown.contains("s3cr3t"),
            "{shown}"
        );
    }
}
