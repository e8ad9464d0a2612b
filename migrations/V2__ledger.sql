-- Accounts and the double-entry transfer journal (seed 002).
-- Account 0 is the system account: deposits, withdrawals and opening balances are transfers
-- against it, so the sum of all balances (it included) never changes. Only it may go negative.
CREATE TABLE accounts (
    id          bigint      PRIMARY KEY CHECK (id >= 0),
    balance     bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT balance_not_negative CHECK (id = 0 OR balance >= 0)
);

INSERT INTO accounts (id, balance) VALUES (0, 0);

-- Keyed by the client's transfer id: a replay finds the row and returns the original result.
CREATE TABLE transfers (
    id           text        PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9._:-]{1,64}$'),
    from_account bigint      NOT NULL REFERENCES accounts (id),
    to_account   bigint      NOT NULL REFERENCES accounts (id),
    amount       bigint      NOT NULL CHECK (amount > 0),
    kind         text        NOT NULL DEFAULT 'transfer'
                 CHECK (kind IN ('transfer', 'opening', 'deposit', 'withdrawal')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    CHECK (from_account <> to_account)
);

CREATE INDEX transfers_by_from ON transfers (from_account);
CREATE INDEX transfers_by_to ON transfers (to_account);
