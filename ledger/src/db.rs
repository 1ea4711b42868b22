//! The two database engines behind one small interface: SQLite (a file on
//! the controller host, the embedded default) and a MariaDB/MySQL server
//! (the engine slurmdbd sites already run), so every ledger query is
//! written once and only the few statements the dialects spell differently
//! come in two spellings ([`Dialect`]).
//!
//! Parameters are positional (`?`), values one small enum ([`Value`]),
//! rows vectors of them ([`Row`]): the ledger reads tens of thousands of
//! rows at most per call, so the copy costs nothing next to the I/O.

use std::cell::RefCell;

/// Rows per statement of [`Conn::exec_rows`]: 200 rows of 11 columns stay
/// far below both engines' limits on parameters (SQLite 32,766; MariaDB 65,535).
pub const ROWS_PER_STATEMENT: usize = 200;

/// A parameter or a column value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(v.into())
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Int(v.into())
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Real(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_owned())
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::Text(v.clone())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}
impl<T: Into<Value> + Clone> From<&Option<T>> for Value {
    fn from(v: &Option<T>) -> Value {
        v.clone().map_or(Value::Null, Into::into)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// `[a, b, ...]` as parameters.
macro_rules! params {
    ($($v:expr),* $(,)?) => { &[$($crate::db::Value::from($v)),*][..] };
}
pub(crate) use params;

/// What can go wrong below the ledger's own checks.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error(transparent)]
    Server(#[from] mysql::Error),
    /// A column holds what its reader does not expect (edited by hand?).
    #[error("column {column}: {problem}")]
    Decode { column: usize, problem: String },
    /// A write its caller's check refused; nothing was written.
    #[error("{0}")]
    Refused(String),
}

pub type DbResult<T> = std::result::Result<T, DbError>;

/// One result row.
#[derive(Debug, Clone)]
pub struct Row(Vec<Value>);

impl Row {
    pub fn get<T: FromValue>(&self, column: usize) -> DbResult<T> {
        let v = self.0.get(column).ok_or_else(|| DbError::Decode { column, problem: "no such column".into() })?;
        T::from_value(v).map_err(|problem| DbError::Decode { column, problem })
    }
}

/// A Rust value read from a column.
pub trait FromValue: Sized {
    fn from_value(v: &Value) -> Result<Self, String>;
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> Result<i64, String> {
        match v {
            Value::Int(i) => Ok(*i),
            // MySQL's SUM over integers is DECIMAL, sent as text.
            Value::Text(t) => t.parse().map_err(|_| format!("expected an integer, found '{t}'")),
            other => Err(format!("expected an integer, found {other:?}")),
        }
    }
}
impl FromValue for u32 {
    fn from_value(v: &Value) -> Result<u32, String> {
        let i = i64::from_value(v)?;
        u32::try_from(i).map_err(|_| format!("{i} is out of range"))
    }
}
impl FromValue for usize {
    fn from_value(v: &Value) -> Result<usize, String> {
        let i = i64::from_value(v)?;
        usize::try_from(i).map_err(|_| format!("{i} is out of range"))
    }
}
impl FromValue for bool {
    fn from_value(v: &Value) -> Result<bool, String> {
        Ok(i64::from_value(v)? != 0)
    }
}
impl FromValue for f64 {
    fn from_value(v: &Value) -> Result<f64, String> {
        match v {
            Value::Real(r) => Ok(*r),
            Value::Int(i) => Ok(*i as f64),
            Value::Text(t) => t.parse().map_err(|_| format!("expected a number, found '{t}'")),
            Value::Null => Err("expected a number, found NULL".into()),
        }
    }
}
impl FromValue for String {
    fn from_value(v: &Value) -> Result<String, String> {
        match v {
            Value::Text(t) => Ok(t.clone()),
            other => Err(format!("expected text, found {other:?}")),
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Result<Option<T>, String> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// Which SQL a statement is spelled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    MySql,
}

/// An open connection to either engine.
pub enum Conn {
    Sqlite(rusqlite::Connection),
    /// The client needs `&mut` for every statement; the ledger's readers
    /// take `&self` (one connection is never shared between threads).
    Server(RefCell<mysql::Conn>),
}

impl Conn {
    pub fn dialect(&self) -> Dialect {
        match self {
            Conn::Sqlite(_) => Dialect::Sqlite,
            Conn::Server(_) => Dialect::MySql,
        }
    }

    /// Runs one statement; returns the rows it changed.
    pub fn exec(&self, sql: &str, params: &[Value]) -> DbResult<u64> {
        match self {
            Conn::Sqlite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                Ok(stmt.execute(rusqlite::params_from_iter(params.iter().map(to_sqlite)))? as u64)
            }
            Conn::Server(c) => {
                use mysql::prelude::Queryable;
                let mut c = c.borrow_mut();
                if params.is_empty() {
                    c.query_drop(sql)?;
                } else {
                    c.exec_drop(sql, to_server(params))?;
                }
                Ok(c.affected_rows())
            }
        }
    }

    /// An `INSERT`-like statement for many rows: `head` up to `VALUES`, one
    /// `(?, ..., ?)` group of `width` per row, then `tail` (an upsert's
    /// `ON CONFLICT ...`), in statements of at most [`ROWS_PER_STATEMENT`]
    /// rows, in order: one round trip to a server per chunk, not per row
    /// (a period's usage snapshot is a row per leaf: thousands).
    pub fn exec_rows(&self, head: &str, tail: &str, width: usize, rows: &[Vec<Value>]) -> DbResult<u64> {
        let mut affected = 0;
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let group = format!("({})", vec!["?"; width].join(", "));
            let sql = format!("{head} {} {tail}", vec![group.as_str(); chunk.len()].join(", "));
            let params: Vec<Value> = chunk
                .iter()
                .flat_map(|r| {
                    debug_assert_eq!(r.len(), width);
                    r.iter().cloned()
                })
                .collect();
            affected += self.exec(&sql, &params)?;
        }
        Ok(affected)
    }

    /// Runs several statements without parameters (schema, transactions).
    pub fn batch(&self, sql: &str) -> DbResult<()> {
        match self {
            Conn::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Conn::Server(c) => {
                use mysql::prelude::Queryable;
                Ok(c.borrow_mut().query_drop(sql)?)
            }
        }
    }

    /// Every row of a query.
    pub fn rows(&self, sql: &str, params: &[Value]) -> DbResult<Vec<Row>> {
        match self {
            Conn::Sqlite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let width = stmt.column_count();
                let mut rows = stmt.query(rusqlite::params_from_iter(params.iter().map(to_sqlite)))?;
                let mut out = Vec::new();
                while let Some(r) = rows.next()? {
                    let mut row = Vec::with_capacity(width);
                    for i in 0..width {
                        row.push(from_sqlite(r.get_ref(i)?, i)?);
                    }
                    out.push(Row(row));
                }
                Ok(out)
            }
            Conn::Server(c) => {
                use mysql::prelude::Queryable;
                let mut c = c.borrow_mut();
                let rows: Vec<mysql::Row> = if params.is_empty() { c.query(sql)? } else { c.exec(sql, to_server(params))? };
                rows.into_iter().map(|r| r.unwrap().into_iter().enumerate().map(|(i, v)| from_server(v, i)).collect::<DbResult<Vec<_>>>().map(Row)).collect()
            }
        }
    }

    /// The first row of a query, if any.
    pub fn row(&self, sql: &str, params: &[Value]) -> DbResult<Option<Row>> {
        Ok(self.rows(sql, params)?.into_iter().next())
    }
}

fn to_sqlite(v: &Value) -> rusqlite::types::Value {
    use rusqlite::types::Value as V;
    match v {
        Value::Null => V::Null,
        Value::Int(i) => V::Integer(*i),
        Value::Real(r) => V::Real(*r),
        Value::Text(t) => V::Text(t.clone()),
    }
}

fn from_sqlite(v: rusqlite::types::ValueRef<'_>, column: usize) -> DbResult<Value> {
    use rusqlite::types::ValueRef as V;
    Ok(match v {
        V::Null => Value::Null,
        V::Integer(i) => Value::Int(i),
        V::Real(r) => Value::Real(r),
        V::Text(t) => Value::Text(String::from_utf8(t.to_vec()).map_err(|_| DbError::Decode { column, problem: "text is not UTF-8".into() })?),
        V::Blob(_) => return Err(DbError::Decode { column, problem: "a blob where the ledger stores none".into() }),
    })
}

fn to_server(params: &[Value]) -> mysql::Params {
    use mysql::Value as V;
    mysql::Params::Positional(
        params
            .iter()
            .map(|v| match v {
                Value::Null => V::NULL,
                Value::Int(i) => V::Int(*i),
                Value::Real(r) => V::Double(*r),
                Value::Text(t) => V::Bytes(t.clone().into_bytes()),
            })
            .collect(),
    )
}

fn from_server(v: mysql::Value, column: usize) -> DbResult<Value> {
    use mysql::Value as V;
    Ok(match v {
        V::NULL => Value::Null,
        V::Int(i) => Value::Int(i),
        V::UInt(u) => Value::Int(i64::try_from(u).map_err(|_| DbError::Decode { column, problem: format!("{u} is out of range") })?),
        V::Float(f) => Value::Real(f.into()),
        V::Double(d) => Value::Real(d),
        V::Bytes(b) => Value::Text(String::from_utf8(b).map_err(|_| DbError::Decode { column, problem: "text is not UTF-8".into() })?),
        other => return Err(DbError::Decode { column, problem: format!("a date or time ({other:?}) where the ledger stores seconds") }),
    })
}
