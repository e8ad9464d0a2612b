-- Bundles (issue 27): a product declared a bundle of components with quantities (a gift box of
-- two products). A bundle holds no units of its own: reserving, selling or returning it does
-- the same to its components, and its availability is derived from theirs. So its stock row
-- is flagged `bundle` and can hold nothing (the check below is the last line behind the flows'
-- own refusals), and its recipe is one row per component.
ALTER TABLE stock ADD COLUMN bundle boolean NOT NULL DEFAULT false;
ALTER TABLE stock ADD CONSTRAINT stock_bundle_holds_nothing
    CHECK (NOT bundle OR (available = 0 AND reserved = 0 AND backorder_limit = 0
        AND backordered = 0 AND NOT located AND damaged = 0 AND safety_stock = 0
        AND incoming = 0));

-- A bundle's components: never the bundle itself, never another bundle (the flow checks that
-- under the stock rows' locks), each with how many one bundle takes.
CREATE TABLE bundle_components (
    bundle_id    bigint  NOT NULL REFERENCES stock (product_id),
    component_id bigint  NOT NULL REFERENCES stock (product_id),
    quantity     integer NOT NULL CHECK (quantity > 0),
    PRIMARY KEY (bundle_id, component_id),
    CONSTRAINT bundle_component_not_itself CHECK (bundle_id <> component_id)
);
CREATE INDEX bundle_components_by_component ON bundle_components (component_id);
