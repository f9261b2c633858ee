//! Sources being retired (docs/design.md section 5, "Retire a source"): a
//! visit dead-letters their due rows it meets and the committer their failed
//! attempts, both with the retirement's reason, and counts them for the
//! admin job ([`crate::PipelineHandle::retire`]).

use std::collections::HashMap;

use ankusa_keys::SourceId;
use tracing::info;

/// The retiring sources and the rows dead-lettered for them.
#[derive(Default)]
pub(crate) struct Retirements {
    /// Sources being retired, with the dead-letter reason.
    retiring: HashMap<SourceId, String>,
    /// Rows of each retiring source this task dead-lettered with the
    /// retirement's reason (a due row met by a visit, an attempt that did not
    /// deliver) and not yet reported: the control call takes them, so the
    /// admin job counts them in its `done`.
    dead: HashMap<SourceId, u64>,
}

impl Retirements {
    /// The dead-letter reason of `source`, when it is being retired.
    pub(crate) fn reason(&self, source: SourceId) -> Option<&str> {
        self.retiring.get(&source).map(String::as_str)
    }

    /// One more row of `source` dead-lettered for its retirement.
    pub(crate) fn count_dead(&mut self, source: SourceId) {
        *self.dead.entry(source).or_default() += 1;
    }

    /// Starts (`Some(reason)`) or ends (`None`) `source`'s retirement.
    pub(crate) fn set(&mut self, source: SourceId, reason: Option<String>) {
        match reason {
            Some(r) => {
                if self.retiring.insert(source, r).is_none() {
                    info!(
                        source = source.0,
                        "source retired: its rows are dead-lettered as they are met"
                    );
                }
            }
            None => {
                if self.retiring.remove(&source).is_some() {
                    info!(source = source.0, "source retirement ended");
                }
            }
        }
    }

    /// Takes the count of `source`'s rows dead-lettered since the last take.
    pub(crate) fn take_dead(&mut self, source: SourceId) -> u64 {
        self.dead.remove(&source).unwrap_or(0)
    }
}
