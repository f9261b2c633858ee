//! The admin API's three spellings held together (docs/design.md section 5,
//! "Admin API"): the router's table (`http::routes()`), the answer types
//! (`api_types`) and the OpenAPI document (`http/openapi.json`).
//!
//! - Every route the router serves is in the document with its method, and
//!   the document has no route the router lacks.
//! - Every schema the document names for an answer or a request body is a
//!   type here ([`TYPES`]), and every type is one the document names.
//! - Sample answers ([`samples`]), which together use every property of
//!   every schema, are valid against the document's schema (a validator of
//!   the part of JSON Schema the document uses) and go through their type and
//!   back to the same JSON: so a type has every field of its schema, no
//!   other, with the same names, nullability and variants.
//! - Every `example` the document gives a schema deserialises into its type
//!   and serialises back to itself.

use std::collections::{BTreeMap, BTreeSet};

use ankusa_admin::api_types;
use ankusa_admin::http::{OPENAPI_JSON, routes};
use ankusa_admin::jobs::{JobKind, JobState};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn doc() -> Value {
    serde_json::from_str(OPENAPI_JSON).expect("openapi.json is JSON")
}

/// JSON → `T` → JSON.
fn through<T: Serialize + DeserializeOwned>(v: &Value) -> Result<Value, String> {
    let t: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(&t).map_err(|e| e.to_string())
}

type Through = fn(&Value) -> Result<Value, String>;

/// Every schema of the document that an answer or a request body is, or is
/// part of one, with its type.
const TYPES: &[(&str, Through)] = &[
    ("JobRequest", through::<api_types::JobRequest>),
    ("PauseRequest", through::<api_types::PauseRequest>),
    ("Error", through::<api_types::Error>),
    ("Counters", through::<api_types::Counters>),
    ("Tenant", through::<api_types::Tenant>),
    ("TenantList", through::<api_types::TenantList>),
    ("Breaker", through::<api_types::Breaker>),
    ("KeySpec", through::<api_types::KeySpec>),
    ("Sink", through::<api_types::Sink>),
    ("Source", through::<api_types::Source>),
    ("SourceList", through::<api_types::SourceList>),
    ("Delivery", through::<api_types::Delivery>),
    ("Header", through::<api_types::Header>),
    ("Hook", through::<api_types::Hook>),
    ("RowAttempts", through::<api_types::RowAttempts>),
    ("Attempt", through::<api_types::Attempt>),
    ("DeadLetter", through::<api_types::DeadLetter>),
    ("DeadLetterList", through::<api_types::DeadLetterList>),
    ("Revived", through::<api_types::Revived>),
    ("Dropped", through::<api_types::Dropped>),
    ("Filter", through::<api_types::Filter>),
    ("Job", through::<api_types::Job>),
    ("JobList", through::<api_types::JobList>),
    ("PauseInfo", through::<api_types::PauseInfo>),
    ("PauseState", through::<api_types::PauseState>),
    ("QuarantinedItem", through::<api_types::QuarantinedItem>),
    ("QuarantineList", through::<api_types::QuarantineList>),
    ("QuarantinedHook", through::<api_types::QuarantinedHook>),
    ("Released", through::<api_types::Released>),
    ("ConfigInfo", through::<api_types::ConfigInfo>),
    ("Reloaded", through::<api_types::Reloaded>),
    ("TransformTested", through::<api_types::TransformTested>),
];

fn type_of(schema: &str) -> Through {
    TYPES
        .iter()
        .find(|(name, _)| *name == schema)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("no type for schema {schema}"))
}

/// The name of a `#/components/schemas/` reference.
fn ref_name(v: &Value) -> Option<&str> {
    v.get("$ref")?
        .as_str()?
        .strip_prefix("#/components/schemas/")
}

/// Every schema name referenced anywhere under `v`.
fn refs_under(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(name) = ref_name(v) {
                out.insert(name.to_owned());
            }
            m.values().for_each(|x| refs_under(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| refs_under(x, out)),
        _ => {}
    }
}

#[test]
fn every_route_of_the_router_is_in_the_document_and_no_other() {
    let doc = doc();
    assert_eq!(
        doc["openapi"].as_str().expect("openapi").get(..3),
        Some("3.1")
    );
    let paths = doc["paths"].as_object().expect("paths");
    let served: BTreeSet<(String, String)> = routes()
        .map(|(m, p)| (m.to_ascii_lowercase(), p.to_owned()))
        .collect();
    assert_eq!(
        served.len(),
        routes().count(),
        "a route is in the table twice"
    );
    let mut documented = BTreeSet::new();
    for (path, item) in paths {
        for (method, op) in item.as_object().expect("path item") {
            if method == "parameters" {
                continue;
            }
            assert!(
                op["responses"].is_object(),
                "{method} {path} has no responses"
            );
            documented.insert((method.clone(), path.clone()));
        }
    }
    let missing: Vec<_> = served.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "served, not in openapi.json: {missing:?}"
    );
    let extra: Vec<_> = documented.difference(&served).collect();
    assert!(extra.is_empty(), "in openapi.json, not served: {extra:?}");
}

/// Every schema an answer or a request body of the document names (its
/// JSON content, and what those schemas name in turn) has a type; every
/// schema of the document is one of those, and every type is.
#[test]
fn every_schema_the_document_answers_with_is_a_type() {
    let doc = doc();
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let mut named = BTreeSet::new();
    for item in doc["paths"].as_object().expect("paths").values() {
        for op in item.as_object().expect("path item").values() {
            for answer in op["responses"].as_object().into_iter().flatten() {
                refs_under(&answer.1["content"]["application/json"], &mut named);
            }
            refs_under(
                &op["requestBody"]["content"]["application/json"],
                &mut named,
            );
        }
    }
    // What an answer's schema names, down to the leaves.
    let mut todo: Vec<String> = named.iter().cloned().collect();
    while let Some(name) = todo.pop() {
        let mut inner = BTreeSet::new();
        refs_under(&schemas[&name], &mut inner);
        for n in inner {
            if named.insert(n.clone()) {
                todo.push(n);
            }
        }
    }
    for name in &named {
        assert!(schemas.contains_key(name), "{name} is named, not defined");
        assert!(
            TYPES.iter().any(|(t, _)| t == name),
            "schema {name} has no type in api_types"
        );
    }
    for name in schemas.keys() {
        assert!(
            named.contains(name),
            "schema {name} is neither an answer's nor a request's"
        );
    }
    for (name, _) in TYPES {
        assert!(
            named.contains(*name),
            "type {name} is no answer or request of the document"
        );
    }
}

/// Where `instance` breaks `schema` (the part of JSON Schema the document
/// uses), or `None`.
fn invalid(schemas: &Value, schema: &Value, instance: &Value, at: &str) -> Option<String> {
    if let Some(name) = ref_name(schema) {
        return invalid(schemas, &schemas[name], instance, at);
    }
    if let Some(choices) = schema.get("oneOf").and_then(Value::as_array) {
        let fits = choices
            .iter()
            .filter(|c| invalid(schemas, c, instance, at).is_none())
            .count();
        return (fits != 1).then(|| format!("{at}: {fits} of oneOf fit {instance}"));
    }
    if let Some(c) = schema.get("const")
        && c != instance
    {
        return Some(format!("{at}: {instance} is not {c}"));
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array)
        && !e.contains(instance)
    {
        return Some(format!("{at}: {instance} is not one of {e:?}"));
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let is = |ty: &str| match ty {
            "null" => instance.is_null(),
            "boolean" => instance.is_boolean(),
            "integer" => instance.is_i64() || instance.is_u64(),
            "number" => instance.is_number(),
            "string" => instance.is_string(),
            "array" => instance.is_array(),
            "object" => instance.is_object(),
            _ => false,
        };
        if !types.iter().any(|ty| is(ty)) {
            return Some(format!("{at}: {instance} is not {types:?}"));
        }
    }
    if let (Some(min), Some(n)) = (
        schema.get("minimum").and_then(Value::as_i64),
        instance.as_i64(),
    ) && n < min
    {
        return Some(format!("{at}: {n} < {min}"));
    }
    if let Some(a) = instance.as_array() {
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && (a.len() as u64) < min
        {
            return Some(format!("{at}: fewer than {min} items"));
        }
        if let Some(items) = schema.get("items") {
            for (i, x) in a.iter().enumerate() {
                if let Some(e) = invalid(schemas, items, x, &format!("{at}[{i}]")) {
                    return Some(e);
                }
            }
        }
    }
    if let Some(m) = instance.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        for req in schema["required"].as_array().into_iter().flatten() {
            let req = req.as_str().unwrap_or_default();
            if !m.contains_key(req) {
                return Some(format!("{at}: required {req} is absent"));
            }
        }
        for (k, x) in m {
            match props.and_then(|p| p.get(k)) {
                Some(s) => {
                    if let Some(e) = invalid(schemas, s, x, &format!("{at}.{k}")) {
                        return Some(e);
                    }
                }
                None if schema["additionalProperties"] == false => {
                    return Some(format!("{at}: {k} is not a property"));
                }
                None => {}
            }
        }
        let n = m.len() as u64;
        if schema["minProperties"].as_u64().is_some_and(|min| n < min)
            || schema["maxProperties"].as_u64().is_some_and(|max| n > max)
        {
            return Some(format!("{at}: {n} properties"));
        }
    }
    None
}

fn hook(quarantined: bool) -> Value {
    json!({
        "tenant": "acme", "seq": 42, "idempotency_key": "01890a5d-ac96-774b-bcce-b302099a8057",
        "source": if quarantined { Value::Null } else { json!("orders") },
        "received_at_ms": 1_700_000_000_000u64, "received_at": "2023-11-14T22:13:20Z",
        "method": "POST", "path": "/hooks/orders", "query": if quarantined { json!("a=1") } else { Value::Null },
        "headers": [
            {"name": "content-type", "value": "application/json", "value_base64": "YXBwbGljYXRpb24vanNvbg=="},
            {"name": "x-raw", "value": null, "value_base64": "/w=="}
        ],
        "body_base64": "e30=", "body_text": if quarantined { Value::Null } else { json!("{}") },
        "dedupe_key": if quarantined { Value::Null } else { json!("evt_1") },
        "dedupe_key_base64": if quarantined { Value::Null } else { json!("ZXZ0XzE=") },
        "deliveries": if quarantined { json!([]) } else { json!([
            {"id": "acme.42.0", "sink_index": 0, "sink": "web", "state": "dead", "attempts": 5,
             "first_attempt_at_ms": 1_700_000_000_100u64, "last_error": "HTTP 400", "size_bytes": 120,
             "ordered": false, "ordering_key": null, "ordering_key_base64": null, "lane_position": null,
             "dead": {"dead_at_ms": 1_700_000_100_000u64, "dead_at": "2023-11-14T22:15:00Z", "reason": "permanent: HTTP 400"}},
            {"id": "acme.42.1", "sink_index": 1, "sink": null, "state": "lane_member", "attempts": 0,
             "first_attempt_at_ms": null, "last_error": null, "size_bytes": 120,
             "ordered": true, "ordering_key": "cust-7", "ordering_key_base64": "Y3VzdC03", "lane_position": "member",
             "dead": null}
        ]) },
        "replay_of": if quarantined { Value::Null } else { json!(7) },
        "quarantined": if quarantined { json!("invalid signature") } else { Value::Null },
        "attempt_log": if quarantined { json!([]) } else { json!([
            {"id": "acme.42.0", "sink_index": 0, "sink": "web", "state": "dead", "attempts": [
                {"attempt": 4, "at_ms": 1_700_000_000_100u64, "at": "2023-11-14T22:13:20.1Z", "duration_ms": 12,
                 "outcome": "retry", "status": 503, "error": "HTTP 503 Service Unavailable: busy",
                 "response_headers": [
                     {"name": "retry-after", "value": "5", "value_base64": "NQ=="}
                 ],
                 "response_body": "busy", "response_body_base64": null, "response_body_truncated": false},
                {"attempt": 5, "at_ms": 1_700_000_100_000u64, "at": null, "duration_ms": 0,
                 "outcome": "permanent", "status": 400, "error": "HTTP 400",
                 "response_headers": [], "response_body": "\u{fffd}", "response_body_base64": "/w==",
                 "response_body_truncated": true}
            ]},
            {"id": "acme.42.2", "sink_index": 2, "sink": null, "state": "delivered", "attempts": [
                {"attempt": 1, "at_ms": 1_700_000_000_100u64, "at": "2023-11-14T22:13:20.1Z", "duration_ms": 10_000,
                 "outcome": "delivered", "status": null, "error": null, "response_headers": [],
                 "response_body": null, "response_body_base64": null, "response_body_truncated": false}
            ]}
        ]) },
    })
}

fn job(kind: &str, state: &str) -> Value {
    let replay = kind == "replay";
    json!({
        "id": 3, "kind": kind,
        "filter": {"tenant": "acme", "source": if replay { json!("orders") } else { Value::Null },
                   "sink": null, "reason": if replay { Value::Null } else { json!("permanent") },
                   "since_ms": 1_700_000_000_000u64, "until_ms": null},
        "state": state, "created_at_ms": 1_700_000_000_000u64, "created_at": "2023-11-14T22:13:20Z",
        "updated_at_ms": 1_700_000_000_500u64,
        "finished_at_ms": if state == "running" { Value::Null } else { json!(1_700_000_000_500u64) },
        "examined": 10, "done": 9, "skipped": 1,
        "total": if replay { Value::Null } else { json!(10) },
        "error": if state == "failed" { json!("the store failed") } else { Value::Null },
        "sinks": if replay { json!(["web"]) } else { Value::Null },
        "phase": if state == "running" { json!("waiting for the pipeline") } else { Value::Null },
    })
}

fn pause(by_runtime: bool) -> Value {
    if by_runtime {
        json!({"by_config": false, "by_runtime": {"since_ms": 1_700_000_000_000u64, "since": "2023-11-14T22:13:20Z", "reason": "maintenance"}})
    } else {
        json!({"by_config": true, "by_runtime": null})
    }
}

fn page(items: Vec<Value>, next: Option<&str>) -> Value {
    json!({ "items": items, "next_cursor": next })
}

/// Sample answers by schema: each valid against the document, and together
/// using every property of every schema.
fn samples() -> BTreeMap<&'static str, Vec<Value>> {
    let counters = json!({
        "pending": 5, "pending_bytes": 600, "in_flight": 2, "dead": 1, "dead_bytes": 120,
        "quarantined": 3, "delivered_total": 40, "dead_lettered_total": 4, "retries_total": 9,
        "lanes": 2, "lanes_blocked": 1, "lane_members": 3, "lanes_held": 1,
    });
    let tenants = vec![
        json!({"name": "acme", "ordinal": 1, "configured": true, "max_pending": 100_000, "max_pending_bytes": 1_073_741_824u64,
               "counters": counters, "oldest_due_at_ms": 1_700_000_000_000u64, "oldest_due_age_ms": 2500}),
        json!({"name": "gone", "ordinal": 2, "configured": false, "max_pending": null, "max_pending_bytes": null,
               "counters": counters, "oldest_due_at_ms": null, "oldest_due_age_ms": null}),
    ];
    let breakers = vec![
        json!({"tenant": "acme", "state": "closed", "failures": 2}),
        json!({"tenant": "acme", "state": "open", "open_until_ms": 1_700_000_030_000u64}),
        json!({"tenant": "acme", "state": "half_open"}),
    ];
    let key_specs = vec![
        json!({"header": "x-key"}),
        json!({"json": "data.customer"}),
        json!({"function": true}),
        json!({"first_of": [{"json": "data.object.customer"}, {"json": "data.object.id"}]}),
    ];
    let sinks = vec![
        json!({"name": "web", "type": "http", "index": 0, "ordered": true, "ordering_key": {"json": "data.customer"},
               "dead_letter": "hold", "breakers": breakers, "pause": pause(true), "paused": true}),
        json!({"name": "log", "type": "file", "index": 1, "ordered": false, "ordering_key": null,
               "dead_letter": "release", "breakers": [], "pause": pause(false), "paused": true}),
    ];
    let sources = vec![
        json!({"name": "orders", "path": "/hooks/orders", "tenant": {"fixed": "acme"}, "verification": "stripe",
               "dedupe": {"key": {"header": "x-event-id"}, "ttl_ms": 86_400_000}, "sinks": sinks,
               "pause": pause(false), "paused": true}),
        json!({"name": "multi", "path": "/hooks/multi", "tenant": {"path": true}, "verification": "none",
               "dedupe": null, "sinks": [], "pause": pause(true), "paused": true}),
    ];
    let hooks = vec![hook(false), hook(true)];
    let dead_letters = vec![
        json!({"id": "acme.42.0", "tenant": "acme", "seq": 42, "sink_index": 0, "sink": "web", "source": "orders",
               "idempotency_key": "01890a5d-ac96-774b-bcce-b302099a8057", "dead_at_ms": 1_700_000_100_000u64,
               "dead_at": "2023-11-14T22:15:00Z", "reason": "permanent: HTTP 400", "attempts": 5,
               "last_error": "HTTP 400", "size_bytes": 120, "ordering_key": "cust-7", "holds_lane": true}),
        json!({"id": "acme.43.2", "tenant": "acme", "seq": 43, "sink_index": 2, "sink": null, "source": null,
               "idempotency_key": null, "dead_at_ms": 1_700_000_100_000u64, "dead_at": null,
               "reason": "retired", "attempts": null, "last_error": null, "size_bytes": null, "ordering_key": null, "holds_lane": false}),
    ];
    let jobs = vec![
        job("revive", "running"),
        job("drop", "done"),
        job("replay", "cancelled"),
        job("purge_tenant", "failed"),
        job("dead_letter_source", "done"),
        job("release_quarantined", "done"),
        job("drop_quarantined", "done"),
    ];
    let quarantined = vec![
        json!({"id": "acme.44", "tenant": "acme", "seq": 44, "reason": "source under quarantine", "source": "orders",
               "received_at_ms": 1_700_000_000_000u64, "received_at": "2023-11-14T22:13:20Z", "size_bytes": 300,
               "idempotency_key": "01890a5d-ac96-774b-bcce-b302099a8057"}),
        json!({"id": "acme.45", "tenant": "acme", "seq": 45, "reason": "invalid signature", "source": null,
               "received_at_ms": null, "received_at": null, "size_bytes": 0, "idempotency_key": null}),
    ];
    let mut s: BTreeMap<&'static str, Vec<Value>> = BTreeMap::new();
    s.insert(
        "Error",
        vec![json!({"error": {"code": "not_found", "message": "no job 9"}})],
    );
    s.insert("Counters", vec![counters]);
    s.insert(
        "TenantList",
        vec![page(tenants.clone(), Some("AQEAAAAC")), page(vec![], None)],
    );
    s.insert("Tenant", tenants);
    s.insert("Breaker", breakers);
    s.insert("KeySpec", key_specs);
    s.insert("Sink", sinks);
    s.insert("SourceList", vec![page(sources.clone(), None)]);
    s.insert("Source", sources);
    s.insert(
        "Delivery",
        hooks[0]["deliveries"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    s.insert(
        "Header",
        hooks[0]["headers"].as_array().cloned().unwrap_or_default(),
    );
    let logs = hooks[0]["attempt_log"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    s.insert(
        "Attempt",
        logs.iter()
            .flat_map(|l| l["attempts"].as_array().cloned().unwrap_or_default())
            .collect(),
    );
    s.insert("RowAttempts", logs);
    s.insert(
        "QuarantinedHook",
        vec![json!({"reason": "invalid signature", "hook": hooks[1]})],
    );
    s.insert("Hook", hooks);
    s.insert(
        "DeadLetterList",
        vec![page(dead_letters.clone(), Some("AQNY"))],
    );
    s.insert("DeadLetter", dead_letters);
    s.insert(
        "Revived",
        vec![
            json!({"id": "acme.42.0", "revived": true, "state": "due"}),
            json!({"id": "acme.42.1", "revived": true, "state": "lane_member"}),
        ],
    );
    s.insert("Dropped", vec![json!({"id": "acme.42.0", "dropped": true})]);
    s.insert("Filter", jobs.iter().map(|j| j["filter"].clone()).collect());
    s.insert("JobList", vec![page(jobs.clone(), Some("AQQAAAAAAAAAAw"))]);
    s.insert("Job", jobs);
    s.insert("PauseInfo", vec![pause(true), pause(false)]);
    s.insert(
        "PauseState",
        vec![
            json!({"source": "orders", "sink": "web", "paused": true, "delivering": false, "by_config": false,
                   "by_runtime": {"since_ms": 1_700_000_000_000u64, "since": "2023-11-14T22:13:20Z", "reason": "maintenance"}}),
            json!({"source": "orders", "sink": null, "paused": false, "delivering": true, "by_config": false, "by_runtime": null}),
        ],
    );
    s.insert("QuarantineList", vec![page(quarantined.clone(), None)]);
    s.insert("QuarantinedItem", quarantined);
    s.insert(
        "JobRequest",
        vec![
            json!({"kind": "replay", "filter": {"source": "orders", "since": 1_700_000_000_000u64,
                   "until": "2023-11-14T22:13:20Z", "tenant": "acme"}, "sinks": ["web"]}),
            json!({"kind": "drop", "filter": {"sink": "web", "reason": "permanent"}}),
            json!({"kind": "revive", "filter": {}}),
        ],
    );
    s.insert(
        "PauseRequest",
        vec![json!({"reason": "maintenance"}), json!({})],
    );
    s.insert(
        "Released",
        vec![json!({"id": "acme.44", "released": true, "source": "orders", "rows": 2})],
    );
    let config = json!({"file": "/etc/ankusa/ankusa.yaml", "hash": "9f2c", "loaded_at_ms": 1_700_000_000_000u64,
                        "loaded_at": "2023-11-14T22:13:20Z", "reloads_applied": 3, "reloads_refused": 1});
    s.insert(
        "ConfigInfo",
        vec![
            config.clone(),
            json!({"file": null, "hash": "00", "loaded_at_ms": 0, "loaded_at": "1970-01-01T00:00:00Z",
                   "reloads_applied": 0, "reloads_refused": 0}),
        ],
    );
    s.insert(
        "Reloaded",
        vec![
            json!({"changes": ["source \"billing\" added"], "config": config}),
            json!({"changes": [], "config": config}),
        ],
    );
    s.insert(
        "TransformTested",
        vec![json!({"program": "{id: .data.object.id}", "body": "{\"id\":\"in_1\"}", "bytes": 13})],
    );
    s
}

/// Every property name a schema (through `$ref` and `oneOf`) lists.
fn properties(schemas: &Value, schema: &Value, out: &mut BTreeSet<String>) {
    if let Some(name) = ref_name(schema) {
        return properties(schemas, &schemas[name], out);
    }
    for c in schema["oneOf"].as_array().into_iter().flatten() {
        properties(schemas, c, out);
    }
    for k in schema["properties"].as_object().into_iter().flatten() {
        out.insert(k.0.clone());
    }
}

#[test]
fn sample_answers_are_valid_and_go_through_their_types_unchanged() {
    let doc = doc();
    let schemas = &doc["components"]["schemas"];
    let samples = samples();
    for (name, through) in TYPES {
        let list = samples
            .get(name)
            .unwrap_or_else(|| panic!("no sample of {name}"));
        let mut used = BTreeSet::new();
        for sample in list {
            if let Some(e) = invalid(schemas, &schemas[*name], sample, name) {
                panic!("a sample of {name} is not valid against openapi.json: {e}");
            }
            let back = through(sample).unwrap_or_else(|e| panic!("{name}: {e}: {sample}"));
            assert_eq!(
                &back, sample,
                "{name} did not go through its type unchanged"
            );
            used.extend(
                sample
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k.clone()),
            );
        }
        let mut listed = BTreeSet::new();
        properties(schemas, &schemas[*name], &mut listed);
        assert_eq!(used, listed, "the samples of {name} use every property");
    }
}

/// Every `example` (or `examples`) of the document under a schema, an
/// answer's content or a request body's goes through its type unchanged.
#[test]
fn the_documents_examples_go_through_their_types_unchanged() {
    fn walk(v: &Value, schema: Option<&str>, found: &mut Vec<(String, Value)>) {
        let Value::Object(m) = v else {
            if let Value::Array(a) = v {
                a.iter().for_each(|x| walk(x, schema, found));
            }
            return;
        };
        let here = ref_name(m.get("schema").unwrap_or(&Value::Null)).or(schema);
        if let Some(name) = here {
            if let Some(e) = m.get("example") {
                found.push((name.to_owned(), e.clone()));
            }
            if let Some(es) = m.get("examples") {
                match es {
                    Value::Array(a) => a
                        .iter()
                        .for_each(|e| found.push((name.to_owned(), e.clone()))),
                    // A media type's examples: name → {value}.
                    Value::Object(o) => o.values().for_each(|e| {
                        found.push((name.to_owned(), e.get("value").unwrap_or(e).clone()))
                    }),
                    _ => {}
                }
            }
        }
        for (k, x) in m {
            if !matches!(k.as_str(), "example" | "examples" | "properties" | "items") {
                walk(x, here, found);
            }
        }
    }
    let doc = doc();
    let mut found = Vec::new();
    for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
        walk(schema, Some(name), &mut found);
    }
    walk(&doc["paths"], None, &mut found);
    for (name, example) in found {
        let back = type_of(&name)(&example).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(back, example, "the example of {name}");
    }
}

/// The job kinds and states the document lists are the types' (each reads
/// into its enum, and the enum writes it as the document spells it).
#[test]
fn job_kinds_and_states_are_the_documents() {
    let doc = doc();
    let job = &doc["components"]["schemas"]["Job"]["properties"];
    let kinds = job["kind"]["enum"].as_array().expect("kinds");
    for k in kinds {
        let kind: JobKind = serde_json::from_value(k.clone()).expect("a kind");
        assert_eq!(Some(kind.as_str()), k.as_str());
    }
    assert_eq!(kinds.len(), 7, "every JobKind is in the document");
    let states = job["state"]["enum"].as_array().expect("states");
    for s in states {
        let state: JobState = serde_json::from_value(s.clone()).expect("a state");
        assert_eq!(Some(state.as_str()), s.as_str());
    }
    assert_eq!(states.len(), 4, "every JobState is in the document");
}

/// Every answer of a running listener ([`crate::answers`]) is one the
/// document lists for its route, method and status; its JSON is valid
/// against the schema the document names, and goes through the schema's
/// type unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_listeners_answers_are_the_documents_and_their_types() {
    let doc = doc();
    let schemas = &doc["components"]["schemas"];
    let answers = crate::answers::answers().await;
    let mut statuses = BTreeSet::new();
    for a in &answers {
        let what = format!("{} {} -> {}", a.method, a.target, a.status);
        statuses.insert(a.status);
        assert_eq!(a.content_type, "application/json", "{what}");
        let v: Value = serde_json::from_str(&a.body).unwrap_or_else(|e| panic!("{what}: {e}"));
        let path = a.target.split('?').next().unwrap_or_default();
        let pattern = routes().map(|(_, p)| p).find(|p| {
            let (ps, ts): (Vec<&str>, Vec<&str>) =
                (p.split('/').collect(), path.split('/').collect());
            ps.len() == ts.len()
                && ps
                    .iter()
                    .zip(&ts)
                    .all(|(p, t)| p.starts_with('{') || p == t)
        });
        let schema = match pattern {
            // No route: the router's own 404.
            None => "Error".to_owned(),
            Some(p) => {
                let op = &doc["paths"][p][a.method.to_ascii_lowercase()];
                // A method the path does not answer: its 405.
                let op = if op.is_null() {
                    &doc["paths"][p]["get"]
                } else {
                    op
                };
                let content = &op["responses"][a.status.to_string()]["content"]["application/json"];
                ref_name(&content["schema"])
                    .unwrap_or_else(|| panic!("{what}: openapi.json lists no such answer"))
                    .to_owned()
            }
        };
        if let Some(e) = invalid(schemas, &schemas[&schema], &v, &schema) {
            panic!("{what}: not a valid {schema}: {e}\n{}", a.body);
        }
        let back = type_of(&schema)(&v).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(
            back, v,
            "{what}: {schema} did not go through its type unchanged"
        );
    }
    // The questions reach successes and errors both.
    assert!(
        statuses.contains(&200) && statuses.contains(&202),
        "{statuses:?}"
    );
    assert!(statuses.iter().any(|s| *s >= 400), "{statuses:?}");
}
