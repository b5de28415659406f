//! Cluster mode's clock watch (docs/design.md, "Bounded intents"). Every instance decides that
//! another instance's intent has ended by its own clock, and the store refuses that intent's
//! request by the store's clock; the bound holds only while no instance's clock runs ahead of
//! the store's by more than `max_clock_skew_ms`. The start-up probe checks that once; this
//! watch checks it again every few seconds, because clocks drift. While an instance's clock is
//! found too far ahead, it does not decide over any intent whose deadline its clock says has
//! passed (503 `ClockSkewed`); everything else goes on.

use super::{Gate, GateError};
use std::sync::Arc;
use std::time::Duration;

impl Gate {
    /// `Err(ClockSkewed)` while the clock watch finds this instance's clock too far ahead of
    /// a store's: called before deciding that an intent's deadline has passed.
    pub(super) fn clock_trusted(&self) -> Result<(), GateError> {
        match &*self.clock_verdict.lock() {
            None => Ok(()),
            Some(reason) => Err(GateError::ClockSkewed(reason.clone())),
        }
    }

    /// Why this instance's clock is not trusted now (`None`: it is, or no clock is watched).
    pub fn clock_verdict(&self) -> Option<String> {
        self.clock_verdict.lock().clone()
    }

    /// Sets the watch's verdict (`None`: the clock is within bounds).
    pub fn set_clock_verdict(&self, verdict: Option<String>) {
        let mut current = self.clock_verdict.lock();
        match (&*current, &verdict) {
            (None, Some(reason)) => {
                tracing::error!(%reason, "this instance's clock runs too far ahead of the store's: it no longer decides over other instances' commits until the clock is back within max_clock_skew_ms")
            }
            (Some(_), None) => tracing::info!(
                "this instance's clock is back within max_clock_skew_ms of the store's"
            ),
            _ => {}
        }
        crate::metrics::clock_skewed(verdict.is_some());
        *current = verdict;
    }

    /// Compares this instance's clock with every store's once and records the verdict. A store
    /// that cannot be reached leaves the verdict as it was (its requests fail anyway).
    pub async fn check_clocks(&self) {
        let Some(bound) = self.intents else { return };
        let backends: Vec<_> = self
            .buckets
            .read()
            .values()
            .map(|e| Arc::clone(&e.backend))
            .collect();
        let skew = bound.skew.as_millis() as i64;
        let mut verdict = None;
        for backend in backends {
            match backend.clock_offset().await {
                None => continue,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "clock watch: no answer from the store");
                    return;
                }
                Some(Ok((ahead_min, ahead_max))) => {
                    crate::metrics::clock_ahead_ms((ahead_min + ahead_max) as f64 / 2.0);
                    if ahead_min > skew {
                        verdict = Some(format!(
                            "this instance's clock runs at least {ahead_min} ms ahead of the store's, more than max_clock_skew_ms = {skew}; synchronise the clocks (NTP), or send the request to another instance"
                        ));
                    }
                }
            }
        }
        self.set_clock_verdict(verdict);
    }

    /// Runs [`Gate::check_clocks`] every `every`, for as long as the process runs.
    pub fn watch_clocks(self: &Arc<Self>, every: Duration, shutdown: &crate::shutdown::Shutdown) {
        if self.intents.is_none() {
            return;
        }
        let gate = Arc::downgrade(self);
        shutdown.spawn_background(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(gate) = gate.upgrade() else { return };
                gate.check_clocks().await;
            }
        });
    }
}
