//! Class `deletes`: acknowledged deletes must fence like writes. A new lock holder deletes an
//! object (absent or present) with its token, through the S3 gateway (DeleteObject,
//! DeleteObjects) or the native API, and a zombie holding an older token then writes (or
//! deletes) the same key through either surface, sometimes racing the delete.
//!
//! The promise: once a delete with token T is acknowledged (S3 204 / listed as deleted, native
//! 2xx; the native API's 404 for an absent key is not an acknowledgement), no write or delete
//! with a lower token is acknowledged after it.

use super::rig::{ack_order, timed, ClassReport, Ev, Rig};
use super::Store;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

const BUCKET: &str = "del";

/// The carriers a write or delete can take.
#[derive(Clone, Copy, Debug)]
enum Via {
    Native,
    S3,
    /// S3 with the token in `x-amz-meta-fencing-token` (PutObject) / DeleteObjects (delete).
    S3Alt,
}

impl Via {
    fn pick(rng: &mut StdRng) -> Via {
        [Via::Native, Via::S3, Via::S3Alt][rng.random_range(0..3)]
    }
}

struct Ctx {
    rig: Rig,
    http: reqwest::Client,
    s3: aws_sdk_s3::Client,
}

fn s3_status<T, E>(
    r: &Result<
        T,
        aws_sdk_s3::error::SdkError<E, aws_smithy_runtime_api::client::orchestrator::HttpResponse>,
    >,
    ok: u16,
) -> Option<u16> {
    match r {
        Ok(_) => Some(ok),
        Err(e) => e.raw_response().map(|r| r.status().as_u16()),
    }
}

async fn put(cx: &Ctx, who: &str, key: &str, token: u64, via: Via) -> Ev {
    let body = format!("{who} token {token}");
    let (t0, t1, status, name) = match via {
        Via::Native => {
            let (t0, t1, r) = timed(
                cx.http
                    .put(cx.rig.object_url(BUCKET, key))
                    .header("Fencing-Token", token.to_string())
                    .body(body)
                    .send(),
            )
            .await;
            (t0, t1, r.ok().map(|r| r.status().as_u16()), "native")
        }
        Via::S3 => {
            let tok = token.to_string();
            let (t0, t1, r) = timed(
                cx.s3
                    .put_object()
                    .bucket(BUCKET)
                    .key(key)
                    .body(ByteStream::from(body.into_bytes()))
                    .customize()
                    .mutate_request(move |req| {
                        req.headers_mut().insert("fencing-token", tok.clone());
                    })
                    .send(),
            )
            .await;
            (t0, t1, s3_status(&r, 200), "s3-header")
        }
        Via::S3Alt => {
            let (t0, t1, r) = timed(
                cx.s3
                    .put_object()
                    .bucket(BUCKET)
                    .key(key)
                    .metadata("fencing-token", token.to_string())
                    .body(ByteStream::from(body.into_bytes()))
                    .send(),
            )
            .await;
            (t0, t1, s3_status(&r, 200), "s3-meta")
        }
    };
    Ev {
        who: who.into(),
        op: "put",
        via: name,
        target: format!("{BUCKET}/{key}"),
        token: Some(token),
        t0,
        t1,
        status,
        acked: status == Some(200),
        ..Ev::default()
    }
}

async fn delete(cx: &Ctx, who: &str, key: &str, token: u64, via: Via) -> Ev {
    let tok = token.to_string();
    let (t0, t1, status, acked, name, note) = match via {
        Via::Native => {
            let (t0, t1, r) = timed(
                cx.http
                    .delete(cx.rig.object_url(BUCKET, key))
                    .header("Fencing-Token", &tok)
                    .send(),
            )
            .await;
            let status = r.ok().map(|r| r.status().as_u16());
            // 200 (after the fix also for an absent key, with "existed": false); a 404 for an
            // absent key acknowledges nothing.
            let acked = matches!(status, Some(200 | 204));
            (t0, t1, status, acked, "native", String::new())
        }
        Via::S3 => {
            let (t0, t1, r) = timed(
                cx.s3
                    .delete_object()
                    .bucket(BUCKET)
                    .key(key)
                    .customize()
                    .mutate_request(move |req| {
                        req.headers_mut().insert("fencing-token", tok.clone());
                    })
                    .send(),
            )
            .await;
            let status = s3_status(&r, 204);
            (t0, t1, status, status == Some(204), "s3", String::new())
        }
        Via::S3Alt => {
            let ids = Delete::builder()
                .objects(ObjectIdentifier::builder().key(key).build().unwrap())
                .build()
                .unwrap();
            let (t0, t1, r) = timed(
                cx.s3
                    .delete_objects()
                    .bucket(BUCKET)
                    .delete(ids)
                    .customize()
                    .mutate_request(move |req| {
                        req.headers_mut().insert("fencing-token", tok.clone());
                    })
                    .send(),
            )
            .await;
            let status = s3_status(&r, 200);
            // Acknowledged only if the key is listed under Deleted.
            let (acked, note) = match &r {
                Ok(out) => (
                    out.deleted().iter().any(|d| d.key() == Some(key)),
                    out.errors()
                        .iter()
                        .filter_map(|e| e.code())
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                Err(_) => (false, String::new()),
            };
            (t0, t1, status, acked, "s3-batch", note)
        }
    };
    Ev {
        who: who.into(),
        op: "delete",
        via: name,
        target: format!("{BUCKET}/{key}"),
        token: Some(token),
        t0,
        t1,
        status,
        acked,
        note,
        ..Ev::default()
    }
}

pub async fn run(seed: u64, secs: f64, store: Store, fencing: &str) -> (ClassReport, Vec<Ev>) {
    let rig = Rig::start(
        store,
        &[(
            BUCKET,
            format!("fencing = \"{fencing}\"\nfenced_deletes = true"),
        )],
    )
    .await;
    let cx = Ctx {
        s3: rig.s3(),
        http: crate::common::client(),
        rig,
    };
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0de1_e7e5);
    let mut report = ClassReport::new("deletes");
    let mut history = Vec::new();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut round = 0;
    while Instant::now() < deadline {
        round += 1;
        let key = format!("k{round}/{}", rng.random_range(0..1000));
        let t = rng.random_range(10..1_000_000u64);
        let present = rng.random_bool(0.4);
        let mut low = t.saturating_sub(rng.random_range(1..=3));
        if present {
            // The old holder wrote it; the new holder deletes with a higher token.
            let t_old = t - rng.random_range(1..=5);
            low = rng.random_range(t_old..t);
            history.push(put(&cx, "old-holder", &key, t_old, Via::pick(&mut rng)).await);
            report.stat("present");
        } else {
            report.stat("absent");
        }
        let (dv, zv) = (Via::pick(&mut rng), Via::pick(&mut rng));
        let zombie_deletes = rng.random_bool(0.2);
        if rng.random_bool(0.25) {
            // The zombie races the delete.
            let lead = Duration::from_micros(rng.random_range(0..3000));
            let (d, z) = tokio::join!(delete(&cx, "new-holder", &key, t, dv), async {
                tokio::time::sleep(lead).await;
                if zombie_deletes {
                    delete(&cx, "zombie", &key, low, zv).await
                } else {
                    put(&cx, "zombie", &key, low, zv).await
                }
            });
            history.extend([d, z]);
            report.stat("raced");
        } else {
            history.push(delete(&cx, "new-holder", &key, t, dv).await);
            if rng.random_bool(0.3) {
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..20))).await;
            }
            history.push(if zombie_deletes {
                delete(&cx, "zombie", &key, low, zv).await
            } else {
                put(&cx, "zombie", &key, low, zv).await
            });
        }
        if rng.random_bool(0.3) {
            // The new holder goes on writing.
            history.push(put(&cx, "new-holder", &key, t, Via::pick(&mut rng)).await);
        }
        report.rounds += 1;
    }
    report.violations = check(&history);
    report.tally(&history);
    (report, history)
}

pub fn check(history: &[Ev]) -> Vec<String> {
    ack_order(history, |_| false)
}
