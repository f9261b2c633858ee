//! The operator's subcommands (`ankusa tenants`, `sources`, `hooks show`,
//! `dlq list|revive|drop`, `pause`, `resume`, `quarantine
//! list|show|release|drop`, `replay`, `purge-tenant`, `retire-source`,
//! `jobs`, `transform test`): each calls the admin API of a running relay over HTTP
//! (docs/design.md section 5, "Admin API") and prints a table, or the API's
//! JSON with `--json`.
//!
//! The admin URL is `--admin` or `ANKUSA_ADMIN` (default `http://127.0.0.1:8081`); the token is
//! read from `ANKUSA_ADMIN_TOKEN`. Exit codes ([`EXIT_CODES`]): 0 ok, 1 the
//! API refused (its error is printed), 2 usage (clap's own, and a destructive
//! command without `--yes`), 3 the admin listener cannot be reached, 4
//! unauthorized (no or wrong token).

use std::process::ExitCode;
use std::time::Duration;

use ankusa_admin::api_types::{
    self, BreakerState, DeadLetterList, Dropped, FilterRequest, Hook, Job, JobList, JobRequest,
    Page, PauseInfo, PauseRequest, PauseState, QuarantineList, QuarantinedHook, Released, Revived,
    Source, SourceTenant, Tenant,
};
use ankusa_admin::jobs::{JobKind, JobState};
use clap::{Args, Subcommand};
use serde::Deserialize as _;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The exit codes, as `--help` prints them.
pub const EXIT_CODES: &str = "Exit codes: 0 ok; 1 the admin API refused the request (its error is printed), or a waited-for job failed or was cancelled; 2 usage error, or a destructive command without --yes; 3 cannot reach the admin listener; 4 unauthorized (set ANKUSA_ADMIN_TOKEN).";

/// Where the admin API is and how to print.
#[derive(Args, Debug, Clone)]
pub struct Conn {
    /// The relay's admin listener (or the `ANKUSA_ADMIN` variable).
    #[arg(
        long,
        global = true,
        env = "ANKUSA_ADMIN",
        default_value = "http://127.0.0.1:8081"
    )]
    pub admin: String,
    /// Print the API's JSON instead of a table (for scripts).
    #[arg(long, global = true)]
    pub json: bool,
}

/// Which dead letters: every field narrows.
#[derive(Args, Debug, Clone, Default)]
pub struct Filter {
    /// Tenant name.
    #[arg(long, value_parser = non_empty)]
    pub tenant: Option<String>,
    /// Source name.
    #[arg(long, value_parser = non_empty)]
    pub source: Option<String>,
    /// Sink entry name.
    #[arg(long, value_parser = non_empty)]
    pub sink: Option<String>,
    /// Prefix of the dead-letter reason (e.g. "permanent: HTTP 400").
    #[arg(long, value_parser = non_empty)]
    pub reason: Option<String>,
    /// Dead at or after: unix ms or RFC 3339.
    #[arg(long, value_parser = non_empty)]
    pub since: Option<String>,
    /// Dead before: unix ms or RFC 3339.
    #[arg(long, value_parser = non_empty)]
    pub until: Option<String>,
}

impl Filter {
    fn is_empty(&self) -> bool {
        [
            &self.tenant,
            &self.source,
            &self.sink,
            &self.reason,
            &self.since,
            &self.until,
        ]
        .iter()
        .all(|f| f.is_none())
    }

    fn pairs(&self) -> Vec<(&'static str, String)> {
        [
            ("tenant", &self.tenant),
            ("source", &self.source),
            ("sink", &self.sink),
            ("reason", &self.reason),
            ("since", &self.since),
            ("until", &self.until),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
        .collect()
    }

    fn request(&self) -> FilterRequest {
        FilterRequest {
            tenant: self.tenant.clone(),
            source: self.source.clone(),
            sink: self.sink.clone(),
            reason: self.reason.clone(),
            since: self.since.as_deref().map(time_json),
            until: self.until.as_deref().map(time_json),
        }
    }
}

/// `ankusa hooks ...`.
#[derive(Subcommand, Debug)]
pub enum HooksCmd {
    /// A hook's envelope and every delivery row: by idempotency key,
    /// `<tenant>.<seq>`, a row id `<tenant>.<seq>.<sink index>`, or --tenant
    /// and --seq.
    Show {
        /// The idempotency key the relay answered the provider with, or
        /// `<tenant>.<seq>` (e.g. default.42), or a row id (default.42.0).
        #[arg(conflicts_with_all = ["tenant", "seq"], required_unless_present_all = ["tenant", "seq"])]
        id: Option<String>,
        /// Tenant name (with --seq).
        #[arg(long, requires = "seq")]
        tenant: Option<String>,
        /// The hook's seq (with --tenant).
        #[arg(long, requires = "tenant")]
        seq: Option<u64>,
    },
}

/// `ankusa dlq ...`.
#[derive(Subcommand, Debug)]
pub enum DlqCmd {
    /// List dead letters (one page; --cursor for the next).
    List {
        #[command(flatten)]
        filter: Filter,
        /// Items per page (1-1000).
        #[arg(long)]
        limit: Option<u64>,
        /// The cursor a previous page printed.
        #[arg(long, value_parser = non_empty)]
        cursor: Option<String>,
    },
    /// Revive one dead letter (ROW, e.g. default.42.0), or every one a filter
    /// (or --all) matches, as a job.
    Revive {
        /// Row id `<tenant>.<seq>.<sink index>`.
        #[arg(conflicts_with = "all")]
        row: Option<String>,
        /// Every dead letter (of --tenant when given).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        filter: Filter,
        /// Wait for the job with a progress bar.
        #[arg(long)]
        wait: bool,
    },
    /// Drop dead letters for good (needs --yes): ROW, or every one a filter
    /// (or --all) matches, as a job.
    Drop {
        /// Row id `<tenant>.<seq>.<sink index>`.
        #[arg(conflicts_with = "all")]
        row: Option<String>,
        /// Every dead letter (of --tenant when given).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        filter: Filter,
        /// Confirm: dropped hooks cannot be revived.
        #[arg(long)]
        yes: bool,
        /// Wait for the job with a progress bar.
        #[arg(long)]
        wait: bool,
    },
}

/// `ankusa transform ...`.
#[derive(Subcommand, Debug)]
pub enum TransformCmd {
    /// Run a sink entry's transform (its jq program) on a sample body, as a
    /// delivery would, and print the body the sink would get; nothing is
    /// stored or sent. A run that fails prints why (the reason a delivery
    /// would be dead-lettered with) and exits 1.
    Test {
        /// The source of the sink entry (with --sink).
        #[arg(long, value_parser = non_empty, requires = "sink", conflicts_with = "program")]
        source: Option<String>,
        /// The sink entry's name (with --source).
        #[arg(long, value_parser = non_empty, requires = "source")]
        sink: Option<String>,
        /// A jq program to run instead of a configured one.
        #[arg(long, value_parser = non_empty, required_unless_present = "source")]
        program: Option<String>,
        /// With --program: the run's time bound, ms (default 100).
        #[arg(long, requires = "program")]
        timeout_ms: Option<u64>,
        /// With --program: the output's bound, bytes (default 1 MiB).
        #[arg(long, requires = "program")]
        max_output_bytes: Option<u64>,
        /// The sample body (`-`: standard input), as a provider sends it.
        file: std::path::PathBuf,
    },
}

/// `ankusa quarantine ...`.
#[derive(Subcommand, Debug)]
pub enum QuarantineCmd {
    /// List quarantined hooks: of --tenant (one page; --cursor for the next),
    /// or of every tenant.
    List {
        /// Tenant name (default: every tenant, every page).
        #[arg(long, value_parser = non_empty)]
        tenant: Option<String>,
        /// Only this source's hooks.
        #[arg(long, value_parser = non_empty)]
        source: Option<String>,
        /// Items per page (1-1000), with --tenant.
        #[arg(long, requires = "tenant")]
        limit: Option<u64>,
        /// The cursor a previous page printed, with --tenant.
        #[arg(long, requires = "tenant")]
        cursor: Option<String>,
    },
    /// One quarantined hook: why it is held and its envelope.
    Show {
        /// `<tenant>.<seq>`, e.g. default.42.
        hook: String,
    },
    /// Release HOOK (its rows built as at ingest), or every quarantined hook
    /// of --source / --tenant (or --all) as a job.
    Release {
        /// `<tenant>.<seq>`.
        #[arg(conflicts_with_all = ["all", "tenant", "source"])]
        hook: Option<String>,
        /// Every quarantined hook (of --tenant, --source when given).
        #[arg(long)]
        all: bool,
        /// Tenant name.
        #[arg(long, value_parser = non_empty)]
        tenant: Option<String>,
        /// Source name.
        #[arg(long, value_parser = non_empty)]
        source: Option<String>,
        /// Wait for the job with a progress bar.
        #[arg(long)]
        wait: bool,
    },
    /// Drop quarantined hooks for good (needs --yes): HOOK, or every one of
    /// --source / --tenant (or --all) as a job.
    Drop {
        /// `<tenant>.<seq>`.
        #[arg(conflicts_with_all = ["all", "tenant", "source"])]
        hook: Option<String>,
        /// Every quarantined hook (of --tenant, --source when given).
        #[arg(long)]
        all: bool,
        /// Tenant name.
        #[arg(long, value_parser = non_empty)]
        tenant: Option<String>,
        /// Source name.
        #[arg(long, value_parser = non_empty)]
        source: Option<String>,
        /// Confirm: a dropped hook is gone for good.
        #[arg(long)]
        yes: bool,
        /// Wait for the job with a progress bar.
        #[arg(long)]
        wait: bool,
    },
}

/// `ankusa replay`: what to replay.
#[derive(Args, Debug, Clone)]
pub struct ReplayArgs {
    /// The source whose archived hooks are replayed.
    #[arg(long)]
    pub source: String,
    /// Received at or after: unix ms or RFC 3339.
    #[arg(long)]
    pub since: String,
    /// Received before: unix ms or RFC 3339 (default: now).
    #[arg(long, value_parser = non_empty)]
    pub until: Option<String>,
    /// Only this tenant's hooks (a tenant_path source).
    #[arg(long, value_parser = non_empty)]
    pub tenant: Option<String>,
    /// Only to this sink entry of the source (repeat for several; default:
    /// every sink).
    #[arg(long = "sink")]
    pub sinks: Vec<String>,
    /// Wait for the job with a progress bar.
    #[arg(long)]
    pub wait: bool,
}

/// `ankusa jobs cancel ID`.
#[derive(Subcommand, Debug)]
pub enum JobsCmd {
    /// Cancel a running job.
    Cancel {
        /// The job's id.
        id: u64,
    },
}

/// Why a command failed, mapped to its exit code ([`EXIT_CODES`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fail {
    /// 1: the API answered with an error (or an answer the CLI cannot read).
    Refused(String),
    /// 2: a usage error found before anything was sent.
    Usage(String),
    /// 3: the admin listener cannot be reached (or its answer broke off).
    Unreachable(String),
    /// 4: 401 from the API: no or wrong `ANKUSA_ADMIN_TOKEN`.
    Unauthorized(String),
}

impl Fail {
    /// The message, without the exit code.
    pub(crate) fn message(&self) -> &str {
        match self {
            Fail::Refused(m) | Fail::Usage(m) | Fail::Unreachable(m) | Fail::Unauthorized(m) => m,
        }
    }

    /// Prints the message on stderr (its control characters but line breaks
    /// escaped, [`printable`]); the exit code.
    pub(crate) fn exit(self) -> ExitCode {
        let code = match &self {
            Fail::Refused(_) => 1,
            Fail::Usage(_) => 2,
            Fail::Unreachable(_) => 3,
            Fail::Unauthorized(_) => 4,
        };
        eprintln!("ankusa: {}", printable(self.message()));
        ExitCode::from(code)
    }
}

/// `text` with every control character but `\n` written as its escape
/// (`\u{1b}`): a message quotes what the admin listener answered, and the
/// terminal must not run escape sequences from it (a title, the clipboard).
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\n' {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A client of one relay's admin API: its base URL, the bearer token, the
/// HTTP client.
pub(crate) struct Api {
    base: String,
    token: Option<String>,
    client: reqwest::Client,
}

/// The client of the admin API at `admin` (`--admin`), with the token of
/// `ANKUSA_ADMIN_TOKEN` and each request's deadline `timeout`: a usage error
/// for an address that is not http(s) or a token HTTP cannot carry.
pub(crate) fn connect(admin: &str, timeout: Duration) -> Result<Api, Fail> {
    match reqwest::Url::parse(admin) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
        _ => {
            return Err(Fail::Usage(format!(
                "--admin {:?} is not an http:// or https:// address (e.g. http://127.0.0.1:8081)",
                ankusa_config::redact_url(admin)
            )));
        }
    }
    // A token HTTP cannot carry (a trailing newline from a file, a space) is
    // a usage error, not an unreachable listener.
    let bad_token = || {
        Fail::Usage(
            "ANKUSA_ADMIN_TOKEN has spaces, control bytes or non-ASCII (a trailing newline?)"
                .to_owned(),
        )
    };
    let token = match std::env::var("ANKUSA_ADMIN_TOKEN") {
        Ok(t) => Some(t).filter(|t| !t.is_empty()),
        Err(std::env::VarError::NotPresent) => None,
        // Bytes that are not UTF-8: not unset, and not a token HTTP can carry.
        Err(std::env::VarError::NotUnicode(_)) => return Err(bad_token()),
    };
    if token
        .as_ref()
        .is_some_and(|t| !t.bytes().all(|b| b.is_ascii_graphic()))
    {
        return Err(bad_token());
    }
    ankusa_sinks::http::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| Fail::Unreachable(format!("cannot build an HTTP client: {e}")))?;
    Ok(Api {
        base: admin.to_owned(),
        token,
        client,
    })
}

impl Api {
    /// `method path?query` with `body`: the status and the answer's text.
    async fn send(
        &self,
        method: &reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<(reqwest::StatusCode, String), Fail> {
        let mut url = reqwest::Url::parse(&format!("{}{path}", self.base.trim_end_matches('/')))
            .map_err(|e| Fail::Usage(format!("--admin {}: not a URL ({e})", self.base)))?;
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        let mut req = self.client.request(method.clone(), url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some((content_type, bytes)) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(bytes);
        }
        // The innermost cause says why ("Connection refused (os error
        // 111)"); reqwest's own message only names the URL.
        let resp = req.send().await.map_err(|e| {
            let mut cause: &dyn std::error::Error = &e;
            while let Some(inner) = cause.source() {
                cause = inner;
            }
            Fail::Unreachable(format!(
                "cannot reach the admin listener at {}: {cause}",
                self.base
            ))
        })?;
        let status = resp.status();
        let text = read_answer(resp, method, path).await?;
        Ok((status, text))
    }

    /// `method path?query` with `body`: the answer's JSON, or why not.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Value>,
    ) -> Result<Value, Fail> {
        let body = body.map(|b| ("application/json", b.to_string().into_bytes()));
        self.call_with(method, path, query, body).await
    }

    /// [`Api::call`] with a body of any content type (`ankusa transform
    /// test`'s sample).
    async fn call_with(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<Value, Fail> {
        let (status, text) = self.send(&method, path, query, body).await?;
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            // Every 2xx of the API is a JSON object: anything else (an HTML
            // page, an empty body) is not the relay's, and read as one it
            // would show an empty relay.
            if let Value::String(text) = &v {
                return Err(Fail::Refused(format!(
                    "{method} {path}: {} with an answer that is not JSON ({:?}): is {} an Ankusa admin listener?",
                    status.as_u16(),
                    text.chars().take(80).collect::<String>(),
                    self.base
                )));
            }
            return Ok(v);
        }
        // The API's error; from something else, what it answered.
        let (code, msg) = match api_types::Error::deserialize(&v) {
            Ok(e) => (e.error.code, e.error.message),
            Err(_) => (
                v["error"]["code"].as_str().unwrap_or("error").to_owned(),
                v["error"]["message"]
                    .as_str()
                    .map_or_else(|| v.to_string(), str::to_owned),
            ),
        };
        let line = format!("{method} {path}: {} {code}: {msg}", status.as_u16());
        Err(if status == reqwest::StatusCode::UNAUTHORIZED {
            Fail::Unauthorized(format!("{line} (set ANKUSA_ADMIN_TOKEN)"))
        } else {
            Fail::Refused(line)
        })
    }

    async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, Fail> {
        self.call(reqwest::Method::GET, path, query, None).await
    }

    /// `v`, the answer of `method path`, as its type ([`api_types`]).
    ///
    /// # Errors
    /// [`Fail::Refused`] for an answer that is not of the API's shape.
    fn read<T: DeserializeOwned>(
        &self,
        method: &reqwest::Method,
        path: &str,
        v: &Value,
    ) -> Result<T, Fail> {
        T::deserialize(v).map_err(|e| {
            Fail::Refused(format!(
                "{method} {path}: an answer the CLI cannot read ({e}): is {} an Ankusa admin listener?",
                self.base
            ))
        })
    }

    /// The items of `v`, every page of `GET path` ([`all_pages`]), as their
    /// type.
    fn read_items<T: DeserializeOwned>(&self, path: &str, v: &Value) -> Result<Vec<T>, Fail> {
        let page: Page<T> = self.read(&reqwest::Method::GET, path, v)?;
        Ok(page.items)
    }

    /// `GET path` of an answer that is not JSON (`/metrics`): its text.
    pub(crate) async fn get_text(&self, path: &str) -> Result<String, Fail> {
        let (status, text) = self.send(&reqwest::Method::GET, path, &[], None).await?;
        if status.is_success() {
            return Ok(text);
        }
        let line = format!("GET {path}: {}", status.as_u16());
        Err(if status == reqwest::StatusCode::UNAUTHORIZED {
            Fail::Unauthorized(format!("{line} (set ANKUSA_ADMIN_TOKEN)"))
        } else {
            Fail::Refused(line)
        })
    }
}

/// The largest answer the CLI reads from the admin listener, bytes: far
/// above any page of the API (1,000 items) or `/metrics` (its series are
/// bounded by the configuration), so only something that is not the relay
/// reaches it.
pub(crate) const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// The body of `resp` as text (bytes that are not UTF-8 replaced), read
/// chunk by chunk up to [`MAX_ANSWER_BYTES`].
///
/// # Errors
/// [`Fail::Refused`] for a longer answer (nothing more is read),
/// [`Fail::Unreachable`] for one that broke off.
async fn read_answer(
    mut resp: reqwest::Response,
    method: &reqwest::Method,
    path: &str,
) -> Result<String, Fail> {
    let mut body: Vec<u8> = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err(Fail::Refused(format!(
                        "{method} {path}: the answer is over {} MiB: not an answer of the admin API",
                        MAX_ANSWER_BYTES / (1024 * 1024)
                    )));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => {
                return Err(Fail::Unreachable(format!(
                    "the admin listener's answer broke off: {e}"
                )));
            }
        }
    }
    Ok(match String::from_utf8(body) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// What the admin subcommands run.
pub enum Command {
    Tenants,
    Sources,
    Hooks(HooksCmd),
    Dlq(DlqCmd),
    Jobs {
        id: Option<u64>,
        wait: bool,
        cmd: Option<JobsCmd>,
    },
    Pause {
        source: String,
        sink: Option<String>,
        reason: Option<String>,
        resume: bool,
    },
    Quarantine(QuarantineCmd),
    Replay(ReplayArgs),
    PurgeTenant {
        tenant: String,
        yes: bool,
        wait: bool,
    },
    RetireSource {
        source: String,
        tenant: Option<String>,
        reason: Option<String>,
        yes: bool,
        wait: bool,
    },
    Reload,
    Transform(TransformCmd),
}

/// Runs an admin subcommand; the process's exit code.
pub fn main(conn: &Conn, command: Command) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ankusa: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let api = match connect(&conn.admin, Duration::from_secs(60)) {
        Ok(api) => api,
        Err(f) => return f.exit(),
    };
    match rt.block_on(run(&api, conn.json, command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.exit(),
    }
}

async fn run(api: &Api, json_out: bool, command: Command) -> Result<(), Fail> {
    match command {
        Command::Tenants => tenants(api, json_out).await,
        Command::Sources => sources(api, json_out).await,
        Command::Hooks(HooksCmd::Show { id, tenant, seq }) => {
            hooks_show(api, json_out, id, tenant, seq).await
        }
        Command::Dlq(DlqCmd::List {
            filter,
            limit,
            cursor,
        }) => dlq_list(api, json_out, &filter, limit, cursor).await,
        Command::Dlq(DlqCmd::Revive {
            row,
            all,
            filter,
            wait,
        }) => {
            let target = target(row, all, &filter, "revive")?;
            act(api, json_out, target, JobKind::Revive, &filter, wait).await
        }
        Command::Dlq(DlqCmd::Drop {
            row,
            all,
            filter,
            yes,
            wait,
        }) => {
            let target = target(row, all, &filter, "drop")?;
            if !yes {
                return Err(Fail::Usage("refusing to drop dead letters without --yes: a dropped hook is gone for good (its envelope too, when no other row needs it)".into()));
            }
            act(api, json_out, target, JobKind::Drop, &filter, wait).await
        }
        Command::Jobs {
            cmd: Some(JobsCmd::Cancel { id }),
            ..
        } => jobs_cancel(api, json_out, id).await,
        Command::Jobs {
            id: Some(id),
            wait,
            cmd: None,
        } => jobs_show(api, json_out, id, wait).await,
        Command::Jobs {
            id: None,
            wait: _,
            cmd: None,
        } => jobs_list(api, json_out).await,
        Command::Pause {
            source,
            sink,
            reason,
            resume,
        } => pause(api, json_out, &source, sink.as_deref(), reason, resume).await,
        Command::Quarantine(cmd) => quarantine(api, json_out, cmd).await,
        Command::Transform(cmd) => transform(api, json_out, cmd).await,
        Command::Replay(a) => replay(api, json_out, a).await,
        Command::PurgeTenant { tenant, yes, wait } => {
            purge_tenant(api, json_out, &tenant, yes, wait).await
        }
        Command::RetireSource {
            source,
            tenant,
            reason,
            yes,
            wait,
        } => retire_source(api, json_out, source, tenant, reason, yes, wait).await,
        Command::Reload => reload(api, json_out).await,
    }
}

/// `ankusa reload`: the relay re-reads its configuration file and applies it
/// while it runs (docs/design.md section 5, "Reload"), or changes nothing and
/// says why (exit 1, every problem printed).
async fn reload(api: &Api, json_out: bool) -> Result<(), Fail> {
    let path = "/v1/reload";
    let method = reqwest::Method::POST;
    let v = api.call(method.clone(), path, &[], None).await?;
    if json_out {
        return print_json(&v);
    }
    let r: ankusa_admin::api_types::Reloaded = api.read(&method, path, &v)?;
    let file = r
        .config
        .file
        .as_deref()
        .map_or_else(|| "the embedded demo configuration".to_owned(), printable);
    let short: String = r.config.hash.chars().take(12).collect();
    if r.changes.is_empty() {
        println!("reloaded {file} (sha256 {short}): nothing changed");
    } else {
        println!(
            "reloaded {file} (sha256 {short}): {} change{}",
            r.changes.len(),
            if r.changes.len() == 1 { "" } else { "s" }
        );
        for c in &r.changes {
            println!("  {}", printable(c));
        }
    }
    Ok(())
}

/// `ankusa transform test`: `POST /v1/transform/test` with the sample as
/// the body; prints the body the sink would get (exactly, and a newline).
async fn transform(api: &Api, json_out: bool, cmd: TransformCmd) -> Result<(), Fail> {
    let TransformCmd::Test {
        source,
        sink,
        program,
        timeout_ms,
        max_output_bytes,
        file,
    } = cmd;
    let sample = if file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            .map_err(|e| Fail::Usage(format!("cannot read the sample from standard input: {e}")))?;
        buf
    } else {
        std::fs::read(&file)
            .map_err(|e| Fail::Usage(format!("cannot read {}: {e}", file.display())))?
    };
    if looks_like_a_corpus_file(&sample) {
        eprintln!(
            "note: {} looks like a corpus file of fixtures/corpus/ (provider, headers, body): the sample is the hook's raw body, its \"body\" field (e.g. jq -r .body FILE | ankusa transform test ... -)",
            file.display()
        );
    }
    let mut query: Vec<(&str, String)> = Vec::new();
    for (name, value) in [
        ("source", source),
        ("sink", sink),
        ("program", program),
        ("timeout_ms", timeout_ms.map(|n| n.to_string())),
        ("max_output_bytes", max_output_bytes.map(|n| n.to_string())),
    ] {
        if let Some(v) = value {
            query.push((name, v));
        }
    }
    let path = "/v1/transform/test";
    let method = reqwest::Method::POST;
    let v = api
        .call_with(
            method.clone(),
            path,
            &query,
            Some(("application/octet-stream", sample)),
        )
        .await?;
    if json_out {
        return print_json(&v);
    }
    let t: ankusa_admin::api_types::TransformTested = api.read(&method, path, &v)?;
    println!("{}", t.body);
    Ok(())
}

/// Whether `sample` is a corpus file (a JSON object with `provider`,
/// `headers` and a string `body`) rather than a hook's body: a sample
/// easily passed by mistake, which a program then runs on without error.
fn looks_like_a_corpus_file(sample: &[u8]) -> bool {
    serde_json::from_slice::<Value>(sample).is_ok_and(|v| {
        v.get("provider").is_some() && v.get("headers").is_some() && v["body"].is_string()
    })
}

/// `ankusa tenants`: every tenant, its counters and bounds.
async fn tenants(api: &Api, json_out: bool) -> Result<(), Fail> {
    let path = "/v1/tenants";
    let v = all_pages(api, path).await?;
    if json_out {
        return print_json(&v);
    }
    let tenants: Vec<Tenant> = api.read_items(path, &v)?;
    let rows: Vec<Vec<String>> = tenants
        .iter()
        .map(|t| {
            let c = &t.counters;
            vec![
                t.name.clone(),
                c.pending.to_string(),
                c.pending_bytes.to_string(),
                c.in_flight.to_string(),
                c.dead.to_string(),
                c.quarantined.to_string(),
                c.lanes.to_string(),
                c.lanes_blocked.to_string(),
                c.lanes_held.to_string(),
                c.lane_members.to_string(),
                t.oldest_due_age_ms
                    .map_or("-".into(), |ms| format!("{:.1}s", ms as f64 / 1000.0)),
                format!("{}/{}", opt(&t.max_pending), opt(&t.max_pending_bytes)),
            ]
        })
        .collect();
    table(
        &[
            "TENANT",
            "PENDING",
            "BYTES",
            "IN_FLIGHT",
            "DEAD",
            "QUARANTINED",
            "LANES",
            "BLOCKED",
            "HELD",
            "MEMBERS",
            "OLDEST_DUE",
            "BOUNDS",
        ],
        &rows,
    );
    Ok(())
}

/// `ankusa sources`: one line per sink entry of every source.
async fn sources(api: &Api, json_out: bool) -> Result<(), Fail> {
    let path = "/v1/sources";
    let v = all_pages(api, path).await?;
    if json_out {
        return print_json(&v);
    }
    let sources: Vec<Source> = api.read_items(path, &v)?;
    let mut rows = Vec::new();
    for src in &sources {
        for sink in &src.sinks {
            let order = match &sink.ordering_key {
                Some(key) => {
                    let (by, what) = key.parts();
                    format!("{by}:{what}")
                }
                None if sink.ordered => "keyless lane".into(),
                None => "-".into(),
            };
            // A held lane's dead letter waits for an operator (ADR 0004
            // section 8): say so beside the key.
            let order = if sink.dead_letter == "hold" {
                format!("{order} (hold)")
            } else {
                order
            };
            let breakers: Vec<String> = sink
                .breakers
                .iter()
                .filter(|b| match b.state {
                    BreakerState::Closed { failures } => failures > 0,
                    _ => true,
                })
                .map(|b| format!("{}:{}", b.tenant, b.state.as_str()))
                .collect();
            rows.push(vec![
                src.name.clone(),
                // A tenant_path source takes hooks at {path}/{tenant}.
                if src.tenant == SourceTenant::Path(true) {
                    format!("{}/{{tenant}}", src.path)
                } else {
                    src.path.clone()
                },
                src.verification.clone(),
                format!("{}#{}", sink.name, sink.index),
                sink.kind.clone(),
                order,
                paused_by(&src.pause, &sink.pause),
                if breakers.is_empty() {
                    "closed".into()
                } else {
                    breakers.join(",")
                },
            ]);
        }
    }
    table(
        &[
            "SOURCE",
            "PATH",
            "VERIFY",
            "SINK",
            "TYPE",
            "ORDERED BY",
            "PAUSED",
            "BREAKER",
        ],
        &rows,
    );
    Ok(())
}

/// `ankusa hooks show`: a hook by idempotency key, `<tenant>.<seq>`, a row
/// id, or `--tenant` and `--seq`.
async fn hooks_show(
    api: &Api,
    json_out: bool,
    id: Option<String>,
    tenant: Option<String>,
    seq: Option<u64>,
) -> Result<(), Fail> {
    let path = match (id, tenant, seq) {
        // `<tenant>.<seq>` as `hooks show` prints it, or a row id
        // `<tenant>.<seq>.<sink index>` as `dlq list` does (tenant
        // names have no dots; an idempotency key has none either).
        (Some(id), _, _) if id.contains('.') => {
            let parts: Vec<&str> = id.split('.').collect();
            let bad = || {
                Fail::Usage(format!(
                    "{id:?} is not a hook: give its idempotency key, <tenant>.<seq> (e.g. default.42) or a row id (default.42.0)"
                ))
            };
            let (t, n) = match parts.as_slice() {
                [t, n] | [t, n, _] if !t.is_empty() => (*t, *n),
                _ => return Err(bad()),
            };
            let n: u64 = n.parse().map_err(|_| bad())?;
            format!("/v1/tenants/{}/hooks/{n}", seg(&t))
        }
        (Some(id), _, _) => format!("/v1/hooks/{}", seg(&id)),
        (None, Some(t), Some(n)) => format!("/v1/tenants/{}/hooks/{}", seg(&t), seg(&n)),
        _ => {
            return Err(Fail::Usage(
                "give an idempotency key, or --tenant and --seq".into(),
            ));
        }
    };
    let v = api.get(&path, &[]).await?;
    if json_out {
        return print_json(&v);
    }
    let h: Hook = api.read(&reqwest::Method::GET, &path, &v)?;
    println!("hook {}.{}  {}", h.tenant, h.seq, h.idempotency_key);
    print_request(&h);
    if let Some(d) = &h.dedupe_key {
        println!("dedupe key {d}");
    }
    if let Some(why) = &h.quarantined {
        println!(
            "quarantined: {why} (no deliveries until `ankusa quarantine release {}.{}`)",
            h.tenant, h.seq
        );
    }
    print_headers_and_body(&h);
    let rows: Vec<Vec<String>> = h
        .deliveries
        .iter()
        .map(|d| {
            vec![
                d.id.clone(),
                opt(&d.sink),
                d.state.clone(),
                d.attempts.to_string(),
                d.ordering_key
                    .as_ref()
                    .map_or("-".into(), |k| format!("{k} ({})", opt(&d.lane_position))),
                d.dead
                    .as_ref()
                    .map(|dead| dead.reason.as_str())
                    .or(d.last_error.as_deref())
                    .unwrap_or("-")
                    .to_owned(),
            ]
        })
        .collect();
    if rows.is_empty() && h.quarantined.is_none() {
        // A delivered row is deleted, and a filter may have made none.
        println!("no delivery rows: delivered to every sink it had, or no sink's filter took it");
    } else {
        table(
            &[
                "ROW",
                "SINK",
                "STATE",
                "ATTEMPTS",
                "ORDERING KEY",
                "DEAD REASON / LAST ERROR",
            ],
            &rows,
        );
    }
    print_attempt_log(&h);
    Ok(())
}

/// Each row's attempt log (docs/design.md section 3, "The attempt log"):
/// one line per attempt, the receiver's answer cut to one line (`--json`
/// has all of it: headers, the body kept, base64 when it is not UTF-8).
fn print_attempt_log(h: &Hook) {
    for log in &h.attempt_log {
        println!(
            "attempts of {} (sink {}, {}):",
            log.id,
            opt(&log.sink),
            log.state
        );
        let rows: Vec<Vec<String>> = log
            .attempts
            .iter()
            .map(|a| {
                let answer = a.response_body.as_deref().map(one_line).unwrap_or_default();
                vec![
                    a.attempt.to_string(),
                    a.at.clone().unwrap_or_else(|| a.at_ms.to_string()),
                    format!("{} ms", a.duration_ms),
                    a.outcome.clone(),
                    a.status.map_or("-".into(), |s| s.to_string()),
                    match (&a.error, answer.is_empty()) {
                        (Some(e), _) => e.clone(),
                        (None, false) => answer,
                        (None, true) => "-".into(),
                    },
                ]
            })
            .collect();
        table(
            &["#", "AT", "DURATION", "OUTCOME", "STATUS", "ERROR / ANSWER"],
            &rows,
        );
    }
}

/// `text` on one line of at most 100 characters: control characters and
/// runs of whitespace as one space.
fn one_line(text: &str) -> String {
    let mut out = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if let Some((i, _)) = out.char_indices().nth(100) {
        out.truncate(i);
        out.push('…');
    }
    out
}

/// The line of a hook's request: its source, when, method, path and query.
fn print_request(h: &Hook) {
    println!(
        "source {}  received {}  {} {}{}",
        opt(&h.source),
        opt(&h.received_at),
        h.method,
        h.path,
        h.query
            .as_ref()
            .map(|q| format!("?{q}"))
            .unwrap_or_default()
    );
}

/// A hook's headers (a value that is not UTF-8 in base64), then its body.
fn print_headers_and_body(h: &Hook) {
    for hd in &h.headers {
        println!(
            "  {}: {}",
            hd.name,
            hd.value
                .clone()
                .unwrap_or_else(|| format!("(base64) {}", hd.value_base64))
        );
    }
    match &h.body_text {
        Some(b) => println!("body: {b}"),
        None => println!("body (base64): {}", h.body_base64),
    }
}

/// `ankusa dlq list`: one page of dead letters.
async fn dlq_list(
    api: &Api,
    json_out: bool,
    filter: &Filter,
    limit: Option<u64>,
    cursor: Option<String>,
) -> Result<(), Fail> {
    let path = "/v1/dead-letters";
    let mut q = filter.pairs();
    q.extend(limit.map(|l| ("limit", l.to_string())));
    q.extend(cursor.map(|c| ("cursor", c)));
    let v = api.get(path, &q).await?;
    if json_out {
        return print_json(&v);
    }
    let page: DeadLetterList = api.read(&reqwest::Method::GET, path, &v)?;
    let rows: Vec<Vec<String>> = page
        .items
        .iter()
        .map(|d| {
            vec![
                d.id.clone(),
                opt(&d.source),
                opt(&d.sink),
                opt(&d.dead_at),
                opt(&d.attempts),
                // The head of a held lane: its key waits for this row.
                if d.holds_lane {
                    format!("(holds its lane) {}", d.reason)
                } else {
                    d.reason.clone()
                },
            ]
        })
        .collect();
    table(
        &["ROW", "SOURCE", "SINK", "DEAD AT", "ATTEMPTS", "REASON"],
        &rows,
    );
    if let Some(c) = &page.next_cursor {
        println!("more: --cursor {c}");
    }
    Ok(())
}

/// `ankusa jobs cancel ID`.
async fn jobs_cancel(api: &Api, json_out: bool, id: u64) -> Result<(), Fail> {
    let path = format!("/v1/jobs/{}/cancel", seg(&id));
    let method = reqwest::Method::POST;
    let v = api.call(method.clone(), &path, &[], None).await?;
    if json_out {
        return print_json(&v);
    }
    let j: Job = api.read(&method, &path, &v)?;
    print_jobs(&[j]);
    Ok(())
}

/// `ankusa jobs ID [--wait]`: exit 1 for a job that failed or was cancelled
/// only when it was waited for (a look at a job that is done is a success).
async fn jobs_show(api: &Api, json_out: bool, id: u64, wait: bool) -> Result<(), Fail> {
    let (v, j) = if wait {
        wait_job(api, id, !json_out).await?
    } else {
        let path = format!("/v1/jobs/{}", seg(&id));
        let v = api.get(&path, &[]).await?;
        if json_out {
            return print_json(&v);
        }
        let j: Job = api.read(&reqwest::Method::GET, &path, &v)?;
        (v, j)
    };
    if json_out {
        print_json(&v)?;
    } else {
        print_jobs(std::slice::from_ref(&j));
    }
    if wait {
        job_outcome(&j)?;
    }
    Ok(())
}

/// `ankusa jobs`: the newest page of jobs.
async fn jobs_list(api: &Api, json_out: bool) -> Result<(), Fail> {
    let path = "/v1/jobs";
    let v = api.get(path, &[]).await?;
    if json_out {
        return print_json(&v);
    }
    let page: JobList = api.read(&reqwest::Method::GET, path, &v)?;
    print_jobs(&page.items);
    Ok(())
}

/// `ankusa pause|resume SOURCE [--sink SINK]`.
async fn pause(
    api: &Api,
    json_out: bool,
    source: &str,
    sink: Option<&str>,
    reason: Option<String>,
    resume: bool,
) -> Result<(), Fail> {
    let verb = if resume { "resume" } else { "pause" };
    let path = match sink {
        Some(k) => format!(
            "/v1/sources/{}/sinks/{}/{}",
            seg(&source),
            seg(&k),
            seg(&verb)
        ),
        None => format!("/v1/sources/{}/{}", seg(&source), seg(&verb)),
    };
    let body = reason
        .map(|r| request_json(&PauseRequest { reason: Some(r) }))
        .transpose()?;
    let method = reqwest::Method::POST;
    let v = api.call(method.clone(), &path, &[], body).await?;
    if json_out {
        return print_json(&v);
    }
    let p: PauseState = api.read(&method, &path, &v)?;
    let what = match sink {
        Some(k) => format!("sink {k} of source {source}"),
        None => format!("source {source}"),
    };
    let state = if p.paused { "paused" } else { "not paused" };
    let by = match (
        p.by_config,
        p.by_runtime.as_ref().map(|r| r.reason.as_str()),
    ) {
        (true, Some(r)) => format!(" (by the configuration, and by the API: {r})"),
        (true, None) => " (by the configuration)".into(),
        (false, Some(r)) => format!(" ({r})"),
        (false, None) => String::new(),
    };
    let delivering = if p.delivering {
        "delivering"
    } else {
        "not delivering"
    };
    println!("{what}: {state}{by}; {delivering}");
    Ok(())
}

/// `ankusa replay`: a replay job.
async fn replay(api: &Api, json_out: bool, a: ReplayArgs) -> Result<(), Fail> {
    let body = JobRequest {
        kind: JobKind::Replay,
        filter: FilterRequest {
            source: Some(a.source),
            since: Some(time_json(&a.since)),
            until: a.until.as_deref().map(time_json),
            tenant: a.tenant,
            ..FilterRequest::default()
        },
        sinks: (!a.sinks.is_empty()).then_some(a.sinks),
    };
    start_job(api, json_out, body, a.wait).await
}

/// `ankusa purge-tenant TENANT --yes`: a purge job.
async fn purge_tenant(
    api: &Api,
    json_out: bool,
    tenant: &str,
    yes: bool,
    wait: bool,
) -> Result<(), Fail> {
    if !yes {
        return Err(Fail::Usage(format!(
            "refusing to purge tenant {tenant} without --yes: every hook, delivery, dead letter and quarantined hook of the tenant is deleted for good"
        )));
    }
    let body = JobRequest {
        kind: JobKind::PurgeTenant,
        filter: FilterRequest {
            tenant: Some(tenant.to_owned()),
            ..FilterRequest::default()
        },
        sinks: None,
    };
    start_job(api, json_out, body, wait).await
}

/// `ankusa retire-source SOURCE --yes`: a job that dead-letters the
/// source's queued deliveries.
async fn retire_source(
    api: &Api,
    json_out: bool,
    source: String,
    tenant: Option<String>,
    reason: Option<String>,
    yes: bool,
    wait: bool,
) -> Result<(), Fail> {
    if !yes {
        return Err(Fail::Usage(format!(
            "refusing to dead-letter the queued deliveries of source {source} without --yes"
        )));
    }
    let body = JobRequest {
        kind: JobKind::DeadLetterSource,
        filter: FilterRequest {
            source: Some(source),
            tenant,
            reason,
            ..FilterRequest::default()
        },
        sinks: None,
    };
    start_job(api, json_out, body, wait).await
}

/// Who pauses a sink entry: `config`, `api` (the runtime control), `auto`
/// (the runtime control, by the entry's `auto_pause_after_ms`: its reason
/// says so), its `source (...)`, or `-`.
fn paused_by(source: &PauseInfo, sink: &PauseInfo) -> String {
    let by = |p: &PauseInfo| {
        let mut who = Vec::new();
        if p.by_config {
            who.push("config");
        }
        match &p.by_runtime {
            Some(r)
                if r.reason
                    .starts_with(ankusa_pipeline::AUTO_PAUSE_REASON_PREFIX) =>
            {
                who.push("auto");
            }
            Some(_) => who.push("api"),
            None => {}
        }
        who.join("+")
    };
    match (by(sink), by(source)) {
        (k, src) if k.is_empty() && src.is_empty() => "-".into(),
        (k, src) if src.is_empty() => k,
        (k, src) if k.is_empty() => format!("source ({src})"),
        (k, src) => format!("{k}, source ({src})"),
    }
}

/// A time argument as the API takes it: unix ms as a number, else the text.
fn time_json(t: &str) -> Value {
    match t.parse::<u64>() {
        Ok(n) => json!(n),
        Err(_) => json!(t),
    }
}

/// What a job that ended done with nothing done says, by its kind: the
/// filter hint only where there is a filter to check.
fn nothing_matched(id: u64, kind: JobKind) -> String {
    match kind {
        JobKind::PurgeTenant => format!(
            "job {id}: the tenant had no pending, dead-lettered or quarantined rows; its delivered hooks, archive and dedupe records were deleted"
        ),
        JobKind::Replay => format!(
            "job {id} matched nothing: no archived hook of the source in that time range (see the source's retention)"
        ),
        _ => format!(
            "job {id} matched nothing: check its filter (--reason is a prefix of the reason `ankusa dlq list` shows)"
        ),
    }
}

/// What a revive job that revived nothing but skipped rows says: they
/// matched, and why they stay.
fn revive_skipped(id: u64, skipped: u64) -> String {
    format!(
        "job {id} revived nothing: the {skipped} it matched are dead letters of a source or sink entry no longer in the configuration (they would die again at once); `ankusa dlq list` shows them (SINK -), `ankusa dlq drop ID --yes` or a drop by --source or --reason removes them"
    )
}

/// Starts a job and prints it (or waits for it).
async fn start_job(api: &Api, json_out: bool, body: JobRequest, wait: bool) -> Result<(), Fail> {
    let path = "/v1/jobs";
    let method = reqwest::Method::POST;
    let body = request_json(&body)?;
    let v = api.call(method.clone(), path, &[], Some(body)).await?;
    let job: Job = api.read(&method, path, &v)?;
    let id = job.id;
    let (v, job) = if wait {
        wait_job(api, id, !json_out).await?
    } else {
        (v, job)
    };
    if json_out {
        print_json(&v)?;
    } else {
        print_jobs(std::slice::from_ref(&job));
        if !wait {
            println!("follow it with: ankusa jobs {id} --wait");
        } else if job.state == JobState::Done && job.done == 0 {
            if job.kind == JobKind::Revive && job.skipped > 0 {
                eprintln!("{}", revive_skipped(id, job.skipped));
            } else {
                eprintln!("{}", nothing_matched(id, job.kind));
            }
        }
    }
    job_outcome(&job)
}

/// `<tenant>.<seq>` as `(tenant, seq)`.
fn hook_ref(text: &str) -> Result<(String, u64), Fail> {
    let bad = || {
        Fail::Usage(format!(
            "{text:?} is not a hook: write <tenant>.<seq>, e.g. default.42"
        ))
    };
    let (t, seq) = text.rsplit_once('.').ok_or_else(bad)?;
    let seq = seq.parse::<u64>().map_err(|_| bad())?;
    if t.is_empty() {
        return Err(bad());
    }
    Ok((t.to_owned(), seq))
}

/// `ankusa quarantine ...`.
async fn quarantine(api: &Api, json_out: bool, cmd: QuarantineCmd) -> Result<(), Fail> {
    match cmd {
        QuarantineCmd::List {
            tenant,
            source,
            limit,
            cursor,
        } => quarantine_list(api, json_out, tenant, source, limit, cursor).await,
        QuarantineCmd::Show { hook } => quarantine_show(api, json_out, &hook).await,
        QuarantineCmd::Release {
            hook: Some(hook),
            wait: _,
            ..
        } => quarantine_release(api, json_out, &hook).await,
        QuarantineCmd::Drop {
            hook: Some(hook),
            yes,
            ..
        } => quarantine_drop(api, json_out, &hook, yes).await,
        QuarantineCmd::Release {
            hook: None,
            all,
            tenant,
            source,
            wait,
        } => {
            if !all && tenant.is_none() && source.is_none() {
                return Err(Fail::Usage(
                    "release: give a hook (e.g. default.42), --source, --tenant or --all".into(),
                ));
            }
            let body = JobRequest {
                kind: JobKind::ReleaseQuarantined,
                filter: FilterRequest {
                    tenant,
                    source,
                    ..FilterRequest::default()
                },
                sinks: None,
            };
            start_job(api, json_out, body, wait).await
        }
        QuarantineCmd::Drop {
            hook: None,
            all,
            tenant,
            source,
            yes,
            wait,
        } => {
            if !all && tenant.is_none() && source.is_none() {
                return Err(Fail::Usage(
                    "drop: give a hook (e.g. default.42), --source, --tenant or --all".into(),
                ));
            }
            if !yes {
                return Err(Fail::Usage(
                    "refusing to drop quarantined hooks without --yes: they are gone for good"
                        .into(),
                ));
            }
            let body = JobRequest {
                kind: JobKind::DropQuarantined,
                filter: FilterRequest {
                    tenant,
                    source,
                    ..FilterRequest::default()
                },
                sinks: None,
            };
            start_job(api, json_out, body, wait).await
        }
    }
}

/// `ankusa quarantine list`: one page of `--tenant`'s quarantined hooks, or
/// every page of every tenant's.
async fn quarantine_list(
    api: &Api,
    json_out: bool,
    tenant: Option<String>,
    source: Option<String>,
    limit: Option<u64>,
    cursor: Option<String>,
) -> Result<(), Fail> {
    let mut q: Vec<(&str, String)> = Vec::new();
    q.extend(source.map(|s| ("source", s)));
    let (path, v) = match tenant {
        Some(t) => {
            q.extend(limit.map(|l| ("limit", l.to_string())));
            q.extend(cursor.map(|c| ("cursor", c)));
            let path = format!("/v1/tenants/{}/quarantine", seg(&t));
            let v = api.get(&path, &q).await?;
            (path, v)
        }
        None => {
            let tenants_path = "/v1/tenants";
            let tenants = all_pages(api, tenants_path).await?;
            let tenants: Vec<Tenant> = api.read_items(tenants_path, &tenants)?;
            let mut all = Vec::new();
            for t in &tenants {
                let path = format!("/v1/tenants/{}/quarantine", seg(&t.name));
                let mut cursor: Option<String> = None;
                loop {
                    let mut qq = q.clone();
                    qq.push(("limit", "1000".into()));
                    qq.extend(cursor.take().map(|c| ("cursor", c)));
                    let v = api.get(&path, &qq).await?;
                    let page: Page<Value> = api.read(&reqwest::Method::GET, &path, &v)?;
                    all.extend(page.items);
                    match page.next_cursor {
                        Some(c) => cursor = Some(c),
                        None => break,
                    }
                }
            }
            (
                "/v1/tenants/{tenant}/quarantine".to_owned(),
                json!({ "items": all, "next_cursor": null }),
            )
        }
    };
    if json_out {
        return print_json(&v);
    }
    let page: QuarantineList = api.read(&reqwest::Method::GET, &path, &v)?;
    let rows: Vec<Vec<String>> = page
        .items
        .iter()
        .map(|h| {
            vec![
                h.id.clone(),
                opt(&h.source),
                opt(&h.received_at),
                h.size_bytes.to_string(),
                h.reason.clone(),
            ]
        })
        .collect();
    table(&["HOOK", "SOURCE", "RECEIVED", "BYTES", "REASON"], &rows);
    if let Some(c) = &page.next_cursor {
        println!("more: --cursor {c}");
    }
    Ok(())
}

/// `ankusa quarantine show HOOK`.
async fn quarantine_show(api: &Api, json_out: bool, hook: &str) -> Result<(), Fail> {
    let (t, seq) = hook_ref(hook)?;
    let path = format!("/v1/tenants/{}/quarantine/{}", seg(&t), seg(&seq));
    let v = api.get(&path, &[]).await?;
    if json_out {
        return print_json(&v);
    }
    let q: QuarantinedHook = api.read(&reqwest::Method::GET, &path, &v)?;
    let h = &q.hook;
    println!("hook {t}.{seq}  {}  held: {}", h.idempotency_key, q.reason);
    print_request(h);
    print_headers_and_body(h);
    Ok(())
}

/// `ankusa quarantine release HOOK`.
async fn quarantine_release(api: &Api, json_out: bool, hook: &str) -> Result<(), Fail> {
    let (t, seq) = hook_ref(hook)?;
    let path = format!("/v1/tenants/{}/quarantine/{}/release", seg(&t), seg(&seq));
    let method = reqwest::Method::POST;
    let v = api.call(method.clone(), &path, &[], None).await?;
    if json_out {
        return print_json(&v);
    }
    let r: Released = api.read(&method, &path, &v)?;
    println!(
        "released {t}.{seq} ({} {} for source {})",
        r.rows,
        if r.rows == 1 { "row" } else { "rows" },
        r.source
    );
    Ok(())
}

/// `ankusa quarantine drop HOOK --yes`.
async fn quarantine_drop(api: &Api, json_out: bool, hook: &str, yes: bool) -> Result<(), Fail> {
    let (t, seq) = hook_ref(hook)?;
    if !yes {
        return Err(Fail::Usage(
            "refusing to drop a quarantined hook without --yes: it is gone for good".into(),
        ));
    }
    let path = format!("/v1/tenants/{}/quarantine/{}", seg(&t), seg(&seq));
    let method = reqwest::Method::DELETE;
    let v = api.call(method.clone(), &path, &[], None).await?;
    if json_out {
        return print_json(&v);
    }
    let _: Dropped = api.read(&method, &path, &v)?;
    println!("dropped {t}.{seq}");
    Ok(())
}

/// A request body ([`api_types`]) as JSON: what it does not give is left
/// out.
fn request_json(body: &impl serde::Serialize) -> Result<Value, Fail> {
    serde_json::to_value(body)
        .map_err(|e| Fail::Usage(format!("cannot write the request's body: {e}")))
}

/// One row, or a job over a filter.
enum Target {
    Row(String),
    Filter,
}

fn target(row: Option<String>, all: bool, filter: &Filter, verb: &str) -> Result<Target, Fail> {
    match (row, all, filter.is_empty()) {
        (Some(_), _, false) => Err(Fail::Usage(format!(
            "{verb}: give a row id or filters, not both"
        ))),
        (Some(r), _, true) if !is_row_id(&r) => Err(Fail::Usage(format!(
            "{verb}: {r:?} is not a row id: write <tenant>.<seq>.<sink index>, e.g. default.42.0 (`ankusa dlq list` shows them)"
        ))),
        (Some(r), _, true) => Ok(Target::Row(r)),
        (None, true, _) | (None, false, false) => Ok(Target::Filter),
        (None, false, true) => Err(Fail::Usage(format!(
            "{verb}: give a row id (e.g. default.42.0), --all, or a filter (--tenant, --source, --sink, --reason, --since, --until)"
        ))),
    }
}

/// `<tenant>.<seq>.<sink index>`: a tenant name (letters, digits, `-`, `_`),
/// a seq (u64) and a sink index (u16), numbers without sign or leading zero,
/// as the API writes them.
fn is_row_id(text: &str) -> bool {
    let number = |n: &str| {
        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'))
    };
    let mut parts = text.rsplitn(3, '.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(sink), Some(seq), Some(tenant)) => {
            number(sink)
                && sink.parse::<u16>().is_ok()
                && number(seq)
                && seq.parse::<u64>().is_ok()
                && !tenant.is_empty()
                && tenant
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        }
        _ => false,
    }
}

async fn act(
    api: &Api,
    json_out: bool,
    target: Target,
    kind: JobKind,
    filter: &Filter,
    wait: bool,
) -> Result<(), Fail> {
    let row = match target {
        Target::Row(row) => row,
        Target::Filter => {
            return start_job(
                api,
                json_out,
                JobRequest {
                    kind,
                    filter: filter.request(),
                    sinks: None,
                },
                wait,
            )
            .await;
        }
    };
    if kind == JobKind::Revive {
        let path = format!("/v1/dead-letters/{}/revive", seg(&row));
        let method = reqwest::Method::POST;
        let v = api.call(method.clone(), &path, &[], None).await?;
        if json_out {
            return print_json(&v);
        }
        let r: Revived = api.read(&method, &path, &v)?;
        println!("revived {row} ({})", r.state);
    } else {
        let path = format!("/v1/dead-letters/{}", seg(&row));
        let method = reqwest::Method::DELETE;
        let v = api.call(method.clone(), &path, &[], None).await?;
        if json_out {
            return print_json(&v);
        }
        let _: Dropped = api.read(&method, &path, &v)?;
        println!("dropped {row}");
    }
    Ok(())
}

/// Polls job `id` until it leaves `running`, with a progress bar on a
/// terminal: its last answer, as received and as its type.
async fn wait_job(api: &Api, id: u64, bar: bool) -> Result<(Value, Job), Fail> {
    let pb = indicatif::ProgressBar::new(0);
    if bar {
        pb.set_style(
            indicatif::ProgressStyle::with_template("job {msg} [{bar:40}] {pos}/{len} examined")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
    } else {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let path = format!("/v1/jobs/{}", seg(&id));
    loop {
        let v = api.get(&path, &[]).await?;
        let j: Job = api.read(&reqwest::Method::GET, &path, &v)?;
        pb.set_length(j.total.unwrap_or(0).max(j.examined));
        pb.set_position(j.examined);
        let phase = j
            .phase
            .as_ref()
            .map(|p| format!(" ({p})"))
            .unwrap_or_default();
        pb.set_message(format!("{id} {}: {} done{phase}", j.kind.as_str(), j.done));
        if j.state != JobState::Running {
            pb.finish_and_clear();
            return Ok((v, j));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn job_outcome(j: &Job) -> Result<(), Fail> {
    match j.state {
        JobState::Failed => Err(Fail::Refused(format!(
            "job {} failed: {}",
            j.id,
            opt(&j.error)
        ))),
        JobState::Cancelled => Err(Fail::Refused(format!(
            "job {} was cancelled after {} rows",
            j.id, j.done
        ))),
        _ => Ok(()),
    }
}

fn print_jobs(jobs: &[Job]) {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            // In the order of the fields' names.
            let mut given = j.filter.given();
            given.sort_by_key(|(k, _)| *k);
            let mut f: Vec<String> = given.iter().map(|(k, v)| format!("{k}={v}")).collect();
            if let Some(sinks) = &j.sinks {
                f.push(format!("sinks={}", sinks.join(",")));
            }
            let progress = match j.total {
                Some(t) => format!("{}/{t}", j.examined),
                None => j.examined.to_string(),
            };
            let state = match &j.phase {
                Some(p) if j.state == JobState::Running => format!("running ({p})"),
                _ => j.state.as_str().to_owned(),
            };
            vec![
                j.id.to_string(),
                j.kind.as_str().to_owned(),
                state,
                progress,
                j.done.to_string(),
                j.skipped.to_string(),
                if f.is_empty() {
                    "all".into()
                } else {
                    f.join(" ")
                },
                opt(&j.created_at),
            ]
        })
        .collect();
    table(
        &[
            "JOB", "KIND", "STATE", "EXAMINED", "DONE", "SKIPPED", "FILTER", "CREATED",
        ],
        &rows,
    );
    for j in jobs {
        if let Some(e) = &j.error {
            println!("job {}: {e}", j.id);
        }
    }
}

/// Every page of a list: `{"items": [...], "next_cursor": null}`, its items
/// as received.
///
/// # Errors
/// The API's, and [`Fail::Refused`] for a page that is not a list's, or an
/// answer that would page forever: a `next_cursor` the listing gave before
/// (the API's cursors only move forward), or a page with no items that still
/// names a next one.
pub(crate) async fn all_pages(api: &Api, path: &str) -> Result<Value, Fail> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = std::collections::HashSet::new();
    loop {
        let mut q = vec![("limit", "1000".to_owned())];
        q.extend(cursor.take().map(|c| ("cursor", c)));
        let v = api.get(path, &q).await?;
        let page: Page<Value> = api.read(&reqwest::Method::GET, path, &v)?;
        let empty = page.items.is_empty();
        all.extend(page.items);
        match page.next_cursor {
            Some(c) if empty || !seen.insert(c.clone()) => {
                return Err(Fail::Refused(format!(
                    "GET {path}: the listing does not end (a page {} next_cursor {:?}): is {} an Ankusa admin listener?",
                    if empty {
                        "with no items names"
                    } else {
                        "names again the"
                    },
                    c.chars().take(64).collect::<String>(),
                    api.base
                )));
            }
            Some(c) => cursor = Some(c),
            None => return Ok(json!({ "items": all, "next_cursor": null })),
        }
    }
}

/// An optional field as a cell: its text, or `-`.
fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".into(), ToString::to_string)
}

fn print_json(v: &Value) -> Result<(), Fail> {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    Ok(())
}

fn table(head: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(x) = w.get_mut(i) {
                *x = (*x).max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let out: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w.get(i).copied().unwrap_or(0)))
            .collect();
        println!("{}", out.join("  ").trim_end());
    };
    line(head.iter().map(|h| (*h).to_owned()).collect());
    for r in rows {
        line(r.clone());
    }
    if rows.is_empty() {
        println!("(none)");
    }
}

/// One path segment of an admin URL, percent-encoded: whatever an operator
/// types as a row id, job id or name stays inside its segment (`../jobs/1`
/// cannot reach another route).
fn seg(text: &impl ToString) -> String {
    let text = text.to_string();
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    // `.` and `..` alone would still be dot-segments.
    if out == "." || out == ".." {
        out.replace('.', "%2E")
    } else {
        out
    }
}

/// A clap value parser for names and filter fields: an empty value is a
/// usage error, never "no filter" (a script's unset variable must not widen
/// a destructive command to everything).
pub fn non_empty(text: &str) -> Result<String, String> {
    if text.is_empty() {
        Err("must not be empty (leave the option out instead)".to_owned())
    } else {
        Ok(text.to_owned())
    }
}

/// `ankusa store backup FILE`: `GET /v1/backup` of the relay at `conn`,
/// written beside FILE and moved into place once the whole dump arrived and
/// reached the disk (FILE is never replaced).
pub fn backup_main(conn: &Conn, file: &std::path::Path) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ankusa: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let api = match connect(&conn.admin, Duration::from_secs(60)) {
        Ok(api) => api,
        Err(f) => return f.exit(),
    };
    match rt.block_on(backup(&api, file)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.exit(),
    }
}

async fn backup(api: &Api, file: &std::path::Path) -> Result<(), Fail> {
    use std::io::Write as _;
    if file.exists() {
        return Err(Fail::Usage(format!(
            "{}: exists; a backup writes a new file (remove it or give another name)",
            file.display()
        )));
    }
    // Staged beside FILE as `store export` stages its dump (and what a
    // killed backup left there removed first).
    crate::store::remove_leftovers(file, "partial");
    let tmp = crate::store::beside(file, "partial");
    let path = "/v1/backup";
    let url = format!("{}{path}", api.base.trim_end_matches('/'));
    // No deadline for the whole answer: a large store takes as long as it
    // takes; the relay cuts the answer if it fails.
    let mut req = api
        .client
        .get(url)
        .timeout(Duration::from_secs(7 * 24 * 3600));
    if let Some(t) = &api.token {
        req = req.bearer_auth(t);
    }
    let mut resp = req.send().await.map_err(|e| {
        Fail::Unreachable(format!(
            "cannot reach the admin listener at {}: {e}",
            api.base
        ))
    })?;
    if !resp.status().is_success() {
        let status = resp.status();
        let text = read_answer(resp, &reqwest::Method::GET, path).await?;
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        let msg = v["error"]["message"]
            .as_str()
            .map_or_else(|| v.to_string(), str::to_owned);
        let line = format!("GET {path}: {} {msg}", status.as_u16());
        return Err(if status == reqwest::StatusCode::UNAUTHORIZED {
            Fail::Unauthorized(format!("{line} (set ANKUSA_ADMIN_TOKEN)"))
        } else {
            Fail::Refused(line)
        });
    }
    let cannot_write = |e: std::io::Error| {
        Fail::Usage(format!(
            "{}: cannot be written (at {} beside it): {e}",
            file.display(),
            tmp.display()
        ))
    };
    // Plain blocking writes: this command's runtime has nothing else to do.
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(cannot_write)?;
    let mut bytes = 0u64;
    let outcome: Result<(), Fail> = async {
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    bytes += chunk.len() as u64;
                    out.write_all(&chunk).map_err(cannot_write)?;
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(Fail::Refused(format!(
                        "the relay cut the backup after {bytes} bytes ({e}); its log says why; nothing was written under {}",
                        file.display()
                    )));
                }
            }
        }
        out.flush().map_err(cannot_write)?;
        out.sync_all().map_err(cannot_write)?;
        Ok(())
    }
    .await;
    if let Err(f) = outcome {
        let _ = std::fs::remove_file(&tmp);
        return Err(f);
    }
    // Never replaces a file (`store export`'s publish: a hard link).
    crate::store::publish(&tmp, file).map_err(|f| Fail::Usage(f.1))?;
    crate::store::sync_parent(file);
    let header = std::fs::File::open(file)
        .ok()
        .and_then(|f| ankusa_engine::dump::read_dump_header(std::io::BufReader::new(f)).ok());
    match header {
        Some(h) => println!(
            "{}: backed up {bytes} bytes of the running relay's store (format {}, origin {}); restore with `ankusa store import {} DATA_DIR --store rocksdb|fjall`",
            file.display(),
            h.store_format,
            h.backend,
            file.display()
        ),
        None => println!("{}: backed up {bytes} bytes", file.display()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request's body has what the command gives and nothing else (no
    /// `null`s), times as numbers when they are unix ms.
    #[test]
    fn request_bodies_leave_out_what_is_not_given() {
        let filter = Filter {
            tenant: Some("acme".into()),
            since: Some("1700000000000".into()),
            until: Some("2026-01-02T03:04:05Z".into()),
            ..Filter::default()
        };
        let job = JobRequest {
            kind: JobKind::Drop,
            filter: filter.request(),
            sinks: None,
        };
        assert_eq!(
            request_json(&job).ok().map(|v| v.to_string()),
            Some(
                r#"{"filter":{"since":1700000000000,"tenant":"acme","until":"2026-01-02T03:04:05Z"},"kind":"drop"}"#
                    .to_owned()
            )
        );
        let pause = PauseRequest {
            reason: Some("maintenance".into()),
        };
        assert_eq!(
            request_json(&pause).ok().map(|v| v.to_string()),
            Some(r#"{"reason":"maintenance"}"#.to_owned())
        );
    }

    #[test]
    fn a_message_prints_without_the_terminals_control_characters() {
        assert_eq!(
            printable("GET /v1/tenants: 500 x: \u{1b}]0;pwned\u{7}done\r\nnext"),
            "GET /v1/tenants: 500 x: \\u{1b}]0;pwned\\u{7}done\\u{d}\nnext"
        );
        assert_eq!(printable("plain: naïve ✓"), "plain: naïve ✓");
    }
}
