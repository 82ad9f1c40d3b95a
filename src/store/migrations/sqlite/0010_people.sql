-- Migration 10: the dashboard's people (docs/decisions/dashboard.md, "People"). `user_tokens`
-- holds every one-time secret of a person, only as its SHA-256: an invitation (a tenant and an
-- email, no user yet), a password reset, the second step of a login with two-factor on, and the
-- recovery codes (which do not expire). A row is deleted when its secret is used, so each works
-- once. The user's TOTP secret (`totp_secret`, base32; NULL: two-factor off), the secret of an
-- enrolment not yet confirmed (`totp_pending`), and the last time step a code was accepted at
-- (`totp_last_step`), so that a code works once. Frozen (see src/store/migrate.rs).

CREATE TABLE user_tokens (
    token_hash  BLOB PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('invite', 'reset', 'login', 'recovery')),
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    user_id     TEXT REFERENCES users(id) ON DELETE CASCADE,
    email       TEXT,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER
);
CREATE INDEX user_tokens_user ON user_tokens(user_id);
CREATE INDEX user_tokens_tenant ON user_tokens(tenant_id, kind);

ALTER TABLE users ADD COLUMN totp_secret TEXT;
ALTER TABLE users ADD COLUMN totp_pending TEXT;
ALTER TABLE users ADD COLUMN totp_last_step INTEGER;
