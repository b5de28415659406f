//! Request headers S3 defines that fencegate does not do, refused with the status and code AWS
//! answers where a bucket lacks the feature, never accepted and forgotten: a write that asked
//! for encryption with the client's key, a retention or legal hold, a public ACL, a part's tags
//! or a website redirect would otherwise be acknowledged and stored without them.

use s3s::{S3Error, S3ErrorCode, S3Result};

fn refuse(code: S3ErrorCode, message: String) -> S3Error {
    let mut err = S3Error::with_message(code, message);
    err.set_status_code(http::StatusCode::BAD_REQUEST);
    err
}

/// The canned ACLs a bucket without ACLs takes (AWS's "bucket owner enforced"): both mean
/// what fencegate does, the owner alone holding the object.
const OWNER_ONLY_ACLS: [&str; 2] = ["private", "bucket-owner-full-control"];

/// SSE-C: the object would be stored in the clear and read back without the key.
fn customer_key(headers: &http::HeaderMap) -> Option<&str> {
    headers.keys().map(http::HeaderName::as_str).find(|n| {
        n.starts_with("x-amz-server-side-encryption-customer-")
            || n.starts_with("x-amz-copy-source-server-side-encryption-customer-")
    })
}

/// For a read (GetObject, HeadObject): SSE-C headers are refused as AWS refuses them for an
/// object stored without a customer key, which every object here is.
pub fn refuse_on_read(headers: &http::HeaderMap) -> S3Result<()> {
    match customer_key(headers) {
        Some(name) => Err(refuse(
            S3ErrorCode::InvalidRequest,
            format!("The encryption parameters are not applicable to this object ({name}): fencegate stores no object with a customer-provided key; leave the header out"),
        )),
        None => Ok(()),
    }
}

/// For a write (PutObject, CopyObject, CreateMultipartUpload, UploadPart): each header that
/// would change security, retention or what is kept, refused before anything is written.
pub fn refuse_on_write(headers: &http::HeaderMap) -> S3Result<()> {
    if let Some(name) = customer_key(headers) {
        return Err(refuse(
            S3ErrorCode::InvalidRequest,
            format!("{name}: fencegate does not do server-side encryption with customer-provided keys (SSE-C), and would store the object unencrypted; encrypt the body before you upload, or leave the SSE-C headers out"),
        ));
    }
    const LOCK: [&str; 3] = [
        "x-amz-object-lock-mode",
        "x-amz-object-lock-retain-until-date",
        "x-amz-object-lock-legal-hold",
    ];
    if let Some(name) = LOCK.iter().find(|h| headers.contains_key(**h)) {
        return Err(refuse(
            S3ErrorCode::InvalidRequest,
            format!("Bucket is missing Object Lock Configuration ({name}): fencegate keeps no retention or legal hold, so the object could be deleted at once; leave the header out"),
        ));
    }
    for value in headers.get_all("x-amz-acl") {
        let acl = String::from_utf8_lossy(value.as_bytes())
            .trim()
            .to_ascii_lowercase();
        if !OWNER_ONLY_ACLS.contains(&acl.as_str()) {
            return Err(refuse(
                S3ErrorCode::AccessControlListNotSupported,
                format!("The bucket does not allow ACLs (x-amz-acl: {acl}): access is the key table's; send private, or no x-amz-acl"),
            ));
        }
    }
    if let Some(name) = headers
        .keys()
        .map(http::HeaderName::as_str)
        .find(|n| n.starts_with("x-amz-grant-"))
    {
        return Err(refuse(
            S3ErrorCode::AccessControlListNotSupported,
            format!("The bucket does not allow ACLs ({name}): access is the key table's; leave the grant out"),
        ));
    }
    // SSE-S3 (AES256) is what S3 applies to every object anyway; a KMS key would be dropped.
    for value in headers.get_all("x-amz-server-side-encryption") {
        let sse = String::from_utf8_lossy(value.as_bytes()).trim().to_string();
        if sse != "AES256" {
            return Err(refuse(
                S3ErrorCode::InvalidArgument,
                format!("x-amz-server-side-encryption: {sse}: fencegate passes no KMS key to the store, so the object would not be encrypted with it; send AES256 (the store's own encryption), or leave the header out"),
            ));
        }
    }
    if let Some(name) = headers
        .keys()
        .map(http::HeaderName::as_str)
        .find(|n| n.starts_with("x-amz-server-side-encryption-") && !n.contains("-customer-"))
    {
        return Err(refuse(
            S3ErrorCode::InvalidArgument,
            format!("{name}: fencegate passes no KMS settings to the store, so they would be lost; leave the header out"),
        ));
    }
    for value in headers.get_all("x-amz-storage-class") {
        let class = String::from_utf8_lossy(value.as_bytes()).trim().to_string();
        if class != "STANDARD" {
            return Err(refuse(
                S3ErrorCode::InvalidStorageClass,
                format!("The storage class you specified is not valid here (x-amz-storage-class: {class}): fencegate writes every object in the store's STANDARD class; send STANDARD, or leave the header out"),
            ));
        }
    }
    if headers.contains_key("x-amz-website-redirect-location") {
        return Err(refuse(
            S3ErrorCode::InvalidRequest,
            "x-amz-website-redirect-location: fencegate serves no website and would not keep the redirect; leave the header out".into(),
        ));
    }
    Ok(())
}

/// For a part (UploadPart, UploadPartCopy) and the completion: what [`refuse_on_write`]
/// refuses, and tags, which belong to the upload (CreateMultipartUpload) and would be lost.
pub fn refuse_on_part(headers: &http::HeaderMap) -> S3Result<()> {
    refuse_on_write(headers)?;
    if headers.contains_key("x-amz-tagging") {
        return Err(refuse(
            S3ErrorCode::InvalidRequest,
            "x-amz-tagging on a part or a completion: an object's tags are set when its upload is created (CreateMultipartUpload); leave the header out here".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn what_is_refused_and_what_passes() {
        for (name, value, code) in [
            (
                "x-amz-server-side-encryption-customer-algorithm",
                "AES256",
                "InvalidRequest",
            ),
            (
                "x-amz-copy-source-server-side-encryption-customer-key",
                "a2V5",
                "InvalidRequest",
            ),
            ("x-amz-object-lock-mode", "COMPLIANCE", "InvalidRequest"),
            ("x-amz-object-lock-legal-hold", "ON", "InvalidRequest"),
            ("x-amz-acl", "public-read", "AccessControlListNotSupported"),
            ("x-amz-grant-read", "uri=x", "AccessControlListNotSupported"),
            ("x-amz-website-redirect-location", "/x", "InvalidRequest"),
            ("x-amz-server-side-encryption", "aws:kms", "InvalidArgument"),
            (
                "x-amz-server-side-encryption-aws-kms-key-id",
                "arn:x",
                "InvalidArgument",
            ),
            ("x-amz-storage-class", "GLACIER", "InvalidStorageClass"),
        ] {
            let e = refuse_on_write(&headers(&[(name, value)])).unwrap_err();
            assert_eq!(e.code().as_str(), code, "{name}");
            assert_eq!(e.status_code(), Some(http::StatusCode::BAD_REQUEST));
        }
        for ok in [
            headers(&[("x-amz-acl", "private")]),
            headers(&[("x-amz-acl", "bucket-owner-full-control")]),
            headers(&[("x-amz-server-side-encryption", "AES256")]),
            headers(&[("x-amz-storage-class", "STANDARD")]),
        ] {
            assert!(refuse_on_write(&ok).is_ok(), "{ok:?}");
        }
        // Tags are kept for an object, not for a part.
        let tagged = headers(&[("x-amz-tagging", "a=b")]);
        assert!(refuse_on_write(&tagged).is_ok());
        let e = refuse_on_part(&tagged).unwrap_err();
        assert_eq!(e.code().as_str(), "InvalidRequest");
        assert!(refuse_on_read(&headers(&[(
            "x-amz-server-side-encryption-customer-key",
            "a2V5"
        )]))
        .is_err());
        assert!(refuse_on_read(&headers(&[("range", "bytes=0-1")])).is_ok());
    }
}
