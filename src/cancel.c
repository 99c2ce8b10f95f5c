/*-------------------------------------------------------------------------
 *
 * cancel.c
 *	  cancel_run, retire_run and compensate_run: an operator stops a
 *	  whole run.
 *
 * Both end a run the same way; they differ in the status the run ends in
 * (CANCELED or RETIRED_UNRESUMABLE), the reason its steps and jobs are
 * given, its history event and the moves the run state machine allows
 * them (retire_run also ends a blocked run; a finished run is
 * run_already_terminal for cancel_run and an invalid move for retire_run).
 * cancel_run also stops a compensating run: its live compensation job is
 * canceled and its step COMPENSATION_FAILED.  compensate_run takes the
 * same locks, then hands the run to compensation.c.
 *
 * Locks, in order: the run's live jobs (ascending id), the run's release
 * lock exclusive (waiting for completions in flight, which hold it
 * shared), the live jobs again NOWAIT to catch jobs released meanwhile (a
 * job locked by someone else now means a worker is finishing it while
 * waiting for us: workflow.release_conflict), the live steps, then the
 * run's counter shards (if it has them) and the run row once, last.  Its
 * sleeping steps and event waits are canceled with the rest, their timers
 * cleared, so fire_timers finds nothing left of the run.  No
 * counter changes while the release lock is held exclusive, so the shards
 * are exact here.  The terminal check happens only under the release
 * lock.  Steps are canceled before jobs, so the job triggers find them
 * terminal and run no cascade, change no counter, notify nothing and
 * record no event: the steps' step_canceled events are written with them,
 * and the run's run_canceled after the run row (history.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_cancel_run);
PG_FUNCTION_INFO_V1(workflow_retire_run);
PG_FUNCTION_INFO_V1(workflow_compensate_run);

/* how one operator call ends a run */
typedef struct RunEnding
{
	const char *status;			/* the run's final status */
	const char *reason_code;	/* status_reason of its steps, code of its jobs */
	const char *event_type;		/* its run event */
	WfRunCall	call;
	bool		reason_required;
} RunEnding;

static const RunEnding cancel_ending = {
	"CANCELED", WF_REASON_RUN_CANCELED, "run_canceled", WF_CALL_CANCEL_RUN, false
};
static const RunEnding retire_ending = {
	"RETIRED_UNRESUMABLE", WF_REASON_RUN_RETIRED, "run_retired",
	WF_CALL_RETIRE_RUN, true
};

static Datum CancelRun(PG_FUNCTION_ARGS);
static Datum RetireRun(PG_FUNCTION_ARGS);
static Datum CompensateRun(PG_FUNCTION_ARGS);
static Datum EndRun(FunctionCallInfo fcinfo, const RunEnding *ending);
static void CheckEndingMove(const pg_uuid_t *run_id, const char *status,
							const RunEnding *ending);
static char *LockRunToStop(FunctionCallInfo fcinfo, bool reason_required,
						   pg_uuid_t **run_id, char **reason);

static int32 CancelSteps(const pg_uuid_t *run_id, Datum reason,
						 const char *nulls, const RunEnding *ending);
static void FinishCanceledRun(const pg_uuid_t *run_id, int32 ncanceled,
							  const char *from, const char *reason,
							  const RunEnding *ending);

/*
 * CancelSteps cancels every unfinished step of the run, held ones
 * included; returns how many.  It runs before the jobs are canceled, so
 * the job triggers find their steps terminal and do nothing.
 */
static int32
CancelSteps(const pg_uuid_t *run_id, Datum reason, const char *nulls,
			const RunEnding *ending)
{
	static SPIPlanPtr steps_plan = NULL;
	static const char *steps_sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET status = 'CANCELED',"
		" wake_at = NULL, held = false, parked_at = NULL,"
		" status_reason = $4,"
		" last_error_code = $4,"
		" last_error_message = $2,"
		" finished_at = pg_catalog.statement_timestamp(),"
		" history_gap = s.history_gap OR NOT $3,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.workflow_run_id" OP("=") "$1"
		" AND s.status" OP("=") "ANY ('{BLOCKED,PARKED,ENQUEUED,RUNNING,SLEEPING,WAITING_FOR_EXTERNAL}'::workflow.step_status[])"
		" RETURNING s.workflow_run_id, s.step_key),"
		" q AS (DELETE FROM workflow.parked_steps p"
		" WHERE p.workflow_run_id" OP("=") "$1),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'step_canceled',"
		"  pg_catalog.jsonb_build_object('error_code', $4, 'reason', $2)"
		"  FROM u WHERE $3)"
		" SELECT 1 FROM u";
	static const Oid steps_types[4] = {UUIDOID, TEXTOID, BOOLOID, TEXTOID};
	Datum		values[4];
	char		step_nulls[4] = "    ";

	values[0] = UUIDPGetDatum(run_id);
	values[1] = reason;
	step_nulls[1] = nulls[1];
	values[2] = BoolGetDatum(WfHistoryRecordsSteps());
	values[3] = CStringGetTextDatum(ending->reason_code);
	WfExecuteAsEngine(&steps_plan, steps_sql, 4, steps_types, values,
					  step_nulls);
	return (int32) SPI_processed;
}

/*
 * FinishCanceledRun moves the live counts of the run's counter shards, if
 * it has any, to canceled, then writes the run row once, last: its final
 * status, counters and finish time; and notifies that it finished.
 */
static void
FinishCanceledRun(const pg_uuid_t *run_id, int32 ncanceled, const char *from,
				  const char *reason, const RunEnding *ending)
{
	static SPIPlanPtr shards_plan = NULL;
	static const char *shards_sql =
		"UPDATE workflow.workflow_run_counters c SET"
		" steps_canceled = c.steps_canceled" OP("+") "c.steps_active"
		"  " OP("+") "c.steps_waiting" OP("+") "c.steps_blocked,"
		" steps_active = 0, steps_waiting = 0, steps_blocked = 0"
		" WHERE c.workflow_run_id" OP("=") "$1";
	static const Oid shards_types[1] = {UUIDOID};
	static SPIPlanPtr finish_plan = NULL;
	static const char *finish_sql =
		"UPDATE workflow.workflow_runs r SET status = $4::workflow.run_status,"
		" steps_succeeded = CASE WHEN r.counter_shards" OP(">") "0"
		"  THEN t.succeeded ELSE r.steps_succeeded END,"
		" steps_failed = CASE WHEN r.counter_shards" OP(">") "0"
		"  THEN t.failed ELSE r.steps_failed END,"
		" steps_canceled = CASE WHEN r.counter_shards" OP(">") "0"
		"  THEN t.canceled ELSE r.steps_canceled" OP("+") "$2 END,"
		" executions_used = CASE WHEN r.counter_shards" OP(">") "0"
		"  THEN t.executions ELSE r.executions_used END,"
		" steps_active = 0, steps_waiting = 0, steps_blocked = 0,"
		" steps_parked = 0, result = NULL,"
		" finished_at = pg_catalog.statement_timestamp(),"
		" history_gap = r.history_gap OR NOT $3,"
		" updated_at = pg_catalog.statement_timestamp()"
		" FROM (SELECT COALESCE(pg_catalog.sum(c.steps_succeeded), 0)::pg_catalog.int4 AS succeeded,"
		"  COALESCE(pg_catalog.sum(c.steps_failed), 0)::pg_catalog.int4 AS failed,"
		"  COALESCE(pg_catalog.sum(c.steps_canceled), 0)::pg_catalog.int4 AS canceled,"
		"  COALESCE(pg_catalog.sum(c.executions_used), 0)::pg_catalog.int4 AS executions"
		"  FROM workflow.workflow_run_counters c"
		"  WHERE c.workflow_run_id" OP("=") "$1) t"
		" WHERE r.id" OP("=") "$1 RETURNING r.organization_id";
	static const Oid finish_types[4] = {UUIDOID, INT4OID, BOOLOID, TEXTOID};
	Datum		values[4];
	pg_uuid_t	org;
	bool		has_org;
	StringInfoData detail;

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&shards_plan, shards_sql, 1, shards_types, values, NULL,
			  false, 0);
	values[1] = Int32GetDatum(ncanceled);
	values[2] = BoolGetDatum(WfHistoryRecordsRuns());
	values[3] = CStringGetTextDatum(ending->status);
	WfExecute(&finish_plan, finish_sql, 4, finish_types, values, NULL,
			  false, 0);
	has_org = WfResultUuid(0, 1, &org);
	WfDetailBegin(&detail);
	WfDetailText(&detail, "from", from);
	WfDetailText(&detail, "reason", reason);
	WfRecordRunEvent(run_id, ending->event_type, WfDetailEnd(&detail));
	WfNotifyRunTerminal(run_id, has_org ? &org : NULL, ending->status);
}

/*
 * CheckEndingMove raises unless the run, in status under its release
 * lock, may end as ending says: a finished run is run_already_terminal
 * for cancel_run (as it always was), an invalid move for retire_run.
 */
static void
CheckEndingMove(const pg_uuid_t *run_id, const char *status,
				const RunEnding *ending)
{
	if (ending->call == WF_CALL_CANCEL_RUN && WfRunStatusTerminal(status))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_WRONG_STATE),
				 errmsg(WF_RUN_ALREADY_TERMINAL ": run %s is %s",
						WfUuidString(run_id), status)));
	WfCheckRunMove(run_id, status, ending->status, ending->call);
}

/*
 * LockRunToStop reads the arguments (run, reason, organization) of a call
 * that stops a run, then takes its locks in order: the run's live jobs, its
 * release lock exclusive (waiting for the completions in flight).  Returns
 * the run's status, which only now is final for the caller to judge.  The
 * caller is connected to SPI.
 */
static char *
LockRunToStop(FunctionCallInfo fcinfo, bool reason_required,
			  pg_uuid_t **run_id, char **reason)
{
	WfRequireReadCommitted();
	if (PG_ARGISNULL(0))
		wf_invalid_argument("workflow_run_id must not be null");
	if (PG_ARGISNULL(1) && reason_required)
		wf_invalid_argument("reason must not be null");
	*run_id = PG_GETARG_UUID_P(0);
	*reason = PG_ARGISNULL(1) ? NULL :
		WfTruncateMessage(text_to_cstring(PG_GETARG_TEXT_PP(1)));

	WfFindRun(*run_id, PG_ARGISNULL(2) ? NULL : PG_GETARG_UUID_P(2));
	WfLockLiveJobs(*run_id, WfHoldsLateLocks(), NULL);
	WfLockRunRelease(*run_id, true, true);
	WfNoteLateLocks();
	return WfFindRun(*run_id, NULL);
}

/*
 * EndRun ends a run and everything in it not yet finished, as ending says;
 * a repeat returns the status the run already ended in.
 */
static Datum
EndRun(FunctionCallInfo fcinfo, const RunEnding *ending)
{
	pg_uuid_t  *run_id;
	char	   *reason;
	char	   *status;
	Datum		reason_value;
	char		nulls[2] = "  ";
	Datum	   *job_ids;
	uint64		njobs;
	int32		ncanceled;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* 1. live jobs, 2. the release lock exclusive, 3. the status */
	status = LockRunToStop(fcinfo, ending->reason_required, &run_id, &reason);
	if (strcmp(status, ending->status) == 0)
	{
		PG_RETURN_DATUM(WfRunStatusResult(fcinfo, ending->status));
	}
	CheckEndingMove(run_id, status, ending);

	/* 4. jobs released while we waited */
	njobs = WfLockLiveJobs(run_id, true, &job_ids);

	/* 5. steps before jobs, so the job triggers find nothing to do */
	reason_value = reason ? CStringGetTextDatum(reason) : (Datum) 0;
	nulls[1] = reason ? ' ' : 'n';
	if (strcmp(status, "COMPENSATING") == 0)
		WfAbandonCompensation(run_id, reason_value, reason == NULL);
	ncanceled = CancelSteps(run_id, reason_value, nulls, ending);
	WfCancelJobs(job_ids, njobs, ending->reason_code, reason_value,
				 reason == NULL);

	/* 6. its counter shards, if any, then the run, once, last */
	FinishCanceledRun(run_id, ncanceled, status, reason, ending);
	PG_RETURN_DATUM(WfRunStatusResult(fcinfo, ending->status));
}

/*
 * CompensateRun starts to undo a run: workflow.compensate_run.  The locks
 * are cancel_run's; the run moves to COMPENSATING and its first
 * compensation job is made (or it ends at once when nothing is left to
 * undo).  A run being or having been undone returns its status.
 */
static Datum
CompensateRun(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *run_id;
	char	   *reason;
	char	   *status;
	Datum	   *job_ids;
	uint64		njobs;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	status = LockRunToStop(fcinfo, false, &run_id, &reason);
	if (!WfRunStatusCompensation(status))
	{
		WfCheckRunMove(run_id, status, "COMPENSATING", WF_CALL_COMPENSATE_RUN);
		njobs = WfLockLiveJobs(run_id, true, &job_ids);
		WfStartCompensation(run_id, reason, WF_CALL_COMPENSATE_RUN, false);
		WfCancelJobs(job_ids, njobs, WF_REASON_RUN_COMPENSATING,
					 reason ? CStringGetTextDatum(reason) : (Datum) 0,
					 reason == NULL);
		WfFinishPending();
		WfAdvanceCompensation(run_id, 0);
		status = WfFindRun(run_id, NULL);
	}
	PG_RETURN_DATUM(WfRunStatusResult(fcinfo, status));
}

/* CancelRun cancels a run: workflow.cancel_run. */
static Datum
CancelRun(PG_FUNCTION_ARGS)
{
	return EndRun(fcinfo, &cancel_ending);
}

/* RetireRun ends a run RETIRED_UNRESUMABLE: workflow.retire_run. */
static Datum
RetireRun(PG_FUNCTION_ARGS)
{
	return EndRun(fcinfo, &retire_ending);
}

/*
 * The SQL-callable entry points: each body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
WF_OWNER_ENTRY(workflow_cancel_run, CancelRun)
WF_OWNER_ENTRY(workflow_retire_run, RetireRun)
WF_OWNER_ENTRY(workflow_compensate_run, CompensateRun)
