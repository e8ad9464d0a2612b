-- Citus twin of migrations/V24__bundles.sql: the same flag and check on `stock` (Citus
-- propagates them), and `bundle_components` distributed by bundle, next to the bundle's own
-- stock row.
--
-- What Citus refuses here, and what refuses the same writes instead:
-- - component_id REFERENCES stock: a component's row lives on its own shard, not the
--   bundle's. The flow reads every component's row (locked) before it writes the recipe, and
--   refuses an unknown one.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

ALTER TABLE stock ADD COLUMN bundle boolean NOT NULL DEFAULT false;
ALTER TABLE stock ADD CONSTRAINT stock_bundle_holds_nothing
    CHECK (NOT bundle OR (available = 0 AND reserved = 0 AND backorder_limit = 0
        AND backordered = 0 AND NOT located AND damaged = 0 AND safety_stock = 0
        AND incoming = 0));

CREATE TABLE bundle_components (
    bundle_id    bigint  NOT NULL,
    component_id bigint  NOT NULL,
    quantity     integer NOT NULL CHECK (quantity > 0),
    PRIMARY KEY (bundle_id, component_id),
    CONSTRAINT bundle_component_not_itself CHECK (bundle_id <> component_id)
);
SELECT create_distributed_table('bundle_components', 'bundle_id', colocate_with => 'stock');
ALTER TABLE bundle_components ADD CONSTRAINT bundle_components_bundle
    FOREIGN KEY (bundle_id) REFERENCES stock (product_id);
CREATE INDEX bundle_components_by_component ON bundle_components (component_id);
