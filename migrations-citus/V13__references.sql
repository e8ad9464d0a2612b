-- Citus twin of migrations/V13__references.sql: the same statements, in sequential mode.
--
-- Why a twin: `transfers` (distributed) has a foreign key to the reference table
-- `transfer_groups` (V5), and Citus refuses DDL on the reference table after parallel DDL on
-- the distributed one in the same transaction ("cannot execute DDL on table transfer_groups
-- because there was a parallel DDL access to distributed table transfers"). Over one
-- connection per node, as V5's and V12's twins, it accepts both.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

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
