/*
 * db.c: the database side: the connection (and its session settings), the
 * SQL calls of the worker, and the sorting of their errors into what the
 * loop must do: a job that is no longer ours (drop it), a lost connection
 * (keep the result, reconnect, repeat), or anything else (retry later).
 *
 * Every statement is schema-qualified and sent with PQexecParams and text
 * parameters; arrays are sent as array literals.
 */
#include "worker.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

static PGconn *conn;
static size_t max_output = DEFAULT_MAX_OUTPUT;
static char last_error[600];
static char last_code[64];

/* The columns every claim returns, in this order (see parse_claimed). */
#define CLAIM_COLUMNS \
	"c.id, c.lease_token, c.attempt, c.job_type, c.payload, " \
	"c.timeout_seconds, c.workflow_run_id, " \
	"workflow.job_step_key(c.id, c.lease_token), "
#define INPUTS_COLUMN "workflow.job_inputs(c.id, c.lease_token)"
#define NO_INPUTS_COLUMN "NULL::jsonb"

const char *
db_last_error(void)
{
	return last_error;
}

const char *
db_last_code(void)
{
	return last_code;
}

bool
db_connected(void)
{
	return conn != NULL;
}

int
db_socket(void)
{
	return conn ? PQsocket(conn) : -1;
}

size_t
db_max_output(void)
{
	return max_output;
}

void
db_disconnect(void)
{
	if (conn)
		PQfinish(conn);
	conn = NULL;
}

static void
set_error(const char *msg)
{
	size_t		n;

	snprintf(last_error, sizeof(last_error), "%s", msg ? msg : "unknown error");
	/* one line: libpq messages end with a newline and may have several */
	for (n = 0; last_error[n]; n++)
		if (last_error[n] == '\n')
			last_error[n] = ' ';
	while (n > 0 && last_error[n - 1] == ' ')
		last_error[--n] = '\0';
}

/* Best effort: a server without the setting keeps the 1 MB default. */
static void
read_max_output(void)
{
	PGresult   *res;

	PQclear(PQexec(conn, "SELECT workflow.uuid_v7()"));	/* loads the library */
	res = PQexec(conn, "SELECT pg_catalog.current_setting('workflow.max_payload_bytes', true)");
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		!PQgetisnull(res, 0, 0))
	{
		long		v = strtol(PQgetvalue(res, 0, 0), NULL, 10);

		if (v > 0)
			max_output = (size_t) v;
	}
	PQclear(res);
}

static bool
exec_simple(const char *sql)
{
	PGresult   *res = PQexec(conn, sql);
	bool		ok = PQresultStatus(res) == PGRES_COMMAND_OK ||
		PQresultStatus(res) == PGRES_TUPLES_OK;

	if (!ok)
		set_error(PQerrorMessage(conn));
	PQclear(res);
	return ok;
}

/* The server's notices, in the worker's log format, on one line. */
static void
log_notice(void *arg, const char *message)
{
	char		line[600];
	size_t		n;

	(void) arg;
	snprintf(line, sizeof(line), "%s", message);
	for (n = 0; line[n]; n++)
		if (line[n] == '\n')
			line[n] = ' ';
	while (n > 0 && line[n - 1] == ' ')
		line[--n] = '\0';
	log_line("server: %s", line);
}

/*
 * Connects; the DSN may override the defaults placed before it (libpq keeps
 * the last value of a repeated keyword), but not client_encoding, placed
 * after it: payloads, outputs and messages are UTF-8 whatever the
 * database's encoding.
 */
bool
db_connect(const Options *opts, char *err, size_t errlen)
{
	const char *keys[] = {"fallback_application_name", "connect_timeout", "dbname",
	"client_encoding", NULL};
	const char *vals[] = {"workflow-worker", "10", opts->dsn, "UTF8", NULL};

	if (opts->dsn == NULL)
	{
		/* no DSN: the environment's defaults, and still UTF-8 */
		keys[2] = "client_encoding";
		vals[2] = "UTF8";
		keys[3] = NULL;
	}
	db_disconnect();
	conn = PQconnectdbParams(keys, vals, 1);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		set_error(PQerrorMessage(conn));
		snprintf(err, errlen, "%s", last_error);
		db_disconnect();
		return false;
	}
	PQsetNoticeProcessor(conn, log_notice, NULL);
	/* commands must not inherit the socket */
	fcntl(PQsocket(conn), F_SETFD, FD_CLOEXEC);
	read_max_output();
	/*
	 * The engine refuses any other isolation level; a database or role
	 * default of a stricter one must not make every call fail.
	 */
	if (!exec_simple("SET default_transaction_isolation = 'read committed'") ||
		!exec_simple("SET workflow.notify_jobs = on") ||
		!exec_simple("LISTEN workflow_jobs"))
	{
		snprintf(err, errlen, "%s", last_error);
		db_disconnect();
		return false;
	}
	return true;
}

/* Reads what the server sent; sets *woken when one of our types is due. */
bool
db_consume(bool *woken, const Options *opts)
{
	PGnotify   *n;

	if (conn == NULL)
		return false;
	if (!PQconsumeInput(conn))
	{
		set_error(PQerrorMessage(conn));
		db_disconnect();
		return false;
	}
	while ((n = PQnotifies(conn)) != NULL)
	{
		int			i;

		for (i = 0; i < opts->ntypes; i++)
			if (strcmp(n->extra, opts->types[i]) == 0)
				*woken = true;
		PQfreemem(n);
	}
	return true;
}

static bool
is_job_gone(const char *code)
{
	return strcmp(code, "job.canceled") == 0 || strcmp(code, "job.lease_lost") == 0 ||
		strcmp(code, "job.not_found") == 0 || strcmp(code, "job.not_running") == 0;
}

/*
 * Sorts a result.  The extension's errors start with their code and a
 * colon; job.lease_lost shares SQLSTATE 40001 with workflow.release_conflict,
 * so the code, not the SQLSTATE, says whether the job is gone.
 */
static DbStatus
classify(PGresult *res)
{
	ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	const char *sqlstate, *primary, *colon;

	last_code[0] = '\0';
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return DB_OK;
	set_error(res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
	sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	if (PQstatus(conn) != CONNECTION_OK || sqlstate == NULL ||
		strncmp(sqlstate, "08", 2) == 0 || strncmp(sqlstate, "57P", 3) == 0)
	{
		db_disconnect();
		return DB_CONN;
	}
	primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	if (primary && (colon = strchr(primary, ':')) != NULL &&
		(size_t) (colon - primary) < sizeof(last_code))
	{
		memcpy(last_code, primary, (size_t) (colon - primary));
		last_code[colon - primary] = '\0';
	}
	if (is_job_gone(last_code))
		return DB_JOB_GONE;
	/*
	 * Arguments the server refuses (an output too large, or JSON it does not
	 * take: data exceptions, program limits) would be refused again.
	 */
	if (strcmp(last_code, "job.invalid_argument") == 0 ||
		strncmp(sqlstate, "22", 2) == 0 || strncmp(sqlstate, "54", 2) == 0)
		return DB_INVALID;
	return DB_RETRY;
}

static DbStatus
run(const char *sql, int n, const char *const *params, PGresult **out)
{
	PGresult   *res;
	DbStatus	st;

	if (conn == NULL)
	{
		set_error("not connected");
		return DB_CONN;
	}
	res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
	st = classify(res);
	if (out && st == DB_OK)
		*out = res;
	else
		PQclear(res);
	return st;
}

/* Appends one element of an array literal, quoted, or NULL. */
static void
array_elem(Buf *b, const char *s)
{
	if (b->len > 1)
		buf_puts(b, ",");
	if (s == NULL)
	{
		buf_puts(b, "NULL");
		return;
	}
	buf_puts(b, "\"");
	for (; *s; s++)
	{
		if (*s == '"' || *s == '\\')
			buf_append(b, "\\", 1);
		buf_append(b, s, 1);
	}
	buf_puts(b, "\"");
}

static char *
types_literal(const Options *opts)
{
	Buf			b = {0};
	int			i;

	buf_puts(&b, "{");
	for (i = 0; i < opts->ntypes; i++)
		array_elem(&b, opts->types[i]);
	buf_puts(&b, "}");
	return buf_steal(&b);
}

static char *
dup_cell(PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? NULL : xstrdup(PQgetvalue(res, row, col));
}

/* Turns the rows of a claim into held jobs. */
static void
parse_claimed(PGresult *res, Job ***out, int *nout)
{
	int			i, n = PQntuples(res);
	double		now = now_mono();

	*out = n ? xmalloc(sizeof(Job *) * n) : NULL;
	*nout = n;
	for (i = 0; i < n; i++)
	{
		Job		   *j = xmalloc(sizeof(Job));

		memset(j, 0, sizeof(Job));
		snprintf(j->id, sizeof(j->id), "%s", PQgetvalue(res, i, 0));
		snprintf(j->token, sizeof(j->token), "%s", PQgetvalue(res, i, 1));
		j->attempt = atoi(PQgetvalue(res, i, 2));
		j->type = xstrdup(PQgetvalue(res, i, 3));
		j->payload = xstrdup(PQgetvalue(res, i, 4));
		j->timeout_seconds = atoi(PQgetvalue(res, i, 5));
		j->run_id = dup_cell(res, i, 6);
		j->step_key = dup_cell(res, i, 7);
		j->inputs = dup_cell(res, i, 8);
		j->state = JOB_QUEUED;
		j->claimed_at = now;
		j->in_fd = j->out_fd = j->err_fd = -1;
		j->pid = -1;
		(*out)[i] = j;
	}
}

static char *
claim_sql(const Options *opts, const char *from)
{
	Buf			b = {0};

	buf_printf(&b, "SELECT " CLAIM_COLUMNS "%s FROM %s c",
			   opts->with_inputs ? INPUTS_COLUMN : NO_INPUTS_COLUMN, from);
	return buf_steal(&b);
}

/*
 * claim_call runs a statement that claims (claim or complete_and_claim,
 * wrapped by claim_sql) and parses the jobs it returned.
 */
static DbStatus
claim_call(const char *sql, int nparams, const char *const *params,
		   Job ***out, int *nout)
{
	PGresult   *res = NULL;
	DbStatus	st;

	*nout = 0;
	*out = NULL;
	st = run(sql, nparams, params, &res);
	if (st == DB_OK)
	{
		parse_claimed(res, out, nout);
		PQclear(res);
	}
	return st;
}

DbStatus
db_claim(const Options *opts, int n, Job ***out, int *nout)
{
	char		size[16];
	char	   *types = types_literal(opts);
	char	   *sql = claim_sql(opts, "workflow.claim($1, $2::text[], $3::integer, $4::uuid, $5)");
	const char *params[5];
	DbStatus	st;

	snprintf(size, sizeof(size), "%d", n);
	params[0] = opts->worker_id;
	params[1] = types;
	params[2] = size;
	params[3] = opts->organization;
	params[4] = opts->stage;
	st = claim_call(sql, 5, params, out, nout);
	free(sql);
	free(types);
	return st;
}

DbStatus
db_complete_and_claim(const Options *opts, Job *job, int n, Job ***out, int *nout)
{
	char		size[16];
	char	   *types = types_literal(opts);
	char	   *sql = claim_sql(opts,
								"workflow.complete_and_claim($1::uuid, $2::uuid, $3::jsonb, $4, "
								"$5::text[], $6::integer, $7::uuid, $8)");
	const char *params[8];
	DbStatus	st;

	snprintf(size, sizeof(size), "%d", n);
	params[0] = job->id;
	params[1] = job->token;
	params[2] = job->output;
	params[3] = opts->worker_id;
	params[4] = types;
	params[5] = size;
	params[6] = opts->organization;
	params[7] = opts->stage;
	st = claim_call(sql, 8, params, out, nout);
	free(sql);
	free(types);
	return st;
}

DbStatus
db_complete(Job *job)
{
	const char *params[3] = {job->id, job->token, job->output};

	return run("SELECT workflow.complete_job($1::uuid, $2::uuid, $3::jsonb)", 3, params, NULL);
}

DbStatus
db_fail(Job *job)
{
	const char *params[5] = {job->id, job->token, job->error_code, job->error_message,
	job->retryable ? "true" : "false"};

	return run("SELECT workflow.fail_job($1::uuid, $2::uuid, $3, $4, $5::boolean)",
			   5, params, NULL);
}

DbStatus
db_release(Job *job)
{
	const char *params[2] = {job->id, job->token};

	return run("SELECT workflow.release_job($1::uuid, $2::uuid)", 2, params, NULL);
}

DbStatus
db_heartbeat(Job *job)
{
	const char *params[2] = {job->id, job->token};

	return run("SELECT workflow.heartbeat($1::uuid, $2::uuid)", 2, params, NULL);
}

/* Marks the jobs whose ids the batch call returned as acknowledged. */
static void
mark_acked(PGresult *res, Job **jobs, int njobs)
{
	int			r, i;

	for (r = 0; r < PQntuples(res); r++)
		for (i = 0; i < njobs; i++)
			if (strcmp(PQgetvalue(res, r, 0), jobs[i]->id) == 0)
				jobs[i]->acked = true;
}

static DbStatus
batch_complete(Job **done, int ndone)
{
	Buf			ids = {0}, tokens = {0}, outputs = {0};
	const char *params[3];
	PGresult   *res = NULL;
	DbStatus	st = DB_OK;
	int			i, n = 0;

	buf_puts(&ids, "{"), buf_puts(&tokens, "{"), buf_puts(&outputs, "{");
	for (i = 0; i < ndone; i++)
		if (done[i]->outcome == OUT_COMPLETE)
		{
			array_elem(&ids, done[i]->id);
			array_elem(&tokens, done[i]->token);
			array_elem(&outputs, done[i]->output);
			n++;
		}
	buf_puts(&ids, "}"), buf_puts(&tokens, "}"), buf_puts(&outputs, "}");
	params[0] = ids.data, params[1] = tokens.data, params[2] = outputs.data;
	if (n > 0)
		st = run("SELECT id FROM workflow.complete_jobs($1::uuid[], $2::uuid[], $3::jsonb[]) id",
				 3, params, &res);
	if (n > 0 && st == DB_OK)
	{
		mark_acked(res, done, ndone);
		PQclear(res);
	}
	buf_free(&ids), buf_free(&tokens), buf_free(&outputs);
	return st;
}

/* fail_jobs takes one retryable flag: one call per value of it. */
static DbStatus
batch_fail(Job **done, int ndone, bool retryable)
{
	Buf			ids = {0}, tokens = {0}, codes = {0}, msgs = {0};
	const char *params[5];
	PGresult   *res = NULL;
	DbStatus	st = DB_OK;
	int			i, n = 0;

	buf_puts(&ids, "{"), buf_puts(&tokens, "{"), buf_puts(&codes, "{"), buf_puts(&msgs, "{");
	for (i = 0; i < ndone; i++)
		if (done[i]->outcome == OUT_FAIL && done[i]->retryable == retryable)
		{
			array_elem(&ids, done[i]->id);
			array_elem(&tokens, done[i]->token);
			array_elem(&codes, done[i]->error_code);
			array_elem(&msgs, done[i]->error_message);
			n++;
		}
	buf_puts(&ids, "}"), buf_puts(&tokens, "}"), buf_puts(&codes, "}"), buf_puts(&msgs, "}");
	params[0] = ids.data, params[1] = tokens.data, params[2] = codes.data;
	params[3] = msgs.data, params[4] = retryable ? "true" : "false";
	if (n > 0)
		st = run("SELECT id FROM workflow.fail_jobs($1::uuid[], $2::uuid[], $3::text[], "
				 "$4::text[], $5::boolean) id", 5, params, &res);
	if (n > 0 && st == DB_OK)
	{
		mark_acked(res, done, ndone);
		PQclear(res);
	}
	buf_free(&ids), buf_free(&tokens), buf_free(&codes), buf_free(&msgs);
	return st;
}

/*
 * complete_jobs, fail_jobs and the next claim (n > 0) in one transaction:
 * one commit for the whole batch.  On an error everything is rolled back and
 * nothing is marked acknowledged or claimed.
 */
DbStatus
db_report_batch(const Options *opts, Job **done, int ndone, int n,
				Job ***out, int *nout)
{
	DbStatus	st;
	int			i;

	*out = NULL;
	*nout = 0;
	for (i = 0; i < ndone; i++)
		done[i]->acked = false;
	if ((st = run("BEGIN", 0, NULL, NULL)) != DB_OK)
		return st;
	st = batch_complete(done, ndone);
	if (st == DB_OK)
		st = batch_fail(done, ndone, true);
	if (st == DB_OK)
		st = batch_fail(done, ndone, false);
	if (st == DB_OK && n > 0)
		st = db_claim(opts, n, out, nout);
	if (st == DB_OK)
		st = run("COMMIT", 0, NULL, NULL);
	if (st != DB_OK)
	{
		char		saved[sizeof(last_error)], code[sizeof(last_code)];

		memcpy(saved, last_error, sizeof(saved));
		memcpy(code, last_code, sizeof(code));
		if (conn)
			PQclear(PQexec(conn, "ROLLBACK"));
		memcpy(last_error, saved, sizeof(saved));
		memcpy(last_code, code, sizeof(code));
		for (i = 0; i < ndone; i++)
			done[i]->acked = false;
		for (i = 0; i < *nout; i++)
			job_free((*out)[i]);
		free(*out);
		*out = NULL;
		*nout = 0;
	}
	return st;
}
