//! What a run leaves behind (SPEC.md, "Output directory"): `summary.json` as a type, the
//! files of the output directory, and the SVG charts that the commands draw.

pub mod plot;
pub mod records;
pub mod report;
pub mod summary;
pub mod table;
