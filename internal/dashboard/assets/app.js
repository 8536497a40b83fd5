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

async function api(method, path, signal, body) {
  const headers = { Authorization: 'Bearer ' + apiKey(), Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path, {
    method, signal, cache: 'no-store', headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!resp.ok) throw await problemOf(resp);
  return resp.json();
}

// download reads path with the key in the Authorization header and offers
// it as a file from a Blob: the key never goes into a URL. It returns the
// link made (kept on the page, so it can be saved again).
async function download(path, name) {
  const resp = await fetch(path, { cache: 'no-store', headers: { Authorization: 'Bearer ' + apiKey() } });
  if (!resp.ok) throw await problemOf(resp);
  const blob = await resp.blob();
  const a = el('a', 'save ' + name + ' (' + fmtInt(blob.size) + ' B)');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  a.dataset.bytes = String(blob.size);
  a.click();
  return a;
}

// me is what the key is (GET /v1/whoami): its tenant, admin, approver.
let me = null;

async function whoami() {
  me = await api('GET', '/v1/whoami');
  $('who').textContent = 'tenant ' + me.tenant + (me.admin ? ' · admin' : '') + (me.approver ? ' · approver' : '') +
    ' · key ' + (me.key_name || me.key_prefix);
  $('nav-dlq').hidden = !me.admin;
  $('nav-fleet').hidden = !me.admin;
  $('f-tenant-label').hidden = !me.admin;
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
const fmtRate = (r) => (r >= 10 ? r.toFixed(0) : r >= 1 ? r.toFixed(1) : r.toFixed(2)) + ' steps/s';

// fmtDur is seconds as "1h 02m", "3m 05s" or "12s".
function fmtDur(sec) {
  if (!isFinite(sec) || sec < 0) return '–';
  sec = Math.round(sec);
  const h = Math.floor(sec / 3600), m = Math.floor((sec % 3600) / 60), s = sec % 60;
  if (h) return h + 'h ' + String(m).padStart(2, '0') + 'm';
  if (m) return m + 'm ' + String(s).padStart(2, '0') + 's';
  return s + 's';
}

// query is a hash's ?a=b&c=d part as a URLSearchParams.
function hashQuery() {
  const i = location.hash.indexOf('?');
  return new URLSearchParams(i < 0 ? '' : location.hash.slice(i + 1));
}

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

const SECTIONS = ['login', 'jobs', 'job', 'batches', 'batch', 'dlq', 'fleet'];

function show(section) {
  for (const id of SECTIONS) $(id).hidden = id !== section;
  $('forget').hidden = section === 'login';
  const nav = { jobs: 'nav-jobs', job: 'nav-jobs', batches: 'nav-batches', batch: 'nav-batches', dlq: 'nav-dlq', fleet: 'nav-fleet' }[section];
  for (const a of document.querySelectorAll('nav a')) {
    if (a.id === nav) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
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

const PAGE = 50; // jobs shown a page
let listTimer = null;
let listed = []; // the jobs read, filtered, newest first
let listMore = false; // more jobs than the pages read
let listPage = 0;

// jobsFilter is the list's filter, from the page's hash
// (#/jobs?state=&task=&tenant=).
function jobsFilter() {
  const q = hashQuery();
  return { state: q.get('state') || '', task: q.get('task') || '', tenant: q.get('tenant') || '' };
}

async function showJobs() {
  show('jobs');
  const f = jobsFilter();
  $('f-state').value = f.state;
  $('f-task').value = f.task;
  $('f-tenant').value = f.tenant;
  listPage = 0;
  await loadJobs();
  clearInterval(listTimer);
  // The timer re-reads the list, and not while the tab is hidden.
  listTimer = setInterval(() => { if (!$('jobs').hidden && !document.hidden) loadJobs(); }, 10000);
}

// loadJobs reads the jobs list (?state= and ?tenant= by the API, up to 5
// pages of 500), keeps those of the task asked, and shows a page of them,
// newest first.
async function loadJobs() {
  $('jobs-error').textContent = '';
  const f = jobsFilter();
  const jobs = [];
  let cursor = '';
  try {
    for (let page = 0; page < 5; page++) { // up to 2,500 jobs
      const q = new URLSearchParams({ limit: '500' });
      if (f.state) q.set('state', f.state);
      if (f.tenant) q.set('tenant', f.tenant);
      if (cursor) q.set('cursor', cursor);
      const l = await api('GET', '/v1/jobs?' + q);
      jobs.push(...(l.jobs || []));
      cursor = l.next_cursor || '';
      if (!cursor) break;
    }
  } catch (e) {
    return failed(e, 'jobs-error');
  }
  listMore = cursor !== '';
  const tasks = [...new Set(jobs.map((j) => j.task))].sort();
  $('f-task-list').replaceChildren(...tasks.map((t) => { const o = el('option'); o.value = t; return o; }));
  listed = f.task ? jobs.filter((j) => j.task === f.task || j.task + '@' + (j.task_version || '') === f.task) : jobs;
  // The API pages by id: newest first is by submission time.
  listed.sort((a, b) => (Date.parse(b.submitted_at) || 0) - (Date.parse(a.submitted_at) || 0));
  renderJobs();
}

// jobSpeed is a job's mean speed in steps/s, from its submission to its
// figures' time.
function jobSpeed(j) {
  const sec = (Date.parse(j.updated_at) - Date.parse(j.submitted_at)) / 1000;
  return j.steps > 0 && sec > 0 ? j.steps / sec : 0;
}

function jobLink(j) {
  const a = el('a', j.id);
  a.href = '#/jobs/' + encodeURIComponent(j.id) + (me && j.tenant !== me.tenant ? '?tenant=' + encodeURIComponent(j.tenant) : '');
  return a;
}

function renderJobs() {
  const f = jobsFilter();
  const pages = Math.max(1, Math.ceil(listed.length / PAGE));
  listPage = Math.min(listPage, pages - 1);
  const shown = listed.slice(listPage * PAGE, (listPage + 1) * PAGE);
  $('jobs-table').classList.toggle('hide-tenant', f.tenant !== '*');
  $('jobs-table').tBodies[0].replaceChildren(...shown.map((j) => {
    const sp = jobSpeed(j);
    const tr = row([jobLink(j), j.tenant, j.task + (j.task_version ? '@' + j.task_version : ''), j.k,
      j.state + (j.control ? ' (' + j.control + ' asked)' : ''),
      fmtInt(j.steps) + ' / ' + fmtInt(j.total_steps), fmtPct(j.progress || 0), sp ? fmtRate(sp) : '–',
      fmtUSD(j.spent_usd), fmtTime(j.submitted_at)]);
    tr.children[1].className = 'col-tenant';
    const st = tr.children[4];
    st.className = 'state-' + j.state;
    st.dataset.state = j.state;
    const why = j.reason || (j.waiting ? j.waiting.reason + (j.waiting.error ? ': ' + j.waiting.error : '') : '');
    if (why) st.title = why;
    return tr;
  }));
  $('jobs-prev').disabled = listPage === 0;
  $('jobs-next').disabled = listPage >= pages - 1;
  $('jobs-count').textContent = listed.length
    ? 'jobs ' + fmtInt(listPage * PAGE + 1) + '–' + fmtInt(listPage * PAGE + shown.length) + ' of ' + fmtInt(listed.length) +
      (listMore ? ' (the first 2,500 read; more not shown)' : '')
    : 'no jobs' + (f.state || f.task ? ' match the filter' : ' yet');
}

// failed shows e in element id; a refused key asks for a key again.
function failed(e, id) {
  if (e.name === 'AbortError') return;
  if (e.status === 401) {
    sessionStorage.removeItem(KEY);
    me = null;
    $('login-error').textContent = e.message;
    show('login');
    return;
  }
  $(id).textContent = e.message;
}

// ---- a job's page ----

let view = null; // the job page on screen: its state and its stream

function newView(id, tenant) {
  return {
    id, tenant, abort: new AbortController(), job: null, status: null, report: null, lastSeq: 0, decided: 0,
    votes: 0, valid: 0, voteSteps: 0, counted: 0, redFlagged: 0, redFlags: new Map(),
    samples: [], margins: [], cost: [], ks: [], usd: 0, unverified: 0, kMin: 0, kMax: 0,
    recent: [], escalations: [], renderPending: false,
  };
}

// jobPath is a path of the job's routes, with ?tenant= for another
// tenant's job (an admin key's).
function jobPath(v, sub, q) {
  const p = new URLSearchParams(q || {});
  if (v.tenant) p.set('tenant', v.tenant);
  const qs = p.toString();
  return '/v1/jobs/' + encodeURIComponent(v.id) + (sub || '') + (qs ? '?' + qs : '');
}

async function showJob(id, tenant) {
  show('job');
  if (view) view.abort.abort();
  view = newView(id, tenant);
  const v = view;
  $('job-id').textContent = id;
  $('job-task').textContent = '';
  $('job-error').textContent = '';
  $('control-result').textContent = '';
  $('job-batch').hidden = true;
  $('esc-table').tBodies[0].replaceChildren();
  render(v);
  try {
    const j = await api('GET', jobPath(v), v.abort.signal);
    v.job = j;
    if (j.batch_id) {
      const a = el('a', j.batch_id);
      a.href = '#/batches/' + encodeURIComponent(j.batch_id);
      $('job-batch').replaceChildren('line ' + j.batch_line + ' of batch ', a);
      $('job-batch').hidden = false;
    }
  } catch (e) {
    return failed(e, 'job-error');
  }
  render(v);
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
      await readSSE(jobPath(v, '/steps', v.lastSeq ? { after: v.lastSeq } : { tail: TAIL }),
        (name, data, id) => onEvent(v, name, data, id), v.abort.signal);
      wait = 500;
    } catch (e) {
      if (v.abort.signal.aborted) return;
      if (e.status === 401 || e.status === 404) return failed(e, 'job-error');
      $('job-error').textContent = 'stream: ' + e.message + '; reconnecting';
    }
    if (v.status && FINAL.has(v.status.state)) {
      $('stream-state').textContent = 'ended (job finished)';
      readReport(v);
      return;
    }
    $('stream-state').textContent = 'reconnecting';
    await new Promise((r) => setTimeout(r, wait));
    wait = Math.min(wait * 2, 10000);
  }
}

// readReport reads a finished job's report: when it ran, and its reason
// when the status gave none.
async function readReport(v) {
  try {
    v.report = await api('GET', jobPath(v, '/result'), v.abort.signal);
  } catch (e) {
    if (e.status !== 409) failed(e, 'job-error');
    return;
  }
  scheduleRender(v);
}

function onEvent(v, name, data, id) {
  if (v !== view) return;
  let m;
  try { m = JSON.parse(data); } catch (_) { return; }
  if (name === 'status') {
    v.status = m;
  } else if (name === 'step') {
    if (id) v.lastSeq = Number(id);
    addStep(v, m);
  }
  scheduleRender(v);
}

function addStep(v, s) {
  // Every entry's work is priced: added up, the job's cost from its
  // first entry streamed.
  v.usd += s.usd || 0;
  v.unverified += s.unverified_usd || 0;
  if (s.type === 'decision' || s.type === 'arbiter') {
    v.decided++;
    pushPoint(v.samples, [s.step, s.samples], Math.max);
    pushPoint(v.cost, [s.step, v.usd + v.unverified], Math.max);
    if (s.k) {
      pushPoint(v.ks, [s.step, s.k], Math.max);
      v.kMin = v.kMin ? Math.min(v.kMin, s.k) : s.k;
      v.kMax = Math.max(v.kMax, s.k);
    }
    v.recent.push(Date.parse(s.at));
    if (v.recent.length > 200) v.recent.shift();
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

// reasonOf says why a job stopped or waits: its status's reason, its
// waiting, its report's; a finished job always says something.
function reasonOf(v, st) {
  if (st.reason) return st.reason;
  const w = st.waiting;
  if (w) return w.reason + (w.model ? ' (model ' + w.model + ')' : '') + (w.error ? ': ' + w.error : '');
  if (v.report && v.report.reason) return v.report.reason;
  if (v.job && v.job.reason) return v.job.reason;
  switch (st.state) {
    case 'solved': return 'solved: every step decided';
    case 'cancelled': return 'cancelled';
    case 'paused': return 'paused (asked)';
    case 'queued': return 'waiting for a coordinator';
    case 'running': return st.control ? st.control + ' asked, obeyed at the next step' : 'running';
    default: return FINAL.has(st.state) ? st.state + ' (no reason recorded)' : '–';
  }
}

// timing is the job's elapsed time, its speed (steps/s) and, while it
// runs, the time left at that speed.
function timing(v, st) {
  const rep = v.report;
  const start = Date.parse((rep && rep.started_at) || (v.job && v.job.submitted_at) || '');
  const final = FINAL.has(st.state);
  const end = final ? Date.parse((rep && rep.finished_at) || st.updated_at) : Date.now();
  const elapsed = (end - start) / 1000;
  let speed = 0;
  if (!final && v.recent.length >= 2) { // the recent steps' pace
    const n = v.recent.length;
    const sec = (v.recent[n - 1] - v.recent[0]) / 1000;
    if (sec > 0) speed = (n - 1) / sec;
  }
  if (!speed && elapsed > 0 && st.steps > 0) speed = st.steps / elapsed;
  const left = st.total_steps - st.steps;
  const eta = !final && st.state === 'running' && speed > 0 && left > 0 ? left / speed : NaN;
  return { elapsed, speed, eta };
}

// controls shows only the buttons the job's state allows.
function controls(st) {
  const s = st ? st.state : '';
  const live = s === 'queued' || s === 'running';
  $('btn-pause').hidden = !(live && st.control !== 'pause' && st.control !== 'cancel');
  $('btn-resume').hidden = !(s === 'paused' || s === 'budget_exhausted');
  $('btn-cancel').hidden = !s || FINAL.has(s) || st.control === 'cancel';
}

function render(v) {
  const st = v.status || (v.job ? v.job : null);
  if (v.job) {
    const j = v.job;
    const k = v.kMax && v.kMin !== v.kMax ? 'adaptive k ' + v.kMax + '→' + v.kMin : 'k=' + (v.kMax || j.k);
    $('job-task').textContent = (v.tenant ? v.tenant + '/' : '') + j.task + ', ' + k + ', submitted ' + fmtTime(j.submitted_at);
  }
  controls(st);
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
    $('job-reason').textContent = reasonOf(v, st);
    const tm = timing(v, st);
    $('job-speed').textContent = tm.speed ? fmtRate(tm.speed) : '–';
    $('job-elapsed').textContent = fmtDur(tm.elapsed);
    $('job-eta').textContent = isNaN(tm.eta) ? (FINAL.has(st.state) ? 'finished' : '–') : fmtDur(tm.eta);
    $('job-k').textContent = v.kMax ? (v.kMin === v.kMax ? String(v.kMax) : v.kMax + ' down to ' + v.kMin + ' (adaptive)') :
      (v.job ? String(v.job.k) : '–');
    $('job-rung').textContent = st.rung || 'own_model';
    $('job-control').textContent = st.control ? st.control + ' asked' : 'none';
    $('job-coordinator').textContent = st.coordinator || 'none';
    $('job-samples').textContent = fmtInt(st.samples) + ' (' + fmtInt(st.votes) + ' votes, ' + fmtInt(st.red_flagged) + ' red-flagged)';
    $('cost-text').textContent = 'spent ' + fmtUSD(st.spent_usd) + (st.reserved_usd ? ', reserved ' + fmtUSD(st.reserved_usd) : '') +
      (st.finish_cost_usd ? ', to finish ' + fmtUSD(st.finish_cost_usd) : '') + '; the journal streamed: ' + fmtUSD(v.usd) +
      ' at the fleet\'s prices' + (v.unverified ? ' + ' + fmtUSD(v.unverified) + ' at the job\'s own pricing (unverified)' : '');
  }
  const ph = $('phat');
  ph.dataset.steps = String(v.voteSteps);
  ph.textContent = v.valid ? (v.votes / v.valid).toFixed(4) : '–';
  $('phat-detail').textContent = fmtInt(v.votes) + ' winner votes of ' + fmtInt(v.valid) + ' valid votes over ' +
    fmtInt(v.voteSteps) + ' steps decided by vote (of the entries streamed)';
  $('redflag-rate').textContent = v.counted ? fmtPct(v.redFlagged / v.counted) : '–';
  $('redflag-detail').textContent = fmtInt(v.redFlagged) + ' red-flagged of ' + fmtInt(v.counted) + ' counted samples over ' +
    fmtInt(v.decided) + ' decided steps streamed' + (st && st.samples !== undefined ? '; the whole job: ' + fmtInt(st.red_flagged) + ' of ' + fmtInt(st.samples) + ' samples' : '');
  $('redflag-table').tBodies[0].replaceChildren(...[...v.redFlags].sort((a, b) => b[1] - a[1])
    .map(([k, n]) => row([k, fmtInt(n), fmtPct(n / Math.max(1, v.redFlagged))])));
  $('esc-none').hidden = v.escalations.length > 0;
  drawChart($('chart-samples'), v.samples, { kind: 'dots', zero: true, fx: fmtInt, fy: fmtInt });
  drawChart($('chart-margin'), v.margins, { kind: 'dots', zero: true, fx: fmtInt, fy: fmtInt, color: '#15803d' });
  drawChart($('chart-cost'), v.cost, {
    kind: 'steps', zero: true, fx: fmtInt, fy: (c) => '$' + (+c.toPrecision(3)), color: '#c2410c',
  });
  drawChart($('chart-k'), v.ks, { kind: 'steps', zero: true, fx: fmtInt, fy: fmtInt, color: '#7c3aed' });
}

async function control(action) {
  const v = view;
  if (!v) return;
  if (action === 'cancel' && !window.confirm('Cancel job ' + v.id + ' for good?')) return;
  $('control-result').textContent = action + '…';
  try {
    const r = await api('POST', jobPath(v, '/' + action));
    $('control-result').textContent = action + ': ' + (r.changed ? 'asked' : 'already so') + ' (state ' + r.state + ')';
  } catch (e) {
    failed(e, 'control-result');
  }
}

// ---- batches ----

const BATCH_LIVE = new Set(['queued', 'running']);

// batchDone is the share of a batch's lines that ended (completed, failed
// or cancelled).
function batchDone(b) {
  const c = b.counts || {};
  return c.total ? Math.min(1, ((c.completed || 0) + (c.failed || 0) + (c.cancelled || 0)) / c.total) : 0;
}

async function showBatches() {
  show('batches');
  $('batches-error').textContent = '';
  let l;
  try {
    l = await api('GET', '/v1/batches');
  } catch (e) {
    return failed(e, 'batches-error');
  }
  const bs = (l.batches || []).sort((a, b) => (Date.parse(b.created_at) || 0) - (Date.parse(a.created_at) || 0));
  $('batches-table').tBodies[0].replaceChildren(...bs.map((b) => {
    const a = el('a', b.id);
    a.href = '#/batches/' + encodeURIComponent(b.id);
    const c = b.counts || {};
    const tr = row([a, b.state, fmtInt(c.total), fmtInt(c.completed), fmtInt(c.failed), fmtInt(c.cancelled),
      fmtPct(batchDone(b)), fmtTime(b.created_at)]);
    tr.children[1].className = 'state-' + b.state;
    return tr;
  }));
  $('batches-count').textContent = bs.length ? fmtInt(bs.length) + ' batches, newest first' : 'no batches yet';
}

let batchTimer = null;
let batchShown = '';

async function showBatch(id) {
  show('batch');
  if (batchShown !== id) {
    batchShown = id;
    $('batch-files').replaceChildren();
  }
  $('batch-id').textContent = id;
  $('batch-error').textContent = '';
  let b;
  try {
    b = await api('GET', '/v1/batches/' + encodeURIComponent(id));
  } catch (e) {
    return failed(e, 'batch-error');
  }
  if (location.hash !== '#/batches/' + encodeURIComponent(id)) return;
  const c = b.counts || {};
  $('batch-state').textContent = b.state;
  $('batch-state').className = 'state-' + b.state;
  const done = batchDone(b);
  $('batch-progress').value = done;
  const pt = $('batch-progress-text');
  pt.textContent = fmtPct(done) + ' of ' + fmtInt(c.total) + ' lines ended';
  pt.dataset.state = b.state;
  $('batch-times').textContent = 'created ' + fmtTime(b.created_at) + (b.completed_at ? ', ended ' + fmtTime(b.completed_at) : '') +
    '; at most ' + fmtInt(b.window) + ' jobs unfinished at once, priority ' + b.priority;
  const counts = [['total', c.total], ['valid', c.valid], ['invalid', c.invalid], ['submitted', c.submitted],
    ['completed', c.completed], ['failed', c.failed], ['cancelled', c.cancelled]];
  $('batch-counts').tBodies[0].replaceChildren(...counts.map(([k, n]) => {
    const tr = row([k, fmtInt(n)]);
    tr.dataset.count = k;
    tr.children[1].dataset.n = String(n || 0);
    return tr;
  }));
  $('batch-errors').disabled = !c.invalid && !c.failed;
  $('batch-cancel').hidden = !BATCH_LIVE.has(b.state);
  clearTimeout(batchTimer);
  if (BATCH_LIVE.has(b.state) || b.state === 'cancelling') {
    batchTimer = setTimeout(() => { if (!$('batch').hidden && batchShown === id) showBatch(id); }, 2000);
  }
}

async function batchFile(which) {
  const id = batchShown;
  $('batch-error').textContent = '';
  try {
    const a = await download('/v1/batches/' + encodeURIComponent(id) + '/' + which, id + '-' + which + '.jsonl');
    a.id = 'batch-' + which + '-link';
    const old = $(a.id);
    if (old) { URL.revokeObjectURL(old.href); old.remove(); }
    $('batch-files').append(a, ' ');
  } catch (e) {
    failed(e, 'batch-error');
  }
}

async function cancelBatch() {
  const id = batchShown;
  if (!window.confirm('Cancel batch ' + id + '? Its unfinished jobs are cancelled.')) return;
  try {
    await api('POST', '/v1/batches/' + encodeURIComponent(id) + '/cancel');
  } catch (e) {
    return failed(e, 'batch-error');
  }
  showBatch(id);
}

// ---- dead letters (admin) ----

let letters = []; // the dead letters listed

// letterJob is a dead letter's tenant/job, from its original subject
// (<ns>.v1.sample.<tenant>.<job>).
function letterJob(d) {
  const p = (d.subject || '').split('.');
  return p.length >= 2 ? p[p.length - 2] + ' / ' + p[p.length - 1] : d.subject;
}

function payloadKept(d) {
  const size = d.size || (d.data ? atob(d.data).length : 0);
  return d.truncated ? 'reference: ' + fmtInt(size) + ' B, first ' + fmtInt(atob(d.data || '').length) + ' B kept' : fmtInt(size) + ' B';
}

async function showDLQ() {
  show('dlq');
  $('dlq-error').textContent = '';
  if (!me || !me.admin) {
    $('dlq-table').tBodies[0].replaceChildren();
    $('dlq-error').textContent = 'dead letters are shown to admin keys only';
    return;
  }
  const q = new URLSearchParams({ limit: '1000' });
  const t = $('dlq-tenant').value.trim(), j = $('dlq-job').value.trim();
  if (t) q.set('tenant', t);
  if (j) q.set('job', j);
  let l;
  try {
    l = await api('GET', '/v1/dlq?' + q);
  } catch (e) {
    return failed(e, 'dlq-error');
  }
  letters = l.dead_letters || [];
  $('dlq-table').tBodies[0].replaceChildren(...letters.map((d) => {
    const box = el('input');
    box.type = 'checkbox';
    box.value = String(d.dlq_seq);
    box.addEventListener('change', dlqSelection);
    const a = el('a', String(d.dlq_seq));
    a.href = '#/dlq';
    a.addEventListener('click', (ev) => { ev.preventDefault(); inspectLetter(d); });
    const tr = row([box, a, letterJob(d), d.reason, fmtInt(d.deliveries), payloadKept(d), fmtTime(d.at)]);
    tr.dataset.seq = String(d.dlq_seq);
    return tr;
  }));
  $('dlq-count').textContent = letters.length ? fmtInt(letters.length) + ' dead letters, oldest first' : 'no dead letters';
  $('dlq-inspect').hidden = true;
  dlqSelection();
}

function dlqSelection() {
  $('dlq-replay').disabled = !document.querySelector('#dlq-table tbody input:checked');
}

function inspectLetter(d) {
  for (const tr of $('dlq-table').tBodies[0].rows) tr.classList.toggle('selected', tr.dataset.seq === String(d.dlq_seq));
  $('dlq-i-seq').textContent = String(d.dlq_seq);
  const facts = [['why', d.reason], ['original', d.subject + ' (stream ' + d.stream + ', seq ' + d.seq + ')'],
    ['consumer', d.consumer], ['deliveries', fmtInt(d.deliveries)], ['payload', payloadKept(d)],
    ['sha256', d.sha256 || ''], ['at', fmtTime(d.at)]];
  $('dlq-i-facts').replaceChildren(...facts.flatMap(([k, val]) => [el('dt', k), el('dd', val)]));
  let text = '';
  try { text = new TextDecoder().decode(Uint8Array.from(atob(d.data || ''), (c) => c.charCodeAt(0))); } catch (_) { text = ''; }
  try { text = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* not JSON: as it is */ }
  $('dlq-i-data').textContent = (d.truncated ? '(the first ' + fmtInt(atob(d.data || '').length) + ' bytes only)\n' : '') + text;
  $('dlq-inspect').hidden = false;
}

async function replaySelected() {
  const seqs = [...document.querySelectorAll('#dlq-table tbody input:checked')].map((b) => Number(b.value));
  if (!seqs.length || !window.confirm('Replay ' + seqs.length + ' dead letter(s) to their original subjects?')) return;
  $('dlq-result').textContent = 'replaying…';
  let r;
  try {
    r = await api('POST', '/v1/dlq/replay', undefined, { seqs });
  } catch (e) {
    $('dlq-result').textContent = '';
    return failed(e, 'dlq-error');
  }
  const parts = [fmtInt(r.replayed.length) + ' replayed'];
  for (const x of r.refused) parts.push('refused ' + x.seq + ': ' + x.reason);
  for (const x of r.failed) parts.push('failed ' + x.seq + ': ' + x.reason);
  await showDLQ();
  $('dlq-result').textContent = parts.join('; ');
  $('dlq-result').dataset.replayed = String(r.replayed.length);
}

// ---- the fleet (admin) ----

// cellText is a value of the fleet view as a table cell.
function cellText(x) {
  if (x === null || x === undefined) return '';
  if (typeof x === 'number') return Number.isInteger(x) ? fmtInt(x) : String(+x.toPrecision(4));
  if (typeof x === 'object') {
    if (Array.isArray(x)) return x.map(cellText).join(', ');
    return Object.entries(x).map(([k, v]) => k + ' ' + cellText(v)).join(', ');
  }
  return String(x);
}

// fleetTable shows a list of objects as a table, a column per field.
function fleetTable(name, items) {
  // A record's version and kind are the wire's, not the reader's.
  const cols = [...new Set(items.flatMap((o) => (o && typeof o === 'object' ? Object.keys(o) : ['value'])))]
    .filter((c) => c !== 'version' && c !== 'kind');
  const t = el('table', null, 'fleet-table');
  t.id = 'fleet-' + name;
  const hr = document.createElement('tr');
  for (const c of cols) hr.appendChild(el('th', c.replace(/_/g, ' ')));
  t.createTHead().appendChild(hr);
  const body = t.createTBody();
  for (const o of items) {
    body.appendChild(row(cols.map((c) => {
      const x = o && typeof o === 'object' ? o[c] : o;
      return typeof x === 'string' && /^\d{4}-\d\d-\d\dT/.test(x) ? fmtTime(x) : cellText(x);
    })));
  }
  const wrap = el('div', null, 'scroll');
  wrap.appendChild(t);
  return wrap;
}

async function showFleet() {
  show('fleet');
  $('fleet-error').textContent = '';
  const out = $('fleet-body');
  if (!me || !me.admin) {
    out.replaceChildren();
    $('fleet-error').textContent = 'the fleet view is shown to admin keys only';
    return;
  }
  let f;
  try {
    f = await api('GET', '/v1/fleet');
  } catch (e) {
    if (e.status === 404) {
      out.replaceChildren(el('p', 'The fleet view is not available on this server (GET /v1/fleet answers 404: a release without it).', 'muted'));
      out.dataset.state = 'unavailable';
      return;
    }
    return failed(e, 'fleet-error');
  }
  // Each list (voters, coordinators, queues, tenants, …) a table, each
  // figure a fact: the page follows the view's fields as the server sends them.
  const facts = el('dl', null, 'facts');
  const parts = [];
  for (const [k, val] of Object.entries(f)) {
    if (Array.isArray(val) && val.length && typeof val[0] === 'object') {
      parts.push(el('h2', k.replace(/_/g, ' ') + ' (' + val.length + ')'), fleetTable(k, val));
    } else if (val && typeof val === 'object' && !Array.isArray(val) && Object.values(val).some((x) => x && typeof x === 'object')) {
      parts.push(el('h2', k.replace(/_/g, ' ')), fleetTable(k, Object.entries(val).map(([n, o]) => Object.assign({ name: n }, o))));
    } else if (val && typeof val === 'object' && !Array.isArray(val)) {
      // A group of figures (the totals): a fact each.
      const dl = el('dl', null, 'facts');
      dl.id = 'fleet-' + k;
      for (const [n, x] of Object.entries(val)) dl.append(el('dt', n.replace(/_/g, ' ')), el('dd', cellText(x)));
      parts.unshift(el('h2', k.replace(/_/g, ' ')), dl);
    } else {
      facts.append(el('dt', k.replace(/_/g, ' ')), el('dd', k === 'at' ? fmtTime(val) : cellText(val)));
    }
  }
  out.replaceChildren(facts, ...parts);
  out.dataset.state = 'shown';
  out.dataset.voters = String((f.voters || []).length);
}

// ---- routing ----

async function route() {
  if (!apiKey()) {
    show('login');
    $('key-input').focus();
    return;
  }
  if (!me) {
    try {
      await whoami();
    } catch (e) {
      return failed(e, 'login-error');
    }
  }
  const h = location.hash;
  const path = h.split('?')[0];
  if (view && !/^#\/jobs\/[^/]+$/.test(path)) { view.abort.abort(); view = null; }
  let m;
  if ((m = path.match(/^#\/jobs\/([A-Za-z0-9_-]+)$/))) {
    showJob(decodeURIComponent(m[1]), hashQuery().get('tenant') || '');
  } else if ((m = path.match(/^#\/batches\/([A-Za-z0-9_-]+)$/))) {
    showBatch(decodeURIComponent(m[1]));
  } else if (path === '#/batches') {
    showBatches();
  } else if (path === '#/dlq') {
    showDLQ();
  } else if (path === '#/fleet') {
    showFleet();
  } else {
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
    me = null;
    route();
  });
  $('forget').addEventListener('click', () => {
    sessionStorage.removeItem(KEY);
    me = null;
    if (view) { view.abort.abort(); view = null; }
    $('who').textContent = '';
    for (const id of ['nav-dlq', 'nav-fleet']) $(id).hidden = true;
    route();
  });
  $('jobs-filter').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, id] of [['state', 'f-state'], ['task', 'f-task'], ['tenant', 'f-tenant']]) {
      const val = $(id).value.trim();
      if (val) q.set(k, val);
    }
    const want = '#/jobs' + (q.toString() ? '?' + q : '');
    if (location.hash === want) showJobs(); else location.hash = want;
  });
  $('jobs-refresh').addEventListener('click', () => loadJobs());
  $('jobs-prev').addEventListener('click', () => { listPage--; renderJobs(); });
  $('jobs-next').addEventListener('click', () => { listPage++; renderJobs(); });
  $('btn-pause').addEventListener('click', () => control('pause'));
  $('btn-resume').addEventListener('click', () => control('resume'));
  $('btn-cancel').addEventListener('click', () => control('cancel'));
  $('batches-refresh').addEventListener('click', showBatches);
  $('batch-output').addEventListener('click', () => batchFile('output'));
  $('batch-errors').addEventListener('click', () => batchFile('errors'));
  $('batch-cancel').addEventListener('click', cancelBatch);
  $('dlq-filter').addEventListener('submit', (ev) => { ev.preventDefault(); showDLQ(); });
  $('dlq-refresh').addEventListener('click', showDLQ);
  $('dlq-replay').addEventListener('click', replaySelected);
  $('fleet-refresh').addEventListener('click', showFleet);
  window.addEventListener('hashchange', route);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && !$('jobs').hidden && apiKey()) loadJobs();
  });
  window.addEventListener('resize', () => { if (view) render(view); });
  route();
});
