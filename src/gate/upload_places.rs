//! A place among the open uploads, taken before an upload is created and held until its
//! record is made, so that creates at once cannot all pass one check of the bounds
//! (`[limits]` open uploads per key and per bucket). Here, places are counted with the uploads
//! open on this instance; on a shared table, with the counts every instance keeps there.

use super::{shared, UploadRegistry};
use crate::gate::GateError;
use parking_lot::Mutex;
use std::sync::Arc;

/// A place among the open uploads, held while an upload is created.
pub struct Reservation(pub(super) Place);

pub(super) enum Place {
    /// Counted with the uploads open here until dropped, after the upload's record is made.
    Local { _place: LocalPlace },
    /// The counts as read when there was room: the first swap that records the upload
    /// compares them, and the bounds are checked again at that swap.
    Shared(shared::Counts, (usize, usize)),
}

pub(super) struct LocalPlace {
    reserved: Arc<Mutex<Vec<(String, String)>>>,
    entry: (String, String),
}

impl Drop for LocalPlace {
    fn drop(&mut self) {
        let mut reserved = self.reserved.lock();
        if let Some(i) = reserved.iter().position(|e| *e == self.entry) {
            reserved.swap_remove(i);
        }
    }
}

impl UploadRegistry {
    /// Takes a place for an upload of `owner` in `bucket`, or says which bound is reached.
    /// On a shared table this reads the counts every instance keeps (two reads at once), so
    /// that a create past a bound is refused before the store is asked for anything; the
    /// bounds are enforced by [`UploadRegistry::insert`], where creates through several
    /// instances at once are ordered.
    pub async fn reserve(
        &self,
        bucket: &str,
        owner: &str,
        (per_key, per_bucket): (usize, usize),
    ) -> Result<Result<Reservation, &'static str>, GateError> {
        if let Some(records) = self.records() {
            let counts = shared::Counts::read(records, bucket, owner).await?;
            return Ok(counts
                .room((per_key, per_bucket))
                .map(|()| Reservation(Place::Shared(counts, (per_key, per_bucket)))));
        }
        // Here uploads are counted under the reservations' lock: one being created is either
        // reserved or recorded (its place is released after its record), never neither.
        let mut reserved = self.reserved.lock();
        let mut in_bucket = reserved.iter().filter(|(b, _)| b == bucket).count();
        let mut owned = reserved.iter().filter(|(_, o)| o == owner).count();
        for e in self.entries() {
            let state = e.state.lock();
            in_bucket += usize::from(state.upload.bucket == bucket);
            owned += usize::from(state.upload.owner.as_deref() == Some(owner));
        }
        if owned >= per_key {
            return Ok(Err("per_key"));
        }
        if in_bucket >= per_bucket {
            return Ok(Err("per_bucket"));
        }
        let entry = (bucket.to_string(), owner.to_string());
        reserved.push(entry.clone());
        Ok(Ok(Reservation(Place::Local {
            _place: LocalPlace {
                reserved: Arc::clone(&self.reserved),
                entry,
            },
        })))
    }
}
