//! `If-Match` / `If-None-Match` as the gate understands them, parsed by the surfaces.

use super::error::GateError;

/// One conditional header's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtagMatch {
    /// `*`: any existing version.
    Any,
    /// A list of entity tags, stored without quotes or `W/`.
    Tags(Vec<String>),
}

impl EtagMatch {
    /// Parses a header value: `*`, or a comma-separated list of (optionally quoted) ETags.
    /// `*` inside a list (also from repeated header lines) is malformed: refused, not guessed.
    pub fn parse(value: &str) -> Option<EtagMatch> {
        let value = value.trim();
        if value == "*" {
            return Some(EtagMatch::Any);
        }
        let tags: Vec<String> = value
            .split(',')
            .map(|t| normalize(t.trim()).to_string())
            .filter(|t| !t.is_empty())
            .collect();
        if tags.iter().any(|t| t == "*") {
            return None;
        }
        (!tags.is_empty()).then_some(EtagMatch::Tags(tags))
    }

    /// Does this condition match an object with `etag` (`None`: no object)?
    pub fn matches(&self, etag: Option<&str>) -> bool {
        match (self, etag) {
            (_, None) => false,
            (EtagMatch::Any, Some(_)) => true,
            (EtagMatch::Tags(tags), Some(e)) => tags.iter().any(|t| t == normalize(e)),
        }
    }
}

fn normalize(tag: &str) -> &str {
    let tag = tag.strip_prefix("W/").unwrap_or(tag);
    tag.trim_matches('"')
}

/// The client's conditions on a write or delete.
#[derive(Debug, Clone, Default)]
pub struct Conditions {
    pub if_match: Option<EtagMatch>,
    pub if_none_match: Option<EtagMatch>,
    /// A rewrite of an object read whole (a change of its tags): the object must still be that
    /// version with that metadata under the scope's lock. An ETag alone would pass a newer
    /// write of the same bytes, whose metadata the rewrite would then undo.
    pub if_unchanged: Option<Box<crate::backend::ObjectInfo>>,
}

impl Conditions {
    /// Whether the object as it is now (`current`, read under the scope's lock) is still the
    /// one [`Self::if_unchanged`] names; always when that condition is not set.
    pub fn unchanged(&self, current: Option<&crate::backend::ObjectInfo>) -> Result<(), GateError> {
        let Some(seen) = &self.if_unchanged else {
            return Ok(());
        };
        match current {
            Some(now) if now.version == seen.version && now.etag == seen.etag && now.meta == seen.meta => Ok(()),
            _ => Err(GateError::PreconditionFailed(
                "the object changed since it was read for this rewrite (another write landed in between); read it again and retry".into(),
            )),
        }
    }
}

impl Conditions {
    /// [`Self::check`] as the gate answers it: If-Match on an object that does not exist is
    /// 404 NoSuchKey, as S3 documents; any other failed condition is 412.
    pub fn judge(&self, current: Option<&str>, bucket: &str, key: &str) -> Result<(), GateError> {
        if self.if_match.is_some() && current.is_none() {
            return Err(GateError::NoSuchKey {
                bucket: bucket.to_string(),
                key: key.to_string(),
            });
        }
        self.check(current).map_err(GateError::PreconditionFailed)
    }

    /// Checks the conditions against the object's current ETag.
    pub fn check(&self, current: Option<&str>) -> Result<(), String> {
        if let Some(m) = &self.if_match {
            if !m.matches(current) {
                return Err(match current {
                    None => "If-Match was sent but the object does not exist".into(),
                    Some(e) => format!("If-Match does not match the current ETag {e}"),
                });
            }
        }
        if let Some(m) = &self.if_none_match {
            if m.matches(current) {
                return Err(format!(
                    "If-None-Match matches the current ETag {}",
                    current.unwrap_or_default()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_match() {
        let any = EtagMatch::parse("*").unwrap();
        assert!(any.matches(Some("\"x\"")));
        assert!(!any.matches(None));
        let tags = EtagMatch::parse("\"a\", W/\"b\"").unwrap();
        assert!(tags.matches(Some("\"b\"")));
        assert!(tags.matches(Some("a")));
        assert!(!tags.matches(Some("\"c\"")));
        assert_eq!(EtagMatch::parse(" , "), None);
    }

    #[test]
    fn conditions() {
        let create_only = Conditions {
            if_none_match: Some(EtagMatch::Any),
            ..Default::default()
        };
        assert!(create_only.check(None).is_ok());
        assert!(create_only.check(Some("\"e\"")).is_err());
        let replace = Conditions {
            if_match: EtagMatch::parse("\"e\""),
            ..Default::default()
        };
        assert!(replace.check(Some("\"e\"")).is_ok());
        assert!(replace.check(Some("\"f\"")).is_err());
        assert!(replace.check(None).is_err());
    }
}
