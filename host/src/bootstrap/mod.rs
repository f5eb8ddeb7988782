//! Job bootstrap: launcher, PMI-1 client, key-value exchange (issue 6; not written yet).
