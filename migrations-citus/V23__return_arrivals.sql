-- Citus twin of migrations/V23__return_arrivals.sql: the same check (Citus propagates it to
-- the shards of `stock_movements`). Backorders are refused on Citus, so no return records such
-- a movement there yet; the schemas stay in step.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

ALTER TABLE stock_movements DROP CONSTRAINT stock_movements_kind_check;
ALTER TABLE stock_movements ADD CONSTRAINT stock_movements_kind_check
    CHECK (kind IN ('count', 'adjustment', 'move', 'return'));
