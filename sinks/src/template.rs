//! Name templates: the destination names of the broker sinks (docs/design.md
//! section 6).
//!
//! A template is a destination name as written in a sink's options (a Redis
//! stream or channel, a NATS subject, a RabbitMQ routing key, a Kafka topic or
//! record key, a Pub/Sub topic) in which `{name}` placeholders stand for values
//! known only per hook. Each sink allows its own set of placeholders, drawn
//! from the [`crate::DeliveryCtx`]:
//!
//! | placeholder | value |
//! | --- | --- |
//! | `{tenant}` | the hook's tenant |
//! | `{source}` | the hook's source |
//! | `{ordering_key}` | the lane's key in ordered mode, else empty (RabbitMQ routing key) |
//! | `{idempotency_key}` | the hook's idempotency key (Kafka record key) |
//!
//! Everything else is literal. A sink's config checks its templates at load
//! with [`check`] (every `{...}` is an allowed placeholder, braces balanced),
//! so a bad name is a load error naming the option; its `deliver` fills them
//! in with [`render`], in one pass: a value is never searched for
//! placeholders again.

/// Checks that every `{...}` of `template` is one of the placeholders
/// `allowed` (names without braces) and that every brace is part of one.
///
/// # Errors
/// The reason, for [`crate::SinkError::invalid`]: "has a `}` without its
/// `{`", "has a `{` without its `}`", or "`{x}` is not a placeholder (only
/// `{tenant}` and `{source}`)" listing `allowed`.
pub(crate) fn check(template: &str, allowed: &[&str]) -> Result<(), String> {
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err("has a `}` without its `{`".into());
        }
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| "has a `{` without its `}`".to_owned())?;
        let name = &after[..close];
        if !allowed.contains(&name) {
            return Err(format!(
                "`{{{name}}}` is not a placeholder (only {})",
                listed(allowed)
            ));
        }
        rest = &after[close + 1..];
    }
    Ok(())
}

/// `` `{a}` ``, `` `{a}` and `{b}` ``, `` `{a}`, `{b}` and `{c}` ``.
fn listed(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{{{n}}}`")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, init)) => format!("{} and {last}", init.join(", ")),
    }
}

/// `template` with every `{name}` of `vars` (`(name, value)`, names without
/// braces) replaced by its value, in one pass: a value that itself holds
/// `{source}` is kept as it is. A `{...}` not in `vars` is kept literally (a
/// template that passed [`check`] has none).
pub(crate) fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let var = vars.iter().find(|(name, _)| {
            after
                .strip_prefix(name)
                .is_some_and(|tail| tail.starts_with('}'))
        });
        match var {
            Some((name, value)) => {
                out.push_str(value);
                rest = &after[name.len() + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TS: &[&str] = &["tenant", "source"];

    #[test]
    fn render_fills_every_occurrence_in_one_pass() {
        let vars = [("tenant", "acme"), ("source", "stripe")];
        assert_eq!(
            render("h.{tenant}.{source}.{tenant}", &vars),
            "h.acme.stripe.acme"
        );
        assert_eq!(render("{tenant}{tenant}", &vars), "acmeacme");
        // A value is not searched for placeholders again.
        let vars = [("tenant", "{source}"), ("source", "{tenant}")];
        assert_eq!(render("{source}", &vars), "{tenant}");
        assert_eq!(render("{tenant}-{source}", &vars), "{source}-{tenant}");
        assert_eq!(render("k-{ordering_key}", &[("ordering_key", "")]), "k-");
    }

    #[test]
    fn render_keeps_text_without_placeholders_and_unknown_names() {
        let vars = [("tenant", "acme"), ("source", "stripe")];
        assert_eq!(render("plain", &vars), "plain");
        assert_eq!(render("", &vars), "");
        assert_eq!(render("a.{other}.{tenant}", &vars), "a.{other}.acme");
        assert_eq!(render("{{tenant}", &vars), "{acme");
        assert_eq!(render("{tenant", &vars), "{tenant");
        assert_eq!(render("{tenants}", &vars), "{tenants}");
        assert_eq!(render("{tenant}", &[]), "{tenant}");
    }

    #[test]
    fn check_accepts_allowed_placeholders() {
        assert_eq!(check("plain", TS), Ok(()));
        assert_eq!(check("", TS), Ok(()));
        assert_eq!(check("h.{tenant}.{source}.{tenant}", TS), Ok(()));
        assert_eq!(check("{source}{source}", TS), Ok(()));
    }

    #[test]
    fn check_names_the_fault() {
        let no_open = Err("has a `}` without its `{`".to_owned());
        let no_close = Err("has a `{` without its `}`".to_owned());
        assert_eq!(check("a}", TS), no_open);
        assert_eq!(check("{tenant}}", TS), no_open);
        assert_eq!(check("a{", TS), no_close);
        assert_eq!(check("a.{tenant", TS), no_close);
        assert_eq!(
            check("a.{tenat}", TS),
            Err("`{tenat}` is not a placeholder (only `{tenant}` and `{source}`)".to_owned())
        );
        assert_eq!(
            check("{}", &["tenant"]),
            Err("`{}` is not a placeholder (only `{tenant}`)".to_owned())
        );
        assert_eq!(
            check("{{tenant}}", TS),
            Err("`{{tenant}` is not a placeholder (only `{tenant}` and `{source}`)".to_owned())
        );
        assert_eq!(
            check("{key}", &["tenant", "source", "idempotency_key"]),
            Err(
                "`{key}` is not a placeholder (only `{tenant}`, `{source}` and `{idempotency_key}`)"
                    .to_owned()
            )
        );
    }
}
