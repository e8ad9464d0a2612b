-- Citus twin of migrations/V9__account_repairs.sql: the same table, distributed by account next
-- to the accounts it names (a repair's write and its trace stay on the account's shard, in one
-- transaction there).
--
-- What Citus refuses here, and what refuses the same writes instead: nothing. The key already
-- holds the distribution column, and the reference to accounts is co-located.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

CREATE TABLE account_repairs (
    id                     bigserial   NOT NULL,
    account_id             bigint      NOT NULL,
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
SELECT create_distributed_table('account_repairs', 'account_id', colocate_with => 'accounts');
ALTER TABLE account_repairs ADD CONSTRAINT account_repairs_account_id_fkey
    FOREIGN KEY (account_id) REFERENCES accounts (id);
