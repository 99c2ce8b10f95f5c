/*-------------------------------------------------------------------------
 *
 * batch.c
 *	  complete_jobs and fail_jobs: finishing many jobs in one call.
 *
 * A batch locks and checks all its jobs first, then writes them with one
 * statement, with the statement trigger's cascade deferred to the end of
 * the call: the cascade and the run counters then run once for the whole
 * batch, and its run rows are locked once, in ascending run id.
 *
 * Locks, in order: the named job rows (FOR NO KEY UPDATE, ascending id);
 * the step rows of the jobs that become terminal (ascending id); the runs'
 * release locks, shared, in ascending run id.  Retries take no step row
 * and no release lock.  The cascade and run counters follow (cascade.c,
 * status.c).  A transaction that holds late locks takes the rows NOWAIT.
 * A confined caller's batch first checks that it may see every job, so
 * it never locks another organization's job.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_complete_jobs);
PG_FUNCTION_INFO_V1(workflow_fail_jobs);

static Datum CompleteJobs(PG_FUNCTION_ARGS);
static Datum FailJobs(PG_FUNCTION_ARGS);

#define WF_MAX_BATCH		10000	/* ids per complete_jobs or fail_jobs call */

typedef struct BatchItem
{
	pg_uuid_t	id;
	int			index;			/* position in the caller's arrays */
} BatchItem;

/*
 * A batch call's state: the caller's jobs sorted by id with their locked
 * state, and which of them it writes (finish) and returns (returned).
 */
typedef struct Batch
{
	int			n;
	BatchItem  *items;
	WfJobState *jobs;			/* jobs[i] belongs to items[i] */
	ItemPointerData *tids;		/* the row version locked for items[i] */
	Datum	   *tokens;			/* by the caller's index */
	bool	   *finish;
	bool	   *returned;
	void	   *arg;			/* the call's own arrays */
} Batch;

/*
 * Whether jobs[i], not RUNNING under its token, was finished by this very
 * call before.
 */
typedef bool (*BatchRepeatFn) (const Batch *batch, int i, int k);
/* Writes every job to finish in one statement. */
typedef void (*BatchWriteFn) (const Batch *batch);

/* the caller's arrays of complete_jobs */
typedef struct CompleteArgs
{
	Datum	   *outputs;		/* NULL when no outputs were passed */
	bool	   *output_nulls;
} CompleteArgs;

/* the caller's arrays of fail_jobs */
typedef struct FailArgs
{
	Datum	   *codes;
	char	  **messages;		/* truncated, NULL where none */
	bool		retryable;
} FailArgs;

static int	CompareBatchItem(const void *a, const void *b);
static int	DeconstructArg(FunctionCallInfo fcinfo, int n, const char *name,
						   Oid elemtype, Datum **elems, bool **nulls,
						   int expected);
static void ConfineBatch(Datum job_ids);
static void LockBatch(BatchItem *items, int n, WfJobState *jobs,
					  ItemPointerData *tids);
static void LockBatchSteps(WfJobState *jobs, bool *finish, int n);
static void BatchResult(FunctionCallInfo fcinfo, BatchItem *items,
						bool *returned, int n);
static void BatchLockAndClassify(Batch *batch, Datum *ids, int n,
								 BatchRepeatFn is_repeat);
static void BatchWrite(Batch *batch, bool *terminal, BatchWriteFn write);
static bool CompleteIsRepeat(const Batch *batch, int i, int k);
static void CompleteWrite(const Batch *batch);
static bool FailIsRepeat(const Batch *batch, int i, int k);
static void FailWrite(const Batch *batch);

/* CompareBatchItem orders batch items by job id. */
static int
CompareBatchItem(const void *a, const void *b)
{
	return WfUuidCompare(&((const BatchItem *) a)->id,
						 &((const BatchItem *) b)->id);
}

/*
 * DeconstructArg splits an array argument into its elements, checking
 * its length against the first array's (expected), or, for job_ids
 * itself (expected < 0), against WF_MAX_BATCH.
 */
static int
DeconstructArg(FunctionCallInfo fcinfo, int n, const char *name, Oid elemtype,
			   Datum **elems, bool **nulls, int expected)
{
	int			nelems;

	if (PG_ARGISNULL(n))
		wf_invalid_argument("%s must not be null", name);
	WfDeconstruct(PG_GETARG_ARRAYTYPE_P(n), elemtype, elems, nulls, &nelems);
	if (expected < 0 && nelems > WF_MAX_BATCH)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_BAD_INPUT),
				 errmsg(WF_JOB_INVALID_ARGUMENT ": %s has %d elements, more than %d",
						name, nelems, WF_MAX_BATCH),
				 errdetail("One call finishes at most %d jobs; split the batch.",
						   WF_MAX_BATCH)));
	if (expected >= 0 && nelems != expected)
		wf_invalid_argument("%s has %d elements but job_ids has %d",
							name, nelems, expected);
	return nelems;
}

/*
 * ConfineBatch raises job.not_found for the first job of a batch (uuid[])
 * that a confined caller may not see, before the batch locks anything: a
 * lock on another organization's busy job would make the call wait, which
 * a missing job never does.
 */
static void
ConfineBatch(Datum job_ids)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT j.id FROM workflow.job_queue j"
		" WHERE j.id" OP("=") "ANY ($1)"
		" AND NOT COALESCE(j.organization_id" OP("=") "ANY ($2), false)"
		" ORDER BY j.id LIMIT 1";
	static const Oid types[2] = {UUIDARRAYOID, UUIDARRAYOID};
	Datum		values[2];
	bool		unconfined;
	pg_uuid_t	hidden;

	values[0] = job_ids;
	values[1] = WfCallOrganizationsArray(&unconfined);
	if (unconfined)
		return;
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
	if (SPI_processed > 0)
	{
		WfResultUuid(0, 1, &hidden);
		wf_error(WF_SQLSTATE_NOT_FOUND, WF_JOB_NOT_FOUND, "job %s does not exist",
				 WfUuidString(&hidden));
	}
}

/*
 * LockBatch locks the named jobs in ascending id and reads their state
 * into jobs[] and the address of the row version it locked into tids[]
 * (in the order of items, which it sorts).  It raises
 * job.invalid_argument for a duplicate id and job.not_found for a missing
 * one.
 */
static void
LockBatch(BatchItem *items, int n, WfJobState *jobs, ItemPointerData *tids)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr nowait_plan = NULL;
	static char *sql = NULL;
	static char *nowait_sql = NULL;
	static const Oid types[1] = {UUIDARRAYOID};
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum		values[1];
	uint64		row = 0;

	qsort(items, n, sizeof(BatchItem), CompareBatchItem);
	for (int i = 0; i < n; i++)
	{
		if (i > 0 && WfUuidCompare(&items[i].id, &items[i - 1].id) == 0)
			wf_invalid_argument("job %s appears twice in one call",
								WfUuidString(&items[i].id));
		ids[i] = UUIDPGetDatum(&items[i].id);
	}
	if (sql == NULL)
	{
		sql = MemoryContextStrdup(TopMemoryContext,
								  psprintf("SELECT %s, j.ctid FROM workflow.job_queue j"
										   " WHERE j.id" OP("=") "ANY ($1)"
										   " ORDER BY j.id FOR NO KEY UPDATE",
										   WF_JOB_STATE_COLUMNS));
		nowait_sql = MemoryContextStrdup(TopMemoryContext,
										 psprintf("%s NOWAIT", sql));
	}
	values[0] = WfArray(ids, NULL, n, UUIDOID);
	ConfineBatch(values[0]);
	if (WfHoldsLateLocks())
		WfExecuteNowait(&nowait_plan, nowait_sql, 1, types, values, NULL);
	else
		WfExecute(&plan, sql, 1, types, values, NULL, false, 0);

	/* both sides are sorted by id: merge */
	for (int i = 0; i < n; i++)
	{
		pg_uuid_t	row_id;

		memset(&jobs[i], 0, sizeof(WfJobState));
		jobs[i].id = items[i].id;
		ItemPointerSetInvalid(&tids[i]);
		if (row < SPI_processed)
		{
			WfResultUuid(row, 1, &row_id);
			if (WfUuidCompare(&row_id, &items[i].id) == 0)
			{
				bool		isnull;
				Datum		tid = WfResultDatum(row, WF_JOB_STATE_NCOLUMNS + 1,
												&isnull);

				tids[i] = *(ItemPointer) DatumGetPointer(tid);
				WfReadJobState(row++, &jobs[i]);
			}
		}
	}
	pfree(ids);
}

/*
 * LockBatchSteps takes the step rows and then the release locks of the
 * jobs about to become terminal (finish[i]), in the engine's lock order,
 * before any job is written.  Retries need neither.
 */
static void
LockBatchSteps(WfJobState *jobs, bool *finish, int n)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr nowait_plan = NULL;
	static const char *sql =
		"SELECT s.id FROM workflow.workflow_steps s"
		" WHERE s.id" OP("=") "ANY ($1) ORDER BY s.id FOR NO KEY UPDATE";
	static const char *nowait_sql =
		"SELECT s.id FROM workflow.workflow_steps s"
		" WHERE s.id" OP("=") "ANY ($1) ORDER BY s.id FOR NO KEY UPDATE NOWAIT";
	static const Oid types[1] = {UUIDARRAYOID};
	Datum	   *steps = palloc(sizeof(Datum) * n);
	pg_uuid_t  *runs = palloc(sizeof(pg_uuid_t) * n);
	int			nsteps = 0;
	int			nruns = 0;
	Datum		values[1];

	for (int i = 0; i < n; i++)
	{
		if (!finish[i] || !jobs[i].has_step)
			continue;
		steps[nsteps++] = UUIDPGetDatum(&jobs[i].step_id);
		if (jobs[i].has_run)
			runs[nruns++] = jobs[i].run_id;
	}
	if (nsteps > 0)
	{
		values[0] = WfArray(steps, NULL, nsteps, UUIDOID);
		if (WfHoldsLateLocks())
			WfExecuteNowait(&nowait_plan, nowait_sql, 1, types, values, NULL);
		else
			WfExecute(&plan, sql, 1, types, values, NULL, false, 0);
	}
	qsort(runs, nruns, sizeof(pg_uuid_t), WfUuidCmpQsort);
	for (int i = 0; i < nruns; i++)
		if (i == 0 || WfUuidCompare(&runs[i], &runs[i - 1]) != 0)
			WfLockRunRelease(&runs[i], false, true);
	pfree(steps);
	pfree(runs);
}

/*
 * BatchResult returns the finished ids in ascending id order as the rows
 * of a SETOF uuid function.  It copies them into the call's tuplestore,
 * which lives in the caller's memory, and must run before SPI_finish:
 * items and returned are allocated in SPI's memory, which SPI_finish frees.
 */
static void
BatchResult(FunctionCallInfo fcinfo, BatchItem *items, bool *returned, int n)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	for (int i = 0; i < n; i++)
	{
		Datum		value;
		bool		isnull = false;

		if (!returned[i])
			continue;
		value = UUIDPGetDatum(&items[i].id);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value,
							 &isnull);
	}
}

/*
 * BatchLockAndClassify locks the jobs (ascending id) and decides each
 * one: not found raises; canceled or lease lost is skipped; an identical
 * repeat is returned without a write; anything else not RUNNING raises
 * job.not_running.  The caller is connected to SPI.
 */
static void
BatchLockAndClassify(Batch *batch, Datum *ids, int n, BatchRepeatFn is_repeat)
{
	batch->n = n;
	batch->items = palloc(sizeof(BatchItem) * n);
	for (int i = 0; i < n; i++)
	{
		memcpy(&batch->items[i].id, DatumGetUUIDP(ids[i]), sizeof(pg_uuid_t));
		batch->items[i].index = i;
	}
	batch->jobs = palloc(sizeof(WfJobState) * n);
	batch->tids = palloc(sizeof(ItemPointerData) * n);
	batch->finish = palloc0(sizeof(bool) * n);
	batch->returned = palloc0(sizeof(bool) * n);

	LockBatch(batch->items, n, batch->jobs, batch->tids);
	for (int i = 0; i < n; i++)
	{
		WfJobState *job = &batch->jobs[i];
		int			k = batch->items[i].index;
		pg_uuid_t  *token = DatumGetUUIDP(batch->tokens[k]);

		if (!job->found)
			WfCheckWorkerJob(job, token, false);
		if (WfCheckWorkerJob(job, token, true))
		{
			batch->finish[i] = true;
			batch->returned[i] = true;
			continue;
		}
		/* canceled or lease lost: skipped, unless a quiet repeat */
		if (strcmp(job->status, "CANCELED") == 0 || !job->has_token ||
			WfUuidCompare(&job->lease_token, token) != 0)
			continue;
		if (!is_repeat(batch, i, k))
			WfRaiseNotRunning(job);
		batch->returned[i] = true;
	}
}

/*
 * BatchWrite takes the step rows and release locks of the jobs that
 * become terminal, writes every job to finish, then runs the cascade and
 * the run counters once for the whole batch.  The jobs are written by one
 * statement, not one per job: each statement's executor start (its
 * triggers' WHEN clauses and the table's constraints read back from their
 * stored form) cost more than the row itself.
 */
static void
BatchWrite(Batch *batch, bool *terminal, BatchWriteFn write)
{
	int			defer;

	LockBatchSteps(batch->jobs, terminal, batch->n);
	defer = WfDeferDepth();
	WfDeferFinishBegin();
	PG_TRY();
	{
		for (int i = 0; i < batch->n; i++)
			if (batch->finish[i])
			{
				write(batch);
				break;
			}
	}
	PG_FINALLY();
	{
		WfDeferRestore(defer);
	}
	PG_END_TRY();
	WfFinishPending();
}

/* A SUCCEEDED job with the same output is a repeat of this completion. */
static bool
CompleteIsRepeat(const Batch *batch, int i, int k)
{
	CompleteArgs *args = batch->arg;
	const WfJobState *job = &batch->jobs[i];
	bool		out_null = args->outputs == NULL || args->output_nulls[k];

	return strcmp(job->status, "SUCCEEDED") == 0 &&
		WfJsonbEqual(job->output, job->output_null,
					 out_null ? (Datum) 0 : args->outputs[k], out_null);
}

/*
 * CompleteWrite completes every job to finish, with its output.  It finds
 * each row by the address of the version LockBatch locked, which nobody
 * else can have moved since: a lookup by id would descend the primary key
 * again, through an entry for every earlier version of the job.
 */
static void
CompleteWrite(const Batch *batch)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.job_queue j SET status = 'SUCCEEDED', output = x.output,"
		" finished_at = pg_catalog.statement_timestamp(),"
		" updated_at = pg_catalog.statement_timestamp()"
		" FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.tid[]),"
		"  pg_catalog.unnest($2::pg_catalog.jsonb[])) AS x(tid, output)"
		" WHERE j.ctid" OP("=") "x.tid";
	static const Oid types[2] = {TIDARRAYOID, JSONBARRAYOID};
	CompleteArgs *args = batch->arg;
	Datum	   *ids = palloc(sizeof(Datum) * batch->n);
	Datum	   *outputs = palloc(sizeof(Datum) * batch->n);
	bool	   *output_nulls = palloc(sizeof(bool) * batch->n);
	Datum		values[2];
	int			m = 0;

	for (int i = 0; i < batch->n; i++)
	{
		int			k = batch->items[i].index;

		if (!batch->finish[i])
			continue;
		ids[m] = PointerGetDatum(&batch->tids[i]);
		output_nulls[m] = args->outputs == NULL || args->output_nulls[k];
		outputs[m] = output_nulls[m] ? (Datum) 0 : args->outputs[k];
		m++;
	}
	values[0] = WfArray(ids, NULL, m, TIDOID);
	values[1] = WfArray(outputs, output_nulls, m, JSONBOID);
	WfExecuteGeneric(&plan, sql, 2, types, values, NULL);
	pfree(ids);
	pfree(outputs);
	pfree(output_nulls);
}

/* workflow_complete_jobs completes many jobs in one transaction. */
static Datum
CompleteJobs(PG_FUNCTION_ARGS)
{
	Datum	   *ids;
	bool	   *id_nulls;
	bool	   *token_nulls;
	CompleteArgs args = {NULL, NULL};
	Batch		batch;
	int			n;

	WfRequireReadCommitted();
	n = DeconstructArg(fcinfo, 0, "job_ids", UUIDOID, &ids, &id_nulls, -1);
	DeconstructArg(fcinfo, 1, "lease_tokens", UUIDOID, &batch.tokens,
				   &token_nulls, n);
	if (!PG_ARGISNULL(2))
		DeconstructArg(fcinfo, 2, "outputs", JSONBOID, &args.outputs,
					   &args.output_nulls, n);
	for (int i = 0; i < n; i++)
	{
		if (id_nulls[i] || token_nulls[i])
			wf_invalid_argument("job_ids and lease_tokens must not contain NULL");
		if (args.outputs != NULL && !args.output_nulls[i])
			WfCheckJsonbSize(args.outputs[i], "output");
	}

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (n == 0)
		return (Datum) 0;

	batch.arg = &args;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	BatchLockAndClassify(&batch, ids, n, CompleteIsRepeat);
	BatchWrite(&batch, batch.finish, CompleteWrite);
	BatchResult(fcinfo, batch.items, batch.returned, n);
	SPI_finish();
	return (Datum) 0;
}

/* A FAILED job with the same code and message is a repeat of this failure. */
static bool
FailIsRepeat(const Batch *batch, int i, int k)
{
	FailArgs   *args = batch->arg;

	return WfIsFailRepeat(&batch->jobs[i], TextDatumGetCString(args->codes[k]),
						args->messages[k]);
}

/* FailWrite records a failed attempt of every job to finish. */
static void
FailWrite(const Batch *batch)
{
	FailArgs   *args = batch->arg;
	const WfJobState **jobs = palloc(sizeof(WfJobState *) * batch->n);
	Datum	   *codes = palloc(sizeof(Datum) * batch->n);
	Datum	   *messages = palloc(sizeof(Datum) * batch->n);
	bool	   *message_nulls = palloc(sizeof(bool) * batch->n);
	int			m = 0;

	for (int i = 0; i < batch->n; i++)
	{
		int			k = batch->items[i].index;

		if (!batch->finish[i])
			continue;
		jobs[m] = &batch->jobs[i];
		codes[m] = args->codes[k];
		message_nulls[m] = args->messages[k] == NULL;
		messages[m] = message_nulls[m] ? (Datum) 0 :
			CStringGetTextDatum(args->messages[k]);
		m++;
	}
	WfFailJobRows(m, jobs, codes, messages, message_nulls, args->retryable);
}

/* workflow_fail_jobs records failed attempts of many jobs at once. */
static Datum
FailJobs(PG_FUNCTION_ARGS)
{
	Datum	   *ids;
	bool	   *id_nulls;
	bool	   *token_nulls;
	bool	   *code_nulls;
	Datum	   *messages;
	bool	   *message_nulls;
	FailArgs	args;
	Batch		batch;
	bool	   *terminal;
	int			n;

	WfRequireReadCommitted();
	n = DeconstructArg(fcinfo, 0, "job_ids", UUIDOID, &ids, &id_nulls, -1);
	DeconstructArg(fcinfo, 1, "lease_tokens", UUIDOID, &batch.tokens,
				   &token_nulls, n);
	DeconstructArg(fcinfo, 2, "error_codes", TEXTOID, &args.codes, &code_nulls, n);
	DeconstructArg(fcinfo, 3, "error_messages", TEXTOID, &messages,
				   &message_nulls, n);
	if (PG_ARGISNULL(4))
		wf_invalid_argument("retryable must not be null");
	args.retryable = PG_GETARG_BOOL(4);
	args.messages = palloc(sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		if (id_nulls[i] || token_nulls[i])
			wf_invalid_argument("job_ids and lease_tokens must not contain NULL");
		if (code_nulls[i])
			wf_invalid_argument("error_codes must not contain NULL");
		args.messages[i] = message_nulls[i] ? NULL :
			WfTruncateMessage(TextDatumGetCString(messages[i]));
	}

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (n == 0)
		return (Datum) 0;

	batch.arg = &args;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	BatchLockAndClassify(&batch, ids, n, FailIsRepeat);

	/* retries take no step row and no release lock */
	terminal = palloc0(sizeof(bool) * n);
	for (int i = 0; i < n; i++)
		terminal[i] = batch.finish[i] &&
			(!args.retryable || batch.jobs[i].attempt >= batch.jobs[i].max_attempts);
	BatchWrite(&batch, terminal, FailWrite);
	BatchResult(fcinfo, batch.items, batch.returned, n);
	SPI_finish();
	return (Datum) 0;
}

/*
 * The SQL-callable entry points: each body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
WF_OWNER_ENTRY(workflow_complete_jobs, CompleteJobs)
WF_OWNER_ENTRY(workflow_fail_jobs, FailJobs)
