/*-------------------------------------------------------------------------
 *
 * queue.c
 *	  The job queue API: enqueue, claim, heartbeat, complete, fail,
 *	  release, cancel, lease expiry and the batch forms.
 *
 * Locks: job rows only, ascending id where a call takes several, with
 * FOR NO KEY UPDATE (SKIP LOCKED for claim and the expiry sweep).  The
 * batch calls also lock their steps' rows, then the runs' release locks
 * shared in ascending run id, before they write; the expiry sweep only
 * tries release locks and skips busy runs.  Claim, heartbeat, retry and
 * release take no release lock and no run row.  Terminal changes reach
 * the steps through the job_queue triggers (triggers.c).
 *
 * The lease_token fences stale workers.  Checks run in the order
 * job.not_found, job.canceled, job.lease_lost, job.not_running.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_enqueue);
PG_FUNCTION_INFO_V1(workflow_claim);
PG_FUNCTION_INFO_V1(workflow_heartbeat);
PG_FUNCTION_INFO_V1(workflow_complete_job);
PG_FUNCTION_INFO_V1(workflow_fail_job);
PG_FUNCTION_INFO_V1(workflow_release_job);
PG_FUNCTION_INFO_V1(workflow_cancel_job);
PG_FUNCTION_INFO_V1(workflow_reap_expired);
PG_FUNCTION_INFO_V1(workflow_complete_jobs);
PG_FUNCTION_INFO_V1(workflow_fail_jobs);

static Datum Enqueue(PG_FUNCTION_ARGS);
static Datum Claim(PG_FUNCTION_ARGS);
static Datum Heartbeat(PG_FUNCTION_ARGS);
static Datum CompleteJob(PG_FUNCTION_ARGS);
static Datum FailJob(PG_FUNCTION_ARGS);
static Datum ReleaseJob(PG_FUNCTION_ARGS);
static Datum CancelJob(PG_FUNCTION_ARGS);
static Datum ReapExpired(PG_FUNCTION_ARGS);
static Datum CompleteJobs(PG_FUNCTION_ARGS);
static Datum FailJobs(PG_FUNCTION_ARGS);

#define WF_MAX_CLAIM_BATCH	1000
#define WF_MAX_BATCH		10000	/* ids per complete_jobs or fail_jobs call */
#define WF_REAP_BATCH		100
#define WF_REAP_PAGES		10

/* What a worker-facing call needs to know about a job it names. */
typedef struct JobState
{
	pg_uuid_t	id;
	bool		found;
	char	   *status;
	bool		has_token;
	pg_uuid_t	lease_token;
	bool		output_null;
	Datum		output;
	char	   *error_code;
	char	   *error_message;
	int32		attempt;
	int32		max_attempts;
	bool		has_step;
	pg_uuid_t	step_id;
	bool		has_run;
	pg_uuid_t	run_id;
	bool		has_org;
	pg_uuid_t	org;
} JobState;

static void LockJobIfLate(const pg_uuid_t *job_id);
static void ConfineJob(const pg_uuid_t *job_id);
static void ConfineBatch(Datum job_ids);

static const char *job_state_columns =
	"j.id, j.status::pg_catalog.text, j.lease_token, j.output,"
	" j.last_error_code, j.last_error_message, j.attempt, j.max_attempts,"
	" j.workflow_step_id, j.workflow_run_id, j.organization_id";

/* --- argument helpers --- */

static pg_uuid_t *
ArgUuid(FunctionCallInfo fcinfo, int n, const char *name)
{
	if (PG_ARGISNULL(n))
		wf_invalid_argument("%s must not be null", name);
	return PG_GETARG_UUID_P(n);
}

static text *
ArgText(FunctionCallInfo fcinfo, int n, const char *name)
{
	if (PG_ARGISNULL(n))
		wf_invalid_argument("%s must not be null", name);
	return PG_GETARG_TEXT_PP(n);
}

static void
CheckJsonbSize(Datum value, const char *name)
{
	/* the detoasted size: a value read from a table may be compressed */
	Size		size = toast_raw_datum_size(value);

	if (size > (Size) wf_max_payload_bytes)
		wf_invalid_argument("%s is %zu bytes, more than workflow.max_payload_bytes (%d)",
							name, size, wf_max_payload_bytes);
}

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

static void
ReadJobState(uint64 row, JobState *job)
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
FetchJob(const pg_uuid_t *job_id, bool lock, JobState *job)
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
												job_state_columns));
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
	memset(job, 0, sizeof(JobState));
	job->id = *job_id;
	if (SPI_processed == 1)
		ReadJobState(0, job);
}

/*
 * ConfineJob raises job.not_found for a job the confined caller may not
 * see, before a call's fast path writes it by id and token.  Unconfined
 * callers pay nothing.
 */
static void
ConfineJob(const pg_uuid_t *job_id)
{
	JobState	job;

	if (!WfCallConfined())
		return;
	FetchJob(job_id, false, &job);
	if (!job.found)
		wf_error(WF_SQLSTATE_NOT_FOUND, WF_JOB_NOT_FOUND, "job %s does not exist",
				 WfUuidString(job_id));
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
	values[0] = UUIDPGetDatum(job_id);
	WfExecuteNowait(&plan, sql, 1, types, values, NULL);
}

/*
 * CheckWorkerJob raises the first error that applies to a worker naming
 * this job with this token, except job.not_running: it returns whether the
 * job is RUNNING under that token.
 */
static bool
CheckWorkerJob(const JobState *job, const pg_uuid_t *token, bool skip_soft)
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

static void
RaiseNotRunning(const JobState *job)
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

	values[0] = PointerGetDatum(ArgText(fcinfo, 0, "job_type"));
	CheckJobType(DatumGetTextPP(values[0]));
	if (PG_ARGISNULL(1))
		wf_invalid_argument("payload must not be null");
	values[1] = PG_GETARG_DATUM(1);
	CheckJsonbSize(values[1], "payload");
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
	PG_RETURN_DATUM(WfUuidDatum(&id));
}

/* --- claim --- */

/*
 * The claim statement for one filter combination: no type filter, one
 * type, or several; with or without organization and stage.  Each
 * combination has its own cached plan.  It returns the claimed rows as
 * columns, the select list of ClaimColumns.
 *
 * A filtered claim must read the claim index of its filter (by type, by
 * organization or by stage's hash), never the claim index over all types
 * with a filter on top: the statistics cannot tell that the due jobs of
 * other types may all sit in front, and such a plan walks every one of
 * them.  Ordering by the filter's columns does not prevent it (a column
 * fixed by an equality drops out of the ORDER BY), so that index is
 * partial on a condition that always holds, priority >= the smallest
 * int4, which only the unfiltered claim states, so only its plans can
 * use that index.
 */
#define CLAIM_TYPES_ANY		0
#define CLAIM_TYPES_ONE		1
#define CLAIM_TYPES_MANY	2

/*
 * By organization: none, the one given, or any of a tenant role's several
 * (which reads the claim index of each type, or the one over all types,
 * and filters).
 */
#define CLAIM_ORGS_ANY		0
#define CLAIM_ORGS_ONE		1
#define CLAIM_ORGS_MANY		2

static char *
ClaimSql(int types_mode, int orgs_mode, bool by_stage, int32 batch_size,
		 const char *columns)
{
	char	   *limit = psprintf("%d", batch_size);
	const char *filters;
	char	   *locking;

	filters = psprintf("%s%s%s",
					   types_mode == CLAIM_TYPES_ANY &&
					   orgs_mode != CLAIM_ORGS_ONE && !by_stage ?
					   " AND j.priority" OP(">=") "'-2147483648'::pg_catalog.int4" : "",
					   orgs_mode == CLAIM_ORGS_ONE ?
					   " AND j.organization_id" OP("=") "$5" :
					   orgs_mode == CLAIM_ORGS_MANY ?
					   " AND j.organization_id" OP("=") "ANY ($7)" : "",
					   by_stage ? " AND j.stage" OP("=") "$6"
					   " AND pg_catalog.hashtextextended(j.stage, 0)" OP("=")
					   "pg_catalog.hashtextextended($6, 0)" : "");

	if (types_mode == CLAIM_TYPES_MANY)
	{
		/*
		 * One scan per distinct type, each in its claim index and locking
		 * at most batch_size rows, merged in claim order.  Rows a type's
		 * scan locked beyond the batch stay QUEUED and are only held
		 * until this transaction ends.
		 */
		locking = psprintf(
						   "SELECT j.id FROM (SELECT DISTINCT x.t"
						   "  FROM pg_catalog.unnest($3::pg_catalog.text[]) AS x(t)) AS t"
						   " CROSS JOIN LATERAL ("
						   "SELECT j.id, j.priority, j.run_at FROM workflow.job_queue j"
						   " WHERE j.status" OP("=") "'QUEUED'"
						   " AND j.run_at" OP("<=") "pg_catalog.statement_timestamp()"
						   " AND j.job_type" OP("=") "t.t%s"
						   " ORDER BY j.priority DESC, j.run_at, j.id"
						   " LIMIT %s FOR NO KEY UPDATE SKIP LOCKED) AS j"
						   " ORDER BY j.priority DESC, j.run_at, j.id LIMIT %s",
						   filters, limit, limit);
	}
	else
		locking = psprintf(
						   "SELECT j.id FROM workflow.job_queue j"
						   " WHERE j.status" OP("=") "'QUEUED'"
						   " AND j.run_at" OP("<=") "pg_catalog.statement_timestamp()"
						   "%s%s"
						   " ORDER BY j.priority DESC, j.run_at, j.id"
						   " LIMIT %s FOR NO KEY UPDATE SKIP LOCKED",
						   types_mode == CLAIM_TYPES_ONE ? " AND j.job_type" OP("=") "$4" : "",
						   filters, limit);

	return psprintf(
					"WITH c AS (%s),"
					" u AS ("
					"UPDATE workflow.job_queue j SET status = 'RUNNING',"
					" attempt = j.attempt" OP("+") "1,"
					" worker_id = $2,"
					" lease_token = pg_catalog.gen_random_uuid(),"
					" leased_until = pg_catalog.statement_timestamp()" OP("+")
					"  pg_catalog.make_interval(secs => j.timeout_seconds),"
					" started_at = COALESCE(j.started_at, pg_catalog.statement_timestamp()),"
					" updated_at = pg_catalog.statement_timestamp()"
					" FROM c WHERE j.id" OP("=") "c.id"
					" RETURNING j.*)"
					" SELECT %s FROM u ORDER BY u.priority DESC, u.run_at, u.id",
					locking, columns);
}

/*
 * ClaimColumns is the select list of claim's result rows: the columns of
 * the result row type (workflow.job_queue) in the type's order, each by
 * name, and a NULL where the type has a dropped column.  The rows then
 * have the layout of the descriptor they are read with, whatever order the
 * table's columns were added in, and go into the tuplestore as they are.
 */
static char *
ClaimColumns(TupleDesc desc)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (i > 0)
			appendStringInfoString(&buf, ", ");
		if (att->attisdropped)
			appendStringInfoString(&buf, "NULL::pg_catalog.int4");
		else
			appendStringInfo(&buf, "u.%s",
							 quote_identifier(NameStr(att->attname)));
	}
	return buf.data;
}

/*
 * ClaimColumnsVersion sets columns to the select list for desc, the result
 * descriptor of this call, and returns its version, which changes whenever
 * the list does: a claim plan built under another version is stale.  The
 * list is built again only when the type cache has a new descriptor for
 * the row type, which any change to the table gives it (most leave the
 * columns as they were); a call otherwise costs one type cache lookup.
 */
static uint32
ClaimColumnsVersion(TupleDesc desc, const char **columns)
{
	static char *current = NULL;
	static uint64 current_desc = 0;
	static uint32 version = 0;
	TypeCacheEntry *type = lookup_type_cache(desc->tdtypeid,
											 TYPECACHE_TUPDESC);

	if (current == NULL || type->tupDesc_identifier != current_desc)
	{
		char	   *fresh = ClaimColumns(desc);

		if (current == NULL || strcmp(fresh, current) != 0)
		{
			if (current != NULL)
				pfree(current);
			current = MemoryContextStrdup(TopMemoryContext, fresh);
			version++;
		}
		pfree(fresh);
		current_desc = type->tupDesc_identifier;
	}
	*columns = current;
	return version;
}

/*
 * Claim plans are generic plans with the batch size written out as the
 * LIMIT: a generic plan of LIMIT $1 cannot know how few rows it asks for
 * and may sort the whole queue, and a custom plan costs a planning on
 * every call.  A backend keeps the plans of its last few batch sizes per
 * filter combination; workers mostly use one.  A plan built for an older
 * select list (ClaimColumnsVersion) is built again in its slot.
 */
#define CLAIM_PLAN_SLOTS 4

typedef struct ClaimPlan
{
	int32		batch_size;		/* 0: slot unused */
	uint32		columns_version;
	char	   *sql;
	SPIPlanPtr	plan;
} ClaimPlan;

static ClaimPlan *
GetClaimPlan(int types_mode, int orgs_mode, bool by_stage, int32 batch_size,
			 TupleDesc desc)
{
	static ClaimPlan slots[3][3][2][CLAIM_PLAN_SLOTS];
	static int	next_slot[3][3][2];
	ClaimPlan  *cache = slots[types_mode][orgs_mode][by_stage];
	ClaimPlan  *slot = NULL;
	const char *columns;
	uint32		version = ClaimColumnsVersion(desc, &columns);

	for (int i = 0; i < CLAIM_PLAN_SLOTS; i++)
		if (cache[i].batch_size == batch_size)
		{
			if (cache[i].columns_version == version)
				return &cache[i];
			slot = &cache[i];
			break;
		}
	if (slot == NULL)
	{
		slot = &cache[next_slot[types_mode][orgs_mode][by_stage]];
		next_slot[types_mode][orgs_mode][by_stage] =
			(next_slot[types_mode][orgs_mode][by_stage] + 1) % CLAIM_PLAN_SLOTS;
	}
	if (slot->plan != NULL)
		SPI_freeplan(slot->plan);
	if (slot->sql != NULL)
		pfree(slot->sql);
	slot->batch_size = 0;
	slot->plan = NULL;
	slot->sql = MemoryContextStrdup(TopMemoryContext,
									ClaimSql(types_mode, orgs_mode, by_stage,
											 batch_size, columns));
	slot->batch_size = batch_size;
	slot->columns_version = version;
	return slot;
}

/*
 * ClaimOrganizations sets the organization parameters of a claim ($5 one,
 * $7 several) and returns its organization mode, or -1 when a confined
 * caller names an organization that is not its own.
 */
static int
ClaimOrganizations(FunctionCallInfo fcinfo, Datum *values, char *nulls)
{
	bool		isnull;

	values[4] = PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3);
	nulls[4] = PG_ARGISNULL(3) ? 'n' : ' ';
	values[6] = (Datum) 0;
	nulls[6] = 'n';
	if (!PG_ARGISNULL(3))
		return WfCallSeesOrganization(PG_GETARG_UUID_P(3)) ?
			CLAIM_ORGS_ONE : -1;
	if (!WfCallConfined())
		return CLAIM_ORGS_ANY;
	values[6] = WfCallOrganizationsArray(&isnull);
	nulls[6] = ' ';
	if (WfCallOrganizationCount() > 1)
		return CLAIM_ORGS_MANY;
	/* a tenant of one organization claims as if it had named it */
	values[4] = UUIDPGetDatum(WfCallOrganization(NULL));
	nulls[4] = ' ';
	return CLAIM_ORGS_ONE;
}

/* workflow_claim leases up to batch_size due jobs to a worker. */
static Datum
Claim(PG_FUNCTION_ARGS)
{
	static const Oid types[7] = {INT4OID, TEXTOID, TEXTARRAYOID, TEXTOID,
	UUIDOID, TEXTOID, UUIDARRAYOID};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[7];
	char		nulls[7] = "       ";
	int			types_mode = CLAIM_TYPES_ANY;
	int			orgs_mode;
	bool		by_stage = !PG_ARGISNULL(4);
	int32		batch_size;
	ClaimPlan  *claim;

	WfRequireReadCommitted();
	values[1] = PointerGetDatum(ArgText(fcinfo, 0, "worker_id"));
	if (PG_ARGISNULL(2))
		wf_invalid_argument("batch_size must not be null");
	batch_size = PG_GETARG_INT32(2);
	if (batch_size < 1 || batch_size > WF_MAX_CLAIM_BATCH)
		wf_invalid_argument("batch_size must be between 1 and %d, not %d",
							WF_MAX_CLAIM_BATCH, batch_size);
	values[0] = Int32GetDatum(batch_size);
	values[2] = (Datum) 0;
	nulls[2] = 'n';
	values[3] = (Datum) 0;
	nulls[3] = 'n';
	if (!PG_ARGISNULL(1))
	{
		ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(1);
		Datum	   *elems;
		bool	   *elem_nulls;
		int			nelems;

		WfDeconstruct(arr, TEXTOID, &elems, &elem_nulls, &nelems);
		if (nelems == 0)
			wf_invalid_argument("job_types must not be empty; pass NULL to claim any type");
		for (int i = 0; i < nelems; i++)
			if (elem_nulls[i])
				wf_invalid_argument("job_types must not contain NULL");
		if (nelems == 1)
		{
			types_mode = CLAIM_TYPES_ONE;
			values[3] = elems[0];
			nulls[3] = ' ';
		}
		else
		{
			types_mode = CLAIM_TYPES_MANY;
			values[2] = PointerGetDatum(arr);
			nulls[2] = ' ';
		}
	}
	orgs_mode = ClaimOrganizations(fcinfo, values, nulls);
	values[5] = by_stage ? PG_GETARG_DATUM(4) : (Datum) 0;
	nulls[5] = by_stage ? ' ' : 'n';

	InitMaterializedSRF(fcinfo, 0);
	if (orgs_mode < 0)
		return (Datum) 0;		/* another organization's jobs: none to see */

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	claim = GetClaimPlan(types_mode, orgs_mode, by_stage, batch_size,
						 rsinfo->setDesc);
	WfExecuteGeneric(&claim->plan, claim->sql, 7, types, values, nulls);
	for (uint64 i = 0; i < SPI_processed; i++)
		tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[i]);
	SPI_finish();

	return (Datum) 0;
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
		" RETURNING j.leased_until";
	static const Oid types[2] = {UUIDOID, UUIDOID};
	Datum		values[2];
	bool		isnull;
	Datum		result;
	JobState	job;

	WfRequireReadCommitted();
	values[0] = UUIDPGetDatum(ArgUuid(fcinfo, 0, "job_id"));
	values[1] = UUIDPGetDatum(ArgUuid(fcinfo, 1, "lease_token"));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ConfineJob(DatumGetUUIDP(values[0]));
	LockJobIfLate(DatumGetUUIDP(values[0]));
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
	if (SPI_processed == 1)
	{
		result = WfResultDatum(0, 1, &isnull);
		/* timestamptz may be passed by reference on some builds */
		result = SPI_datumTransfer(result, FLOAT8PASSBYVAL, sizeof(TimestampTz));
		SPI_finish();
		PG_RETURN_DATUM(result);
	}
	FetchJob(DatumGetUUIDP(values[0]), false, &job);
	CheckWorkerJob(&job, DatumGetUUIDP(values[1]), false);
	RaiseNotRunning(&job);
	PG_RETURN_NULL();			/* not reached */
}

/* --- complete --- */

/* workflow_complete_job records a job's success. */
static Datum
CompleteJob(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.job_queue j SET status = 'SUCCEEDED', output = $3,"
		" finished_at = pg_catalog.statement_timestamp(),"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE j.id" OP("=") "$1 AND j.lease_token" OP("=") "$2"
		" AND j.status" OP("=") "'RUNNING'";
	static const Oid types[3] = {UUIDOID, UUIDOID, JSONBOID};
	Datum		values[3];
	char		nulls[3] = "   ";
	JobState	job;

	WfRequireReadCommitted();
	values[0] = UUIDPGetDatum(ArgUuid(fcinfo, 0, "job_id"));
	values[1] = UUIDPGetDatum(ArgUuid(fcinfo, 1, "lease_token"));
	if (PG_ARGISNULL(2))
	{
		values[2] = (Datum) 0;
		nulls[2] = 'n';
	}
	else
	{
		values[2] = PG_GETARG_DATUM(2);
		CheckJsonbSize(values[2], "output");
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ConfineJob(DatumGetUUIDP(values[0]));
	LockJobIfLate(DatumGetUUIDP(values[0]));
	WfExecute(&plan, sql, 3, types, values, nulls, false, 0);
	if (SPI_processed == 0)
	{
		FetchJob(DatumGetUUIDP(values[0]), false, &job);
		CheckWorkerJob(&job, DatumGetUUIDP(values[1]), false);
		/* a repeat of the call that completed it returns quietly */
		if (strcmp(job.status, "SUCCEEDED") != 0 ||
			!WfJsonbEqual(job.output, job.output_null, values[2],
						  nulls[2] == 'n'))
			RaiseNotRunning(&job);
	}
	SPI_finish();
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
 * FailJobRows records one failed attempt of each of n locked, running
 * jobs in one statement: a retry goes back to QUEUED after its backoff,
 * anything else becomes FAILED.  codes[i] and messages[i] belong to
 * jobs[i]; message_nulls may be NULL when every message is given.
 */
static void
FailJobRows(int n, const JobState *const *jobs, const Datum *codes,
			const Datum *messages, const bool *message_nulls, bool retryable)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
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
		" WHERE j.id" OP("=") "x.id";
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
	WfExecuteGeneric(&plan, sql, 5, types, values, NULL);
	pfree(ids);
	pfree(retries);
	pfree(run_ats);
}

/* A repeat of the fail_job that left the job FAILED returns quietly. */
static bool
IsFailRepeat(const JobState *job, const char *code, const char *message)
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
	JobState	job;

	WfRequireReadCommitted();
	job_id = ArgUuid(fcinfo, 0, "job_id");
	token = ArgUuid(fcinfo, 1, "lease_token");
	code = text_to_cstring(ArgText(fcinfo, 2, "error_code"));
	if (!PG_ARGISNULL(3))
		message = WfTruncateMessage(text_to_cstring(PG_GETARG_TEXT_PP(3)));
	if (PG_ARGISNULL(4))
		wf_invalid_argument("retryable must not be null");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	FetchJob(job_id, true, &job);
	if (!CheckWorkerJob(&job, token, false))
	{
		if (!IsFailRepeat(&job, code, message))
			RaiseNotRunning(&job);
	}
	else
	{
		const JobState *jobs[1] = {&job};
		Datum		codes[1] = {CStringGetTextDatum(code)};
		Datum		messages[1] = {message ? CStringGetTextDatum(message) : (Datum) 0};
		bool		message_nulls[1] = {message == NULL};

		FailJobRows(1, jobs, codes, messages, message_nulls, PG_GETARG_BOOL(4));
	}
	SPI_finish();
	PG_RETURN_VOID();
}

/* --- release --- */

/* workflow_release_job gives a claim back without using up an attempt. */
static Datum
ReleaseJob(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.job_queue j SET status = 'QUEUED',"
		" attempt = j.attempt" OP("-") "1,"
		" lease_token = NULL, leased_until = NULL, worker_id = NULL,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE j.id" OP("=") "$1 AND j.lease_token" OP("=") "$2"
		" AND j.status" OP("=") "'RUNNING'";
	static const Oid types[2] = {UUIDOID, UUIDOID};
	Datum		values[2];
	JobState	job;

	WfRequireReadCommitted();
	values[0] = UUIDPGetDatum(ArgUuid(fcinfo, 0, "job_id"));
	values[1] = UUIDPGetDatum(ArgUuid(fcinfo, 1, "lease_token"));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ConfineJob(DatumGetUUIDP(values[0]));
	LockJobIfLate(DatumGetUUIDP(values[0]));
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
	if (SPI_processed == 0)
	{
		FetchJob(DatumGetUUIDP(values[0]), false, &job);
		CheckWorkerJob(&job, DatumGetUUIDP(values[1]), false);
		RaiseNotRunning(&job);
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
	JobState	job;

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
		RaiseNotRunning(&job);
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
 * holds no row of a run it skipped.  Skipped runs are picked up by a later
 * call.
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
 * ReapPage expires the expired leases among one page of candidates whose
 * runs' release locks it gets (tried once each, in ascending run id) and
 * whose rows nobody holds.  Returns how many it expired, and the page's
 * last id in *last.
 */
static int
ReapPage(const pg_uuid_t *after, pg_uuid_t *last, uint64 *ncandidates)
{
	static SPIPlanPtr expire_plan = NULL;
	static const char *expire_sql =
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
		" FROM c WHERE j.id" OP("=") "c.id";
	static const Oid expire_types[1] = {UUIDARRAYOID};
	Datum		values[1];
	uint64		n = ReapCandidates(after);
	pg_uuid_t  *ids;
	pg_uuid_t  *runs;
	bool	   *has_run;
	Datum	   *chosen;
	int			nchosen = 0;
	pg_uuid_t  *sorted_runs;
	int			nruns = 0;
	bool	   *run_ok;

	*ncandidates = n;
	if (n == 0)
		return 0;
	ids = palloc(sizeof(pg_uuid_t) * n);
	runs = palloc(sizeof(pg_uuid_t) * n);
	has_run = palloc(sizeof(bool) * n);
	sorted_runs = palloc(sizeof(pg_uuid_t) * n);
	for (uint64 i = 0; i < n; i++)
	{
		WfResultUuid(i, 1, &ids[i]);
		has_run[i] = WfResultUuid(i, 2, &runs[i]);
		if (has_run[i])
			sorted_runs[nruns++] = runs[i];
	}
	*last = ids[n - 1];

	/* try each run's release lock once, in ascending run id */
	qsort(sorted_runs, nruns, sizeof(pg_uuid_t), WfUuidCmpQsort);
	run_ok = palloc(sizeof(bool) * Max(nruns, 1));
	for (int i = 0; i < nruns; i++)
	{
		if (i > 0 && WfUuidCompare(&sorted_runs[i], &sorted_runs[i - 1]) == 0)
			run_ok[i] = run_ok[i - 1];
		else
			run_ok[i] = WfLockRunRelease(&sorted_runs[i], false, false);
	}

	chosen = palloc(sizeof(Datum) * n);
	for (uint64 i = 0; i < n; i++)
	{
		if (has_run[i])
		{
			pg_uuid_t  *found = bsearch(&runs[i], sorted_runs, nruns,
										sizeof(pg_uuid_t), WfUuidCmpQsort);

			if (!run_ok[found - sorted_runs])
				continue;
		}
		chosen[nchosen++] = UUIDPGetDatum(&ids[i]);
	}
	if (nchosen == 0)
		return 0;
	values[0] = WfArray(chosen, NULL, nchosen, UUIDOID);
	WfExecute(&expire_plan, expire_sql, 1, expire_types, values, NULL,
			  false, 0);
	return (int) SPI_processed;
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

/* --- batch forms --- */

typedef struct BatchItem
{
	pg_uuid_t	id;
	int			index;			/* position in the caller's arrays */
} BatchItem;

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
 * LockBatch locks the named jobs in ascending id and reads their state
 * into jobs[] (in the order of items, which it sorts).  It raises
 * job.invalid_argument for a duplicate id and job.not_found for a missing
 * one.
 */
static void
LockBatch(BatchItem *items, int n, JobState *jobs)
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
								  psprintf("SELECT %s FROM workflow.job_queue j"
										   " WHERE j.id" OP("=") "ANY ($1)"
										   " ORDER BY j.id FOR NO KEY UPDATE",
										   job_state_columns));
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

		memset(&jobs[i], 0, sizeof(JobState));
		jobs[i].id = items[i].id;
		if (row < SPI_processed)
		{
			WfResultUuid(row, 1, &row_id);
			if (WfUuidCompare(&row_id, &items[i].id) == 0)
				ReadJobState(row++, &jobs[i]);
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
LockBatchSteps(JobState *jobs, bool *finish, int n)
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
 * A batch call's state: the caller's jobs sorted by id with their locked
 * state, and which of them it writes (finish) and returns (returned).
 */
typedef struct Batch
{
	int			n;
	BatchItem  *items;
	JobState   *jobs;			/* jobs[i] belongs to items[i] */
	Datum	   *tokens;			/* by the caller's index */
	bool	   *finish;
	bool	   *returned;
	void	   *arg;			/* the call's own arrays */
} Batch;

/* Whether jobs[i], not RUNNING under its token, was finished by this very call before. */
typedef bool (*BatchRepeatFn) (const Batch *batch, int i, int k);
/* Writes every job to finish in one statement. */
typedef void (*BatchWriteFn) (const Batch *batch);

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
	batch->jobs = palloc(sizeof(JobState) * n);
	batch->finish = palloc0(sizeof(bool) * n);
	batch->returned = palloc0(sizeof(bool) * n);

	LockBatch(batch->items, n, batch->jobs);
	for (int i = 0; i < n; i++)
	{
		JobState   *job = &batch->jobs[i];
		int			k = batch->items[i].index;
		pg_uuid_t  *token = DatumGetUUIDP(batch->tokens[k]);

		if (!job->found)
			CheckWorkerJob(job, token, false);
		if (CheckWorkerJob(job, token, true))
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
			RaiseNotRunning(job);
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

/* the caller's arrays of complete_jobs */
typedef struct CompleteArgs
{
	Datum	   *outputs;		/* NULL when no outputs were passed */
	bool	   *output_nulls;
} CompleteArgs;

static bool
CompleteIsRepeat(const Batch *batch, int i, int k)
{
	CompleteArgs *args = batch->arg;
	const JobState *job = &batch->jobs[i];
	bool		out_null = args->outputs == NULL || args->output_nulls[k];

	return strcmp(job->status, "SUCCEEDED") == 0 &&
		WfJsonbEqual(job->output, job->output_null,
					 out_null ? (Datum) 0 : args->outputs[k], out_null);
}

static void
CompleteWrite(const Batch *batch)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.job_queue j SET status = 'SUCCEEDED', output = x.output,"
		" finished_at = pg_catalog.statement_timestamp(),"
		" updated_at = pg_catalog.statement_timestamp()"
		" FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.uuid[]),"
		"  pg_catalog.unnest($2::pg_catalog.jsonb[])) AS x(id, output)"
		" WHERE j.id" OP("=") "x.id";
	static const Oid types[2] = {UUIDARRAYOID, JSONBARRAYOID};
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
		ids[m] = UUIDPGetDatum(&batch->items[i].id);
		output_nulls[m] = args->outputs == NULL || args->output_nulls[k];
		outputs[m] = output_nulls[m] ? (Datum) 0 : args->outputs[k];
		m++;
	}
	values[0] = WfArray(ids, NULL, m, UUIDOID);
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
			CheckJsonbSize(args.outputs[i], "output");
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

/* the caller's arrays of fail_jobs */
typedef struct FailArgs
{
	Datum	   *codes;
	char	  **messages;		/* truncated, NULL where none */
	bool		retryable;
} FailArgs;

static bool
FailIsRepeat(const Batch *batch, int i, int k)
{
	FailArgs   *args = batch->arg;

	return IsFailRepeat(&batch->jobs[i], TextDatumGetCString(args->codes[k]),
						args->messages[k]);
}

static void
FailWrite(const Batch *batch)
{
	FailArgs   *args = batch->arg;
	const JobState **jobs = palloc(sizeof(JobState *) * batch->n);
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
	FailJobRows(m, jobs, codes, messages, message_nulls, args->retryable);
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
Datum
workflow_enqueue(PG_FUNCTION_ARGS)
{
	return WfCallAsOwner(Enqueue, fcinfo);
}

Datum
workflow_claim(PG_FUNCTION_ARGS)
{
	return WfCallAsOwner(Claim, fcinfo);
}

Datum
workflow_heartbeat(PG_FUNCTION_ARGS)
{
	return WfCallAsOwner(Heartbeat, fcinfo);
}

Datum
workflow_complete_job(PG_FUNCTION_ARGS)
{
	return WfCallAsOwner(CompleteJob, fcinfo);
}

Datum
workflow_fail_job(PG_FUNCTION_ARGS)
{
	return WfCallAsOwner(FailJob, fcinfo);
}

Datum
workflow_release_job(PG_FUNCTION_ARGS)
{
	return WfCallAsOwner(ReleaseJob, fcinfo);
}

Datum
workflow_cancel_job(PG_FUNCTION_ARGS)
{
	return WfCallAsOwner(CancelJob, fcinfo);
}

Datum
workflow_reap_expired(PG_FUNCTION_ARGS)
{
	return WfCallAsOwner(ReapExpired, fcinfo);
}

Datum
workflow_complete_jobs(PG_FUNCTION_ARGS)
{
	return WfCallAsOwner(CompleteJobs, fcinfo);
}

Datum
workflow_fail_jobs(PG_FUNCTION_ARGS)
{
	return WfCallAsOwner(FailJobs, fcinfo);
}
