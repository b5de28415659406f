//! Numbers, booleans, durations and sizes as the configuration accepts them: as TOML writes
//! them, and as environment variables do, which are always strings. A `*_secs` or `*_ms` field
//! takes a plain integer in its unit (`30`, `"30"`) or a humantime duration (`"30s"`, `"5m"`,
//! `"1h 30m"`); a `*_bytes` field takes a plain integer of bytes or a bytesize size
//! (`"64MiB"`, `"5GiB"`, `"5GB"`). Field names keep their unit, so a plain number means what it
//! always did.

use serde::de::{self, Deserializer, Visitor};
use std::fmt;
use std::time::Duration;

/// A value as it was written, before its unit is applied.
enum Raw {
    /// JSON's `null` (an unset optional field in `buckets.json`).
    Null,
    Int(u64),
    Text(String),
    Bool(bool),
}

struct RawVisitor(&'static str);

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Raw, E> {
        Ok(Raw::Int(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Raw, E> {
        u64::try_from(v)
            .map(Raw::Int)
            .map_err(|_| E::custom(format!("{v} is negative; expected {}", self.0)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Raw, E> {
        Ok(Raw::Text(v.trim().to_string()))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Raw, E> {
        Ok(Raw::Bool(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Raw, E> {
        Ok(Raw::Null)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Raw, E> {
        Ok(Raw::Null)
    }
}

fn raw<'de, D: Deserializer<'de>>(d: D, expecting: &'static str) -> Result<Raw, D::Error> {
    d.deserialize_any(RawVisitor(expecting))
}

fn plain_integer(text: &str) -> Option<Result<u64, String>> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())).then(|| {
        text.parse::<u64>()
            .map_err(|_| format!("{text} is larger than 18446744073709551615"))
    })
}

/// The longest duration any field takes: longer ones overflow the clock arithmetic of the
/// timers they set (a grace of u64::MAX seconds would panic every request made with lease
/// credentials).
const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A duration in whole units of `unit` (1 s or 1 ms), at most [`LONGEST`].
fn duration<'de, D: Deserializer<'de>>(
    d: D,
    unit: Duration,
    unit_name: &'static str,
    expecting: &'static str,
) -> Result<u64, D::Error> {
    let n = unbounded_duration(d, unit, unit_name, expecting)?;
    if u128::from(n) * unit.as_nanos() > LONGEST.as_nanos() {
        return Err(de::Error::custom(format!(
            "{n} {unit_name} is longer than 100 years, the longest duration fencegate takes"
        )));
    }
    Ok(n)
}

fn unbounded_duration<'de, D: Deserializer<'de>>(
    d: D,
    unit: Duration,
    unit_name: &'static str,
    expecting: &'static str,
) -> Result<u64, D::Error> {
    let text = match raw(d, expecting)? {
        Raw::Int(n) => return Ok(n),
        Raw::Bool(_) | Raw::Null => return Err(de::Error::custom(format!("expected {expecting}"))),
        Raw::Text(t) => t,
    };
    if let Some(n) = plain_integer(&text) {
        return n.map_err(de::Error::custom);
    }
    let parsed = humantime::parse_duration(&text).map_err(|e| {
        de::Error::custom(format!(
            "{text:?} is not a duration ({e}); expected {expecting}"
        ))
    })?;
    let units = parsed.as_nanos() / unit.as_nanos();
    if parsed.as_nanos() % unit.as_nanos() != 0 {
        return Err(de::Error::custom(format!(
            "{text:?} is not a whole number of {unit_name}"
        )));
    }
    u64::try_from(units).map_err(|_| de::Error::custom(format!("{text:?} is too long")))
}

/// A `*_secs` field: `30`, `"30"`, `"30s"`, `"5m"`.
pub fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    duration(
        d,
        Duration::from_secs(1),
        "seconds",
        "a number of seconds or a duration such as \"30s\", \"5m\" or \"1h\"",
    )
}

/// A `*_ms` field: `2000`, `"2000"`, `"2s"`, `"1500ms"`.
pub fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    duration(
        d,
        Duration::from_millis(1),
        "milliseconds",
        "a number of milliseconds or a duration such as \"2s\" or \"500ms\"",
    )
}

/// A `*_bytes` field: `5368709120`, `"5368709120"`, `"5GiB"`, `"64MiB"`.
pub fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    const EXPECTING: &str = "a number of bytes or a size such as \"64MiB\" or \"5GiB\"";
    let text = match raw(d, EXPECTING)? {
        Raw::Int(n) => return Ok(n),
        Raw::Bool(_) | Raw::Null => return Err(de::Error::custom(format!("expected {EXPECTING}"))),
        Raw::Text(t) => t,
    };
    if let Some(n) = plain_integer(&text) {
        return n.map_err(de::Error::custom);
    }
    let size = text
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| {
            de::Error::custom(format!(
                "{text:?} is not a size ({e}); expected {EXPECTING}"
            ))
        })?;
    // bytesize saturates and truncates: "99999999999999EiB" would be u64::MAX and "1.9B" one
    // byte. Neither is what was written.
    if size == u64::MAX {
        return Err(de::Error::custom(format!(
            "{text:?} is larger than 18446744073709551615 bytes"
        )));
    }
    let unit = text.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == ' ');
    if text.contains('.') && (unit.is_empty() || unit.eq_ignore_ascii_case("b")) {
        return Err(de::Error::custom(format!(
            "{text:?} is not a whole number of bytes"
        )));
    }
    Ok(size)
}

/// A `*_bytes` field held as a `usize`.
pub fn bytes_usize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = bytes(d)?;
    usize::try_from(n).map_err(|_| de::Error::custom(format!("{n} bytes is too large")))
}

/// A count: `10000` or `"10000"`.
pub fn int<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<T, D::Error> {
    opt_int_of(d)?.ok_or_else(|| de::Error::custom("expected a non-negative integer"))
}

/// An optional count: `null` (JSON) is `None`.
pub fn opt_int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    opt_int_of(d)
}

fn opt_int_of<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<Option<T>, D::Error> {
    const EXPECTING: &str = "a non-negative integer";
    let n = match raw(d, EXPECTING)? {
        Raw::Null => return Ok(None),
        Raw::Int(n) => n,
        Raw::Bool(_) => return Err(de::Error::custom(format!("expected {EXPECTING}"))),
        Raw::Text(t) => match plain_integer(&t) {
            Some(n) => n.map_err(de::Error::custom)?,
            None => {
                return Err(de::Error::custom(format!(
                    "{t:?} is not a number; expected {EXPECTING}"
                )))
            }
        },
    };
    T::try_from(n)
        .map(Some)
        .map_err(|_| de::Error::custom(format!("{n} is out of range")))
}

/// `true` or `false`, as a TOML boolean or a string.
pub fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    opt_boolean(d)?.ok_or_else(|| de::Error::custom("expected true or false"))
}

/// An optional boolean: `null` (JSON) is `None`.
pub fn opt_boolean<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    const EXPECTING: &str = "true or false";
    match raw(d, EXPECTING)? {
        Raw::Null => Ok(None),
        Raw::Bool(b) => Ok(Some(b)),
        Raw::Text(t) if t.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Raw::Text(t) if t.eq_ignore_ascii_case("false") => Ok(Some(false)),
        Raw::Text(t) => Err(de::Error::custom(format!(
            "{t:?} is not a boolean; expected {EXPECTING}"
        ))),
        Raw::Int(n) => Err(de::Error::custom(format!(
            "{n} is not a boolean; expected {EXPECTING}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    struct Probe {
        #[serde(default, deserialize_with = "super::secs")]
        s: u64,
        #[serde(default, deserialize_with = "super::millis")]
        ms: u64,
        #[serde(default, deserialize_with = "super::bytes")]
        b: u64,
        #[serde(default, deserialize_with = "super::int")]
        n: u32,
        #[serde(default, deserialize_with = "super::boolean")]
        flag: bool,
    }

    fn probe(text: &str) -> Result<Probe, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn durations_take_integers_and_humantime() {
        assert_eq!(probe("s = 30").unwrap().s, 30);
        assert_eq!(probe("s = \"30\"").unwrap().s, 30);
        assert_eq!(probe("s = \"30s\"").unwrap().s, 30);
        assert_eq!(probe("s = \"5m\"").unwrap().s, 300);
        assert_eq!(probe("s = \"1h 30m\"").unwrap().s, 5400);
        assert_eq!(probe("ms = \"2s\"").unwrap().ms, 2000);
        assert_eq!(probe("ms = \"1500ms\"").unwrap().ms, 1500);
        assert!(probe("s = \"1500ms\"")
            .unwrap_err()
            .contains("whole number of seconds"));
        assert!(probe("s = \"soon\"")
            .unwrap_err()
            .contains("not a duration"));
        assert!(probe("s = -1").unwrap_err().contains("negative"));
        assert!(probe("s = true").is_err());
        assert!(probe("s = 1.5").is_err());
    }

    #[test]
    fn sizes_and_durations_that_mean_something_else_are_refused() {
        // bytesize would saturate or truncate these sizes, and durations past LONGEST would
        // overflow the timers they set.
        assert!(probe(r#"b = "1.9B""#).is_err());
        assert!(probe(r#"b = "99999999999999EiB""#).is_err());
        assert!(probe(r#"s = "18446744073709551615""#).is_err());
        assert!(probe(r#"ms = "18446744073709551615""#).is_err());
        assert!(probe(r#"s = "101y""#).is_err());
        assert_eq!(probe(r#"s = "99y""#).unwrap().s, 99 * 31_557_600);
        assert_eq!(probe(r#"b = "1.5KiB""#).unwrap().b, 1536);
    }

    #[test]
    fn sizes_take_integers_and_units() {
        assert_eq!(probe("b = 5368709120").unwrap().b, 5 * 1024 * 1024 * 1024);
        assert_eq!(probe("b = \"5GiB\"").unwrap().b, 5 * 1024 * 1024 * 1024);
        assert_eq!(probe("b = \"64MiB\"").unwrap().b, 64 * 1024 * 1024);
        assert_eq!(probe("b = \"5GB\"").unwrap().b, 5_000_000_000);
        assert!(probe("b = \"lots\"").unwrap_err().contains("not a size"));
    }

    #[test]
    fn a_policy_round_trips_through_json_with_its_unset_fields() {
        let policy = crate::config::BucketPolicy::default();
        let json = serde_json::to_string(&policy).unwrap();
        assert!(json.contains("\"max_token_jump\":null"), "{json}");
        let back: crate::config::BucketPolicy = serde_json::from_str(&json).unwrap();
        assert_eq!(back.max_token_jump, None);
        let backend: crate::config::S3BackendConfig = serde_json::from_str(
            &serde_json::to_string(&crate::config::S3BackendConfig::default()).unwrap(),
        )
        .unwrap();
        assert_eq!(backend.path_style, None);
    }

    #[test]
    fn counts_and_booleans_take_strings() {
        assert_eq!(probe("n = \"10000\"").unwrap().n, 10000);
        assert!(probe("n = 5000000000")
            .unwrap_err()
            .contains("out of range"));
        assert!(probe("n = \"ten\"").unwrap_err().contains("not a number"));
        assert!(probe("flag = \"true\"").unwrap().flag);
        assert!(!probe("flag = \"FALSE\"").unwrap().flag);
        assert!(probe("flag = \"yes please\"").is_err());
    }
}
