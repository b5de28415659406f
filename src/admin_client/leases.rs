//! `fencegate leases list|get|revoke`: the live leases of a running instance, and the S3
//! credentials still working in their grace, as tables.

use super::{print_json, table, AdminClient, AdminError, Connection, Shown};
use crate::lease::{CredentialInGrace, Grant, ListedLease};

/// Milliseconds from now until `at_ms` (Unix), shown as seconds.
fn remaining(at_ms: u64) -> String {
    let now = crate::wall_clock::now_ms();
    if at_ms <= now {
        "expired".into()
    } else {
        format!("{:.1}s", (at_ms - now) as f64 / 1000.0)
    }
}

fn binding(lease: &Grant) -> String {
    match &lease.bound {
        Some(b) => format!("{}/{}", b.bucket, b.key),
        None => "-".into(),
    }
}

/// The live leases as a table.
fn lease_table(leases: &[ListedLease]) -> String {
    let cells: Vec<Vec<String>> = leases
        .iter()
        .map(|l| {
            vec![
                l.grant.name.clone(),
                l.grant.holder.clone(),
                l.grant.token.to_string(),
                remaining(l.grant.expires_at_ms),
                binding(&l.grant),
                l.grant
                    .s3_credentials
                    .as_ref()
                    .map_or_else(|| "-".into(), |c| c.access_key_id.clone()),
                l.principal.clone(),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "HOLDER",
            "TOKEN",
            "EXPIRES_IN",
            "BOUND_TO",
            "S3_ACCESS_KEY_ID",
            "PRINCIPAL",
        ],
        &cells,
    )
}

/// The credentials in their grace, under a line saying what they are; nothing when none.
fn grace_table(credentials: &[CredentialInGrace]) -> String {
    if credentials.is_empty() {
        return String::new();
    }
    let cells: Vec<Vec<String>> = credentials
        .iter()
        .map(|c| {
            vec![
                c.access_key_id.clone(),
                c.lease.clone(),
                c.token.to_string(),
                c.holder.clone(),
                remaining(c.works_until_ms),
            ]
        })
        .collect();
    format!(
        "\nS3 credentials still working after their grant ended (in their grace):\n{}",
        table(
            &["ACCESS_KEY_ID", "LEASE", "TOKEN", "HOLDER", "WORKS_FOR"],
            &cells
        )
    )
}

/// `fencegate leases list`.
pub async fn leases(conn: &Connection) -> Result<(), AdminError> {
    let listed = AdminClient::new(conn)?.leases().await?;
    if conn.json {
        print_json(&listed.json);
        return Ok(());
    }
    let listed = listed.typed;
    print!("{}", lease_table(&listed.leases));
    print!("{}", grace_table(&listed.credentials_in_grace));
    Ok(())
}

/// `fencegate leases get`: one lease, and its earlier grants' credentials still in their grace.
pub async fn get(conn: &Connection, name: &str) -> Result<(), AdminError> {
    let shown = AdminClient::new(conn)?.lease(name).await?;
    if conn.json {
        print_json(&shown.json);
        return Ok(());
    }
    let shown = shown.typed;
    match &shown.lease {
        Some(lease) => print!("{}", lease_table(std::slice::from_ref(lease))),
        None => println!("no live lease is named {name:?}; its last grant ended"),
    }
    print!("{}", grace_table(&shown.credentials_in_grace));
    Ok(())
}

/// `fencegate leases revoke`.
pub async fn revoke(conn: &Connection, name: &str) -> Result<(), AdminError> {
    let revoked = AdminClient::new(conn)?.revoke(name).await?;
    if conn.json {
        print_json(&revoked.json);
        return Ok(());
    }
    let revoked = revoked.typed;
    let lease = revoked.lease.as_ref();
    print!(
        "{}",
        table(
            &["NAME", "HOLDER", "TOKEN", "CREDENTIALS_REVOKED"],
            &[vec![
                name.to_string(),
                lease.map(|l| l.holder.clone()).shown(),
                lease.map(|l| l.token).shown(),
                revoked.credentials.to_string(),
            ]],
        )
    );
    Ok(())
}
