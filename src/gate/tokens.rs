//! Judging a request's token: the bucket's fencing mode (is a token required, ignored?), and a
//! token against its scope's highest (stale, not increasing, too far ahead).

use super::{Gate, GateError, TokenInput};
use crate::config::{BucketPolicy, FencingMode, TokenOrder};
use crate::fence::FenceRow;
use crate::token::Token;

/// How a bucket judges a token against its scope's highest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenRules {
    pub order: TokenOrder,
    pub max_jump: Option<u64>,
}

impl From<&BucketPolicy> for TokenRules {
    fn from(p: &BucketPolicy) -> TokenRules {
        TokenRules {
            order: p.tokens,
            max_jump: p.max_token_jump,
        }
    }
}

/// Compares a token with a scope's highest (docs/threat-model.md, promise 1). Under
/// strictly-increasing tokens an equal token is refused, except once after a fence advance or
/// a lease grant recorded it (`fresh`): that is how its holder writes at all. A token more than
/// the bucket's `max_token_jump` above the highest is refused too.
pub(crate) fn check_token(
    rules: impl Into<TokenRules>,
    token: u64,
    row: &FenceRow,
    scope: &str,
) -> Result<(), GateError> {
    let TokenRules { order, max_jump } = rules.into();
    let highest = row.highest.unwrap_or(0);
    if let Some(limit) = max_jump.filter(|l| token > highest.saturating_add(*l)) {
        return Err(GateError::TokenJumpTooLarge {
            token,
            highest,
            limit,
            scope: scope.to_string(),
        });
    }
    match row.highest {
        Some(h) if token < h => Err(GateError::StaleFencingToken {
            token,
            highest: h,
            scope: scope.to_string(),
            floor: row.judged_by_floor(),
        }),
        Some(h) if token == h && order == TokenOrder::StrictlyIncreasing && !row.fresh => {
            Err(GateError::TokenNotIncreasing {
                token,
                scope: scope.to_string(),
                floor: row.judged_by_floor(),
            })
        }
        _ => Ok(()),
    }
}

impl Gate {
    /// Applies the bucket's fencing mode to the token the client sent.
    pub(super) fn admit(
        bucket: &str,
        policy: &BucketPolicy,
        token: TokenInput,
        is_delete: bool,
    ) -> Result<Option<Token>, GateError> {
        let mode = match policy.fencing {
            FencingMode::Required if is_delete && !policy.fenced_deletes => FencingMode::Optional,
            mode => mode,
        };
        match (mode, token) {
            (FencingMode::Off, _) => Ok(None),
            (_, Err(e)) => Err(e.into()),
            (FencingMode::Required, Ok(None)) => Err(GateError::FencingTokenRequired {
                bucket: bucket.to_string(),
            }),
            (_, Ok(t)) => Ok(t),
        }
    }
}
