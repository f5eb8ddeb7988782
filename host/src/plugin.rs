//! Plugin discovery and selection (being written).
