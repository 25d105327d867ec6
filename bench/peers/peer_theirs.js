// The peer side of bench/peers: pg-transactional-outbox (npm) against the same
// PostgreSQL as our relay, with a message handler that only counts — the
// library's own machinery (listener, per-message "processed" marking) is what
// is measured, as on our side (bench/peers/peer_ours.cc).
//
//   node peer_theirs.js --db URL --listener replication|polling --mode drain|latency
//        [--rows 50000] [--seconds 60] [--rate 1000] [--batch 100] [--interval-ms 10]
//        [--concurrency segment|mutex|full]
// drain:   a pre-filled outbox of --rows messages (200-byte payload, 1000
//          aggregates = segments); rate = handled / time until all are handled,
//          or over --seconds if that comes first (the polling listener is slow on
//          a backlog; the window is reported).
// latency: --rate messages/s, one per transaction, for --seconds; commit (the
//          COMMIT's reply) -> handler call, per message.
// Prints one JSON line.
'use strict';
const { Pool } = require('pg');
const { performance } = require('perf_hooks');
const crypto = require('crypto');
const lib = require('pg-transactional-outbox');

function flags() {
  const f = {
    db: process.env.OUTBOX_PG_URL || '', listener: 'replication', mode: 'drain', rows: '50000',
    seconds: '60', rate: '1000', batch: '100', 'interval-ms': '10', concurrency: 'segment',
  };
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i += 2) {
    const k = a[i].replace(/^--/, '');
    if (!(k in f) || a[i + 1] === undefined) {
      console.error(`unknown flag or missing value: ${a[i]}; flags: ${Object.keys(f).join(', ')}`);
      process.exit(2);
    }
    f[k] = a[i + 1];
  }
  return f;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function percentile(sorted, p) {
  if (!sorted.length) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

async function main() {
  const f = flags();
  const schema = 'bench_peer_theirs';
  const table = 'outbox';
  const tag = crypto.randomBytes(4).toString('hex');
  const publication = `bench_peer_pub_${tag}`;
  const slot = `bench_peer_slot_${tag}`;
  const admin = new Pool({ connectionString: f.db, max: 1 });
  const setup = {
    outboxOrInbox: 'outbox', database: 'x', schema, table, listenerRole: 'postgres',
    publication, replicationSlot: slot, nextMessagesName: 'next_outbox_messages',
  };
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await admin.query(lib.DatabaseSetup.dropAndCreateTable(setup));
  if (f.listener === 'replication') {
    await admin.query(lib.DatabaseSetup.setupReplicationCore(setup));
    await admin.query(`SELECT pg_create_logical_replication_slot('${slot}', 'pgoutput')`);
  } else {
    await admin.query(lib.DatabaseSetup.createPollingFunction(setup));
    await admin.query(lib.DatabaseSetup.setupPollingIndexes(setup));
  }

  const rows = Number(f.rows);
  if (f.mode === 'drain') {
    await admin.query(`
      INSERT INTO ${schema}.${table} (id, aggregate_type, aggregate_id, message_type, segment, payload)
      SELECT gen_random_uuid(), 'bench', 'agg-' || (i % 1000), 'BenchEvent', 'agg-' || (i % 1000),
             jsonb_build_object('data', repeat('x', 200))
      FROM generate_series(1, ${rows}) i`);
    await admin.query(`VACUUM ANALYZE ${schema}.${table}`);
    await admin.query('CHECKPOINT');
  }

  let handled = 0;
  let lastHandled = 0;
  const handledAt = new Map();
  const handler = {
    handle: async (message) => {
      handled += 1;
      lastHandled = performance.now();
      if (f.mode === 'latency') handledAt.set(message.id, lastHandled);
    },
  };
  const settings = {
    dbSchema: schema, dbTable: table,
    enableMaxAttemptsProtection: false, enablePoisonousMessageProtection: false,
    messageCleanupIntervalInMs: 0,
  };
  // PEER_LOG=1 shows the library's own warnings (e.g. why a message was skipped).
  const logger = process.env.PEER_LOG ? lib.getDefaultLogger('peer') : lib.getDisabledLogger();
  let shutdown;
  const t0 = performance.now();
  if (f.listener === 'replication') {
    const controllers = {
      segment: lib.createReplicationSegmentMutexConcurrencyController,
      mutex: lib.createReplicationMutexConcurrencyController,
      full: lib.createReplicationFullConcurrencyController,
    };
    [shutdown] = lib.initializeReplicationMessageListener(
      { outboxOrInbox: 'outbox', dbListenerConfig: { connectionString: f.db },
        dbHandlerConfig: { connectionString: f.db },
        settings: { ...settings, dbPublication: publication, dbReplicationSlot: slot } },
      handler, logger, { concurrencyStrategy: controllers[f.concurrency]() });
  } else {
    [shutdown] = lib.initializePollingMessageListener(
      { outboxOrInbox: 'outbox', dbListenerConfig: { connectionString: f.db },
        dbHandlerConfig: { connectionString: f.db },
        settings: { ...settings, nextMessagesBatchSize: Number(f.batch),
                    nextMessagesPollingIntervalInMs: Number(f['interval-ms']),
                    nextMessagesFunctionName: 'next_outbox_messages',
                    nextMessagesFunctionSchema: schema } },
      handler, logger);
  }

  const seconds = Number(f.seconds);
  const out = { side: 'theirs', listener: f.listener, mode: f.mode };
  if (f.mode === 'drain') {
    const deadline = t0 + seconds * 1000;
    while (handled < rows && performance.now() < deadline) await sleep(5);
    const end = handled >= rows ? lastHandled : performance.now();
    Object.assign(out, { rows, handled, window_s: (end - t0) / 1000,
                         rate: handled / ((end - t0) / 1000), complete: handled >= rows });
  } else {
    const storage = lib.initializeMessageStorage({ outboxOrInbox: 'outbox', settings }, logger);
    const producers = new Pool({ connectionString: f.db, max: 4 });
    await sleep(1000);  // the listener is connected
    const rate = Number(f.rate);
    const total = rate * seconds;
    const committedAt = new Map();
    const start = performance.now();
    let inFlight = 0;
    const produce = async (i) => {
      const client = await producers.connect();
      try {
        await client.query('BEGIN');
        const id = crypto.randomUUID();
        await storage({ id, aggregateType: 'bench', aggregateId: `agg-${i % 1000}`, messageType: 'BenchEvent',
                        segment: `agg-${i % 1000}`, payload: { data: 'x'.repeat(200) } }, client);
        await client.query('COMMIT');
        committedAt.set(id, performance.now());
      } finally {
        client.release();
        inFlight -= 1;
      }
    };
    const pending = [];
    for (let i = 0; i < total; i += 1) {
      const due = start + (i * 1000) / rate;
      const wait = due - performance.now();
      if (wait > 1) await sleep(wait);
      while (inFlight >= 16) await sleep(1);
      inFlight += 1;
      pending.push(produce(i));
    }
    await Promise.all(pending);
    const produceSecs = (performance.now() - start) / 1000;
    const deadline = performance.now() + 30000;
    while (handled < total && performance.now() < deadline) await sleep(10);
    const lat = [];
    for (const [id, c] of committedAt) {
      const h = handledAt.get(id);
      if (h !== undefined) lat.push(Math.max(0, h - c));
    }
    lat.sort((a, b) => a - b);
    await sleep(1000);  // let the last "processed" marks commit
    const left = await admin.query(`SELECT count(*)::int AS n FROM ${schema}.${table} WHERE processed_at IS NULL`);
    Object.assign(out, { left_unprocessed: left.rows[0].n, rate_target: rate, offered_rate: total / produceSecs, sent: total, handled,
                         p50_ms: percentile(lat, 0.5), p99_ms: percentile(lat, 0.99) });
    await producers.end();
  }
  await shutdown();
  if (f.listener === 'replication') {
    await sleep(200);
    await admin.query(`SELECT pg_drop_replication_slot('${slot}') FROM pg_replication_slots
                       WHERE slot_name = '${slot}' AND NOT active`).catch(() => {});
    await admin.query(`DROP PUBLICATION IF EXISTS ${publication}`);
  }
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await admin.end();
  console.log(JSON.stringify(out));
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
