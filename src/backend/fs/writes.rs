//! Large bodies into files: each chunk hashed once (MD5) as it arrives, gathered without a
//! copy into batches of about [`WRITE_BATCH`], and each batch written by one vectored write
//! on a blocking thread while the next is gathered. Writing chunk by chunk through
//! `tokio::fs::File` copied every chunk into its buffer and took a trip to a blocking thread
//! for each one.

use super::*;
use bytes::Bytes;
use std::io::{IoSlice, Write};

/// How much of a body one trip to a blocking thread writes.
pub(super) const WRITE_BATCH: usize = 1 << 20;

/// A body's bytes so far: its MD5 and size.
pub(super) struct Written {
    pub(super) file: std::fs::File,
    pub(super) md5: Md5,
    pub(super) size: u64,
}

/// Writes `head` (chunks read and hashed already) and then the rest of `body` into `file`, which must be at its end. Returns
/// the file (every byte written, none fsynced), with the MD5 (`md5` carried on) and size of
/// what was written. An error of the body or of a write ends it; the caller removes the file.
pub(super) async fn write_body(
    file: std::fs::File,
    head: Vec<Bytes>,
    mut md5: Md5,
    body: &mut ByteStream,
) -> Result<Written, BackendError> {
    let mut batched: usize = head.iter().map(Bytes::len).sum();
    let mut size = batched as u64;
    let mut batch = head;
    // The file is with the write in flight, or here between writes.
    let mut idle = Some(file);
    let mut in_flight: Option<tokio::task::JoinHandle<std::io::Result<std::fs::File>>> = None;
    let mut ended = false;
    while !ended {
        match body.next().await {
            Some(chunk) => {
                let chunk = chunk?;
                md5.update(&chunk);
                size += chunk.len() as u64;
                batched += chunk.len();
                batch.push(chunk);
            }
            None => ended = true,
        }
        if batched >= WRITE_BATCH || (ended && !batch.is_empty()) {
            let mut file = match (idle.take(), in_flight.take()) {
                (Some(file), _) => file,
                (None, Some(write)) => joined(write.await)?,
                (None, None) => unreachable!("the file is either idle or being written"),
            };
            let chunks = std::mem::take(&mut batch);
            batched = 0;
            in_flight = Some(tokio::task::spawn_blocking(move || {
                write_chunks(&mut file, &chunks)?;
                Ok(file)
            }));
        }
    }
    let file = match (idle, in_flight) {
        (Some(file), _) => file,
        (None, Some(write)) => joined(write.await)?,
        (None, None) => unreachable!("the file is either idle or being written"),
    };
    Ok(Written { file, md5, size })
}

fn joined(
    write: Result<std::io::Result<std::fs::File>, tokio::task::JoinError>,
) -> Result<std::fs::File, BackendError> {
    write
        .map_err(|e| BackendError::Failing(format!("a file task failed: {e}")))?
        .map_err(BackendError::from)
}

/// Writes every byte of `chunks`, in as few `writev` calls as the kernel allows.
pub(super) fn write_chunks(file: &mut std::fs::File, chunks: &[Bytes]) -> std::io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = chunks.iter().map(|c| IoSlice::new(c)).collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        match file.write_vectored(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_is_written_whole_in_order_and_hashed_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        // Chunks of odd sizes around the batch size, so that batches split mid-body.
        let chunks: Vec<Bytes> = (0..40u32)
            .map(|i| {
                Bytes::from(vec![
                    (i % 251) as u8;
                    100_003 + (i as usize * 7_919) % 65_536
                ])
            })
            .collect();
        let expected: Vec<u8> = b"head"
            .iter()
            .copied()
            .chain(chunks.iter().flat_map(|c| c.to_vec()))
            .collect();
        let mut body: ByteStream = Box::pin(futures::stream::iter(chunks.into_iter().map(Ok)));
        let mut md5 = Md5::new();
        md5.update(b"head");
        let file = std::fs::File::create(&path).unwrap();
        let written = write_body(file, vec![Bytes::from_static(b"head")], md5, &mut body)
            .await
            .unwrap();
        assert_eq!(written.size, expected.len() as u64);
        drop(written.file);
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        assert_eq!(
            hex::encode(written.md5.finalize()),
            hex::encode(Md5::digest(&expected))
        );
    }

    #[tokio::test]
    async fn a_broken_body_ends_the_write_with_its_error() {
        let dir = tempfile::tempdir().unwrap();
        let chunks = vec![
            Ok(Bytes::from(vec![1u8; WRITE_BATCH + 1])),
            Err(crate::backend::BodyError::Broken("reset".into())),
        ];
        let mut body: ByteStream = Box::pin(futures::stream::iter(chunks));
        let file = std::fs::File::create(dir.path().join("f")).unwrap();
        let err = write_body(file, Vec::new(), Md5::new(), &mut body)
            .await
            .err()
            .unwrap();
        assert!(err.to_string().contains("reset"), "{err}");
    }
}
