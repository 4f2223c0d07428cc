//! The one integration test binary.

mod suite;
mod support;
