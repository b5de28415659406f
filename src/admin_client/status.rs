//! `fencegate status`: one instance at a glance (`GET /admin/status`), as an operator reads it.
//! It exits 1 when the instance is not ready, so a script can page on it.

use super::{print_json, table, AdminClient, AdminError, Connection, Shown};
use crate::api::status::Status;

/// `fencegate status`.
pub async fn status(conn: &Connection) -> Result<(), AdminError> {
    let answer = AdminClient::new(conn)?.status().await?;
    if conn.json {
        print_json(&answer.json);
    } else {
        print!("{}", shown(&answer.typed));
    }
    let failed: Vec<&str> = answer
        .typed
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.check.as_str())
        .collect();
    if answer.typed.ready {
        return Ok(());
    }
    Err(AdminError::NotReady(format!(
        "not ready: {} failed; /readyz answers 503 until they pass",
        failed.join(", ")
    )))
}

/// Seconds as `3d 4h 5m 6s`, largest unit first, zero units left out.
fn duration(secs: u64) -> String {
    let parts = [
        (secs / 86_400, "d"),
        (secs / 3_600 % 24, "h"),
        (secs / 60 % 60, "m"),
        (secs % 60, "s"),
    ];
    let shown: Vec<String> = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    if shown.is_empty() {
        "0s".into()
    } else {
        shown.join(" ")
    }
}

/// Bytes in the largest binary unit that keeps a number at or above 1.
fn bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}

fn shown(s: &Status) -> String {
    let store = &s.fence_store;
    let size = match (store.rows, store.bytes_on_disk) {
        (Some(rows), Some(disk)) => {
            format!(" ({rows} rows at the last count, {} on disk)", bytes(disk))
        }
        (None, Some(disk)) => format!(" ({} on disk)", bytes(disk)),
        _ => String::new(),
    };
    let leases = match s.leases_held {
        Some(n) => format!(
            "{n} ({} S3 credentials in their grace)",
            s.credentials_in_grace
        ),
        None => "unknown: the lease rows cannot be read now".into(),
    };
    let mut out = table(
        &["FIELD", "VALUE"],
        &[
            vec!["version".into(), s.version.clone()],
            vec!["uptime".into(), duration(s.uptime_secs)],
            vec!["mode".into(), s.mode.clone()],
            vec!["ready".into(), s.ready.shown()],
            vec![
                "fence table".into(),
                format!("{} {}{size}", store.kind, store.at),
            ],
            vec!["leases held".into(), leases],
        ],
    );
    let checks: Vec<Vec<String>> = s
        .checks
        .iter()
        .map(|c| {
            vec![
                c.check.clone(),
                c.ok.shown(),
                c.backend.clone().shown(),
                c.error.clone().shown(),
            ]
        })
        .collect();
    out.push('\n');
    out.push_str(&table(&["CHECK", "OK", "BACKEND", "ERROR"], &checks));
    if !s.buckets.is_empty() {
        let buckets: Vec<Vec<String>> = s
            .buckets
            .iter()
            .map(|b| vec![b.name.clone(), b.backend.clone(), b.kind.clone()])
            .collect();
        out.push('\n');
        out.push_str(&table(&["BUCKET", "BACKEND", "KIND"], &buckets));
    }
    if !store.members.is_empty() {
        let members: Vec<Vec<String>> = store
            .members
            .iter()
            .map(|m| {
                vec![
                    m.endpoint.clone(),
                    m.ok.shown(),
                    m.leader.shown(),
                    m.version.clone().shown(),
                    m.db_size_bytes.map(bytes).shown(),
                    m.raft_index.shown(),
                    m.error.clone().shown(),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&table(
            &[
                "ETCD_MEMBER",
                "OK",
                "LEADER",
                "VERSION",
                "DB_SIZE",
                "RAFT_INDEX",
                "ERROR",
            ],
            &members,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_read_as_an_operator_reads_them() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(59), "59s");
        assert_eq!(duration(3_600), "1h");
        assert_eq!(duration(90_061), "1d 1h 1m 1s");
        assert_eq!(duration(86_400 + 5), "1d 5s");
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(bytes(u64::MAX), "16777216.0 TiB");
    }
}
