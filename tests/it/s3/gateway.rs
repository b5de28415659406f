//! The S3 gateway, driven by aws-sdk-s3 as an unmodified client, once per operation and on both
//! backends (`fs`, and `s3` on a real moto server and, in the safe mode, on a real ministack):
//! fenced writes, multipart uploads (the zombie completion included), copies, batch deletes,
//! reads with ranges and conditions, listing, buckets, SigV4 keys and presigned URLs.

use crate::common;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier};
use aws_sdk_s3::Client;
use common::store::{Store, StoreKind};
use common::Server;
use std::path::PathBuf;

const STORE_BUCKET: &str = "fencegate-gateway";
const PART: usize = 5 * 1024 * 1024;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Fs,
    /// The s3 backend on moto, with `unsafe_no_conditional_writes`.
    S3,
    /// The s3 backend on ministack, without any opt-in: conditional commits.
    S3Safe,
}

impl Kind {
    fn store(self) -> Option<StoreKind> {
        match self {
            Kind::Fs => None,
            Kind::S3 => Some(StoreKind::Moto),
            Kind::S3Safe => Some(StoreKind::Ministack),
        }
    }
}

struct Fx {
    _dir: tempfile::TempDir,
    _store: Option<Store>,
    server: Option<Server>,
    data: PathBuf,
    config: String,
    kind: Kind,
    store: Option<Client>,
}

// The writer in the key table of every surface; the reader in the deprecated [s3.keys],
// which still loads (as read on its buckets).
const KEYS: &str = r#"
[keys.writer]
access_key_id = "writer-key"
secret_access_key = "writer-secret-0123456"
buckets = { "*" = ["read", "write", "delete", "fence"] }

[s3.keys.reader]
access_key_id = "reader-key"
secret_access_key = "reader-secret-0123456"
buckets = ["default"]
write = false
"#;

const WRITER: common::sign::Creds = common::sign::Creds {
    key: "writer-key",
    secret: "writer-secret-0123456",
};

impl Fx {
    async fn start(kind: Kind) -> Fx {
        Fx::start_with(kind, "").await
    }

    /// Starts with `extra` appended to the configuration (`{store}` names the store's bucket).
    async fn start_with(kind: Kind, extra: &str) -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let data: PathBuf = dir.path().join("data");
        let (store, buckets) = match kind.store() {
            None => (
                None,
                "[buckets.default]\n\n[buckets.loose]\nfencing = \"optional\"\nfenced_deletes = false\n".to_string(),
            ),
            Some(store_kind) => {
                let store = Store::start(store_kind);
                store.create_bucket(STORE_BUCKET).await;
                let text = format!(
                    "[backends.local]\nkind = \"s3\"\nendpoint = \"{}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\nmultipart_threshold_bytes = {PART}\n{}\n\n[buckets.default]\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"default/\"\n\n[buckets.loose]\nfencing = \"optional\"\nfenced_deletes = false\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"loose/\"\n",
                    store.endpoint(),
                    store_kind.opt_in()
                );
                (Some(store), text)
            }
        };
        let extra = extra.replace("{store}", STORE_BUCKET);
        let config = format!("{buckets}\n{extra}\n{KEYS}");
        let server = Server::start(&data, Some(&config));
        if kind == Kind::S3Safe {
            common::store::assert_safe_mode(&server);
        }
        let client = store.as_ref().map(|m| m.client());
        Fx {
            _dir: dir,
            _store: store,
            server: Some(server),
            data,
            config,
            kind,
            store: client,
        }
    }

    fn client(&self) -> Client {
        self.client_as("writer-key", "writer-secret-0123456")
    }

    fn s(&self) -> &Server {
        self.server.as_ref().expect("the server is running")
    }

    fn kill9_and_restart(&mut self) {
        self.server.take().expect("running").kill9();
        self.server = Some(Server::start(&self.data, Some(&self.config)));
    }

    fn client_as(&self, id: &str, secret: &str) -> Client {
        common::moto::client_with(&self.s().url(""), id, secret)
    }

    /// Multipart uploads the store still holds (s3), or upload directories (fs).
    async fn leftover_uploads(&self) -> usize {
        match self.kind {
            Kind::Fs => {
                let dir = self.s().data_dir.join("objects/.uploads");
                std::fs::read_dir(dir).map_or(0, |d| d.count())
            }
            Kind::S3 | Kind::S3Safe => self
                .store
                .as_ref()
                .unwrap()
                .list_multipart_uploads()
                .bucket(STORE_BUCKET)
                .send()
                .await
                .unwrap()
                .uploads()
                .len(),
        }
    }
}

/// (status, code, Fencing-Token-Highest) of a failed call.
fn failure<T: std::fmt::Debug, E: ProvideErrorMetadata + std::fmt::Debug>(
    r: Result<T, SdkError<E, aws_smithy_runtime_api::client::orchestrator::HttpResponse>>,
) -> (u16, String, Option<String>) {
    let e = r.expect_err("the call should have failed");
    let raw = e.raw_response().expect("an HTTP answer");
    let status = raw.status().as_u16();
    let highest = raw
        .headers()
        .get("fencing-token-highest")
        .map(str::to_string);
    let code = e.code().unwrap_or_default().to_string();
    (status, code, highest)
}

async fn body_of(c: &Client, bucket: &str, key: &str) -> Vec<u8> {
    c.get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes()
        .to_vec()
}

macro_rules! with_token {
    ($builder:expr, $token:expr) => {{
        let token: String = $token.to_string();
        $builder.customize().mutate_request(move |req| {
            req.headers_mut().insert("fencing-token", token.clone());
        })
    }};
}

/// PutObject, GetObject (whole, ranged, conditional), HeadObject and DeleteObject, with every
/// carrier of the token and the S3 error for each refusal.
async fn objects_are_fenced(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    // Token in the header.
    let out = with_token!(
        c.put_object()
            .bucket("default")
            .key("dir/a.txt")
            .content_type("text/plain")
            .metadata("owner", "worker-1")
            .body(ByteStream::from_static(b"0123456789")),
        34
    )
    .send()
    .await
    .unwrap();
    assert_eq!(out.e_tag(), Some("\"781e5e245d69b566979b86e28d23f2c7\""));
    // Token as metadata, as `aws s3 cp --metadata fencing-token=N` sends it.
    c.put_object()
        .bucket("default")
        .key("dir/b.txt")
        .metadata("fencing-token", "35")
        .body(ByteStream::from_static(b"bee"))
        .send()
        .await
        .unwrap();

    let head = c
        .head_object()
        .bucket("default")
        .key("dir/a.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(10));
    assert_eq!(head.content_type(), Some("text/plain"));
    let meta = head.metadata().unwrap();
    assert_eq!(meta.get("fencing-token").map(String::as_str), Some("34"));
    assert_eq!(meta.get("owner").map(String::as_str), Some("worker-1"));

    let ranged = c
        .get_object()
        .bucket("default")
        .key("dir/a.txt")
        .range("bytes=2-5")
        .send()
        .await
        .unwrap();
    assert_eq!(ranged.content_range(), Some("bytes 2-5/10"));
    let bytes = ranged.body.collect().await.unwrap().into_bytes();
    assert_eq!(&bytes[..], b"2345");
    let suffix = c
        .get_object()
        .bucket("default")
        .key("dir/a.txt")
        .range("bytes=-3")
        .send()
        .await
        .unwrap();
    assert_eq!(
        &suffix.body.collect().await.unwrap().into_bytes()[..],
        b"789"
    );
    let (status, code, _) = failure(
        c.get_object()
            .bucket("default")
            .key("dir/a.txt")
            .range("bytes=50-60")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (416, "InvalidRange"));
    let etag = head.e_tag().unwrap().to_string();
    let (status, _, _) = failure(
        c.get_object()
            .bucket("default")
            .key("dir/a.txt")
            .if_none_match(&etag)
            .send()
            .await,
    );
    assert_eq!(status, 304);
    let (status, code, _) = failure(
        c.get_object()
            .bucket("default")
            .key("dir/a.txt")
            .if_match("\"0000\"")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (412, "PreconditionFailed"));
    assert_eq!(
        c.get_object()
            .bucket("default")
            .key("dir/a.txt")
            .if_match(&etag)
            .send()
            .await
            .unwrap()
            .e_tag(),
        Some(etag.as_str())
    );

    // Refusals: stale, missing, malformed, disagreeing carriers, a failed precondition.
    let (status, code, highest) = failure(
        with_token!(
            c.put_object()
                .bucket("default")
                .key("dir/a.txt")
                .body(ByteStream::from_static(b"zombie")),
            33
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));
    assert_eq!(highest.as_deref(), Some("34"));
    let (status, code, _) = failure(
        c.put_object()
            .bucket("default")
            .key("dir/a.txt")
            .body(ByteStream::from_static(b"x"))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (428, "FencingTokenRequired"));
    let (status, code, _) = failure(
        c.put_object()
            .bucket("default")
            .key("dir/a.txt")
            .metadata("fencing-token", "0x10")
            .body(ByteStream::from_static(b"x"))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "InvalidFencingToken"));
    let (status, code, _) = failure(
        with_token!(
            c.put_object()
                .bucket("default")
                .key("dir/a.txt")
                .metadata("fencing-token", "40")
                .body(ByteStream::from_static(b"x")),
            41
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (400, "InvalidFencingToken"));
    let (status, code, _) = failure(
        with_token!(
            c.put_object()
                .bucket("default")
                .key("dir/a.txt")
                .if_none_match("*")
                .body(ByteStream::from_static(b"x")),
            50
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (412, "PreconditionFailed"));
    // None of those changed anything.
    assert_eq!(body_of(&c, "default", "dir/a.txt").await, b"0123456789");

    // Unknown bucket and key.
    let (status, code, _) = failure(c.get_object().bucket("nope").key("k").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchBucket"));
    let (status, code, _) = failure(c.get_object().bucket("default").key("absent").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));

    // Deletes are fenced like writes and leave a tombstone.
    let (status, code, _) = failure(
        with_token!(c.delete_object().bucket("default").key("dir/a.txt"), 20)
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));
    with_token!(c.delete_object().bucket("default").key("dir/a.txt"), 36)
        .send()
        .await
        .unwrap();
    let (status, code, _) = failure(
        with_token!(
            c.put_object()
                .bucket("default")
                .key("dir/a.txt")
                .body(ByteStream::from_static(b"late")),
            35
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));
}

/// ListObjectsV2 (delimiter, pages, continuation), ListObjects v1, ListBuckets, HeadBucket,
/// GetBucketLocation, CreateBucket and DeleteBucket.
async fn listing_and_buckets(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    for key in ["a/1", "a/2", "b/1", "c", "d/e/f"] {
        c.put_object()
            .bucket("loose")
            .key(key)
            .body(ByteStream::from_static(b"v"))
            .send()
            .await
            .unwrap();
    }
    let out = c
        .list_objects_v2()
        .bucket("loose")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let keys: Vec<_> = out.contents().iter().filter_map(|o| o.key()).collect();
    let prefixes: Vec<_> = out
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix())
        .collect();
    assert_eq!(keys, ["c"]);
    assert_eq!(prefixes, ["a/", "b/", "d/"]);

    // Two at a time, following continuation tokens, until the end.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let out = c
            .list_objects_v2()
            .bucket("loose")
            .max_keys(2)
            .set_continuation_token(token.clone())
            .send()
            .await
            .unwrap();
        seen.extend(
            out.contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_string)),
        );
        match out.next_continuation_token() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, ["a/1", "a/2", "b/1", "c", "d/e/f"]);

    let v1 = c
        .list_objects()
        .bucket("loose")
        .prefix("a/")
        .marker("a/1")
        .send()
        .await
        .unwrap();
    let keys: Vec<_> = v1.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["a/2"]);

    let buckets = c.list_buckets().send().await.unwrap();
    let names: Vec<_> = buckets.buckets().iter().filter_map(|b| b.name()).collect();
    assert_eq!(names, ["default", "loose"]);
    // The reader key sees only the bucket it may use.
    let reader = fx.client_as("reader-key", "reader-secret-0123456");
    let buckets = reader.list_buckets().send().await.unwrap();
    let names: Vec<_> = buckets.buckets().iter().filter_map(|b| b.name()).collect();
    assert_eq!(names, ["default"]);

    c.head_bucket().bucket("default").send().await.unwrap();
    let (status, _, _) = failure(c.head_bucket().bucket("nope").send().await);
    assert_eq!(status, 404);
    let loc = c
        .get_bucket_location()
        .bucket("default")
        .send()
        .await
        .unwrap();
    // us-east-1 is reported as no constraint (empty), as AWS does.
    assert!(loc
        .location_constraint()
        .is_none_or(|l| l.as_str().is_empty()));
    // An owned bucket, in us-east-1: 200, as AWS answers there (everyday.rs).
    c.create_bucket().bucket("default").send().await.unwrap();
    let (status, code, _) = failure(c.create_bucket().bucket("brand-new").send().await);
    assert_eq!((status, code.as_str()), (501, "NotImplemented"));
    // Without [bucket_defaults] buckets come only from the configuration.
    let (_, code, _) = failure(c.delete_bucket().bucket("loose").send().await);
    assert_eq!(code, "MethodNotAllowed");
    // An operation the gateway does not serve says so rather than pretending.
    let (status, code, _) = failure(
        c.get_bucket_analytics_configuration()
            .bucket("default")
            .id("a")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (501, "NotImplemented"));
}

async fn start_upload(c: &Client, key: &str, token: u64) -> String {
    c.create_multipart_upload()
        .bucket("default")
        .key(key)
        .metadata("fencing-token", token.to_string())
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_string()
}

async fn send_part(c: &Client, key: &str, id: &str, n: i32, fill: u8, len: usize) -> String {
    c.upload_part()
        .bucket("default")
        .key(key)
        .upload_id(id)
        .part_number(n)
        .body(ByteStream::from(vec![fill; len]))
        .send()
        .await
        .unwrap()
        .e_tag()
        .unwrap()
        .to_string()
}

fn parts(list: &[(i32, &str)]) -> CompletedMultipartUpload {
    CompletedMultipartUpload::builder()
        .set_parts(Some(
            list.iter()
                .map(|(n, e)| CompletedPart::builder().part_number(*n).e_tag(*e).build())
                .collect(),
        ))
        .build()
}

/// The zombie over S3 alone: an upload begun with 33, a PutObject with 34 landing while it is
/// in flight, then the completion fails with StaleFencingToken; the object holds 34's bytes and
/// nothing of the upload remains.
async fn multipart_zombie(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    let id = start_upload(&c, "report", 33).await;
    let e1 = send_part(&c, "report", &id, 1, b'z', PART).await;
    let e2 = send_part(&c, "report", &id, 2, b'z', 10).await;

    with_token!(
        c.put_object()
            .bucket("default")
            .key("report")
            .body(ByteStream::from_static(b"written by 34")),
        34
    )
    .send()
    .await
    .unwrap();

    let (status, code, highest) = failure(
        c.complete_multipart_upload()
            .bucket("default")
            .key("report")
            .upload_id(&id)
            .multipart_upload(parts(&[(1, &e1), (2, &e2)]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));
    assert_eq!(highest.as_deref(), Some("34"));
    assert_eq!(body_of(&c, "default", "report").await, b"written by 34");
    // The fenced-out upload is gone, here and on the store.
    let listed = c
        .list_multipart_uploads()
        .bucket("default")
        .send()
        .await
        .unwrap();
    assert!(listed.uploads().is_empty());
    assert_eq!(fx.leftover_uploads().await, 0);
    // A part for it now is refused: it no longer exists.
    let (status, code, _) = failure(
        c.upload_part()
            .bucket("default")
            .key("report")
            .upload_id(&id)
            .part_number(3)
            .body(ByteStream::from_static(b"more"))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchUpload"));

    // A part uploaded after a newer token is recorded is refused early, before completion.
    let id = start_upload(&c, "late", 40).await;
    with_token!(
        c.put_object()
            .bucket("default")
            .key("late")
            .body(ByteStream::from_static(b"41")),
        41
    )
    .send()
    .await
    .unwrap();
    let (status, code, _) = failure(
        c.upload_part()
            .bucket("default")
            .key("late")
            .upload_id(&id)
            .part_number(1)
            .body(ByteStream::from_static(b"stale part"))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));
    // It can never complete, so it is aborted at once, here and on the store: no writer is
    // left with an upload only a newer token could abort (s3cmd's abortmp sends none).
    let listed = c
        .list_multipart_uploads()
        .bucket("default")
        .send()
        .await
        .unwrap();
    assert!(listed.uploads().is_empty(), "{listed:?}");
    assert_eq!(fx.leftover_uploads().await, 0);
}

/// A whole multipart life: parts (one copied from an object), ListParts, ListMultipartUploads,
/// bad part lists, AbortMultipartUpload, and a completion that makes the object.
async fn multipart_uploads(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    with_token!(
        c.put_object()
            .bucket("default")
            .key("source")
            .body(ByteStream::from_static(b"0123456789")),
        1
    )
    .send()
    .await
    .unwrap();

    let id = start_upload(&c, "big", 7).await;
    let e1 = send_part(&c, "big", &id, 1, b'a', PART).await;
    let copied = c
        .upload_part_copy()
        .bucket("default")
        .key("big")
        .upload_id(&id)
        .part_number(2)
        .copy_source("default/source")
        .copy_source_range("bytes=2-5")
        .send()
        .await
        .unwrap();
    let e2 = copied
        .copy_part_result()
        .unwrap()
        .e_tag()
        .unwrap()
        .to_string();

    let listed = c
        .list_parts()
        .bucket("default")
        .key("big")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    let numbers: Vec<_> = listed
        .parts()
        .iter()
        .filter_map(|p| p.part_number())
        .collect();
    assert_eq!(numbers, [1, 2]);
    let uploads = c
        .list_multipart_uploads()
        .bucket("default")
        .send()
        .await
        .unwrap();
    assert_eq!(uploads.uploads().len(), 1);
    assert_eq!(uploads.uploads()[0].upload_id(), Some(id.as_str()));

    // A token that disagrees with the upload's own is refused.
    let (status, code, _) = failure(
        with_token!(
            c.upload_part()
                .bucket("default")
                .key("big")
                .upload_id(&id)
                .part_number(3)
                .body(ByteStream::from_static(b"x")),
            8
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (400, "InvalidFencingToken"));
    // Bad part lists are the client's 400 and change nothing.
    let (status, code, _) = failure(
        c.complete_multipart_upload()
            .bucket("default")
            .key("big")
            .upload_id(&id)
            .multipart_upload(parts(&[(2, &e2), (1, &e1)]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "InvalidPartOrder"));
    let (status, code, _) = failure(
        c.complete_multipart_upload()
            .bucket("default")
            .key("big")
            .upload_id(&id)
            .multipart_upload(parts(&[
                (1, &e1),
                (2, "\"00000000000000000000000000000000\""),
            ]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "InvalidPart"));
    let (status, code, _) = failure(c.get_object().bucket("default").key("big").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));

    let done = c
        .complete_multipart_upload()
        .bucket("default")
        .key("big")
        .upload_id(&id)
        .multipart_upload(parts(&[(1, &e1), (2, &e2)]))
        .send()
        .await
        .unwrap();
    assert!(
        done.e_tag().unwrap().ends_with("-2\""),
        "{:?}",
        done.e_tag()
    );
    let body = body_of(&c, "default", "big").await;
    assert_eq!(body.len(), PART + 4);
    assert!(body[..PART].iter().all(|b| *b == b'a'));
    assert_eq!(&body[PART..], b"2345");
    let head = c
        .head_object()
        .bucket("default")
        .key("big")
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.metadata()
            .unwrap()
            .get("fencing-token")
            .map(String::as_str),
        Some("7")
    );

    // A completion refused at the commit (here If-None-Match: * on an existing object) drops
    // the upload whole: nothing of it remains, and a retry is told so.
    let id = start_upload(&c, "big", 7).await;
    let e1 = send_part(&c, "big", &id, 1, b'b', 100).await;
    let (status, code, _) = failure(
        c.complete_multipart_upload()
            .bucket("default")
            .key("big")
            .upload_id(&id)
            .if_none_match("*")
            .multipart_upload(parts(&[(1, &e1)]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (412, "PreconditionFailed"));
    assert_eq!(body_of(&c, "default", "big").await.len(), PART + 4);
    assert_eq!(fx.leftover_uploads().await, 0);
    let (status, code, _) = failure(
        c.complete_multipart_upload()
            .bucket("default")
            .key("big")
            .upload_id(&id)
            .multipart_upload(parts(&[(1, &e1)]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchUpload"));

    // Aborted: gone from the listing, its parts removed.
    let id = start_upload(&c, "dropped", 9).await;
    send_part(&c, "dropped", &id, 1, b'd', 100).await;
    // Fenced by the upload's token (9).
    with_token!(
        c.abort_multipart_upload()
            .bucket("default")
            .key("dropped")
            .upload_id(&id),
        9
    )
    .send()
    .await
    .unwrap();
    let uploads = c
        .list_multipart_uploads()
        .bucket("default")
        .send()
        .await
        .unwrap();
    assert!(uploads.uploads().is_empty());
    assert_eq!(fx.leftover_uploads().await, 0);
    let (status, code, _) = failure(
        c.abort_multipart_upload()
            .bucket("default")
            .key("dropped")
            .upload_id("not-an-upload")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchUpload"));
}

/// CopyObject fences the destination and honours the source conditions; DeleteObjects fences
/// each key and reports each failure on its own.
async fn copy_and_batch_delete(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    with_token!(
        c.put_object()
            .bucket("default")
            .key("src")
            .metadata("colour", "blue")
            .body(ByteStream::from_static(b"payload")),
        3
    )
    .send()
    .await
    .unwrap();
    let src_etag = c
        .head_object()
        .bucket("default")
        .key("src")
        .send()
        .await
        .unwrap()
        .e_tag()
        .unwrap()
        .to_string();
    with_token!(
        c.copy_object()
            .bucket("default")
            .key("dst")
            .copy_source("default/src")
            .copy_source_if_match(&src_etag),
        10
    )
    .send()
    .await
    .unwrap();
    let head = c
        .head_object()
        .bucket("default")
        .key("dst")
        .send()
        .await
        .unwrap();
    let meta = head.metadata().unwrap();
    assert_eq!(meta.get("colour").map(String::as_str), Some("blue"));
    assert_eq!(meta.get("fencing-token").map(String::as_str), Some("10"));
    assert_eq!(body_of(&c, "default", "dst").await, b"payload");

    let (status, code, _) = failure(
        with_token!(
            c.copy_object()
                .bucket("default")
                .key("dst")
                .copy_source("default/src")
                .copy_source_if_match("\"0000\""),
            11
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (412, "PreconditionFailed"));
    let (status, code, highest) = failure(
        with_token!(
            c.copy_object()
                .bucket("default")
                .key("dst")
                .copy_source("default/src"),
            9
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));
    assert_eq!(highest.as_deref(), Some("10"));

    // Batch delete with token 5: "src" (highest 3) goes, "dst" (highest 10) is refused,
    // "missing" is reported deleted as S3 does.
    let ids = ["src", "dst", "missing"]
        .iter()
        .map(|k| ObjectIdentifier::builder().key(*k).build().unwrap())
        .collect();
    let out = with_token!(
        c.delete_objects()
            .bucket("default")
            .delete(Delete::builder().set_objects(Some(ids)).build().unwrap()),
        5
    )
    .send()
    .await
    .unwrap();
    let mut deleted: Vec<_> = out.deleted().iter().filter_map(|d| d.key()).collect();
    deleted.sort();
    assert_eq!(deleted, ["missing", "src"]);
    assert_eq!(out.errors().len(), 1);
    assert_eq!(out.errors()[0].key(), Some("dst"));
    assert_eq!(out.errors()[0].code(), Some("StaleFencingToken"));
    assert_eq!(body_of(&c, "default", "dst").await, b"payload");
    let (status, _, _) = failure(c.head_object().bucket("default").key("src").send().await);
    assert_eq!(status, 404);

    // A batch with no token at all, on a bucket that needs one on deletes, is refused whole
    // (428), not key by key inside a 200 that s3cmd and fsspec report as success.
    let ids = vec![ObjectIdentifier::builder().key("dst").build().unwrap()];
    let (status, code, _) = failure(
        c.delete_objects()
            .bucket("default")
            .delete(Delete::builder().set_objects(Some(ids)).build().unwrap())
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (428, "FencingTokenRequired"));
    assert_eq!(body_of(&c, "default", "dst").await, b"payload");
}

/// `/metrics`, read with the other key (an admin key).
async fn scrape(fx: &Fx) -> String {
    let c = common::client();
    let creds = common::sign::Creds {
        key: "other-key",
        secret: "other-secret-0123456",
    };
    common::sign::send(&c, c.get(fx.s().url("/metrics")), Some(creds))
        .await
        .text()
        .await
        .unwrap()
}

/// Multipart uploads a client leaves open are bounded per key and per bucket (400
/// `TooManyUploads` past either, nothing created), and an incomplete one is aborted once it is
/// older than `upload_expiry_secs`, while serving: its record, its parts and the store's upload
/// go, and its id answers `NoSuchUpload`.
async fn open_uploads_are_bounded_and_expire(kind: Kind) {
    let fx = Fx::start_with(
        kind,
        "[server]\nupload_expiry_secs = 3\nmax_uploads_per_key = 2\nmax_uploads_per_bucket = 3\n\n[keys.other]\naccess_key_id = \"other-key\"\nsecret_access_key = \"other-secret-0123456\"\nbuckets = { \"*\" = [\"read\", \"write\", \"delete\", \"fence\"] }\nadmin = true\n",
    )
    .await;
    let c = fx.client();
    let other = fx.client_as("other-key", "other-secret-0123456");
    let first = start_upload(&c, "a", 1).await;
    send_part(&c, "a", &first, 1, b'x', 1024).await;
    start_upload(&c, "b", 1).await;
    // The writer's third is past its own bound; another key still has room in the bucket.
    let (status, code, _) = failure(
        c.create_multipart_upload()
            .bucket("default")
            .key("c")
            .metadata("fencing-token", "1")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "TooManyUploads"));
    start_upload(&other, "c", 1).await;
    // The bucket's bound: three are open.
    let (status, code, _) = failure(
        other
            .create_multipart_upload()
            .bucket("default")
            .key("d")
            .metadata("fencing-token", "1")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "TooManyUploads"));
    let open = |c: Client| async move {
        c.list_multipart_uploads()
            .bucket("default")
            .send()
            .await
            .unwrap()
            .uploads()
            .len()
    };
    assert_eq!(open(c.clone()).await, 3);
    let metrics = scrape(&fx).await;
    assert!(
        metrics.contains("fencegate_multipart_uploads_open 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("fencegate_multipart_upload_bytes 1024"),
        "{metrics}"
    );
    assert!(
        metrics.contains("fencegate_multipart_upload_refusals_total{bound=\"per_key\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("fencegate_multipart_upload_refusals_total{bound=\"per_bucket\"} 1"),
        "{metrics}"
    );

    // Past their age (3 s, swept every second), all three go, while fencegate runs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while open(c.clone()).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the uploads did not expire"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let (status, code, _) = failure(
        c.upload_part()
            .bucket("default")
            .key("a")
            .upload_id(&first)
            .part_number(2)
            .body(ByteStream::from(vec![b'y'; 10]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchUpload"));
    let records = std::fs::read_dir(fx.s().data_dir.join("uploads"))
        .unwrap()
        .count();
    assert_eq!(records, 0, "the upload records and parts logs are removed");
    assert_eq!(
        fx.leftover_uploads().await,
        0,
        "the backend's uploads are aborted"
    );
    let metrics = scrape(&fx).await;
    assert!(
        metrics.contains("fencegate_multipart_uploads_expired_total 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("fencegate_multipart_uploads_open 0"),
        "{metrics}"
    );
    // The bound counts open uploads only: there is room again.
    start_upload(&c, "e", 1).await;
}

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod fs {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Fs).await })*
        }
        mod s3 {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::S3).await })*
        }
        mod s3_safe {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::S3Safe).await })*
        }
    };
}

/// CreateBucket and DeleteBucket with `[bucket_defaults]`: a created bucket takes the template's
/// policy, survives a restart, is deleted only when empty, and keeps its fences if re-created.
async fn buckets_created_through_s3(kind: Kind) {
    let template = match kind {
        Kind::Fs => "[bucket_defaults]\nfenced_deletes = true\n",
        Kind::S3 | Kind::S3Safe => {
            "[bucket_defaults]\nbackend_bucket = \"{store}\"\nbackend_prefix = \"created/\"\n"
        }
    };
    let mut fx = Fx::start_with(kind, template).await;
    let c = fx.client();
    c.create_bucket()
        .bucket("made-by-client")
        .send()
        .await
        .unwrap();
    let names: Vec<String> = c
        .list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .iter()
        .filter_map(|b| b.name().map(str::to_string))
        .collect();
    assert!(names.contains(&"made-by-client".to_string()), "{names:?}");
    c.create_bucket()
        .bucket("made-by-client")
        .send()
        .await
        .unwrap();
    let (status, code, _) = failure(c.create_bucket().bucket("Bad_Name").send().await);
    assert_eq!((status, code.as_str()), (400, "InvalidBucketName"));
    // The template requires tokens.
    let (status, code, _) = failure(
        c.put_object()
            .bucket("made-by-client")
            .key("k")
            .body(ByteStream::from_static(b"x"))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (428, "FencingTokenRequired"));
    with_token!(
        c.put_object()
            .bucket("made-by-client")
            .key("k")
            .body(ByteStream::from_static(b"one")),
        1
    )
    .send()
    .await
    .unwrap();

    fx.kill9_and_restart();
    let c = fx.client();
    assert_eq!(body_of(&c, "made-by-client", "k").await, b"one");
    let (status, code, _) = failure(c.delete_bucket().bucket("made-by-client").send().await);
    assert_eq!((status, code.as_str()), (409, "BucketNotEmpty"));
    let (status, code, _) = failure(c.delete_bucket().bucket("default").send().await);
    assert_eq!((status, code.as_str()), (405, "MethodNotAllowed"));
    with_token!(c.delete_object().bucket("made-by-client").key("k"), 2)
        .send()
        .await
        .unwrap();
    c.delete_bucket()
        .bucket("made-by-client")
        .send()
        .await
        .unwrap();
    let (status, _, _) = failure(c.head_bucket().bucket("made-by-client").send().await);
    assert_eq!(status, 404);
    // Re-created, it still remembers the tombstone: the old holder's token 1 stays fenced.
    c.create_bucket()
        .bucket("made-by-client")
        .send()
        .await
        .unwrap();
    let (status, code, highest) = failure(
        with_token!(
            c.put_object()
                .bucket("made-by-client")
                .key("k")
                .body(ByteStream::from_static(b"zombie")),
            1
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));
    assert_eq!(highest.as_deref(), Some("2"));

    // A PUT still streaming its body holds the bucket: DeleteBucket is refused while it is in
    // flight (it used to answer 204 and the PUT then landed in the deleted bucket).
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
    let body = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let url = fx.s().object_url("made-by-client", "streaming");
    let put = tokio::spawn(async move {
        let c = common::client();
        let req = c
            .put(url)
            .header("Fencing-Token", "3")
            .body(reqwest::Body::wrap_stream(body));
        common::sign::send(&c, req, Some(WRITER))
            .await
            .status()
            .as_u16()
    });
    tx.send(Ok(b"first half ".to_vec())).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (status, code, _) = failure(c.delete_bucket().bucket("made-by-client").send().await);
    assert_eq!((status, code.as_str()), (409, "OperationAborted"));
    tx.send(Ok(b"second half".to_vec())).await.unwrap();
    drop(tx);
    assert_eq!(put.await.unwrap(), 200);
    assert_eq!(
        body_of(&c, "made-by-client", "streaming").await,
        b"first half second half"
    );
    let (status, code, _) = failure(c.delete_bucket().bucket("made-by-client").send().await);
    assert_eq!((status, code.as_str()), (409, "BucketNotEmpty"));
    // The refused deletes reopened the bucket for writes.
    with_token!(
        c.delete_object().bucket("made-by-client").key("streaming"),
        4
    )
    .send()
    .await
    .unwrap();
    c.delete_bucket()
        .bucket("made-by-client")
        .send()
        .await
        .unwrap();

    // Re-created after [bucket_defaults] changed its scope: its old tokens would no longer
    // apply, so it is refused, with a 409 that names the fix (not a 503 that SDKs retry and
    // that never clears). Back on the old scope, it is created again.
    let original = fx.config.clone();
    fx.config = original.replace(
        "[bucket_defaults]\n",
        "[bucket_defaults]\nscope = \"bucket\"\n",
    );
    fx.kill9_and_restart();
    let c = fx.client();
    let e = c
        .create_bucket()
        .bucket("made-by-client")
        .send()
        .await
        .expect_err("a scope change refused");
    let status = e.raw_response().map(|r| r.status().as_u16());
    assert_eq!(
        (status, e.code()),
        (Some(409), Some("InvalidBucketState")),
        "{e:?}"
    );
    let message = e.message().unwrap_or_default();
    assert!(
        message.contains("--accept-scope-change made-by-client"),
        "{message}"
    );
    fx.config = original;
    fx.kill9_and_restart();
    let c = fx.client();
    c.create_bucket()
        .bucket("made-by-client")
        .send()
        .await
        .unwrap();

    // A read-only key may not create buckets.
    let reader = fx.client_as("reader-key", "reader-secret-0123456");
    let (status, code, _) = failure(reader.create_bucket().bucket("by-reader").send().await);
    assert_eq!((status, code.as_str()), (403, "AccessDenied"));
}

/// The holes of issue 11 through the S3 surface: an acknowledged DeleteObject of an absent key
/// records its token (a zombie PutObject or native PUT below it is refused), and an
/// AbortMultipartUpload needs the upload's token or a higher one.
async fn holes_are_closed(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    with_token!(c.delete_object().bucket("default").key("gone"), 7)
        .send()
        .await
        .unwrap();
    let http = common::client();
    let f = common::fence_as(&http, fx.s(), "default", "gone", Some(WRITER)).await;
    assert_eq!(f["highest"], 7, "{f}");
    assert_eq!(f["tombstone"], true, "{f}");
    let (status, code, highest) = failure(
        with_token!(
            c.put_object()
                .bucket("default")
                .key("gone")
                .body(ByteStream::from_static(b"zombie")),
            6
        )
        .send()
        .await,
    );
    assert_eq!(
        (status, code.as_str(), highest.as_deref()),
        (409, "StaleFencingToken", Some("7"))
    );
    let native = common::put_as(
        &http,
        &fx.s().object_url("default", "gone"),
        Some("6"),
        b"z",
        Some(WRITER),
    )
    .await;
    assert_eq!(native.0, 409);

    let id = start_upload(&c, "up", 20).await;
    let (status, code, _) = failure(
        c.abort_multipart_upload()
            .bucket("default")
            .key("up")
            .upload_id(&id)
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (428, "FencingTokenRequired"));
    let (status, code, _) = failure(
        with_token!(
            c.abort_multipart_upload()
                .bucket("default")
                .key("up")
                .upload_id(&id),
            19
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));
    with_token!(
        c.abort_multipart_upload()
            .bucket("default")
            .key("up")
            .upload_id(&id),
        21
    )
    .send()
    .await
    .unwrap();
    assert_eq!(fx.leftover_uploads().await, 0);
}

macro_rules! keyed {
    ($builder:expr, $token:expr, $key:expr) => {{
        let (token, key): (String, String) = ($token.to_string(), $key.to_string());
        $builder.customize().mutate_request(move |req| {
            req.headers_mut().insert("fencing-token", token.clone());
            req.headers_mut().insert("idempotency-key", key.clone());
        })
    }};
}

/// Idempotency-Key through the S3 API (docs/design.md, "Idempotent retries"): a retried
/// PutObject or DeleteObject is answered as the first, even after a newer token, and writes
/// nothing; another body under the key is 422; a repeated CompleteMultipartUpload is answered
/// like the first, as S3 does, and another part list is 422.
async fn idempotent_retries(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    let put = |token: u64, key: &'static str, bytes: &'static [u8]| {
        keyed!(
            c.put_object()
                .bucket("default")
                .key("idem")
                .body(ByteStream::from_static(bytes)),
            token,
            key
        )
        .send()
    };
    let first = put(5, "put-1", b"five").await.unwrap();
    with_token!(
        c.put_object()
            .bucket("default")
            .key("idem")
            .body(ByteStream::from_static(b"six")),
        6
    )
    .send()
    .await
    .unwrap();
    let again = put(5, "put-1", b"five").await.unwrap();
    assert_eq!(again.e_tag(), first.e_tag(), "the first answer, replayed");
    assert_eq!(
        body_of(&c, "default", "idem").await,
        b"six",
        "nothing written"
    );
    let (status, code, _) = failure(put(5, "put-1", b"FIVE").await);
    assert_eq!((status, code.as_str()), (422, "IdempotencyKeyMismatch"));
    let (status, code, _) = failure(put(5, "put-2", b"five").await);
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));

    let delete = |token: u64| {
        keyed!(
            c.delete_object().bucket("default").key("idem"),
            token,
            "delete-1"
        )
        .send()
    };
    delete(7).await.unwrap();
    with_token!(
        c.put_object()
            .bucket("default")
            .key("idem")
            .body(ByteStream::from_static(b"eight")),
        8
    )
    .send()
    .await
    .unwrap();
    delete(7).await.unwrap();
    assert_eq!(body_of(&c, "default", "idem").await, b"eight");

    let id = with_token!(c.create_multipart_upload().bucket("default").key("mp"), 3)
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_string();
    let part = with_token!(
        c.upload_part()
            .bucket("default")
            .key("mp")
            .upload_id(&id)
            .part_number(1)
            .body(ByteStream::from_static(b"one part")),
        3
    )
    .send()
    .await
    .unwrap();
    let e1 = part.e_tag().unwrap().to_string();
    let complete = |list: &[(i32, &str)]| {
        c.complete_multipart_upload()
            .bucket("default")
            .key("mp")
            .upload_id(&id)
            .multipart_upload(parts(list))
            .send()
    };
    let done = complete(&[(1, &e1)]).await.unwrap();
    let again = complete(&[(1, &e1)]).await.unwrap();
    assert_eq!(again.e_tag(), done.e_tag());
    let (status, code, _) = failure(complete(&[(2, &e1)]).await);
    assert_eq!((status, code.as_str()), (422, "IdempotencyKeyMismatch"));
    assert_eq!(body_of(&c, "default", "mp").await, b"one part");
}

/// Review round 19, finding 2: a body that does not match its Content-MD5 is refused with
/// BadDigest and leaves nothing; a Content-MD5 that is not an MD5 is InvalidDigest; a matching
/// one passes. PutObject (in memory and spilled to disk on the s3 backend) and UploadPart.
async fn content_md5_is_checked(kind: Kind) {
    use md5::{Digest, Md5};
    let fx = Fx::start(kind).await;
    let c = fx.client();
    let md5_of = |b: &[u8]| aws_smithy_types::base64::encode(Md5::digest(b));
    let big = vec![7u8; 300 * 1024];
    for (key, body) in [("small", b"hello".to_vec()), ("big", big.clone())] {
        let (status, code, _) = failure(
            with_token!(
                c.put_object()
                    .bucket("default")
                    .key(key)
                    .content_md5(md5_of(b"other bytes"))
                    .body(ByteStream::from(body.clone())),
                40
            )
            .send()
            .await,
        );
        assert_eq!((status, code.as_str()), (400, "BadDigest"), "{key}");
        let (status, _, _) = failure(c.head_object().bucket("default").key(key).send().await);
        assert_eq!(status, 404, "{key}: a refused body left an object");
        let (status, code, _) = failure(
            with_token!(
                c.put_object()
                    .bucket("default")
                    .key(key)
                    .content_md5("not-an-md5")
                    .body(ByteStream::from(body.clone())),
                40
            )
            .send()
            .await,
        );
        assert_eq!((status, code.as_str()), (400, "InvalidDigest"), "{key}");
        with_token!(
            c.put_object()
                .bucket("default")
                .key(key)
                .content_md5(md5_of(&body))
                .body(ByteStream::from(body.clone())),
            40
        )
        .send()
        .await
        .unwrap();
        assert_eq!(body_of(&c, "default", key).await, body, "{key}");
    }
    // A part: refused when it does not match, an empty one too (review round 21, finding 2);
    // the upload goes on with a matching one.
    let id = start_upload(&c, "parts", 41).await;
    let (status, code, _) = failure(
        c.upload_part()
            .bucket("default")
            .key("parts")
            .upload_id(&id)
            .part_number(2)
            .content_md5(md5_of(b"x"))
            .body(ByteStream::from_static(b""))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "BadDigest"));
    let part = vec![3u8; 1024];
    let (status, code, _) = failure(
        c.upload_part()
            .bucket("default")
            .key("parts")
            .upload_id(&id)
            .part_number(1)
            .content_md5(md5_of(b"not this part"))
            .body(ByteStream::from(part.clone()))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "BadDigest"));
    let etag = c
        .upload_part()
        .bucket("default")
        .key("parts")
        .upload_id(&id)
        .part_number(1)
        .content_md5(md5_of(&part))
        .body(ByteStream::from(part.clone()))
        .send()
        .await
        .unwrap()
        .e_tag()
        .unwrap()
        .to_string();
    c.complete_multipart_upload()
        .bucket("default")
        .key("parts")
        .upload_id(&id)
        .multipart_upload(parts(&[(1, &etag)]))
        .send()
        .await
        .unwrap();
    assert_eq!(body_of(&c, "default", "parts").await, part);
}

on_both_backends!(
    content_md5_is_checked,
    idempotent_retries,
    holes_are_closed,
    buckets_created_through_s3,
    objects_are_fenced,
    listing_and_buckets,
    multipart_zombie,
    multipart_uploads,
    copy_and_batch_delete,
    open_uploads_are_bounded_and_expire,
);

/// SigV4: an unknown key, a wrong secret, a key without the right, a presigned GET and an
/// expired one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_signatures_and_presigned_urls() {
    use aws_sdk_s3::presigning::PresigningConfig;
    use std::time::{Duration, SystemTime};
    let fx = Fx::start(Kind::Fs).await;
    let c = fx.client();
    with_token!(
        c.put_object()
            .bucket("default")
            .key("k")
            .body(ByteStream::from_static(b"secret data")),
        1
    )
    .send()
    .await
    .unwrap();

    let stranger = fx.client_as("nobody", "whatever");
    let (status, code, _) = failure(
        stranger
            .get_object()
            .bucket("default")
            .key("k")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (403, "InvalidAccessKeyId"));
    let forger = fx.client_as("writer-key", "not-the-secret");
    let (status, code, _) = failure(forger.get_object().bucket("default").key("k").send().await);
    assert_eq!((status, code.as_str()), (403, "SignatureDoesNotMatch"));

    let reader = fx.client_as("reader-key", "reader-secret-0123456");
    assert_eq!(body_of(&reader, "default", "k").await, b"secret data");
    let (status, code, _) = failure(
        with_token!(
            reader
                .put_object()
                .bucket("default")
                .key("k")
                .body(ByteStream::from_static(b"overwritten")),
            2
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (403, "AccessDenied"));
    let (status, code, _) = failure(reader.list_objects_v2().bucket("loose").send().await);
    assert_eq!((status, code.as_str()), (403, "AccessDenied"));
    assert_eq!(body_of(&c, "default", "k").await, b"secret data");

    let http = reqwest::Client::new();
    let url = c
        .get_object()
        .bucket("default")
        .key("k")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).unwrap())
        .await
        .unwrap();
    let resp = http.get(url.uri()).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(&resp.bytes().await.unwrap()[..], b"secret data");

    let expired = c
        .get_object()
        .bucket("default")
        .key("k")
        .presigned(
            PresigningConfig::builder()
                .start_time(SystemTime::now() - Duration::from_secs(3600))
                .expires_in(Duration::from_secs(60))
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    let resp = http.get(expired.uri()).send().await.unwrap();
    assert_eq!(resp.status(), 403);
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("AccessDenied") || text.contains("expired"),
        "{text}"
    );
    // An unsigned request is refused.
    let resp = http.get(fx.s().url("/default/k")).send().await.unwrap();
    assert_eq!(resp.status(), 403);
}

/// Virtual-host-style addressing (`bucket.domain/key`) with `[s3] domain`, through a presigned
/// URL the SDK made for that style.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_host_style() {
    use aws_sdk_s3::presigning::PresigningConfig;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        Some(&format!(
            "[s3]\ndomain = \"s3.test\"\n\n[buckets.default]\n{KEYS}"
        )),
    );
    let path_style =
        common::moto::client_with(&server.url(""), "writer-key", "writer-secret-0123456");
    with_token!(
        path_style
            .put_object()
            .bucket("default")
            .key("vh/key")
            .body(ByteStream::from_static(b"virtual")),
        1
    )
    .send()
    .await
    .unwrap();
    let port = server.addr.port();
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(format!("http://s3.test:{port}"))
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            "writer-key",
            "writer-secret-0123456",
            None,
            None,
            "tests",
        ))
        .build();
    let vh = Client::from_conf(conf);
    let url = vh
        .get_object()
        .bucket("default")
        .key("vh/key")
        .presigned(PresigningConfig::expires_in(std::time::Duration::from_secs(60)).unwrap())
        .await
        .unwrap();
    assert!(
        url.uri().starts_with("http://default.s3.test:"),
        "{}",
        url.uri()
    );
    let http = reqwest::Client::builder()
        .resolve("default.s3.test", server.addr)
        .build()
        .unwrap();
    let resp = http.get(url.uri()).send().await.unwrap();
    let status = resp.status();
    let body = resp.bytes().await.unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(&body[..], b"virtual");
}

/// Review round 6: a ranged GetObject judged its range on one version and read another, which
/// a writer had just shrunk; `last + 1 - first` underflowed and the handler panicked. Readers
/// racing a writer that alternates a long and a short body get 206, 416 or 503, always an
/// answer, and the log shows no panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranged_reads_racing_a_shrinking_object_always_get_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = common::client();
    let url = s.url("/default/shrinking");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (c, url, stop) = (c.clone(), url.clone(), stop.clone());
        tokio::spawn(async move {
            let mut token = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                token += 1;
                let len = if token.is_multiple_of(2) { 100 } else { 10 };
                let resp = c
                    .put(&url)
                    .header("Fencing-Token", token.to_string())
                    .body(vec![b'x'; len])
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200);
            }
        })
    };
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (c, url, stop) = (c.clone(), url.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            let mut partial = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let resp = c
                    .get(&url)
                    .header("Range", "bytes=50-60")
                    .send()
                    .await
                    .expect("an answer, not a dropped connection");
                let status = resp.status().as_u16();
                let body = resp.bytes().await.unwrap();
                match status {
                    206 => {
                        assert_eq!(body.len(), 11);
                        partial += 1;
                    }
                    404 | 416 | 503 => {}
                    other => panic!("unexpected {other}"),
                }
            }
            partial
        }));
    }
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    let mut partial = 0;
    for r in readers {
        partial += r.await.unwrap();
    }
    assert!(partial > 0, "some reads found the long body");
    assert!(s.log_lines(&["panicked"]).is_empty());
}
