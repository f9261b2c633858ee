//! The native filters a transform may call: jaq's core, standard library and
//! JSON filters, less what would reach outside the run (docs/design.md
//! section 6, "Transforms").
//!
//! - `env` (and `$ENV`) is not there: a program must not read the relay's
//!   environment, where its secrets are, and one that names it does not
//!   compile (refused at load, not at its first hook).
//! - `debug` and `stderr` (`debug_empty`, `stderr_empty`) pass their input on
//!   and write nothing: a program does not write to the relay's log or its
//!   standard error.
//! - `input`, `inputs` and module imports are not there: a run reads the
//!   hook's body and nothing else.
//! - `halt` and `halt_error` end the run with an error (never the process:
//!   the run does not use `jaq_core::unwrap_valr`, which would exit).
//! - `fromjson` refuses a text nested deeper than [`json::MAX_DEPTH`] before
//!   jaq's parser (which recurses once per level, without a bound) reads
//!   it: a body carrying a deep JSON text in a string field must not
//!   overflow the run's stack.
//! - `range/3` is jaq's own, stepping the run's budget at each output
//!   (src/budget.rs): jaq's yields without a step, so `[range(1e18)]` would
//!   not meet the clock.

use jaq_core::box_iter::box_once;
use jaq_core::native::{Fun, run, v};
use jaq_core::{Cv, Error, Exn, ValX, ValXs};
use jaq_json::Val;

use crate::budget::Guarded;
use crate::json;

/// Every native filter of a transform.
pub(crate) fn all() -> Vec<Fun<Guarded>> {
    jaq_core::funs::<Guarded>()
        .chain(jaq_std::funs::<Guarded>())
        .chain(jaq_json::funs::<Guarded>())
        .filter(|f| f.0 != "env")
        .map(|f| match (f.0, f.1.len()) {
            ("range", 3) => run::<Guarded>(("range", v(3), range)),
            ("fromjson", 0) => run::<Guarded>(("fromjson", v(0), fromjson)),
            ("debug_empty", 0) => run::<Guarded>(("debug_empty", v(0), silent)),
            ("stderr_empty", 0) => run::<Guarded>(("stderr_empty", v(0), silent)),
            _ => f,
        })
        .collect()
}

/// `fromjson` with a nesting bound (module docs).
fn fromjson(cv: Cv<'_, Guarded>) -> ValXs<'_, Val> {
    let text = match cv.1.try_as_utf8_bytes_owned() {
        Ok(t) => t,
        Err(e) => return box_once(Err(Exn::from(e))),
    };
    let depth = nesting(&text);
    if depth > json::MAX_DEPTH {
        return box_once(Err(Exn::from(Error::str(format_args!(
            "fromjson: the text nests {depth} deep, more than {}",
            json::MAX_DEPTH
        )))));
    }
    let values: Vec<ValX<'_, Val>> = jaq_json::read::parse_many(&text)
        .map(|r| r.map_err(|e| Exn::from(Error::str(format_args!("fromjson: {e}")))))
        .collect();
    Box::new(values.into_iter())
}

/// How deep the arrays and objects of a JSON text nest (brackets inside
/// strings not counted); a text that is not JSON is the parser's to refuse.
pub(crate) fn nesting(text: &[u8]) -> usize {
    let (mut depth, mut most, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                most = most.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    most
}

fn silent(_: Cv<'_, Guarded>) -> ValXs<'_, Val> {
    Box::new(core::iter::empty())
}

/// `range($from; $to; $by)`, as jaq's (`jaq_core` src/funs.rs), one budget
/// step per output.
fn range(mut cv: Cv<'_, Guarded>) -> ValXs<'_, Val> {
    let by = cv.0.pop_var();
    let to = cv.0.pop_var();
    let from = cv.0.pop_var();
    let budget = cv.0.data().budget();
    Box::new(range_from(Ok(from), to, by).inspect(move |_| budget.step()))
}

fn range_from<'a>(
    mut from: ValX<'a, Val>,
    to: Val,
    by: Val,
) -> impl Iterator<Item = ValX<'a, Val>> {
    use core::cmp::Ordering::{Equal, Greater, Less};
    let cmp = by.partial_cmp(&Val::from(0isize)).unwrap_or(Equal);
    core::iter::from_fn(move || match from.clone() {
        Ok(x) => match cmp {
            Greater => x < to,
            Less => x > to,
            Equal => x != to,
        }
        .then(|| core::mem::replace(&mut from, (x + by.clone()).map_err(Exn::from))),
        e @ Err(_) => {
            from = Ok(to.clone());
            Some(e)
        }
    })
}
