-- Citus twin of migrations/V22__movements.sql: the same table, distributed by product next to
-- the stock rows it belongs to (co-located), so each movement is written on its product's shard,
-- in the transaction that changes the product there, and a statement page is routed to that
-- one shard. The primary key holds the distribution column; `clock_timestamp()` of the
-- multi-row VALUES insert is the coordinator's. The opening movements are one co-located
-- INSERT … SELECT per shard.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

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
SELECT create_distributed_table('product_movements', 'product_id', colocate_with => 'stock');
-- Statement pages (`at` from/to, keyset on (at, seq)).
CREATE INDEX product_movements_at ON product_movements (product_id, at, seq);

INSERT INTO product_movements (product_id, seq, kind, available_after, reserved_after,
                               backordered_after, at)
SELECT product_id, version, 'opening', available, reserved, backordered, now()
  FROM stock;
