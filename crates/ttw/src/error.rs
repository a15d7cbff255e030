//! What fails, as the operator reads it: one line, and exit 1.

/// What failed, as one line for the operator.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(err: E) -> Failure {
        Failure(err.to_string())
    }
}

pub(crate) type Result<T> = std::result::Result<T, Failure>;

/// A failure with this message.
pub(crate) fn fail<T>(message: impl Into<String>) -> Result<T> {
    Err(Failure(message.into()))
}
