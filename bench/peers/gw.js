#!/usr/bin/env node
// bench/peers/gw.js: graphile-worker, as the bench's peers group runs it.
//
//   node gw.js migrate --conn URL
//       installs (or upgrades) graphile-worker's schema with its own
//       migrations (runMigrations), then exits.
//   node gw.js work --conn URL --concurrency N [--local-queue S]
//                   [--complete-batch-delay MS] [--pool P] [--latency]
//       one worker process: loads graphile-worker, prints "ready", waits
//       for a line "go" on stdin, prints "started EPOCH_MS" and calls run()
//       with a task list of one no-op task, "noop".  Without --latency it
//       prints "n COUNT" (tasks run so far) every 5 ms while the count
//       changes; with --latency it prints "t SEQ EPOCH_MS" when the task
//       function starts, SEQ taken from the job's payload.  A line "stop" on
//       stdin (or the end of stdin) stops the runner (runner.stop()) and the
//       process exits 0; any error exits 1.
//
// Logging: warnings and errors go to stderr, nothing else; NO_LOG_SUCCESS is
// set before graphile-worker is loaded, so that no line is written per job.

"use strict";

process.env.NO_LOG_SUCCESS = "1";
const readline = require("readline");
const { performance } = require("perf_hooks");
const { run, runMigrations, Logger } = require("graphile-worker");

function nowMs() {
	return performance.timeOrigin + performance.now();
}

function parseArgs(argv) {
	const out = { cmd: argv[0] };
	for (let i = 1; i < argv.length; i++) {
		const a = argv[i];
		if (!a.startsWith("--")) {
			throw new Error("unexpected argument: " + a);
		}
		const key = a.slice(2);
		if (key === "latency") {
			out.latency = true;
		} else {
			if (i + 1 >= argv.length) {
				throw new Error("missing value of " + a);
			}
			out[key] = argv[++i];
		}
	}
	return out;
}

const logger = new Logger(() => (level, message) => {
	if (level === "error" || level === "warning") {
		process.stderr.write(`[graphile-worker ${level}] ${message}\n`);
	}
});

function say(line) {
	process.stdout.write(line + "\n");
}

async function main() {
	const args = parseArgs(process.argv.slice(2));
	if (!args.conn) {
		throw new Error("--conn is required");
	}
	if (args.cmd === "migrate") {
		await runMigrations({ connectionString: args.conn, logger });
		return;
	}
	if (args.cmd !== "work") {
		throw new Error("unknown command: " + args.cmd);
	}
	const concurrency = parseInt(args.concurrency || "1", 10);
	const worker = {
		connectionString: args.conn,
		concurrentJobs: concurrency,
		// graphile-worker's advice: 10 or concurrentJobs + 2, whichever is larger
		maxPoolSize: parseInt(args.pool || String(Math.max(10, concurrency + 2)), 10),
	};
	if (args["local-queue"]) {
		worker.localQueue = { size: parseInt(args["local-queue"], 10) };
	}
	if (args["complete-batch-delay"]) {
		worker.completeJobBatchDelay = parseInt(args["complete-batch-delay"], 10);
	}

	let count = 0;
	const taskList = args.latency
		? {
				noop: async (payload) => {
					say(`t ${payload && payload.seq} ${nowMs().toFixed(3)}`);
				},
			}
		: {
				noop: async () => {
					count++;
				},
			};

	const lines = readline.createInterface({ input: process.stdin });
	const iter = lines[Symbol.asyncIterator]();
	say("ready");
	for (;;) {
		const { value, done } = await iter.next();
		if (done) {
			return;
		}
		if (value.trim() === "go") {
			break;
		}
	}
	say(`started ${nowMs().toFixed(3)}`);
	const runner = await run({
		logger,
		noHandleSignals: true,
		taskList,
		preset: { worker },
	});
	let reported = -1;
	const timer = args.latency
		? null
		: setInterval(() => {
				if (count !== reported) {
					reported = count;
					say(`n ${count}`);
				}
			}, 5);
	let failed = null;
	runner.promise.catch((e) => {
		failed = e;
	});
	for (;;) {
		const { value, done } = await iter.next();
		if (done || value.trim() === "stop") {
			break;
		}
	}
	if (timer) {
		clearInterval(timer);
	}
	await runner.stop();
	if (!args.latency) {
		say(`n ${count}`);
	}
	if (failed) {
		throw failed;
	}
	lines.close();
}

main().then(
	() => process.exit(0),
	(e) => {
		process.stderr.write(`gw.js: ${e && e.stack ? e.stack : e}\n`);
		process.exit(1);
	},
);
