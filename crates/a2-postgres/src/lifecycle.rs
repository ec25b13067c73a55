//! Closes (CL1, CL6).

use a2_core::{Millis, Result};
use tokio_postgres::GenericClient;

use crate::session::bound;
use crate::sql::Sql;

/// CL1: closes session `sid` at `frontier`.
pub(crate) async fn mark_closed(
    sql: &Sql<'_>,
    client: &impl GenericClient,
    sid: i64,
    frontier: u64,
    now: Millis,
) -> Result<()> {
    sql.query(
        client,
        "closing the session",
        &format!(
            "UPDATE {s}.sessions SET closed_frontier = $2, closed_at = $3,
                updated_at = greatest(updated_at, $3)
             WHERE sid = $1",
            s = sql.schema
        ),
        &[&sid, &bound(frontier), &now],
    )
    .await?;
    Ok(())
}
