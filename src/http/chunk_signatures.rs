//! The chain of signatures of a signed aws-chunked body (AWS's "Signature calculations for the
//! Authorization header: transferring payload in multiple chunks"): each chunk's signature
//! signs its data's SHA-256 and the signature before it, starting at the request's own; the
//! trailer's signs the trailer lines the same way.

use super::{parse_amz_date, EMPTY_SHA256};

/// What checks a signed body's chunks: the key the request was signed with and the chain of
/// signatures, starting at the request's own (the seed, which s3s has checked).
pub struct Signing {
    key: Vec<u8>,
    /// `x-amz-date`, then the credential scope, as each string to sign carries them.
    amz_date: String,
    scope: String,
    previous: String,
}

impl Signing {
    /// `amz_date` is the request's `x-amz-date` (`20130524T000000Z`); the scope's date is its
    /// day, as s3s signs the seed with.
    pub fn new(
        secret: &str,
        amz_date: &str,
        region: &str,
        service: &str,
        seed: &str,
    ) -> Result<Signing, String> {
        let when = parse_amz_date(amz_date).ok_or_else(|| {
            format!("x-amz-date {amz_date:?} is not of the form 20130524T000000Z")
        })?;
        let key = aws_sigv4::sign::v4::generate_signing_key(secret, when, region, service);
        Ok(Signing {
            key: key.as_ref().to_vec(),
            amz_date: amz_date.to_string(),
            scope: format!("{}/{region}/{service}/aws4_request", &amz_date[..8]),
            previous: seed.to_ascii_lowercase(),
        })
    }

    /// Does `given` sign the next link (a chunk whose data hashes to `hash`, or the trailer)?
    /// On success it becomes the previous signature.
    pub(super) fn check(&mut self, kind: &str, hash: &str, given: &[u8]) -> bool {
        let to_sign = if kind == "PAYLOAD" {
            format!(
                "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{}\n{EMPTY_SHA256}\n{hash}",
                self.amz_date, self.scope, self.previous
            )
        } else {
            format!(
                "AWS4-HMAC-SHA256-TRAILER\n{}\n{}\n{}\n{hash}",
                self.amz_date, self.scope, self.previous
            )
        };
        let ours = aws_sigv4::sign::v4::calculate_signature(&self.key, to_sign.as_bytes());
        let ok: bool = subtle::ConstantTimeEq::ct_eq(ours.as_bytes(), given).into();
        if ok {
            self.previous = ours;
        }
        ok
    }
}
