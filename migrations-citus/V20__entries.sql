-- Citus twin of migrations/V20__entries.sql: the same table, distributed by account next to
-- the accounts it belongs to (co-located), so each entry is written on its account's shard,
-- in the transaction that changes the account there, and a statement page or a balance at a
-- time is routed to that one shard. The primary key holds the distribution column; Citus
-- evaluates `clock_timestamp()` of a multi-row VALUES insert on the coordinator (one clock for
-- every account). The opening entries are one co-located INSERT … SELECT per shard.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

ALTER TABLE accounts ADD COLUMN entry_seq bigint NOT NULL DEFAULT 0;

CREATE TABLE entries (
    account_id            bigint      NOT NULL,
    seq                   bigint      NOT NULL CHECK (seq >= 1),
    transfer_id           text,
    kind                  text        NOT NULL
                          CHECK (kind IN ('opening', 'transfer', 'deposit', 'withdrawal',
                                          'reversal', 'hold', 'post', 'void', 'expire',
                                          'repair')),
    direction             text        NOT NULL CHECK (direction IN ('debit', 'credit')),
    amount                bigint      NOT NULL CHECK (amount >= 0),
    currency              text,
    balance_after         bigint      NOT NULL,
    held_after            bigint      NOT NULL CHECK (held_after >= 0),
    pending_credits_after bigint      NOT NULL CHECK (pending_credits_after >= 0),
    at                    timestamptz NOT NULL,
    PRIMARY KEY (account_id, seq)
);
SELECT create_distributed_table('entries', 'account_id', colocate_with => 'accounts');
-- Statement pages (`at` from/to, keyset on (at, seq)) and the balance at a time (the last at
-- or before it): one range scan each.
CREATE INDEX entries_at ON entries (account_id, at, seq);

INSERT INTO entries (account_id, seq, transfer_id, kind, direction, amount, currency,
                     balance_after, held_after, pending_credits_after, at)
SELECT id, 1, NULL, 'opening', CASE WHEN balance < 0 THEN 'debit' ELSE 'credit' END,
       abs(balance), currency, balance, held, pending_credits, now()
  FROM accounts;
UPDATE accounts SET entry_seq = 1;
