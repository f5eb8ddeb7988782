//! fireopal host runtime (being written).
