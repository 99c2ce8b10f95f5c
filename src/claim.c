/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  claim and complete_and_claim: leasing due jobs to a worker, with the
 *	  claim statements, their plan cache and the select list of their
 *	  result rows.
 *
 * One statement per filter combination (job types, organizations, stage),
 * planned generically with the batch size written out as the LIMIT; a
 * backend keeps the plans of its last few batch sizes per combination.
 * The result rows are built by column name from the result row type.
 * A job whose run is past its deadline (job_queue.deadline_at, copied from
 * the run when the job was made) is never claimed: fire_timers ends the
 * run (deadlines.c).
 *
 * Locks: the claimed job rows, FOR NO KEY UPDATE SKIP LOCKED, in claim
 * order (a claim of several types may lock rows beyond the batch, which
 * stay QUEUED and are held until the transaction ends).  No release lock
 * and no run row; the claimed jobs' steps follow through the job_queue
 * triggers (triggers.c).  complete_and_claim first completes its job as
 * complete_job does (queue.c), then claims: see CompleteAndClaim for why
 * claiming after the completion's late locks cannot deadlock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/typcache.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_claim);
PG_FUNCTION_INFO_V1(workflow_complete_and_claim);

static Datum Claim(PG_FUNCTION_ARGS);
static Datum CompleteAndClaim(PG_FUNCTION_ARGS);

#define WF_MAX_CLAIM_BATCH	1000

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

/*
 * A checked claim, ready to run: the claim statement's parameters ($1
 * batch size, $2 worker, $3 types, $4 type, $5 organization, $6 stage, $7
 * organizations) and its filter combination.
 */
typedef struct ClaimRequest
{
	Datum		values[7];
	char		nulls[7];
	int			types_mode;
	int			orgs_mode;		/* -1: another organization's, none to see */
	bool		by_stage;
	int32		batch_size;
} ClaimRequest;

static char *ClaimFilters(int types_mode, int orgs_mode, bool by_stage);
static char *ClaimLocking(int types_mode, const char *filters,
						  const char *limit);
static char *ClaimSql(int types_mode, int orgs_mode, bool by_stage,
					  int32 batch_size, const char *columns);
static char *ClaimColumns(TupleDesc desc);
static uint32 ClaimColumnsVersion(TupleDesc desc, const char **columns);
static void ParseClaim(FunctionCallInfo fcinfo, int first, ClaimRequest *req);
static void RunClaim(ClaimRequest *req, ReturnSetInfo *rsinfo);
static ClaimPlan *GetClaimPlan(int types_mode, int orgs_mode, bool by_stage,
							   int32 batch_size, TupleDesc desc);
static int	ClaimJobTypes(FunctionCallInfo fcinfo, int arg, Datum *values,
						  char *nulls);
static int	ClaimOrganizations(FunctionCallInfo fcinfo, int arg,
							   Datum *values, char *nulls);

/*
 * ClaimFilters is the part of the locking scan's WHERE clause that the
 * filters add: the organization ($5 one, $7 several), the stage ($6, with
 * its hash, which the stage claim index holds), and for the unfiltered
 * claim the condition that only its index is partial on.
 */
static char *
ClaimFilters(int types_mode, int orgs_mode, bool by_stage)
{
	return psprintf("%s%s%s",
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
}

/*
 * ClaimLocking is the scan that picks and locks the jobs to claim, at most
 * limit of them, in claim order.  It returns their row addresses (ctid):
 * the lease is written to the very row versions it locked, found by
 * address, not by a second descent of the primary key per job, which
 * holds an entry for every earlier version of each id (no status change
 * is HOT).  A row that was updated since the scan's snapshot is locked in
 * its newest version, whose address the scan then returns; and nobody can
 * move a row this statement holds.
 */
static char *
ClaimLocking(int types_mode, const char *filters, const char *limit)
{
	if (types_mode == CLAIM_TYPES_MANY)
	{
		/*
		 * One scan per distinct type, each in its claim index and locking
		 * at most batch_size rows, merged in claim order.  Rows a type's
		 * scan locked beyond the batch stay QUEUED and are only held
		 * until this transaction ends.
		 */
		return psprintf(
						"SELECT j.tid FROM (SELECT DISTINCT x.t"
						"  FROM pg_catalog.unnest($3::pg_catalog.text[]) AS x(t)) AS t"
						" CROSS JOIN LATERAL ("
						"SELECT j.ctid AS tid, j.id, j.priority, j.run_at"
						" FROM workflow.job_queue j"
						" WHERE j.status" OP("=") "'QUEUED'"
						" AND j.run_at" OP("<=") "pg_catalog.statement_timestamp()"
						" AND (j.deadline_at IS NULL"
						"  OR j.deadline_at" OP(">") "pg_catalog.statement_timestamp())"
						" AND j.job_type" OP("=") "t.t%s"
						" ORDER BY j.priority DESC, j.run_at, j.id"
						" LIMIT %s FOR NO KEY UPDATE SKIP LOCKED) AS j"
						" ORDER BY j.priority DESC, j.run_at, j.id LIMIT %s",
						filters, limit, limit);
	}
	return psprintf(
					"SELECT j.ctid AS tid FROM workflow.job_queue j"
					" WHERE j.status" OP("=") "'QUEUED'"
					" AND j.run_at" OP("<=") "pg_catalog.statement_timestamp()"
					" AND (j.deadline_at IS NULL"
					"  OR j.deadline_at" OP(">") "pg_catalog.statement_timestamp())"
					"%s%s"
					" ORDER BY j.priority DESC, j.run_at, j.id"
					" LIMIT %s FOR NO KEY UPDATE SKIP LOCKED",
					types_mode == CLAIM_TYPES_ONE ? " AND j.job_type" OP("=") "$4" : "",
					filters, limit);
}

/*
 * ClaimSql is the claim statement of one filter combination and batch
 * size: the locking scan, then the lease written to the rows it locked,
 * which come back with the select list columns, in claim order.
 */
static char *
ClaimSql(int types_mode, int orgs_mode, bool by_stage, int32 batch_size,
		 const char *columns)
{
	char	   *limit = psprintf("%d", batch_size);
	char	   *filters = ClaimFilters(types_mode, orgs_mode, by_stage);
	char	   *locking = ClaimLocking(types_mode, filters, limit);

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
					" FROM c WHERE j.ctid" OP("=") "c.tid"
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
 * GetClaimPlan returns the slot of a filter combination and batch size,
 * with its statement built for the current select list; its plan is
 * prepared on first use.
 */
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
 * $7 several) from argument arg and returns its organization mode, or -1
 * when a confined caller names an organization that is not its own.
 */
static int
ClaimOrganizations(FunctionCallInfo fcinfo, int arg, Datum *values,
				   char *nulls)
{
	bool		isnull;

	values[4] = PG_ARGISNULL(arg) ? (Datum) 0 : PG_GETARG_DATUM(arg);
	nulls[4] = PG_ARGISNULL(arg) ? 'n' : ' ';
	values[6] = (Datum) 0;
	nulls[6] = 'n';
	if (!PG_ARGISNULL(arg))
		return WfCallSeesOrganization(PG_GETARG_UUID_P(arg)) ?
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

/*
 * ClaimJobTypes sets the job type parameters of a claim ($4 one, $3
 * several) from argument arg and returns its job type mode.
 */
static int
ClaimJobTypes(FunctionCallInfo fcinfo, int arg, Datum *values, char *nulls)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *elem_nulls;
	int			nelems;

	values[2] = (Datum) 0;
	nulls[2] = 'n';
	values[3] = (Datum) 0;
	nulls[3] = 'n';
	if (PG_ARGISNULL(arg))
		return CLAIM_TYPES_ANY;

	arr = PG_GETARG_ARRAYTYPE_P(arg);
	WfDeconstruct(arr, TEXTOID, &elems, &elem_nulls, &nelems);
	if (nelems == 0)
		wf_invalid_argument("job_types must not be empty; pass NULL to claim any type");
	for (int i = 0; i < nelems; i++)
		if (elem_nulls[i])
			wf_invalid_argument("job_types must not contain NULL");
	if (nelems == 1)
	{
		values[3] = elems[0];
		nulls[3] = ' ';
		return CLAIM_TYPES_ONE;
	}
	values[2] = PointerGetDatum(arr);
	nulls[2] = ' ';
	return CLAIM_TYPES_MANY;
}

/*
 * ParseClaim reads and checks claim's arguments, which start at argument
 * first (worker_id, job_types, batch_size, organization_id, stage), into
 * the claim statement's parameters.
 */
static void
ParseClaim(FunctionCallInfo fcinfo, int first, ClaimRequest *req)
{
	memset(req->nulls, ' ', sizeof(req->nulls));
	req->values[1] = PointerGetDatum(WfArgText(fcinfo, first, "worker_id"));
	if (PG_ARGISNULL(first + 2))
		wf_invalid_argument("batch_size must not be null");
	req->batch_size = PG_GETARG_INT32(first + 2);
	if (req->batch_size < 1 || req->batch_size > WF_MAX_CLAIM_BATCH)
		wf_invalid_argument("batch_size must be between 1 and %d, not %d",
							WF_MAX_CLAIM_BATCH, req->batch_size);
	req->values[0] = Int32GetDatum(req->batch_size);
	req->types_mode = ClaimJobTypes(fcinfo, first + 1, req->values, req->nulls);
	req->orgs_mode = ClaimOrganizations(fcinfo, first + 3, req->values,
										req->nulls);
	req->by_stage = !PG_ARGISNULL(first + 4);
	req->values[5] = req->by_stage ? PG_GETARG_DATUM(first + 4) : (Datum) 0;
	req->nulls[5] = req->by_stage ? ' ' : 'n';
}

/*
 * RunClaim leases the jobs of a parsed claim and puts them into the
 * result set, in claim order.
 */
static void
RunClaim(ClaimRequest *req, ReturnSetInfo *rsinfo)
{
	static const Oid types[7] = {INT4OID, TEXTOID, TEXTARRAYOID, TEXTOID,
	UUIDOID, TEXTOID, UUIDARRAYOID};
	ClaimPlan  *claim;

	if (req->orgs_mode < 0)
		return;					/* another organization's jobs: none to see */
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	claim = GetClaimPlan(req->types_mode, req->orgs_mode, req->by_stage,
						 req->batch_size, rsinfo->setDesc);
	WfExecuteGeneric(&claim->plan, claim->sql, 7, types, req->values,
					 req->nulls);
	for (uint64 i = 0; i < SPI_processed; i++)
		tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[i]);
	SPI_finish();
}

/* workflow_claim leases up to batch_size due jobs to a worker. */
static Datum
Claim(PG_FUNCTION_ARGS)
{
	ClaimRequest req;

	WfRequireReadCommitted();
	ParseClaim(fcinfo, 0, &req);
	InitMaterializedSRF(fcinfo, 0);
	RunClaim(&req, (ReturnSetInfo *) fcinfo->resultinfo);
	return (Datum) 0;
}

/*
 * workflow_complete_and_claim completes one job and claims the next ones
 * in the same transaction: one commit per job for a worker in steady
 * state.  Every argument is checked before anything is written, and what
 * it claimed rolls back with the completion if anything fails.
 *
 * The claim comes after the completion, which may hold run rows until
 * commit (late locks), against the lock order.  It cannot deadlock: the
 * claim waits for no job row (SKIP LOCKED), and the step rows of the jobs
 * it claims are held only by a transaction that holds their jobs, which
 * the claim then skipped, or by cancel_run under the run's release lock
 * exclusive, which it cannot hold while this transaction holds that run's
 * lock shared, and which takes those jobs NOWAIT.
 */
static Datum
CompleteAndClaim(PG_FUNCTION_ARGS)
{
	WfCompletion completion;
	ClaimRequest req;

	WfRequireReadCommitted();
	WfParseCompletion(fcinfo, &completion);
	ParseClaim(fcinfo, 3, &req);
	InitMaterializedSRF(fcinfo, 0);
	WfCompleteOne(&completion);
	RunClaim(&req, (ReturnSetInfo *) fcinfo->resultinfo);
	return (Datum) 0;
}

/*
 * The SQL-callable entry point: its body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
WF_OWNER_ENTRY(workflow_claim, Claim)
WF_OWNER_ENTRY(workflow_complete_and_claim, CompleteAndClaim)
