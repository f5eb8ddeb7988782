//! Stable plugin interface (being written).
