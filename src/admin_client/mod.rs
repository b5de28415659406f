//! The admin command line: `fencegate fences get|advance|reset|list`, `fencegate leases
//! list|get|revoke` (`leases.rs`), `fencegate status` (`status.rs`) and `fencegate reload` talk
//! to a running instance through its admin surface (and `fencegate healthcheck`, `healthcheck.rs`,
//! to its `/readyz`) (`/admin/...`, src/api/admin.rs), and print
//! aligned tables, or the server's JSON with `--json`.
//!
//! Credentials, first found wins: `--token-file` (the `[admin]` bearer token), an access key
//! named by `--access-key-id` / `--secret-access-key-file`, `FENCEGATE_ADMIN_TOKEN`, the pair
//! `FENCEGATE_ACCESS_KEY_ID` / `FENCEGATE_SECRET_ACCESS_KEY`, the pair `AWS_ACCESS_KEY_ID` /
//! `AWS_SECRET_ACCESS_KEY`; none at all is anonymous, which only development mode accepts
//! (from loopback). Keys sign with SigV4 exactly as [`crate::client`] does. Secrets come from
//! files or the environment, never from the command line (where `ps` would show them).
//!
//! A refusal prints the server's code and message and a hint of what to change, and the
//! command exits 1.

mod connection;
mod healthcheck;
mod leases;
mod status;
mod trust;

pub use connection::{AdminClient, AdminError, Answer, Connection};
pub use healthcheck::healthcheck;
pub use leases::{get as lease, leases, revoke};
pub use status::status;

use crate::gate::{FenceInfo, FenceListRow};
use clap::Args;

/// `fences list`: which rows, and how many at most.
#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    /// The bucket whose fence rows to list.
    pub bucket: String,
    /// Only rows of keys (and prefix scopes) starting with this.
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// Print at most this many rows (0: every row, however many; they are held in memory).
    /// When more remain, the token to continue with is printed (stderr, or
    /// next_continuation_token with --json).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub limit: usize,
    /// Rows asked per request (1 to 1000, the server's cap).
    #[arg(long, default_value_t = crate::gate::MAX_FENCE_PAGE, value_name = "N")]
    pub page_size: usize,
    /// Start after this token, from an earlier listing's next_continuation_token.
    #[arg(long, value_name = "TOKEN")]
    pub continuation_token: Option<String>,
}

/// A value as an operator reads it: `-` for none, `yes`/`no` for a flag.
trait Shown {
    fn shown(&self) -> String;
}

impl Shown for Option<u64> {
    fn shown(&self) -> String {
        self.map_or_else(|| "-".into(), |v| v.to_string())
    }
}

impl Shown for Option<String> {
    fn shown(&self) -> String {
        self.clone().unwrap_or_else(|| "-".into())
    }
}

impl Shown for bool {
    fn shown(&self) -> String {
        if *self { "yes" } else { "no" }.into()
    }
}

/// Columns padded to their widest cell, two spaces apart; the last one unpadded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count() + 2;
                out.push_str(cell);
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

fn print_json(v: &impl serde::Serialize) {
    match serde_json::to_string_pretty(v) {
        Ok(json) => println!("{json}"),
        Err(e) => eprintln!("error: the answer could not be printed as JSON: {e}"),
    }
}

/// `fencegate fences get`.
pub async fn get(
    conn: &Connection,
    bucket: &str,
    key: &str,
    scope: Option<&str>,
) -> Result<(), AdminError> {
    let info = AdminClient::new(conn)?.fence(bucket, key, scope).await?;
    if conn.json {
        print_json(&info.json);
    } else {
        print!("{}", fence_table(&info.typed));
    }
    Ok(())
}

fn fence_table(info: &FenceInfo) -> String {
    table(
        &["BUCKET", "KEY", "SCOPE", "HIGHEST", "TOMBSTONE", "ETAG"],
        &[vec![
            info.bucket.clone(),
            info.key.clone(),
            info.scope.clone(),
            info.highest.shown(),
            info.tombstone.shown(),
            info.etag.shown(),
        ]],
    )
}

/// `fencegate fences advance`. The token is checked by the server, which owns the grammar.
pub async fn advance(
    conn: &Connection,
    bucket: &str,
    key: &str,
    token: &str,
    scope: Option<&str>,
) -> Result<(), AdminError> {
    let done = AdminClient::new(conn)?
        .advance(bucket, key, token, scope)
        .await?;
    if conn.json {
        print_json(&done.json);
        return Ok(());
    }
    let done = done.typed;
    let fence = &done.fence;
    print!(
        "{}",
        table(
            &["SCOPE", "WAS", "HIGHEST", "ADVANCED"],
            &[vec![
                fence.scope.clone(),
                done.was.shown(),
                fence.highest.shown(),
                done.advanced.shown(),
            ]],
        )
    );
    if !done.advanced {
        eprintln!(
            "note: the fence already stood at {}, at or above {token}: nothing changed (an advance never lowers a fence)",
            fence.highest.shown()
        );
    }
    Ok(())
}

/// `fencegate fences reset`: lowers a fence (the server refuses a token that does not lower it).
pub async fn reset(
    conn: &Connection,
    bucket: &str,
    key: &str,
    token: &str,
    scope: Option<&str>,
) -> Result<(), AdminError> {
    let done = AdminClient::new(conn)?
        .reset(bucket, key, token, scope)
        .await?;
    if conn.json {
        print_json(&done.json);
        return Ok(());
    }
    let done = done.typed;
    print!(
        "{}",
        table(
            &["SCOPE", "WAS", "HIGHEST"],
            &[vec![
                done.fence.scope.clone(),
                done.was.shown(),
                done.fence.highest.shown(),
            ]],
        )
    );
    eprintln!(
        "note: a holder of a token above {} is accepted again; the audit log names this reset",
        done.fence.highest.shown()
    );
    Ok(())
}

/// `fencegate reload`: keys, bucket policies and the certificate read again, all or nothing.
pub async fn reload(conn: &Connection) -> Result<(), AdminError> {
    let done = AdminClient::new(conn)?.reload().await?;
    print_json(&done.json);
    Ok(())
}

/// `fencegate fences list`: pages until `limit` rows or the end.
pub async fn list(conn: &Connection, args: &ListArgs) -> Result<(), AdminError> {
    if !(1..=crate::gate::MAX_FENCE_PAGE).contains(&args.page_size) {
        return Err(AdminError::Usage(format!(
            "--page-size {} must be 1 to {}",
            args.page_size,
            crate::gate::MAX_FENCE_PAGE
        )));
    }
    let admin = AdminClient::new(conn)?;
    let mut rows: Vec<FenceListRow> = Vec::new();
    let mut json_rows: Vec<serde_json::Value> = Vec::new();
    let mut next = args.continuation_token.clone();
    loop {
        let want = match args.limit {
            0 => args.page_size,
            limit => args.page_size.min(limit - rows.len()),
        };
        let page = admin
            .fence_page(&args.bucket, &args.prefix, next.as_deref(), want)
            .await?;
        if let Some(found) = page.json.get("rows").and_then(|r| r.as_array()) {
            json_rows.extend(found.iter().cloned());
        }
        rows.extend(page.typed.rows);
        next = page.typed.next_continuation_token;
        if next.is_none() || (args.limit != 0 && rows.len() >= args.limit) {
            break;
        }
    }
    if conn.json {
        // The server's rows as it sent them, in the shape of one page.
        print_json(&serde_json::json!({
            "bucket": args.bucket,
            "prefix": args.prefix,
            "rows": json_rows,
            "next_continuation_token": next,
        }));
    } else {
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.scope.clone(),
                    r.highest.shown(),
                    r.tombstone.shown(),
                    r.pending.shown(),
                    r.bound_to.shown(),
                    r.etag.shown(),
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                &[
                    "SCOPE",
                    "HIGHEST",
                    "TOMBSTONE",
                    "PENDING",
                    "LOCK_SCOPE",
                    "ETAG"
                ],
                &cells
            )
        );
        if let Some(token) = &next {
            eprintln!(
                "more rows: continue with --continuation-token '{}' (or --limit 0 for all)",
                token.replace('\'', "'\\''")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Grant;

    #[test]
    fn tables_align_on_the_widest_cell() {
        let t = table(
            &["SCOPE", "HIGHEST"],
            &[
                vec!["object:b/a-long-key".into(), "7".into()],
                vec!["object:b/k".into(), "18446744073709551615".into()],
            ],
        );
        assert_eq!(
            t,
            "SCOPE                HIGHEST\n\
             object:b/a-long-key  7\n\
             object:b/k           18446744073709551615\n"
        );
    }

    #[test]
    fn values_show_as_an_operator_reads_them() {
        assert_eq!(None::<u64>.shown(), "-");
        assert_eq!(None::<String>.shown(), "-");
        assert_eq!(true.shown(), "yes");
        assert_eq!(false.shown(), "no");
        assert_eq!(Some(u64::MAX).shown(), "18446744073709551615");
        assert_eq!(Some("x".to_string()).shown(), "x");
    }

    #[test]
    fn the_wire_types_read_back_what_the_admin_surface_writes() {
        let listing = crate::lease::LeaseListing {
            leases: vec![crate::lease::ListedLease {
                grant: Grant {
                    name: "n".into(),
                    holder: "h".into(),
                    token: u64::MAX,
                    ttl_ms: 1,
                    expires_at_ms: 2,
                    bound: None,
                    scope: None,
                    s3_credentials: None,
                    lease_secret: None,
                },
                principal: "alice".into(),
            }],
            credentials_in_grace: vec![crate::lease::CredentialInGrace {
                access_key_id: "FGLAKIA".into(),
                lease: "nightly".into(),
                token: 4,
                holder: "a".into(),
                works_until_ms: 9,
            }],
        };
        let wire = serde_json::to_value(&listing).unwrap();
        // The principal sits beside the grant's fields, as `GET /admin/leases` has always shown it.
        assert_eq!(wire["leases"][0]["principal"], "alice");
        assert_eq!(wire["leases"][0]["token"], u64::MAX);
        let back: crate::lease::LeaseListing = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), wire);

        let page: crate::gate::FenceListing = serde_json::from_value(serde_json::json!({
            "bucket": "b", "prefix": "", "next_continuation_token": null,
            "rows": [{"scope": "object:b/k", "kind": "object", "key": "k", "highest": 7,
                      "tombstone": false, "etag": null, "pending": false}]
        }))
        .unwrap();
        assert_eq!(page.rows[0].kind, "object");
        assert_eq!(page.rows[0].highest, Some(7));
        assert_eq!(page.rows[0].bound_to, None);
    }
}
