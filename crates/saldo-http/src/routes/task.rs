//! How a handler runs its library operation: on its own task, under the request's deadline,
//! waiting at most [`ANSWER_GRACE`] past it (see [`detached`]).

use crate::error::ApiError;

/// How long after the request's deadline a handler still waits for its operation: the library
/// answers by the deadline, except a COMMIT already in flight ([`saldo::deadline::COMMIT_GRACE`]).
pub const ANSWER_GRACE: std::time::Duration =
    std::time::Duration::from_secs(saldo::deadline::COMMIT_GRACE.as_secs() + 1);

/// Runs one library operation on its own task, under the request's deadline, and waits for it.
///
/// Why its own task: axum drops a handler's future when the client goes away. Dropped half-way,
/// a transaction would leave its connection inside `BEGIN …` and the pool would hand it to the
/// next request, whose `COMMIT` would commit the abandoned work too. On its own task the
/// operation always finishes, bounded by the deadline it carries (`saldo::deadline`): an
/// answer of "not applied" is then true. Should the operation outlive the deadline plus
/// [`ANSWER_GRACE`] (only a COMMIT in flight can), the answer is "outcome unknown": replay the
/// same request (same order or transfer id) to learn it.
pub async fn detached<T, F>(operation: F) -> Result<T, ApiError>
where
    F: std::future::Future<Output = Result<T, saldo::Error>> + Send + 'static,
    T: Send + 'static,
{
    let deadline = saldo::deadline::current();
    let task = tokio::spawn(saldo::deadline::within_opt(deadline, operation));
    let joined = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline + ANSWER_GRACE, task).await {
            Ok(joined) => joined,
            Err(_) => {
                return Err(ApiError::Domain(saldo::Error::OutcomeUnknown {
                    operation: saldo::Operation::Request,
                    cause: "it was still running past the request's deadline".into(),
                }))
            }
        },
        None => task.await,
    };
    match joined {
        Ok(result) => result.map_err(ApiError::from),
        Err(e) => Err(ApiError::Internal(format!("operation task failed: {e}"))),
    }
}
