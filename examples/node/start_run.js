#!/usr/bin/env node
// Starts a run of examples/definition.json, waits for its end, prints its
// history. With node-postgres (pg).
//
// Usage: node start_run.js IDEMPOTENCY_KEY [DEFINITION_FILE] [TIMEOUT_SECONDS]
//
// Connects through the libpq environment as a role granted workflow_client.
// The idempotency key names the request: starting again with the same key
// (after a crash, a timeout, a lost answer) returns the same run instead of
// starting a second one. It LISTENs on workflow_run_terminal before it starts
// the run, so the end cannot slip by, and polls run_counters as a fallback
// (a run that had already ended before this process listened).
//
// Exits 0 when the run SUCCEEDED, 1 when it ended otherwise, 2 on a timeout
// or an error.
'use strict';

const fs = require('fs');
const path = require('path');
const { Client } = require('pg');

const CHANNEL = 'workflow_run_terminal';
const POLL_MS = 2000;

function errorCode(err) {
  return String(err.message || '').split(':', 1)[0].trim();
}

// start_run with an idempotency key; retries workflow.release_conflict.
async function startRun(client, definition, key) {
  for (let attempt = 1; ; attempt++) {
    try {
      const { rows } = await client.query(
        'SELECT workflow.start_run($1, NULL, $2) AS id', [definition, key]);
      return rows[0].id;
    } catch (err) {
      // A concurrent start with the same key has not committed yet.
      if (errorCode(err) !== 'workflow.release_conflict' || attempt === 5) throw err;
      await new Promise((r) => setTimeout(r, 100 * attempt));
    }
  }
}

// The run's end as its step counts show it, or null while it is live.
function finished(c) {
  if (c.steps_active || c.steps_waiting || c.steps_blocked) return null;
  if (c.steps_succeeded === c.steps_total) return 'SUCCEEDED';
  return `not SUCCEEDED (${c.steps_failed} failed, ${c.steps_canceled} canceled)`;
}

// Resolves with [status, how] when a notification names the run or
// run_counters shows it finished; [null, null] after the timeout.
function waitForEnd(client, runId, notified, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    let timer = null;
    const done = (result) => {
      clearTimeout(timer);
      client.removeListener('notification', onNotification);
      resolve(result);
    };
    const onNotification = () => {
      if (notified.has(runId)) done([notified.get(runId), 'notified']);
    };
    const poll = async () => {
      try {
        const { rows } = await client.query(
          'SELECT * FROM workflow.run_counters($1)', [runId]);
        if (notified.has(runId)) return done([notified.get(runId), 'notified']);
        const status = rows.length ? finished(rows[0]) : null;
        if (status) {
          // The notification of an end we just saw may still be on its
          // way; it does not come for a run that ended before LISTEN.
          timer = setTimeout(() => done([status, 'run_counters']), 200);
          return undefined;
        }
        if (Date.now() >= deadline) return done([null, null]);
        timer = setTimeout(poll, Math.min(POLL_MS, deadline - Date.now()));
      } catch (err) {
        reject(err);
      }
    };
    client.on('notification', onNotification);
    poll();
  });
}

async function printHistory(client, runId) {
  const { rows } = await client.query(
    `SELECT id, event_type, step_key, detail,
            to_char(created_at, 'HH24:MI:SS.MS') AS at
       FROM workflow.run_history($1) ORDER BY id`, [runId]);
  console.log(`history of run ${runId} (${rows.length} events):`);
  for (const r of rows) {
    const detail = r.detail === null ? '{}' : JSON.stringify(r.detail);
    console.log(`  #${String(r.id).padEnd(6)} ${r.at}  ${r.event_type.padEnd(20)} `
      + `${(r.step_key || '-').padEnd(10)} ${detail}`);
  }
}

async function main() {
  const [key, file, timeout] = process.argv.slice(2);
  if (!key) {
    console.error('usage: node start_run.js IDEMPOTENCY_KEY [DEFINITION_FILE] [TIMEOUT_SECONDS]');
    return 2;
  }
  const definition = JSON.parse(fs.readFileSync(
    file || path.join(__dirname, '..', 'definition.json'), 'utf8'));
  const timeoutMs = Number(timeout || 120) * 1000;

  const client = new Client({ application_name: 'start_run.js' });
  await client.connect();
  try {
    const notified = new Map();
    client.on('notification', (msg) => {
      try {
        const body = JSON.parse(msg.payload);
        notified.set(body.workflow_run_id, body.status);
      } catch (err) {
        console.error(`unreadable notification: ${msg.payload}`);
      }
    });
    await client.query(`LISTEN ${CHANNEL}`); // before start_run

    let runId;
    try {
      runId = await startRun(client, definition, key);
    } catch (err) {
      console.error(`start_run failed: ${err.message} (SQLSTATE ${err.code})`);
      return 2;
    }
    console.log(`run ${runId} started (idempotency key ${key})`);

    const [status, how] = await waitForEnd(client, runId, notified, timeoutMs);
    if (status === null) {
      console.error(`run ${runId} still live after ${timeoutMs / 1000}s`);
      return 2;
    }
    console.log(`run ${runId} ${status} (${how})`);
    await client.query(`UNLISTEN ${CHANNEL}`);
    try {
      await printHistory(client, runId);
    } catch (err) {
      console.error(`run_history failed: ${err.message} (SQLSTATE ${err.code})`);
      return 2;
    }
    return status === 'SUCCEEDED' ? 0 : 1;
  } finally {
    await client.end();
  }
}

main().then((code) => process.exit(code), (err) => {
  console.error(`error: ${err.message}`);
  process.exit(2);
});
