// Ankusa's operator console (docs/design.md section 5, "Operator console").
//
// Plain JavaScript, no framework and no build step; the admin listener serves
// it from the binary. It calls only the admin API (admin/src/http/
// openapi.json) and /metrics, with `Authorization: Bearer <token>` when the
// operator gave a token (kept in this tab's sessionStorage). Every value the
// API returns reaches the page as text (textContent, Node.append of strings,
// dataset), never parsed as HTML, so a tenant, source, reason or error that
// holds markup shows as that markup's text.
'use strict';

(() => {
  /** How often the page refreshes, ms. */
  const REFRESH_MS = 5000;
  /** The sessionStorage key of the admin token. */
  const TOKEN_KEY = 'ankusa.admin_token';
  /** Dead letters and quarantined hooks shown (one page of the API). */
  const LIST_LIMIT = 100;
  /** Jobs read (the newest first). */
  const JOB_LIMIT = 20;
  /** Pages of tenants or sources read at most (1000 items each). */
  const MAX_PAGES = 10;

  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  /** A failed call: its HTTP status (0: no answer), the API's error code and a message for the operator. */
  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  const state = {
    /** Bumped whenever the token changes or the console stops: answers of an older generation are dropped. */
    generation: 0,
    timer: null,
    noticeTimer: null,
    /** The previous /metrics sample ({at, ingest, delivered, retry, dead}), for rates. */
    last: null,
  };

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  /** Calls the admin API: the parsed JSON (or the text with `text`), else throws an ApiError. */
  async function call(method, path, text = false) {
    const headers = { Accept: text ? 'text/plain' : 'application/json' };
    const t = token();
    if (t !== null) headers.Authorization = 'Bearer ' + t;
    let res;
    try {
      res = await fetch(path, { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error' });
    } catch (e) {
      throw new ApiError(0, 'unreachable', `${method} ${path}: the admin listener cannot be reached (${e.message})`);
    }
    const body = await res.text();
    if (!res.ok) {
      let code = 'http_' + res.status;
      let message = body.slice(0, 300);
      try {
        const j = JSON.parse(body);
        if (j && j.error) {
          code = String(j.error.code);
          message = String(j.error.message);
        }
      } catch (_) {
        // Not the API's JSON error: keep the text.
      }
      throw new ApiError(res.status, code, `${method} ${path}: ${res.status} ${code}: ${message}`);
    }
    if (text) return body;
    try {
      return JSON.parse(body);
    } catch (e) {
      throw new ApiError(res.status, 'bad_json', `${method} ${path}: the answer is not JSON (${e.message})`);
    }
  }

  /** Every item of a paged list (at most MAX_PAGES pages). */
  async function pages(path) {
    const items = [];
    let cursor = null;
    for (let i = 0; i < MAX_PAGES; i++) {
      const sep = path.includes('?') ? '&' : '?';
      const page = await call('GET', cursor === null ? path : `${path}${sep}cursor=${enc(cursor)}`);
      items.push(...page.items);
      cursor = page.next_cursor;
      if (cursor === null || cursor === undefined) break;
    }
    return items;
  }

  // ---- formatting (every function returns a string or a Node) -------------

  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'data') for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = String(dv);
      else if (k === 'title') e.title = String(v);
      else if (k === 'onclick') e.addEventListener('click', v);
      else e.setAttribute(k, String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined) continue;
      e.append(kid instanceof Node ? kid : String(kid));
    }
    return e;
  }

  function num(n) {
    return n === null || n === undefined ? '–' : Number(n).toLocaleString('en-US');
  }

  function bytes(n) {
    if (n === null || n === undefined) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let v = Number(n);
    let u = 0;
    while (v >= 1024 && u < units.length - 1) {
      v /= 1024;
      u++;
    }
    return u === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${units[u]}`;
  }

  function age(ms) {
    if (ms === null || ms === undefined) return '–';
    const s = ms / 1000;
    if (s < 10) return `${s.toFixed(1)} s`;
    if (s < 120) return `${Math.round(s)} s`;
    if (s < 7200) return `${Math.round(s / 60)} min`;
    if (s < 172800) return `${Math.round(s / 3600)} h`;
    return `${Math.round(s / 86400)} d`;
  }

  function iso(ms) {
    const d = new Date(Number(ms));
    return Number.isNaN(d.getTime()) ? String(ms) : d.toISOString();
  }

  /** "12 s ago", with the exact UTC time as its tooltip. */
  function when(ms) {
    if (ms === null || ms === undefined) return el('span', null, '–');
    return el('time', { datetime: iso(ms), title: iso(ms) }, `${age(Math.max(0, Date.now() - ms))} ago`);
  }

  function tag(kind, text, title) {
    return el('span', { class: `tag ${kind}`, title }, text);
  }

  function numCell(field, value, warn) {
    return el('td', { class: warn ? `num ${warn}` : 'num', data: { field } }, num(value));
  }

  function keySpec(k) {
    if (!k) return '';
    if (k.header !== undefined) return `header ${k.header}`;
    if (k.json !== undefined) return `JSON ${k.json}`;
    if (k.function) return 'function';
    return JSON.stringify(k);
  }

  function emptyRow(cols, text) {
    return el('tr', { class: 'empty' }, el('td', { colspan: cols }, text));
  }

  // ---- banners ---------------------------------------------------------------

  function showError(message) {
    const e = $('error');
    e.textContent = message || '';
    e.hidden = !message;
  }

  function notice(message) {
    const n = $('notice');
    n.textContent = message;
    n.hidden = false;
    clearTimeout(state.noticeTimer);
    state.noticeTimer = setTimeout(() => {
      n.hidden = true;
    }, 4 * REFRESH_MS);
  }

  // ---- the sections ------------------------------------------------------------

  function renderTenants(tenants) {
    const rows = tenants.map((t) => {
      const c = t.counters;
      const bounds = [];
      if (t.max_pending !== null) bounds.push(`${num(t.max_pending)} hooks`);
      if (t.max_pending_bytes !== null) bounds.push(bytes(t.max_pending_bytes));
      return el(
        'tr',
        { data: { tenant: t.name } },
        el('td', { data: { field: 'name' } }, t.name, t.configured ? null : tag('warn', 'not configured')),
        numCell('pending', c.pending),
        numCell('in_flight', c.in_flight),
        numCell('dead', c.dead, c.dead > 0 ? 'bad' : null),
        numCell('quarantined', c.quarantined, c.quarantined > 0 ? 'warn' : null),
        numCell('delivered_total', c.delivered_total),
        numCell('dead_lettered_total', c.dead_lettered_total),
        numCell('retries_total', c.retries_total),
        numCell('lanes', c.lanes),
        numCell('lanes_blocked', c.lanes_blocked, c.lanes_blocked > 0 ? 'warn' : null),
        numCell('lanes_held', c.lanes_held, c.lanes_held > 0 ? 'bad' : null),
        el('td', { class: 'num', data: { field: 'oldest_due_age' }, title: t.oldest_due_at_ms === null ? null : iso(t.oldest_due_at_ms) }, age(t.oldest_due_age_ms)),
        el('td', { data: { field: 'bounds' } }, bounds.length ? bounds.join(' · ') : 'none'),
      );
    });
    $('tenants').tBodies[0].replaceChildren(...(rows.length ? rows : [emptyRow(13, 'No tenants yet.')]));
  }

  function pauseCell(target, sourcePaused) {
    if (target.pause.by_config) return tag('warn', 'paused', 'paused: true in the configuration (a configuration change and a restart lift it)');
    const rt = target.pause.by_runtime;
    if (rt) {
      return el('span', null, tag('warn', 'paused'), ` since ${rt.since || iso(rt.since_ms)}`, rt.reason ? ` (${rt.reason})` : '');
    }
    if (sourcePaused) return tag('warn', 'source paused');
    return tag('ok', 'delivering');
  }

  function breakerCell(breakers) {
    const bad = breakers.filter((b) => b.state !== 'closed');
    if (!bad.length) {
      const failures = breakers.reduce((n, b) => n + (b.failures || 0), 0);
      return el('span', null, tag('ok', 'closed'), failures ? ` ${num(failures)} recent failures` : '');
    }
    return bad.map((b) =>
      el(
        'div',
        null,
        tag(b.state === 'open' ? 'bad' : 'warn', b.state === 'open' ? 'open' : 'half open'),
        ` ${b.tenant}`,
        b.open_until_ms ? ` until ${iso(b.open_until_ms)}` : '',
      ),
    );
  }

  function renderSources(sources) {
    const rows = [];
    for (const s of sources) {
      const tenant = s.tenant.fixed !== undefined ? s.tenant.fixed : '{tenant} of the path';
      const sinks = s.sinks.length ? s.sinks : [null];
      sinks.forEach((k, i) => {
        const cells = [];
        if (i === 0) {
          cells.push(
            el('td', { rowspan: sinks.length, data: { field: 'source' } }, el('div', null, s.name), el('code', { class: 'small' }, s.path), s.paused ? el('div', null, pauseCell(s, false)) : null),
            el('td', { rowspan: sinks.length }, tenant),
          );
        }
        if (k === null) {
          cells.push(el('td', { colspan: 5 }, 'no sinks'));
        } else {
          cells.push(
            el('td', { data: { field: 'sink' } }, k.name),
            el('td', null, k.type),
            el('td', null, k.ordered ? `ordered by ${keySpec(k.ordering_key)}${k.dead_letter === 'hold' ? ', dead_letter: hold' : ''}` : 'unordered'),
            el('td', { data: { field: 'pause' } }, pauseCell(k, s.paused)),
            el('td', { data: { field: 'breakers' } }, breakerCell(k.breakers)),
          );
        }
        rows.push(el('tr', { data: { source: s.name, sink: k === null ? '' : k.name } }, cells));
      });
    }
    $('sources').tBodies[0].replaceChildren(...(rows.length ? rows : [emptyRow(7, 'No sources configured.')]));
  }

  function button(text, action, handler, danger) {
    return el('button', { type: 'button', class: danger ? 'danger' : null, data: { action }, onclick: handler }, text);
  }

  function renderDead(list, tenants) {
    const total = tenants.reduce((n, t) => n + t.counters.dead, 0);
    $('dead-count').textContent = list.next_cursor ? `${num(total)} in all; the first ${LIST_LIMIT} shown (ankusa dlq list filters)` : `${num(total)}`;
    const rows = list.items.map((d) =>
      el(
        'tr',
        { data: { id: d.id } },
        el('td', { title: `tenant ${d.tenant}, seq ${d.seq}, sink index ${d.sink_index}; idempotency key ${d.idempotency_key || '–'}` }, el('code', null, d.id)),
        el('td', { data: { field: 'source' } }, d.source === null ? '–' : d.source),
        el('td', { data: { field: 'sink' } }, d.sink === null ? '–' : d.sink),
        el('td', { data: { field: 'reason' } }, d.reason),
        el('td', { class: 'num' }, num(d.attempts)),
        el('td', { class: 'clip', title: d.last_error || null, data: { field: 'last_error' } }, d.last_error === null ? '–' : d.last_error),
        el('td', null, when(d.dead_at_ms)),
        el('td', { class: 'num' }, bytes(d.size_bytes)),
        el(
          'td',
          { class: 'buttons' },
          button('Attempts', 'attempts', (ev) => showAttempts(ev.currentTarget, d)),
          button('Revive', 'revive', (ev) => act(ev.currentTarget, 'POST', `/v1/dead-letters/${enc(d.id)}/revive`, (r) => `Revived ${r.id}: ${r.state === 'lane_member' ? 'queued in its ordering lane' : 'due now'}.`)),
          button(
            'Drop',
            'drop',
            (ev) => {
              if (window.confirm(`Drop dead letter ${d.id} for good?`)) act(ev.currentTarget, 'DELETE', `/v1/dead-letters/${enc(d.id)}`, (r) => `Dropped ${r.id}.`);
            },
            true,
          ),
        ),
      ),
    );
    $('dead').tBodies[0].replaceChildren(...(rows.length ? rows : [emptyRow(9, 'No dead letters.')]));
  }

  /** One attempt of a row's attempt log as a table row. */
  function attemptRow(a) {
    const headers = a.response_headers.map((h) => `${h.name}: ${h.value === null ? `(base64) ${h.value_base64}` : h.value}`).join('\n');
    let body = a.response_body === null ? '–' : a.response_body;
    if (a.response_body_truncated) body += ' …(cut)';
    return el(
      'tr',
      { data: { attempt: a.attempt } },
      el('td', { class: 'num' }, String(a.attempt)),
      el('td', null, when(a.at_ms)),
      el('td', { class: 'num', data: { field: 'duration' } }, `${num(a.duration_ms)} ms`),
      el('td', { data: { field: 'outcome' } }, tag(a.outcome === 'delivered' ? 'ok' : a.outcome === 'retry' ? 'info' : 'bad', a.outcome)),
      el('td', { class: 'num', data: { field: 'status' } }, a.status === null ? '–' : String(a.status)),
      el('td', { class: 'clip', title: a.error || null, data: { field: 'error' } }, a.error === null ? '–' : a.error),
      el('td', { data: { field: 'headers' } }, headers ? el('pre', { class: 'answer' }, headers) : '–'),
      el('td', { data: { field: 'body' } }, a.response_body === null ? '–' : el('pre', { class: 'answer', title: a.response_body_base64 ? `base64: ${a.response_body_base64}` : null }, body)),
    );
  }

  /**
   * Shows the attempt log of dead letter `d` (its hook's view,
   * GET /v1/tenants/{tenant}/hooks/{seq}): each attempt's time, duration,
   * outcome, status, error and the receiver's answer. Read once, when asked:
   * the refresh does not replace it.
   */
  async function showAttempts(btn, d) {
    btn.disabled = true;
    try {
      const hook = await call('GET', `/v1/tenants/${enc(d.tenant)}/hooks/${enc(d.seq)}`);
      const log = hook.attempt_log.find((l) => l.id === d.id);
      const attempts = log ? log.attempts : [];
      $('attempts-row').textContent = d.id;
      $('attempts-hint').textContent = attempts.length
        ? `the last ${num(attempts.length)} of ${num(d.attempts)} (node.attempt_log.max_attempts), oldest first`
        : 'no attempt kept (the relay keeps no attempt log, or none ran)';
      $('attempts').tBodies[0].replaceChildren(...(attempts.length ? attempts.map(attemptRow) : [emptyRow(8, 'No attempts.')]));
      $('attempts-section').hidden = false;
      showError(null);
    } catch (e) {
      if (e.status === 401) {
        askToken(`The admin API refused the token: ${e.message}. Enter it again.`);
        return;
      }
      showError(e.message);
    } finally {
      btn.disabled = false;
    }
  }

  function renderQuarantine(items, tenants) {
    const total = tenants.reduce((n, t) => n + t.counters.quarantined, 0);
    $('quarantine-count').textContent = items.length < total ? `${num(total)} in all; ${num(items.length)} shown` : `${num(total)}`;
    const rows = items.map((q) => {
      const base = `/v1/tenants/${enc(q.tenant)}/quarantine/${enc(q.seq)}`;
      return el(
        'tr',
        { data: { id: q.id } },
        el('td', { title: `idempotency key ${q.idempotency_key || '–'}` }, el('code', null, q.id)),
        el('td', null, q.source === null ? '–' : q.source),
        el('td', { data: { field: 'reason' } }, q.reason),
        el('td', null, when(q.received_at_ms)),
        el('td', { class: 'num' }, bytes(q.size_bytes)),
        el(
          'td',
          { class: 'buttons' },
          button('Release', 'release', (ev) => act(ev.currentTarget, 'POST', `${base}/release`, (r) => `Released ${r.id}: ${num(r.rows)} delivery rows.`)),
          button(
            'Drop',
            'drop',
            (ev) => {
              if (window.confirm(`Drop quarantined hook ${q.id} for good?`)) act(ev.currentTarget, 'DELETE', base, (r) => `Dropped ${r.id}.`);
            },
            true,
          ),
        ),
      );
    });
    $('quarantine').tBodies[0].replaceChildren(...(rows.length ? rows : [emptyRow(6, 'Nothing held in quarantine.')]));
  }

  const JOB_TAGS = { running: 'info', done: 'ok', failed: 'bad', cancelled: 'muted' };

  function renderJobs(jobs) {
    const shown = [...jobs.filter((j) => j.state === 'running'), ...jobs.filter((j) => j.state !== 'running')].slice(0, 10);
    const rows = shown.map((j) => {
      const parts = [`examined ${num(j.examined)}${j.total === null ? '' : ` of ${num(j.total)}`}`, `done ${num(j.done)}`];
      if (j.skipped) parts.push(`skipped ${num(j.skipped)}`);
      const bar = j.total === null || j.state !== 'running' ? null : el('progress', { max: Math.max(1, j.total), value: Math.min(j.examined, Math.max(1, j.total)) });
      return el(
        'tr',
        { data: { job: j.id } },
        el('td', null, `#${j.id}`),
        el('td', null, j.kind),
        el('td', { data: { field: 'state' } }, tag(JOB_TAGS[j.state] || 'muted', j.state)),
        el('td', { data: { field: 'progress' } }, bar, ' ', parts.join(' · ')),
        el('td', { class: 'clip', title: j.error || j.phase || null }, j.error || j.phase || '–'),
        el('td', null, when(j.created_at_ms)),
      );
    });
    $('jobs').tBodies[0].replaceChildren(...(rows.length ? rows : [emptyRow(6, 'No jobs.')]));
  }

  // ---- /metrics: counters and their rates ----------------------------------------

  /** Every sample of an OpenMetrics text: {name, labels, value}. */
  function parseMetrics(text) {
    const out = [];
    for (const line of text.split('\n')) {
      if (!line || line[0] === '#') continue;
      const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const labels = {};
      if (m[2]) for (const l of m[2].matchAll(/([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
      const value = Number(m[3]);
      if (Number.isFinite(value)) out.push({ name: m[1], labels, value });
    }
    return out;
  }

  function sum(samples, name, keep) {
    return samples.filter((s) => s.name === name && (!keep || keep(s.labels))).reduce((n, s) => n + s.value, 0);
  }

  function renderRates(text) {
    const samples = parseMetrics(text);
    const attempts = 'ankusa_dispatch_attempts_total';
    const now = {
      at: performance.now(),
      ingest: sum(samples, 'ankusa_ingest_requests_total'),
      delivered: sum(samples, attempts, (l) => l.outcome === 'delivered'),
      retry: sum(samples, attempts, (l) => l.outcome === 'retry'),
      dead: sum(samples, attempts, (l) => l.outcome !== 'delivered' && l.outcome !== 'retry'),
    };
    const prev = state.last;
    const secs = prev ? (now.at - prev.at) / 1000 : 0;
    for (const key of ['ingest', 'delivered', 'retry', 'dead']) {
      const card = document.querySelector(`[data-rate="${key}"]`);
      let rate = '–';
      if (prev && secs > 0 && now[key] >= prev[key]) {
        const r = (now[key] - prev[key]) / secs;
        rate = `${r < 10 ? r.toFixed(1) : Math.round(r).toLocaleString('en-US')}/s`;
      }
      card.querySelector('[data-field="rate"]').textContent = rate;
      card.querySelector('[data-field="total"]').textContent = `${num(now[key])} since the relay started`;
    }
    $('rates-window').textContent = prev ? `over the last ${secs.toFixed(1)} s` : 'from the next refresh on';
    state.last = now;
    const info = samples.find((s) => s.name === 'ankusa_build_info');
    return info ? info.labels.version : null;
  }

  // ---- the loop ---------------------------------------------------------------------

  async function refresh() {
    clearTimeout(state.timer);
    const gen = state.generation;
    try {
      const [tenants, sources, dead, jobs, metrics] = await Promise.all([
        pages('/v1/tenants?limit=1000'),
        pages('/v1/sources?limit=1000'),
        call('GET', `/v1/dead-letters?limit=${LIST_LIMIT}`),
        call('GET', `/v1/jobs?limit=${JOB_LIMIT}`),
        call('GET', '/metrics', true),
      ]);
      const held = tenants.filter((t) => t.counters.quarantined > 0);
      const lists = await Promise.all(held.map((t) => call('GET', `/v1/tenants/${enc(t.name)}/quarantine?limit=${LIST_LIMIT}`)));
      if (gen !== state.generation) return;
      renderTenants(tenants);
      renderSources(sources);
      renderDead(dead, tenants);
      renderQuarantine(lists.flatMap((l) => l.items), tenants);
      renderJobs(jobs.items);
      const version = renderRates(metrics);
      showError(null);
      $('login').hidden = true;
      $('main').hidden = false;
      $('refresh').hidden = false;
      $('signout').hidden = token() === null;
      $('status').textContent = `${location.host}${version ? ` · ankusa ${version}` : ''} · updated ${new Date().toLocaleTimeString('en-GB')} · every ${REFRESH_MS / 1000} s`;
      document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
    } catch (e) {
      if (gen !== state.generation) return;
      if (e.status === 401) {
        askToken(token() === null ? null : `The admin API refused the token: ${e.message}. Enter it again.`);
        return;
      }
      showError(`${e.message} (retrying every ${REFRESH_MS / 1000} s)`);
      $('status').textContent = `${location.host} · last refresh failed ${new Date().toLocaleTimeString('en-GB')}`;
    }
    if (gen === state.generation) state.timer = setTimeout(refresh, REFRESH_MS);
  }

  /** Runs one action, shows what it did (or why not), then refreshes. */
  async function act(btn, method, path, done) {
    btn.disabled = true;
    try {
      const r = await call(method, path);
      showError(null);
      notice(done(r));
    } catch (e) {
      if (e.status === 401) {
        askToken(`The admin API refused the token: ${e.message}. Enter it again.`);
        return;
      }
      showError(e.message);
    }
    refresh();
  }

  /** Stops refreshing, forgets the token and shows the form (with `why`, when there is one). */
  function askToken(why) {
    state.generation++;
    clearTimeout(state.timer);
    state.last = null;
    sessionStorage.removeItem(TOKEN_KEY);
    showError(null);
    $('notice').hidden = true;
    $('main').hidden = true;
    $('refresh').hidden = true;
    $('signout').hidden = true;
    $('status').textContent = `${location.host} · the admin API needs a token`;
    const le = $('login-error');
    le.textContent = why || '';
    le.hidden = !why;
    $('login').hidden = false;
    $('token').value = '';
    $('token').focus();
  }

  function start() {
    $('login').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('token').value.trim();
      if (!/^[\x21-\x7e]+$/.test(t)) {
        const le = $('login-error');
        le.textContent = 'A token is printable ASCII without spaces.';
        le.hidden = false;
        return;
      }
      sessionStorage.setItem(TOKEN_KEY, t);
      $('login').hidden = true;
      $('status').textContent = `${location.host} · connecting…`;
      state.generation++;
      refresh();
    });
    $('refresh').addEventListener('click', () => refresh());
    $('attempts-close').addEventListener('click', () => {
      $('attempts-section').hidden = true;
    });
    $('signout').addEventListener('click', () => askToken(null));
    // Without a stored token the first call goes without one: a relay with no
    // admin_token (loopback only) answers it, one with a token says 401 and
    // the form appears.
    refresh();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
