//! What S3 users meet in their first week, on both backends through aws-sdk-s3: listings that
//! never repeat a page's last common prefix, errors that are all typed XML with their
//! RequestId, bucket probes answered as an unconfigured AWS bucket answers them, CreateBucket
//! as an idempotent ensure step, a large single PUT answering its body's MD5, and headers as
//! AWS sends them.

use super::fixture::{on_both_backends, put, refused, Fx, Kind, PART};
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use futures::StreamExt;
use md5::{Digest, Md5};

const KEYS: [&str; 5] = ["asdf", "boo/bar", "boo/baz/xyzzy", "cquux/a", "cquux/b"];

/// Every page of a v2 listing with delimiter `/`, `max` a page: (keys and prefixes, truncated).
async fn v2_pages(c: &Client, max: i32) -> Vec<(Vec<String>, bool)> {
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let r = c
            .list_objects_v2()
            .bucket("bkt")
            .delimiter("/")
            .max_keys(max)
            .set_continuation_token(token.clone())
            .send()
            .await
            .unwrap();
        let mut entries: Vec<String> = r
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_string))
            .collect();
        entries.extend(
            r.common_prefixes()
                .iter()
                .filter_map(|p| p.prefix().map(str::to_string)),
        );
        let truncated = r.is_truncated() == Some(true);
        pages.push((entries, truncated));
        token = r.next_continuation_token().map(str::to_string);
        if !truncated || pages.len() > 10 {
            return pages;
        }
    }
}

/// A page that ends on a common prefix resumes after every key under it (v1, v2 and
/// ListObjectVersions), and only the last page is not truncated.
async fn paged_listings_never_repeat(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    for key in KEYS {
        put(&c, "bkt", key, b"1").await;
    }
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        v2_pages(&c, 2).await,
        [
            (owned(&["asdf", "boo/"]), true),
            (owned(&["cquux/"]), false)
        ]
    );
    assert_eq!(
        v2_pages(&c, 1).await,
        [
            (owned(&["asdf"]), true),
            (owned(&["boo/"]), true),
            (owned(&["cquux/"]), false)
        ]
    );
    let v1 = c
        .list_objects()
        .bucket("bkt")
        .delimiter("/")
        .max_keys(2)
        .send()
        .await
        .unwrap();
    assert_eq!(v1.next_marker(), Some("boo/"));
    let v1 = c
        .list_objects()
        .bucket("bkt")
        .delimiter("/")
        .max_keys(2)
        .marker("boo/")
        .send()
        .await
        .unwrap();
    let prefixes: Vec<&str> = v1
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix())
        .collect();
    assert_eq!(prefixes, ["cquux/"]);
    assert!(v1.contents().is_empty());
    assert_eq!(v1.is_truncated(), Some(false));
    // ListObjectVersions of an unversioned bucket: the current objects, VersionId null.
    let versions = c
        .list_object_versions()
        .bucket("bkt")
        .delimiter("/")
        .max_keys(1)
        .send()
        .await
        .unwrap();
    let listed: Vec<(&str, &str, bool)> = versions
        .versions()
        .iter()
        .map(|v| {
            (
                v.key().unwrap(),
                v.version_id().unwrap(),
                v.is_latest().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, [("asdf", "null", true)]);
    assert_eq!(versions.next_key_marker(), Some("asdf"));
    let rest = c
        .list_object_versions()
        .bucket("bkt")
        .key_marker("asdf")
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = rest.versions().iter().filter_map(|v| v.key()).collect();
    assert_eq!(keys, &KEYS[1..]);
    assert_eq!(rest.is_truncated(), Some(false));
}

/// Every refusal of the S3 surface is `application/xml` with a `<Code>` and the `<RequestId>`
/// of its `x-amz-request-id` header, whichever layer made it.
async fn every_error_is_typed_xml_with_its_request_id(kind: Kind) {
    let fx = Fx::start_with(kind, &[("req", "")]).await;
    let c = fx.client();
    let token = |t: &str| t.to_string();
    c.put_object()
        .bucket("req")
        .key("k")
        .metadata("fencing-token", token("5"))
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    let put_with = |t: Option<&str>| {
        let c = c.clone();
        let t = t.map(str::to_string);
        async move {
            c.put_object()
                .bucket("req")
                .key("k")
                .set_metadata(t.map(|t| [("fencing-token".to_string(), t)].into()))
                .body(ByteStream::from_static(b"y"))
                .send()
                .await
        }
    };
    let wrong_secret = common_client(&fx, "fencegate", "not-the-secret");
    let unknown_key = common_client(&fx, "nobody", "x");
    let mut seen = Vec::new();
    let mut check = |(status, code, id, body): (u16, String, String, String), want: (u16, &str)| {
        assert_eq!((status, code.as_str()), want, "{body}");
        assert!(!id.is_empty(), "{code}: no x-amz-request-id");
        assert!(
            body.contains(&format!("<Code>{code}</Code>"))
                && body.contains(&format!("<RequestId>{id}</RequestId>")),
            "{code}: {body}"
        );
        seen.push(code);
    };
    check(
        refused(put_with(Some("3")).await),
        (409, "StaleFencingToken"),
    );
    check(refused(put_with(None).await), (428, "FencingTokenRequired"));
    check(
        refused(put_with(Some("0x5")).await),
        (400, "InvalidFencingToken"),
    );
    check(
        refused(c.get_object().bucket("req").key("absent").send().await),
        (404, "NoSuchKey"),
    );
    check(
        refused(c.get_object().bucket("nope").key("k").send().await),
        (404, "NoSuchBucket"),
    );
    check(
        refused(
            c.put_object()
                .bucket("bkt")
                .key("k")
                .if_match("\"0123\"")
                .body(ByteStream::from_static(b"z"))
                .send()
                .await,
        ),
        (404, "NoSuchKey"),
    );
    put(&c, "bkt", "k", b"z").await;
    check(
        refused(
            c.put_object()
                .bucket("bkt")
                .key("k")
                .if_match("\"0123\"")
                .body(ByteStream::from_static(b"z"))
                .send()
                .await,
        ),
        (412, "PreconditionFailed"),
    );
    check(
        refused(
            wrong_secret
                .get_object()
                .bucket("bkt")
                .key("k")
                .send()
                .await,
        ),
        (403, "SignatureDoesNotMatch"),
    );
    check(
        refused(unknown_key.get_object().bucket("bkt").key("k").send().await),
        (403, "InvalidAccessKeyId"),
    );
    check(
        refused(c.list_objects_v2().bucket("bkt").max_keys(-1).send().await),
        (400, "InvalidArgument"),
    );
    check(
        refused(c.get_bucket_cors().bucket("bkt").send().await),
        (404, "NoSuchCORSConfiguration"),
    );
    check(
        refused(
            c.put_bucket_versioning()
                .bucket("bkt")
                .versioning_configuration(
                    aws_sdk_s3::types::VersioningConfiguration::builder()
                        .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                        .build(),
                )
                .send()
                .await,
        ),
        (501, "NotImplemented"),
    );
    check(
        refused(
            c.upload_part()
                .bucket("bkt")
                .key("k")
                .upload_id("no-such-upload")
                .part_number(1)
                .body(ByteStream::from_static(b"p"))
                .send()
                .await,
        ),
        (404, "NoSuchUpload"),
    );
    check(
        refused(c.create_bucket().bucket("Not_A_Bucket").send().await),
        (400, "InvalidBucketName"),
    );
    // Refusals made before s3s reads the request, on raw HTTP.
    let http = reqwest::Client::new();
    for (url, method, want) in [
        (fx.server.url("/bkt/a%FFb"), reqwest::Method::GET, (400, "InvalidURI")),
        (
            fx.server.url("/bkt/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=fencegate%2F20261203%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261203T000000Z&X-Amz-Expires=-5&X-Amz-SignedHeaders=host&X-Amz-Signature=00"),
            reqwest::Method::GET,
            (403, "AccessDenied"),
        ),
        (fx.server.url("/bkt?restore"), reqwest::Method::POST, (501, "NotImplemented")),
    ] {
        let resp = http.request(method, &url).send().await.unwrap();
        let status = resp.status().as_u16();
        let typed = resp.headers()["content-type"].to_str().unwrap().to_string();
        let id = resp.headers()["x-amz-request-id"].to_str().unwrap().to_string();
        let body = resp.text().await.unwrap();
        assert_eq!(typed, "application/xml", "{url}");
        let code = body
            .split("<Code>")
            .nth(1)
            .and_then(|b| b.split("</Code>").next())
            .unwrap_or_default()
            .to_string();
        check((status, code, id, body), want);
    }
    assert!(seen.len() >= 17, "{seen:?}");
}

fn common_client(fx: &Fx, id: &str, secret: &str) -> Client {
    crate::common::moto::client_with(&fx.server.url(""), id, secret)
}

/// What tools read when they open a bucket answers as on an AWS bucket with nothing
/// configured; deleting a configuration is a no-op; setting one is 501, saying so.
async fn bucket_probes_answer_as_unconfigured_aws(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    let versioning = c
        .get_bucket_versioning()
        .bucket("bkt")
        .send()
        .await
        .unwrap();
    assert_eq!(versioning.status(), None);
    let acl = c.get_bucket_acl().bucket("bkt").send().await.unwrap();
    assert_eq!(acl.owner().and_then(|o| o.id()), Some("fencegate"));
    assert_eq!(
        acl.grants()[0].permission(),
        Some(&aws_sdk_s3::types::Permission::FullControl)
    );
    // An object's ACL, as s3cmd reads on every cp and info: the owner's FULL_CONTROL; a
    // missing key 404; a version id other than "null" 400; setting one 501, saying so.
    put(&c, "bkt", "acl-me", b"x").await;
    let acl = c
        .get_object_acl()
        .bucket("bkt")
        .key("acl-me")
        .send()
        .await
        .unwrap();
    assert_eq!(
        acl.grants()[0].permission(),
        Some(&aws_sdk_s3::types::Permission::FullControl)
    );
    let (status, code, _, _) = refused(c.get_object_acl().bucket("bkt").key("nope").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));
    let (status, code, _, _) = refused(
        c.get_object_acl()
            .bucket("bkt")
            .key("acl-me")
            .version_id("bogus")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "InvalidArgument"));
    let (status, code, _, body) = refused(
        c.put_object_acl()
            .bucket("bkt")
            .key("acl-me")
            .acl(aws_sdk_s3::types::ObjectCannedAcl::Private)
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (501, "NotImplemented"), "{body}");
    assert!(body.contains("owner&apos;s FULL_CONTROL"), "{body}");
    let payment = c
        .get_bucket_request_payment()
        .bucket("bkt")
        .send()
        .await
        .unwrap();
    assert_eq!(
        payment.payer(),
        Some(&aws_sdk_s3::types::Payer::BucketOwner)
    );
    assert!(c
        .get_bucket_logging()
        .bucket("bkt")
        .send()
        .await
        .unwrap()
        .logging_enabled()
        .is_none());
    assert!(c
        .get_bucket_accelerate_configuration()
        .bucket("bkt")
        .send()
        .await
        .unwrap()
        .status()
        .is_none());
    macro_rules! missing {
        ($($call:ident => $code:literal),* $(,)?) => {$(
            let (status, code, _, body) = refused(c.$call().bucket("bkt").send().await);
            assert_eq!((status, code.as_str()), (404, $code), "{}: {body}", stringify!($call));
        )*};
    }
    missing!(
        get_bucket_cors => "NoSuchCORSConfiguration",
        get_bucket_lifecycle_configuration => "NoSuchLifecycleConfiguration",
        get_bucket_policy => "NoSuchBucketPolicy",
        get_bucket_policy_status => "NoSuchBucketPolicy",
        get_bucket_tagging => "NoSuchTagSet",
        get_bucket_website => "NoSuchWebsiteConfiguration",
        get_bucket_replication => "ReplicationConfigurationNotFoundError",
        get_bucket_encryption => "ServerSideEncryptionConfigurationNotFoundError",
        get_object_lock_configuration => "ObjectLockConfigurationNotFoundError",
        get_bucket_ownership_controls => "OwnershipControlsNotFoundError",
        get_public_access_block => "NoSuchPublicAccessBlockConfiguration",
    );
    c.delete_bucket_cors().bucket("bkt").send().await.unwrap();
    c.delete_bucket_policy().bucket("bkt").send().await.unwrap();
    c.delete_bucket_tagging()
        .bucket("bkt")
        .send()
        .await
        .unwrap();
    let (status, code, _, body) = refused(
        c.put_bucket_tagging()
            .bucket("bkt")
            .tagging(
                aws_sdk_s3::types::Tagging::builder()
                    .set_tag_set(Some(vec![]))
                    .build()
                    .unwrap(),
            )
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (501, "NotImplemented"));
    assert!(body.contains("PutBucketTagging is not supported"), "{body}");
    // A bucket that does not exist is 404 NoSuchBucket first, as on AWS.
    let (status, code, _, _) = refused(c.get_bucket_versioning().bucket("nope").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchBucket"));
    let (status, code, _, _) = refused(c.get_bucket_cors().bucket("nope").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchBucket"));
}

/// A body over the multipart threshold, written in one PutObject, answers the MD5 of its bytes
/// on PUT, HEAD, GET and LIST (the s3 backend stores it as a multipart upload of its own), and
/// a condition on that ETag holds.
async fn a_large_single_put_answers_its_md5(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    let body: Vec<u8> = (0..2 * PART + 10).map(|i| (i % 251) as u8).collect();
    let md5 = format!("\"{}\"", hex::encode(Md5::digest(&body)));
    assert_eq!(put(&c, "bkt", "big", &body).await, md5);
    let head = c
        .head_object()
        .bucket("bkt")
        .key("big")
        .send()
        .await
        .unwrap();
    assert_eq!(head.e_tag(), Some(md5.as_str()));
    let get = c
        .get_object()
        .bucket("bkt")
        .key("big")
        .send()
        .await
        .unwrap();
    assert_eq!(get.e_tag(), Some(md5.as_str()));
    assert_eq!(
        get.body.collect().await.unwrap().into_bytes().len(),
        body.len()
    );
    let listed = c.list_objects_v2().bucket("bkt").send().await.unwrap();
    assert_eq!(listed.contents()[0].e_tag(), Some(md5.as_str()));
    // The ETag a client was answered is the one its conditions are judged by.
    c.put_object()
        .bucket("bkt")
        .key("big")
        .if_match(&md5)
        .body(ByteStream::from_static(b"small"))
        .send()
        .await
        .unwrap();
    let small = c
        .head_object()
        .bucket("bkt")
        .key("big")
        .send()
        .await
        .unwrap();
    assert_eq!(
        small.e_tag().map(str::to_string),
        Some(format!("\"{}\"", hex::encode(Md5::digest(b"small"))))
    );
}

/// CreateBucket of a bucket one owns, in us-east-1, is 200 (AWS keeps it so there for
/// compatibility): an idempotent "ensure the bucket" works, and nothing about the bucket
/// changes, its fences least of all.
async fn create_bucket_ensures_an_owned_bucket(kind: Kind) {
    let fx = Fx::start_with(kind, &[("req", "")]).await;
    let c = fx.client();
    c.put_object()
        .bucket("req")
        .key("k")
        .metadata("fencing-token", "9")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    for bucket in ["bkt", "req"] {
        c.create_bucket().bucket(bucket).send().await.unwrap();
    }
    let e = c
        .put_object()
        .bucket("req")
        .key("k")
        .metadata("fencing-token", "8")
        .body(ByteStream::from_static(b"stale"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("StaleFencingToken"));
    assert!(c.head_object().bucket("req").key("k").send().await.is_ok());
}

/// Outside us-east-1, CreateBucket of an owned bucket is 409 `BucketAlreadyOwnedByYou`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_bucket_elsewhere_is_already_owned() {
    let dir = tempfile::tempdir().unwrap();
    let server = crate::common::Server::start(
        &dir.path().join("data"),
        Some("[s3]\nregion = \"eu-west-1\"\n\n[buckets.bkt]\n"),
    );
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("eu-west-1"))
        .endpoint_url(server.url(""))
        .force_path_style(true)
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            "fencegate",
            "fencegate-dev-secret",
            None,
            None,
            "tests",
        ))
        .build();
    let c = Client::from_conf(conf);
    let (status, code, _, _) = refused(c.create_bucket().bucket("bkt").send().await);
    assert_eq!((status, code.as_str()), (409, "BucketAlreadyOwnedByYou"));
}

/// Headers as AWS answers them: `binary/octet-stream` for an object stored without a type, and
/// Content-Encoding byte for byte as sent.
async fn headers_as_aws_sends_them(kind: Kind) {
    let fx = Fx::start(kind).await;
    let http = reqwest::Client::new();
    // Development mode: an unsigned request is the development key's.
    let resp = http
        .put(fx.server.url("/bkt/untyped"))
        .header("content-encoding", "deflate, gzip")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let c = fx.client();
    let head = c
        .head_object()
        .bucket("bkt")
        .key("untyped")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_type(), Some("binary/octet-stream"));
    assert_eq!(head.content_encoding(), Some("deflate, gzip"));
}

/// A chunked PutObject without a Content-Length (curl -T -, a generator body) is taken, bounded
/// by the object size limit, and answers its MD5; a stale one is refused before its body is
/// read: it is answered while its body still waits for bytes that never come.
async fn a_chunked_put_without_a_length_is_taken(kind: Kind) {
    use crate::common::sign::{sign_at, BodyHash, Creds};
    let fx = Fx::start_with(kind, &[("req", "")]).await;
    let http = reqwest::Client::new();
    let creds = Creds {
        key: "fencegate",
        secret: "fencegate-dev-secret",
    };
    let body: Vec<u8> = (0..2 * PART + 7).map(|i| (i % 253) as u8).collect();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        body.chunks(1 << 20).map(|c| Ok(c.to_vec())).collect();
    let mut req = http
        .put(fx.server.url("/req/streamed"))
        .header("x-amz-meta-fencing-token", "5")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .build()
        .unwrap();
    sign_at(
        &mut req,
        creds,
        std::time::SystemTime::now(),
        BodyHash::Header,
    );
    assert!(req.headers().get("content-length").is_none());
    let resp = http.execute(req).await.unwrap();
    let status = resp.status().as_u16();
    let etag = resp
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_string());
    assert_eq!(status, 200, "{}", resp.text().await.unwrap());
    let md5 = format!("\"{}\"", hex::encode(Md5::digest(&body)));
    assert_eq!(etag.as_deref(), Some(md5.as_str()));
    let c = fx.client();
    let head = c
        .head_object()
        .bucket("req")
        .key("streamed")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(body.len() as i64));
    // Stale: one chunk, then a body that never goes on.
    let never = futures::stream::once(async { Ok::<_, std::io::Error>(vec![1u8; 1024]) })
        .chain(futures::stream::pending());
    let mut req = http
        .put(fx.server.url("/req/streamed"))
        .header("x-amz-meta-fencing-token", "4")
        .body(reqwest::Body::wrap_stream(never))
        .build()
        .unwrap();
    sign_at(
        &mut req,
        creds,
        std::time::SystemTime::now(),
        BodyHash::Header,
    );
    let resp = tokio::time::timeout(std::time::Duration::from_secs(10), http.execute(req))
        .await
        .expect("refused without waiting for the body")
        .unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    assert!(resp.text().await.unwrap().contains("StaleFencingToken"));
}

/// A SigV4 request whose query names a SigV2 parameter is judged by what its SigV4 signature
/// covers, never by SigV2's rule: an `x-amz-meta-fencing-token` its signer never signed is
/// refused, and the 7-day limit holds (adversarial review of issue 31, F1 and F2).
async fn sigv2_parameters_never_loosen_a_sigv4_signature(kind: Kind) {
    use crate::common::sign::{presign_method, Creds};
    let fx = Fx::start_with(kind, &[("req", "")]).await;
    let creds = Creds {
        key: "fencegate",
        secret: "fencegate-dev-secret",
    };
    let http = reqwest::Client::new();
    for query in ["?AWSAccessKeyId=", "?awsaccesskeyid"] {
        let url = presign_method(
            "PUT",
            &fx.server.url(&format!("/req/k{query}")),
            creds,
            std::time::Duration::from_secs(60),
        );
        let resp = http
            .put(&url)
            .header("x-amz-meta-fencing-token", "999")
            .body("bearer's")
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status().as_u16(),
            403,
            "{query}: {}",
            resp.text().await.unwrap()
        );
        let long = presign_method(
            "GET",
            &fx.server.url(&format!("/req/k{query}")),
            creds,
            std::time::Duration::from_secs(10 * 365 * 24 * 3600),
        );
        assert_eq!(http.get(&long).send().await.unwrap().status().as_u16(), 403);
    }
    // A presigned PUT is not its bearer's to turn into a CopyObject (run with the signer's
    // rights) by an x-amz-copy-source it did not sign (adversarial review of issue 31).
    let c = fx.client();
    put(&c, "bkt", "private", b"the signer's").await;
    let url = presign_method(
        "PUT",
        &fx.server.url("/bkt/slot"),
        creds,
        std::time::Duration::from_secs(60),
    );
    let resp = http
        .put(&url)
        .header("x-amz-copy-source", "bkt/private")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        403,
        "{}",
        resp.text().await.unwrap()
    );
    assert!(c
        .head_object()
        .bucket("bkt")
        .key("slot")
        .send()
        .await
        .is_err());
    assert!(c.head_object().bucket("req").key("k").send().await.is_err());
    let fence: serde_json::Value = http
        .get(fx.server.url("/v1/fences/req/k"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(fence["highest"].is_null(), "{fence}");
}

/// What AWS refuses is refused: a LocationConstraint for another region, an encoding other
/// than `url`, a version id other than `null` on an unversioned bucket, a version-id marker
/// without a key marker (adversarial review of issue 31, F4 and F6).
async fn requests_aws_refuses_are_refused(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    put(&c, "bkt", "k", b"1").await;
    let (status, code, _, _) = refused(
        c.create_bucket()
            .bucket("bkt")
            .create_bucket_configuration(
                aws_sdk_s3::types::CreateBucketConfiguration::builder()
                    .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::EuWest1)
                    .build(),
            )
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (400, "IllegalLocationConstraintException")
    );
    let http = reqwest::Client::new();
    for path in [
        "/bkt?list-type=2&encoding-type=xml",
        "/bkt?encoding-type=xml",
        "/bkt/k?versionId=xyz",
        "/bkt?versions&version-id-marker=null",
    ] {
        let resp = http.get(fx.server.url(path)).send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap();
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            body.contains("<Code>InvalidArgument</Code>"),
            "{path}: {body}"
        );
    }
    let resp = http
        .get(fx.server.url("/bkt/k?versionId=null"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

on_both_backends!(
    paged_listings_never_repeat,
    every_error_is_typed_xml_with_its_request_id,
    bucket_probes_answer_as_unconfigured_aws,
    a_large_single_put_answers_its_md5,
    create_bucket_ensures_an_owned_bucket,
    headers_as_aws_sends_them,
    a_chunked_put_without_a_length_is_taken,
    sigv2_parameters_never_loosen_a_sigv4_signature,
    requests_aws_refuses_are_refused,
);
