//! What a person reads (errand lines on stdout) and what a machine reads (one JSON
//! document), both from the engine's events and report.

mod metrics;
mod plan;
mod printable;
mod report_file;
mod summary;
mod table;
mod text;

pub use metrics::{RunMetrics, metrics_text, outside_window_text};
pub use plan::plan_text;
pub use printable::printable;
pub use report_file::{check_writable, write_file, write_json_file};
pub use summary::summary;
pub use table::table;
pub use text::{TextOutput, line};
