// The outbox dashboard (outboxctl serve). Everything the API returns is put
// on the page as text (textContent, never innerHTML): an event whose fields
// hold markup shows that markup, it does not run.
'use strict';

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function showError(msg) {
  $('error').textContent = msg || '';
}

async function api(path, options) {
  const res = await fetch(path, options);
  let body = null;
  try {
    body = await res.json();
  } catch (e) {
    body = { ok: false, error: 'HTTP ' + res.status };
  }
  if (!res.ok) throw new Error(body && body.error ? body.error : 'HTTP ' + res.status);
  return body;
}

function age(seconds) {
  const s = Number(seconds);
  if (!isFinite(s)) return '–';
  if (s < 90) return s.toFixed(1) + ' s';
  if (s < 5400) return (s / 60).toFixed(1) + ' min';
  if (s < 172800) return (s / 3600).toFixed(1) + ' h';
  return (s / 86400).toFixed(1) + ' d';
}

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(n), i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : String(v)) + ' ' + units[i];
}

async function refreshConsumers() {
  try {
    const r = await api('/api/inbox');
    $('consumers-box').hidden = !r.configured && !r.backlog.length && !r.backlog_error;
    $('consumers').hidden = !r.configured;
    const backlog = $('backlog').querySelector('tbody');
    backlog.replaceChildren();
    for (const b of r.backlog) {
      const tr = el('tr', null, b.role === 'dead-letter' && b.messages > 0 ? 'dead' : '');
      tr.append(el('td', b.group), el('td', b.topic), el('td', b.role), el('td', b.messages),
                el('td', b.committed ? b.lag : b.lag + ' (no commit yet)'));
      backlog.append(tr);
    }
    $('backlog').hidden = !r.backlog.length;
    if (r.backlog_error) showError('broker: ' + r.backlog_error);
    const tbody = $('consumers').querySelector('tbody');
    tbody.replaceChildren();
    for (const c of r.consumers) {
      const tr = el('tr');
      tr.append(el('td', c.consumer), el('td', c.stamps), el('td', c.duplicates),
                el('td', age(c.oldest_stamp_age_seconds)), el('td', c.parked),
                el('td', c.parked ? age(c.oldest_parked_age_seconds) : '–'));
      tbody.append(tr);
    }
  } catch (e) {
    showError('consumers: ' + e.message);
  }
}

let actionsEnabled = false;

async function refreshStatus() {
  try {
    const s = await api('/api/status');
    $('schema').textContent = s.schema;
    $('n-pending').textContent = s.pending;
    $('n-processing').textContent = s.processing;
    $('n-sent').textContent = s.sent;
    $('n-failed').textContent = s.failed;
    $('n-skipped').textContent = s.skipped;
    $('n-held').textContent = s.held_aggregates;
    $('n-age').textContent = age(s.oldest_unsent_age_seconds);
    $('n-age').dataset.seconds = s.oldest_unsent_age_seconds;
    actionsEnabled = !!s.actions;
    $('actions-off').hidden = actionsEnabled;
    $('token-label').hidden = !actionsEnabled;
    $('dlt').hidden = !actionsEnabled;
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    showError('');
  } catch (e) {
    showError('status: ' + e.message);
  }
}

const SVG = 'http://www.w3.org/2000/svg';

// Sent (blue) and failed (red) per minute over the hour, plain SVG: one bar
// pair per minute, the tallest minute at full height.
function drawChart(minutes, windowSeconds) {
  const box = $('chart');
  const width = 600, height = 120, slots = Math.round(windowSeconds / 60);
  const now = Math.floor(Date.now() / 60000) * 60;
  let max = 1;
  for (const m of minutes) max = Math.max(max, m.sent + m.failed);
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', '0 0 ' + width + ' ' + height);
  svg.setAttribute('preserveAspectRatio', 'none');
  const w = width / slots;
  for (const m of minutes) {
    const slot = slots - 1 - Math.round((now - m.minute) / 60);
    if (slot < 0 || slot >= slots) continue;
    let y = height;
    for (const [cls, n] of [['sent', m.sent], ['failed', m.failed]]) {
      if (!n) continue;
      const h = Math.max(1, (n / max) * (height - 4));
      y -= h;
      const r = document.createElementNS(SVG, 'rect');
      r.setAttribute('x', String(slot * w + 0.5));
      r.setAttribute('y', String(y));
      r.setAttribute('width', String(Math.max(1, w - 1)));
      r.setAttribute('height', String(h));
      r.setAttribute('class', cls);
      const t = document.createElementNS(SVG, 'title');
      t.textContent = new Date(m.minute * 1000).toLocaleTimeString() + ': ' + n + ' ' + cls;
      r.append(t);
      svg.append(r);
    }
  }
  box.replaceChildren(svg);
}

async function refreshActivity() {
  try {
    const a = await api('/api/activity');
    let sent = 0, failed = 0;
    for (const m of a.minutes) { sent += m.sent; failed += m.failed; }
    $('hour-total').textContent = sent + ' sent, ' + failed + ' failed';
    $('hour-total').dataset.sent = sent;
    $('hour-total').dataset.failed = failed;
    drawChart(a.minutes, a.window_seconds);
    const tbody = $('relays').querySelector('tbody');
    tbody.replaceChildren();
    for (const r of a.relays) {
      const tr = el('tr');
      tr.append(el('td', r.relay), el('td', r.role), el('td', r.last_seen), el('td', r.rows));
      tbody.append(tr);
    }
    const slots = $('slots').querySelector('tbody');
    slots.replaceChildren();
    for (const sl of a.slots || []) {
      const tr = el('tr');
      tr.append(el('td', sl.slot), el('td', sl.active ? 'yes' : 'no'), el('td', sl.wal_status),
                el('td', bytes(sl.retained_wal_bytes)),
                el('td', sl.lag_seconds === null ? '–' : age(sl.lag_seconds)));
      slots.append(tr);
    }
    $('slots').hidden = !(a.slots && a.slots.length);
    if (!a.relays.length) {
      const tr = el('tr');
      const td = el('td', 'no relay claimed or streamed rows in the last hour', 'muted');
      td.colSpan = 4;
      tr.append(td);
      tbody.append(tr);
    }
  } catch (e) {
    showError('activity: ' + e.message);
  }
}

function filterQuery() {
  const q = new URLSearchParams();
  q.set('state', $('f-state').value);
  if ($('f-aggregate').value) q.set('aggregate', $('f-aggregate').value);
  if ($('f-type').value) q.set('type', $('f-type').value);
  if ($('f-older').value) q.set('older_than', $('f-older').value);
  q.set('limit', '200');
  return q.toString();
}

async function refreshEvents() {
  const tbody = $('events').querySelector('tbody');
  try {
    const r = await api('/api/events?' + filterQuery());
    const wantType = $('f-aggregate-type').value;
    tbody.replaceChildren();
    for (const e of r.rows) {
      if (wantType && e.aggregate_type !== wantType) continue;
      const tr = el('tr');
      tr.dataset.eventId = e.event_id;
      tr.append(el('td', e.seq), el('td', e.event_id), el('td', e.aggregate_type + '/' + e.aggregate_id),
                el('td', e.event_type), el('td', e.status), el('td', e.attempts), el('td', age(e.age_s)),
                el('td', e.last_error, 'err'));
      const actions = el('td');
      if (actionsEnabled && e.status === 'FAILED') {
        const b = el('button', 'Replay', 'replay');
        b.addEventListener('click', () => replay(e.event_id));
        actions.append(b);
      }
      if (actionsEnabled && (e.status === 'FAILED' || e.status === 'PENDING')) {
        const b = el('button', 'Skip', 'skip');
        b.addEventListener('click', () => skip(e.event_id));
        actions.append(b);
      }
      const t = el('button', 'Trace', 'trace');
      t.addEventListener('click', () => { $('search-key').value = e.event_id; trace(e.event_id); });
      actions.append(t);
      tr.append(actions);
      tbody.append(tr);
    }
    if (!tbody.children.length) {
      const tr = el('tr');
      const td = el('td', 'no ' + $('f-state').value + ' events match', 'muted');
      td.colSpan = 9;
      tr.append(td);
      tbody.append(tr);
    }
  } catch (e) {
    showError('events: ' + e.message);
  }
}

function fields(dl, obj, keys) {
  for (const k of keys) {
    const v = obj[k];
    if (v === undefined || v === null || v === '') continue;
    dl.append(el('dt', k), el('dd', v));
  }
}

async function trace(key) {
  const box = $('trace');
  box.replaceChildren(el('p', 'looking up ' + key + ' …', 'muted'));
  try {
    const r = await api('/api/trace?key=' + encodeURIComponent(key));
    box.replaceChildren();
    if (!r.outbox.length) {
      box.append(el('p', 'no event with id or dedup key "' + key + '" (never enqueued, rolled back, or purged)'));
      return;
    }
    for (const e of r.outbox) {
      box.append(el('h3', 'event ' + e.event_id));
      const dl = el('dl');
      fields(dl, e, ['seq', 'aggregate_type', 'aggregate_id', 'event_type', 'dedup_key', 'status',
                     'attempts', 'lease_owner', 'last_error', 'created_at', 'claimed_at', 'sent_at',
                     'failed_at', 'skipped_at', 'skipped_by', 'skip_reason', 'payload_bytes']);
      if (e.headers !== undefined) dl.append(el('dt', 'headers'), el('dd', JSON.stringify(e.headers)));
      if (e.payload !== undefined) dl.append(el('dt', 'payload'), el('dd', e.payload, 'payload'));
      box.append(dl);
    }
    if (r.inbox) {
      if (!r.inbox.length) box.append(el('p', 'inbox: not applied by any consumer of that database (no stamp)'));
      for (const s of r.inbox) {
        box.append(el('p', 'inbox: applied by consumer "' + s.consumer + '" at ' + s.applied_at +
                           ' (from ' + s.topic + '/' + s.partition + '@' + s.offset +
                           '); later copies absorbed: ' + s.duplicates, 'stamp'));
      }
    }
  } catch (e) {
    box.replaceChildren(el('p', 'trace: ' + e.message, 'error'));
  }
}

async function act(path, body, what) {
  const out = $('action-result');
  const token = $('token').value;
  sessionStorage.setItem('outbox-token', token);
  try {
    const r = await api(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Authorization': 'Bearer ' + token },
      body: JSON.stringify(body),
    });
    out.textContent = what + ': ' + JSON.stringify(r);
    out.className = '';
  } catch (e) {
    out.textContent = what + ' refused: ' + e.message;
    out.className = 'error';
  }
  refreshStatus();
  refreshEvents();
}

function replay(id) {
  if (!confirm('Replay event ' + id + '? It goes back to PENDING and is published again.')) return;
  act('/api/replay', { event_id: id }, 'replay ' + id);
}

function skip(id) {
  const reason = prompt('Skip event ' + id + ' for good (kept for audit). Why?');
  if (!reason) return;
  act('/api/skip', { event_id: id, reason: reason }, 'skip ' + id);
}

function dltReplay(dryRun) {
  const topic = $('dlt-topic').value.trim();
  const key = $('dlt-key').value;
  if (!topic) return;
  if (!dryRun && !confirm('Replay the dead letters of ' + topic + (key ? ' with key ' + key : '') +
                          ' back to their topics?')) return;
  const body = { topic: topic, dry_run: dryRun };
  if (key) body.key = key;
  act('/api/dlt/replay', body, (dryRun ? 'count ' : 'replay ') + topic);
}

document.addEventListener('DOMContentLoaded', () => {
  $('token').value = sessionStorage.getItem('outbox-token') || '';
  $('search').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const key = $('search-key').value.trim();
    if (key) trace(key);
  });
  $('dlt-count').addEventListener('click', () => dltReplay(true));
  $('dlt-replay').addEventListener('click', () => dltReplay(false));
  $('filters').addEventListener('submit', (ev) => {
    ev.preventDefault();
    refreshEvents();
  });
  refreshStatus().then(refreshEvents).then(refreshActivity).then(refreshConsumers);
  setInterval(refreshStatus, 5000);
  setInterval(refreshActivity, 30000);
  setInterval(refreshConsumers, 30000);
  const key = new URLSearchParams(location.search).get('trace');
  if (key) { $('search-key').value = key; trace(key); }
});
