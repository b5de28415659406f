//! Object tags kept on both backends (docs/s3.md): set by `x-amz-tagging` on PutObject,
//! CreateMultipartUpload and CopyObject (per its tagging directive), read by GetObjectTagging
//! and GetObject's tag count, changed by PutObjectTagging and DeleteObjectTagging as fenced
//! writes of the same bytes; S3's limits refused with `InvalidTag` and nothing changed.

use super::fixture::{refused, Fx, Kind, PART};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Tag, Tagging, TaggingDirective};
use aws_sdk_s3::Client;

async fn tags_of(c: &Client, bucket: &str, key: &str) -> Vec<(String, String)> {
    let out = c
        .get_object_tagging()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap();
    out.tag_set()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn tagging(list: &[(&str, &str)]) -> Tagging {
    let tags = list
        .iter()
        .map(|(k, v)| Tag::builder().key(*k).value(*v).build().unwrap())
        .collect();
    Tagging::builder().set_tag_set(Some(tags)).build().unwrap()
}

macro_rules! with_token {
    ($builder:expr, $token:expr) => {{
        let token: String = $token.to_string();
        $builder.customize().mutate_request(move |req| {
            req.headers_mut().insert("fencing-token", token.clone());
        })
    }};
}

async fn kept_on(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    let put = c
        .put_object()
        .bucket("bkt")
        .key("t")
        .tagging("project=fence&stage=one two")
        .body(ByteStream::from_static(b"tagged body"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        tags_of(&c, "bkt", "t").await,
        pairs(&[("project", "fence"), ("stage", "one two")]),
        "{kind:?}"
    );
    let got = c.get_object().bucket("bkt").key("t").send().await.unwrap();
    assert_eq!(got.tag_count(), Some(2));

    // Replaced, then deleted: the bytes and the ETag stay.
    c.put_object_tagging()
        .bucket("bkt")
        .key("t")
        .tagging(tagging(&[("owner", "ops")]))
        .send()
        .await
        .unwrap();
    assert_eq!(tags_of(&c, "bkt", "t").await, pairs(&[("owner", "ops")]));
    c.delete_object_tagging()
        .bucket("bkt")
        .key("t")
        .send()
        .await
        .unwrap();
    assert!(tags_of(&c, "bkt", "t").await.is_empty());
    let got = c.get_object().bucket("bkt").key("t").send().await.unwrap();
    assert_eq!(got.e_tag(), put.e_tag());
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        b"tagged body"
    );

    // Copies keep the source's tags, or take the request's with REPLACE.
    c.put_object_tagging()
        .bucket("bkt")
        .key("t")
        .tagging(tagging(&[("a", "1")]))
        .send()
        .await
        .unwrap();
    c.copy_object()
        .bucket("bkt")
        .key("kept")
        .copy_source("bkt/t")
        .send()
        .await
        .unwrap();
    assert_eq!(tags_of(&c, "bkt", "kept").await, pairs(&[("a", "1")]));
    c.copy_object()
        .bucket("bkt")
        .key("replaced")
        .copy_source("bkt/t")
        .tagging_directive(TaggingDirective::Replace)
        .tagging("b=2")
        .send()
        .await
        .unwrap();
    assert_eq!(tags_of(&c, "bkt", "replaced").await, pairs(&[("b", "2")]));
    let (status, code, _, _) = refused(
        c.copy_object()
            .bucket("bkt")
            .key("ignored")
            .copy_source("bkt/t")
            .tagging("c=3")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "InvalidRequest"));

    // A multipart upload's tags are the object's.
    let id = c
        .create_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .tagging("joined=yes")
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_string();
    let mut parts = Vec::new();
    for (n, body) in [(1, vec![1u8; PART]), (2, vec![2u8; 10])] {
        let out = c
            .upload_part()
            .bucket("bkt")
            .key("mp")
            .upload_id(&id)
            .part_number(n)
            .body(ByteStream::from(body))
            .send()
            .await
            .unwrap();
        parts.push(
            CompletedPart::builder()
                .part_number(n)
                .e_tag(out.e_tag().unwrap())
                .build(),
        );
    }
    let complete = || {
        c.complete_multipart_upload()
            .bucket("bkt")
            .key("mp")
            .upload_id(&id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts.clone()))
                    .build(),
            )
    };
    // What the object is was fixed at the upload's creation: never dropped at its completion.
    for (name, value) in [
        ("x-amz-tagging", "late=1"),
        ("x-amz-storage-class", "GLACIER"),
    ] {
        let (status, _, _, _) = refused(
            complete()
                .customize()
                .mutate_request(move |r| {
                    r.headers_mut().insert(name, value);
                })
                .send()
                .await,
        );
        assert_eq!(status, 400, "{name} on the completion");
    }
    complete().send().await.unwrap();
    assert_eq!(tags_of(&c, "bkt", "mp").await, pairs(&[("joined", "yes")]));

    // S3's limits, refused with nothing written or changed.
    let eleven: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
    for bad in [
        eleven.join("&"),
        "aws:x=1".into(),
        "AWS:x=1".into(),
        "a=1&a=2".into(),
        "a=<b>".into(),
        // Control characters read back otherwise, or not at all, from some stores.
        "a=b%09c".into(),
        "a=b%0Bc".into(),
        "a=b%0Dc".into(),
    ] {
        let (status, code, _, _) = refused(
            c.put_object()
                .bucket("bkt")
                .key("bad")
                .tagging(bad.clone())
                .body(ByteStream::from_static(b"x"))
                .send()
                .await,
        );
        assert_eq!((status, code.as_str()), (400, "InvalidTag"), "{bad}");
    }
    assert!(c
        .head_object()
        .bucket("bkt")
        .key("bad")
        .send()
        .await
        .is_err());
    let (status, code, _, _) = refused(
        c.put_object_tagging()
            .bucket("bkt")
            .key("t")
            .tagging(tagging(&[("aws:owner", "x")]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "InvalidTag"));
    assert_eq!(tags_of(&c, "bkt", "t").await, pairs(&[("a", "1")]));
    // Metadata cannot pass for tags.
    c.put_object()
        .bucket("bkt")
        .key("forged")
        .metadata("fencegate-tags", "x=1")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    assert!(tags_of(&c, "bkt", "forged").await.is_empty());
}

/// A tag change is a write: fenced by the request's token like any other.
async fn fenced_on(kind: Kind) {
    let fx = Fx::start_with(kind, &[("req", "")]).await;
    let c = fx.client();
    with_token!(
        c.put_object()
            .bucket("req")
            .key("f")
            .body(ByteStream::from_static(b"v")),
        5
    )
    .send()
    .await
    .unwrap();
    let (status, code, _, _) = refused(
        c.put_object_tagging()
            .bucket("req")
            .key("f")
            .tagging(tagging(&[("x", "1")]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (428, "FencingTokenRequired"));
    let (status, code, _, _) = refused(
        with_token!(
            c.put_object_tagging()
                .bucket("req")
                .key("f")
                .tagging(tagging(&[("x", "1")])),
            4
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));
    assert!(tags_of(&c, "req", "f").await.is_empty());
    // A change that changes nothing (the object has no tags to delete, or has these) is
    // judged all the same: a stale writer hears it is stale, not a success.
    let (status, code, _, _) = refused(
        with_token!(c.delete_object_tagging().bucket("req").key("f"), 4)
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));
    let (status, code, _, _) = refused(
        with_token!(
            c.put_object_tagging()
                .bucket("req")
                .key("f")
                .tagging(tagging(&[])),
            4
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));
    with_token!(c.delete_object_tagging().bucket("req").key("f"), 5)
        .send()
        .await
        .unwrap();
    with_token!(
        c.put_object_tagging()
            .bucket("req")
            .key("f")
            .tagging(tagging(&[("x", "1")])),
        6
    )
    .send()
    .await
    .unwrap();
    assert_eq!(tags_of(&c, "req", "f").await, pairs(&[("x", "1")]));
    // A change to the tags the object has is still an acknowledged write: its higher token is
    // recorded, and a write below it is refused after, as after any other.
    with_token!(
        c.put_object_tagging()
            .bucket("req")
            .key("f")
            .tagging(tagging(&[("x", "1")])),
        8
    )
    .send()
    .await
    .unwrap();
    let (status, code, _, _) = refused(
        with_token!(
            c.put_object()
                .bucket("req")
                .key("f")
                .body(ByteStream::from_static(b"late")),
            7
        )
        .send()
        .await,
    );
    assert_eq!((status, code.as_str()), (409, "StaleFencingToken"));
    assert_eq!(tags_of(&c, "req", "f").await, pairs(&[("x", "1")]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_are_kept_on_fs() {
    kept_on(Kind::Fs).await;
    fenced_on(Kind::Fs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_are_kept_on_s3() {
    kept_on(Kind::S3Safe).await;
    fenced_on(Kind::S3Safe).await;
}
