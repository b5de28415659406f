//! Where the store backends (s3, azure) keep a body (or one part of it) between reading it from
//! the client and sending it to the store: in memory while it is small and a process-wide memory budget
//! allows, otherwise in an anonymous temporary file. Memory therefore stays bounded however
//! many uploads run at once, and a body is never refused for want of memory, only spilled.
//!
//! Spill files are created with `O_TMPFILE` where the filesystem offers it: they have no name,
//! so a crash leaves nothing to sweep. Elsewhere they are unlinked as soon as they are created.
//! A spooled body is read back with positional reads, so it can be sent more than once (a
//! commit made again after a conflict) without sharing a file offset.

use crate::backend::{BackendError, BodyError, ByteStream};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use md5::{Digest, Md5};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// A body of at most this many bytes may be held in memory.
const IN_MEMORY_BODY: usize = 256 * 1024;
/// Bytes of all bodies held in memory at once, process-wide.
const MEMORY_BUDGET: usize = 32 * 1024 * 1024;
/// Writes to and reads from a spill file go in pieces of this size.
const FILE_CHUNK: usize = 64 * 1024;

/// Hands out spools; one per process, shared by every s3 backend.
pub struct Spooler {
    dir: PathBuf,
    budget: Arc<Semaphore>,
    in_memory_body: usize,
}

/// The memory budget every [`Spooler::new`] shares: one per process, however many stores.
static BUDGET: std::sync::LazyLock<Arc<Semaphore>> =
    std::sync::LazyLock::new(|| Arc::new(Semaphore::new(MEMORY_BUDGET)));

impl Spooler {
    /// Spill files go to `dir` (created when first needed); memory comes from the process-wide
    /// budget.
    pub fn new(dir: PathBuf) -> Arc<Spooler> {
        Arc::new(Spooler {
            dir,
            budget: BUDGET.clone(),
            in_memory_body: IN_MEMORY_BODY,
        })
    }

    /// Spill files in the system's temporary directory (a backend built outside `serve`).
    pub fn in_temp_dir() -> Arc<Spooler> {
        Spooler::new(std::env::temp_dir())
    }

    /// A spooler with a budget of its own, for tests.
    pub fn with_limits(dir: PathBuf, in_memory_body: usize, budget: usize) -> Arc<Spooler> {
        Arc::new(Spooler {
            dir,
            budget: Arc::new(Semaphore::new(budget)),
            in_memory_body,
        })
    }

    /// Bytes of the memory budget not in use now.
    pub fn memory_free(&self) -> usize {
        self.budget.available_permits()
    }

    pub fn spool(&self) -> Spool<'_> {
        Spool {
            spooler: self,
            mem: BytesMut::new(),
            lease: MemLease::none(&self.budget),
            file: None,
            written: 0,
            pending: BytesMut::new(),
        }
    }

    /// A fresh spill file, already without a name.
    async fn spill_file(&self) -> std::io::Result<std::fs::File> {
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir)?;
            tempfile::tempfile_in(&dir)
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

/// Bytes of the memory budget held by one body, given back when it is dropped.
pub struct MemLease {
    budget: Arc<Semaphore>,
    bytes: usize,
}

impl MemLease {
    fn grow(&mut self, bytes: usize) -> bool {
        let Ok(n) = u32::try_from(bytes) else {
            return false;
        };
        match self.budget.try_acquire_many(n) {
            Ok(permit) => {
                permit.forget();
                self.bytes += bytes;
                true
            }
            Err(_) => false,
        }
    }

    fn none(budget: &Arc<Semaphore>) -> MemLease {
        MemLease {
            budget: budget.clone(),
            bytes: 0,
        }
    }
}

impl Drop for MemLease {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.add_permits(self.bytes);
        }
    }
}

/// A body being spooled.
pub struct Spool<'a> {
    spooler: &'a Spooler,
    mem: BytesMut,
    lease: MemLease,
    file: Option<Arc<std::fs::File>>,
    /// Bytes already in the spill file.
    written: u64,
    /// Bytes on their way to the spill file (written in pieces of [`FILE_CHUNK`]).
    pending: BytesMut,
}

impl Spool<'_> {
    /// Bytes pushed so far.
    pub fn len(&self) -> u64 {
        self.written + (self.mem.len() + self.pending.len()) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub async fn push(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        if self.file.is_none() {
            let want = self.mem.len() + chunk.len();
            if want <= self.spooler.in_memory_body && self.reserve(want) {
                self.mem.extend_from_slice(chunk);
                return Ok(());
            }
            // Too big, or the memory budget is spoken for: to disk from here on. What was in
            // memory keeps its share of the budget until it is written out.
            self.file = Some(Arc::new(self.spooler.spill_file().await?));
            self.pending = std::mem::take(&mut self.mem);
            self.pending.extend_from_slice(chunk);
            self.flush().await?;
            self.lease = MemLease::none(&self.spooler.budget);
            return Ok(());
        }
        self.pending.extend_from_slice(chunk);
        if self.pending.len() >= FILE_CHUNK {
            self.flush().await?;
        }
        Ok(())
    }

    /// Room in memory for `want` bytes, its allocation (not only its length) charged to the
    /// budget: growth doubles, capped at the per-body limit.
    fn reserve(&mut self, want: usize) -> bool {
        let capacity = self.mem.capacity();
        if want <= capacity {
            return true;
        }
        let grown = want.max(capacity * 2).min(self.spooler.in_memory_body);
        if !self.lease.grow(grown - self.lease.bytes) {
            return false;
        }
        // A fresh allocation of exactly that size (a Vec's own growth could pass the charge).
        let mut mem = BytesMut::with_capacity(grown);
        mem.extend_from_slice(&self.mem);
        self.mem = mem;
        true
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        let Some(file) = self.file.clone().filter(|_| !self.pending.is_empty()) else {
            return Ok(());
        };
        let data = std::mem::take(&mut self.pending).freeze();
        let at = self.written;
        self.written += data.len() as u64;
        tokio::task::spawn_blocking(move || file.write_all_at(&data, at))
            .await
            .map_err(std::io::Error::other)?
    }

    /// The whole body, ready to be sent as often as needed.
    pub async fn finish(mut self) -> std::io::Result<Spooled> {
        self.flush().await?;
        let lease = std::mem::replace(&mut self.lease, MemLease::none(&self.spooler.budget));
        Ok(match self.file.take() {
            Some(file) => Spooled::File {
                file,
                len: self.written,
            },
            None => Spooled::Memory {
                bytes: std::mem::take(&mut self.mem).freeze(),
                _lease: Arc::new(lease),
            },
        })
    }
}

/// A spooled body. Clones share it; the memory or file goes with the last clone.
#[derive(Clone)]
pub enum Spooled {
    Memory { bytes: Bytes, _lease: Arc<MemLease> },
    File { file: Arc<std::fs::File>, len: u64 },
}

/// A body already in memory that fencegate made itself (an XML document, an empty body): it
/// holds nothing of the budget.
impl From<Bytes> for Spooled {
    fn from(bytes: Bytes) -> Spooled {
        Spooled::Memory {
            bytes,
            _lease: Arc::new(MemLease::none(&BUDGET)),
        }
    }
}

impl std::fmt::Debug for Spooled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Spooled::Memory { bytes, .. } => write!(f, "Spooled::Memory({} bytes)", bytes.len()),
            Spooled::File { len, .. } => write!(f, "Spooled::File({len} bytes)"),
        }
    }
}

impl Spooled {
    pub fn len(&self) -> u64 {
        match self {
            Spooled::Memory { bytes, .. } => bytes.len() as u64,
            Spooled::File { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The body, when it is in memory.
    pub fn bytes(&self) -> Option<&Bytes> {
        match self {
            Spooled::Memory { bytes, .. } => Some(bytes),
            Spooled::File { .. } => None,
        }
    }

    /// The body as a stream, read from its start.
    pub fn stream(&self) -> ByteStream {
        self.stream_range(0, self.len())
    }

    /// `len` bytes of the body from `start` (clamped to its end), as a stream.
    pub fn stream_range(&self, start: u64, len: u64) -> ByteStream {
        use futures::StreamExt;
        let start = start.min(self.len());
        let end = start.saturating_add(len).min(self.len());
        match self {
            Spooled::Memory { bytes, .. } => {
                let bytes = bytes.slice(start as usize..end as usize);
                futures::stream::once(futures::future::ready(Ok(bytes))).boxed()
            }
            Spooled::File { file, .. } => {
                let (file, len) = (file.clone(), end);
                futures::stream::try_unfold(start, move |at| {
                    let file = file.clone();
                    async move {
                        if at >= len {
                            return Ok(None);
                        }
                        let want = (len - at).min(FILE_CHUNK as u64) as usize;
                        let read = tokio::task::spawn_blocking(move || {
                            let mut buf = vec![0u8; want];
                            file.read_exact_at(&mut buf, at).map(|_| buf)
                        })
                        .await
                        .map_err(std::io::Error::other)
                        .and_then(|r| r);
                        let chunk = read.map_err(|e| {
                            BodyError::Broken(format!("reading a spooled body back: {e}"))
                        })?;
                        Ok(Some((Bytes::from(chunk), at + want as u64)))
                    }
                })
                .boxed()
            }
        }
    }
}

/// A client's body read part by part: the rest of a chunk split at a part boundary is held
/// for the next part.
pub struct PartReader<'a> {
    pub body: &'a mut ByteStream,
    pub held: Option<Bytes>,
}

impl PartReader<'_> {
    pub async fn next(&mut self) -> Option<Result<Bytes, BodyError>> {
        match self.held.take() {
            Some(chunk) => Some(Ok(chunk)),
            None => self.body.next().await,
        }
    }
}

/// One part (or a whole small body), spooled, with its MD5.
pub struct SpooledPart {
    pub body: Spooled,
    pub md5: Md5,
    /// The client's body ended with this part.
    pub ended: bool,
}

impl Spooler {
    /// Spools a whole part block by block, each block of `block` bytes at most: the non-empty
    /// blocks with their MD5s, then the part's MD5 (hex) and size. The store backends that
    /// upload a part as blocks (azure) or pieces (gcs) need the part's MD5, which names them,
    /// before the first goes out.
    pub async fn spool_blocks(
        &self,
        mut body: ByteStream,
        block: u64,
    ) -> Result<(Vec<(Spooled, Vec<u8>)>, String, u64), BackendError> {
        let mut reader = PartReader {
            body: &mut body,
            held: None,
        };
        let mut size = 0u64;
        let mut whole = Md5::new();
        let mut blocks = Vec::new();
        loop {
            let part = self
                .spool_part(&mut reader, block, &mut size, Some(&mut whole))
                .await?;
            let ended = part.ended;
            if !part.body.is_empty() {
                blocks.push((part.body, part.md5.finalize().to_vec()));
            }
            if ended {
                return Ok((blocks, hex::encode(whole.finalize()), size));
            }
        }
    }

    /// Spools the body's next part: up to `limit` bytes, or to the body's end. A chunk that
    /// straddles the limit is split, its rest held back for the next part. `whole`, the digest
    /// of the body so far, takes the part's bytes too.
    pub async fn spool_part(
        &self,
        body: &mut PartReader<'_>,
        limit: u64,
        size: &mut u64,
        mut whole: Option<&mut Md5>,
    ) -> Result<SpooledPart, BackendError> {
        let mut part = self.spool();
        let mut md5 = Md5::new();
        let spool_err = |e: std::io::Error| {
            BackendError::Failing(format!(
                "cannot spool a body on its way to the store: {e}; check the free space in the data directory's spool/"
            ))
        };
        let ended = loop {
            let Some(chunk) = body.next().await else {
                break true;
            };
            let chunk = chunk?;
            let room = (limit - part.len()) as usize;
            if room == 0 {
                body.held = Some(chunk);
                break false;
            }
            let now = if chunk.len() > room {
                body.held = Some(chunk.slice(room..));
                chunk.slice(..room)
            } else {
                chunk
            };
            *size += now.len() as u64;
            md5.update(&now);
            if let Some(whole) = whole.as_deref_mut() {
                whole.update(&now);
            }
            part.push(&now).await.map_err(spool_err)?;
        };
        Ok(SpooledPart {
            body: part.finish().await.map_err(spool_err)?,
            md5,
            ended,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;

    async fn read_back(s: &Spooled) -> Vec<u8> {
        let chunks: Vec<Bytes> = s.stream().try_collect().await.unwrap();
        chunks.concat()
    }

    #[tokio::test]
    async fn small_bodies_stay_in_memory_and_give_their_budget_back() {
        let dir = tempfile::tempdir().unwrap();
        let spooler = Spooler::with_limits(dir.path().to_path_buf(), 1024, 4096);
        let mut spool = spooler.spool();
        spool.push(b"hello ").await.unwrap();
        spool.push(b"world").await.unwrap();
        let body = spool.finish().await.unwrap();
        assert_eq!(body.bytes().map(|b| &b[..]), Some(&b"hello world"[..]));
        // Charged by allocation, which grows by doubling: at least the bytes, at most twice.
        let held = 4096 - spooler.memory_free();
        assert!((11..=22).contains(&held), "{held} bytes charged for 11");
        let copy = body.clone();
        drop(body);
        assert_eq!(4096 - spooler.memory_free(), held, "a clone still holds it");
        assert_eq!(read_back(&copy).await, b"hello world");
        drop(copy);
        assert_eq!(spooler.memory_free(), 4096);
    }

    #[tokio::test]
    async fn a_body_too_big_or_over_budget_spills_to_a_nameless_file_and_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let spooler = Spooler::with_limits(dir.path().to_path_buf(), 1024, 1500);
        // Over the per-body limit: spilled, in pieces that do not line up with FILE_CHUNK.
        let data: Vec<u8> = (0..(3 * FILE_CHUNK + 17))
            .map(|i| (i % 251) as u8)
            .collect();
        let mut spool = spooler.spool();
        for piece in data.chunks(1000) {
            spool.push(piece).await.unwrap();
        }
        assert_eq!(spool.len(), data.len() as u64);
        let big = spool.finish().await.unwrap();
        assert!(big.bytes().is_none());
        assert_eq!(
            spooler.memory_free(),
            1500,
            "a spilled body holds no budget"
        );
        assert_eq!(read_back(&big).await, data);
        assert_eq!(read_back(&big).await, data, "read again from the start");
        // Within the per-body limit but over what is left of the budget: spilled too.
        let mut first = spooler.spool();
        first.push(&[1u8; 1000]).await.unwrap();
        let held = first.finish().await.unwrap();
        assert!(held.bytes().is_some());
        let mut second = spooler.spool();
        second.push(&[2u8; 1000]).await.unwrap();
        let spilled = second.finish().await.unwrap();
        assert!(spilled.bytes().is_none());
        assert_eq!(read_back(&spilled).await, vec![2u8; 1000]);
        // Nameless files: nothing is left in the directory to sweep.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        drop(held);
        assert_eq!(spooler.memory_free(), 1500);
    }
}
