//! A cluster is one S3 endpoint (docs/cluster.md): a client that sends each request to
//! another instance sees what it would see on one instance. Multipart uploads, buckets created
//! through the S3 API and the S3 credentials issued with a lease are shared through etcd, and
//! an instance killed between two requests loses none of them. Real aws-sdk-s3 clients, one
//! per instance, used in turn.

use super::SERIAL;
use crate::common;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use common::cluster::Cluster;
use common::{client, get_bytes};
use std::time::Duration;

/// One SDK client per instance (development mode: the development key signs).
fn clients(cluster: &Cluster, n: usize) -> Vec<aws_sdk_s3::Client> {
    (1..=n)
        .map(|i| {
            common::moto::client_with(&cluster.url(i, ""), "fencegate", "fencegate-dev-secret")
        })
        .collect()
}

/// A signed `Fencing-Token` header on an SDK request (for deletes and aborts, which carry no
/// metadata).
fn token_header(
    t: &'static str,
) -> impl Fn(&mut aws_sdk_s3::config::http::HttpRequest) + Send + Sync + 'static {
    move |r| {
        r.headers_mut().insert("fencing-token", t);
    }
}

fn code<E: aws_sdk_s3::error::ProvideErrorMetadata>(e: &aws_sdk_s3::error::SdkError<E>) -> String {
    e.as_service_error()
        .and_then(|s| s.code())
        .unwrap_or("(no code)")
        .to_string()
}

/// Every step of an upload on another instance, one instance killed (-9) between two parts,
/// a part after an abort refused through another instance, and a completion on the third
/// refused once a newer token was written through the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_of_an_upload_is_served_by_any_instance() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(3, "ministack");
    let s3 = clients(&cluster, 3);
    let big = vec![b'a'; 5 * 1024 * 1024];
    let created = s3[0]
        .create_multipart_upload()
        .bucket("default")
        .key("mpu")
        .metadata("fencing-token", "7")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", cluster.logs()));
    let id = created.upload_id().unwrap().to_string();
    let part = |i: usize, n: i32, body: Vec<u8>| {
        s3[i]
            .upload_part()
            .bucket("default")
            .key("mpu")
            .upload_id(&id)
            .part_number(n)
            .body(ByteStream::from(body))
            .send()
    };
    let p1 = part(1, 1, big.clone()).await.expect("part 1 on instance 2");
    // Instance 2 dies with its part acknowledged: the upload does not die with it.
    cluster.signal("fg2", "KILL");
    let p2 = part(2, 2, big.clone()).await.expect("part 2 on instance 3");
    let listed = s3[0]
        .list_parts()
        .bucket("default")
        .key("mpu")
        .upload_id(&id)
        .send()
        .await
        .expect("ListParts on instance 1");
    let numbers: Vec<i32> = listed
        .parts()
        .iter()
        .filter_map(|p| p.part_number())
        .collect();
    assert_eq!(numbers, [1, 2], "both parts, whichever instance took them");
    let p3 = part(0, 3, b"tail".to_vec())
        .await
        .expect("part 3 on instance 1");
    let uploads = s3[2]
        .list_multipart_uploads()
        .bucket("default")
        .send()
        .await
        .unwrap();
    assert_eq!(uploads.uploads().len(), 1, "{uploads:?}");
    let done = CompletedMultipartUpload::builder()
        .set_parts(Some(
            [p1.e_tag(), p2.e_tag(), p3.e_tag()]
                .iter()
                .enumerate()
                .map(|(i, etag)| {
                    CompletedPart::builder()
                        .part_number(i as i32 + 1)
                        .e_tag(etag.unwrap())
                        .build()
                })
                .collect(),
        ))
        .build();
    s3[2]
        .complete_multipart_upload()
        .bucket("default")
        .key("mpu")
        .upload_id(&id)
        .multipart_upload(done.clone())
        .send()
        .await
        .unwrap_or_else(|e| panic!("completion on instance 3: {e:?}\n{}", cluster.logs()));
    let c = client();
    let (_, bytes) = get_bytes(&c, &cluster.object(1, "mpu")).await;
    assert_eq!(bytes.len(), 2 * big.len() + 4);
    assert!(bytes.ends_with(b"tail"));
    // Completed again through another instance: the first answer, not NoSuchUpload.
    s3[0]
        .complete_multipart_upload()
        .bucket("default")
        .key("mpu")
        .upload_id(&id)
        .multipart_upload(done)
        .send()
        .await
        .expect("a repeated completion is answered as the first");
    let left = s3[0]
        .list_multipart_uploads()
        .bucket("default")
        .send()
        .await
        .unwrap();
    assert!(left.uploads().is_empty(), "{left:?}");

    // Aborted through instance 3: a part sent to instance 1 then is refused.
    let id = s3[0]
        .create_multipart_upload()
        .bucket("default")
        .key("aborted")
        .metadata("fencing-token", "9")
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_string();
    s3[2]
        .abort_multipart_upload()
        .bucket("default")
        .key("aborted")
        .upload_id(&id)
        .customize()
        .mutate_request(token_header("9"))
        .send()
        .await
        .expect("abort on instance 3");
    let late = s3[0]
        .upload_part()
        .bucket("default")
        .key("aborted")
        .upload_id(&id)
        .part_number(1)
        .body(ByteStream::from_static(b"late"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&late), "NoSuchUpload");

    // Fenced across instances: token 7's upload, token 8 written through instance 1, the
    // completion through instance 3 is refused and nothing of the upload lands.
    let id = s3[0]
        .create_multipart_upload()
        .bucket("default")
        .key("fenced")
        .metadata("fencing-token", "7")
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_string();
    let p = s3[2]
        .upload_part()
        .bucket("default")
        .key("fenced")
        .upload_id(&id)
        .part_number(1)
        .body(ByteStream::from_static(b"old holder"))
        .send()
        .await
        .unwrap();
    let (status, _) = common::put(&c, &cluster.object(1, "fenced"), Some("8"), b"new holder").await;
    assert_eq!(status, 200);
    let refused = s3[2]
        .complete_multipart_upload()
        .bucket("default")
        .key("fenced")
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(p.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&refused), "StaleFencingToken");
    let (_, bytes) = get_bytes(&c, &cluster.object(3, "fenced")).await;
    assert_eq!(bytes, b"new holder");
}

/// `etcdctl put KEY VALUE` on the cluster's etcd (records are under `fencegate#records/`).
fn etcd_put(cluster: &Cluster, key: &str, value: &str) {
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            cluster.var("ETCD_ENDPOINTS_CSV"),
            "put",
            key,
            value,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

fn etcd_get(cluster: &Cluster, key: &str) -> String {
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            cluster.var("ETCD_ENDPOINTS_CSV"),
            "get",
            key,
            "--print-value-only",
        ])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

async fn served(s3: &aws_sdk_s3::Client, bucket: &str) -> bool {
    s3.head_bucket().bucket(bucket).send().await.is_ok()
}

/// A bucket created through one instance is served by the others at once, listed by them,
/// created again through another as an existing bucket (us-east-1 answers 200), deleted
/// through another and created again at once through the first (which still served it: it is
/// created afresh, not answered as existing), and deleted again: then every instance stops
/// serving it. Damaged records beside it (unreadable ones, and one naming a backend no instance
/// has) cost only themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_created_through_one_instance_is_served_by_all() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(2, "ministack");
    let s3 = clients(&cluster, 2);
    for (key, value) in [
        ("bucket:garbage", "not json"),
        ("part:00000000000000000000000000000000/00001", "not json"),
        ("upload:0000000000000000000000000000000f", "{"),
        ("cred:FGLBROKEN", "not json"),
    ] {
        etcd_put(&cluster, &format!("fencegate#records/{key}"), value);
    }
    s3[0]
        .create_bucket()
        .bucket("made-on-one")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", cluster.logs()));
    let record = etcd_get(&cluster, "fencegate#records/bucket:made-on-one");
    let mut elsewhere: serde_json::Value = serde_json::from_str(&record).unwrap();
    elsewhere["backend"] = "nope".into();
    etcd_put(
        &cluster,
        "fencegate#records/bucket:on-a-lost-backend",
        &elsewhere.to_string(),
    );
    s3[1]
        .put_object()
        .bucket("made-on-one")
        .key("k")
        .metadata("fencing-token", "1")
        .body(ByteStream::from_static(b"through two"))
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "a put through the other instance: {e:?}\n{}",
                cluster.logs()
            )
        });
    let got = s3[0]
        .get_object()
        .bucket("made-on-one")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        b"through two"
    );
    s3[1]
        .create_bucket()
        .bucket("made-on-one")
        .send()
        .await
        .expect("an existing bucket, created again in us-east-1, answers 200");
    let listed = s3[1].list_buckets().send().await.unwrap();
    let names: Vec<_> = listed.buckets().iter().filter_map(|b| b.name()).collect();
    assert!(names.contains(&"made-on-one"), "{names:?}");
    assert!(!names.contains(&"garbage"), "{names:?}");
    // Uploads are listed and created beside an unreadable upload and part record.
    let up = s3[1]
        .create_multipart_upload()
        .bucket("default")
        .key("beside")
        .metadata("fencing-token", "1")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let open = s3[0]
        .list_multipart_uploads()
        .bucket("default")
        .send()
        .await
        .unwrap();
    assert_eq!(open.uploads().len(), 1, "{open:?}");
    s3[0]
        .abort_multipart_upload()
        .bucket("default")
        .key("beside")
        .upload_id(up.upload_id().unwrap())
        .customize()
        .mutate_request(token_header("1"))
        .send()
        .await
        .unwrap();
    // Not empty: refused.
    let refused = s3[1]
        .delete_bucket()
        .bucket("made-on-one")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&refused), "BucketNotEmpty");
    s3[0]
        .delete_object()
        .bucket("made-on-one")
        .key("k")
        .customize()
        .mutate_request(token_header("2"))
        .send()
        .await
        .unwrap();
    s3[1]
        .delete_bucket()
        .bucket("made-on-one")
        .send()
        .await
        .expect("deleted through the other instance");
    // At once, through the instance that still serves it: created afresh.
    s3[0]
        .create_bucket()
        .bucket("made-on-one")
        .send()
        .await
        .expect("created again");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        served(&s3[0], "made-on-one").await,
        "lost after its re-creation"
    );
    assert!(
        served(&s3[1], "made-on-one").await,
        "lost after its re-creation"
    );
    s3[0]
        .delete_bucket()
        .bucket("made-on-one")
        .send()
        .await
        .expect("deleted again");
    // Instance 2 learns of it within its next pass (every 2 s), the lost backend's record
    // beside it notwithstanding.
    let deadline = std::time::Instant::now() + Duration::from_secs(6);
    while served(&s3[1], "made-on-one").await {
        assert!(
            std::time::Instant::now() < deadline,
            "instance 2 still serves a bucket deleted through instance 1"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let listed = s3[1].list_buckets().send().await.unwrap();
    assert!(
        !listed
            .buckets()
            .iter()
            .any(|b| b.name() == Some("made-on-one")),
        "{listed:?}"
    );
    // A bucket an instance created before its table was shared (its buckets.json) is
    // recorded for the cluster when it starts, and served by the others.
    let mut before: serde_json::Value = serde_json::from_str(&record).unwrap();
    before["backend_prefix"] = "from-before/".into();
    cluster.signal("fg2", "KILL");
    std::fs::write(
        cluster.dir.path().join("fg2/buckets.json"),
        serde_json::json!({ "from-before": before }).to_string(),
    )
    .unwrap();
    cluster.start("fg2");
    assert!(
        served(&s3[0], "from-before").await,
        "a bucket of buckets.json is not served through the other instance\n{}",
        cluster.logs()
    );
}

/// S3 credentials issued with a lease through one instance sign writes through another, carry
/// the lease's token there, stop at the next grant's token (409) and stop working through every
/// instance once the lease is released and the grace (2 s here) has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_credentials_work_through_every_instance() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(2, "ministack");
    let c = client();
    let acquire = |n: usize, holder: &'static str| {
        c.post(cluster.url(n, "/v1/leases/report"))
            .json(&serde_json::json!({
                "holder": holder, "ttl_ms": 30000, "bucket": "default", "key": "leased",
                "s3_credentials": true
            }))
            .send()
    };
    let resp = acquire(1, "a").await.unwrap();
    assert_eq!(resp.status(), 200);
    let grant: serde_json::Value = resp.json().await.unwrap();
    let creds = &grant["s3_credentials"];
    let (id, secret) = (
        creds["access_key_id"].as_str().unwrap(),
        creds["secret_access_key"].as_str().unwrap(),
    );
    let with_lease = |n: usize| common::moto::client_with(&cluster.url(n, ""), id, secret);
    let put = |s3: aws_sdk_s3::Client, body: &'static [u8]| async move {
        s3.put_object()
            .bucket("default")
            .key("leased")
            .body(ByteStream::from_static(body))
            .send()
            .await
    };
    put(with_lease(2), b"a through two")
        .await
        .unwrap_or_else(|e| {
            panic!(
                "lease credentials on the other instance: {e:?}\n{}",
                cluster.logs()
            )
        });
    let token = |n: usize| {
        let c = c.clone();
        let url = cluster.object(n, "leased");
        async move {
            c.head(url).send().await.unwrap().headers()["fencing-token"]
                .to_str()
                .unwrap()
                .to_string()
        }
    };
    assert_eq!(token(1).await, grant["token"].to_string());
    // Another key is outside the lease.
    let outside = with_lease(2)
        .put_object()
        .bucket("default")
        .key("elsewhere")
        .metadata("fencing-token", "1")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&outside), "AccessDenied");
    // Released through instance 2; a new holder's grant through instance 2 advances the
    // fence, so the old credentials, still in their grace, are refused as stale.
    let release = c
        .delete(cluster.url(2, "/v1/leases/report"))
        .json(&serde_json::json!({
            "holder": "a", "token": grant["token"], "secret": grant["lease_secret"]
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(release.status(), 204);
    let next = acquire(2, "b").await.unwrap();
    assert_eq!(next.status(), 200);
    let stale = put(with_lease(1), b"a, late").await.unwrap_err();
    assert_eq!(code(&stale), "StaleFencingToken");
    assert_eq!(stale.raw_response().map(|r| r.status().as_u16()), Some(403));
    // After the grace, neither instance knows them.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    for n in [1, 2] {
        let gone = put(with_lease(n), b"a, later").await.unwrap_err();
        assert_eq!(code(&gone), "InvalidAccessKeyId", "instance {n}");
    }
    let never = common::moto::client_with(&cluster.url(1, ""), "FGLNOSUCHKEY0000000", "x");
    assert_eq!(
        code(&put(never, b"x").await.unwrap_err()),
        "InvalidAccessKeyId"
    );
    // A made-up id in the issued form is told unknown without etcd: with every member stopped,
    // it is still refused at once (a read would wait for etcd, then answer 503).
    for member in ["etcd1", "etcd2", "etcd3"] {
        cluster.signal(member, "STOP");
    }
    let made_up =
        common::moto::client_with(&cluster.url(1, ""), "FGLAAAAAAAAAAAAAAAABBBBBBBB", "x");
    let refused = tokio::time::timeout(Duration::from_secs(5), put(made_up, b"x")).await;
    for member in ["etcd1", "etcd2", "etcd3"] {
        cluster.signal(member, "CONT");
    }
    let refused = refused.expect("a made-up id waited for etcd");
    assert_eq!(code(&refused.unwrap_err()), "InvalidAccessKeyId");
}
