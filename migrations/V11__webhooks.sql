-- Webhook subscriptions and their delivery log (saldo::webhooks). Plain tables; on Citus they
-- stay tables of the coordinator, like `events` and `feed`, which they follow.
--
-- No secret is stored: a subscription's signing secret is derived from the service's webhook key
-- (a 0600 file beside its token files) and the subscription's id. `cursor_seq` is the `seq` of
-- the last feed event delivered (or skipped by the type filter). A delivery worker holds a
-- subscription while `leased_until` is in the future and `leased_by` names it; the cursor only
-- moves under that lease, so two services on one database never deliver one batch at once.
CREATE TABLE webhooks (
    id              uuid        PRIMARY KEY,
    url             text        NOT NULL,
    types           text[]      NOT NULL DEFAULT '{}',
    status          text        NOT NULL DEFAULT 'active',
    cursor_seq      bigint      NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    leased_by       uuid,
    leased_until    timestamptz NOT NULL DEFAULT '-infinity',
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhooks_url_length CHECK (octet_length(url) BETWEEN 1 AND 2048),
    CONSTRAINT webhooks_status CHECK (status IN ('active', 'failing')),
    CONSTRAINT webhooks_cursor CHECK (cursor_seq >= 0),
    CONSTRAINT webhooks_attempts CHECK (attempts >= 0),
    CONSTRAINT webhooks_types CHECK (cardinality(types) <= 32)
);

-- One row per delivery attempt, newest kept (the last 1000 per subscription: older rows are
-- deleted by the transaction that logs a new one).
CREATE TABLE webhook_deliveries (
    webhook_id  uuid        NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    n           bigint      GENERATED ALWAYS AS IDENTITY,
    id          uuid        NOT NULL,
    at          timestamptz NOT NULL DEFAULT now(),
    first_seq   bigint      NOT NULL,
    last_seq    bigint      NOT NULL,
    events      integer     NOT NULL,
    attempt     integer     NOT NULL,
    outcome     text        NOT NULL,
    http_status integer,
    duration_ms bigint      NOT NULL,
    PRIMARY KEY (webhook_id, n)
);

-- The fingerprint of the webhook key the services on this database sign with (an HMAC of a
-- fixed label under the key: it reveals nothing of the key). The first service to need it
-- records it; a service with another key creates no subscription and delivers nothing (its
-- signatures would not verify with the secrets the others handed out).
CREATE TABLE webhook_key (
    only_row    boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    fingerprint text    NOT NULL,
    CONSTRAINT webhook_key_fingerprint CHECK (length(fingerprint) = 64)
);
