-- Citus twin of migrations/V12__currencies.sql: the same statements, in sequential mode.
--
-- Why a twin: the UPDATE of accounts runs on every shard in parallel, and `transfers` has a
-- foreign key to the reference table `transfer_groups` (V5): Citus refuses DDL on such a
-- table after a parallel multi-shard operation in the same transaction. Over one connection
-- per node, as V5's twin, it accepts both.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

ALTER TABLE accounts ADD COLUMN currency text DEFAULT 'EUR';
ALTER TABLE accounts ADD COLUMN scale smallint DEFAULT 2;
UPDATE accounts SET currency = NULL, scale = NULL WHERE id = 0;
ALTER TABLE accounts
    ADD CONSTRAINT accounts_currency_shape CHECK (currency ~ '^[A-Z][A-Z0-9_]{2,11}$');
ALTER TABLE accounts
    ADD CONSTRAINT accounts_scale_range CHECK (scale BETWEEN 0 AND 18);
ALTER TABLE accounts
    ADD CONSTRAINT currency_only_for_customers
        CHECK ((id = 0) = (currency IS NULL) AND (currency IS NULL) = (scale IS NULL));

ALTER TABLE transfers ADD COLUMN currency text NOT NULL DEFAULT 'EUR';
ALTER TABLE transfers
    ADD CONSTRAINT transfers_currency_shape CHECK (currency ~ '^[A-Z][A-Z0-9_]{2,11}$');
