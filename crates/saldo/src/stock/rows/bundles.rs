//! Bundles' rows (migration V24): a bundle's recipe (`bundle_components`, one row per
//! component) and the `bundle` flag of its stock row.

use std::collections::BTreeMap;

use crate::domain::ProductId;
use crate::error::Error;
use crate::stock::decide::bundles::{Candidate, Recipes};
use crate::stock::sql;
use crate::store::dialect::Tx;

/// The recipes of the bundles among `products` (a product that is no bundle is absent).
pub(crate) async fn recipes(tx: &Tx<'_>, products: &[i64]) -> Result<Recipes, Error> {
    let rows = tx.query(&sql::BUNDLE_RECIPES, &[&products]).await?;
    let mut recipes: Recipes = BTreeMap::new();
    for row in &rows {
        let bundle = ProductId::new(row.try_get("bundle_id")?)?;
        let component = ProductId::new(row.try_get("component_id")?)?;
        let quantity: i32 = row.try_get("quantity")?;
        recipes
            .entry(bundle)
            .or_default()
            .push((component, quantity));
    }
    Ok(recipes)
}

/// Locks the rows of `products` (ascending, distinct: the lock order) and reads what a
/// declaration checks of each; a product that does not exist is absent.
pub(crate) async fn lock_candidates(
    tx: &Tx<'_>,
    products: &[i64],
) -> Result<BTreeMap<ProductId, Candidate>, Error> {
    debug_assert!(products.windows(2).all(|w| w[0] < w[1]));
    let rows = tx
        .query_keys(&sql::BUNDLE_CANDIDATES, products, &[])
        .await?;
    let mut out = BTreeMap::new();
    for row in &rows {
        let product = ProductId::new(row.try_get("product_id")?)?;
        let backorder_limit: i32 = row.try_get("backorder_limit")?;
        let held: i64 = row.try_get("held")?;
        out.insert(
            product,
            Candidate {
                bundle: row.try_get("bundle")?,
                available: row.try_get("available")?,
                takes_units: held > 0 || row.try_get("located")? || backorder_limit > 0,
            },
        );
    }
    Ok(out)
}

/// The `available` of each of `products` (absent: no such product).
pub(crate) async fn available(
    tx: &Tx<'_>,
    products: &[i64],
) -> Result<BTreeMap<ProductId, i32>, Error> {
    let rows = tx.query(&sql::AVAILABLE_OF, &[&products]).await?;
    rows.iter()
        .map(|r| {
            Ok((
                ProductId::new(r.try_get("product_id")?)?,
                r.try_get("available")?,
            ))
        })
        .collect()
}

/// A bundle that has `product` among its components, if any.
pub(crate) async fn bundle_of(tx: &Tx<'_>, product: ProductId) -> Result<Option<ProductId>, Error> {
    let row = tx
        .query_opt(&sql::BUNDLES_OF_COMPONENT, &[&product.get()])
        .await?;
    row.map(|r| Ok(ProductId::new(r.try_get("bundle_id")?)?))
        .transpose()
}

/// Writes `bundle`'s recipe in place of the one it had (its row flagged a bundle), or, with
/// no components, forgets it (the flag cleared).
pub(crate) async fn replace(
    tx: &Tx<'_>,
    bundle: ProductId,
    components: &[(ProductId, i32)],
) -> Result<(), Error> {
    tx.execute(&sql::CLEAR_RECIPE, &[&bundle.get()]).await?;
    for (component, quantity) in components {
        tx.execute(
            &sql::ADD_COMPONENT,
            &[&bundle.get(), &component.get(), quantity],
        )
        .await?;
    }
    let flagged = !components.is_empty();
    tx.execute(&sql::SET_BUNDLE_FLAG, &[&bundle.get(), &flagged])
        .await?;
    Ok(())
}
