//! The `skip` regions of a `turns` section: records that belong to no turn (a Claude sidechain, a
//! Codex subagent's copied history), followed as the records go by.

use crate::rules::doc::Pruned;

/// The `skip` regions of a `turns` section, as records go by.
pub(super) struct Skipper<'a> {
    skips: &'a [crate::rules::Skip],
    /// Which skip's region is open.
    pub(super) open: Option<usize>,
    /// Whether the open region's `until_after` record has been read (true when it has none).
    pub(super) until_armed: bool,
    /// Per skip: whether its `after` record has been read (true when it has none).
    pub(super) armed: Vec<bool>,
}

impl<'a> Skipper<'a> {
    pub(super) fn new(skips: &'a [crate::rules::Skip]) -> Self {
        Skipper {
            skips,
            open: None,
            until_armed: false,
            armed: skips.iter().map(|s| s.after.is_none()).collect(),
        }
    }

    /// Whether some skip still waits for its `after` record (lines before the part must be read).
    pub(super) fn waiting(&self) -> bool {
        self.armed.iter().any(|a| !a)
    }

    pub(super) fn arm(&mut self, record: &Pruned) {
        for (s, armed) in self.skips.iter().zip(self.armed.iter_mut()) {
            if !*armed && s.after.as_ref().is_some_and(|a| a.holds(record)) {
                *armed = true;
            }
        }
    }

    /// Whether `record` (on transcript line `line`) is inside a skipped region.
    pub(super) fn skips(&mut self, line: u64, record: &Pruned) -> bool {
        if let Some(i) = self.open {
            let s = &self.skips[i];
            if !self.until_armed || !s.until.holds(record) {
                if !self.until_armed {
                    self.until_armed = s.until_after.as_ref().is_some_and(|a| a.holds(record));
                }
                return true;
            }
            self.open = None;
        }
        let start =
            self.skips.iter().enumerate().position(|(i, s)| {
                self.armed[i] && line >= s.earliest_line && s.from.holds(record)
            });
        self.arm(record);
        if let Some(i) = start {
            self.open = start;
            self.until_armed = self.skips[i].until_after.is_none();
            return true;
        }
        false
    }
}
