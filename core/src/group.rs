//! Process groups (issue 4; not written yet).
