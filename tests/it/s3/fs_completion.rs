//! The fs backend's multipart completion joins the part files on disk: a part file changed
//! since its upload, a part gone while the completion copies, and the older file of a part a
//! crash left beside the newer are each handled by what the upload recorded, never by what
//! the directory happens to hold.

use crate::common::{moto::client_with, Server};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};

const PART: usize = 5 << 20;

struct Upload {
    id: String,
    parts: Vec<CompletedPart>,
}

async fn upload(c: &aws_sdk_s3::Client, key: &str, bodies: &[Vec<u8>]) -> Upload {
    let id = c
        .create_multipart_upload()
        .bucket("default")
        .key(key)
        .metadata("fencing-token", "1")
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_string();
    let mut parts = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let n = i as i32 + 1;
        let etag = c
            .upload_part()
            .bucket("default")
            .key(key)
            .upload_id(&id)
            .part_number(n)
            .body(ByteStream::from(body.clone()))
            .send()
            .await
            .unwrap()
            .e_tag()
            .unwrap()
            .to_string();
        parts.push(CompletedPart::builder().part_number(n).e_tag(etag).build());
    }
    Upload { id, parts }
}

async fn complete(c: &aws_sdk_s3::Client, key: &str, u: &Upload) -> Result<(), (u16, String)> {
    c.complete_multipart_upload()
        .bucket("default")
        .key(key)
        .upload_id(&u.id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(u.parts.clone()))
                .build(),
        )
        .send()
        .await
        .map(|_| ())
        .map_err(|e| {
            let status = e.raw_response().map_or(0, |r| r.status().as_u16());
            let code = aws_sdk_s3::error::ProvideErrorMetadata::code(&e)
                .unwrap_or_default()
                .to_string();
            (status, code)
        })
}

/// The files of part `number` in the upload's directory (its data, not its link).
fn part_files(data: &std::path::Path, number: i32) -> Vec<std::path::PathBuf> {
    crate::common::files_below(data)
        .into_iter()
        .filter(|p| p.components().any(|c| c.as_os_str() == ".uploads"))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{number}-")))
        })
        .collect()
}

/// A part file that grew or shrank on disk after its upload is refused (400 InvalidPart,
/// which a retry does not change), never committed with the bytes it holds now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_changed_on_disk_is_refused_not_committed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = Server::start(&data, None);
    let c = client_with(&s.url(""), "fencegate", "fencegate-dev-secret");
    let u = upload(&c, "changed", &[vec![b'a'; PART], b"tail".to_vec()]).await;
    let files = part_files(&data, 2);
    assert_eq!(files.len(), 1, "{files:?}");
    let mut grown = std::fs::read(&files[0]).unwrap();
    grown.extend_from_slice(b"EXTRA");
    std::fs::write(&files[0], grown).unwrap();
    for _ in 0..2 {
        assert_eq!(
            complete(&c, "changed", &u).await,
            Err((400, "InvalidPart".to_string())),
            "refused, and a retry does not change that"
        );
    }
    assert!(c
        .head_object()
        .bucket("default")
        .key("changed")
        .send()
        .await
        .is_err());
}

/// A crash between a part's new file and the removal of its old one leaves both: the part's
/// link names the one that counts, and the completion takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_file_of_a_part_is_passed_over() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = Server::start(&data, None);
    let c = client_with(&s.url(""), "fencegate", "fencegate-dev-secret");
    let u = upload(&c, "twice", &[vec![b'a'; PART], b"new".to_vec()]).await;
    let current = part_files(&data, 2).pop().unwrap();
    // What the crash left: an older file of part 2, under its own digest's name.
    let digest = <md5::Md5 as md5::Digest>::digest(b"older bytes");
    let old = current.with_file_name(format!("2-{}", hex::encode(digest)));
    std::fs::write(&old, b"older bytes").unwrap();
    complete(&c, "twice", &u).await.unwrap();
    let got = c
        .get_object()
        .bucket("default")
        .key("twice")
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    assert_eq!(got.len(), PART + 3);
    assert!(got.ends_with(b"new"));
}
