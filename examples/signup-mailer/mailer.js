// The mailer: receives outbox-relay's POSTs (relay.transport = http) and sends
// each verification email once. The relay delivers at least once, with the
// event id as Idempotency-Key; inbox.try_apply, first in the transaction that
// records the email, turns that into once: true = new (record and send), false
// = a copy (answer 200, do nothing). The "send" is the row in mailer.emails,
// committed with the stamp; a real mailer hands it to its SMTP queue after the
// commit, keyed by the event id.
//
//   MAILER_DB_URL=postgresql://... [MAILER_PORT=0] [MAILER_PORT_FILE=F] node mailer.js
// POST /unavailable?ms=N makes it answer 503 for N ms (the demo's outage).
'use strict';
const http = require('http');
const { Pool } = require('pg');

const pool = new Pool({ connectionString: process.env.MAILER_DB_URL, max: 4 });
let unavailableUntil = 0;

// 'new' or 'copy'.
async function record(eventId, body) {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    const r = await c.query("SELECT inbox.try_apply('mailer', $1, 'http:/events', 0, 0) AS fresh", [eventId]);
    if (!r.rows[0].fresh) {
      await c.query('COMMIT');
      return 'copy';
    }
    const e = JSON.parse(body);
    await c.query('INSERT INTO mailer.emails (event_id, user_id, address) VALUES ($1, $2, $3)',
                  [eventId, e.user_id, e.email]);
    await c.query('COMMIT');
    return 'new';
  } catch (err) {
    await c.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    c.release();
  }
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://mailer');
  if (req.method === 'POST' && url.pathname === '/unavailable') {
    unavailableUntil = Date.now() + Number(url.searchParams.get('ms') || 0);
    res.writeHead(204).end();
    return;
  }
  if (req.method !== 'POST' || url.pathname !== '/events/EmailVerificationRequested') {
    res.writeHead(404, { 'content-type': 'text/plain' }).end('no such event type\n');
    return;
  }
  const chunks = [];
  req.on('data', (d) => chunks.push(d));
  req.on('end', async () => {
    if (Date.now() < unavailableUntil) {
      res.writeHead(503, { 'retry-after': '1' }).end();
      return;
    }
    const key = req.headers['idempotency-key'];
    if (!key) {
      res.writeHead(400, { 'content-type': 'text/plain' }).end('Idempotency-Key: required\n');
      return;
    }
    try {
      const outcome = await record(key, Buffer.concat(chunks).toString('utf8'));
      res.writeHead(200, { 'content-type': 'text/plain' }).end(`${outcome}\n`);
    } catch (err) {
      // A database hiccup: 503, and the relay delivers it again.
      res.writeHead(503, { 'content-type': 'text/plain' }).end(`${err.message}\n`);
    }
  });
});
server.listen(Number(process.env.MAILER_PORT || 0), '127.0.0.1', () => {
  const port = server.address().port;
  if (process.env.MAILER_PORT_FILE) require('fs').writeFileSync(process.env.MAILER_PORT_FILE, `${port}\n`);
  console.log(`mailer: listening on 127.0.0.1:${port}`);
});
process.on('SIGTERM', () => server.close(() => pool.end()));
