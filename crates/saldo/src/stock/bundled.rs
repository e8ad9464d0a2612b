//! How the engine runs a reserve or a sale that may name a bundle: as named first, and with the
//! bundles' components in their place when the answer is a bundle's refusal on its own empty
//! row ([`crate::stock::flows::bundles`] says why that is the signal).
//!
//! That costs a bundle order a refused attempt before its real one (a transaction, and for
//! `batched` a trip through a batch), which halved its throughput against the same work named
//! as components. So the engine remembers which products it has seen refused as bundles
//! ([`BundleHints`]) and, for a request naming one, reads the recipes first. The memory is a
//! hint, never an answer: the recipes are read fresh every time, a product that is no bundle
//! any more is forgotten and run as named, and a replay of an order stored under the product's
//! own id (sold before it became a bundle) is run as named when the components conflict.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Mutex;

use crate::domain::{OrderItems, ProductId};
use crate::error::Error;
use crate::stock::flows::bundles;
use crate::stock::model::Placement;
use crate::store::handle::Store;

/// Products an engine remembers as bundles at most; past it the memory starts again (a hint
/// lost costs one refused attempt).
pub const MAX_BUNDLE_HINTS: usize = 10_000;

/// Products seen refused as bundles, bounded by [`MAX_BUNDLE_HINTS`].
#[derive(Debug, Default)]
pub struct BundleHints {
    seen: Mutex<HashSet<ProductId>>,
}

impl BundleHints {
    fn names_one(&self, items: &OrderItems) -> bool {
        match self.seen.lock() {
            Ok(seen) => !seen.is_empty() && items.iter().any(|(p, _)| seen.contains(&p)),
            Err(_) => false,
        }
    }

    fn learn(&self, bundles: impl Iterator<Item = ProductId>) {
        if let Ok(mut seen) = self.seen.lock() {
            for bundle in bundles {
                if seen.len() >= MAX_BUNDLE_HINTS {
                    seen.clear();
                }
                seen.insert(bundle);
            }
        }
    }

    fn forget(&self, items: &OrderItems) {
        if let Ok(mut seen) = self.seen.lock() {
            for (p, _) in items.iter() {
                seen.remove(&p);
            }
        }
    }
}

/// Runs a request of `items` placed by `placement`: `run(None)` as named, `run(Some(..))` with
/// the bundles' components and the placement carried onto them.
pub(crate) async fn named_or_components<T, F, Fut>(
    store: &Store,
    hints: &BundleHints,
    (items, placement): (&OrderItems, &Placement),
    run: F,
) -> Result<T, Error>
where
    F: Fn(Option<(OrderItems, Placement)>) -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut components_tried = false;
    if hints.names_one(items) {
        let products: Vec<i64> = items.iter().map(|(p, _)| p.get()).collect();
        let recipes = bundles::recipes(store, &products).await?;
        if recipes.is_empty() {
            hints.forget(items);
        } else {
            let result = run(Some(bundles::expand(items, placement, &recipes)?)).await;
            if !matches!(
                result,
                Err(Error::IdempotencyConflict(_)) | Err(Error::SaleConflict(_))
            ) {
                return result;
            }
            components_tried = true;
        }
    }
    let first = run(None).await;
    if components_tried {
        return first;
    }
    match bundles::refused_recipes(store, items, &first).await {
        None => first,
        Some(recipes) => {
            hints.learn(recipes.keys().copied());
            run(Some(bundles::expand(items, placement, &recipes)?)).await
        }
    }
}
