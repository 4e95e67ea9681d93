//! rvs health checking: keepalived's checkers run on tokio.
#![warn(missing_docs, unreachable_pub)]

pub mod probe;
