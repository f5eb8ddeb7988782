//! Buddy allocator over heap offsets (issue 5; not written yet).
