/*
 * loop.c: the event loop.  One pass: notice signals and ended commands,
 * keep the connection (reconnecting with backoff), heartbeat held jobs,
 * report outcomes, claim, start commands; then poll() on the socket, the
 * commands' pipes and a self-pipe that signals write to, until the next
 * deadline (heartbeat, poll interval, grace, reconnect).
 *
 * Database calls are synchronous: they are short, and a command's pipe
 * simply fills up meanwhile.  A lost connection never loses a result: a job
 * stays held with its outcome until the server acknowledged the report.
 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RETRY_DELAY 0.2
#define BACKOFF_FIRST 0.1
#define BACKOFF_MAX 5.0
#define MIN_WAIT 0.01			/* the shortest poll() for a deadline already due */

static const Options *O;
static Job **jobs;
static int njobs;
static int jobs_cap;
static int hold_limit;			/* jobs held at once: claimed, running, unreported */

static volatile sig_atomic_t signals_seen;
static int signals_handled;
static int wake_pipe[2] = {-1, -1};

static bool stopping;
static double grace_deadline;
static bool woken;				/* a notification named one of our types */
static bool more_likely = true; /* the last claim was full: ask again now */
static double next_poll;
static double disconnected_since = -1;
static double next_reconnect;
static double backoff;

/* The signal handler: count stop requests, wake poll() up. */
void
note_signal(int signo)
{
	int			saved = errno;

	if (signo == SIGTERM || signo == SIGINT)
		signals_seen++;
	if (wake_pipe[1] >= 0)
		(void) !write(wake_pipe[1], "x", 1);
	errno = saved;
}

static void
add_jobs(Job **list, int n)
{
	int			i;
	double		now = now_mono();

	if (njobs + n > jobs_cap)
	{
		jobs_cap = (njobs + n) * 2;
		jobs = xrealloc(jobs, sizeof(Job *) * jobs_cap);
	}
	for (i = 0; i < n; i++)
	{
		Job		   *j = list[i];
		double		every = j->timeout_seconds / 3.0;

		j->next_heartbeat = now + (every < 0.1 ? 0.1 : every);
		j->lease_until = now + j->timeout_seconds;
		jobs[njobs++] = j;
	}
	free(list);
}

/* Keeps claim order: the local queue starts jobs in the order claimed. */
static void
remove_job(int i)
{
	job_free(jobs[i]);
	memmove(&jobs[i], &jobs[i + 1], sizeof(Job *) * (njobs - i - 1));
	njobs--;
}

static void
describe(const Job *j, char *out, size_t len)
{
	if (j->step_key)
		snprintf(out, len, "job %s %s step %s", j->id, j->type, j->step_key);
	else
		snprintf(out, len, "job %s %s", j->id, j->type);
}

/* The one line per job outcome (silenced by --quiet). */
static void
log_job(const Job *j, const char *what)
{
	char		d[512];
	double		took = 0;

	if (O->quiet)
		return;
	describe(j, d, sizeof(d));
	if (j->started_at > 0)
		took = (j->finished_at > 0 ? j->finished_at : now_mono()) - j->started_at;
	log_line("%s %s in %.2f s", d, what, took);
}

static void
log_reported(const Job *j)
{
	char		what[300];

	if (j->outcome == OUT_COMPLETE)
		log_job(j, "succeeded");
	else if (j->outcome == OUT_FAIL)
	{
		snprintf(what, sizeof(what), "failed (%s%s)", j->error_code,
				 j->retryable ? "" : ", not retryable");
		log_job(j, what);
	}
	else if (j->outcome == OUT_RELEASE)
		log_job(j, "released");
}

static void
log_dropped(const Job *j, const char *why)
{
	char		what[300];

	snprintf(what, sizeof(what), "dropped: no longer ours (%s)", why);
	log_job(j, what);
}

static int
count_state(JobState s)
{
	int			i, n = 0;

	for (i = 0; i < njobs; i++)
		if (jobs[i]->state == s)
			n++;
	return n;
}

/* ---- commands ---- */

static Job *
job_by_pid(pid_t pid)
{
	int			i;

	for (i = 0; i < njobs; i++)
		if (jobs[i]->state == JOB_RUNNING && jobs[i]->pid == pid)
			return jobs[i];
	return NULL;
}

static void
reap_children(void)
{
	pid_t		pid;
	int			status;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
	{
		Job		   *j = job_by_pid(pid);

		if (j == NULL)
			continue;
		j->exited = true;
		j->wait_status = status;
		command_drain(j, db_max_output());
		if (j->on_exit == OUT_DROP)
		{
			j->state = JOB_DONE;
			j->outcome = OUT_DROP;
		}
		else if (j->on_exit == OUT_RELEASE)
		{
			j->state = JOB_DONE;
			j->outcome = OUT_RELEASE;
			j->finished_at = now_mono();
		}
		else
			command_outcome(j, db_max_output());
	}
	/* commands that were no longer ours are forgotten once they ended */
	for (int i = njobs - 1; i >= 0; i--)
		if (jobs[i]->state == JOB_DONE && jobs[i]->outcome == OUT_DROP)
			remove_job(i);
}

static void
start_commands(void)
{
	int			running = count_state(JOB_RUNNING);
	int			i;

	if (stopping)
		return;
	for (i = 0; i < njobs && running < O->concurrency; i++)
	{
		Job		   *j = jobs[i];

		if (j->state != JOB_QUEUED)
			continue;
		if (command_start(j, O))
		{
			running++;
			command_write_stdin(j);
			continue;
		}
		/* fork or pipe failed: the machine's trouble, so retryable */
		j->state = JOB_DONE;
		j->outcome = OUT_FAIL;
		j->error_code = xstrdup("command.start_failed");
		j->error_message = xstrdup(strerror(errno));
		j->retryable = true;
	}
}

/* The job is no longer ours: stop its command and forget it. */
static void
lose_job(int i, double now)
{
	Job		   *j = jobs[i];

	log_dropped(j, db_last_code());
	if (j->state == JOB_RUNNING && !j->exited)
	{
		j->on_exit = OUT_DROP;
		command_kill(j, now);
	}
	else
		remove_job(i);
}

/* ---- the connection ---- */

static void
kill_all_and_exit(void)
{
	int			i;

	for (i = 0; i < njobs; i++)
		if (jobs[i]->state == JOB_RUNNING && !jobs[i]->exited)
			kill(-jobs[i]->pid, SIGKILL);
	exit(EXIT_USAGE);
}

/* Returns true when connected. */
static bool
keep_connected(double now)
{
	char		err[600];

	if (db_connected())
		return true;
	if (disconnected_since < 0)
	{
		disconnected_since = now;
		backoff = BACKOFF_FIRST;
		next_reconnect = now;
		log_line("connection lost (%s); reconnecting", db_last_error());
	}
	if (now < next_reconnect)
		return false;
	if (db_connect(O, err, sizeof(err)))
	{
		log_line("reconnected after %.1f s", now - disconnected_since);
		disconnected_since = -1;
		woken = true;			/* a notification may have been missed */
		return true;
	}
	if (now - disconnected_since >= O->reconnect)
	{
		log_line("giving up after %.0f s without the database: %s",
				 now - disconnected_since, err);
		kill_all_and_exit();
	}
	next_reconnect = now + backoff;
	backoff = backoff * 2 > BACKOFF_MAX ? BACKOFF_MAX : backoff * 2;
	return false;
}

/* ---- heartbeats ---- */

/*
 * Every held job is heartbeated until its outcome is acknowledged, a
 * finished one too: with --batch, or during a report's retry backoff, an
 * outcome may wait longer than the lease.
 */
static void
heartbeats(double now)
{
	int			i;

	for (i = njobs - 1; i >= 0 && db_connected(); i--)
	{
		Job		   *j = jobs[i];
		double		every = j->timeout_seconds / 3.0;
		DbStatus	st;

		if (j->on_exit == OUT_DROP || j->outcome == OUT_DROP || now < j->next_heartbeat)
			continue;
		st = db_heartbeat(j);
		if (st == DB_OK)
		{
			j->next_heartbeat = now + (every < 0.1 ? 0.1 : every);
			j->lease_until = now + j->timeout_seconds;
		}
		else if (st == DB_JOB_GONE)
			lose_job(i, now);
		else if (st != DB_CONN)
		{
			log_line("heartbeat of job %s: %s", j->id, db_last_error());
			j->next_heartbeat = now + 1;
		}
	}
}

/* ---- claims ---- */

static void
took_claim(Job **got, int n, int asked, double now)
{
	add_jobs(got, n);
	more_likely = n == asked;
	woken = false;
	next_poll = now + O->poll_ms / 1000.0;
}

static int
claim_size(int held_after)
{
	int			n = hold_limit - held_after;

	if (O->batch && n > O->batch)
		n = O->batch;
	return n;
}

static void
maybe_claim(double now)
{
	int			n = claim_size(njobs);
	Job		  **got;
	int			ngot;
	DbStatus	st;

	if (stopping || n <= 0 || !(woken || more_likely || now >= next_poll))
		return;
	st = db_claim(O, n, &got, &ngot);
	if (st == DB_OK)
		took_claim(got, ngot, n, now);
	else if (st != DB_CONN)
	{
		log_line("claim: %s", db_last_error());
		more_likely = woken = false;
		next_poll = now + O->poll_ms / 1000.0;
	}
}

/* ---- reports ---- */

/* 0.2 s doubling up to 5 s: a persistent error must not spin. */
static double
retry_delay(Job *j)
{
	double		d = RETRY_DELAY;
	int			k;

	for (k = 0; k < j->report_tries && d < BACKOFF_MAX; k++)
		d *= 2;
	j->report_tries++;
	return d > BACKOFF_MAX ? BACKOFF_MAX : d;
}

/*
 * Reports one job's outcome; a success also claims when the worker wants
 * more work (allow_claim).  Returns false when the connection was lost.
 */
static bool
report_one(int i, bool allow_claim, double now)
{
	Job		   *j = jobs[i];
	Job		  **got = NULL;
	int			ngot = 0, n = 0;
	DbStatus	st;

	if (j->outcome == OUT_COMPLETE && allow_claim && !stopping)
	{
		n = claim_size(njobs - 1);
		st = db_complete_and_claim(O, j, n, &got, &ngot);
		if (st != DB_OK && st != DB_CONN && st != DB_JOB_GONE)
		{
			/*
			 * The whole statement was rolled back, and the error may come
			 * from the claim half: report the outcome alone, so that only
			 * an error of complete_job is blamed on the output.
			 */
			log_line("report of job %s with a claim: %s; reporting it alone",
					 j->id, db_last_error());
			n = 0;
			st = db_complete(j);
		}
	}
	else if (j->outcome == OUT_COMPLETE)
		st = db_complete(j);
	else if (j->outcome == OUT_FAIL)
		st = db_fail(j);
	else
		st = db_release(j);

	if (st == DB_OK || st == DB_JOB_GONE)
	{
		if (st == DB_OK)
			log_reported(j);
		else
			log_dropped(j, db_last_code());
		remove_job(i);
		if (n > 0)
			took_claim(got, ngot, n, now);
		else
			more_likely = true; /* a slot is free: claim right after */
		return true;
	}
	if (st == DB_INVALID && j->outcome == OUT_COMPLETE)
	{
		/* the server refused the output: fail the job for good instead */
		bool		too_large = strcmp(db_last_code(), "job.invalid_argument") == 0;

		free(j->output);
		j->output = NULL;
		j->outcome = OUT_FAIL;
		j->error_code = xstrdup(too_large ? "command.output_too_large"
								: "command.output_rejected");
		j->error_message = xstrdup(db_last_error());
		j->retryable = false;
		return report_one(i, allow_claim, now);
	}
	if (st == DB_INVALID)
	{
		/* would be refused again: say so once and let the lease expire */
		log_line("report of job %s refused: %s; giving it up", j->id, db_last_error());
		remove_job(i);
		return true;
	}
	if (st == DB_CONN)
		return false;
	/* e.g. workflow.release_conflict: retry, backing off up to 5 s */
	log_line("report of job %s: %s; retrying", j->id, db_last_error());
	j->retry_at = now + retry_delay(j);
	return true;
}

static bool
reportable(const Job *j, double now)
{
	if (j->retry_at > now)
		return false;
	if (j->state == JOB_DONE)
		return j->outcome != OUT_DROP;
	/* at a stop, claims not started are given back */
	return stopping && j->state == JOB_QUEUED;
}

static void
prepare_release(Job *j)
{
	j->state = JOB_DONE;
	j->outcome = OUT_RELEASE;
}

/* Without --batch: each outcome on its own, in one statement. */
static void
report_each(double now)
{
	int			i = 0;

	while (i < njobs && db_connected())
	{
		int			before = njobs;

		if (!reportable(jobs[i], now))
		{
			i++;
			continue;
		}
		if (jobs[i]->state == JOB_QUEUED)
			prepare_release(jobs[i]);
		if (!report_one(i, true, now))
			return;
		if (njobs < before)
			continue;			/* removed: the next job moved to i */
		i++;
	}
}

/* A finished job whose lease runs out within about one heartbeat period. */
static bool
lease_short(Job **done, int ndone, double now)
{
	int			i;

	for (i = 0; i < ndone; i++)
	{
		double		every = done[i]->timeout_seconds / 3.0;

		if (done[i]->lease_until - now <= (every < 0.1 ? 0.1 : every) + 0.5)
			return true;
	}
	return false;
}

static bool
batch_flush_due(Job **done, int ndone, double now)
{
	return ndone > 0 &&
		(ndone >= O->batch || count_state(JOB_QUEUED) == 0 || stopping ||
		 lease_short(done, ndone, now));
}

/* The outcomes a batch can carry: complete and fail, ready now. */
static int
collect_done(Job **done, double now)
{
	int			i, n = 0;

	for (i = 0; i < njobs; i++)
		if (jobs[i]->state == JOB_DONE && jobs[i]->retry_at <= now &&
			(jobs[i]->outcome == OUT_COMPLETE || jobs[i]->outcome == OUT_FAIL))
			done[n++] = jobs[i];
	return n;
}

static void
remove_ptr(Job *j)
{
	int			i;

	for (i = 0; i < njobs; i++)
		if (jobs[i] == j)
		{
			remove_job(i);
			return;
		}
}

/* The batch was refused as a whole: report its jobs one at a time. */
static void
report_batch_singly(Job **done, int ndone, double now)
{
	int			k, i;

	for (k = 0; k < ndone && db_connected(); k++)
		for (i = 0; i < njobs; i++)
			if (jobs[i] == done[k])
			{
				if (!report_one(i, false, now))
					return;
				break;
			}
}

/* With --batch: releases one by one, then outcomes and the claim at once. */
static void
report_batched(double now)
{
	Job		  **done, **got;
	int			ndone, ngot, n, i;
	DbStatus	st;

	for (i = 0; i < njobs && db_connected();)
	{
		Job		   *j = jobs[i];
		int			before = njobs;

		if (reportable(j, now) && (j->state == JOB_QUEUED || j->outcome == OUT_RELEASE))
		{
			prepare_release(j);
			if (!report_one(i, false, now))
				return;
			if (njobs < before)
				continue;
		}
		i++;
	}
	done = xmalloc(sizeof(Job *) * (njobs + 1));
	ndone = collect_done(done, now);
	if (!db_connected() || !batch_flush_due(done, ndone, now))
	{
		free(done);
		return;
	}
	n = stopping ? 0 : claim_size(njobs - ndone);
	st = db_report_batch(O, done, ndone, n, &got, &ngot);
	if (n > 0 && st != DB_OK && st != DB_CONN)
	{
		/* it may be the claim that failed: the outcomes alone */
		log_line("batch report with a claim: %s; reporting without it", db_last_error());
		n = 0;
		st = db_report_batch(O, done, ndone, 0, &got, &ngot);
	}
	if (st == DB_OK)
	{
		for (i = 0; i < ndone; i++)
		{
			if (done[i]->acked)
				log_reported(done[i]);
			else
				log_dropped(done[i], "skipped by the batch call");
			remove_ptr(done[i]);
		}
		if (n > 0)
			took_claim(got, ngot, n, now);
	}
	else if (st == DB_JOB_GONE || st == DB_INVALID)
		report_batch_singly(done, ndone, now);
	else if (st == DB_RETRY)
	{
		log_line("batch report: %s; retrying", db_last_error());
		for (i = 0; i < ndone; i++)
			done[i]->retry_at = now + retry_delay(done[i]);
	}
	free(done);
}

/* ---- signals and shutdown ---- */

static void
handle_signals(double now)
{
	int			seen = signals_seen;

	if (seen == signals_handled)
		return;
	if (signals_handled == 0)
	{
		stopping = true;
		grace_deadline = now + O->grace;
		log_line("stopping: no more claims; running commands get %.0f s", O->grace);
		signals_handled = 1;
	}
	/* two signals before the loop looked count as two */
	if (seen > signals_handled)
	{
		grace_deadline = now;
		log_line("second signal: stopping now");
	}
	signals_handled = seen;
}

/* After the grace period: kill what still runs; release it once it ended. */
static void
enforce_grace(double now)
{
	int			i;

	/*
	 * A command that ended since the loop last looked (the database calls
	 * in between can take a while) ended on its own: its outcome is
	 * reported, not released.
	 */
	if (stopping && now >= grace_deadline)
		reap_children();
	for (i = 0; i < njobs; i++)
	{
		Job		   *j = jobs[i];

		if (stopping && now >= grace_deadline && j->state == JOB_RUNNING &&
			!j->exited && j->kill_stage == 0)
		{
			j->on_exit = OUT_RELEASE;
			command_kill(j, now);
		}
		command_escalate(j, now);
	}
}

/* ---- poll ---- */

/*
 * When poll() must return.  Without a connection only what needs none
 * counts (reconnecting, killing, the grace period): heartbeats, reports and
 * claims wait for the reconnection, else a deadline already past would make
 * poll() return at once, again and again.
 */
static double
next_deadline(double now)
{
	double		t = now + 1.0;
	bool		connected = db_connected();
	bool		flush = O->batch == 0;
	int			i;

	if (connected && O->batch)
	{
		Job		  **done = xmalloc(sizeof(Job *) * (njobs + 1));

		flush = batch_flush_due(done, collect_done(done, now), now);
		free(done);
	}
	if (connected && !stopping && claim_size(njobs) > 0)
		t = (woken || more_likely) ? now : (next_poll < t ? next_poll : t);
	for (i = 0; i < njobs; i++)
	{
		Job		   *j = jobs[i];

		if (connected && j->on_exit != OUT_DROP && j->outcome != OUT_DROP)
		{
			double		hb = j->next_heartbeat > now + MIN_WAIT ? j->next_heartbeat : now + MIN_WAIT;
			double		rt = j->retry_at > now + MIN_WAIT ? j->retry_at : now + MIN_WAIT;

			if (hb < t)
				t = hb;
			if (j->state == JOB_DONE && flush && rt < t)
				t = rt;
		}
		if (j->kill_stage == 1 && j->kill_at < t)
			t = j->kill_at;
	}
	/* the grace period matters while a command is left to stop at its end */
	for (i = 0; stopping && i < njobs; i++)
		if (jobs[i]->state == JOB_RUNNING && !jobs[i]->exited &&
			jobs[i]->kill_stage == 0 && grace_deadline < t)
			t = grace_deadline;
	if (!connected && next_reconnect < t)
		t = next_reconnect;
	return t;
}

static void
add_fd(struct pollfd *fds, int *idx, int *n, int fd, short events, int job)
{
	fds[*n].fd = fd;
	fds[*n].events = events;
	fds[*n].revents = 0;
	idx[*n] = job;
	(*n)++;
}

static void
wait_for_events(double now)
{
	int			max = 2 + 3 * njobs;
	struct pollfd *fds = xmalloc(sizeof(struct pollfd) * max);
	int		   *idx = xmalloc(sizeof(int) * max);
	int			n = 0, i, timeout;
	double		t = next_deadline(now);

	add_fd(fds, idx, &n, wake_pipe[0], POLLIN, -1);
	if (db_connected())
		add_fd(fds, idx, &n, db_socket(), POLLIN, -2);
	for (i = 0; i < njobs; i++)
	{
		if (jobs[i]->state != JOB_RUNNING)
			continue;
		if (jobs[i]->in_fd >= 0)
			add_fd(fds, idx, &n, jobs[i]->in_fd, POLLOUT, i);
		if (jobs[i]->out_fd >= 0)
			add_fd(fds, idx, &n, jobs[i]->out_fd, POLLIN, i);
		if (jobs[i]->err_fd >= 0)
			add_fd(fds, idx, &n, jobs[i]->err_fd, POLLIN, i);
	}
	timeout = t <= now ? 0 : (int) ((t - now) * 1000) + 1;
	if (poll(fds, n, timeout) > 0)
	{
		for (i = 0; i < n; i++)
		{
			Job		   *j;

			if (fds[i].revents == 0)
				continue;
			if (idx[i] == -1)
			{
				char		drain[64];

				while (read(wake_pipe[0], drain, sizeof(drain)) > 0)
					;
				continue;
			}
			if (idx[i] == -2)
			{
				db_consume(&woken, O);
				continue;
			}
			j = jobs[idx[i]];
			if (fds[i].fd == j->in_fd)
				command_write_stdin(j);
			else if (fds[i].fd == j->out_fd || fds[i].fd == j->err_fd)
				command_read(j, fds[i].fd, db_max_output());
		}
	}
	free(fds);
	free(idx);
}

static void
make_wake_pipe(void)
{
	if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
	{
		fprintf(stderr, "workflow-worker: cannot create a pipe: %s\n", strerror(errno));
		exit(EXIT_USAGE);
	}
}

/* Runs until a stop request has been carried out; returns the exit status. */
int
run_loop(const Options *opts)
{
	O = opts;
	hold_limit = opts->batch > opts->concurrency ? opts->batch : opts->concurrency;
	make_wake_pipe();
	for (;;)
	{
		double		now = now_mono();

		handle_signals(now);
		reap_children();
		if (stopping && njobs == 0)
			return 0;
		if (keep_connected(now))
		{
			db_consume(&woken, O);
			heartbeats(now);
			if (O->batch)
				report_batched(now);
			else
				report_each(now);
			if (db_connected())
				maybe_claim(now);
		}
		start_commands();
		enforce_grace(now);
		if (stopping && njobs == 0)
			return 0;
		wait_for_events(now_mono());
	}
}
