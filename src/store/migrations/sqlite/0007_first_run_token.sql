-- Migration 7 (PRAGMA user_version 6 -> 7): the dashboard's first-run token kept in the database
-- (docs/decisions.md §10, §12), not in one server's memory, so that every node on a shared
-- PostgreSQL database serves the first-run link any of them logged, and a restart keeps it. At
-- most one row; deleted in the transaction that makes the first user. Frozen (see
-- src/store/migrate.rs).

CREATE TABLE first_run (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    token       TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
