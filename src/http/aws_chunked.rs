//! aws-chunked request bodies (`x-amz-content-sha256: STREAMING-*`, the form AWS SDKs send
//! over TLS and Arrow always), decoded as they stream: every chunk is passed on in the pieces it
//! arrives in, whatever size it declares, so a body costs at most one network frame and one
//! bounded header line of memory. A signed chunk's signature is checked when its last byte has
//! arrived, the trailer's once the trailer has; the body ends only after its final zero-length
//! chunk, with exactly the bytes `x-amz-decoded-content-length` declared. Until every check has
//! passed the decoder holds back the piece it received last, so a reader (a backend writing the
//! body to its store) never has the whole body of a request that is then refused.
//!
//! The framing (AWS's "Signature calculations for the Authorization header: transferring
//! payload in multiple chunks" and "... including trailing headers"):
//!
//! ```text
//! <hex size>[;chunk-signature=<64 hex>]\r\n<size bytes>\r\n ... 0[;chunk-signature=..]\r\n
//! [<trailer name>:<value>\r\n ...][x-amz-trailer-signature:<64 hex>\r\n]\r\n
//! ```

pub use super::chunk_signatures::Signing;
use super::EMPTY_SHA256;
use crate::backend::{BodyError, ByteStream};
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// The longest chunk header line taken: `ffffffffffffffff;chunk-signature=` and 64 hex digits
/// with its CRLF is 99 bytes; anything much longer is not aws-chunked.
const MAX_LINE: usize = 256;
/// The most trailer bytes taken (S3 sends one checksum and its signature, under 200 bytes).
const MAX_TRAILERS: usize = 4096;
/// The most trailer lines taken.
const MAX_TRAILER_LINES: usize = 8;

/// Which `STREAMING-*` payload a request declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: every chunk signed, no trailer.
    Signed,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: every chunk and the trailer signed.
    SignedTrailer,
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: chunks unsigned, a checksum trailer.
    UnsignedTrailer,
}

impl Payload {
    /// `None`: not an aws-chunked payload. `Some(Err)`: a `STREAMING-*` value fencegate does
    /// not decode (the ECDSA ones), to be refused.
    pub fn of(x_amz_content_sha256: &[u8]) -> Option<Result<Payload, String>> {
        match x_amz_content_sha256 {
            b"STREAMING-AWS4-HMAC-SHA256-PAYLOAD" => Some(Ok(Payload::Signed)),
            b"STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER" => Some(Ok(Payload::SignedTrailer)),
            b"STREAMING-UNSIGNED-PAYLOAD-TRAILER" => Some(Ok(Payload::UnsignedTrailer)),
            v if v.starts_with(b"STREAMING-") => Some(Err(format!(
                "x-amz-content-sha256 {:?} is not a payload fencegate decodes; sign with AWS4-HMAC-SHA256 (STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER] or STREAMING-UNSIGNED-PAYLOAD-TRAILER)",
                String::from_utf8_lossy(v)
            ))),
            _ => None,
        }
    }

    pub fn signed(self) -> bool {
        !matches!(self, Payload::UnsignedTrailer)
    }

    pub fn has_trailer(self) -> bool {
        !matches!(self, Payload::Signed)
    }
}

/// The trailer of a body, once it has been read (the digest check reads its checksum).
#[derive(Clone, Default)]
pub struct Trailers(Arc<Mutex<Option<http::HeaderMap>>>);

impl Trailers {
    pub fn read<R>(&self, f: impl FnOnce(&http::HeaderMap) -> R) -> Option<R> {
        let guard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().map(f)
    }

    fn set(&self, map: http::HeaderMap) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(map);
    }
}

/// Decodes `raw`, an aws-chunked body declared to decode to `declared` bytes. `signing` is
/// needed for the signed payloads.
pub fn decode(
    raw: ByteStream,
    payload: Payload,
    signing: Option<Signing>,
    declared: u64,
) -> (ByteStream, Trailers) {
    let trailers = Trailers::default();
    let decoder = Decoder {
        raw,
        payload,
        signing,
        declared,
        decoded: 0,
        phase: Phase::Header,
        pending: Bytes::new(),
        line: BytesMut::new(),
        chunk_hash: None,
        chunk_signature: None,
        trailer_text: Vec::new(),
        trailer_lines: 0,
        trailers: trailers.clone(),
        held: None,
        ended: false,
    };
    (decoder.boxed(), trailers)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading a chunk's header line.
    Header,
    /// Passing on a chunk's data: this many bytes left.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// The CRLF after the final chunk of a payload without a trailer.
    FinalEnd,
    /// Reading the trailer lines, after the final chunk.
    Trailers,
    /// Everything checked; nothing more may arrive.
    Done,
}

struct Decoder {
    raw: ByteStream,
    payload: Payload,
    signing: Option<Signing>,
    declared: u64,
    decoded: u64,
    phase: Phase,
    /// What has arrived and not yet been read.
    pending: Bytes,
    /// The line being read (header, CRLF, trailer).
    line: BytesMut,
    chunk_hash: Option<Sha256>,
    chunk_signature: Option<Vec<u8>>,
    /// The trailer lines read so far, as `name:value\n` (the canonical form signed).
    trailer_text: Vec<(String, String)>,
    trailer_lines: usize,
    trailers: Trailers,
    /// The last piece decoded, passed on only once another follows or every check passed.
    held: Option<Bytes>,
    ended: bool,
}

fn malformed(what: impl std::fmt::Display) -> BodyError {
    BodyError::Broken(format!(
        "the aws-chunked body is malformed: {what}; nothing was written (send it again)"
    ))
}

fn bad_signature(what: &str) -> BodyError {
    BodyError::Unauthenticated {
        status: 403,
        code: "SignatureDoesNotMatch",
        message: format!(
            "the {what} signature of the aws-chunked body does not match; nothing was written (check the secret key and that nothing alters the body on the way)"
        ),
    }
}

impl Decoder {
    /// Reads a line (ending in LF) from `pending` into `line`, at most `max` bytes. `Some`
    /// once it is whole, without its LF and the CR before it (a chunk header must have the CR;
    /// a trailer line may go without, as s3s and AWS take it).
    fn take_line(&mut self, max: usize, cr: bool) -> Result<Option<Bytes>, BodyError> {
        let (piece, whole) = match self.pending.iter().position(|&b| b == b'\n') {
            Some(i) => (self.pending.split_to(i + 1), true),
            None => (std::mem::take(&mut self.pending), false),
        };
        if self.line.len() + piece.len() > max {
            return Err(malformed(format!("a line is longer than {max} bytes")));
        }
        self.line.extend_from_slice(&piece);
        if !whole {
            return Ok(None);
        }
        let line = self.line.split().freeze();
        let text = &line[..line.len() - 1];
        match text.strip_suffix(b"\r") {
            Some(text) => Ok(Some(line.slice(..text.len()))),
            None if !cr => Ok(Some(line.slice(..text.len()))),
            None => Err(malformed("a chunk header does not end in CRLF")),
        }
    }

    /// A chunk header: its size, and its signature where the payload is signed.
    fn header(&mut self, line: &[u8]) -> Result<(), BodyError> {
        let (size, extension) = match line.iter().position(|&b| b == b';') {
            Some(i) => (&line[..i], Some(&line[i + 1..])),
            None => (line, None),
        };
        if size.is_empty() || size.len() > 16 || !size.iter().all(u8::is_ascii_hexdigit) {
            return Err(malformed(format!(
                "chunk size {:?} is not hexadecimal",
                String::from_utf8_lossy(size)
            )));
        }
        let size = u64::from_str_radix(std::str::from_utf8(size).unwrap_or("x"), 16)
            .map_err(|_| malformed("a chunk size does not fit in 64 bits"))?;
        self.chunk_signature = match (self.payload.signed(), extension) {
            (true, Some(ext)) => match ext.strip_prefix(b"chunk-signature=") {
                Some(sig) if sig.len() == 64 && sig.iter().all(u8::is_ascii_hexdigit) => {
                    Some(sig.to_ascii_lowercase())
                }
                _ => {
                    return Err(malformed(
                        "a chunk's extension is not chunk-signature=<64 hex>",
                    ))
                }
            },
            (true, None) => return Err(malformed("a chunk of a signed payload has no signature")),
            (false, None) => None,
            (false, Some(_)) => {
                return Err(malformed(
                    "a chunk of an unsigned payload carries an extension",
                ))
            }
        };
        let left = self.declared - self.decoded;
        if size > left {
            return Err(malformed(format!(
                "a chunk of {size} bytes runs past the {} bytes x-amz-decoded-content-length declared",
                self.declared
            )));
        }
        if size == 0 {
            self.chunk_done(EMPTY_SHA256.to_string())?;
            if self.decoded != self.declared {
                return Err(BodyError::Broken(format!(
                    "the aws-chunked body decoded to {} bytes, not the {} x-amz-decoded-content-length declared; nothing was written",
                    self.decoded, self.declared
                )));
            }
            self.phase = if self.payload.has_trailer() {
                Phase::Trailers
            } else {
                Phase::FinalEnd
            };
        } else {
            self.chunk_hash = self.payload.signed().then(Sha256::new);
            self.phase = Phase::Data(size);
        }
        Ok(())
    }

    /// A chunk has all its bytes: its signature is checked (signed payloads).
    fn chunk_done(&mut self, hash: String) -> Result<(), BodyError> {
        let Some(given) = self.chunk_signature.take() else {
            return Ok(());
        };
        let signing = self
            .signing
            .as_mut()
            .ok_or_else(|| bad_signature("chunk"))?;
        if signing.check("PAYLOAD", &hash, &given) {
            Ok(())
        } else {
            Err(bad_signature("chunk"))
        }
    }

    /// A trailer line; the empty one ends the body.
    fn trailer(&mut self, line: &[u8]) -> Result<(), BodyError> {
        if !line.is_empty() {
            self.trailer_lines += 1;
            if self.trailer_lines > MAX_TRAILER_LINES {
                return Err(malformed("the trailer has too many lines"));
            }
            let text = std::str::from_utf8(line).map_err(|_| malformed("a trailer is not text"))?;
            let (name, value) = text
                .split_once(':')
                .ok_or_else(|| malformed("a trailer line is not name:value"))?;
            let name = name.trim().to_ascii_lowercase();
            // Only a checksum (judged by the digest check) and the trailer's signature: any
            // other trailer would be a header nothing reads, so it is refused, not dropped.
            if !name.starts_with("x-amz-checksum-") && name != "x-amz-trailer-signature" {
                return Err(malformed(format!(
                    "the trailer carries {name:?}; an aws-chunked trailer carries the x-amz-checksum-* that x-amz-trailer names, and its signature"
                )));
            }
            self.trailer_text.push((name, value.trim().to_string()));
            return Ok(());
        }
        let mut signature = None;
        let mut map = http::HeaderMap::new();
        let mut canonical = Vec::new();
        let mut entries = std::mem::take(&mut self.trailer_text);
        entries.sort();
        for (name, value) in entries {
            if name == "x-amz-trailer-signature" {
                if signature.replace(value).is_some() {
                    return Err(malformed("the trailer signature is sent twice"));
                }
                continue;
            }
            canonical.extend_from_slice(format!("{name}:{value}\n").as_bytes());
            let name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| malformed("a trailer's name is not a header name"))?;
            let value = http::HeaderValue::from_str(&value)
                .map_err(|_| malformed("a trailer's value is not a header value"))?;
            map.append(name, value);
        }
        match (self.payload, signature) {
            (Payload::SignedTrailer, Some(sig)) => {
                let hash = hex::encode(Sha256::digest(&canonical));
                let signing = self
                    .signing
                    .as_mut()
                    .ok_or_else(|| bad_signature("trailer"))?;
                if !signing.check("TRAILER", &hash, sig.to_ascii_lowercase().as_bytes()) {
                    return Err(bad_signature("trailer"));
                }
            }
            (Payload::SignedTrailer, None) if !map.is_empty() => {
                return Err(bad_signature("trailer (missing)"));
            }
            (Payload::UnsignedTrailer, Some(_)) => {
                return Err(malformed(
                    "an unsigned payload's trailer carries a signature",
                ));
            }
            _ => {}
        }
        self.trailers.set(map);
        self.phase = Phase::Done;
        Ok(())
    }

    /// One step over `pending`: `Some(piece)` when a piece of data was decoded.
    fn step(&mut self) -> Result<Option<Bytes>, BodyError> {
        match self.phase {
            Phase::Header => {
                if let Some(line) = self.take_line(MAX_LINE, true)? {
                    self.header(&line)?;
                }
                Ok(None)
            }
            Phase::Data(left) => {
                let n = left.min(self.pending.len() as u64) as usize;
                let piece = self.pending.split_to(n);
                if let Some(h) = &mut self.chunk_hash {
                    h.update(&piece);
                }
                self.decoded += n as u64;
                self.phase = if left == n as u64 {
                    Phase::DataEnd
                } else {
                    Phase::Data(left - n as u64)
                };
                Ok(Some(piece))
            }
            Phase::DataEnd => {
                if self.crlf()? {
                    if let Some(h) = self.chunk_hash.take() {
                        self.chunk_done(hex::encode(h.finalize()))?;
                    }
                    self.phase = Phase::Header;
                }
                Ok(None)
            }
            Phase::FinalEnd => {
                if self.crlf()? {
                    self.phase = Phase::Done;
                }
                Ok(None)
            }
            Phase::Trailers => {
                let max = MAX_TRAILERS.saturating_sub(self.trailer_bytes());
                if let Some(line) = self.take_line(max.max(2), false)? {
                    self.trailer(&line)?;
                }
                Ok(None)
            }
            Phase::Done => Err(malformed("bytes follow the final chunk")),
        }
    }

    /// Reads the CRLF that ends a chunk: `true` once both bytes are in.
    fn crlf(&mut self) -> Result<bool, BodyError> {
        while self.line.len() < 2 {
            let Some(&b) = self.pending.first() else {
                return Ok(false);
            };
            if b != b"\r\n"[self.line.len()] {
                return Err(malformed(
                    "a chunk's data is not followed by CRLF (is it longer than its size?)",
                ));
            }
            self.line.extend_from_slice(&[b]);
            let _ = self.pending.split_to(1);
        }
        self.line.clear();
        Ok(true)
    }

    fn trailer_bytes(&self) -> usize {
        self.trailer_text
            .iter()
            .map(|(n, v)| n.len() + v.len() + 3)
            .sum()
    }

    /// The raw body ended: fine only once the final chunk was read. After it, the trailer's
    /// closing empty line may be left out, and its last line's line end (as s3s takes it): the
    /// trailer's signature or checksum still has to match.
    fn at_end(&mut self) -> Result<(), BodyError> {
        match self.phase {
            Phase::Done => Ok(()),
            Phase::FinalEnd if self.line.is_empty() => Ok(()),
            Phase::Trailers => {
                let last = self.line.split().freeze();
                let last = last.strip_suffix(b"\r").unwrap_or(&last).to_vec();
                if !last.is_empty() {
                    self.trailer(&last)?;
                }
                self.trailer(&[])
            }
            _ => Err(BodyError::Broken(format!(
                "the aws-chunked body ended before its final chunk ({} of the {} bytes x-amz-decoded-content-length declared arrived); nothing was written (send it again)",
                self.decoded, self.declared
            ))),
        }
    }
}

impl Stream for Decoder {
    type Item = Result<Bytes, BodyError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        loop {
            if this.pending.is_empty() {
                match this.raw.poll_next_unpin(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Ok(bytes))) => {
                        this.pending = bytes;
                        continue;
                    }
                    Poll::Ready(Some(Err(e))) => {
                        this.ended = true;
                        this.held = None;
                        return Poll::Ready(Some(Err(e)));
                    }
                    Poll::Ready(None) => {
                        this.ended = true;
                        return Poll::Ready(match this.at_end() {
                            Ok(()) => this.held.take().map(Ok),
                            Err(e) => {
                                this.held = None;
                                Some(Err(e))
                            }
                        });
                    }
                }
            }
            match this.step() {
                Err(e) => {
                    this.ended = true;
                    this.held = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Ok(Some(piece)) if !piece.is_empty() => {
                    if let Some(out) = this.held.replace(piece) {
                        return Poll::Ready(Some(Ok(out)));
                    }
                }
                Ok(_) => {}
            }
        }
    }
}
