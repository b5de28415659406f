//! Fencing-token parsing: the one place that decides what a token looks like on the wire.
//!
//! Accepted: 1 to 20 ASCII digits (`0`-`9`) whose value fits in a u64. Leading zeros are
//! allowed (`007` is 7) so that zero-padded tokens from lock services work. Nothing else is
//! accepted: no sign, no whitespace, no `0x`, no separators, no list (`5,6`), no second header.

use std::fmt;

/// A fencing token. Bigger is newer; tokens are only comparable inside one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(pub u64);

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Why a token was refused; the text is shown to the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is empty; send a decimal unsigned 64-bit integer such as 34")]
    Empty,
    #[error(
        "the token may only contain the digits 0-9 (no sign, spaces, `0x` or lists); got {0:?}"
    )]
    NotDigits(String),
    #[error("the token is not an unsigned 64-bit integer of at most 20 digits (max 18446744073709551615); got {0:?}")]
    Overflow(String),
    #[error("the token header was sent more than once; send exactly one Fencing-Token")]
    Repeated,
    #[error("{what} carries token {other} but {first} was given {by}; send one token, or the same in both")]
    Disagree {
        first: u64,
        other: u64,
        by: &'static str,
        what: &'static str,
    },
}

/// The longest decimal u64 (18446744073709551615) has 20 digits.
const MAX_DIGITS: usize = 20;

/// Parses a token from raw header bytes (which need not be UTF-8).
pub fn parse_token(raw: &[u8]) -> Result<Token, TokenError> {
    let shown = || String::from_utf8_lossy(&raw[..raw.len().min(64)]).into_owned();
    if raw.is_empty() {
        return Err(TokenError::Empty);
    }
    if !raw.iter().all(u8::is_ascii_digit) {
        return Err(TokenError::NotDigits(shown()));
    }
    if raw.len() > MAX_DIGITS {
        return Err(TokenError::Overflow(shown()));
    }
    let mut value: u64 = 0;
    for d in raw {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or_else(|| TokenError::Overflow(shown()))?;
    }
    Ok(Token(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_decimals() {
        assert_eq!(parse_token(b"0"), Ok(Token(0)));
        assert_eq!(parse_token(b"34"), Ok(Token(34)));
        assert_eq!(parse_token(b"007"), Ok(Token(7)));
        assert_eq!(parse_token(b"18446744073709551615"), Ok(Token(u64::MAX)));
        assert_eq!(parse_token(b"00000000000000000034"), Ok(Token(34)));
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            &b"-1"[..],
            b"+1",
            b"0x10",
            b" 5",
            b"5 ",
            b"5,6",
            b"1e3",
            b"1.0",
            b"\xff",
            b"\x005",
            "٣".as_bytes(),
        ] {
            assert!(
                matches!(parse_token(bad), Err(TokenError::NotDigits(_))),
                "{bad:?}"
            );
        }
        assert_eq!(parse_token(b""), Err(TokenError::Empty));
        assert!(matches!(
            parse_token(b"18446744073709551616"),
            Err(TokenError::Overflow(_))
        ));
        assert!(matches!(
            parse_token(b"000000000000000000001"),
            Err(TokenError::Overflow(_))
        ));
        assert!(matches!(
            parse_token(b"99999999999999999999"),
            Err(TokenError::Overflow(_))
        ));
    }
}
