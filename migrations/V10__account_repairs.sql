-- Ledger repairs: one row per account whose counters (`balance`, `held`, `pending_credits`) a
-- repair brought back to what its journal says (`saldo audit --repair --apply`,
-- `POST /v1/admin/repair`). Append-only: the values before and after, and why. Not a journal
-- row: the journal is the truth the counters are repaired to, and a repair moves no money.
CREATE TABLE account_repairs (
    id                     bigserial   NOT NULL,
    account_id             bigint      NOT NULL REFERENCES accounts (id),
    balance_before         bigint      NOT NULL,
    held_before            bigint      NOT NULL,
    pending_credits_before bigint      NOT NULL,
    balance_after          bigint      NOT NULL,
    held_after             bigint      NOT NULL CHECK (held_after >= 0),
    pending_credits_after  bigint      NOT NULL CHECK (pending_credits_after >= 0),
    reason                 text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    repaired_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, id)
);
