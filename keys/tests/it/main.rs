//! Tests of `ankusa-keys` (one test binary, modules by area;
//! docs/contributing.md, "Keys module like TiKV": every family is
//! property-tested for `decode(encode(x)) == x` and for byte order equal to
//! tuple order, and a tenant's range holds exactly its keys).

mod index;
mod meta;
mod record;
mod rows;
mod sentinel;
mod strategies;
mod values;
