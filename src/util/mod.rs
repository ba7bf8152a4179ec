//! Small helpers shared by every stage: one duration parser, one JSONL line reader, one atomic-write
//! helper, one lock type, one id generator. Look here before writing another.

pub mod atomic;
pub mod diff;
pub mod duration;
pub mod fault;
pub mod git;
pub mod ids;
pub mod lines;
pub mod lock;
pub mod par;
pub mod paths;
pub mod protobuf;
pub mod salvage;
pub mod term;
#[cfg(test)]
pub mod testing;
pub mod trace;
pub mod untrusted;
