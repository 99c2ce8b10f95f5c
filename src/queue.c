/*-------------------------------------------------------------------------
 *
 * queue.c
 *	  The single-job calls of the job queue: enqueue, heartbeat,
 *	  complete_job, fail_job, release_job, cancel_job and lease expiry
 *	  (reap_expired); and the job state they share with claim.c and
 *	  batch.c (claim.c's complete_and_claim runs complete_job's parsing
 *	  and completion from here).  The calls that leave a job due now
 *	  report its type to the wake-ups (notify.c).
 *
 * Locks: the named job row, FOR NO KEY UPDATE (NOWAIT in a transaction
 * that holds late locks), never one a confined caller may not see: such a
 * call reads the job first.  The expiry sweep reads its candidates without
 * locks, only tries the runs' release locks (shared, ascending run id) and
 * skips busy runs, then locks the jobs it expires SKIP LOCKED.  Heartbeat,
 * retry and release take no release lock and no run row.  Terminal
 * changes reach the steps through the job_queue triggers (triggers.c).
 *
 * The lease_token fences stale workers.  Checks run in the order
 * job.not_found, job.canceled, job.lease_lost, job.not_running.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_enqueue);
PG_FUNCTION_INFO_V1(workflow_heartbeat);
PG_FUNCTION_INFO_V1(workflow_complete_job);
PG_FUNCTION_INFO_V1(workflow_fail_job);
PG_FUNCTION_INFO_V1(workflow_release_job);
PG_FUNCTION_INFO_V1(workflow_cancel_job);
PG_FUNCTION_INFO_V1(workflow_reap_expired);

static Datum Enqueue(PG_FUNCTION_ARGS);
static Datum Heartbeat(PG_FUNCTION_ARGS);
static Datum CompleteJob(PG_FUNCTION_ARGS);
static Datum FailJob(PG_FUNCTION_ARGS);
static Datum ReleaseJob(PG_FUNCTION_ARGS);
static Datum CancelJob(PG_FUNCTION_ARGS);
static Datum ReapExpired(PG_FUNCTION_ARGS);

#define WF_REAP_BATCH		100
#define WF_REAP_PAGES		10

static pg_uuid_t *ArgUuid(FunctionCallInfo fcinfo, int n, const char *name);
static void CheckJobType(text *job_type);
static void FetchJob(const pg_uuid_t *job_id, bool lock, WfJobState *job);
static void ConfineJob(const pg_uuid_t *job_id);
static void LockJobIfLate(const pg_uuid_t *job_id);
static int64 RetryDelayUs(int32 attempt);
static uint64 ReapCandidates(const pg_uuid_t *after);
static void ReadCandidates(uint64 n, pg_uuid_t **ids, pg_uuid_t **runs,
						   bool **has_run);
static int	ChooseReapable(uint64 n, pg_uuid_t *ids, const pg_uuid_t *runs,
						   const bool *has_run, Datum **chosen,
						   pg_uuid_t **chosen_runs);
static int	ExpireLeases(Datum *chosen, int nchosen);
static int	ReapPage(const pg_uuid_t *after, pg_uuid_t *last,
					 uint64 *ncandidates);

/* --- argument helpers --- */

/* ArgUuid returns a uuid argument, refusing NULL. */
static pg_uuid_t *
ArgUuid(FunctionCallInfo fcinfo, int n, const char *name)
{
	if (PG_ARGISNULL(n))
		wf_invalid_argument("%s must not be null", name);
	return PG_GETARG_UUID_P(n);
}

/* WfArgText returns a text argument, refusing NULL. */
text *
WfArgText(FunctionCallInfo fcinfo, int n, const char *name)
{
	if (PG_ARGISNULL(n))
		wf_invalid_argument("%s must not be null", name);
	return PG_GETARG_TEXT_PP(n);
}

/* WfCheckJsonbSize refuses a payload or output above the size limit. */
void
WfCheckJsonbSize(Datum value, const char *name)
{
	/* the detoasted size: a value read from a table may be compressed */
	Size		size = toast_raw_datum_size(value);

	if (size > (Size) wf_max_payload_bytes)
		wf_invalid_argument("%s is %zu bytes, more than workflow.max_payload_bytes (%d)",
							name, size, wf_max_payload_bytes);
}

/* CheckJobType refuses an empty or too long job_type. */
static void
CheckJobType(text *job_type)
{
	int			len = VARSIZE_ANY_EXHDR(job_type);

	if (len == 0)
		wf_invalid_argument("job_type must not be empty");
	if (len > wf_max_job_type_bytes)
		wf_invalid_argument("job_type is %d bytes, more than workflow.max_job_type_bytes (%d)",
							len, wf_max_job_type_bytes);
}

/* --- job state --- */

/*
 * WfReadJobState reads row of the last SPI result, selected with
 * WF_JOB_STATE_COLUMNS, into job.
 */
void
WfReadJobState(uint64 row, WfJobState *job)
{
	bool		isnull;

	job->found = true;
	WfResultUuid(row, 1, &job->id);
	job->status = WfResultText(row, 2);
	job->has_token = WfResultUuid(row, 3, &job->lease_token);
	job->output = WfResultDatum(row, 4, &isnull);
	job->output_null = isnull;
	if (!isnull)
		job->output = PointerGetDatum(PG_DETOAST_DATUM_COPY(job->output));
	job->error_code = WfResultText(row, 5);
	job->error_message = WfResultText(row, 6);
	job->attempt = WfResultInt32(row, 7);
	job->max_attempts = WfResultInt32(row, 8);
	job->has_step = WfResultUuid(row, 9, &job->step_id);
	job->has_run = WfResultUuid(row, 10, &job->run_id);
	job->has_org = WfResultUuid(row, 11, &job->org);
	/* another organization's job looks exactly like a missing one */
	if (!WfCallSeesOrganization(job->has_org ? &job->org : NULL))
		job->found = false;
}

/* FetchJob reads a job, locking it when lock is true. */
static void
FetchJob(const pg_uuid_t *job_id, bool lock, WfJobState *job)
{
	static SPIPlanPtr read_plan = NULL;
	static SPIPlanPtr lock_plan = NULL;
	static char *read_sql = NULL;
	static char *lock_sql = NULL;
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	if (read_sql == NULL)
	{
		read_sql = MemoryContextStrdup(TopMemoryContext,
									   psprintf("SELECT %s FROM workflow.job_queue j WHERE j.id" OP("=") "$1",
												WF_JOB_STATE_COLUMNS));
		lock_sql = MemoryContextStrdup(TopMemoryContext,
									   psprintf("%s FOR NO KEY UPDATE", read_sql));
	}
	values[0] = UUIDPGetDatum(job_id);
	/* another organization's job is not locked, let alone waited for */
	if (lock)
		ConfineJob(job_id);
	if (lock)
		LockJobIfLate(job_id);
	if (lock)
		WfExecute(&lock_plan, lock_sql, 1, types, values, NULL, false, 1);
	else
		WfExecute(&read_plan, read_sql, 1, types, values, NULL, false, 1);
	memset(job, 0, sizeof(WfJobState));
	job->id = *job_id;
	if (SPI_processed == 1)
		WfReadJobState(0, job);
}

/*
 * ConfineJob raises job.not_found for a job the confined caller may not
 * see, before a call locks it: a lock on another organization's busy job
 * would make the call wait, which a missing job never does.  The fast
 * paths of heartbeat, complete_job and release_job need no such read: their
 * UPDATE carries the caller's organizations.  Unconfined callers pay
 * nothing.
 */
static void
ConfineJob(const pg_uuid_t *job_id)
{
	WfJobState	job;

	if (!WfCallConfined())
		return;
	FetchJob(job_id, false, &job);
	if (!job.found)
		wf_error(WF_SQLSTATE_NOT_FOUND, WF_JOB_NOT_FOUND, "job %s does not exist",
				 WfUuidString(job_id));
}

/*
 * LockJobIfLate takes the job row NOWAIT when this transaction already
 * holds run rows from an earlier call (see WfHoldsLateLocks); the calls
 * that follow then find the row locked by us and never wait.
 */
static void
LockJobIfLate(const pg_uuid_t *job_id)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT 1 FROM workflow.job_queue j WHERE j.id" OP("=") "$1"
		" FOR NO KEY UPDATE NOWAIT";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	if (!WfHoldsLateLocks())
		return;
	/* another organization's job is not locked */
	ConfineJob(job_id);
	values[0] = UUIDPGetDatum(job_id);
	WfExecuteNowait(&plan, sql, 1, types, values, NULL);
}

/*
 * WfCheckWorkerJob raises the first error that applies to a worker naming
 * this job with this token, except job.not_running: it returns whether the
 * job is RUNNING under that token.
 */
bool
WfCheckWorkerJob(const WfJobState *job, const pg_uuid_t *token,
				 bool skip_soft)
{
	if (!job->found)
		wf_error(WF_SQLSTATE_NOT_FOUND, WF_JOB_NOT_FOUND, "job %s does not exist",
				 WfUuidString(&job->id));
	if (strcmp(job->status, "CANCELED") == 0)
	{
		if (skip_soft)
			return false;
		ereport(ERROR,
				(errcode(WF_SQLSTATE_WRONG_STATE),
				 errmsg(WF_JOB_CANCELED ": job %s was canceled", WfUuidString(&job->id)),
				 errdetail("Stop working on it; its result is not wanted.")));
	}
	if (!job->has_token || WfUuidCompare(&job->lease_token, token) != 0)
	{
		if (skip_soft)
			return false;
		ereport(ERROR,
				(errcode(WF_SQLSTATE_RETRY),
				 errmsg(WF_JOB_LEASE_LOST ": the lease on job %s is not held by this token",
						WfUuidString(&job->id)),
				 errdetail("The lease expired, or the job was retried or released; another worker may hold it now.")));
	}
	return strcmp(job->status, "RUNNING") == 0;
}

/* WfRaiseNotRunning raises job.not_running for a job in another status. */
void
WfRaiseNotRunning(const WfJobState *job)
{
	ereport(ERROR,
			(errcode(WF_SQLSTATE_WRONG_STATE),
			 errmsg(WF_JOB_NOT_RUNNING ": job %s is %s", WfUuidString(&job->id),
					job->status)));
}

/* --- enqueue --- */

/* workflow_enqueue adds a plain job and returns its id. */
static Datum
Enqueue(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"INSERT INTO workflow.job_queue (job_type, payload, priority, run_at,"
		" max_attempts, timeout_seconds, organization_id, stage)"
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id";
	static const Oid types[8] = {TEXTOID, JSONBOID, INT4OID, TIMESTAMPTZOID,
	INT4OID, INT4OID, UUIDOID, TEXTOID};
	Datum		values[8];
	char		nulls[8] = "        ";
	pg_uuid_t	id;
	const pg_uuid_t *org;

	values[0] = PointerGetDatum(WfArgText(fcinfo, 0, "job_type"));
	CheckJobType(DatumGetTextPP(values[0]));
	if (PG_ARGISNULL(1))
		wf_invalid_argument("payload must not be null");
	values[1] = PG_GETARG_DATUM(1);
	WfCheckJsonbSize(values[1], "payload");
	if (PG_ARGISNULL(2))
		wf_invalid_argument("priority must not be null");
	values[2] = PG_GETARG_DATUM(2);
	if (PG_ARGISNULL(3))
		wf_invalid_argument("run_at must not be null");
	values[3] = PG_GETARG_DATUM(3);
	if (PG_ARGISNULL(4) || PG_GETARG_INT32(4) < 1)
		wf_invalid_argument("max_attempts must be at least 1");
	values[4] = PG_GETARG_DATUM(4);
	if (PG_ARGISNULL(5) || PG_GETARG_INT32(5) < 1)
		wf_invalid_argument("timeout_seconds must be at least 1");
	values[5] = PG_GETARG_DATUM(5);
	org = WfCallOrganization(PG_ARGISNULL(6) ? NULL : PG_GETARG_UUID_P(6));
	values[6] = org ? UUIDPGetDatum(org) : (Datum) 0;
	nulls[6] = org ? ' ' : 'n';
	values[7] = PG_ARGISNULL(7) ? (Datum) 0 : PG_GETARG_DATUM(7);
	nulls[7] = PG_ARGISNULL(7) ? 'n' : ' ';

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	WfExecute(&plan, sql, 8, types, values, nulls, false, 0);
	WfResultUuid(0, 1, &id);
	SPI_finish();
	if (DatumGetTimestampTz(values[3]) <= GetCurrentStatementStartTimestamp())
		WfNotifyJobType(text_to_cstring(DatumGetTextPP(values[0])));
	PG_RETURN_DATUM(WfUuidDatum(&id));
}

/* --- heartbeat --- */

/* workflow_heartbeat extends a held lease and returns the new expiry. */
static Datum
Heartbeat(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.job_queue j SET"
		" leased_until = pg_catalog.statement_timestamp()" OP("+")
		"  pg_catalog.make_interval(secs => j.timeout_seconds)"
		" WHERE j.id" OP("=") "$1 AND j.lease_token" OP("=") "$2"
		" AND j.status" OP("=") "'RUNNING'"
		" AND ($3::pg_catalog.uuid[] IS NULL OR j.organization_id" OP("=") "ANY ($3))"
		" RETURNING j.leased_until";
	static const Oid types[3] = {UUIDOID, UUIDOID, UUIDARRAYOID};
	Datum		values[3];
	char		nulls[3] = "   ";
	bool		unconfined;
	bool		isnull;
	Datum		result;
	WfJobState	job;

	WfRequireReadCommitted();
	values[0] = UUIDPGetDatum(ArgUuid(fcinfo, 0, "job_id"));
	values[1] = UUIDPGetDatum(ArgUuid(fcinfo, 1, "lease_token"));

	values[2] = WfCallOrganizationsArray(&unconfined);
	nulls[2] = unconfined ? 'n' : ' ';

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	LockJobIfLate(DatumGetUUIDP(values[0]));
	WfExecute(&plan, sql, 3, types, values, nulls, false, 0);
	if (SPI_processed == 1)
	{
		result = WfResultDatum(0, 1, &isnull);
		/* timestamptz may be passed by reference on some builds */
		result = SPI_datumTransfer(result, FLOAT8PASSBYVAL, sizeof(TimestampTz));
		SPI_finish();
		PG_RETURN_DATUM(result);
	}
	FetchJob(DatumGetUUIDP(values[0]), false, &job);
	WfCheckWorkerJob(&job, DatumGetUUIDP(values[1]), false);
	WfRaiseNotRunning(&job);
	PG_RETURN_NULL();			/* not reached */
}

/* --- complete --- */

/*
 * WfParseCompletion reads complete_job's arguments (job_id, lease_token,
 * output: the first three of complete_job and of complete_and_claim) and
 * checks them, before anything is written.
 */
void
WfParseCompletion(FunctionCallInfo fcinfo, WfCompletion *completion)
{
	bool		unconfined;

	completion->values[0] = UUIDPGetDatum(ArgUuid(fcinfo, 0, "job_id"));
	completion->values[1] = UUIDPGetDatum(ArgUuid(fcinfo, 1, "lease_token"));
	memset(completion->nulls, ' ', sizeof(completion->nulls));
	if (PG_ARGISNULL(2))
	{
		completion->values[2] = (Datum) 0;
		completion->nulls[2] = 'n';
	}
	else
	{
		completion->values[2] = PG_GETARG_DATUM(2);
		WfCheckJsonbSize(completion->values[2], "output");
	}
	completion->values[3] = WfCallOrganizationsArray(&unconfined);
	completion->nulls[3] = unconfined ? 'n' : ' ';
}

/*
 * WfCompleteOne records the success of the job a parsed completion names,
 * or raises complete_job's error; an identical repeat of the call that
 * completed it returns quietly.
 */
void
WfCompleteOne(WfCompletion *completion)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.job_queue j SET status = 'SUCCEEDED', output = $3,"
		" finished_at = pg_catalog.statement_timestamp(),"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE j.id" OP("=") "$1 AND j.lease_token" OP("=") "$2"
		" AND j.status" OP("=") "'RUNNING'"
		" AND ($4::pg_catalog.uuid[] IS NULL OR j.organization_id" OP("=") "ANY ($4))";
	static const Oid types[4] = {UUIDOID, UUIDOID, JSONBOID, UUIDARRAYOID};
	Datum	   *values = completion->values;
	WfJobState	job;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	LockJobIfLate(DatumGetUUIDP(values[0]));
	WfExecute(&plan, sql, 4, types, values, completion->nulls, false, 0);
	if (SPI_processed == 0)
	{
		FetchJob(DatumGetUUIDP(values[0]), false, &job);
		WfCheckWorkerJob(&job, DatumGetUUIDP(values[1]), false);
		if (strcmp(job.status, "SUCCEEDED") != 0 ||
			!WfJsonbEqual(job.output, job.output_null, values[2],
						  completion->nulls[2] == 'n'))
			WfRaiseNotRunning(&job);
	}
	SPI_finish();
}

/* workflow_complete_job records a job's success. */
static Datum
CompleteJob(PG_FUNCTION_ARGS)
{
	WfCompletion completion;

	WfRequireReadCommitted();
	WfParseCompletion(fcinfo, &completion);
	WfCompleteOne(&completion);
	PG_RETURN_VOID();
}

/* --- fail --- */

/*
 * RetryDelay is the exponential backoff before attempt + 1: the base delay
 * doubled per attempt made, capped, then drawn from its upper half so that
 * workers failing together do not retry together.
 */
static int64
RetryDelayUs(int32 attempt)
{
	double		delay_ms = (double) wf_retry_base_delay_ms;

	for (int i = 1; i < attempt && delay_ms < wf_retry_max_delay_ms; i++)
		delay_ms *= 2;
	if (delay_ms > wf_retry_max_delay_ms)
		delay_ms = wf_retry_max_delay_ms;
	delay_ms *= 0.5 + 0.5 * pg_prng_double(&pg_global_prng_state);
	return (int64) (delay_ms * 1000.0);
}

/*
 * WfFailJobRows records one failed attempt of each of n locked, running
 * jobs in one statement: a retry goes back to QUEUED after its backoff,
 * anything else becomes FAILED.  codes[i] and messages[i] belong to
 * jobs[i]; message_nulls may be NULL when every message is given.
 */
void
WfFailJobRows(int n, const WfJobState *const *jobs, const Datum *codes,
			  const Datum *messages, const bool *message_nulls,
			  bool retryable)
{
	static WfDueStatement fail = {
		"UPDATE workflow.job_queue j SET"
		" status = CASE WHEN x.retry THEN 'QUEUED' ELSE 'FAILED' END::workflow.job_status,"
		" run_at = CASE WHEN x.retry THEN x.run_at ELSE j.run_at END,"
		" lease_token = CASE WHEN x.retry THEN NULL ELSE j.lease_token END,"
		" leased_until = NULL,"
		" worker_id = CASE WHEN x.retry THEN NULL ELSE j.worker_id END,"
		" last_error_code = x.code, last_error_message = x.message,"
		" finished_at = CASE WHEN x.retry THEN NULL"
		"  ELSE pg_catalog.statement_timestamp() END,"
		" updated_at = pg_catalog.statement_timestamp()"
		" FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.uuid[]),"
		"  pg_catalog.unnest($2::pg_catalog.bool[]),"
		"  pg_catalog.unnest($3::pg_catalog.timestamptz[]),"
		"  pg_catalog.unnest($4::pg_catalog.text[]),"
		"  pg_catalog.unnest($5::pg_catalog.text[]))"
		"  AS x(id, retry, run_at, code, message)"
		" WHERE j.id" OP("=") "x.id"};
	static const Oid types[5] = {UUIDARRAYOID, BOOLARRAYOID,
	TIMESTAMPTZARRAYOID, TEXTARRAYOID, TEXTARRAYOID};
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *retries = palloc(sizeof(Datum) * n);
	Datum	   *run_ats = palloc(sizeof(Datum) * n);
	Datum		values[5];

	for (int i = 0; i < n; i++)
	{
		bool		retry = retryable && jobs[i]->attempt < jobs[i]->max_attempts;

		ids[i] = UUIDPGetDatum(&jobs[i]->id);
		retries[i] = BoolGetDatum(retry);
		run_ats[i] = TimestampTzGetDatum(GetCurrentStatementStartTimestamp() +
										 (retry ? RetryDelayUs(jobs[i]->attempt) : 0));
	}
	values[0] = WfArray(ids, NULL, n, UUIDOID);
	values[1] = WfArray(retries, NULL, n, BOOLOID);
	values[2] = WfArray(run_ats, NULL, n, TIMESTAMPTZOID);
	values[3] = WfArray((Datum *) codes, NULL, n, TEXTOID);
	values[4] = WfArray((Datum *) messages, (bool *) message_nulls, n, TEXTOID);
	WfExecuteDue(&fail, 5, types, values, NULL);
	pfree(ids);
	pfree(retries);
	pfree(run_ats);
}

/* A repeat of the fail_job that left the job FAILED returns quietly. */
bool
WfIsFailRepeat(const WfJobState *job, const char *code,
			   const char *message)
{
	return strcmp(job->status, "FAILED") == 0 &&
		WfTextEqual(job->error_code, code) &&
		WfTextEqual(job->error_message, message);
}

/* workflow_fail_job records a failed attempt: retry later or FAILED. */
static Datum
FailJob(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *job_id;
	pg_uuid_t  *token;
	char	   *code;
	char	   *message = NULL;
	WfJobState	job;

	WfRequireReadCommitted();
	job_id = ArgUuid(fcinfo, 0, "job_id");
	token = ArgUuid(fcinfo, 1, "lease_token");
	code = text_to_cstring(WfArgText(fcinfo, 2, "error_code"));
	if (!PG_ARGISNULL(3))
		message = WfTruncateMessage(text_to_cstring(PG_GETARG_TEXT_PP(3)));
	if (PG_ARGISNULL(4))
		wf_invalid_argument("retryable must not be null");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	FetchJob(job_id, true, &job);
	if (!WfCheckWorkerJob(&job, token, false))
	{
		if (!WfIsFailRepeat(&job, code, message))
			WfRaiseNotRunning(&job);
	}
	else
	{
		const WfJobState *jobs[1] = {&job};
		Datum		codes[1] = {CStringGetTextDatum(code)};
		Datum		messages[1] = {message ? CStringGetTextDatum(message) : (Datum) 0};
		bool		message_nulls[1] = {message == NULL};

		WfFailJobRows(1, jobs, codes, messages, message_nulls, PG_GETARG_BOOL(4));
	}
	SPI_finish();
	PG_RETURN_VOID();
}

/* --- release --- */

/* workflow_release_job gives a claim back without using up an attempt. */
static Datum
ReleaseJob(PG_FUNCTION_ARGS)
{
	static WfDueStatement release = {
		"UPDATE workflow.job_queue j SET status = 'QUEUED',"
		" attempt = j.attempt" OP("-") "1,"
		" lease_token = NULL, leased_until = NULL, worker_id = NULL,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE j.id" OP("=") "$1 AND j.lease_token" OP("=") "$2"
		" AND j.status" OP("=") "'RUNNING'"
		" AND ($3::pg_catalog.uuid[] IS NULL OR j.organization_id" OP("=") "ANY ($3))"};
	static const Oid types[3] = {UUIDOID, UUIDOID, UUIDARRAYOID};
	Datum		values[3];
	char		nulls[3] = "   ";
	bool		unconfined;
	WfJobState	job;

	WfRequireReadCommitted();
	values[0] = UUIDPGetDatum(ArgUuid(fcinfo, 0, "job_id"));
	values[1] = UUIDPGetDatum(ArgUuid(fcinfo, 1, "lease_token"));
	values[2] = WfCallOrganizationsArray(&unconfined);
	nulls[2] = unconfined ? 'n' : ' ';

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	LockJobIfLate(DatumGetUUIDP(values[0]));
	if (WfExecuteDue(&release, 3, types, values, nulls) == 0)
	{
		FetchJob(DatumGetUUIDP(values[0]), false, &job);
		WfCheckWorkerJob(&job, DatumGetUUIDP(values[1]), false);
		WfRaiseNotRunning(&job);
	}
	SPI_finish();
	PG_RETURN_VOID();
}

/* --- cancel --- */

/* workflow_cancel_job cancels a QUEUED or RUNNING job (and its step). */
static Datum
CancelJob(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.job_queue j SET status = 'CANCELED',"
		" last_error_code = '" WF_JOB_CANCELED "', last_error_message = $2,"
		" leased_until = NULL,"
		" finished_at = pg_catalog.statement_timestamp(),"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE j.id" OP("=") "$1";
	static const Oid types[2] = {UUIDOID, TEXTOID};
	Datum		values[2];
	char		nulls[2] = "  ";
	WfJobState	job;

	WfRequireReadCommitted();
	values[0] = UUIDPGetDatum(ArgUuid(fcinfo, 0, "job_id"));
	if (PG_ARGISNULL(1))
	{
		values[1] = (Datum) 0;
		nulls[1] = 'n';
	}
	else
		values[1] = CStringGetTextDatum(WfTruncateMessage(text_to_cstring(PG_GETARG_TEXT_PP(1))));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	FetchJob(DatumGetUUIDP(values[0]), true, &job);
	if (!job.found)
		wf_error(WF_SQLSTATE_NOT_FOUND, WF_JOB_NOT_FOUND, "job %s does not exist",
				 WfUuidString(&job.id));
	if (strcmp(job.status, "CANCELED") == 0)
		wf_error(WF_SQLSTATE_WRONG_STATE, WF_JOB_CANCELED,
				 "job %s was canceled already", WfUuidString(&job.id));
	if (WF_TERMINAL_STATUS(job.status))
		WfRaiseNotRunning(&job);
	WfExecute(&plan, sql, 2, types, values, nulls, false, 0);
	SPI_finish();
	PG_RETURN_VOID();
}

/* --- lease expiry --- */

/*
 * reap_expired expires up to WF_REAP_BATCH leases that ran out: back to
 * QUEUED, or FAILED on the last attempt.  It reads a page of candidates
 * without locking them, tries each run's release lock (shared, ascending
 * run id) and skips busy runs, then locks only the jobs it will expire,
 * SKIP LOCKED and with the expiry re-checked.  So it never waits, and it
 * holds no row of a run it skipped.  A run whose expiry conflicts (the
 * last attempt of a job of a run that compensates on failure needs the
 * run's release lock exclusive, and a completion in flight holds it
 * shared) is skipped too: the page is expired again run by run.  Skipped
 * runs are picked up by a later call.
 */

/*
 * ReapCandidates reads up to WF_REAP_BATCH expired leases after the id
 * "after" (all when NULL), in id order, of the caller's organizations when
 * it is confined.  Nothing is locked yet.
 */
static uint64
ReapCandidates(const pg_uuid_t *after)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT j.id, j.workflow_run_id FROM workflow.job_queue j"
		" WHERE j.status" OP("=") "'RUNNING'"
		" AND j.leased_until" OP("<") "pg_catalog.statement_timestamp()"
		" AND ($2::pg_catalog.uuid IS NULL OR j.id" OP(">") "$2)"
		" ORDER BY j.id LIMIT $1";
	static const Oid types[2] = {INT4OID, UUIDOID};
	static SPIPlanPtr confined_plan = NULL;
	static const char *confined_sql =
		"SELECT j.id, j.workflow_run_id FROM workflow.job_queue j"
		" WHERE j.status" OP("=") "'RUNNING'"
		" AND j.leased_until" OP("<") "pg_catalog.statement_timestamp()"
		" AND ($2::pg_catalog.uuid IS NULL OR j.id" OP(">") "$2)"
		" AND j.organization_id" OP("=") "ANY ($3)"
		" ORDER BY j.id LIMIT $1";
	static const Oid confined_types[3] = {INT4OID, UUIDOID, UUIDARRAYOID};
	Datum		values[3];
	char		nulls[3] = "   ";
	bool		unconfined;

	values[0] = Int32GetDatum(WF_REAP_BATCH);
	values[1] = after ? UUIDPGetDatum(after) : (Datum) 0;
	nulls[1] = after ? ' ' : 'n';
	values[2] = WfCallOrganizationsArray(&unconfined);
	if (unconfined)
		WfExecute(&plan, sql, 2, types, values, nulls, false, 0);
	else
		WfExecute(&confined_plan, confined_sql, 3, confined_types, values,
				  nulls, false, 0);
	return SPI_processed;
}

/*
 * ReadCandidates copies the ids and runs of the n candidates that
 * ReapCandidates left in SPI_tuptable.
 */
static void
ReadCandidates(uint64 n, pg_uuid_t **ids, pg_uuid_t **runs, bool **has_run)
{
	*ids = palloc(sizeof(pg_uuid_t) * n);
	*runs = palloc(sizeof(pg_uuid_t) * n);
	*has_run = palloc(sizeof(bool) * n);
	for (uint64 i = 0; i < n; i++)
	{
		WfResultUuid(i, 1, &(*ids)[i]);
		(*has_run)[i] = WfResultUuid(i, 2, &(*runs)[i]);
	}
}

/*
 * ChooseReapable tries each run's release lock once, shared, in ascending
 * run id, and keeps the jobs of the runs it got and the plain jobs (whose
 * run in *chosen_runs is all zeros); the jobs of busy runs are left to a
 * later call.  Returns how many it chose.
 */
static int
ChooseReapable(uint64 n, pg_uuid_t *ids, const pg_uuid_t *runs,
			   const bool *has_run, Datum **chosen, pg_uuid_t **chosen_runs)
{
	bool	   *run_ok = WfTryLockRunsShared(runs, has_run, n);
	int			nchosen = 0;

	*chosen = palloc(sizeof(Datum) * n);
	*chosen_runs = palloc0(sizeof(pg_uuid_t) * n);
	for (uint64 i = 0; i < n; i++)
		if (!has_run[i] || run_ok[i])
		{
			if (has_run[i])
				(*chosen_runs)[nchosen] = runs[i];
			(*chosen)[nchosen++] = UUIDPGetDatum(&ids[i]);
		}
	pfree(run_ok);
	return nchosen;
}

/*
 * ExpireLeases locks the chosen jobs SKIP LOCKED, re-checks that their
 * lease ran out, and expires them: back to QUEUED, due when the lease
 * ended, or FAILED on the last attempt.  Returns how many it expired.
 */
static int
ExpireLeases(Datum *chosen, int nchosen)
{
	static WfDueStatement expire = {
		"WITH c AS (SELECT j.id FROM workflow.job_queue j"
		"  WHERE j.id" OP("=") "ANY ($1)"
		"  AND j.status" OP("=") "'RUNNING'"
		"  AND j.leased_until" OP("<") "pg_catalog.statement_timestamp()"
		"  ORDER BY j.id FOR NO KEY UPDATE SKIP LOCKED)"
		" UPDATE workflow.job_queue j SET"
		" status = CASE WHEN j.attempt" OP(">=") "j.max_attempts"
		"  THEN 'FAILED' ELSE 'QUEUED' END::workflow.job_status,"
		" run_at = CASE WHEN j.attempt" OP(">=") "j.max_attempts"
		"  THEN j.run_at ELSE j.leased_until END,"
		" finished_at = CASE WHEN j.attempt" OP(">=") "j.max_attempts"
		"  THEN pg_catalog.statement_timestamp() END,"
		" lease_token = NULL, leased_until = NULL, worker_id = NULL,"
		" last_error_code = '" WF_REASON_LEASE_EXPIRED "',"
		" last_error_message = 'the lease expired before the job finished',"
		" updated_at = pg_catalog.statement_timestamp()"
		" FROM c WHERE j.id" OP("=") "c.id"};
	static const Oid expire_types[1] = {UUIDARRAYOID};
	Datum		values[1];

	values[0] = WfArray(chosen, NULL, nchosen, UUIDOID);
	return (int) WfExecuteDue(&expire, 1, expire_types, values, NULL);
}

/*
 * ReapPage expires the expired leases among one page of candidates whose
 * runs' release locks it gets (tried once each, in ascending run id) and
 * whose rows nobody holds: the page at once, or, if that conflicts, run by
 * run, skipping the runs that conflict.  Returns how many it expired, and
 * the page's last id in *last.
 */
static int
ReapPage(const pg_uuid_t *after, pg_uuid_t *last, uint64 *ncandidates)
{
	uint64		n = ReapCandidates(after);
	pg_uuid_t  *ids;
	pg_uuid_t  *runs;
	bool	   *has_run;
	Datum	   *chosen;
	pg_uuid_t  *chosen_runs;
	int			nchosen;
	int			nexpired;

	*ncandidates = n;
	if (n == 0)
		return 0;
	ReadCandidates(n, &ids, &runs, &has_run);
	*last = ids[n - 1];
	nchosen = ChooseReapable(n, ids, runs, has_run, &chosen, &chosen_runs);
	if (nchosen == 0)
		return 0;
	nexpired = WfTryInSubtransaction(ExpireLeases, chosen, nchosen);
	if (nexpired < 0)
		nexpired = WfRunByRun(ExpireLeases, chosen, chosen_runs, nchosen);
	return nexpired;
}

/*
 * ReapExpired expires one page of leases that ran out.  A page whose
 * leases all belong to busy runs (or rows someone holds) does not end the
 * call: it goes on to the next page, up to WF_REAP_PAGES pages, so that 0
 * means no lease it could expire now is left among them.
 */
static Datum
ReapExpired(PG_FUNCTION_ARGS)
{
	pg_uuid_t	last;
	bool		has_last = false;
	uint64		n;
	int			expired = 0;

	WfRequireReadCommitted();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	for (int page = 0; page < WF_REAP_PAGES && expired == 0; page++)
	{
		CHECK_FOR_INTERRUPTS();
		expired = ReapPage(has_last ? &last : NULL, &last, &n);
		has_last = n > 0;
		if (n < WF_REAP_BATCH)
			break;
	}
	SPI_finish();
	PG_RETURN_INT32(expired);
}

/*
 * The SQL-callable entry points: each body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
WF_OWNER_ENTRY(workflow_enqueue, Enqueue)
WF_OWNER_ENTRY(workflow_heartbeat, Heartbeat)
WF_OWNER_ENTRY(workflow_complete_job, CompleteJob)
WF_OWNER_ENTRY(workflow_fail_job, FailJob)
WF_OWNER_ENTRY(workflow_release_job, ReleaseJob)
WF_OWNER_ENTRY(workflow_cancel_job, CancelJob)
WF_OWNER_ENTRY(workflow_reap_expired, ReapExpired)
