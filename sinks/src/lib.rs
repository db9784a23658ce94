//! Writers for tracemill tables (being written).
