//! Bundles (`PUT /v1/products/{id}/bundle`): a product declared a bundle of components with
//! quantities, read with its derived availability, or turned back into a plain product; and
//! the step that lets every stock operation take a bundle ([`refused_recipes`], [`expand`]).
//!
//! A declaration is one transaction: the bundle's row (created at zero when new) and its
//! components' rows locked in the global lock order, then checked
//! ([`decide::check_declaration`]: never itself, components that exist and are no bundles, a
//! bundle row that holds nothing, a bundle that is no component) and the recipe written in
//! place of the old one. Two declarations that could nest one bundle in another both lock the
//! other's row, so one waits for the other and then sees it.
//!
//! How an operation takes a bundle: a bundle's own row holds nothing (the schema's check), so
//! a reserve or a sale that names one is refused on it (`InsufficientStock`) like any empty
//! product, and a replay of one is a conflict (the order's rows are its components'). On those
//! answers, and only then, the engine asks [`refused_recipes`]: one read of the request's
//! recipes; with a bundle among them, the request is run once more with the components
//! ([`expand`]), all or nothing. A request without bundles pays nothing, and a refused one a
//! single indexed read. An engine that has seen a product refused as a bundle reads the
//! recipes first the next time ([`crate::stock::bundled`]). Returns and partial confirms and releases name their
//! lines directly, so they are rewritten before they run ([`expand_returns`], [`expand_lines`]).
//! A recipe read before the operation's own transaction is the recipe the operation uses: a
//! declaration that commits in between is seen by the next request.

use std::collections::BTreeMap;

use crate::domain::{Lines, OrderItems, ProductId};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::decide::bundles::{self as decide, Recipes};
use crate::stock::model::{Bundle, BundleComponent, Placement, ReturnItems};
use crate::stock::rows::bundles as rows;
use crate::stock::rows::stock;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_transaction};

/// Declares `bundle` a bundle of `components` (units per bundle), replacing the recipe it had.
/// The product is created when new. Refusals: [`Error::BundleHoldsStock`] (the product holds
/// units, is stocked per location or takes backorders), [`Error::ProductIsBundle`] (a
/// component is a bundle), [`Error::ComponentOfBundle`] (the product is a component),
/// [`Error::UnknownProduct`] (a component that does not exist), and the input error of a
/// bundle of itself.
pub async fn declare(
    store: &Store,
    bundle: ProductId,
    components: &OrderItems,
) -> Result<Bundle, Error> {
    let writer = store.writer();
    in_transaction(
        &store.pool,
        &store.tx,
        Operation::DeclareBundle,
        move |client| crate::write_tx!(client, writer => |tx| declare_tx(&tx, bundle, components)),
    )
    .await
}

async fn declare_tx(
    tx: &Tx<'_>,
    bundle: ProductId,
    components: &OrderItems,
) -> Result<Bundle, Error> {
    stock::ensure(tx, bundle).await?;
    let mut keys: Vec<i64> = components.iter().map(|(c, _)| c.get()).collect();
    keys.push(bundle.get());
    keys.sort_unstable();
    keys.dedup();
    let rows = rows::lock_candidates(tx, &keys).await?;
    let component_of = rows::bundle_of(tx, bundle).await?;
    decide::check_declaration(bundle, components, &rows, component_of)?;
    let recipe: Vec<(ProductId, i32)> = components.iter().map(|(c, q)| (c, q.get())).collect();
    rows::replace(tx, bundle, &recipe).await?;
    let available = rows.iter().map(|(p, row)| (*p, row.available)).collect();
    Ok(answer(bundle, &recipe, &available))
}

/// `bundle`'s components and derived availability. [`Error::NotABundle`] for a plain product,
/// [`Error::UnknownProduct`] for none.
pub async fn get(store: &Store, bundle: ProductId) -> Result<Bundle, Error> {
    let client = checkout(&store.pool, Operation::StockRead).await?;
    let tx = Tx::new(&client, store.dialect());
    match read_on(&tx, bundle).await? {
        Some(found) => Ok(found),
        None => match stock::read(&tx, bundle).await? {
            Some(_) => Err(Error::NotABundle(bundle)),
            None => Err(Error::UnknownProduct(bundle)),
        },
    }
}

/// `product` as a bundle, read on `tx` (`None`: it is none).
pub(crate) async fn read_on(tx: &Tx<'_>, product: ProductId) -> Result<Option<Bundle>, Error> {
    let recipes = rows::recipes(tx, &[product.get()]).await?;
    let Some(recipe) = recipes.get(&product) else {
        return Ok(None);
    };
    let keys: Vec<i64> = recipe.iter().map(|(c, _)| c.get()).collect();
    let available = rows::available(tx, &keys).await?;
    Ok(Some(answer(product, recipe, &available)))
}

/// Turns `bundle` back into a plain product (with no units: it held none); its recipe is
/// forgotten. Orders already made keep the components they took.
pub async fn remove(store: &Store, bundle: ProductId) -> Result<(), Error> {
    let writer = store.writer();
    in_transaction(
        &store.pool,
        &store.tx,
        Operation::DeclareBundle,
        move |client| {
            crate::write_tx!(client, writer => |tx| async {
                let row = stock::lock_one(&tx, bundle)
                    .await?
                    .ok_or(Error::UnknownProduct(bundle))?;
                if !row.bundle {
                    return Err(Error::NotABundle(bundle));
                }
                rows::replace(&tx, bundle, &[]).await
            })
        },
    )
    .await
}

fn answer(
    bundle: ProductId,
    recipe: &[(ProductId, i32)],
    available: &BTreeMap<ProductId, i32>,
) -> Bundle {
    Bundle {
        product_id: bundle,
        available: decide::derived_available(recipe, available),
        components: recipe
            .iter()
            .map(|(c, q)| BundleComponent {
                product_id: *c,
                quantity: *q,
                available: available.get(c).copied().unwrap_or(0),
            })
            .collect(),
    }
}

/// The recipes of the bundles among `products` (none: an empty map).
pub async fn recipes(store: &Store, products: &[i64]) -> Result<Recipes, Error> {
    let client = checkout(&store.pool, Operation::StockRead).await?;
    let tx = Tx::new(&client, store.dialect());
    rows::recipes(&tx, products).await
}

/// Whether `result` is the answer a request naming a bundle gets on the bundle's own row: a
/// refusal for want of stock (or of a row) on one of `items`, or an idempotency conflict (a
/// replay compared with the components the first run took).
fn may_name_a_bundle<T>(items: &OrderItems, result: &Result<T, Error>) -> bool {
    match result {
        // A bundle's own row holds nothing, and is stocked at no location when pinned to one.
        Err(Error::InsufficientStock { product_id, .. })
        | Err(Error::UnknownProduct(product_id))
        | Err(Error::UnknownLocation { product_id, .. }) => {
            items.iter().any(|(p, _)| p == *product_id)
        }
        Err(Error::IdempotencyConflict(_)) | Err(Error::SaleConflict(_)) => true,
        _ => false,
    }
}

/// The recipes of the bundles `items` names when `result` may be a bundle's refusal on its own
/// row (`None`: the answer stands, also when the read fails, logged).
pub(crate) async fn refused_recipes<T>(
    store: &Store,
    items: &OrderItems,
    result: &Result<T, Error>,
) -> Option<Recipes> {
    if !may_name_a_bundle(items, result) {
        return None;
    }
    let products: Vec<i64> = items.iter().map(|(p, _)| p.get()).collect();
    match recipes(store, &products).await {
        Ok(recipes) if recipes.is_empty() => None,
        Ok(recipes) => Some(recipes),
        Err(e) => {
            tracing::warn!(error = %e, "could not read the recipes of a refused request");
            None
        }
    }
}

/// `items` and `placement` with every bundle of `recipes` standing for its components (an
/// expansion past the order limits is its input error; a component from two places a location
/// conflict).
pub(crate) fn expand(
    items: &OrderItems,
    placement: &Placement,
    recipes: &Recipes,
) -> Result<(OrderItems, Placement), Error> {
    Ok((
        decide::expand_items(items, recipes)?,
        decide::expand_placement(items, placement, recipes)?,
    ))
}

/// `lines` with each bundle standing for its components (one read of their recipes).
pub async fn expand_lines(store: &Store, lines: &Lines) -> Result<Lines, Error> {
    let products: Vec<i64> = lines.iter().map(ProductId::get).collect();
    let recipes = recipes(store, &products).await?;
    if recipes.is_empty() {
        return Ok(lines.clone());
    }
    decide::expand_lines(lines, &recipes)
}

/// A return's items with each bundle replaced by its components (one read of their recipes);
/// `None` when it names no bundle.
pub async fn expand_returns(
    store: &Store,
    items: &ReturnItems,
) -> Result<Option<ReturnItems>, Error> {
    let products: Vec<i64> = items.iter().map(|i| i.product_id.get()).collect();
    let recipes = recipes(store, &products).await?;
    if recipes.is_empty() {
        return Ok(None);
    }
    decide::expand_returns(items, &recipes).map(Some)
}
