//! Test support: the fake model server and sealed git fixtures.
pub mod git_fixture;
