//! The `[backends.NAME]` tables: names, the features each kind needs in this build, and each
//! kind's own refusals (s3's credentials and opt-ins, azure's SAS token and block size, gcs's
//! commit deadline and block size).

use super::Places;
use crate::config::BackendConfig;
use crate::config::{ConfigError, DEFAULT_BACKEND};
use std::collections::BTreeMap;

/// `[backends.*]`: names, and an s3 backend's credentials, part size and timeouts. An fs
/// backend named `local` when none is configured.
pub(super) fn backends(
    raw: BTreeMap<String, BackendConfig>,
    places: &Places,
) -> Result<BTreeMap<String, BackendConfig>, ConfigError> {
    let mut backends = BTreeMap::new();
    for (name, b) in raw {
        if !valid_backend_name(&name) {
            return Err(places.at(
                &["backends", name.as_str()],
                true,
                format!("backend name {name:?} is not allowed"),
                "use lowercase letters, digits, `-` and `_`".into(),
            ));
        }
        if matches!(b, BackendConfig::S3(_)) && !cfg!(feature = "s3") {
            return Err(places.err(
                &["backends", name.as_str(), "kind"],
                super::not_built("s3", &format!("backend {name:?} (kind = \"s3\")")),
                format!(
                    "{}; or use kind = \"fs\" for a local directory",
                    super::rebuild_with("s3")
                ),
            ));
        }
        if matches!(b, BackendConfig::Azure(_)) && !cfg!(feature = "azure") {
            return Err(places.err(
                &["backends", name.as_str(), "kind"],
                super::not_built("azure", &format!("backend {name:?} (kind = \"azure\")")),
                format!(
                    "{}; or use kind = \"fs\" for a local directory",
                    super::rebuild_with("azure")
                ),
            ));
        }
        if matches!(b, BackendConfig::Gcs(_)) && !cfg!(feature = "gcs") {
            return Err(places.err(
                &["backends", name.as_str(), "kind"],
                super::not_built("gcs", &format!("backend {name:?} (kind = \"gcs\")")),
                format!(
                    "{}; or use kind = \"fs\" for a local directory",
                    super::rebuild_with("gcs")
                ),
            ));
        }
        if let BackendConfig::Gcs(g) = &b {
            // A signed URL lives at most seven days; the commit's must expire with its deadline.
            let problem = if !(1..=604_800).contains(&g.commit_deadline_secs) {
                Some(("commit_deadline_secs", "sets commit_deadline_secs outside 1..=604800", "each commit goes by a signed URL that expires this long after it is sent (GCS allows at most 7 days), and an object whose commit's answer was lost stays refused as long: use a few seconds to a few hours (default 900)"))
            } else if !(256 * 1024..=5 * 1024 * 1024 * 1024).contains(&g.block_size_bytes) {
                Some((
                    "block_size_bytes",
                    "has block_size_bytes outside 256KiB..=5GiB",
                    "use 256KiB to 5GiB (default 8MiB)",
                ))
            } else {
                None
            };
            if let Some((field, problem, fix)) = problem {
                return Err(places.err(
                    &["backends", name.as_str(), field],
                    format!("backend {name:?} {problem}"),
                    fix.into(),
                ));
            }
        }
        if let BackendConfig::Azure(az) = &b {
            // A user's SAS bounds a request's life by its own expiry: a commit held
            // in flight could land until the SAS expires, long after the object was given to a
            // newer token.
            let problem = if az.sas_token.is_some() {
                Some(("sas_token", "sets sas_token, which fencegate does not take", "use access_key: fencegate signs with it a SAS for each commit that expires with the commit's deadline (commit_deadline_secs); a commit your SAS authorized could land until your SAS expires"))
            } else if az.commit_deadline_secs == 0 {
                Some(("commit_deadline_secs", "sets commit_deadline_secs to 0", "each commit's SAS expires this long after it is sent, and an object whose commit's answer was lost stays refused as long: use at least a few seconds (default 900)"))
            } else if !(1024 * 1024..=4000 * 1024 * 1024).contains(&az.block_size_bytes) {
                Some((
                    "block_size_bytes",
                    "has block_size_bytes outside Azure's block limits",
                    "use 1MiB to 4000MiB (default 8MiB)",
                ))
            } else {
                None
            };
            if let Some((field, problem, fix)) = problem {
                return Err(places.err(
                    &["backends", name.as_str(), field],
                    format!("backend {name:?} {problem}"),
                    fix.into(),
                ));
            }
        }
        if let BackendConfig::S3(s3) = &b {
            let problem = if s3.access_key_id.is_some() != s3.secret_access_key.is_some() {
                Some((if s3.access_key_id.is_some() { "access_key_id" } else { "secret_access_key" }, "sets only one of access_key_id and secret_access_key", "set both, or neither to use the SDK's credential chain (AWS_ACCESS_KEY_ID, profiles, roles)"))
            } else if s3.conditional_writes == Some(super::ConditionalWrites::Store)
                && s3.unsafe_no_conditional_writes
            {
                Some((
                    "unsafe_no_conditional_writes",
                    "sets conditional_writes = \"store\" and unsafe_no_conditional_writes = true, its old name for \"fencegate\"",
                    "keep conditional_writes alone: \"store\" (the default) or \"fencegate\" for a store that ignores conditions",
                ))
            } else if s3.multipart_threshold_bytes < 5 * 1024 * 1024
                || s3.multipart_threshold_bytes > 5 * 1024 * 1024 * 1024
            {
                Some((
                    "multipart_threshold_bytes",
                    "has multipart_threshold_bytes outside S3's part limits",
                    "use \"5MiB\" (5242880) to \"5GiB\" (5368709120); the default is \"8MiB\"",
                ))
            } else {
                [
                    ("read_attempts", u64::from(s3.read_attempts)),
                    ("connect_timeout_secs", s3.connect_timeout_secs),
                    ("read_timeout_secs", s3.read_timeout_secs),
                    ("call_timeout_secs", s3.call_timeout_secs),
                ]
                .iter()
                .find(|(_, v)| *v == 0)
                .map(|(field, _)| {
                    (
                        *field,
                        "has a zero timeout or attempt count",
                        "use positive values (defaults: connect 5 s, read 30 s, call 30 s, 3 attempts)",
                    )
                })
            };
            if let Some((field, what, fix)) = problem {
                return Err(places.err(
                    &["backends", name.as_str(), field],
                    format!("backend {name:?} {what}"),
                    fix.into(),
                ));
            }
        }
        backends.insert(name, b);
    }
    if backends.is_empty() {
        backends.insert(
            DEFAULT_BACKEND.to_string(),
            BackendConfig::Fs { root: None },
        );
    }

    Ok(backends)
}

fn valid_backend_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}
