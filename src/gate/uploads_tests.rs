//! The registry of uploads on disk: a part appends one line, a torn line is skipped, records
//! from before the parts log still load.

use super::*;

fn upload(id: &str) -> Upload {
    Upload {
        id: id.into(),
        bucket: "b".into(),
        key: "k".into(),
        scope_header: None,
        meta: Default::default(),
        handle: "h".into(),
        initiated_ms: 1,
        owner: Some("alice".into()),
        parts: BTreeMap::new(),
        counted: false,
    }
}

/// Records `u` in a place reserved first, as the gate does.
async fn insert(reg: &UploadRegistry, u: Upload) {
    let place = reg.reserve("b", "alice", (10, 10)).await.unwrap().unwrap();
    reg.insert(u, place).await.unwrap().unwrap();
}

fn part(number: i32, size: u64) -> PartInfo {
    PartInfo {
        number,
        etag: format!("\"{number:032x}\""),
        size,
        last_modified_ms: 5,
        checksum: None,
    }
}

#[tokio::test]
async fn a_part_appends_one_line_and_never_rewrites_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let reg = UploadRegistry::open(dir.path().to_path_buf()).unwrap();
    let id = UploadRegistry::new_id();
    insert(&reg, upload(&id)).await;
    let record = std::fs::read(dir.path().join(&id)).unwrap();
    let log = log_path(dir.path(), &id);
    let mut grown = Vec::new();
    let mut last = 0;
    for n in 1..=2000 {
        assert!(reg.add_part(&id, part(n, 100)).await.unwrap());
        let len = std::fs::metadata(&log).unwrap().len();
        grown.push(len - last);
        last = len;
    }
    // What part 2,000 writes is what part 1 wrote (give or take its number's digits),
    // and the record is as it was created.
    assert!(
        grown[1999] <= grown[0] + 4,
        "{} vs {}",
        grown[1999],
        grown[0]
    );
    assert_eq!(std::fs::read(dir.path().join(&id)).unwrap(), record);
    let reopened = UploadRegistry::open(dir.path().to_path_buf()).unwrap();
    let u = reopened.get(&id).await.unwrap().unwrap();
    assert_eq!(u.parts.len(), 2000);
    assert_eq!(u.parts[&2000], part(2000, 100));
    assert!(reopened.head(&id).await.unwrap().unwrap().parts.is_empty());
}

#[tokio::test]
async fn a_part_sent_again_replaces_the_first_and_the_log_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let reg = UploadRegistry::open(dir.path().to_path_buf()).unwrap();
    let id = UploadRegistry::new_id();
    insert(&reg, upload(&id)).await;
    for size in 1..=500 {
        reg.add_part(&id, part(1, size)).await.unwrap();
    }
    let lines = std::fs::read(log_path(dir.path(), &id))
        .unwrap()
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert!(lines <= 2 + 16, "{lines} lines for one part");
    let reopened = UploadRegistry::open(dir.path().to_path_buf()).unwrap();
    assert_eq!(
        reopened.get(&id).await.unwrap().unwrap().parts[&1].size,
        500
    );
}

#[tokio::test]
async fn a_torn_last_line_is_skipped_and_removal_clears_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let reg = UploadRegistry::open(dir.path().to_path_buf()).unwrap();
    let id = UploadRegistry::new_id();
    insert(&reg, upload(&id)).await;
    reg.add_part(&id, part(1, 10)).await.unwrap();
    let log = log_path(dir.path(), &id);
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(b"{\"number\":2,\"et").unwrap();
    let reopened = UploadRegistry::open(dir.path().to_path_buf()).unwrap();
    assert_eq!(
        reopened
            .get(&id)
            .await
            .unwrap()
            .unwrap()
            .parts
            .keys()
            .collect::<Vec<_>>(),
        [&1]
    );
    reopened.remove(&upload(&id)).await;
    assert!(!dir.path().join(&id).exists());
    assert!(!log.exists());
    assert!(!reopened.add_part(&id, part(3, 1)).await.unwrap());
}

#[tokio::test]
async fn records_with_their_parts_inline_still_load() {
    let dir = tempfile::tempdir().unwrap();
    let id = UploadRegistry::new_id();
    let mut old = upload(&id);
    old.owner = None;
    old.parts.insert(1, part(1, 7));
    let mut json = serde_json::to_value(&old).unwrap();
    json.as_object_mut().unwrap().remove("owner");
    std::fs::write(dir.path().join(&id), serde_json::to_vec(&json).unwrap()).unwrap();
    let reg = UploadRegistry::open(dir.path().to_path_buf()).unwrap();
    assert_eq!(reg.get(&id).await.unwrap().unwrap().parts[&1].size, 7);
    // A part added now goes to the log, beside the inline ones.
    reg.add_part(&id, part(2, 8)).await.unwrap();
    let reopened = UploadRegistry::open(dir.path().to_path_buf()).unwrap();
    assert_eq!(reopened.get(&id).await.unwrap().unwrap().parts.len(), 2);
}
