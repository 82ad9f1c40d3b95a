-- Migration 6 (PRAGMA user_version 5 -> 6): dashboard accounts and their logins (docs/decisions.md
-- §10): a user belongs to one tenant, its email is unique in any case, its password is kept only as
-- an Argon2id PHC string; a session row is keyed by the SHA-256 of the id in the browser's cookie,
-- and goes with its user. Frozen (see src/store/migrate.rs).

CREATE TABLE users (
    id                  TEXT PRIMARY KEY,
    tenant_id           TEXT NOT NULL REFERENCES tenants(id),
    email               TEXT NOT NULL UNIQUE COLLATE NOCASE,
    password_hash       TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    password_changed_at INTEGER NOT NULL
);
CREATE INDEX users_tenant ON users(tenant_id);
CREATE TABLE web_sessions (
    id_hash       BLOB PRIMARY KEY,
    user_id       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    csrf          TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    last_seen_at  INTEGER NOT NULL
);
CREATE INDEX web_sessions_user ON web_sessions(user_id);
