-- References and metadata on direct sales (issue 26, part 2): a sale may carry the caller's own
-- id for it (`reference`: the payment, the invoice, the cart; 1..=128 characters, not unique)
-- and `metadata` (a JSON object of string values, bounded as on transfers: see V13). Both are
-- part of the sale's idempotency comparison (the same sale id with another reference or
-- metadata is a conflict), written once with the `sales` row and never changed.
--
-- On Citus `sales` is a reference table: the same file runs there as it is (no distributed
-- table is altered beside it). Existing sales have neither (NULL); columns are added bare.
ALTER TABLE sales ADD COLUMN reference text;
ALTER TABLE sales ADD COLUMN metadata jsonb;
ALTER TABLE sales
    ADD CONSTRAINT sales_reference_length CHECK (char_length(reference) BETWEEN 1 AND 128);
ALTER TABLE sales
    ADD CONSTRAINT sales_metadata_object CHECK (jsonb_typeof(metadata) = 'object');
