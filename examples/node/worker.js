#!/usr/bin/env node
// A worker for the workflow extension, with node-postgres (pg).
//
// Usage: node worker.js [WORKER_ID]
//
// Connects through the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER,
// PGPASSWORD) as a role granted workflow_worker, and loops: claim one job, do
// it while a timer heartbeats its lease, then complete_job, fail_job
// (retryable or not) or, on shutdown, release_job. SIGTERM or SIGINT stops
// it: it gives back the job it holds and exits 0.
//
// The work is simulated: a job's payload says how long it takes
// (work_seconds) and whether its first attempt fails with a retryable error
// (fail_first_attempt).
'use strict';

const { Client } = require('pg');

const JOB_TYPES = ['example.fetch', 'example.transform', 'example.count',
  'example.total', 'example.report'];
const IDLE_MS = 500;        // wait this long (plus jitter) when nothing is due
const REAP_EVERY_MS = 10000; // between calls of workflow.reap_expired()
const RETRY_CALL = 5;       // attempts of a call that raised workflow.release_conflict

// The job is no longer ours: stop working on it and report nothing.
const GONE = new Set(['job.lease_lost', 'job.canceled', 'job.not_running',
  'job.not_found']);

const workerId = process.argv[2] || `node-${process.pid}`;
let stopping = false;
let wake = null;            // resolves the current idle wait early

function log(message) {
  console.log(`[${workerId}] ${message}`);
}

// The stable code that begins the extension's error messages.
function errorCode(err) {
  return String(err.message || '').split(':', 1)[0].trim();
}

function sleep(ms) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    wake = () => { clearTimeout(timer); resolve(); };
  });
}

class RetryableError extends Error {}
class PermanentError extends Error {}
class Interrupted extends Error {}

// Keeps one claimed job's lease alive: heartbeat() every third of its
// timeout_seconds. If it says the job is gone (lease lost, job canceled),
// `lost` holds the code and the work should stop.
class Lease {
  constructor(client, job) {
    this.client = client;
    this.job = job;
    this.lost = null;
    this.beats = 0;
    const interval = Math.max(job.timeout_seconds * 1000 / 3, 200);
    this.timer = setInterval(() => this.beat(), interval);
  }

  async beat() {
    if (this.lost) return;
    try {
      await this.client.query('SELECT workflow.heartbeat($1, $2)',
        [this.job.id, this.job.lease_token]);
      this.beats += 1;
    } catch (err) {
      if (GONE.has(errorCode(err))) this.lost = errorCode(err);
      // Anything else is retried at the next beat.
    }
  }

  check() {
    if (this.lost) throw new Interrupted(this.lost);
    if (stopping) throw new Interrupted('shutdown');
  }

  stop() {
    clearInterval(this.timer);
  }
}

// The job itself (simulated). Returns its output or throws.
async function doWork(job, lease) {
  const payload = job.payload && typeof job.payload === 'object' ? job.payload : {};
  if (!JOB_TYPES.includes(job.job_type)) {
    throw new PermanentError(`no handler for job type ${job.job_type}`);
  }
  const deadline = Date.now() + Number(payload.work_seconds ?? 0.2) * 1000;
  while (Date.now() < deadline) {
    lease.check(); // long work checks in now and then
    await new Promise((r) => setTimeout(r, Math.min(100, deadline - Date.now())));
  }
  if (payload.fail_first_attempt && job.attempt === 1) {
    throw new RetryableError(`${payload.source || 'the source'} did not answer`);
  }
  return { worker: workerId, attempt: job.attempt };
}

// Runs one engine call, retrying workflow.release_conflict (40001).
async function call(client, sql, args) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await client.query(sql, args);
    } catch (err) {
      if (errorCode(err) !== 'workflow.release_conflict' || attempt === RETRY_CALL) {
        throw err;
      }
      await new Promise((r) => setTimeout(r, 50 * attempt));
    }
  }
}

// Works one claimed job and reports its outcome.
async function handle(client, job) {
  const what = `${job.job_type} job ${job.id} (attempt ${job.attempt}/${job.max_attempts})`;
  log(`claimed ${what}`);
  const lease = new Lease(client, job);
  let outcome;
  try {
    outcome = { kind: 'complete', output: await doWork(job, lease) };
  } catch (err) {
    if (err instanceof RetryableError) {
      outcome = { kind: 'fail', code: 'example.source_unavailable', message: err.message, retryable: true };
    } else if (err instanceof PermanentError) {
      outcome = { kind: 'fail', code: 'example.unsupported', message: err.message, retryable: false };
    } else if (err instanceof Interrupted) {
      outcome = err.message === 'shutdown' ? { kind: 'release' } : { kind: 'drop', why: err.message };
    } else {
      throw err;
    }
  } finally {
    lease.stop();
  }
  if (lease.beats) log(`sent ${lease.beats} heartbeat(s) for ${what}`);

  try {
    switch (outcome.kind) {
      case 'complete':
        await call(client, 'SELECT workflow.complete_job($1, $2, $3)',
          [job.id, job.lease_token, outcome.output]);
        log(`completed ${what}`);
        break;
      case 'fail':
        await call(client, 'SELECT workflow.fail_job($1, $2, $3, $4, $5)',
          [job.id, job.lease_token, outcome.code, outcome.message, outcome.retryable]);
        log(`failed ${what}: ${outcome.code} (retryable: ${outcome.retryable})`);
        break;
      case 'release':
        await call(client, 'SELECT workflow.release_job($1, $2)', [job.id, job.lease_token]);
        log(`released ${what} for another worker`);
        break;
      default:
        log(`dropped ${what}: ${outcome.why}`);
    }
  } catch (err) {
    if (!GONE.has(errorCode(err))) throw err;
    // Someone else decided this job's fate (a reaper, a retry, a
    // cancellation): nothing to undo, move on.
    log(`could not report ${what}: ${errorCode(err)}`);
  }
}

// Claims and works jobs until a shutdown is asked for.
async function workLoop(client) {
  let nextReap = Date.now();
  while (!stopping) {
    if (Date.now() >= nextReap) {
      const { rows } = await client.query('SELECT workflow.reap_expired() AS n');
      if (rows[0].n) log(`reap_expired: ${rows[0].n} lease(s) expired`);
      nextReap = Date.now() + REAP_EVERY_MS;
    }
    const { rows } = await client.query(
      'SELECT * FROM workflow.claim($1, $2, 1)', [workerId, JOB_TYPES]);
    if (rows.length === 0) {
      await sleep(IDLE_MS * (0.8 + 0.4 * Math.random()));
      continue;
    }
    await handle(client, rows[0]);
  }
}

async function main() {
  const stop = () => { stopping = true; if (wake) wake(); };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  log('started');
  while (!stopping) {
    // Each query outside a BEGIN is its own short transaction.
    const client = new Client({ application_name: workerId });
    client.on('error', (err) => log(`connection error: ${err.message}`));
    try {
      await client.connect();
      await workLoop(client);
    } catch (err) {
      // A lost connection or an unexpected error: a job held now is
      // reaped once its lease runs out and claimed again.
      log(`error: ${err.message}${err.code ? ` (SQLSTATE ${err.code})` : ''}; reconnecting`);
      await sleep(2000);
    } finally {
      await client.end().catch(() => {});
    }
  }
  log('stopped');
}

main().then(() => process.exit(0), (err) => {
  console.error(err);
  process.exit(1);
});
