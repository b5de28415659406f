//! Checksums kept and given back (docs/s3.md, "Checksums"), on both backends: what a write
//! declared and its body proved is answered on HEAD and GET with `x-amz-checksum-mode:
//! ENABLED` (and validated there by the SDK), in GetObjectAttributes, kept by CopyObject, and
//! made of the parts' checksums for a multipart object; never forged through metadata.

use super::fixture::{Fx, Kind, PART};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    ChecksumAlgorithm, ChecksumMode, ChecksumType, CompletedMultipartUpload, CompletedPart,
    ObjectAttributes,
};
use base64::Engine as _;
use sha2::Digest as _;

fn sha256(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(data))
}

async fn kept_on(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    let body = b"the rows of the day".to_vec();

    // A checksum sent as a header is kept and given back only when asked for.
    c.put_object()
        .bucket("bkt")
        .key("whole")
        .checksum_algorithm(ChecksumAlgorithm::Sha256)
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .unwrap();
    let head = c
        .head_object()
        .bucket("bkt")
        .key("whole")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.checksum_sha256(),
        Some(sha256(&body).as_str()),
        "{kind:?}"
    );
    assert_eq!(head.checksum_type(), Some(&ChecksumType::FullObject));
    let plain = c
        .head_object()
        .bucket("bkt")
        .key("whole")
        .send()
        .await
        .unwrap();
    assert_eq!(plain.checksum_sha256(), None, "not asked for");
    // GET with the mode: the SDK checks the body against it.
    let got = c
        .get_object()
        .bucket("bkt")
        .key("whole")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(got.checksum_sha256(), Some(sha256(&body).as_str()));
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        &body[..]
    );
    // A range is not the object: no whole-object checksum with it.
    let ranged = c
        .get_object()
        .bucket("bkt")
        .key("whole")
        .range("bytes=0-3")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(ranged.checksum_sha256(), None);

    // GetObjectAttributes.
    let attrs = c
        .get_object_attributes()
        .bucket("bkt")
        .key("whole")
        .object_attributes(ObjectAttributes::Checksum)
        .object_attributes(ObjectAttributes::ObjectSize)
        .object_attributes(ObjectAttributes::Etag)
        .object_attributes(ObjectAttributes::StorageClass)
        .send()
        .await
        .unwrap();
    assert_eq!(attrs.object_size(), Some(body.len() as i64));
    assert_eq!(
        attrs.checksum().and_then(|c| c.checksum_sha256()),
        Some(sha256(&body).as_str())
    );
    assert_eq!(
        attrs.e_tag().map(|e| e.trim_matches('"')),
        head.e_tag().map(|e| e.trim_matches('"'))
    );
    assert!(attrs.storage_class().is_some());

    // A body past the s3 backend's multipart threshold (a store upload begun before the body
    // ends) keeps a checksum declared in a header as well.
    let large = vec![3u8; PART + 1000];
    c.put_object()
        .bucket("bkt")
        .key("large")
        .checksum_sha256(sha256(&large))
        .body(ByteStream::from(large.clone()))
        .send()
        .await
        .unwrap();
    let head_large = c
        .head_object()
        .bucket("bkt")
        .key("large")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(head_large.checksum_sha256(), Some(sha256(&large).as_str()));

    // A copy has the same bytes, so the same checksum.
    c.copy_object()
        .bucket("bkt")
        .key("copied")
        .copy_source("bkt/whole")
        .send()
        .await
        .unwrap();
    let copied = c
        .head_object()
        .bucket("bkt")
        .key("copied")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(copied.checksum_sha256(), Some(sha256(&body).as_str()));

    // Metadata cannot pass for a kept checksum.
    c.put_object()
        .bucket("bkt")
        .key("forged")
        .metadata("fencegate-checksum", "sha256 FULL_OBJECT AAAA")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    let forged = c
        .head_object()
        .bucket("bkt")
        .key("forged")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.checksum_sha256(), None);
    assert!(forged
        .metadata()
        .is_none_or(|m| !m.contains_key("fencegate-checksum")));

    // Multipart with a checksum per part: the completion answers the COMPOSITE checksum S3
    // makes of them, and the fs backend keeps it with the object.
    let parts = [vec![7u8; PART], vec![9u8; 1000]];
    let upload = c
        .create_multipart_upload()
        .bucket("bkt")
        .key("joined")
        .checksum_algorithm(ChecksumAlgorithm::Sha256)
        .send()
        .await
        .unwrap();
    let id = upload.upload_id().unwrap();
    let mut completed = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let n = i as i32 + 1;
        let out = c
            .upload_part()
            .bucket("bkt")
            .key("joined")
            .upload_id(id)
            .part_number(n)
            .checksum_algorithm(ChecksumAlgorithm::Sha256)
            .body(ByteStream::from(p.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(out.checksum_sha256(), Some(sha256(p).as_str()));
        completed.push(
            CompletedPart::builder()
                .part_number(n)
                .e_tag(out.e_tag().unwrap())
                .checksum_sha256(out.checksum_sha256().unwrap())
                .build(),
        );
    }
    let raw: Vec<u8> = parts
        .iter()
        .flat_map(|p| sha2::Sha256::digest(p).to_vec())
        .collect();
    let composite = format!("{}-2", sha256(&raw));
    let done = c
        .complete_multipart_upload()
        .bucket("bkt")
        .key("joined")
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(completed))
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(done.checksum_sha256(), Some(composite.as_str()));
    assert_eq!(done.checksum_type(), Some(&ChecksumType::Composite));
    let attrs = c
        .get_object_attributes()
        .bucket("bkt")
        .key("joined")
        .object_attributes(ObjectAttributes::ObjectParts)
        .object_attributes(ObjectAttributes::Checksum)
        .send()
        .await
        .unwrap();
    assert_eq!(
        attrs.object_parts().and_then(|p| p.total_parts_count()),
        Some(2)
    );
    if kind == Kind::Fs {
        assert_eq!(
            attrs.checksum().and_then(|c| c.checksum_sha256()),
            Some(composite.as_str())
        );
        let head = c
            .head_object()
            .bucket("bkt")
            .key("joined")
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap();
        assert_eq!(head.checksum_sha256(), Some(composite.as_str()));
        assert_eq!(head.checksum_type(), Some(&ChecksumType::Composite));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksums_are_kept_and_given_back_on_fs() {
    kept_on(Kind::Fs).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksums_are_kept_and_given_back_on_s3() {
    kept_on(Kind::S3Safe).await
}

/// What the aws cli sends: the attributes as one comma-separated header; a name S3 does not
/// define is refused; and a checksum setting whose checksum never comes is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_lists_and_checksum_settings_as_clients_send_them() {
    use crate::common::sign::{send, Creds};
    let fx = Fx::start(Kind::Fs).await;
    let creds = Creds {
        key: "fencegate",
        secret: "fencegate-dev-secret",
    };
    let http = reqwest::Client::new();
    let put = http.put(fx.server.url("/bkt/a")).body("abc");
    assert_eq!(send(&http, put, Some(creds)).await.status(), 200);
    let attrs = |list: &'static str| {
        http.get(fx.server.url("/bkt/a?attributes"))
            .header("x-amz-object-attributes", list)
    };
    let resp = send(&http, attrs("ETag, ObjectSize"), Some(creds)).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(text.contains("<ObjectSize>3</ObjectSize>"), "{text}");
    assert!(text.contains("<ETag>"), "{text}");
    let resp = send(&http, attrs("ETag,Bogus"), Some(creds)).await;
    assert_eq!(resp.status(), 400);
    // x-amz-sdk-checksum-algorithm without the checksum it names: nothing written.
    let named = http
        .put(fx.server.url("/bkt/named"))
        .header("x-amz-sdk-checksum-algorithm", "SHA256")
        .header("x-amz-checksum-crc32", "NSRBwg==")
        .body("abc");
    let resp = send(&http, named, Some(creds)).await;
    assert_eq!(resp.status(), 400);
    let head = http.head(fx.server.url("/bkt/named"));
    assert_eq!(send(&http, head, Some(creds)).await.status(), 404);
}
