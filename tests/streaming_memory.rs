//! Bodies stream both ways: a 2 GiB upload and its download keep fencegate's resident memory
//! far below the object's size.

mod common;
use common::{client, Server};
use futures::StreamExt;
use md5::{Digest, Md5};

const CHUNK: usize = 1 << 20;
const TOTAL: u64 = 2 << 30;
/// Generous: the process idles at ~15 MiB; buffering the object would need 2048 MiB.
const PEAK_RSS_LIMIT_KIB: u64 = 256 * 1024;

#[tokio::test]
async fn a_2_gib_upload_and_download_stream() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = client();
    let url = s.object_url("default", "big.bin");

    let chunk: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
    let mut expected = Md5::new();
    for _ in 0..(TOTAL / CHUNK as u64) {
        expected.update(&chunk);
    }
    let expected = format!("\"{}\"", hex::encode(expected.finalize()));

    let upload_chunk = bytes::Bytes::from(chunk);
    let body = futures::stream::iter(0..(TOTAL / CHUNK as u64))
        .map(move |_| Ok::<_, std::io::Error>(upload_chunk.clone()));
    let resp = c
        .put(&url)
        .header("Fencing-Token", "1")
        .header("Content-Length", TOTAL.to_string())
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["etag"].to_str().unwrap(), expected);
    let after_upload = s.peak_rss_kib();

    let resp = c.get(&url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.content_length(), Some(TOTAL));
    let mut got = 0u64;
    let mut md5 = Md5::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        got += chunk.len() as u64;
        md5.update(&chunk);
    }
    assert_eq!(got, TOTAL);
    assert_eq!(format!("\"{}\"", hex::encode(md5.finalize())), expected);
    let peak = s.peak_rss_kib();
    eprintln!("peak RSS after 2 GiB upload: {after_upload} KiB, after download: {peak} KiB");
    assert!(
        peak < PEAK_RSS_LIMIT_KIB,
        "peak RSS {peak} KiB for a 2 GiB object"
    );
}
