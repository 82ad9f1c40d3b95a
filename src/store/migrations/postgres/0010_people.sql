-- Migration 10: the dashboard's people: one-time secrets stored hashed (invitations, password
-- resets, the second step of a login, recovery codes) and each user's TOTP two-factor (see
-- migrations/sqlite/0010_people.sql).

CREATE TABLE user_tokens (
    token_hash  BYTEA PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('invite', 'reset', 'login', 'recovery')),
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    user_id     TEXT REFERENCES users(id) ON DELETE CASCADE,
    email       TEXT,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT
);
CREATE INDEX user_tokens_user ON user_tokens(user_id);
CREATE INDEX user_tokens_tenant ON user_tokens(tenant_id, kind);

ALTER TABLE users ADD COLUMN totp_secret TEXT;
ALTER TABLE users ADD COLUMN totp_pending TEXT;
ALTER TABLE users ADD COLUMN totp_last_step BIGINT;
