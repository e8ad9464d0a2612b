//! Path parameters, for the OpenAPI document only: handlers take them with `ApiPath<i64>` /
//! `ApiPath<String>` and check them through the domain newtypes.

use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::Required;
use utoipa::IntoParams;

use super::schema;

// Written by hand because utoipa's derive drops `required` for a field whose schema is
// `schema_with`.

pub struct ProductPath;
pub struct AccountPath;
pub struct OrderPath;
pub struct LocationPath;
pub struct ProductLocationPath;

impl IntoParams for LocationPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        path_param("location_id", schema::location_id())
    }
}

impl IntoParams for ProductLocationPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let mut params = path_param("product_id", schema::product_id());
        params.extend(path_param("location_id", schema::location_id()));
        params
    }
}

fn path_param(name: &str, schema: Schema) -> Vec<Parameter> {
    vec![ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .schema(Some(schema))
        .build()]
}

impl IntoParams for ProductPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        path_param("product_id", schema::product_id())
    }
}

impl IntoParams for AccountPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        path_param("id", schema::account_id())
    }
}

impl IntoParams for OrderPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        path_param("order_id", schema::order_id())
    }
}
