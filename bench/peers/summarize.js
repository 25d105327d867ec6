// Turns the JSON lines of run_peer_bench.sh into the Markdown table of
// docs/benchmarks.md: medians over the rounds, ratios ours / theirs.
'use strict';
const fs = require('fs');

const rows = fs.readFileSync(process.argv[2], 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n === 0 ? NaN : n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};
// ours: default configuration (notify off); ours with NOTIFY: latency runs only.
// ours, relay.source = cdc: its own column (notify plays no part there).
const pick = (mode, side, listener) => {
  if (side === 'ours-cdc') return rows.filter((r) => r.mode === mode && r.side === 'ours' && r.source === 'cdc');
  return rows.filter((r) => r.mode === mode && r.side === side &&
                            (side === 'ours' ? (r.source || 'poll') === 'poll' &&
                                               (r.notify || 'off') === (listener || 'off')
                                             : r.listener === listener));
};
const sides = [['ours'], ['theirs', 'replication'], ['theirs', 'polling']];
const cdcDrain = pick('drain', 'ours-cdc');
const cdcRate = median(cdcDrain.map((r) => r.rate));
const fmt = (x, digits) => (Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : '-');
const ratio = (a, b) => {
  if (!(Number.isFinite(a) && Number.isFinite(b) && b > 0)) return '-';
  const r = a / b;
  return `${r >= 10 ? fmt(r, 1) : Number(r.toPrecision(2)).toString()}×`;
};

const drain = sides.map(([s, l]) => pick('drain', s, l));
const rate = drain.map((rs) => median(rs.map((r) => r.rate)));
const runs = Math.max(...drain.map((d) => d.length));
const targets = [...new Set(rows.filter((r) => r.mode === 'latency').map((r) => r.rate_target))].sort((a, b) => b - a);

const out = [];
out.push(`| figure (median of ${runs}) | ours | theirs: logical replication | ours / theirs | theirs: polling | ours / theirs | ours, \`outbox.notify=on\` | ours, \`relay.source=cdc\` | ours cdc / theirs replication |`);
out.push('|---|---|---|---|---|---|---|---|---|');
const drainCell = (i) => {
  const rs = drain[i];
  if (rs.every((r) => r.complete)) return fmt(rate[i], 0);
  const h = median(rs.map((r) => r.handled));
  const w = median(rs.map((r) => r.window_s));
  return `${fmt(rate[i], 0)} (${fmt(h, 0)} of ${fmt(rs[0].rows, 0)} in the ${fmt(w, 0)} s window)`;
};
out.push(`| drain of ${fmt(drain[0][0] ? drain[0][0].rows : NaN, 0)} pre-filled events, events/s | ${drainCell(0)} | ${drainCell(1)} | ${ratio(rate[0], rate[1])} | ${drainCell(2)} | ${ratio(rate[0], rate[2])} | (same as ours: no producer) | ${fmt(cdcRate, 0)} | ${ratio(cdcRate, rate[1])} |`);
const latBy = {};
for (const t of targets) {
  const lat = [...sides, ['ours', 'on'], ['ours-cdc']].map(([s, l]) => pick('latency', s, l).filter((r) => r.rate_target === t));
  latBy[t] = lat;
  for (const [name, key] of [['p50', 'p50_ms'], ['p99', 'p99_ms']]) {
    const v = lat.map((rs) => median(rs.map((r) => r[key])));
    out.push(`| commit → handler ${name} at ${fmt(t, 0)}/s, ms | ${fmt(v[0], 2)} | ${fmt(v[1], 2)} | ${ratio(v[0], v[1])} | ${fmt(v[2], 2)} | ${ratio(v[0], v[2])} | ${fmt(v[3], 2)} | ${fmt(v[4], 2)} | ${ratio(v[4], v[1])} |`);
  }
  const seen = lat.map((rs) => rs.map((r) => `${r.handled}/${r.sent}`).join(', '));
  out.push(`| at ${fmt(t, 0)}/s: handled / sent, per round | ${seen[0]} | ${seen[1]} | | ${seen[2]} | | ${seen[3]} | ${seen[4]} | |`);
  const left = lat.map((rs) => rs.map((r) => r.left_unprocessed).join(', '));
  out.push(`| at ${fmt(t, 0)}/s: rows never marked done, per round | ${left[0]} | ${left[1]} | | ${left[2]} | | ${left[3]} | ${left[4]} | |`);
}
out.push('');
out.push('Every round (drain events/s; latency p50 / p99 ms):');
out.push('');
const names = ['ours', 'theirs replication', 'theirs polling', 'ours notify=on', 'ours cdc'];
for (let i = 0; i < names.length; i++) {
  const name = names[i];
  const drains = i < drain.length ? drain[i] : i === 4 ? cdcDrain : null;
  const parts = drains ? [`drain ${drains.map((r) => fmt(r.rate, 0)).join(', ')}`] : [];
  for (const t of targets) {
    parts.push(`latency at ${fmt(t, 0)}/s ${latBy[t][i].map((r) => `${fmt(r.p50_ms, 2)} / ${fmt(r.p99_ms, 2)}`).join(', ')}`);
  }
  out.push(`- ${name}: ${parts.join('; ')}`);
}
console.log(out.join('\n'));
