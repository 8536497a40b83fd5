// The makerfleet dashboard: plain JavaScript, no build step, no libraries.
// Everything it shows comes from the API with the key kept in this tab's
// sessionStorage, sent as an Authorization header (never in a URL).
'use strict';

const KEY = 'makerfleet.apiKey';
const FINAL = new Set(['solved', 'unsolved', 'no_consensus', 'failed', 'cancelled']);
const $ = (id) => document.getElementById(id);
// TAIL is how many of a job's most recent journal entries its page reads
// first; MAX_POINTS the most points a chart keeps.
const TAIL = 5000;
const MAX_POINTS = 5000;

// ---- the key and the API ----

function apiKey() { return sessionStorage.getItem(KEY) || ''; }

class APIError extends Error {
  constructor(status, detail) { super(detail || ('HTTP ' + status)); this.status = status; }
}

async function problemOf(resp) {
  let detail = '';
  try { const p = await resp.json(); detail = p.detail || p.title || ''; } catch (_) { /* not JSON */ }
  return new APIError(resp.status, detail || resp.status + ' ' + resp.statusText);
}

async function api(method, path, signal) {
  const resp = await fetch(path, {
    method, signal, cache: 'no-store',
    headers: { Authorization: 'Bearer ' + apiKey(), Accept: 'application/json' },
  });
  if (!resp.ok) throw await problemOf(resp);
  return resp.json();
}

// readSSE reads a Server-Sent Events stream with fetch and a
// ReadableStream (an EventSource cannot send the Authorization header) and
// calls onEvent(name, data, id) for each event. It returns when the stream
// ends or signal aborts.
async function readSSE(path, onEvent, signal) {
  const resp = await fetch(path, {
    signal, cache: 'no-store',
    headers: { Authorization: 'Bearer ' + apiKey(), Accept: 'text/event-stream' },
  });
  if (!resp.ok) throw await problemOf(resp);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let ev = { name: 'message', data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (ev.data.length) onEvent(ev.name, ev.data.join('\n'), ev.id);
        ev = { name: 'message', data: [], id: null };
        continue;
      }
      if (line[0] === ':') continue; // a comment: the server's ping
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let v = c < 0 ? '' : line.slice(c + 1);
      if (v[0] === ' ') v = v.slice(1);
      if (field === 'event') ev.name = v;
      else if (field === 'data') ev.data.push(v);
      else if (field === 'id') ev.id = v;
    }
  }
}

// ---- formatting and DOM helpers ----

const fmtInt = (n) => Number(n || 0).toLocaleString('en-US');
const fmtUSD = (n) => '$' + Number(n || 0).toFixed(n >= 1 ? 2 : 4);
const fmtPct = (x) => (100 * x).toFixed(x < 0.01 && x > 0 ? 2 : 1) + '%';
const fmtTime = (t) => (t ? new Date(t).toLocaleString() : '');

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement('tr');
  for (const c of cells) {
    const td = document.createElement('td');
    if (c instanceof Node) td.appendChild(c); else td.textContent = c === undefined ? '' : String(c);
    tr.appendChild(td);
  }
  return tr;
}

function show(section) {
  for (const id of ['login', 'jobs', 'job']) $(id).hidden = id !== section;
  $('forget').hidden = section === 'login';
}

// ---- charts: our own few lines of canvas ----

// niceStep is a round tick step covering span in about n ticks.
function niceStep(span, n) {
  const raw = span / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

// drawChart draws points [[x, y], ...] on canvas: kind 'dots' or 'steps';
// fx and fy format the axes' labels. The canvas's data-points attribute
// holds the number of points drawn.
function drawChart(canvas, pts, o) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600;
  const h = canvas.clientHeight || 200;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(h * dpr);
  canvas.dataset.points = String(pts.length);
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  g.font = '11px system-ui, sans-serif';
  const L = 56, R = 12, T = 10, B = 24;
  const pw = w - L - R, ph = h - T - B;
  g.strokeStyle = '#d9dde3';
  g.strokeRect(L, T, pw, ph);
  if (!pts.length) {
    g.fillStyle = '#6b7585';
    g.fillText('no data yet', L + 8, T + 16);
    return;
  }
  let x0 = Infinity, x1 = -Infinity, y1 = -Infinity, y0 = o.zero ? 0 : Infinity;
  for (const [x, y] of pts) {
    if (x < x0) x0 = x;
    if (x > x1) x1 = x;
    if (y > y1) y1 = y;
    if (y < y0) y0 = y;
  }
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) y1 = y0 + 1;
  const sy = niceStep(y1 - y0, 4);
  y1 = Math.floor(y1 / sy) * sy + sy; // headroom: no point on the frame
  y0 = Math.floor(y0 / sy) * sy;
  const X = (x) => L + ((x - x0) / (x1 - x0)) * pw;
  const Y = (y) => T + ph - ((y - y0) / (y1 - y0)) * ph;
  g.fillStyle = '#6b7585';
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  for (let y = y0; y <= y1 + sy / 2; y += sy) {
    g.strokeStyle = '#eef0f3';
    g.beginPath(); g.moveTo(L, Y(y)); g.lineTo(L + pw, Y(y)); g.stroke();
    g.fillText(o.fy ? o.fy(y) : String(+y.toPrecision(6)), L - 6, Y(y));
  }
  g.textAlign = 'center';
  g.textBaseline = 'top';
  const sx = niceStep(x1 - x0, Math.max(2, Math.floor(pw / 90)));
  for (let x = Math.ceil(x0 / sx) * sx; x <= x1; x += sx) {
    g.fillText(o.fx ? o.fx(x) : String(+x.toPrecision(6)), X(x), T + ph + 6);
  }
  g.fillStyle = o.color || '#2f6fde';
  g.strokeStyle = o.color || '#2f6fde';
  if (o.kind === 'steps') {
    // A running total: it holds its value until the next point.
    g.lineWidth = 1.5;
    g.beginPath();
    pts.forEach(([x, y], i) => {
      if (i) g.lineTo(X(x), Y(pts[i - 1][1]));
      else g.moveTo(X(x), Y(y));
      g.lineTo(X(x), Y(y));
    });
    g.stroke();
  } else {
    const r = pts.length > 5000 ? 1 : pts.length > 500 ? 2 : 3;
    for (const [x, y] of pts) g.fillRect(X(x) - r / 2, Y(y) - r / 2, r, r);
  }
}

// ---- the jobs list ----

let listTimer = null;
let listed = []; // the jobs on the list, newest first
let listMore = false; // more jobs than the pages read

async function showJobs() {
  show('jobs');
  await loadJobs();
  clearInterval(listTimer);
  // The timer re-reads the first page only, and not while the tab is hidden.
  listTimer = setInterval(() => { if (!$('jobs').hidden && !document.hidden) loadJobs(true); }, 10000);
}

// loadJobs reads the jobs list (up to 5 pages of 500; firstOnly: the first
// page, merged into the list shown) and shows it newest first.
async function loadJobs(firstOnly) {
  $('jobs-error').textContent = '';
  const jobs = [];
  let cursor = '';
  try {
    for (let page = 0; page < (firstOnly === true ? 1 : 5); page++) { // up to 2,500 jobs
      const l = await api('GET', '/v1/jobs?limit=500' + (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''));
      jobs.push(...(l.jobs || []));
      cursor = l.next_cursor || '';
      if (!cursor) break;
    }
  } catch (e) {
    return failed(e, 'jobs-error');
  }
  if (firstOnly === true) {
    const fresh = new Map(jobs.map((j) => [j.id, j]));
    const kept = listed.filter((j) => !fresh.has(j.id));
    if (!cursor) { // the first page is the whole list: a job not on it is gone
      listed = jobs;
    } else {
      listed = kept.concat(jobs);
    }
  } else {
    listed = jobs;
    listMore = cursor !== '';
  }
  // The API pages by id: newest first is by submission time.
  listed.sort((a, b) => (Date.parse(b.submitted_at) || 0) - (Date.parse(a.submitted_at) || 0));
  if (listed.length) $('who').textContent = 'tenant ' + listed[0].tenant;
  const body = $('jobs-table').tBodies[0];
  body.replaceChildren(...listed.map((j) => {
    const a = el('a', j.id);
    a.href = '#/jobs/' + encodeURIComponent(j.id);
    const tr = row([a, j.task, j.k, j.state + (j.control ? ' (' + j.control + ' asked)' : ''),
      fmtInt(j.steps) + ' / ' + fmtInt(j.total_steps), fmtPct(j.progress || 0), fmtUSD(j.spent_usd), fmtTime(j.submitted_at)]);
    tr.children[3].className = 'state-' + j.state;
    return tr;
  }));
  $('jobs-count').textContent = listed.length ? fmtInt(listed.length) + ' jobs' + (listMore ? ' (the first by id; more not shown)' : '') : 'no jobs yet';
}

// failed shows e in element id; a refused key asks for a key again.
function failed(e, id) {
  if (e.name === 'AbortError') return;
  if (e.status === 401) {
    sessionStorage.removeItem(KEY);
    $('login-error').textContent = e.message;
    show('login');
    return;
  }
  $(id).textContent = e.message;
}

// ---- a job's page ----

let view = null; // the job page on screen: its state and its stream

function newView(id) {
  return {
    id, abort: new AbortController(), status: null, lastSeq: 0, decided: 0,
    votes: 0, valid: 0, voteSteps: 0, counted: 0, redFlagged: 0, redFlags: new Map(),
    samples: [], margins: [], cost: [], escalations: [], renderPending: false,
  };
}

async function showJob(id) {
  show('job');
  if (view) view.abort.abort();
  view = newView(id);
  const v = view;
  $('job-id').textContent = id;
  $('job-task').textContent = '';
  $('job-error').textContent = '';
  $('control-result').textContent = '';
  $('esc-table').tBodies[0].replaceChildren();
  render(v);
  try {
    const j = await api('GET', '/v1/jobs/' + encodeURIComponent(id), v.abort.signal);
    $('job-task').textContent = j.task + ', k=' + j.k + ', submitted ' + fmtTime(j.submitted_at);
    $('who').textContent = 'tenant ' + j.tenant;
  } catch (e) {
    return failed(e, 'job-error');
  }
  follow(v);
}

// follow reads the job's step stream until the job ends, reconnecting
// after the last entry read when the stream breaks off.
async function follow(v) {
  let wait = 500;
  while (!v.abort.signal.aborted) {
    $('stream-state').textContent = 'live';
    try {
      // The stream starts with the journal's last TAIL entries (the status
      // has the whole job's totals), and a reconnect resumes after the last.
      await readSSE('/v1/jobs/' + encodeURIComponent(v.id) + '/steps' + (v.lastSeq ? '?after=' + v.lastSeq : '?tail=' + TAIL),
        (name, data, id) => onEvent(v, name, data, id), v.abort.signal);
      wait = 500;
    } catch (e) {
      if (v.abort.signal.aborted) return;
      if (e.status === 401 || e.status === 404) return failed(e, 'job-error');
      $('job-error').textContent = 'stream: ' + e.message + '; reconnecting';
    }
    if (v.status && FINAL.has(v.status.state)) {
      $('stream-state').textContent = 'ended (job finished)';
      return;
    }
    $('stream-state').textContent = 'reconnecting';
    await new Promise((r) => setTimeout(r, wait));
    wait = Math.min(wait * 2, 10000);
  }
}

function onEvent(v, name, data, id) {
  if (v !== view) return;
  let m;
  try { m = JSON.parse(data); } catch (_) { return; }
  if (name === 'status') {
    v.status = m;
    const t = Date.parse(m.updated_at);
    const last = v.cost[v.cost.length - 1];
    if (!last || last[0] !== t || last[1] !== (m.spent_usd || 0)) {
      if (!last || t >= last[0]) v.cost.push([t, m.spent_usd || 0]);
    }
  } else if (name === 'step') {
    if (id) v.lastSeq = Number(id);
    addStep(v, m);
  }
  scheduleRender(v);
}

function addStep(v, s) {
  if (s.type === 'decision' || s.type === 'arbiter') {
    v.decided++;
    pushPoint(v.samples, [s.step, s.samples], Math.max);
    v.counted += s.counted;
    v.redFlagged += s.red_flagged;
    for (const [k, n] of Object.entries(s.red_flags || {})) v.redFlags.set(k, (v.redFlags.get(k) || 0) + n);
    if (s.type === 'decision') {
      v.votes += s.votes;
      v.valid += s.valid;
      v.voteSteps++;
      pushPoint(v.margins, [s.step, s.lead], Math.min);
    }
  }
  if (s.type === 'escalation' || s.type === 'arbiter' || (s.type === 'decision' && s.rung && s.rung !== 'own_model')) {
    const what = s.type === 'escalation' ? 'escalated' : 'decided by ' + s.rung;
    v.escalations.push(s);
    if (v.escalations.length > MAX_POINTS) {
      v.escalations.shift();
      $('esc-table').tBodies[0].firstElementChild.remove();
    }
    $('esc-table').tBodies[0].appendChild(row([s.seq, fmtInt(s.step), what, s.rung || '', fmtTime(s.at)]));
  }
}

// pushPoint appends pt to a chart's points; past MAX_POINTS, neighbours
// are merged in pairs keeping the y pick chooses (the most telling one:
// the largest sample count, the smallest margin), so a long job's chart
// keeps at most MAX_POINTS points and its outliers.
function pushPoint(pts, pt, pick) {
  pts.push(pt);
  if (pts.length <= MAX_POINTS) return;
  let n = 0;
  for (let i = 0; i + 1 < pts.length; i += 2) {
    const a = pts[i], b = pts[i + 1];
    pts[n++] = pick(a[1], b[1]) === a[1] ? a : b;
  }
  if (pts.length % 2) pts[n++] = pts[pts.length - 1];
  pts.length = n;
}

// scheduleRender coalesces the redraws of a burst of events.
function scheduleRender(v) {
  if (v.renderPending) return;
  v.renderPending = true;
  setTimeout(() => { v.renderPending = false; if (v === view) render(v); }, 60);
}

function render(v) {
  const st = v.status;
  if (st) {
    const pt = $('progress-text');
    pt.textContent = 'step ' + fmtInt(st.steps) + ' / ' + fmtInt(st.total_steps) + ' (' + fmtPct(st.progress || 0) + ')';
    pt.dataset.steps = String(st.steps);
    pt.dataset.total = String(st.total_steps);
    $('progress-bar').value = st.progress || 0;
    $('job-state').textContent = st.state;
    $('job-state').className = 'state-' + st.state;
    // Why a running job waits on the fleet (provider_unavailable: the
    // model and the provider's answer), cleared by the next answer.
    const w = st.waiting;
    $('job-waiting').textContent = w ? w.reason + (w.model ? ' (model ' + w.model + ')' : '') +
      (w.error ? ': ' + w.error : '') + ' since ' + w.since : 'no';
    $('job-waiting').className = w ? 'state-waiting' : '';
    // Why it stopped (a finished or budget-exhausted job), or why it waits.
    $('job-reason').textContent = st.reason || '–';
    $('job-rung').textContent = st.rung || 'own_model';
    $('job-control').textContent = st.control ? st.control + ' asked' : 'none';
    $('job-coordinator').textContent = st.coordinator || 'none';
    $('job-samples').textContent = fmtInt(st.samples) + ' (' + fmtInt(st.votes) + ' votes, ' + fmtInt(st.red_flagged) + ' red-flagged)';
    $('cost-text').textContent = 'spent ' + fmtUSD(st.spent_usd) + (st.reserved_usd ? ', reserved ' + fmtUSD(st.reserved_usd) : '') +
      (st.finish_cost_usd ? ', to finish ' + fmtUSD(st.finish_cost_usd) : '') + (st.spent_usd ? '' : ' (no pricing given: no cost)');
  }
  const ph = $('phat');
  ph.dataset.steps = String(v.voteSteps);
  ph.textContent = v.valid ? (v.votes / v.valid).toFixed(4) : '–';
  $('phat-detail').textContent = fmtInt(v.votes) + ' winner votes of ' + fmtInt(v.valid) + ' valid votes over ' +
    fmtInt(v.voteSteps) + ' steps decided by vote (of the entries streamed)';
  $('redflag-rate').textContent = v.counted ? fmtPct(v.redFlagged / v.counted) : '–';
  $('redflag-detail').textContent = fmtInt(v.redFlagged) + ' red-flagged of ' + fmtInt(v.counted) + ' counted samples over ' +
    fmtInt(v.decided) + ' decided steps streamed' + (st ? '; the whole job: ' + fmtInt(st.red_flagged) + ' of ' + fmtInt(st.samples) + ' samples' : '');
  $('redflag-table').tBodies[0].replaceChildren(...[...v.redFlags].sort((a, b) => b[1] - a[1])
    .map(([k, n]) => row([k, fmtInt(n), fmtPct(n / Math.max(1, v.redFlagged))])));
  $('esc-none').hidden = v.escalations.length > 0;
  drawChart($('chart-samples'), v.samples, { kind: 'dots', zero: true, fx: fmtInt, fy: fmtInt });
  drawChart($('chart-margin'), v.margins, { kind: 'dots', zero: true, fx: fmtInt, fy: fmtInt, color: '#15803d' });
  const t0 = v.cost.length ? v.cost[0][0] : 0;
  drawChart($('chart-cost'), v.cost.map(([t, c]) => [(t - t0) / 1000, c]), {
    kind: 'steps', zero: true, fx: (s) => s.toFixed(0) + ' s', fy: (c) => '$' + (+c.toPrecision(3)), color: '#c2410c',
  });
}

async function control(action) {
  const v = view;
  if (!v) return;
  if (action === 'cancel' && !window.confirm('Cancel job ' + v.id + ' for good?')) return;
  $('control-result').textContent = action + '…';
  try {
    const r = await api('POST', '/v1/jobs/' + encodeURIComponent(v.id) + '/' + action);
    $('control-result').textContent = action + ': ' + (r.changed ? 'asked' : 'already so') + ' (state ' + r.state + ')';
  } catch (e) {
    failed(e, 'control-result');
  }
}

// ---- routing ----

function route() {
  if (!apiKey()) {
    show('login');
    $('key-input').focus();
    return;
  }
  const m = location.hash.match(/^#\/jobs\/([A-Za-z0-9_-]+)$/);
  if (m) {
    showJob(decodeURIComponent(m[1]));
  } else {
    if (view) { view.abort.abort(); view = null; }
    showJobs();
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('key-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const key = $('key-input').value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY, key);
    $('key-input').value = '';
    $('login-error').textContent = '';
    try {
      await api('GET', '/v1/jobs?limit=1');
    } catch (e) {
      return failed(e, 'login-error');
    }
    route();
  });
  $('forget').addEventListener('click', () => {
    sessionStorage.removeItem(KEY);
    if (view) { view.abort.abort(); view = null; }
    $('who').textContent = '';
    route();
  });
  $('jobs-refresh').addEventListener('click', loadJobs);
  $('btn-pause').addEventListener('click', () => control('pause'));
  $('btn-resume').addEventListener('click', () => control('resume'));
  $('btn-cancel').addEventListener('click', () => control('cancel'));
  window.addEventListener('hashchange', route);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && !$('jobs').hidden && apiKey()) loadJobs(true);
  });
  window.addEventListener('resize', () => { if (view) render(view); });
  route();
});
