/*-------------------------------------------------------------------------
 *
 * triggers.c
 *	  Triggers on job_queue and workflow_steps.
 *
 * job_queue_sync_step (AFTER UPDATE, per row) keeps a step in step with
 * its job: a claim makes it RUNNING, a retry or release ENQUEUED, a
 * terminal job makes it terminal and reports it to the cascade.
 * job_queue_finish_statement (AFTER UPDATE, per statement) then runs the
 * cascade and the run counters once for the whole statement.  This holds
 * for direct UPDATEs of job_queue too.  The guards refuse writes that
 * would corrupt state, unless the engine itself is writing.
 *
 * Locks: the step row of the job being updated (the caller holds the job
 * row); the rest is taken by cascade.c and status.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/builtins.h"
#include "utils/rel.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_job_queue_sync_step);
PG_FUNCTION_INFO_V1(workflow_job_queue_finish_statement);
PG_FUNCTION_INFO_V1(workflow_job_queue_guard);
PG_FUNCTION_INFO_V1(workflow_workflow_steps_guard);

static int	defer_depth = 0;

static void SyncStepClaimed(const pg_uuid_t *step_id, HeapTuple newtup,
							TupleDesc desc);
static void SyncStepRequeued(const pg_uuid_t *step_id, HeapTuple newtup,
							 TupleDesc desc);
static void SyncStepTerminal(const pg_uuid_t *step_id, const char *status,
							 HeapTuple newtup, TupleDesc desc);

/*
 * WfDeferFinishBegin makes the statement trigger leave collected work for
 * the caller, which finishes a whole batch of statements at once so that
 * its run rows are locked once, in order, at the end.
 */
void
WfDeferFinishBegin(void)
{
	defer_depth++;
}

void
WfDeferFinishEnd(void)
{
	if (defer_depth > 0)
		defer_depth--;
}

void
WfDeferReset(void)
{
	defer_depth = 0;
}

int
WfDeferDepth(void)
{
	return defer_depth;
}

/* WfDeferRestore puts back the depth saved before a batch, on any exit. */
void
WfDeferRestore(int depth)
{
	defer_depth = depth;
}

static Datum
GetColumn(HeapTuple tuple, TupleDesc desc, const char *name, bool *isnull)
{
	int			attnum = SPI_fnumber(desc, name);

	if (attnum <= 0)
		elog(ERROR, "job_queue has no column \"%s\"", name);
	return SPI_getbinval(tuple, desc, attnum, isnull);
}

static void
CheckTrigger(FunctionCallInfo fcinfo, const char *name)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "%s: not called by trigger manager", name);
}

/* workflow_job_queue_sync_step moves a job's step with the job. */
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
	char	   *old_status;
	char	   *new_status;

	CheckTrigger(fcinfo, "job_queue_sync_step");
	if (!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		elog(ERROR, "job_queue_sync_step: must be fired after update for each row");

	desc = trigdata->tg_relation->rd_att;
	oldtup = trigdata->tg_trigtuple;
	newtup = trigdata->tg_newtuple;

	d = GetColumn(newtup, desc, "workflow_step_id", &isnull);
	if (isnull)
		return PointerGetDatum(NULL);
	memcpy(&step_id, DatumGetUUIDP(d), sizeof(pg_uuid_t));
	old_status = WfEnumLabel(GetColumn(oldtup, desc, "status", &isnull));
	new_status = WfEnumLabel(GetColumn(newtup, desc, "status", &isnull));
	if (strcmp(old_status, new_status) == 0)
		return PointerGetDatum(NULL);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (strcmp(new_status, "RUNNING") == 0)
		SyncStepClaimed(&step_id, newtup, desc);
	else if (strcmp(new_status, "QUEUED") == 0)
		SyncStepRequeued(&step_id, newtup, desc);
	else
		SyncStepTerminal(&step_id, new_status, newtup, desc);
	SPI_finish();

	return PointerGetDatum(NULL);
}

/* A claimed job's step runs; started_at is kept from the first attempt. */
static void
SyncStepClaimed(const pg_uuid_t *step_id, HeapTuple newtup, TupleDesc desc)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_steps SET status = 'RUNNING',"
		" started_at = COALESCE(started_at, $2),"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE id" OP("=") "$1 AND status" OP("=") "'ENQUEUED'";
	static const Oid types[2] = {UUIDOID, TIMESTAMPTZOID};
	Datum		values[2];
	char		nulls[2] = "  ";
	bool		isnull;

	values[0] = UUIDPGetDatum(step_id);
	values[1] = GetColumn(newtup, desc, "started_at", &isnull);
	if (isnull)
		nulls[1] = 'n';
	WfExecuteAsEngine(&plan, sql, 2, types, values, nulls);
}

/* A retried, released or reaped job's step is ENQUEUED again. */
static void
SyncStepRequeued(const pg_uuid_t *step_id, HeapTuple newtup, TupleDesc desc)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_steps SET status = 'ENQUEUED',"
		" last_error_code = COALESCE($2, last_error_code),"
		" last_error_message = COALESCE($3, last_error_message),"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE id" OP("=") "$1 AND status" OP("=") "'RUNNING'";
	static const Oid types[3] = {UUIDOID, TEXTOID, TEXTOID};
	Datum		values[3];
	char		nulls[3] = "   ";
	bool		isnull;

	values[0] = UUIDPGetDatum(step_id);
	values[1] = GetColumn(newtup, desc, "last_error_code", &isnull);
	if (isnull)
		nulls[1] = 'n';
	values[2] = GetColumn(newtup, desc, "last_error_message", &isnull);
	if (isnull)
		nulls[2] = 'n';
	WfExecuteAsEngine(&plan, sql, 3, types, values, nulls);
}

/*
 * A terminal job finishes its step, unless the step is terminal already
 * (cancel_run marks steps before their jobs), and reports it.
 */
static void
SyncStepTerminal(const pg_uuid_t *step_id, const char *status,
				 HeapTuple newtup, TupleDesc desc)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_steps SET"
		" status = $2::workflow.step_status,"
		" output = CASE WHEN $2" OP("=") "'SUCCEEDED' THEN $3 END,"
		" last_error_code = $4,"
		" last_error_message = $5,"
		" status_reason = CASE WHEN $2" OP("=") "'CANCELED'"
		"  THEN '" WF_JOB_CANCELED "' END,"
		" started_at = COALESCE(started_at, $6),"
		" finished_at = pg_catalog.statement_timestamp(),"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE id" OP("=") "$1"
		" AND status" OP("=") "ANY ('{ENQUEUED,RUNNING}'::workflow.step_status[])"
		" RETURNING workflow_run_id, counter_shard::pg_catalog.int4";
	static const Oid types[6] = {UUIDOID, TEXTOID, JSONBOID, TEXTOID,
	TEXTOID, TIMESTAMPTZOID};
	Datum		values[6];
	char		nulls[6] = "      ";
	bool		isnull;
	pg_uuid_t	run_id;

	WfRequireReadCommitted();

	values[0] = UUIDPGetDatum(step_id);
	values[1] = CStringGetTextDatum(status);
	values[2] = GetColumn(newtup, desc, "output", &isnull);
	if (isnull)
		nulls[2] = 'n';
	values[3] = GetColumn(newtup, desc, "last_error_code", &isnull);
	if (isnull)
		nulls[3] = 'n';
	values[4] = GetColumn(newtup, desc, "last_error_message", &isnull);
	if (isnull)
		nulls[4] = 'n';
	values[5] = GetColumn(newtup, desc, "started_at", &isnull);
	if (isnull)
		nulls[5] = 'n';

	WfExecuteAsEngine(&plan, sql, 6, types, values, nulls);
	if (SPI_processed == 0)
		return;
	WfResultUuid(0, 1, &run_id);
	WfNoteStepTerminal(&run_id, (int16) WfResultInt32(0, 2), step_id, status,
					   WF_COUNT_ACTIVE);
}

/*
 * workflow_job_queue_finish_statement runs the cascade and the run
 * counters for every step the statement finished.
 */
Datum
workflow_job_queue_finish_statement(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	CheckTrigger(fcinfo, "job_queue_finish_statement");
	if (!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event))
		elog(ERROR, "job_queue_finish_statement: must be fired after each statement");

	if (defer_depth > 0 || !WfHasPending())
		return PointerGetDatum(NULL);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	WfFinishPending();
	SPI_finish();
	return PointerGetDatum(NULL);
}

/*
 * workflow_job_queue_guard refuses to move a job out of a terminal status
 * and to delete the job of a step that is not finished.
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

	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		if (!WfEngineWriting())
			ereport(ERROR,
					(errcode(WF_SQLSTATE_INTERNAL),
					 errmsg(WF_INTERNAL_STATE ": a finished job cannot change status"),
					 errdetail("Job %s is %s.",
							   WfUuidString(DatumGetUUIDP(GetColumn(trigdata->tg_trigtuple, desc, "id", &isnull))),
							   WfEnumLabel(GetColumn(trigdata->tg_trigtuple, desc, "status", &isnull)))));
		return PointerGetDatum(trigdata->tg_newtuple);
	}

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
		if (step_status != NULL && !WF_TERMINAL_STATUS(step_status))
			ereport(ERROR,
					(errcode(WF_SQLSTATE_INTERNAL),
					 errmsg(WF_INTERNAL_STATE ": the job of a live step cannot be deleted"),
					 errdetail("Step %s is %s.",
							   WfUuidString(DatumGetUUIDP(d)), step_status)));
		SPI_finish();
		return PointerGetDatum(trigdata->tg_trigtuple);
	}

	elog(ERROR, "job_queue_guard: must be fired by UPDATE or DELETE");
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
