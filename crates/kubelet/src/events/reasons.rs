//! Event reasons live in `types::event_reasons` so that modules below `events` can name them;
//! `events::*` keeps exporting them for the modules that record events.

pub use crate::types::event_reasons::*;
