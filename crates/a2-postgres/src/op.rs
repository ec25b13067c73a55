//! [`On`]: what each operation of the store runs on.

use crate::notify::Notices;
use crate::sql::Sql;

/// What an operation runs on: the statements' schema and errors, the
/// transaction (or savepoint) its client is in, the store time it decides
/// at, and the notices its commit sends.
pub(crate) struct On<'a, C> {
    pub(crate) sql: Sql<'a>,
    pub(crate) client: &'a C,
    pub(crate) now: a2_core::Millis,
    pub(crate) notices: &'a mut Notices,
}
