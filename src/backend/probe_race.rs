//! One race of the store probe, on any backend: N writers send one conditional write at once,
//! exactly one may win, and the object must then hold the winner's bytes. A store that checks
//! and then writes, without a lock between, passes every check made alone and fails this.

/// One writer's answer in a race.
pub enum Answer {
    /// A 2xx.
    Won,
    /// The condition refused it (412, or 409 as AWS answers a collision in flight).
    Refused,
    /// Anything else, in words.
    Failed(String),
}

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
    /// The race of `operation` with `condition`, from its writers' answers in order; with
    /// exactly one winner, also its index (whose bytes the object must then hold).
    pub fn tally(
        operation: &'static str,
        condition: &'static str,
        answers: Vec<Answer>,
    ) -> (Race, Option<usize>) {
        let mut race = Race {
            operation,
            condition,
            writers: answers.len(),
            won: 0,
            refused: 0,
            kept_winner: None,
            failed: 0,
            first_failure: None,
        };
        let mut winner = None;
        for (i, answer) in answers.into_iter().enumerate() {
            match answer {
                Answer::Won => {
                    race.won += 1;
                    winner = Some(i);
                }
                Answer::Refused => race.refused += 1,
                Answer::Failed(e) => {
                    race.failed += 1;
                    race.first_failure.get_or_insert(e);
                }
            }
        }
        let winner = winner.filter(|_| race.won == 1);
        (race, winner)
    }

    /// A race every writer lost by the condition: no condition explains it, since the object
    /// was new, so the service refuses what it should take.
    pub fn nobody_won(&self) -> Option<String> {
        (self.won == 0 && self.failed == 0).then(|| {
            format!(
                "the service refused all {} writers creating one new object with {}, which no condition explains",
                self.writers,
                self.names()
            )
        })
    }

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
