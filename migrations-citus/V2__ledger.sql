-- Citus twin of migrations/V2__ledger.sql: accounts distributed by id, and their journal with them.
--
-- A transfer touches two accounts, so its journal row is written once per side: the debit side
-- on its source account's shard, the credit side on its destination's (`account_id` says which
-- account a row belongs to; it is `from_account` on the debit side, `to_account` on the credit
-- side). Why sides and not one row: every question about one account (its balance against its
-- posted debits and credits, its held amount against its pending debits) is then answered by
-- that account's shard alone, under one snapshot; a transfer writes exactly the shards of its
-- two accounts (Citus's 2PC when they differ) plus its id's; and the cross-shard rule (both
-- sides of a transfer exist and agree) is checked per transfer, not as one global sum.
--
-- What Citus refuses here, and what refuses the same writes instead:
-- - transfers.id as the primary key (no distribution column): the client's id is unique in
--   `transfer_ids`, distributed by that id, written in the same transaction as the sides. A
--   second transfer under one id fails there with 23505, as the primary key failed.
-- - from_account / to_account REFERENCES accounts (not co-located for both): each side's
--   `account_id` references accounts (co-located), and saldo writes both sides in one INSERT,
--   so a transfer naming an unknown account fails with 23503 on that account's side.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

CREATE TABLE accounts (
    id          bigint      PRIMARY KEY CHECK (id >= 0),
    balance     bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT balance_not_negative CHECK (id = 0 OR balance >= 0)
);
-- A co-location group of its own: accounts and products are unrelated (shards move apart).
SELECT create_distributed_table('accounts', 'id', colocate_with => 'none');

INSERT INTO accounts (id, balance) VALUES (0, 0);

CREATE TABLE transfer_ids (
    id           text        PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9._:-]{1,64}$'),
    from_account bigint      NOT NULL,
    to_account   bigint      NOT NULL,
    CHECK (from_account <> to_account)
);
SELECT create_distributed_table('transfer_ids', 'id', colocate_with => 'none');

CREATE TABLE transfers (
    account_id   bigint      NOT NULL,
    id           text        NOT NULL CHECK (id ~ '^[A-Za-z0-9._:-]{1,64}$'),
    from_account bigint      NOT NULL,
    to_account   bigint      NOT NULL,
    amount       bigint      NOT NULL CHECK (amount > 0),
    kind         text        NOT NULL DEFAULT 'transfer'
                 CHECK (kind IN ('transfer', 'opening', 'deposit', 'withdrawal')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    CHECK (from_account <> to_account),
    CONSTRAINT transfers_side CHECK (account_id IN (from_account, to_account)),
    PRIMARY KEY (account_id, id)
);
SELECT create_distributed_table('transfers', 'account_id', colocate_with => 'accounts');
ALTER TABLE transfers ADD CONSTRAINT transfers_account_id_fkey
    FOREIGN KEY (account_id) REFERENCES accounts (id);

CREATE INDEX transfers_by_id ON transfers (id);
