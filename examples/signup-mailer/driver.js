// Signs up N users at a steady rate through the signup service, a few at a
// time, and prints how many it accepted (201). A refused signup (503: its
// transaction failed) is tried again: the report counts users, not requests.
//
//   node driver.js PORT N RATE_PER_S
'use strict';
const http = require('http');

const [port, total, rate] = process.argv.slice(2).map(Number);
if (!port || !total || !rate) {
  console.error('usage: node driver.js PORT N RATE_PER_S');
  process.exit(2);
}
const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });

function post(i) {
  return new Promise((resolve) => {
    const body = JSON.stringify({ email: `user${i}@example.com` });
    const req = http.request({ host: '127.0.0.1', port, path: '/signup', method: 'POST', agent,
                               headers: { 'content-type': 'application/json' } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', () => resolve(0));
    req.end(body);
  });
}

async function signUp(i) {
  for (let attempt = 0; attempt < 50; ++attempt) {
    if ((await post(i)) === 201) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

(async () => {
  const start = Date.now();
  const pending = [];
  let accepted = 0;
  for (let i = 0; i < total; ++i) {
    const due = start + (i * 1000) / rate;
    if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
    pending.push(signUp(i).then((ok) => { if (ok) ++accepted; }));
  }
  await Promise.all(pending);
  console.log(`accepted ${accepted} of ${total} signups in ${((Date.now() - start) / 1000).toFixed(1)} s`);
  process.exit(accepted === total ? 0 : 1);
})();
