-- Currencies (issue 26): every customer account is denominated in one currency, with its
-- minor-unit scale, fixed when it is opened; every journal row records the currency it moved.
--
-- A currency code is an ISO 4217 code (`EUR`, `JPY`) or an operator's asset code of the same
-- shape: an upper-case letter, then 2..=11 upper-case letters, digits or underscores. The scale
-- is the number of minor-unit digits (0..=18): amounts stay integers of minor units.
--
-- Existing accounts and transfers migrate to the documented default, EUR with scale 2 (the
-- column defaults, which also serve a row written without them). The system account 0 is the
-- other side of deposits, withdrawals and openings in every currency: it has none (NULL), and
-- its one balance is the sum of its positions per currency, which the audit takes from the
-- journal's `currency` column.
--
-- Each constraint in its own ALTER TABLE and each column added bare, so Citus propagates the
-- file as it is (its twin only runs it in sequential mode).
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
