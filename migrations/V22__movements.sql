-- A product's movements (issue 26, part 3, the stock side): every write of a product's stock
-- row writes one movement, in the same transaction, under that row's lock: what made it
-- (`kind`; the order, sale or return when there is one) and `available`, `reserved` and
-- `backordered` right after it. A stock statement page is a range of one product's movements;
-- each one's change is the difference with the movement before it (seq - 1), read beside it.
--
-- `seq` is the stock row's `version` after the write: every write moves it by one under the
-- row lock, so a product's movements are numbered without gaps, and a second movement under a
-- taken seq fails on the primary key (the transaction is refused, never a silent gap). `at` is
-- `clock_timestamp()` taken when the movements are appended, just before COMMIT, while the row
-- is still locked (on Citus the coordinator's): it never goes back along a product's seq, so
-- "the movements from T1 to T2" is a range of the `(product_id, at, seq)` index.
--
-- Kinds: `opening` (the counters a product had when this migration ran, or a fixture's), `count`
-- and `adjustment` (arrivals: a count or an adjustment, with the backorders they filled),
-- `reserve`, `confirm`, `release`, `expire`, `sale`, `return`, `repair`, `policy` (a backorder
-- limit set; its counters unchanged) and `other` (a write whose flow named no cause: none does
-- today). `order_id` is NULL for a batch write that served several orders of one product.
--
-- No foreign key to stock: every movement is written by the engine under its row's lock, and a
-- foreign key would cost a check per row on the hot path; the stock audit compares each
-- product's latest movement with its counters instead.
--
-- Existing products: one `opening` movement each at their current version, with their counters
-- as they are when this runs. History before it is not known.
CREATE TABLE product_movements (
    product_id        bigint      NOT NULL,
    seq               bigint      NOT NULL CHECK (seq >= 0),
    kind              text        NOT NULL
                      CHECK (kind IN ('opening', 'count', 'adjustment', 'reserve', 'confirm',
                                      'release', 'expire', 'sale', 'return', 'repair',
                                      'policy', 'move', 'other')),
    order_id          text,
    sale_id           text,
    return_id         text,
    move_id           text,
    available_after   integer     NOT NULL,
    reserved_after    integer     NOT NULL,
    backordered_after integer     NOT NULL,
    at                timestamptz NOT NULL,
    PRIMARY KEY (product_id, seq)
);
-- Statement pages (`at` from/to, keyset on (at, seq)).
CREATE INDEX product_movements_at ON product_movements (product_id, at, seq);

INSERT INTO product_movements (product_id, seq, kind, available_after, reserved_after,
                               backordered_after, at)
SELECT product_id, version, 'opening', available, reserved, backordered, now()
  FROM stock;
