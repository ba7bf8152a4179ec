//! Small helpers shared by every stage: one duration parser, one size parser, one JSONL line reader,
//! one path expander. Look here before writing another.

pub mod duration;
pub mod lines;
pub mod paths;
