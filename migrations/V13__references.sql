-- References and metadata (issue 26, part 2): a transfer, hold, group and account may carry the
-- caller's own id for it (`reference`: a payment, an invoice, a cart; 1..=128 characters, not
-- unique) and `metadata` (a JSON object of at most 16 string values; keys 1..=64 characters,
-- values at most 256, so at most about 20 KiB as JSON). The service validates both before they get here
-- (`domain::Reference`, `domain::Metadata`); the CHECKs keep the shape for any other writer.
--
-- Both are part of a transfer's and a group's idempotency comparison (the same id with another
-- reference or metadata is a conflict), so they are written once, with the row, and never
-- change. On Citus both sides of a transfer carry them.
--
-- Existing rows have neither (NULL). Columns are added bare (no default, no rewrite) and each
-- constraint in its own ALTER TABLE, so Citus propagates the file as it is (its twin only runs
-- it in sequential mode: a foreign key joins transfers to the reference table transfer_groups).
ALTER TABLE transfers ADD COLUMN reference text;
ALTER TABLE transfers ADD COLUMN metadata jsonb;
ALTER TABLE transfers
    ADD CONSTRAINT transfers_reference_length CHECK (char_length(reference) BETWEEN 1 AND 128);
ALTER TABLE transfers
    ADD CONSTRAINT transfers_metadata_object CHECK (jsonb_typeof(metadata) = 'object');
-- The search by reference (`GET /v1/transfers?reference=`) pages in id order.
CREATE INDEX transfers_reference ON transfers (reference, id) WHERE reference IS NOT NULL;

ALTER TABLE transfer_groups ADD COLUMN reference text;
ALTER TABLE transfer_groups ADD COLUMN metadata jsonb;
ALTER TABLE transfer_groups
    ADD CONSTRAINT transfer_groups_reference_length
        CHECK (char_length(reference) BETWEEN 1 AND 128);
ALTER TABLE transfer_groups
    ADD CONSTRAINT transfer_groups_metadata_object CHECK (jsonb_typeof(metadata) = 'object');

ALTER TABLE accounts ADD COLUMN reference text;
ALTER TABLE accounts ADD COLUMN metadata jsonb;
ALTER TABLE accounts
    ADD CONSTRAINT accounts_reference_length CHECK (char_length(reference) BETWEEN 1 AND 128);
ALTER TABLE accounts
    ADD CONSTRAINT accounts_metadata_object CHECK (jsonb_typeof(metadata) = 'object');
