//! The routes, one module per resource, and the list of them the OpenAPI document
//! ([`crate::openapi`]) is collected from ([`router`]).
//!
//! Imports point one way: the leaves below (what several route modules share) import no route
//! module; the route modules import leaves (and never this module); this module imports the
//! route modules to list them.

// Leaves: shared by the route modules.
pub mod bodies;
pub mod extract;
pub(crate) mod numbers;
pub mod params;
pub mod schema;
pub mod task;
pub mod views;

// One module per resource.
pub mod accounts;
pub mod admin;
pub mod bundles;
pub mod docs;
pub mod entries;
pub mod events;
pub mod health;
pub mod lists;
pub mod movements;
pub mod moves;
pub mod orders;
pub mod repair;
pub mod returns;
pub mod sales;
pub mod stock;
pub mod transfers;
pub mod webhooks;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

/// Every route with its OpenAPI path.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(stock::set_count, stock::get_stock))
        .routes(routes!(movements::list_movements))
        .routes(routes!(stock::adjust))
        .routes(routes!(stock::set_policy))
        .routes(routes!(stock::set_location_count))
        .routes(routes!(stock::set_priority, stock::retire_location))
        .routes(routes!(
            bundles::declare_bundle,
            bundles::get_bundle,
            bundles::remove_bundle
        ))
        .routes(routes!(orders::reserve))
        .routes(routes!(orders::rereserve))
        .routes(routes!(orders::extend))
        .routes(routes!(sales::sell))
        .routes(routes!(orders::confirm))
        .routes(routes!(orders::release))
        .routes(routes!(orders::get_order))
        .routes(routes!(returns::record_return))
        .routes(routes!(moves::move_units))
        .routes(routes!(accounts::open_account))
        .routes(routes!(accounts::get_account))
        .routes(routes!(accounts::list_transfers))
        .routes(routes!(entries::list_entries))
        .routes(routes!(entries::balance_at))
        .routes(routes!(accounts::deposit))
        .routes(routes!(accounts::withdraw))
        .routes(routes!(accounts::transfer, lists::search_transfers))
        .routes(routes!(transfers::get_transfer))
        .routes(routes!(transfers::post_transfer))
        .routes(routes!(transfers::void_transfer))
        .routes(routes!(transfers::reverse_transfer))
        .routes(routes!(transfers::transfer_group))
        .routes(routes!(admin::sweep))
        .routes(routes!(admin::audit))
        .routes(routes!(repair::repair))
        .routes(routes!(admin::locks))
        .routes(routes!(admin::refusals))
        .routes(routes!(webhooks::create_webhook, webhooks::list_webhooks))
        .routes(routes!(webhooks::get_webhook, webhooks::delete_webhook))
        .routes(routes!(webhooks::resume_webhook))
        .routes(routes!(webhooks::list_webhook_deliveries))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
        .routes(routes!(health::openapi))
        .routes(routes!(lists::list_products))
        .routes(routes!(lists::list_orders))
        .routes(routes!(lists::list_locations))
        .routes(routes!(lists::list_accounts))
        .routes(routes!(events::list_events))
        .routes(routes!(events::stream_events))
        .routes(routes!(docs::page))
        // The page's own assets: not API operations, so not in the document.
        .route(docs::SCRIPT_PATH, axum::routing::get(docs::script))
        .route(docs::STYLE_PATH, axum::routing::get(docs::style))
}
