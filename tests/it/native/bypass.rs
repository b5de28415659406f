//! Contract line 5: a file changed on disk behind fencegate's back is detected on the next
//! write and never silently overwritten; with on_bypass = "adopt" it is logged and written over.

use crate::common;
use common::{client, get_bytes, put, Server};

#[tokio::test]
async fn a_file_changed_behind_our_back_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = "[buckets.guarded]\n\n[buckets.lenient]\non_bypass = \"adopt\"\n";
    let s = Server::start(&data, Some(config));
    let c = client();

    for bucket in ["guarded", "lenient"] {
        let url = s.object_url(bucket, "doc");
        assert_eq!(put(&c, &url, Some("1"), b"through fencegate").await.0, 200);
        let file = data.join(format!("objects/{bucket}/doc.o"));
        assert!(file.exists());
        // Someone edits the file in place.
        std::fs::write(&file, b"edited by hand").unwrap();
    }

    let url = s.object_url("guarded", "doc");
    let (status, body) = put(&c, &url, Some("2"), b"would clobber").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("BypassDetected")),
        "{body}"
    );
    assert_eq!(
        std::fs::read(data.join("objects/guarded/doc.o")).unwrap(),
        b"edited by hand"
    );
    let fence: serde_json::Value = common::fence(&c, &s, "guarded", "doc").await;
    assert_eq!(fence["highest"], 1, "the refused write recorded nothing");
    // The operator can see it.
    let metrics = c
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("fencegate_bypass_detected_total{bucket=\"guarded\"} 1"),
        "{metrics}"
    );

    // A file created from nothing, for a key fencegate never wrote, is caught too.
    std::fs::write(data.join("objects/guarded/planted.o"), b"planted").unwrap();
    assert_eq!(
        put(&c, &s.object_url("guarded", "planted"), Some("1"), b"x")
            .await
            .0,
        409
    );

    let url = s.object_url("lenient", "doc");
    assert_eq!(
        put(&c, &url, Some("2"), b"adopted and replaced").await.0,
        200
    );
    assert_eq!(get_bytes(&c, &url).await.1, b"adopted and replaced");
}

/// An in-place rewrite that keeps the size and restores the mtime (`touch -d`, `rsync -t`,
/// a careful editor) still changes the ctime, which no user can set, so it is caught too.
#[tokio::test]
async fn a_rewrite_that_restores_size_and_mtime_is_still_caught() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = Server::start(&data, None);
    let c = client();
    let url = s.object_url("default", "doc");
    assert_eq!(put(&c, &url, Some("1"), b"original").await.0, 200);
    let file = data.join("objects/default/doc.o");
    let before = std::fs::metadata(&file).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[..8].copy_from_slice(b"EDITED!!");
    std::fs::write(&file, &bytes).unwrap();
    let mtime = std::time::UNIX_EPOCH
        + std::time::Duration::new(before.mtime() as u64, before.mtime_nsec() as u32);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(mtime))
        .unwrap();
    let after = std::fs::metadata(&file).unwrap();
    assert_eq!(
        (before.ino(), before.size(), before.mtime_nsec()),
        (after.ino(), after.size(), after.mtime_nsec())
    );

    let (status, body) = put(&c, &url, Some("2"), b"would clobber").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("BypassDetected")),
        "{body}"
    );
    assert_eq!(&std::fs::read(&file).unwrap()[..8], b"EDITED!!");
}
