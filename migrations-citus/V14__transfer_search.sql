-- Citus twin of migrations/V14__transfer_search.sql: nothing to do.
--
-- Why a twin: the portable file replaces V2's `transfers_by_from` and `transfers_by_to`, which
-- V2's Citus twin never created (its DROP INDEX would fail), with `(from_account, id)` and
-- `(to_account, id)`, which the search does not need here: every journal row is one account's
-- side (`account_id`), and the primary key `(account_id, id)` already pages one account's
-- transfers by id on its shard. The search without an account reads `transfers_by_id (id)`
-- (V2's twin) or `transfers_reference (reference, id)` (V13) on every shard, one side of each
-- transfer kept. Adding the portable indexes anyway would only cost every journal write.
SELECT 1;
