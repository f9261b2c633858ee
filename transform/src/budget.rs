//! The step hook that bounds a run (docs/design.md section 6, "Transforms").
//!
//! jaq runs a program as a tree of lazy iterators, and every step of it that
//! can repeat (a call of a definition, a tail call, each output of a pipe, of
//! a `reduce` or of a binding) clones the run's context, whose data is ours:
//! [`Guard`]. Its `Clone` is the hook. It measures the stack from where the
//! run began (a recursion that does not end stops here, on a stack many times
//! larger, instead of overflowing it: an overflow aborts the whole process)
//! and, every [`CLOCK_EVERY`] steps, reads the clock against the run's
//! deadline. A step over either bound unwinds the run with a [`Stop`]
//! (`resume_unwind`: no panic hook, no message), which the run's thread
//! catches; jaq is `#![forbid(unsafe_code)]`, so unwinding through it leaves
//! nothing half-done but values that are dropped. The one native generator
//! that yields without a step of its own, `range`, steps the budget per
//! output (src/funs.rs).

use std::cell::Cell;
use std::time::Instant;

use jaq_core::Lut;
use jaq_core::data::{DataT, HasLut};
use jaq_json::Val;

/// How many steps pass between two reads of the clock (a read costs about
/// as much as a few hundred steps' checks of the stack).
pub(crate) const CLOCK_EVERY: u32 = 256;

/// The run-time data kind of a transform: jaq's JSON values, with [`Guard`]
/// as the data every native filter and every context carries.
pub(crate) struct Guarded;

impl DataT for Guarded {
    type V<'a> = Val;
    type Data<'a> = Guard<'a>;
}

/// The data of a run's contexts: the program's look-up table and the run's
/// [`Budget`]. Cloning it is a step of the run.
pub(crate) struct Guard<'a> {
    lut: &'a Lut<Guarded>,
    budget: &'a Budget,
}

impl<'a> Guard<'a> {
    pub(crate) fn new(lut: &'a Lut<Guarded>, budget: &'a Budget) -> Self {
        Guard { lut, budget }
    }

    /// The run's budget, for a native filter that loops by itself.
    pub(crate) fn budget(&self) -> &'a Budget {
        self.budget
    }
}

impl Clone for Guard<'_> {
    fn clone(&self) -> Self {
        self.budget.step();
        Guard {
            lut: self.lut,
            budget: self.budget,
        }
    }
}

impl<'a> HasLut<'a, Guarded> for Guard<'a> {
    fn lut(&self) -> &'a Lut<Guarded> {
        self.lut
    }
}

/// Why a run was stopped by its budget: the payload of its unwinding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The deadline passed.
    Time,
    /// The stack grew past its bound.
    Stack,
}

/// One run's bounds, checked at every step. Lives on the run's own thread.
pub(crate) struct Budget {
    steps: Cell<u32>,
    deadline: Instant,
    /// Where the stack was when the run began (an address).
    base: usize,
    /// How far from `base` the stack may grow, bytes.
    stack_bytes: usize,
}

impl Budget {
    /// A budget for a run that starts now, on this thread, and must end by
    /// `deadline`, its stack at most `stack_bytes` deeper than here.
    pub(crate) fn new(deadline: Instant, stack_bytes: usize) -> Self {
        Budget {
            steps: Cell::new(0),
            deadline,
            base: stack_address(),
            stack_bytes,
        }
    }

    /// One step: unwinds with a [`Stop`] when a bound is passed.
    #[inline]
    pub(crate) fn step(&self) {
        if stack_address().abs_diff(self.base) > self.stack_bytes {
            stop(Stop::Stack);
        }
        let n = self.steps.get().wrapping_add(1);
        self.steps.set(n);
        if n.is_multiple_of(CLOCK_EVERY) && Instant::now() >= self.deadline {
            stop(Stop::Time);
        }
    }
}

/// The address of a local of the caller's frame: how deep the stack is.
#[inline(always)]
fn stack_address() -> usize {
    let marker = 0u8;
    std::ptr::from_ref(std::hint::black_box(&marker)) as usize
}

fn stop(why: Stop) -> ! {
    std::panic::resume_unwind(Box::new(why))
}
