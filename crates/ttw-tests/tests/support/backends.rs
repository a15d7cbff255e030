//! Runs each durable test on both backends: SQLite always (a fresh file in
//! a temporary directory), PostgreSQL when `DATABASE_URL` is set (a fresh
//! schema per test, dropped at the end).
//!
//! Without `DATABASE_URL` when the tests are built, the PostgreSQL cases are
//! `#[ignore]`d (`build.rs` sets `ttw_no_postgres`), so the report counts
//! them as ignored, not passed. Built with it and run without it, they fail;
//! under `CI` `.ci/run` always starts PostgreSQL first.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ttw_durable::{Store, StoreBuilder};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A place for one test's tables, and a way to open more stores on it (a
/// restarted process, another node).
pub struct Db {
    pub backend: Backend,
    sqlite: Option<PathBuf>,
    postgres: Option<(String, String)>,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(name: &str) -> String {
    format!(
        "ttw_{}_{}_{}",
        name.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

impl Db {
    /// A fresh database for `name`. Panics for PostgreSQL without
    /// `DATABASE_URL` (the cases that need it are ignored when built without
    /// it).
    pub fn new(backend: Backend, name: &str) -> Db {
        match backend {
            Backend::Sqlite => {
                let dir = std::env::temp_dir().join(unique(name));
                std::fs::create_dir_all(&dir).unwrap();
                Db {
                    backend,
                    sqlite: Some(dir.join("tasks.db")),
                    postgres: None,
                }
            }
            Backend::Postgres => match std::env::var("DATABASE_URL") {
                Ok(url) if !url.is_empty() => Db {
                    backend,
                    sqlite: None,
                    postgres: Some((url, unique(name).to_lowercase())),
                },
                _ => panic!(
                    "{name}: built with DATABASE_URL but run without it; set it, or rebuild without it to ignore the PostgreSQL cases"
                ),
            },
        }
    }

    /// Opens a store (the first open creates the schema).
    pub async fn try_open_with(&self, builder: StoreBuilder) -> Result<Store, ttw_durable::Error> {
        let builder = builder.connect_timeout(Duration::from_secs(20));
        match self.backend {
            Backend::Sqlite => builder.sqlite(self.sqlite.as_ref().unwrap()).await,
            Backend::Postgres => {
                let (url, schema) = self.postgres.as_ref().unwrap();
                builder.postgres_schema(schema.clone()).postgres(url).await
            }
        }
    }

    /// Where this database is, as environment variables for a child
    /// process (`src/bin/ttw-child.rs`), which opens it from them.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match (&self.sqlite, &self.postgres) {
            (Some(path), _) => vec![("TTW_TEST_SQLITE", path.display().to_string())],
            (_, Some((url, schema))) => vec![
                ("TTW_TEST_POSTGRES", url.clone()),
                ("TTW_TEST_SCHEMA", schema.clone()),
            ],
            _ => unreachable!("a Db is on one backend"),
        }
    }

    /// The PostgreSQL URL and the test's schema; `None` on SQLite.
    pub fn postgres_parts(&self) -> Option<(&str, &str)> {
        self.postgres
            .as_ref()
            .map(|(url, schema)| (url.as_str(), schema.as_str()))
    }

    /// Where this database is, as the lines of a `ttw.toml` (`database`,
    /// and `schema` on PostgreSQL).
    pub fn toml(&self) -> String {
        match (&self.sqlite, &self.postgres) {
            (Some(path), _) => format!("database = \"{}\"", path.display()),
            (_, Some((url, schema))) => format!("database = \"{url}\"\nschema = \"{schema}\""),
            _ => unreachable!("a Db is on one backend"),
        }
    }

    /// Where this database is, as arguments of the `ttw` tool.
    pub fn cli_args(&self) -> Vec<String> {
        match (&self.sqlite, &self.postgres) {
            (Some(path), _) => vec!["--database".into(), path.display().to_string()],
            (_, Some((url, schema))) => vec![
                "--database".into(),
                url.clone(),
                "--schema".into(),
                schema.clone(),
            ],
            _ => unreachable!("a Db is on one backend"),
        }
    }

    /// Opens a store, panicking on failure.
    pub async fn open_with(&self, builder: StoreBuilder) -> Store {
        self.try_open_with(builder).await.unwrap()
    }

    /// Opens a store with 16 shards.
    pub async fn open(&self) -> Store {
        self.open_with(Store::builder().shards(16)).await
    }

    /// A connection of its own to the test's SQLite file.
    async fn sqlite_conn(&self) -> sqlx::SqliteConnection {
        let path = self.sqlite.as_ref().unwrap();
        sqlx::Connection::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap()
    }

    /// A connection of its own to the test's PostgreSQL schema.
    async fn pg_conn(&self) -> sqlx::PgConnection {
        let (url, schema) = self.postgres.as_ref().unwrap();
        let mut conn: sqlx::PgConnection = sqlx::Connection::connect(url).await.unwrap();
        sqlx::query(&format!("SET search_path TO {schema}"))
            .execute(&mut conn)
            .await
            .unwrap();
        conn
    }

    /// A connection of an application's own, as it would open one: to the
    /// SQLite file, or to the PostgreSQL database with the default
    /// `search_path` (the test's tables are in a schema of their own, so
    /// the crate must name them).
    pub async fn caller_sqlite(&self) -> sqlx::SqliteConnection {
        self.sqlite_conn().await
    }

    /// See [`Db::caller_sqlite`].
    pub async fn caller_postgres(&self) -> sqlx::PgConnection {
        let (url, _) = self.postgres.as_ref().unwrap();
        sqlx::Connection::connect(url).await.unwrap()
    }

    /// The name the test's tables are reached by from a caller's
    /// connection: `name` itself on SQLite, qualified by the test's schema
    /// on PostgreSQL.
    pub fn qualified(&self, name: &str) -> String {
        match &self.postgres {
            Some((_, schema)) => format!("{schema}.{name}"),
            None => name.to_string(),
        }
    }

    /// Brings the test's database to the schema of the migrations in `dir`
    /// (a copy of some of the crate's), as an older version of the crate
    /// left it.
    pub async fn migrate_with(&self, dir: &std::path::Path) {
        let migrator = sqlx::migrate::Migrator::new(dir).await.unwrap();
        match self.backend {
            Backend::Sqlite => {
                let path = self.sqlite.as_ref().unwrap();
                let mut conn: sqlx::SqliteConnection =
                    sqlx::Connection::connect(&format!("sqlite://{}?mode=rwc", path.display()))
                        .await
                        .unwrap();
                migrator.run(&mut conn).await.unwrap();
            }
            Backend::Postgres => {
                let (url, schema) = self.postgres.as_ref().unwrap();
                let mut conn: sqlx::PgConnection = sqlx::Connection::connect(url).await.unwrap();
                sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                drop(conn);
                let mut conn = self.pg_conn().await;
                migrator.run(&mut conn).await.unwrap();
            }
        }
    }

    /// Brings the test's database to the schema the crate's migrations
    /// before `version` (say `"0004"`) make: as an older version of the
    /// crate left it.
    pub async fn migrate_before(&self, version: &str) {
        let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../ttw-durable/migrations")
            .join(match self.backend {
                Backend::Sqlite => "sqlite",
                Backend::Postgres => "postgres",
            });
        let dir = std::env::temp_dir().join(unique(&format!("old_migrations_{version}")));
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(&from).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name.as_str() < version {
                std::fs::copy(&path, dir.join(&name)).unwrap();
            }
        }
        self.migrate_with(&dir).await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Runs one statement on the test's tables, outside the crate (fault
    /// injection and checks).
    pub async fn exec(&self, sql: &str) {
        match self.backend {
            Backend::Sqlite => {
                let mut conn = self.sqlite_conn().await;
                sqlx::query(sql).execute(&mut conn).await.unwrap();
            }
            Backend::Postgres => {
                let mut conn = self.pg_conn().await;
                sqlx::query(sql).execute(&mut conn).await.unwrap();
            }
        }
    }

    /// Runs one query returning a single integer, outside the crate.
    pub async fn query_i64(&self, sql: &str) -> i64 {
        let (n,): (i64,) = match self.backend {
            Backend::Sqlite => {
                let mut conn = self.sqlite_conn().await;
                sqlx::query_as(sql).fetch_one(&mut conn).await.unwrap()
            }
            Backend::Postgres => {
                let mut conn = self.pg_conn().await;
                sqlx::query_as(sql).fetch_one(&mut conn).await.unwrap()
            }
        };
        n
    }

    /// On SQLite, takes the database's write lock on a connection of its
    /// own, as another process in a long write transaction would; every
    /// writer waits until [`WriteLock::release`]. `None` on PostgreSQL.
    pub async fn hold_write_lock(&self) -> Option<WriteLock> {
        self.sqlite.as_ref()?;
        let mut conn = self.sqlite_conn().await;
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut conn)
            .await
            .unwrap();
        Some(WriteLock(conn))
    }
}

/// SQLite's write lock, held by a connection outside the crate.
pub struct WriteLock(sqlx::SqliteConnection);

impl WriteLock {
    /// Commits the empty transaction, letting writers in.
    pub async fn release(mut self) {
        sqlx::query("COMMIT").execute(&mut self.0).await.unwrap();
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(path) = &self.sqlite {
            if let Some(dir) = path.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        if let Some((url, schema)) = self.postgres.take() {
            // Best effort, on a thread of its own: the test's runtime may be
            // gone already.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    if let Ok(pool) = sqlx::PgPool::connect(&url).await {
                        let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                            .execute(&pool)
                            .await;
                        pool.close().await;
                    }
                });
            })
            .join();
        }
    }
}

/// Declares `$name` as two tests, `$name::sqlite` and `$name::postgres`,
/// each running `$body(db: Db)` on a multi-threaded runtime.
#[macro_export]
macro_rules! on_both {
    ($(#[$meta:meta])* async fn $name:ident($db:ident: Db) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn run($db: Db) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn sqlite() {
                run(Db::new(Backend::Sqlite, stringify!($name))).await;
            }

            // A test that is ignored for a reason of its own as well keeps
            // both reasons' attributes; only the first is shown.
            #[allow(unused_attributes)]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
            $(#[$meta])*
            async fn postgres() {
                run(Db::new(Backend::Postgres, stringify!($name))).await;
            }
        }
    };
}
