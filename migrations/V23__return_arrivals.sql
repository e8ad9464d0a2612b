-- A return into `available` is an arrival (issue 27): its units fill the product's backorders
-- first, as counts, adjustments and moves do, and a fill names the history row that brought
-- its units (the audit orders fills against counts by it). So a return that fills records a
-- movement of kind `return` (the units returned) in the product's history. The on-hand audit
-- does not add these up: it counts returns from `return_items`, as before.
ALTER TABLE stock_movements DROP CONSTRAINT stock_movements_kind_check;
ALTER TABLE stock_movements ADD CONSTRAINT stock_movements_kind_check
    CHECK (kind IN ('count', 'adjustment', 'move', 'return'));
