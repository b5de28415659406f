//! One race of the store probe, on any backend: N writers send one conditional write at once,
//! exactly one may win, and the object must then hold the winner's bytes. A store that checks
//! and then writes, without a lock between, passes every check made alone and fails this.

/// One race's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Race {
    /// The request raced: `PutObject`, `CompleteMultipartUpload`, `Put Blob`.
    pub operation: &'static str,
    /// The condition raced: `If-None-Match: *` or `If-Match`.
    pub condition: &'static str,
    pub writers: usize,
    /// Writers the store answered 2xx.
    pub won: usize,
    /// Writers the store refused with 412 (or 409, as AWS answers a conditional write that
    /// collides with another in flight).
    pub refused: usize,
    /// With exactly one winner: whether the object holds its bytes.
    pub kept_winner: Option<bool>,
    /// Answers that were neither (throttling, faults), with the first one's text.
    pub failed: usize,
    pub first_failure: Option<String>,
}

impl Race {
    pub fn held(&self) -> bool {
        self.won == 1 && self.kept_winner == Some(true) && self.failed == 0
    }

    /// What the race found, in words.
    pub fn result(&self) -> String {
        match (self.kept_winner, self.failed) {
            (_, f) if f > 0 => format!(
                "{} of {} won, {f} failed ({})",
                self.won,
                self.writers,
                self.first_failure.as_deref().unwrap_or("")
            ),
            (Some(false), _) => format!(
                "{} of {} won, but another writer's bytes were kept",
                self.won, self.writers
            ),
            _ => format!("{} of {} won", self.won, self.writers),
        }
    }

    /// `If-Match on CompleteMultipartUpload`: the condition as the sequential checks name it.
    pub fn names(&self) -> String {
        format!("{} on {}", self.condition, self.operation)
    }
}
