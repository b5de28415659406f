//! The fs backend's own promises, on a real directory.

use super::*;
use bytes::Bytes;

thread_local! {
    /// Directories fsynced on this thread, for tests that pin when fsyncs happen.
    pub(super) static FSYNCED: std::cell::RefCell<Vec<PathBuf>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn fsynced() -> Vec<PathBuf> {
    FSYNCED.with(|f| std::mem::take(&mut *f.borrow_mut()))
}

fn staging_files(fs: &FsBackend) -> Vec<PathBuf> {
    std::fs::read_dir(fs.staging_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

#[tokio::test]
async fn a_stage_dropped_mid_body_leaves_no_staging_file() {
    let dir = tempfile::tempdir().unwrap();
    let fs = std::sync::Arc::new(FsBackend::open(dir.path(), &["b"]).unwrap());
    // A small body is read whole before any file exists: stalled, it leaves nothing.
    let small: ByteStream = Box::pin(
        futures::stream::iter([Ok(Bytes::from_static(b"first chunk"))])
            .chain(futures::stream::pending()),
    );
    let stager = fs.clone();
    let task =
        tokio::spawn(async move { stager.stage("b", "k", ObjectMeta::default(), small).await });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(staging_files(&fs), Vec::<PathBuf>::new());
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    // A large body's first chunk arrives (it streams to a file), then the client stalls.
    let stalled: ByteStream = Box::pin(
        futures::stream::iter([Ok(Bytes::from(vec![7u8; SMALL_BODY + 1]))])
            .chain(futures::stream::pending()),
    );
    let stager = fs.clone();
    let task =
        tokio::spawn(async move { stager.stage("b", "k", ObjectMeta::default(), stalled).await });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while staging_files(&fs).is_empty() {
        assert!(std::time::Instant::now() < deadline, "staging never began");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // The client hangs up: the request's future is dropped mid-body.
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(staging_files(&fs), Vec::<PathBuf>::new());
    // A body that fails mid-way leaves nothing either.
    let broken: ByteStream = Box::pin(futures::stream::iter([
        Ok(Bytes::from_static(b"part")),
        Err(crate::backend::BodyError::Broken("reset".into())),
    ]));
    assert!(fs
        .stage("b", "k", ObjectMeta::default(), broken)
        .await
        .is_err());
    assert_eq!(staging_files(&fs), Vec::<PathBuf>::new());
    // A completed stage is the gate's to commit or discard: it stays.
    let staged = fs
        .stage("b", "k", ObjectMeta::default(), body(b"v"))
        .await
        .unwrap();
    assert_eq!(staging_files(&fs).len(), 1);
    fs.discard(staged).await;
}

#[test]
fn opening_sweeps_staging_files_by_age() {
    let dir = tempfile::tempdir().unwrap();
    FsBackend::open(dir.path(), &["b"]).unwrap();
    let stale = dir.path().join(STAGING).join("left-by-a-crash.tmp");
    std::fs::write(&stale, b"x").unwrap();
    // Opened while serving, only old files go: this one may belong to a live request.
    FsBackend::open_sweeping(dir.path(), &["b"], std::time::Duration::from_secs(600)).unwrap();
    assert!(stale.exists());
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(old)
        .unwrap();
    FsBackend::open_sweeping(dir.path(), &["b"], std::time::Duration::from_secs(600)).unwrap();
    assert!(!stale.exists());
    // At start-up, every file goes.
    std::fs::write(&stale, b"x").unwrap();
    FsBackend::open(dir.path(), &["b"]).unwrap();
    assert!(!stale.exists());
}

#[test]
fn an_existing_directory_is_fsynced_into_its_parent_too() {
    fsynced();
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    let target = base.join("a").join("b");
    create_dirs_durable(base, &target, &Default::default()).unwrap();
    assert_eq!(fsynced(), [base.to_path_buf(), base.join("a")]);
    // A second writer finds both directories there (the first creator may not have
    // finished its fsync yet) and still makes each entry durable before returning.
    create_dirs_durable(base, &target, &Default::default()).unwrap();
    assert_eq!(fsynced(), [base.to_path_buf(), base.join("a")]);
    // Concurrent creators: each returns only after every entry on its path was fsynced.
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (base, target) = (base.to_path_buf(), base.join("c").join("d"));
            std::thread::spawn(move || {
                create_dirs_durable(&base, &target, &Default::default()).unwrap();
                fsynced()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), [base.to_path_buf(), base.join("c")]);
    }
}

fn body(b: &'static [u8]) -> ByteStream {
    Box::pin(futures::stream::iter([Ok(Bytes::from_static(b))]))
}

async fn read_all(stream: ByteStream) -> Vec<u8> {
    stream.map(|c| c.unwrap().to_vec()).concat().await
}

#[tokio::test]
async fn staged_bodies_are_invisible_until_committed() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
    let meta = ObjectMeta {
        content_type: Some("text/plain".into()),
        user_meta: [("owner".to_string(), "a".to_string())].into(),
        token: Some(7),
        headers: [("cache-control".to_string(), "no-store".to_string())].into(),
        checksum: Some(crate::backend::KeptChecksum {
            algorithm: "crc32".into(),
            value: "NhCmhg==".into(),
            kind: "FULL_OBJECT".into(),
        }),
        checksum_at_end: None,
        tags: [("team".to_string(), "a b".to_string())].into(),
    };
    let staged = fs
        .stage("b", "x/y", meta.clone(), body(b"hello"))
        .await
        .unwrap();
    assert_eq!(staged.etag, "\"5d41402abc4b2a76b9719d911017c592\"");
    assert!(fs.head("b", "x/y").await.unwrap().is_none());
    let info = fs.commit(&staged, None).await.unwrap();
    assert_eq!(info.meta, meta);
    assert_eq!(info.size, 5);
    let (got, stream) = fs.get("b", "x/y").await.unwrap().unwrap();
    assert_eq!(got, info);
    assert_eq!(read_all(stream).await, b"hello");
    assert!(std::fs::read_dir(fs.staging_dir())
        .unwrap()
        .next()
        .is_none());
}

#[tokio::test]
async fn commit_and_delete_are_conditional_on_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
    let first = fs
        .stage("b", "k", ObjectMeta::default(), body(b"1"))
        .await
        .unwrap();
    let v1 = fs.commit(&first, None).await.unwrap();
    // A second writer that believes the object is absent loses, and leaves nothing.
    let staged = fs
        .stage("b", "k", ObjectMeta::default(), body(b"2"))
        .await
        .unwrap();
    let err = fs.commit(&staged, None).await.unwrap_err();
    assert!(matches!(err, BackendError::Conflict { .. }));
    fs.discard(staged).await;
    assert!(std::fs::read_dir(fs.staging_dir())
        .unwrap()
        .next()
        .is_none());
    // An edit in place changes the version.
    std::fs::write(fs.object_file("b", "k"), b"edited").unwrap();
    let staged = fs
        .stage("b", "k", ObjectMeta::default(), body(b"3"))
        .await
        .unwrap();
    assert!(fs.commit(&staged, Some(&v1.version)).await.is_err());
    assert!(fs.delete("b", "k", &v1.version).await.is_err());
    assert!(fs.object_file("b", "k").exists());
}

/// The version a commit records is the one the published file has (the rename changed its
/// ctime), and a rewrite in place that restores size and mtime still changes it.
#[tokio::test]
async fn an_in_place_rewrite_that_restores_the_mtime_is_a_new_version() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
    let staged = fs
        .stage("b", "k", ObjectMeta::default(), body(b"aaaa"))
        .await
        .unwrap();
    let info = fs.commit(&staged, None).await.unwrap();
    let now = fs.version("b", "k").await.unwrap();
    assert_eq!(now.as_deref(), Some(info.version.as_str()));
    // The pending intent (the staged version) is recognised as the published file.
    assert!(same_version(staged.version.as_deref(), now.as_deref()));

    let path = fs.object_file("b", "k");
    let before = std::fs::metadata(&path).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[0] = b'z';
    std::fs::write(&path, &bytes).unwrap();
    let mtime = filetime_of(before.mtime(), before.mtime_nsec());
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_times(std::fs::FileTimes::new().set_modified(mtime))
        .unwrap();
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!(
        (
            before.ino(),
            before.size(),
            before.mtime(),
            before.mtime_nsec()
        ),
        (after.ino(), after.size(), after.mtime(), after.mtime_nsec()),
        "the rewrite restored everything but the ctime"
    );
    let found = fs.version("b", "k").await.unwrap();
    assert!(!same_version(Some(&info.version), found.as_deref()));
    let staged = fs
        .stage("b", "k", ObjectMeta::default(), body(b"bbbb"))
        .await
        .unwrap();
    assert!(matches!(
        fs.commit(&staged, Some(&info.version)).await,
        Err(BackendError::Conflict { .. })
    ));
    assert!(fs.delete("b", "k", &info.version).await.is_err());
}

/// Rows written before versions carried the ctime still match the file they recorded.
#[tokio::test]
async fn a_version_recorded_without_the_ctime_still_matches() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
    let staged = fs
        .stage("b", "k", ObjectMeta::default(), body(b"1"))
        .await
        .unwrap();
    let info = fs.commit(&staged, None).await.unwrap();
    let (legacy, _) = info.version.split_once('~').unwrap();
    assert!(same_version(Some(legacy), Some(&info.version)));
    assert!(!same_version(Some(&info.version), Some(legacy)));
    let staged = fs
        .stage("b", "k", ObjectMeta::default(), body(b"2"))
        .await
        .unwrap();
    fs.commit(&staged, Some(legacy)).await.unwrap();
    let now = fs.version("b", "k").await.unwrap().unwrap();
    assert!(!same_version(Some(legacy), Some(&now)));
    fs.delete("b", "k", &now).await.unwrap();
}

fn filetime_of(secs: i64, nsec: i64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::new(secs as u64, nsec as u32)
}

#[tokio::test]
async fn a_foreign_file_is_reported_corrupt_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
    std::fs::write(fs.object_file("b", "k"), b"no trailer here").unwrap();
    assert!(matches!(
        fs.head("b", "k").await,
        Err(BackendError::Corrupt(_))
    ));
}

#[tokio::test]
async fn listing_covers_nested_and_long_keys_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
    let long = format!("p/{}", "z".repeat(400));
    for key in ["p/b", "p", "p/a/c", long.as_str(), "q", "p//e"] {
        let staged = fs
            .stage("b", key, ObjectMeta::default(), body(b"v"))
            .await
            .unwrap();
        fs.commit(&staged, None).await.unwrap();
    }
    let page = fs.list("b", "p/", None, 100).await.unwrap();
    let keys: Vec<&str> = page.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["p//e", "p/a/c", "p/b", long.as_str()]);
    let page = fs.list("b", "", Some("p/a/c"), 2).await.unwrap();
    let keys: Vec<&str> = page.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["p/b", long.as_str()]);
    assert_eq!(page.next_start_after.as_deref(), Some(long.as_str()));
}

#[tokio::test]
async fn a_part_sent_again_replaces_the_first_with_and_without_links() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
    let meta = ObjectMeta::default();
    for legacy in [false, true] {
        let handle = fs.create_upload("b", "k", &meta).await.unwrap();
        let updir = uploads::upload_dir(dir.path(), &handle).unwrap();
        if legacy {
            // An upload begun before parts had links.
            std::fs::remove_file(updir.join(".linked")).unwrap();
        }
        for n in 1..=3 {
            fs.upload_part("b", "k", &handle, n, body(b"first"), None)
                .await
                .unwrap();
        }
        let again = fs
            .upload_part("b", "k", &handle, 2, body(b"second"), None)
            .await
            .unwrap();
        let parts = uploads::parts(dir.path(), &handle).await.unwrap();
        let numbers: Vec<i32> = parts.iter().map(|(p, _)| p.number).collect();
        assert_eq!(numbers, [1, 2, 3], "legacy: {legacy}");
        assert_eq!(parts[1].0.etag, again.etag, "legacy: {legacy}");
        assert_eq!(std::fs::read(&parts[1].1).unwrap(), b"second");
    }
}

#[tokio::test]
async fn a_part_dropped_mid_body_leaves_no_file_and_parts_sent_at_once_leave_one() {
    let dir = tempfile::tempdir().unwrap();
    let fs = std::sync::Arc::new(FsBackend::open(dir.path(), &["b"]).unwrap());
    let handle = fs
        .create_upload("b", "k", &ObjectMeta::default())
        .await
        .unwrap();
    let updir = uploads::upload_dir(dir.path(), &handle).unwrap();
    let names = || -> Vec<String> {
        std::fs::read_dir(&updir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".linked")
            .collect()
    };
    // A client that hangs up after some of its part.
    let stalled: ByteStream = Box::pin(
        futures::stream::iter([Ok(Bytes::from(vec![b'x'; 100_000]))])
            .chain(futures::stream::pending()),
    );
    let sending = {
        let fs = fs.clone();
        let handle = handle.clone();
        tokio::spawn(async move { fs.upload_part("b", "k", &handle, 1, stalled, None).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    sending.abort();
    let _ = sending.await;
    assert!(names().is_empty(), "left behind: {:?}", names());
    // Eight sends of one number at once: one file for it, the link's.
    let sends: Vec<_> = (0..8u8)
        .map(|i| {
            let fs = fs.clone();
            let handle = handle.clone();
            tokio::spawn(async move {
                let body: ByteStream = Box::pin(futures::stream::once(async move {
                    Ok::<_, crate::backend::BodyError>(Bytes::from(vec![i; 1000]))
                }));
                fs.upload_part("b", "k", &handle, 2, body, None)
                    .await
                    .unwrap()
            })
        })
        .collect();
    for s in sends {
        s.await.unwrap();
    }
    let mut left = names();
    left.sort();
    assert_eq!(left.len(), 2, "{left:?}");
    assert_eq!(left[0], "2");
    assert!(left[1].starts_with("2-"), "{left:?}");
}

/// The commit reads the staged body's identity from the handle it was written through; a file
/// put at the staging path meanwhile (another key's object, say) is not renamed into place
/// under the staged ETag.
#[tokio::test]
async fn a_staging_file_replaced_at_its_path_is_not_committed() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
    let other = fs
        .stage("b", "other", ObjectMeta::default(), body(b"other"))
        .await
        .unwrap();
    let staged = fs
        .stage("b", "k", ObjectMeta::default(), body(b"mine"))
        .await
        .unwrap();
    std::fs::rename(other.body.handle().unwrap(), staged.body.handle().unwrap()).unwrap();
    let err = fs.commit(&staged, None).await.unwrap_err();
    assert!(err.to_string().contains("replaced"), "{err}");
    assert!(
        fs.head("b", "k").await.unwrap().is_none(),
        "nothing was moved to the key"
    );
    // Removed at its path: refused as well, and nothing appears.
    let gone = fs
        .stage("b", "k", ObjectMeta::default(), body(b"mine"))
        .await
        .unwrap();
    std::fs::remove_file(gone.body.handle().unwrap()).unwrap();
    assert!(fs.commit(&gone, None).await.is_err());
    assert!(fs.head("b", "k").await.unwrap().is_none());
}

/// A checksum known only once the body has ended (an aws-chunked trailer's) is sealed into the
/// object file with the rest of the metadata.
#[tokio::test]
async fn a_checksum_proved_at_the_bodys_end_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
    let at_end = crate::backend::BodyChecksums::default();
    let meta = ObjectMeta {
        checksum_at_end: Some(at_end.clone()),
        ..Default::default()
    };
    // Proved as the body's last byte passes, before the backend sees its end.
    let proved = futures::stream::once(async move {
        at_end.set(vec![("crc32", "NhCmhg==".to_string())]);
        Ok(bytes::Bytes::from_static(b"hello"))
    });
    let staged = fs.stage("b", "k", meta, Box::pin(proved)).await.unwrap();
    fs.commit(&staged, None).await.unwrap();
    let kept = fs.head("b", "k").await.unwrap().unwrap().meta.checksum;
    assert_eq!(
        kept.map(|c| (c.algorithm, c.value)),
        Some(("crc32".into(), "NhCmhg==".into()))
    );
}

/// A staged body whose fsync is `synced`, in place of the one its staging started.
fn with_sync(mut staged: Staged, synced: &StagedSync) -> Staged {
    let StagedBody::File { path, file, .. } = staged.body else {
        panic!("the fs backend stages files")
    };
    staged.body = StagedBody::File {
        path,
        file,
        synced: synced.clone(),
    };
    staged
}

/// The commit renames nothing into place before the body's fsync has ended: the object stays
/// as it was while that fsync runs, and appears once it has ended well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_waits_for_the_staged_bodys_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let fs = std::sync::Arc::new(FsBackend::open(dir.path(), &["b"]).unwrap());
    let staged = fs
        .stage("b", "k", ObjectMeta::default(), body(b"hello"))
        .await
        .unwrap();
    let syncing = StagedSync::default();
    let staged = with_sync(staged, &syncing);
    let commit = {
        let fs = fs.clone();
        tokio::spawn(async move { fs.commit(&staged, None).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !commit.is_finished(),
        "committed before the body's fsync ended"
    );
    assert!(fs.head("b", "k").await.unwrap().is_none());
    syncing.finish(Ok(()));
    commit.await.unwrap().unwrap();
    let (_, stream) = fs.get("b", "k").await.unwrap().unwrap();
    assert_eq!(read_all(stream).await, b"hello");
}

/// A body whose fsync failed is never renamed into place: the commit fails as an outcome not
/// known (the gate holds its intent), the object keeps its old bytes and version.
#[tokio::test]
async fn a_failed_body_fsync_fails_the_commit_before_the_rename() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
    let first = fs
        .stage("b", "k", ObjectMeta::default(), body(b"old"))
        .await
        .unwrap();
    let old = fs.commit(&first, None).await.unwrap();
    let staged = fs
        .stage("b", "k", ObjectMeta::default(), body(b"new"))
        .await
        .unwrap();
    let failed = StagedSync::default();
    failed.finish(Err("EIO".into()));
    let staged = with_sync(staged, &failed);
    let err = fs.commit(&staged, Some(&old.version)).await.unwrap_err();
    assert!(
        matches!(&err, BackendError::Failing(m) if m.contains("could not be made durable")),
        "{err:?}"
    );
    let (now, stream) = fs.get("b", "k").await.unwrap().unwrap();
    assert_eq!(now.version, old.version);
    assert_eq!(read_all(stream).await, b"old");
}

/// A small body's staging hands the file over and fsyncs it after: its sync ends well, and a
/// commit made at once lands the whole body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_body_is_fsynced_after_its_hand_over() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
    let staged = fs
        .stage("b", "k", ObjectMeta::default(), body(b"hello"))
        .await
        .unwrap();
    let StagedBody::File { synced, .. } = &staged.body else {
        panic!("the fs backend stages files")
    };
    let synced = synced.clone();
    tokio::task::spawn_blocking(move || synced.wait())
        .await
        .unwrap()
        .unwrap();
    fs.commit(&staged, None).await.unwrap();
    let (_, stream) = fs.get("b", "k").await.unwrap().unwrap();
    assert_eq!(read_all(stream).await, b"hello");
}

/// A stage dropped at any point around its hand-over (the client hung up) leaves no staging
/// file once its fsync has ended, and one that completed is committed whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_dropped_around_its_hand_over_leaves_no_staging_file() {
    let dir = tempfile::tempdir().unwrap();
    let fs = std::sync::Arc::new(FsBackend::open(dir.path(), &["b"]).unwrap());
    let mut committed = 0;
    for i in 0..200u64 {
        let stage = {
            let fs = fs.clone();
            tokio::spawn(async move {
                fs.stage("b", "k", ObjectMeta::default(), body(b"hello"))
                    .await
            })
        };
        // From before the blocking task starts to after the hand-over.
        tokio::time::sleep(std::time::Duration::from_micros(i * 5)).await;
        stage.abort();
        if let Ok(Ok(staged)) = stage.await {
            fs.commit(&staged, None).await.unwrap();
            committed += 1;
            let (_, stream) = fs.get("b", "k").await.unwrap().unwrap();
            assert_eq!(read_all(stream).await, b"hello");
            let version = fs.version("b", "k").await.unwrap().unwrap();
            fs.delete("b", "k", &version).await.unwrap();
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !staging_files(&fs).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "left behind: {:?}",
            staging_files(&fs)
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(committed > 0, "no stage ever completed before its abort");
}
