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
const pick = (mode, side, listener) =>
  rows.filter((r) => r.mode === mode && r.side === side && (side === 'ours' || r.listener === listener));
const sides = [['ours'], ['theirs', 'replication'], ['theirs', 'polling']];
const fmt = (x, digits) => (Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : '-');
const ratio = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${fmt(a / b, 2)}×` : '-');

const drain = sides.map(([s, l]) => pick('drain', s, l));
const lat = sides.map(([s, l]) => pick('latency', s, l));
const rate = drain.map((rs) => median(rs.map((r) => r.rate)));
const p50 = lat.map((rs) => median(rs.map((r) => r.p50_ms)));
const p99 = lat.map((rs) => median(rs.map((r) => r.p99_ms)));
const runs = Math.max(...drain.map((d) => d.length));

const out = [];
out.push(`| figure (median of ${runs}) | ours | theirs: logical replication | ours / theirs | theirs: polling | ours / theirs |`);
out.push('|---|---|---|---|---|---|');
const complete = drain.map((rs) => rs.every((r) => r.complete));
const drainCell = (i) => {
  const rs = drain[i];
  if (complete[i]) return fmt(rate[i], 0);
  const h = median(rs.map((r) => r.handled));
  const w = median(rs.map((r) => r.window_s));
  return `${fmt(rate[i], 0)} (only ${fmt(h, 0)} of ${fmt(rs[0].rows, 0)} in the ${fmt(w, 0)} s window)`;
};
out.push(`| drain of ${fmt(drain[0][0] ? drain[0][0].rows : NaN, 0)} pre-filled events, events/s | ${drainCell(0)} | ${drainCell(1)} | ${ratio(rate[0], rate[1])} | ${drainCell(2)} | ${ratio(rate[0], rate[2])} |`);
const target = lat[0][0] ? lat[0][0].rate_target : NaN;
out.push(`| commit → handler p50 at ${fmt(target, 0)}/s, ms | ${fmt(p50[0], 2)} | ${fmt(p50[1], 2)} | ${ratio(p50[0], p50[1])} | ${fmt(p50[2], 2)} | ${ratio(p50[0], p50[2])} |`);
out.push(`| commit → handler p99 at ${fmt(target, 0)}/s, ms | ${fmt(p99[0], 2)} | ${fmt(p99[1], 2)} | ${ratio(p99[0], p99[1])} | ${fmt(p99[2], 2)} | ${ratio(p99[0], p99[2])} |`);
const handled = lat.map((rs) => rs.map((r) => `${r.handled}/${r.sent}`).join(', '));
out.push(`| latency runs: handled / sent | ${handled[0]} | ${handled[1]} | | ${handled[2]} | |`);
out.push('');
out.push('Every round (drain events/s; latency p50 / p99 ms):');
out.push('');
for (let i = 0; i < sides.length; i++) {
  const name = sides[i].join(' ');
  out.push(`- ${name}: drain ${drain[i].map((r) => fmt(r.rate, 0)).join(', ')}; latency ${lat[i].map((r) => `${fmt(r.p50_ms, 2)} / ${fmt(r.p99_ms, 2)}`).join(', ')}`);
}
console.log(out.join('\n'));
