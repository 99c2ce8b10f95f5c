/*-------------------------------------------------------------------------
 *
 * triggers.c
 *	  Triggers on job_queue, workflow_steps and workflow_events.
 *
 * job_queue_sync_step (AFTER UPDATE, per row) refuses to move a finished
 * job out of its status, and notes how a job's step follows its job: a
 * claim makes it RUNNING, a retry or release ENQUEUED, a terminal job
 * makes it terminal.  Its WHEN clause lets through only those two kinds of
 * change, so the update of a plain job in its normal course fires nothing.
 * job_queue_finish_statement (AFTER UPDATE, per statement) writes the
 * noted steps, in one statement when there are several, reports the
 * terminal ones to the cascade, and runs the cascade and the run counters
 * once for the whole statement.  This
 * holds for direct UPDATEs of job_queue too.  Each move's history event
 * (history.c) is decided from the job's row before and after, and written
 * by the statement that writes the move.  The guards refuse writes that
 * would corrupt state or rewrite the history, unless the engine itself is
 * writing (xact_state.c).
 *
 * A step follows its job in SyncStepClaimed, SyncStepRequeued and
 * SyncStepTerminal, or, for several moves in one statement, SyncSteps.
 * Noted moves are dropped with a rolled-back subtransaction and at the end
 * of the transaction, through the hooks this file registers with
 * xact_state.c; a commit with moves left unwritten fails.
 *
 * Locks: the step row of the job being updated (the caller holds the job
 * row); the rest is taken by cascade.c and status.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_job_queue_sync_step);
PG_FUNCTION_INFO_V1(workflow_job_queue_finish_statement);
PG_FUNCTION_INFO_V1(workflow_job_queue_guard);
PG_FUNCTION_INFO_V1(workflow_workflow_steps_guard);
PG_FUNCTION_INFO_V1(workflow_workflow_events_guard);

/*
 * A step move noted by the row trigger: the step's new status (RUNNING,
 * ENQUEUED or the job's terminal status) and the job's values it takes,
 * copied into sync_context.  The statement trigger writes them in the
 * order they were noted, which is the order the statement updated the
 * jobs.
 *
 * A user's row trigger may itself update job_queue, and its statement
 * then ends before the one that fired it.  Such a statement writes only
 * the moves noted in its own subtransaction (or in subtransactions it
 * committed): those of the outer statement must survive a rollback of
 * the inner one.  Since a subtransaction's id is larger than every id
 * handed out before it began, these moves are the tail of the list.
 */
typedef struct StepSync
{
	pg_uuid_t	step_id;
	pg_uuid_t	job_id;			/* the step moves only if it names this job */
	pg_uuid_t	run_id;			/* ... and is of this run */
	const char *to;
	Datum		values[4];		/* output, error code, error message, started_at */
	bool		nulls[4];
	const char *event;			/* its history event, NULL if not recorded */
	char	   *detail;			/* the event's detail, JSON */
	SubTransactionId subid;
} StepSync;

#define SYNC_OUTPUT		0
#define SYNC_ERROR_CODE	1
#define SYNC_ERROR_MSG	2
#define SYNC_STARTED_AT	3

static StepSync *syncs = NULL;
static int	n_syncs = 0;
static int	max_syncs = 0;
static MemoryContext sync_context = NULL;
static int	flush_depth = 0;	/* FlushStepSyncs calls in progress */

static bool SyncsUnfinished(void);
static void SyncReset(void);
static void SyncAbortSub(SubTransactionId subid);
static Datum GetColumn(HeapTuple tuple, TupleDesc desc, const char *name,
					   bool *isnull);
static void CheckTrigger(FunctionCallInfo fcinfo, const char *name);
static void NoteStepSync(const pg_uuid_t *step_id, const pg_uuid_t *job_id,
						 const pg_uuid_t *run_id, const char *to,
						 HeapTuple oldtup, HeapTuple newtup, TupleDesc desc);
static void NoteStepEvent(StepSync *sync, HeapTuple oldtup, HeapTuple newtup,
						  TupleDesc desc);
static void NoteCompensationEnded(const pg_uuid_t *step_id,
								  const pg_uuid_t *job_id,
								  const pg_uuid_t *run_id, bool succeeded,
								  HeapTuple newtup, TupleDesc desc);
static char *GetTextColumn(HeapTuple tuple, TupleDesc desc, const char *name);
static void RequeueEvent(StepSync *sync, HeapTuple oldtup, HeapTuple newtup,
						 TupleDesc desc, StringInfo detail);
static bool IsTerminalSync(const StepSync *sync);
static bool HasRepeatedStep(const StepSync *items, int n);
static void FlushStepSyncs(void);
static void SyncEventValues(const StepSync *sync, Datum *values, char *nulls);
static void SyncStepClaimed(const StepSync *sync);
static void SyncStepRequeued(const StepSync *sync);
static bool SyncStepTerminal(const StepSync *sync, pg_uuid_t *run_id,
							 int16 *shard, bool *capped);
static void SyncStepsInOrder(const StepSync *items, int n);
static void SyncSteps(const StepSync *items, int n);
static void SyncStepsValues(const StepSync *items, int n, Datum *values);
static void NoteSyncedTerminal(void);

/* GetColumn reads a job_queue column of tuple by name. */
static Datum
GetColumn(HeapTuple tuple, TupleDesc desc, const char *name, bool *isnull)
{
	int			attnum = SPI_fnumber(desc, name);

	if (attnum <= 0)
		elog(ERROR, "job_queue has no column \"%s\"", name);
	return SPI_getbinval(tuple, desc, attnum, isnull);
}

/* CheckTrigger refuses a call not made by the trigger manager. */
static void
CheckTrigger(FunctionCallInfo fcinfo, const char *name)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "%s: not called by trigger manager", name);
	WfCheckVersion();
}

/* Whether step moves were noted and never written. */
static bool
SyncsUnfinished(void)
{
	return n_syncs > 0;
}

/* SyncReset forgets noted step moves and resets their memory. */
static void
SyncReset(void)
{
	syncs = NULL;
	n_syncs = 0;
	max_syncs = 0;
	flush_depth = 0;
	if (sync_context != NULL)
		MemoryContextReset(sync_context);
}

/* SyncAbortSub forgets the step moves an aborted subtransaction noted. */
static void
SyncAbortSub(SubTransactionId subid)
{
	int			kept = 0;

	for (int i = 0; i < n_syncs; i++)
		if (syncs[i].subid < subid)
			syncs[kept++] = syncs[i];
	n_syncs = kept;
}

/* WfTriggersInit registers the noted step moves' end-of-transaction hooks. */
void
WfTriggersInit(void)
{
	static const WfXactHooks hooks = {
		.unfinished = SyncsUnfinished,
		.reset = SyncReset,
		.abort_sub = SyncAbortSub,
	};

	WfRegisterXactHooks(&hooks);
}

/*
 * NoteStepSync notes that a job's step moves to "to", with a copy of the
 * job's values the move takes, in sync_context.
 */
static void
NoteStepSync(const pg_uuid_t *step_id, const pg_uuid_t *job_id,
			 const pg_uuid_t *run_id, const char *to, HeapTuple oldtup,
			 HeapTuple newtup, TupleDesc desc)
{
	static const char *const columns[4] = {"output", "last_error_code",
	"last_error_message", "started_at"};
	MemoryContext old;
	StepSync   *sync;

	if (sync_context == NULL)
		sync_context = AllocSetContextCreate(TopMemoryContext,
											 "workflow step moves",
											 ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(sync_context);
	if (n_syncs == max_syncs)
	{
		max_syncs = max_syncs == 0 ? 16 : max_syncs * 2;
		syncs = syncs == NULL ? palloc(sizeof(StepSync) * max_syncs) :
			repalloc(syncs, sizeof(StepSync) * max_syncs);
	}
	sync = &syncs[n_syncs++];
	sync->step_id = *step_id;
	sync->job_id = *job_id;
	sync->run_id = *run_id;
	sync->to = to;
	sync->subid = GetCurrentSubTransactionId();
	for (int i = 0; i < 4; i++)
	{
		int			attnum = SPI_fnumber(desc, columns[i]);
		Form_pg_attribute att;
		Datum		d;

		if (attnum <= 0)
			elog(ERROR, "job_queue has no column \"%s\"", columns[i]);
		att = TupleDescAttr(desc, attnum - 1);
		d = SPI_getbinval(newtup, desc, attnum, &sync->nulls[i]);
		sync->values[i] = sync->nulls[i] ? (Datum) 0 :
			datumCopy(d, att->attbyval, att->attlen);
	}
	NoteStepEvent(sync, oldtup, newtup, desc);
	MemoryContextSwitchTo(old);
}

/*
 * NoteCompensationEnded hands a compensation job that ended to the
 * cascade, which settles its step when the statement ends.  Claims and
 * retries of a compensation job move nothing: its step stays COMPENSATING.
 */
static void
NoteCompensationEnded(const pg_uuid_t *step_id, const pg_uuid_t *job_id,
					  const pg_uuid_t *run_id, bool succeeded,
					  HeapTuple newtup, TupleDesc desc)
{
	WfCompensationEnd end;

	end.run_id = *run_id;
	end.step_id = *step_id;
	end.job_id = *job_id;
	end.succeeded = succeeded;
	end.error_code = end.succeeded ? NULL :
		GetTextColumn(newtup, desc, "last_error_code");
	end.error_message = end.succeeded ? NULL :
		GetTextColumn(newtup, desc, "last_error_message");
	WfNoteCompensationEnded(&end);
}

/* Reads an integer column of a job_queue tuple. */
static int32
GetInt32Column(HeapTuple tuple, TupleDesc desc, const char *name)
{
	bool		isnull;
	Datum		d = GetColumn(tuple, desc, name, &isnull);

	return isnull ? 0 : DatumGetInt32(d);
}

/* Reads a text column of a job_queue tuple, NULL when null. */
static char *
GetTextColumn(HeapTuple tuple, TupleDesc desc, const char *name)
{
	bool		isnull;
	Datum		d = GetColumn(tuple, desc, name, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/*
 * NoteStepEvent sets the history event of a step move, with its detail,
 * from the job's row before and after the move; the event stays NULL when
 * workflow.history does not record it.  Only cancel_job's cancellation
 * is an operator action, recorded at the level "runs" too.
 */
static void
NoteStepEvent(StepSync *sync, HeapTuple oldtup, HeapTuple newtup,
			  TupleDesc desc)
{
	char	   *code = GetTextColumn(newtup, desc, "last_error_code");
	bool		operator_action = strcmp(sync->to, "CANCELED") == 0 &&
		WfTextEqual(code, WF_JOB_CANCELED);
	StringInfoData detail;

	sync->event = NULL;
	sync->detail = NULL;
	if (!WfHistoryRecordsSteps() &&
		!(operator_action && WfHistoryRecordsRuns()))
		return;

	WfDetailBegin(&detail);
	if (strcmp(sync->to, "ENQUEUED") == 0)
		RequeueEvent(sync, oldtup, newtup, desc, &detail);
	else
	{
		WfDetailInt(&detail, "attempt", GetInt32Column(newtup, desc, "attempt"));
		if (strcmp(sync->to, "RUNNING") == 0)
		{
			sync->event = "step_started";
			WfDetailText(&detail, "worker_id",
						 GetTextColumn(newtup, desc, "worker_id"));
		}
		else if (strcmp(sync->to, "SUCCEEDED") == 0)
			sync->event = "step_succeeded";
		else
		{
			sync->event = strcmp(sync->to, "FAILED") == 0 ?
				"step_failed" : "step_canceled";
			WfDetailText(&detail, "error_code", code);
			WfDetailText(&detail, strcmp(sync->to, "FAILED") == 0 ?
						 "error_message" : "reason",
						 GetTextColumn(newtup, desc, "last_error_message"));
		}
	}
	sync->detail = WfDetailEnd(&detail);
}

/*
 * RequeueEvent tells apart the three ways a running job is queued again:
 * release_job gives its attempt back (step_returned), reap_expired records
 * the expired lease (step_lease_expired), fail_job retries
 * (step_retried).
 */
static void
RequeueEvent(StepSync *sync, HeapTuple oldtup, HeapTuple newtup,
			 TupleDesc desc, StringInfo detail)
{
	int32		attempt = GetInt32Column(oldtup, desc, "attempt");
	char	   *code = GetTextColumn(newtup, desc, "last_error_code");
	bool		isnull;
	Datum		run_at = GetColumn(newtup, desc, "run_at", &isnull);

	WfDetailInt(detail, "attempt", attempt);
	if (GetInt32Column(newtup, desc, "attempt") < attempt)
		sync->event = "step_returned";
	else if (WfTextEqual(code, WF_REASON_LEASE_EXPIRED))
		sync->event = "step_lease_expired";
	else
	{
		sync->event = "step_retried";
		WfDetailText(detail, "error_code", code);
		WfDetailText(detail, "error_message",
					 GetTextColumn(newtup, desc, "last_error_message"));
	}
	if (strcmp(sync->event, "step_retried") != 0)
		WfDetailText(detail, "worker_id",
					 GetTextColumn(oldtup, desc, "worker_id"));
	if (!isnull)
		WfDetailTimestamp(detail, "run_at", DatumGetTimestampTz(run_at));
}

/*
 * workflow_job_queue_sync_step refuses to move a finished job out of its
 * status, then notes how a job's step follows the job.
 *
 * The refusal was a BEFORE UPDATE row trigger of its own until 1.5.  A
 * table with any BEFORE UPDATE row trigger makes every UPDATE lock each
 * row again before writing it (to hand the trigger the row it replaces),
 * and re-read the trigger's WHEN clause in every statement, for rows of
 * which none is ever refused in the normal course: 4.9 % of the server CPU
 * of plain claim + complete_job, 2.2 % of batched claims and completions.
 * Raised here, when the statement's row triggers fire at its end, the
 * error rolls the statement back just the same.
 */
Datum
workflow_job_queue_sync_step(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	oldtup;
	HeapTuple	newtup;
	bool		isnull;
	Datum		d;
	pg_uuid_t	step_id;
	pg_uuid_t	job_id;
	pg_uuid_t	run_id;
	char	   *old_status;
	char	   *new_status;
	const char *to;

	CheckTrigger(fcinfo, "job_queue_sync_step");
	if (!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		elog(ERROR, "job_queue_sync_step: must be fired after update for each row");

	desc = trigdata->tg_relation->rd_att;
	oldtup = trigdata->tg_trigtuple;
	newtup = trigdata->tg_newtuple;

	old_status = WfEnumLabel(GetColumn(oldtup, desc, "status", &isnull));
	new_status = WfEnumLabel(GetColumn(newtup, desc, "status", &isnull));
	if (strcmp(old_status, new_status) == 0)
		return PointerGetDatum(NULL);
	/* the engine itself never moves a finished job today; see the guard */
	if (WF_TERMINAL_STATUS(old_status) && !WfEngineWriting())
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": a finished job cannot change status"),
				 errdetail("Job %s is %s.",
						   WfUuidString(DatumGetUUIDP(GetColumn(oldtup, desc, "id", &isnull))),
						   old_status)));

	d = GetColumn(newtup, desc, "workflow_step_id", &isnull);
	if (isnull)
		return PointerGetDatum(NULL);
	memcpy(&step_id, DatumGetUUIDP(d), sizeof(pg_uuid_t));
	/* a step link without a run names no step of ours */
	d = GetColumn(newtup, desc, "workflow_run_id", &isnull);
	if (isnull)
		return PointerGetDatum(NULL);
	memcpy(&run_id, DatumGetUUIDP(d), sizeof(pg_uuid_t));
	d = GetColumn(newtup, desc, "id", &isnull);
	memcpy(&job_id, DatumGetUUIDP(d), sizeof(pg_uuid_t));

	if (strcmp(new_status, "RUNNING") == 0)
		to = "RUNNING";
	else if (strcmp(new_status, "QUEUED") == 0)
		to = "ENQUEUED";
	else
	{
		WfRequireReadCommitted();
		if (strcmp(new_status, "SUCCEEDED") == 0)
			to = "SUCCEEDED";
		else if (strcmp(new_status, "FAILED") == 0)
			to = "FAILED";
		else if (strcmp(new_status, "CANCELED") == 0)
			to = "CANCELED";
		else
			elog(ERROR, "job_queue_sync_step: unexpected job status \"%s\"",
				 new_status);
		if (DatumGetBool(GetColumn(newtup, desc, "compensation", &isnull)))
		{
			NoteCompensationEnded(&step_id, &job_id, &run_id,
								  strcmp(new_status, "SUCCEEDED") == 0,
								  newtup, desc);
			return PointerGetDatum(NULL);
		}
	}
	NoteStepSync(&step_id, &job_id, &run_id, to, oldtup, newtup, desc);

	return PointerGetDatum(NULL);
}

/* IsTerminalSync says whether a move finishes its step. */
static bool
IsTerminalSync(const StepSync *sync)
{
	return strcmp(sync->to, "RUNNING") != 0 && strcmp(sync->to, "ENQUEUED") != 0;
}

/* Whether a step appears twice among items. */
static bool
HasRepeatedStep(const StepSync *items, int n)
{
	pg_uuid_t  *ids = palloc(sizeof(pg_uuid_t) * n);
	bool		repeated = false;

	for (int i = 0; i < n; i++)
		ids[i] = items[i].step_id;
	qsort(ids, n, sizeof(pg_uuid_t), WfUuidCmpQsort);
	for (int i = 1; i < n && !repeated; i++)
		repeated = WfUuidCompare(&ids[i - 1], &ids[i]) == 0;
	pfree(ids);
	return repeated;
}

/*
 * FlushStepSyncs writes the step moves noted in the current subtransaction
 * (the tail of the list).  The caller is connected to SPI.
 *
 * The tail is copied out and cut off first, because a user's trigger on
 * workflow_steps may update job_queue while these moves are written, and
 * that statement notes and writes moves of its own.  Their values stay in
 * sync_context, which is not reset while any flush is still running.
 */
static void
FlushStepSyncs(void)
{
	SubTransactionId subid = GetCurrentSubTransactionId();
	StepSync   *items;
	int			first = n_syncs;
	int			n;

	while (first > 0 && syncs[first - 1].subid >= subid)
		first--;
	n = n_syncs - first;
	if (n == 0)
		return;
	items = palloc(sizeof(StepSync) * n);
	memcpy(items, syncs + first, sizeof(StepSync) * n);
	n_syncs = first;

	flush_depth++;
	PG_TRY();
	{
		/*
		 * One statement cannot move a row twice: when a user's trigger moved
		 * a step's job again within the statement, the moves go one by one.
		 */
		if (n == 1 || HasRepeatedStep(items, n))
			SyncStepsInOrder(items, n);
		else
			SyncSteps(items, n);
	}
	PG_FINALLY();
	{
		flush_depth--;
	}
	PG_END_TRY();
	pfree(items);
	if (n_syncs == 0 && flush_depth == 0)
		SyncReset();
}

/* SyncEventValues sets a move's event and detail parameters. */
static void
SyncEventValues(const StepSync *sync, Datum *values, char *nulls)
{
	if (sync->event == NULL)
	{
		nulls[0] = nulls[1] = 'n';
		return;
	}
	values[0] = CStringGetTextDatum(sync->event);
	values[1] = CStringGetTextDatum(sync->detail);
}

/* A claimed job's step runs; started_at is kept from the first attempt. */
static void
SyncStepClaimed(const StepSync *sync)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH s AS (UPDATE workflow.workflow_steps SET status = 'RUNNING',"
		" started_at = COALESCE(started_at, $2),"
		" history_gap = history_gap OR $5 IS NULL,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE id" OP("=") "$1 AND status" OP("=") "'ENQUEUED'"
		" AND job_id" OP("=") "$3 AND workflow_run_id" OP("=") "$4"
		" RETURNING workflow_run_id, step_key)"
		" " WF_INSERT_EVENTS
		" SELECT s.workflow_run_id, s.step_key, $5, $6::pg_catalog.jsonb FROM s"
		" WHERE $5 IS NOT NULL";
	static const Oid types[6] = {UUIDOID, TIMESTAMPTZOID, UUIDOID, UUIDOID,
	TEXTOID, TEXTOID};
	Datum		values[6];
	char		nulls[6] = "      ";

	values[0] = UUIDPGetDatum(&sync->step_id);
	values[2] = UUIDPGetDatum(&sync->job_id);
	values[3] = UUIDPGetDatum(&sync->run_id);
	values[1] = sync->values[SYNC_STARTED_AT];
	if (sync->nulls[SYNC_STARTED_AT])
		nulls[1] = 'n';
	SyncEventValues(sync, values + 4, nulls + 4);
	WfExecuteAsEngine(&plan, sql, 6, types, values, nulls);
}

/* A retried, released or reaped job's step is ENQUEUED again. */
static void
SyncStepRequeued(const StepSync *sync)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH s AS (UPDATE workflow.workflow_steps SET status = 'ENQUEUED',"
		" last_error_code = COALESCE($2, last_error_code),"
		" last_error_message = COALESCE($3, last_error_message),"
		" history_gap = history_gap OR $6 IS NULL,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE id" OP("=") "$1 AND status" OP("=") "'RUNNING'"
		" AND job_id" OP("=") "$4 AND workflow_run_id" OP("=") "$5"
		" RETURNING workflow_run_id, step_key)"
		" " WF_INSERT_EVENTS
		" SELECT s.workflow_run_id, s.step_key, $6, $7::pg_catalog.jsonb FROM s"
		" WHERE $6 IS NOT NULL";
	static const Oid types[7] = {UUIDOID, TEXTOID, TEXTOID, UUIDOID, UUIDOID,
	TEXTOID, TEXTOID};
	Datum		values[7];
	char		nulls[7] = "       ";

	values[0] = UUIDPGetDatum(&sync->step_id);
	values[3] = UUIDPGetDatum(&sync->job_id);
	values[4] = UUIDPGetDatum(&sync->run_id);
	values[1] = sync->values[SYNC_ERROR_CODE];
	if (sync->nulls[SYNC_ERROR_CODE])
		nulls[1] = 'n';
	values[2] = sync->values[SYNC_ERROR_MSG];
	if (sync->nulls[SYNC_ERROR_MSG])
		nulls[2] = 'n';
	SyncEventValues(sync, values + 5, nulls + 5);
	WfExecuteAsEngine(&plan, sql, 7, types, values, nulls);
}

/*
 * A terminal job finishes its step, unless the step is terminal already
 * (cancel_run marks steps before their jobs).  Returns whether it did, with
 * the step's run and counter shard.
 */
static bool
SyncStepTerminal(const StepSync *sync, pg_uuid_t *run_id, int16 *shard,
				 bool *capped)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH s AS (UPDATE workflow.workflow_steps SET"
		" status = $2::workflow.step_status,"
		" output = CASE WHEN $2" OP("=") "'SUCCEEDED' THEN $3 END,"
		" last_error_code = $4,"
		" last_error_message = $5,"
		" status_reason = CASE WHEN $2" OP("=") "'CANCELED'"
		"  THEN '" WF_JOB_CANCELED "' END,"
		" started_at = COALESCE(started_at, $6),"
		" completion_seq = CASE WHEN $2" OP("=") "'SUCCEEDED' AND compensate IS NOT NULL"
		"  THEN pg_catalog.nextval('workflow.step_completion_seq') END,"
		" finished_at = pg_catalog.statement_timestamp(),"
		" history_gap = history_gap OR $9 IS NULL,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE id" OP("=") "$1"
		" AND status" OP("=") "ANY ('{ENQUEUED,RUNNING}'::workflow.step_status[])"
		" AND job_id" OP("=") "$7 AND workflow_run_id" OP("=") "$8"
		" RETURNING workflow_run_id, counter_shard::pg_catalog.int4 AS shard,"
		" step_key, capped),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT s.workflow_run_id, s.step_key, $9, $10::pg_catalog.jsonb FROM s"
		" WHERE $9 IS NOT NULL)"
		" SELECT s.workflow_run_id, s.shard, s.capped FROM s";
	static const Oid types[10] = {UUIDOID, TEXTOID, JSONBOID, TEXTOID,
	TEXTOID, TIMESTAMPTZOID, UUIDOID, UUIDOID, TEXTOID, TEXTOID};
	Datum		values[10];
	char		nulls[10] = "          ";

	values[0] = UUIDPGetDatum(&sync->step_id);
	values[6] = UUIDPGetDatum(&sync->job_id);
	values[7] = UUIDPGetDatum(&sync->run_id);
	values[1] = CStringGetTextDatum(sync->to);
	for (int i = 0; i < 4; i++)
	{
		values[2 + i] = sync->values[i];
		if (sync->nulls[i])
			nulls[2 + i] = 'n';
	}
	SyncEventValues(sync, values + 8, nulls + 8);

	WfExecuteAsEngine(&plan, sql, 10, types, values, nulls);
	if (SPI_processed == 0)
		return false;
	WfResultUuid(0, 1, run_id);
	*shard = (int16) WfResultInt32(0, 2);
	*capped = WfResultBool(0, 3);
	return true;
}

/*
 * SyncStepsInOrder writes moves one statement each, in the order noted.
 * The finished steps are reported only once every move is written: a
 * statement that a user's trigger runs in between, in a subtransaction of
 * its own, must not take them into that subtransaction's cascade.
 */
static void
SyncStepsInOrder(const StepSync *items, int n)
{
	pg_uuid_t  *runs = palloc(sizeof(pg_uuid_t) * n);
	int16	   *shards = palloc(sizeof(int16) * n);
	bool	   *finished = palloc(sizeof(bool) * n);
	bool	   *capped = palloc(sizeof(bool) * n);

	for (int i = 0; i < n; i++)
	{
		finished[i] = false;
		if (strcmp(items[i].to, "RUNNING") == 0)
			SyncStepClaimed(&items[i]);
		else if (strcmp(items[i].to, "ENQUEUED") == 0)
			SyncStepRequeued(&items[i]);
		else
			finished[i] = SyncStepTerminal(&items[i], &runs[i], &shards[i],
										   &capped[i]);
	}
	for (int i = 0; i < n; i++)
		if (finished[i])
			WfNoteJobStepTerminal(&runs[i], shards[i], &items[i].step_id,
								  items[i].to, capped[i]);
	pfree(runs);
	pfree(shards);
	pfree(finished);
	pfree(capped);
}

/*
 * SyncSteps writes several step moves in one statement, each as the
 * function above for its kind would, in the order noted, and reports the
 * steps it finished.  One statement instead of one per job: each
 * statement's executor start costs more than the row it writes.
 */
static void
SyncSteps(const StepSync *items, int n)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET"
		" status = x.status::workflow.step_status,"
		" output = CASE WHEN x.status" OP("=") "'SUCCEEDED' THEN x.output"
		"  WHEN x.status" OP("=") "ANY ('{RUNNING,ENQUEUED}'::pg_catalog.text[])"
		"  THEN s.output END,"
		" last_error_code = CASE WHEN x.status" OP("=") "'RUNNING' THEN s.last_error_code"
		"  WHEN x.status" OP("=") "'ENQUEUED' THEN COALESCE(x.code, s.last_error_code)"
		"  ELSE x.code END,"
		" last_error_message = CASE WHEN x.status" OP("=") "'RUNNING' THEN s.last_error_message"
		"  WHEN x.status" OP("=") "'ENQUEUED' THEN COALESCE(x.message, s.last_error_message)"
		"  ELSE x.message END,"
		" status_reason = CASE"
		"  WHEN x.status" OP("=") "ANY ('{RUNNING,ENQUEUED}'::pg_catalog.text[])"
		"  THEN s.status_reason"
		"  WHEN x.status" OP("=") "'CANCELED' THEN '" WF_JOB_CANCELED "' END,"
		" started_at = COALESCE(s.started_at, x.started_at),"
		" completion_seq = CASE WHEN x.status" OP("=") "'SUCCEEDED' AND s.compensate IS NOT NULL"
		"  THEN pg_catalog.nextval('workflow.step_completion_seq') END,"
		" finished_at = CASE"
		"  WHEN x.status" OP("=") "ANY ('{RUNNING,ENQUEUED}'::pg_catalog.text[])"
		"  THEN s.finished_at ELSE pg_catalog.statement_timestamp() END,"
		" history_gap = s.history_gap OR x.event IS NULL,"
		" updated_at = pg_catalog.statement_timestamp()"
		" FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.uuid[]),"
		"  pg_catalog.unnest($2::pg_catalog.text[]),"
		"  pg_catalog.unnest($3::pg_catalog.jsonb[]),"
		"  pg_catalog.unnest($4::pg_catalog.text[]),"
		"  pg_catalog.unnest($5::pg_catalog.text[]),"
		"  pg_catalog.unnest($6::pg_catalog.timestamptz[]),"
		"  pg_catalog.unnest($7::pg_catalog.uuid[]),"
		"  pg_catalog.unnest($8::pg_catalog.uuid[]),"
		"  pg_catalog.unnest($9::pg_catalog.text[]),"
		"  pg_catalog.unnest($10::pg_catalog.text[]))"
		"  AS x(id, status, output, code, message, started_at, job_id, run_id,"
		"  event, detail)"
		" WHERE s.id" OP("=") "x.id"
		" AND s.job_id" OP("=") "x.job_id AND s.workflow_run_id" OP("=") "x.run_id"
		" AND CASE WHEN x.status" OP("=") "'RUNNING' THEN s.status" OP("=") "'ENQUEUED'"
		"  WHEN x.status" OP("=") "'ENQUEUED' THEN s.status" OP("=") "'RUNNING'"
		"  ELSE s.status" OP("=") "ANY ('{ENQUEUED,RUNNING}'::workflow.step_status[]) END"
		" RETURNING s.id, s.workflow_run_id,"
		"  s.counter_shard::pg_catalog.int4 AS shard, x.status, s.step_key,"
		"  x.event, x.detail, s.capped),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, u.event, u.detail::pg_catalog.jsonb"
		"  FROM u WHERE u.event IS NOT NULL)"
		" SELECT u.id, u.workflow_run_id, u.shard, u.status, u.capped FROM u";
	static const Oid types[10] = {UUIDARRAYOID, TEXTARRAYOID, JSONBARRAYOID,
	TEXTARRAYOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID, UUIDARRAYOID,
	UUIDARRAYOID, TEXTARRAYOID, TEXTARRAYOID};
	Datum		values[10];

	SyncStepsValues(items, n, values);
	WfExecuteAsEngine(&plan, sql, 10, types, values, NULL);
	NoteSyncedTerminal();
}

/*
 * SyncStepsValues builds the parameters of SyncSteps' statement, one array
 * element per move: the step, its new status, the job's values the move
 * takes (NULL where its kind takes none), the job and the run.
 */
static void
SyncStepsValues(const StepSync *items, int n, Datum *values)
{
	static const Oid elemtypes[4] = {JSONBOID, TEXTOID, TEXTOID, TIMESTAMPTZOID};
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *tos = palloc(sizeof(Datum) * n);
	Datum	   *cols = palloc(sizeof(Datum) * n);
	bool	   *col_nulls = palloc(sizeof(bool) * n);

	for (int i = 0; i < n; i++)
	{
		ids[i] = UUIDPGetDatum(&items[i].step_id);
		tos[i] = CStringGetTextDatum(items[i].to);
	}
	values[0] = WfArray(ids, NULL, n, UUIDOID);
	values[1] = WfArray(tos, NULL, n, TEXTOID);
	for (int i = 0; i < n; i++)
		ids[i] = UUIDPGetDatum(&items[i].job_id);
	values[6] = WfArray(ids, NULL, n, UUIDOID);
	for (int i = 0; i < n; i++)
		ids[i] = UUIDPGetDatum(&items[i].run_id);
	values[7] = WfArray(ids, NULL, n, UUIDOID);
	for (int i = 0; i < n; i++)
	{
		col_nulls[i] = items[i].event == NULL;
		cols[i] = col_nulls[i] ? (Datum) 0 : CStringGetTextDatum(items[i].event);
	}
	values[8] = WfArray(cols, col_nulls, n, TEXTOID);
	for (int i = 0; i < n; i++)
		cols[i] = col_nulls[i] ? (Datum) 0 : CStringGetTextDatum(items[i].detail);
	values[9] = WfArray(cols, col_nulls, n, TEXTOID);
	for (int c = 0; c < 4; c++)
	{
		for (int i = 0; i < n; i++)
		{
			/* a claim takes started_at; a requeue takes none of it */
			bool		used = c == SYNC_STARTED_AT ?
				strcmp(items[i].to, "ENQUEUED") != 0 :
				c == SYNC_OUTPUT ? IsTerminalSync(&items[i]) :
				strcmp(items[i].to, "RUNNING") != 0;

			col_nulls[i] = !used || items[i].nulls[c];
			cols[i] = col_nulls[i] ? (Datum) 0 : items[i].values[c];
		}
		values[2 + c] = WfArray(cols, col_nulls, n, elemtypes[c]);
	}
}

/*
 * NoteSyncedTerminal reports to the cascade the steps that SyncSteps'
 * statement finished, from the rows it returned.
 */
static void
NoteSyncedTerminal(void)
{
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		pg_uuid_t	step_id;
		pg_uuid_t	run_id;
		char	   *to = WfResultText(r, 4);

		if (strcmp(to, "RUNNING") == 0 || strcmp(to, "ENQUEUED") == 0)
			continue;
		WfResultUuid(r, 1, &step_id);
		WfResultUuid(r, 2, &run_id);
		WfNoteJobStepTerminal(&run_id, (int16) WfResultInt32(r, 3), &step_id,
							  to, WfResultBool(r, 5));
	}
}

/*
 * workflow_job_queue_finish_statement writes the steps the statement's
 * row triggers noted, then runs the cascade and the run counters for every
 * step it finished (unless a batch call defers them to its own end).
 */
Datum
workflow_job_queue_finish_statement(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	CheckTrigger(fcinfo, "job_queue_finish_statement");
	if (!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event))
		elog(ERROR, "job_queue_finish_statement: must be fired after each statement");

	if (n_syncs == 0 && (WfDeferDepth() > 0 || !WfHasPending()))
		return PointerGetDatum(NULL);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	FlushStepSyncs();
	if (WfDeferDepth() == 0)
		WfFinishPending();
	SPI_finish();
	return PointerGetDatum(NULL);
}

/*
 * workflow_job_queue_guard refuses to delete the job of a step that is not
 * finished.  Until 1.5 it also refused, BEFORE UPDATE, to move a job out
 * of a terminal status; job_queue_sync_step does that now.
 */
Datum
workflow_job_queue_guard(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	bool		isnull;
	Datum		d;

	CheckTrigger(fcinfo, "job_queue_guard");
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		elog(ERROR, "job_queue_guard: must be fired before each row");

	desc = trigdata->tg_relation->rd_att;

	if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
	{
		static SPIPlanPtr plan = NULL;
		static const char *sql =
			"SELECT status::pg_catalog.text FROM workflow.workflow_steps"
			" WHERE id" OP("=") "$1";
		static const Oid types[1] = {UUIDOID};
		Datum		values[1];
		char	   *step_status = NULL;

		d = GetColumn(trigdata->tg_trigtuple, desc, "workflow_step_id", &isnull);
		if (isnull || WfEngineWriting())
			return PointerGetDatum(trigdata->tg_trigtuple);

		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		values[0] = d;
		WfExecute(&plan, sql, 1, types, values, NULL, false, 1);
		if (SPI_processed == 1)
			step_status = WfResultText(0, 1);
		/* a step undone, or whose undoing failed, is finished too */
		if (step_status != NULL && !WF_TERMINAL_STATUS(step_status) &&
			strcmp(step_status, "COMPENSATED") != 0 &&
			strcmp(step_status, "COMPENSATION_FAILED") != 0)
			ereport(ERROR,
					(errcode(WF_SQLSTATE_INTERNAL),
					 errmsg(WF_INTERNAL_STATE ": the job of a live step cannot be deleted"),
					 errdetail("Step %s is %s.",
							   WfUuidString(DatumGetUUIDP(d)), step_status)));
		SPI_finish();
		return PointerGetDatum(trigdata->tg_trigtuple);
	}

	elog(ERROR, "job_queue_guard: must be fired by DELETE");
	return PointerGetDatum(NULL);	/* keep compiler quiet */
}

/*
 * workflow_workflow_steps_guard refuses direct status changes of steps:
 * only the engine moves a step, together with its run's counters.
 */
Datum
workflow_workflow_steps_guard(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	CheckTrigger(fcinfo, "workflow_steps_guard");
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		elog(ERROR, "workflow_steps_guard: must be fired before update for each row");

	if (!WfEngineWriting())
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": step status is changed only by the engine"),
				 errhint("Use complete_job, fail_job, cancel_job, complete_external_step or cancel_run.")));
	return PointerGetDatum(trigdata->tg_newtuple);
}

/*
 * workflow_workflow_events_guard keeps the history append-only: only the
 * engine deletes events (purge, with their run).
 */
Datum
workflow_workflow_events_guard(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	CheckTrigger(fcinfo, "workflow_events_guard");
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event))
		elog(ERROR, "workflow_events_guard: must be fired before each statement");

	if (!WfEngineWriting())
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": the event history is append-only"),
				 errdetail("Events are deleted only with their run, by purge.")));
	return PointerGetDatum(NULL);
}
