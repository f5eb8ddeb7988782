//! Registration cache (issue 3; not written yet).
