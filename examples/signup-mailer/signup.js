// The signup service of seed 000, on outbox: POST /signup {"email": "..."}
// writes the user row and enqueues EmailVerificationRequested in one
// transaction, and answers after the commit. What seed 000 built with
// publishAfterCommit, a BullMQ queue and a cron job to recover stuck rows is
// this one SQL call; outbox-relay (relay.transport = http) delivers the event.
//
//   SIGNUP_DB_URL=postgresql://... [SIGNUP_PORT=0] [SIGNUP_PORT_FILE=F] node signup.js
// Tables: signup.users (examples/signup-mailer/schema.sql); the outbox: outbox.*.
'use strict';
const http = require('http');
const { Pool } = require('pg');

const pool = new Pool({ connectionString: process.env.SIGNUP_DB_URL, max: 4 });

async function signUp(email) {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    const u = await c.query('INSERT INTO signup.users (email) VALUES ($1) RETURNING id', [email]);
    const id = String(u.rows[0].id);
    const payload = Buffer.from(JSON.stringify({ user_id: id, email }));
    await c.query(
      "SELECT event_id FROM outbox.enqueue('user', $1, 'EmailVerificationRequested', $2, $3)",
      [id, payload, { 'content-type': 'application/json' }]);
    await c.query('COMMIT');
    return id;
  } catch (e) {
    await c.query('ROLLBACK').catch(() => {});
    throw e;
  } finally {
    c.release();
  }
}

const server = http.createServer((req, res) => {
  if (req.method !== 'POST' || req.url !== '/signup') {
    res.writeHead(404).end();
    return;
  }
  let body = '';
  req.on('data', (d) => { body += d; });
  req.on('end', async () => {
    let email;
    try {
      email = JSON.parse(body).email;
    } catch {
      email = undefined;
    }
    if (typeof email !== 'string' || !email.includes('@')) {
      res.writeHead(400, { 'content-type': 'text/plain' }).end('email: required, an address\n');
      return;
    }
    try {
      const id = await signUp(email);
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ user_id: id }));
    } catch (e) {
      res.writeHead(503, { 'content-type': 'text/plain' }).end(`${e.message}\n`);
    }
  });
});
server.listen(Number(process.env.SIGNUP_PORT || 0), '127.0.0.1', () => {
  const port = server.address().port;
  if (process.env.SIGNUP_PORT_FILE) require('fs').writeFileSync(process.env.SIGNUP_PORT_FILE, `${port}\n`);
  console.log(`signup: listening on 127.0.0.1:${port}`);
});
process.on('SIGTERM', () => server.close(() => pool.end()));
