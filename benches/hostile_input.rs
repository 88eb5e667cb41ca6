//! Placeholder: the hostile-input campaign (issue #20) is being written.

fn main() {}
