//! almanac: keeps a repository's `.almanac/` wiki up to date from coding-agent transcripts.
//!
//! Stages, one module each: `rules` (load, validate, compile), `discover` (walk stores, read heads, map
//! repos), `policy` (pure eligibility), `sweep` (gather, decide, act), `cli` (arguments and rendering).

pub mod automation;
pub mod capture;
pub mod cli;
pub mod config;
pub mod context;
pub mod discover;
pub mod fuzzing;
pub mod init;
#[cfg(test)]
mod layering;
pub mod ledger;
pub mod platform;
pub mod policy;
pub mod reason;
pub mod rules;
pub mod sweep;
pub mod turns;
pub mod util;
