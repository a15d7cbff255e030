//! PostgreSQL's bulk path for a batch of tasks without keys: the rows go
//! by `COPY`, which writes a page of them at a time, instead of through an
//! insert's executor a row at a time (half the database's time a task).
//! `COPY` returns nothing, so the ids are drawn first from the table's
//! sequence, in the rows' order, and the announcements are sent by a
//! statement of their own; all of it in one transaction, so that the
//! tasks and their `NOTIFY` commit together, or neither.

use std::fmt::Write as _;

use sqlx::postgres::PgConnection;

use crate::error::Error;
use crate::sql::announce::{key_hash, Announced, NOTIFY_PART};
use crate::sql::names::Names;
use crate::sql::tasks::{Inserted, TaskParams};

/// Inserts `rows`, none with an idempotency key, created at `created_at`,
/// and returns them as [`insert`](crate::sql::tasks::insert) would, in
/// order. Opens and commits its own transaction on `conn`.
pub(crate) async fn insert_keyless(
    conn: &mut PgConnection,
    names: &Names,
    rows: &[TaskParams<'_>],
    created_at: i64,
) -> Result<Vec<Inserted>, Error> {
    debug_assert!(rows.iter().all(|r| r.idempotency_key.is_none()));
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    // The ids in the rows' order, and the database's clock for updated_at.
    let drawn: Vec<(i64, i64)> = sqlx::query_as(&format!(
        "SELECT {} AS now, nextval(pg_get_serial_sequence($1, 'id')) AS id \
         FROM generate_series(1, $2) ORDER BY 2",
        names.clock()
    ))
    .bind(&names.tasks)
    .bind(i64::try_from(rows.len()).unwrap_or(i64::MAX))
    .fetch_all(&mut *tx)
    .await?;
    let mut ids = Vec::with_capacity(rows.len());
    let mut now = created_at;
    for &(at, id) in &drawn {
        ids.push(id);
        now = at;
    }
    if ids.len() != rows.len() {
        return Err(Error::internal("the sequence gave fewer ids than rows"));
    }

    let mut data = String::with_capacity(rows.len() * 96);
    for (row, id) in rows.iter().zip(&ids) {
        copy_row(&mut data, *id, row, created_at, now);
    }
    let mut copy = tx
        .copy_in_raw(&format!(
            "COPY {} (id, run_at, payload, max_attempts, recurring, queue, priority, \
             partition_key, envelope, kind, created_at, updated_at) FROM STDIN",
            names.tasks
        ))
        .await?;
    if let Err(err) = copy.send(data.as_bytes()).await {
        let _ = copy.abort("the data could not be sent").await;
        return Err(err.into());
    }
    copy.finish().await?;

    let inserted: Vec<Inserted> = rows
        .iter()
        .zip(&ids)
        .map(|(row, &id)| Inserted {
            task: Announced {
                id,
                run_at: row.run_at,
                priority: crate::sql::db::priority_from_sql(row.priority),
                queue: std::sync::Arc::from(row.queue),
                key: key_hash(row.partition_key),
            },
            idempotency_key: None,
        })
        .collect();
    if let Some(channel) = &names.channel {
        sqlx::query("SELECT pg_notify($1, part) FROM unnest($2::TEXT[]) AS part")
            .bind(channel)
            .bind(notify_parts(rows, &ids))
            .fetch_all(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(inserted)
}

/// One row of `COPY`'s text format: tab-separated, `\N` for null.
fn copy_row(out: &mut String, id: i64, row: &TaskParams<'_>, created_at: i64, now: i64) {
    let _ = write!(out, "{id}\t{}\t\\\\x", row.run_at);
    for byte in row.payload {
        let _ = write!(out, "{byte:02x}");
    }
    out.push('\t');
    match row.max_attempts {
        Some(n) => {
            let _ = write!(out, "{n}");
        }
        None => out.push_str("\\N"),
    }
    out.push('\t');
    copy_text(out, row.recurring);
    out.push('\t');
    copy_text(out, Some(row.queue));
    let _ = write!(out, "\t{}\t", row.priority);
    copy_text(out, row.partition_key);
    out.push('\t');
    copy_text(out, row.envelope);
    out.push('\t');
    copy_text(out, row.kind);
    let _ = writeln!(out, "\t{created_at}\t{now}");
}

/// A text column of `COPY`'s text format: its backslashes, tabs, line
/// ends and carriage returns escaped; `\N` for none.
fn copy_text(out: &mut String, text: Option<&str>) {
    let Some(text) = text else {
        out.push_str("\\N");
        return;
    };
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
}

/// The announcements of `rows` as `NOTIFY` payloads, the entries of
/// [`announcing`](crate::sql::announce::announcing) split the same way.
/// Written here rather than by that statement's SQL over the rows as
/// arrays, which cost the database its time: back to back, 4 runs each,
/// the batches over HTTP on PostgreSQL ran at 44,082 – 51,863 tasks a
/// second built in SQL, 51,906 – 54,216 built here (`cargo bench -p ttw
/// --bench http_rate`). The test below reads them back with the listener's
/// parser.
fn notify_parts(rows: &[TaskParams<'_>], ids: &[i64]) -> Vec<String> {
    let mut parts = Vec::new();
    let mut part = String::new();
    for (row, id) in rows.iter().zip(ids) {
        if part.len() >= NOTIFY_PART {
            parts.push(std::mem::take(&mut part));
        }
        if !part.is_empty() {
            part.push(',');
        }
        let key = row.partition_key.unwrap_or_default();
        let _ = write!(
            part,
            "{id}:{}:{}:{}:{key}{}",
            row.run_at,
            row.priority,
            key.len(),
            row.queue
        );
    }
    if !part.is_empty() {
        parts.push(part);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify;

    fn params<'a>(queue: &'a str, key: Option<&'a str>, payload: &'a [u8]) -> TaskParams<'a> {
        TaskParams {
            run_at: 1_000,
            payload,
            idempotency_key: None,
            max_attempts: Some(3),
            recurring: None,
            queue,
            priority: -2,
            partition_key: key,
            envelope: None,
            kind: None,
        }
    }

    #[test]
    fn a_row_is_written_in_copy_s_text_format() {
        let mut out = String::new();
        copy_row(
            &mut out,
            7,
            &params("q", Some("a\tb\\c\nd"), b"{\x00}"),
            5,
            6,
        );
        assert_eq!(
            out,
            "7\t1000\t\\\\x7b007d\t3\t\\N\tq\t-2\ta\\tb\\\\c\\nd\t\\N\t\\N\t5\t6\n"
        );
    }

    #[test]
    fn announcements_are_split_into_parts_the_listener_reads() {
        let key = "k,:".repeat(40);
        let rows: Vec<TaskParams<'_>> = (0..500)
            .map(|_| params("default", Some(&key), b""))
            .collect();
        let ids: Vec<i64> = (1..=500).collect();
        let parts = notify_parts(&rows, &ids);
        assert!(parts.len() > 1);
        let mut heard = std::collections::VecDeque::new();
        for part in &parts {
            assert!(part.len() < 8_000, "{}", part.len());
            notify::parse(part, &mut heard);
        }
        assert_eq!(heard.len(), 500);
        assert!(heard
            .iter()
            .zip(1..)
            .all(|(t, id)| t.id == id && t.key == key_hash(Some(&key))));
    }
}
