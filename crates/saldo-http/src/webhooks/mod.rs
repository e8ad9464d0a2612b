//! Signed webhooks from the event feed, the service's side: the key the signing secrets are
//! derived from ([`key`]), a delivery's bounded body ([`body`]), the worker's settings ([`settings`]), the HTTP client that delivers
//! with the address rule at connect time ([`client`]), and the delivery worker `saldo serve`
//! runs ([`worker`]). The subscriptions, leases and log are the library's
//! ([`saldo::webhooks`]); the admin routes are `routes::webhooks`.

pub mod body;
pub mod client;
pub mod key;
pub mod settings;
pub mod worker;
