//! The aws-chunked decoder against AWS's published examples and against bodies that lie:
//! cut short, tampered with, longer or shorter than declared, framed wrongly, endless.

use super::aws_chunked::{decode, Payload, Signing};
use crate::backend::{BodyError, ByteStream};
use bytes::Bytes;
use futures::StreamExt;
use sha2::{Digest, Sha256};

const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const DATE: &str = "20130524T000000Z";
/// The seed signatures of AWS's examples ("Example: PUT Object" in "Transferring payload in
/// multiple chunks", and its variant with trailing headers).
const SEED: &str = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
const SEED_TRAILER: &str = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e";

fn signing(seed: &str) -> Option<Signing> {
    Some(Signing::new(SECRET, DATE, "us-east-1", "s3", seed).unwrap())
}

/// AWS's example body: 64 KiB then 1 KiB of `a`, signed as the documentation shows.
fn aws_example() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(b"10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n");
    body.extend_from_slice(&[b'a'; 0x10000]);
    body.extend_from_slice(b"\r\n400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n");
    body.extend_from_slice(&[b'a'; 1024]);
    body.extend_from_slice(b"\r\n0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n");
    body
}

fn aws_trailer_example() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(b"10000;chunk-signature=b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2\r\n");
    body.extend_from_slice(&[b'a'; 0x10000]);
    body.extend_from_slice(b"\r\n400;chunk-signature=1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7\r\n");
    body.extend_from_slice(&[b'a'; 1024]);
    body.extend_from_slice(b"\r\n0;chunk-signature=2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992\r\n");
    body.extend_from_slice(b"x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435\r\n\r\n");
    body
}

/// Signs `chunks` as an SDK would, from `seed` (an independent encoder: the strings to sign
/// are written out here, not taken from the decoder).
fn signed(seed: &str, chunks: &[&[u8]]) -> Vec<u8> {
    let key = aws_sigv4::sign::v4::generate_signing_key(
        SECRET,
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_369_353_600),
        "us-east-1",
        "s3",
    );
    let mut previous = seed.to_string();
    let mut body = Vec::new();
    for chunk in chunks.iter().chain([&&b""[..]]) {
        let to_sign = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{DATE}\n20130524/us-east-1/s3/aws4_request\n{previous}\n{}\n{}",
            hex::encode(Sha256::digest(b"")),
            hex::encode(Sha256::digest(chunk))
        );
        previous = aws_sigv4::sign::v4::calculate_signature(key.as_ref(), to_sign.as_bytes());
        body.extend_from_slice(
            format!("{:x};chunk-signature={previous}\r\n", chunk.len()).as_bytes(),
        );
        body.extend_from_slice(chunk);
        body.extend_from_slice(b"\r\n");
    }
    body
}

/// botocore's form of STREAMING-UNSIGNED-PAYLOAD-TRAILER.
fn unsigned(chunks: &[&[u8]], trailer: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for chunk in chunks {
        body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        body.extend_from_slice(chunk);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("0\r\n{trailer}\r\n\r\n").as_bytes());
    body
}

/// `body` sent in frames of `frame` bytes.
fn frames(body: &[u8], frame: usize) -> ByteStream {
    let pieces: Vec<Result<Bytes, BodyError>> = body
        .chunks(frame)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    futures::stream::iter(pieces).boxed()
}

/// Everything the decoder passed on, and how it ended.
async fn run(mut stream: ByteStream) -> (Vec<u8>, Result<(), BodyError>) {
    let mut out = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(b) => out.extend_from_slice(&b),
            Err(e) => return (out, Err(e)),
        }
    }
    (out, Ok(()))
}

fn message(r: &Result<(), BodyError>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn aws_examples_decode_in_any_framing() {
    for frame in [1, 7, 100, 65_536, 1 << 20] {
        let (body, trailers) = decode(
            frames(&aws_example(), frame),
            Payload::Signed,
            signing(SEED),
            66_560,
        );
        let (out, end) = run(body).await;
        assert!(end.is_ok(), "frame {frame}: {}", message(&end));
        assert_eq!(out, vec![b'a'; 66_560]);
        assert!(trailers.read(|_| ()).is_none());

        let (body, trailers) = decode(
            frames(&aws_trailer_example(), frame),
            Payload::SignedTrailer,
            signing(SEED_TRAILER),
            66_560,
        );
        let (out, end) = run(body).await;
        assert!(end.is_ok(), "frame {frame}: {}", message(&end));
        assert_eq!(out.len(), 66_560);
        let crc = trailers
            .read(|h| h["x-amz-checksum-crc32c"].clone())
            .unwrap();
        assert_eq!(crc, "sOO8/Q==");
    }
}

/// Every way of changing a signed body is refused, and the reader never has all its bytes.
#[tokio::test]
async fn a_changed_signed_body_is_refused_before_its_last_byte() {
    let good = aws_example();
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut flipped = good.clone();
    flipped[200] = b'b';
    cases.push(("a data byte changed", flipped));
    let mut last = good.clone();
    let at = good.len() - 100;
    last[at] = b'b';
    cases.push(("the final chunk's signature changed", last));
    let mut second = good.clone();
    let at = 0x10000 + 90 + 30;
    second[at] ^= 1;
    cases.push(("the second chunk's signature changed", second));
    // The chunks of another (validly signed) body, under this seed.
    cases.push((
        "another body's chunks",
        signed(SEED_TRAILER, &[&[b'a'; 0x10000], &[b'a'; 1024]]),
    ));
    for (what, body) in cases {
        for frame in [1, 4096, 1 << 20] {
            let (stream, _) = decode(frames(&body, frame), Payload::Signed, signing(SEED), 66_560);
            let (out, end) = run(stream).await;
            assert!(end.is_err(), "{what}, frame {frame}: accepted");
            assert!(out.len() < 66_560, "{what}: the reader had every byte");
        }
    }
    let (stream, _) = decode(frames(&good, 512), Payload::Signed, signing(SEED), 66_560);
    let (_, end) = run(stream).await;
    assert!(end.is_ok());
}

#[tokio::test]
async fn a_body_cut_short_anywhere_is_refused() {
    let good = aws_example();
    for cut in (0..good.len()).step_by(97).chain([
        0x10000 + 90,    // after chunk 1's CRLF: a chunk boundary
        good.len() - 86, // just before the final chunk
        good.len() - 2,  // the final chunk's line without the body's last CRLF
    ]) {
        let (stream, _) = decode(
            frames(&good[..cut], 4096),
            Payload::Signed,
            signing(SEED),
            66_560,
        );
        let (out, end) = run(stream).await;
        if cut == good.len() - 2 {
            // The final chunk, signed, came whole: only the closing CRLF is missing.
            assert!(end.is_ok(), "cut {cut}: {}", message(&end));
            continue;
        }
        assert!(end.is_err(), "cut at {cut} accepted");
        assert!(out.len() < 66_560);
        if cut == 0x10000 + 90 {
            assert!(
                message(&end).contains("ended before its final chunk"),
                "{}",
                message(&end)
            );
        }
    }
}

#[tokio::test]
async fn the_decoded_length_must_be_the_declared_one() {
    let body = signed(SEED, &[b"hello ", b"world"]);
    for declared in [0, 5, 10, 12, 1 << 40] {
        let (stream, _) = decode(frames(&body, 64), Payload::Signed, signing(SEED), declared);
        let (_, end) = run(stream).await;
        assert!(end.is_err(), "declared {declared}: accepted");
    }
    let (stream, _) = decode(frames(&body, 64), Payload::Signed, signing(SEED), 11);
    let (out, end) = run(stream).await;
    assert!(end.is_ok(), "{}", message(&end));
    assert_eq!(out, b"hello world");
}

/// A chunk declared far larger than the body is refused on its header line; one declared
/// large within it is passed on frame by frame, never held whole.
#[tokio::test]
async fn a_huge_chunk_is_streamed_not_held() {
    let header = format!("ffffffff;chunk-signature={}\r\n", "0".repeat(64));
    let (stream, _) = decode(
        frames(header.as_bytes(), 64),
        Payload::Signed,
        signing(SEED),
        100,
    );
    let (_, end) = run(stream).await;
    assert!(message(&end).contains("runs past"), "{}", message(&end));

    let header = Bytes::from_static(b"100000000\r\n");
    let frame = Bytes::from(vec![b'x'; 64 * 1024]);
    let endless = futures::stream::iter(std::iter::once(Ok(header)))
        .chain(futures::stream::repeat(Ok::<_, BodyError>(frame)))
        .boxed();
    let (mut stream, _) = decode(endless, Payload::UnsignedTrailer, None, 1 << 32);
    for _ in 0..1000 {
        let piece = stream.next().await.unwrap().unwrap();
        assert!(piece.len() <= 64 * 1024);
    }
}

#[tokio::test]
async fn unsigned_trailer_bodies_as_botocore_sends_them() {
    let body = unsigned(&[b"hello ", b"world"], "x-amz-checksum-crc32:DUoRhQ==");
    for frame in [1, 3, 1024] {
        let (stream, trailers) = decode(frames(&body, frame), Payload::UnsignedTrailer, None, 11);
        let (out, end) = run(stream).await;
        assert!(end.is_ok(), "{}", message(&end));
        assert_eq!(out, b"hello world");
        let crc = trailers
            .read(|h| h["x-amz-checksum-crc32"].clone())
            .unwrap();
        assert_eq!(crc, "DUoRhQ==");
    }
    // Without the closing empty line, and without the last line's CRLF, as s3s takes them.
    for end_at in [body.len() - 2, body.len() - 4] {
        let (stream, trailers) = decode(
            frames(&body[..end_at], 5),
            Payload::UnsignedTrailer,
            None,
            11,
        );
        let (_, end) = run(stream).await;
        assert!(end.is_ok(), "{}", message(&end));
        assert!(trailers
            .read(|h| h.contains_key("x-amz-checksum-crc32"))
            .unwrap());
    }
}

#[tokio::test]
async fn malformed_framing_is_refused() {
    let cases: Vec<(&str, Vec<u8>, Payload)> = vec![
        (
            "not hex",
            b"zz\r\nab\r\n0\r\n\r\n".to_vec(),
            Payload::UnsignedTrailer,
        ),
        ("no size", b";x\r\n".to_vec(), Payload::UnsignedTrailer),
        (
            "17 hex digits",
            b"00000000000000002\r\nab\r\n0\r\n\r\n".to_vec(),
            Payload::UnsignedTrailer,
        ),
        (
            "LF only",
            b"2\nab\r\n0\r\n\r\n".to_vec(),
            Payload::UnsignedTrailer,
        ),
        (
            "data longer than its size",
            b"2\r\nabc\r\n0\r\n\r\n".to_vec(),
            Payload::UnsignedTrailer,
        ),
        (
            "an extension on an unsigned chunk",
            b"2;chunk-signature=00\r\nab\r\n0\r\n\r\n".to_vec(),
            Payload::UnsignedTrailer,
        ),
        (
            "a signature in an unsigned trailer",
            b"2\r\nab\r\n0\r\nx-amz-trailer-signature:00\r\n\r\n".to_vec(),
            Payload::UnsignedTrailer,
        ),
        (
            "bytes after the end",
            [
                unsigned(&[b"ab"], "x-amz-checksum-crc32:AAAAAA=="),
                b"2\r\nab".to_vec(),
            ]
            .concat(),
            Payload::UnsignedTrailer,
        ),
        (
            "a long line",
            [b"2".repeat(300), b"\r\n".to_vec()].concat(),
            Payload::UnsignedTrailer,
        ),
        (
            "a signed chunk without its signature",
            b"2\r\nab\r\n".to_vec(),
            Payload::Signed,
        ),
        (
            "a short signature",
            b"2;chunk-signature=abcd\r\nab\r\n".to_vec(),
            Payload::Signed,
        ),
        (
            "another extension",
            b"2;foo=bar\r\nab\r\n".to_vec(),
            Payload::Signed,
        ),
        (
            "a trailer no one named",
            b"2\r\nab\r\n0\r\nx-amz-meta-evil:1\r\n\r\n".to_vec(),
            Payload::UnsignedTrailer,
        ),
        (
            "a content-type trailer",
            b"2\r\nab\r\n0\r\ncontent-type:text/html\r\n\r\n".to_vec(),
            Payload::UnsignedTrailer,
        ),
        (
            "a trailer that is not name:value",
            b"2\r\nab\r\n0\r\nnonsense\r\n\r\n".to_vec(),
            Payload::UnsignedTrailer,
        ),
        (
            "too many trailers",
            [
                b"2\r\nab\r\n0\r\n".to_vec(),
                b"x-amz-checksum-crc32:AAAAAA==\r\n".repeat(20),
                b"\r\n".to_vec(),
            ]
            .concat(),
            Payload::UnsignedTrailer,
        ),
    ];
    for (what, body, payload) in cases {
        for frame in [1, 1024] {
            let (stream, _) = decode(frames(&body, frame), payload, signing(SEED), 2);
            let (_, end) = run(stream).await;
            assert!(end.is_err(), "{what} (frame {frame}) accepted");
        }
    }
}

#[tokio::test]
async fn a_signed_trailer_must_carry_its_signature() {
    let mut body = aws_trailer_example();
    let tail = b"x-amz-trailer-signature:d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435\r\n\r\n";
    body.truncate(body.len() - tail.len());
    body.extend_from_slice(b"\r\n");
    let (stream, _) = decode(
        frames(&body, 4096),
        Payload::SignedTrailer,
        signing(SEED_TRAILER),
        66_560,
    );
    let (out, end) = run(stream).await;
    assert!(end.is_err());
    assert!(out.len() < 66_560);
    // A changed checksum under the original signature.
    let changed: Vec<u8> = String::from_utf8_lossy(&aws_trailer_example())
        .replace("sOO8/Q==", "AAAAAA==")
        .into_bytes();
    let (stream, _) = decode(
        frames(&changed, 4096),
        Payload::SignedTrailer,
        signing(SEED_TRAILER),
        66_560,
    );
    let (_, end) = run(stream).await;
    assert!(
        matches!(end, Err(BodyError::Unauthenticated { status: 403, .. })),
        "{}",
        message(&end)
    );
}

#[tokio::test]
async fn an_empty_body_and_the_wrong_key() {
    let body = signed(SEED, &[]);
    let (stream, _) = decode(frames(&body, 8), Payload::Signed, signing(SEED), 0);
    let (out, end) = run(stream).await;
    assert!(end.is_ok() && out.is_empty(), "{}", message(&end));
    let other = Some(Signing::new("another secret", DATE, "us-east-1", "s3", SEED).unwrap());
    let (stream, _) = decode(frames(&body, 8), Payload::Signed, other, 0);
    let (_, end) = run(stream).await;
    assert!(end.is_err());
    let (stream, _) = decode(frames(&body, 8), Payload::Signed, None, 0);
    assert!(run(stream).await.1.is_err());
}

#[test]
fn payload_values() {
    assert_eq!(Payload::of(b"UNSIGNED-PAYLOAD"), None);
    assert_eq!(Payload::of(b"e3b0"), None);
    assert_eq!(
        Payload::of(b"STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
        Some(Ok(Payload::UnsignedTrailer))
    );
    assert!(matches!(
        Payload::of(b"STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD"),
        Some(Err(_))
    ));
    assert!(Signing::new(SECRET, "2013-05-24", "us-east-1", "s3", SEED).is_err());
}
