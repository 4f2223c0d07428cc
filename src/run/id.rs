//! A subtask's number and the label it is known by (`S3`).
//!
//! The type lives in [`crate::status`], a leaf the journal and the events use too: they
//! hold it typed and serde writes it as its label (`"S3"`), so the run never parses a
//! label it wrote back.

pub use crate::status::{BadSubtaskLabel, SubtaskId};
