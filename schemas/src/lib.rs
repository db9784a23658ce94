//! placeholder, filled below
