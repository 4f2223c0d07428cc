//! The model clients against the fake server: real HTTP, both providers, both modes.
