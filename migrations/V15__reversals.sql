-- Reversals (issue 26, part 4): a posted transfer moved back, all or part, by new transfers of
-- kind `reversal` that name it (`reverses`), from its destination to its source, in its
-- currency. Never more in total than it posted.
--
-- The original counts what was reversed of it (`reversed`, an amount) and how many reversals
-- did it (`reversals`), written in the same transaction as each reversal row, under the locks
-- of its two accounts (every reversal of one transfer locks those same two accounts first, so
-- concurrent reversals of it run one after the other and each reads what the previous one
-- left). The CHECK below is the last line: a write that would take `reversed` past what was
-- posted is refused by the database whatever the code did. `reversals` is also the position
-- of the original's `transfer.reversed` events (gap-free under those locks).
--
-- Existing rows were never reversed (0). Each constraint in its own ALTER TABLE, so Citus
-- propagates the file as it is; on Citus both sides of a transfer carry the counters and the
-- reversal's `reverses`.
ALTER TABLE transfers DROP CONSTRAINT transfers_kind_check;
ALTER TABLE transfers
    ADD CONSTRAINT transfers_kind_check
        CHECK (kind IN ('transfer', 'opening', 'deposit', 'withdrawal', 'reversal'));
ALTER TABLE transfers ADD COLUMN reverses text;
ALTER TABLE transfers ADD COLUMN reversed bigint NOT NULL DEFAULT 0;
ALTER TABLE transfers ADD COLUMN reversals integer NOT NULL DEFAULT 0;
-- A reversal, and only a reversal, names another transfer.
ALTER TABLE transfers
    ADD CONSTRAINT reversal_names_its_original
        CHECK ((kind = 'reversal') = (reverses IS NOT NULL) AND reverses <> id);
-- Only what was posted can be reversed, never more than that in total.
ALTER TABLE transfers
    ADD CONSTRAINT reversed_within_posted
        CHECK (reversed >= 0 AND reversed <= coalesce(posted_amount, amount)
               AND (reversed = 0 OR status = 'posted'));
-- Each reversal moves at least 1.
ALTER TABLE transfers
    ADD CONSTRAINT reversals_counted
        CHECK (reversals >= 0 AND reversals <= reversed AND (reversals = 0) = (reversed = 0));
-- An original's reversals, oldest first (its read lists them).
CREATE INDEX transfers_reverses ON transfers (reverses, created_at, id) WHERE reverses IS NOT NULL;
