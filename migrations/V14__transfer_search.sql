-- Transfer search (issue 26, part 2): `GET /v1/transfers?reference=&account=&status=` pages in
-- transfer id order (keyset, `saldo::listing::ledger::transfers`), driven by one index per
-- filter so a page never reads more than its bound:
-- - `reference`: `transfers_reference (reference, id)` (V13);
-- - `account` (either side): the two indexes below, one ordered scan per side merged by id
--   (a transfer's two accounts differ, so it is found once);
-- - no filter, or `status` alone: the primary key, with the status checked per row read.
--
-- They replace V2's `transfers_by_from (from_account)` and `transfers_by_to (to_account)`,
-- which are their prefixes (every statement that used those, an account's history and the
-- foreign keys' checks, uses these the same way), so a write maintains two indexes for the
-- accounts, as before. Built in the migration's transaction (writes to `transfers` wait for
-- it; CREATE INDEX CONCURRENTLY cannot run inside one).
--
-- On Citus (its twin) nothing is needed: there every journal row is an account's side, and
-- its primary key (account_id, id) already pages one account's transfers by id.
CREATE INDEX transfers_from_id ON transfers (from_account, id);
CREATE INDEX transfers_to_id ON transfers (to_account, id);
DROP INDEX transfers_by_from;
DROP INDEX transfers_by_to;
