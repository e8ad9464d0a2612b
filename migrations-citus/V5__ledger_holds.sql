-- Citus twin of migrations/V5__ledger_holds.sql: the same columns and checks on accounts and on both
-- sides of every transfer (a hold's status moves on both sides in one statement).
--
-- What Citus refuses here, and what refuses the same writes instead:
-- - transfer_groups is small and rarely written: a reference table (a copy on every node), so
--   transfers.group_id can keep its foreign key.
-- - the unique (group_id, group_position) index (no distribution column; and both sides of a
--   transfer share their position): `transfer_group_positions`, a reference table keyed by
--   (group_id, group_position), written with the group, refuses a second transfer at a taken
--   position with 23505 as the index did.
-- - ADD COLUMN with a constraint inline, and several ADD CONSTRAINTs in one ALTER TABLE: each
--   column is added bare, then each check in an ALTER TABLE of its own, under the name
--   PostgreSQL would have given it (`<table>_<column>_check`).
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

ALTER TABLE accounts
    ADD COLUMN held            bigint NOT NULL DEFAULT 0,
    ADD COLUMN pending_credits bigint NOT NULL DEFAULT 0,
    ADD COLUMN min_balance     bigint DEFAULT 0,
    ADD COLUMN max_balance     bigint;
ALTER TABLE accounts
    ADD CONSTRAINT accounts_held_check CHECK (held >= 0);
ALTER TABLE accounts
    ADD CONSTRAINT accounts_pending_credits_check CHECK (pending_credits >= 0);

UPDATE accounts SET min_balance = NULL WHERE id = 0;

ALTER TABLE accounts DROP CONSTRAINT balance_not_negative;
ALTER TABLE accounts
    ADD CONSTRAINT limits_only_for_customers
        CHECK ((id = 0) = (min_balance IS NULL) AND (id <> 0 OR max_balance IS NULL));
ALTER TABLE accounts
    ADD CONSTRAINT limits_ordered
        CHECK (max_balance IS NULL OR min_balance IS NULL OR max_balance >= min_balance);
ALTER TABLE accounts
    ADD CONSTRAINT available_within_min
        CHECK (min_balance IS NULL OR balance::numeric - held >= min_balance);
ALTER TABLE accounts
    ADD CONSTRAINT pending_within_max
        CHECK (max_balance IS NULL OR balance::numeric + pending_credits <= max_balance);

CREATE TABLE transfer_groups (
    id          text        PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9._:-]{1,64}$'),
    size        smallint    NOT NULL CHECK (size BETWEEN 1 AND 100),
    created_at  timestamptz NOT NULL DEFAULT now()
);
SELECT create_reference_table('transfer_groups');

ALTER TABLE transfers
    ADD COLUMN status         text        NOT NULL DEFAULT 'posted',
    ADD COLUMN posted_amount  bigint,
    ADD COLUMN timeout_s      integer,
    ADD COLUMN expires_at     timestamptz,
    ADD COLUMN settled_at     timestamptz,
    ADD COLUMN group_id       text,
    ADD COLUMN group_position smallint;
ALTER TABLE transfers
    ADD CONSTRAINT transfers_status_check
        CHECK (status IN ('pending', 'posted', 'voided', 'expired'));
ALTER TABLE transfers
    ADD CONSTRAINT transfers_timeout_s_check CHECK (timeout_s BETWEEN 1 AND 2592000);
ALTER TABLE transfers
    ADD CONSTRAINT transfers_group_position_check CHECK (group_position BETWEEN 0 AND 99);
ALTER TABLE transfers ADD CONSTRAINT transfers_group_id_fkey
    FOREIGN KEY (group_id) REFERENCES transfer_groups (id);

ALTER TABLE transfers
    ADD CONSTRAINT posted_amount_only_when_posted
        CHECK (posted_amount IS NULL
               OR (status = 'posted' AND posted_amount BETWEEN 1 AND amount));
ALTER TABLE transfers
    ADD CONSTRAINT pending_has_deadline
        CHECK ((timeout_s IS NULL) = (expires_at IS NULL)
               AND (status = 'posted' OR expires_at IS NOT NULL));
ALTER TABLE transfers
    ADD CONSTRAINT holds_are_transfers
        CHECK (expires_at IS NULL OR kind = 'transfer');
ALTER TABLE transfers
    ADD CONSTRAINT group_position_with_group
        CHECK ((group_id IS NULL) = (group_position IS NULL));

CREATE INDEX transfers_pending_due ON transfers (expires_at) WHERE status = 'pending';

CREATE TABLE transfer_group_positions (
    group_id       text     NOT NULL REFERENCES transfer_groups (id),
    group_position smallint NOT NULL CHECK (group_position BETWEEN 0 AND 99),
    transfer_id    text     NOT NULL,
    PRIMARY KEY (group_id, group_position)
);
SELECT create_reference_table('transfer_group_positions');
