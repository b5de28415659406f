//! Writes in flight per bucket, so that DeleteBucket never answers while a write that could
//! still land in the bucket is running (docs/history.md, review round 2).
//!
//! Every write, delete and upload creation holds a [`WriteTicket`] from its admission until
//! its commit task ends (the ticket moves into the task). DeleteBucket first marks the bucket
//! closing, then counts tickets: with both sides using sequentially consistent operations,
//! either the writer sees the mark and is refused, or the delete sees the ticket and is.

use super::{BucketEntry, GateError};
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

#[derive(Debug, Default)]
pub struct InFlight {
    writes: AtomicUsize,
    closing: AtomicBool,
}

/// A write admitted to its bucket; the bucket cannot be deleted while it lives.
pub struct WriteTicket(Arc<BucketEntry>);

impl WriteTicket {
    pub(super) fn take(entry: Arc<BucketEntry>, bucket: &str) -> Result<WriteTicket, GateError> {
        entry.in_flight.writes.fetch_add(1, SeqCst);
        let ticket = WriteTicket(entry);
        if ticket.0.in_flight.closing.load(SeqCst) {
            return Err(GateError::BucketClosing(bucket.to_string()));
        }
        Ok(ticket)
    }
}

impl Deref for WriteTicket {
    type Target = BucketEntry;
    fn deref(&self) -> &BucketEntry {
        &self.0
    }
}

impl Drop for WriteTicket {
    fn drop(&mut self) {
        self.0.in_flight.writes.fetch_sub(1, SeqCst);
    }
}

/// A bucket closed to new writes while DeleteBucket checks that it is empty. Dropped without
/// [`Closing::finish`], it reopens the bucket.
pub struct Closing {
    entry: Arc<BucketEntry>,
    finished: bool,
}

impl Closing {
    /// Closes `entry` to new writes; refused while any write is in flight.
    pub(super) fn close(entry: Arc<BucketEntry>, bucket: &str) -> Result<Closing, GateError> {
        if entry.in_flight.closing.swap(true, SeqCst) {
            return Err(GateError::BucketClosing(bucket.to_string()));
        }
        let closing = Closing {
            entry,
            finished: false,
        };
        if closing.entry.in_flight.writes.load(SeqCst) > 0 {
            return Err(GateError::BucketBusy(bucket.to_string()));
        }
        Ok(closing)
    }

    /// The bucket is gone: it stays closed, so a request that found it just before its removal
    /// is refused too.
    pub(super) fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for Closing {
    fn drop(&mut self) {
        if !self.finished {
            self.entry.in_flight.closing.store(false, SeqCst);
        }
    }
}
