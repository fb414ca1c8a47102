//! The web console's pieces that need no server: SVG charts and outcome strips.
pub mod chart;
pub mod strip;
