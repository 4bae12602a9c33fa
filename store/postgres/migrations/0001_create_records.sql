-- Records, one row per key. The primary key is the SHA-256 of scope:key
-- (32 bytes), never the raw key, so key length and content never reach an
-- index. The raw key is kept for inspection only.
CREATE TABLE {{.Table}} (
    key_hash    bytea       NOT NULL,
    scope       text        NOT NULL,
    key         text        NOT NULL,
    fingerprint text        NOT NULL,
    binding     text        NOT NULL,
    state       text        NOT NULL,
    -- The engine's uint64 fencing token, stored as the int64 with the same bits.
    token       bigint      NOT NULL,
    value       bytea,
    request_id  text        NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    lease_until timestamptz NOT NULL,
    CONSTRAINT {{ident .Name "_pkey"}} PRIMARY KEY (key_hash),
    CONSTRAINT {{ident .Name "_key_hash_check"}} CHECK (octet_length(key_hash) = 32),
    CONSTRAINT {{ident .Name "_state_check"}} CHECK (state IN ('in_progress', 'succeeded', 'failed'))
) WITH (fillfactor = 90); -- room for HOT updates of lease renewals

-- Cleanup walks this index, so its cost follows the expired rows only.
CREATE INDEX {{ident .Name "_expires_at_idx"}} ON {{.Table}} (expires_at);
