-- Migration 7: the dashboard's first-run token kept in the database, so that every node serves
-- the first-run link any of them logged (see migrations/sqlite/0007_first_run_token.sql).

CREATE TABLE first_run (
    id          BIGINT PRIMARY KEY CHECK (id = 1),
    token       TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
