/*-------------------------------------------------------------------------
 *
 * compensation.c
 *	  Sagas: undoing a run's succeeded steps, one compensation job at a
 *	  time, in exact reverse completion order.
 *
 * A job or external step may carry a compensate job.  When such a step
 * succeeds it draws its place in the completion order from
 * workflow.step_completion_seq (triggers.c, external.c), in the
 * transaction that finishes it, so a step released by another finishes
 * after it, and two steps finished by one call are told apart.
 *
 * WfStartCompensation cancels what is left of the run, marks the
 * succeeded steps with nothing to undo COMPENSATED (status_reason
 * workflow.no_compensation) and notes that the run's status moves to
 * COMPENSATING (status.c).  Once the counters are applied,
 * WfAdvanceCompensation starts the compensation job of the succeeded step
 * that finished last (the step is COMPENSATING, its job the compensation
 * job, of the step's next generation), or, when none is left, ends the run
 * COMPENSATED, or COMPENSATION_FAILED if any compensation failed.  When a
 * compensation job ends, WfSettleCompensationJob marks its step
 * COMPENSATED (the job succeeded) or COMPENSATION_FAILED (it failed for
 * good or was canceled) and advances: a failure does not stop the chain.
 * So a run has at most one live compensation job, and every step of the
 * chain is one row of the run's partial completion index: no call scans
 * the run except WfStartCompensation's marking of the steps with nothing
 * to undo.
 *
 * Locks: the caller holds the run's release lock (exclusive when it
 * starts a compensation, shared when a compensation job ends) and the
 * run's live jobs; this file takes the run's step rows it changes (its
 * succeeded ones NOWAIT, raising workflow.release_conflict: a transaction
 * holding one, a repeat of an external step's completion, may wait for
 * those jobs next), then the run row, last.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "workflow.h"

static WfCounter LiveCounter(const char *status);
static int16 CancelLiveSteps(const pg_uuid_t *run_id, Datum reason,
							 bool reason_null, bool nowait);
static void MarkNothingToUndo(const pg_uuid_t *run_id);
static bool StartNextCompensation(const pg_uuid_t *run_id);
static void FinishCompensatingRun(const pg_uuid_t *run_id, int32 failed,
								  bool finished);

/* LiveCounter is the run counter a live step of a status counts in. */
static WfCounter
LiveCounter(const char *status)
{
	if (strcmp(status, "BLOCKED") == 0)
		return WF_COUNT_BLOCKED;
	if (strcmp(status, "WAITING_FOR_EXTERNAL") == 0)
		return WF_COUNT_WAITING;
	if (strcmp(status, "PARKED") == 0)
		return WF_COUNT_PARKED;
	return WF_COUNT_ACTIVE;
}

/*
 * CancelLiveSteps cancels the run's live steps (workflow.run_compensating)
 * and moves their counters; returns a counter shard of the run to note
 * the run's move on (0 for a run without shards).  Rows another
 * transaction holds are waited for, or, when nowait, turned into
 * workflow.release_conflict.
 */
static int16
CancelLiveSteps(const pg_uuid_t *run_id, Datum reason, bool reason_null,
				bool nowait)
{
	static SPIPlanPtr lock_plan = NULL;
	static SPIPlanPtr lock_nowait_plan = NULL;
#define LIVE_STEPS_SQL \
	"SELECT s.id FROM workflow.workflow_steps s" \
	" WHERE s.workflow_run_id" OP("=") "$1" \
	" AND s.status" OP("=") "ANY ('{BLOCKED,PARKED,ENQUEUED,RUNNING,SLEEPING,WAITING_FOR_EXTERNAL}'::workflow.step_status[])" \
	" ORDER BY s.id FOR NO KEY UPDATE"
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET status = 'CANCELED',"
		" wake_at = NULL, held = false, parked_at = NULL,"
		" status_reason = '" WF_REASON_RUN_COMPENSATING "',"
		" last_error_code = '" WF_REASON_RUN_COMPENSATING "',"
		" last_error_message = $2,"
		" finished_at = pg_catalog.statement_timestamp(),"
		" history_gap = s.history_gap OR NOT $3,"
		" updated_at = pg_catalog.statement_timestamp()"
		" FROM (SELECT x.id, x.status FROM workflow.workflow_steps x"
		"  WHERE x.workflow_run_id" OP("=") "$1"
		"  AND x.status" OP("=") "ANY ('{BLOCKED,PARKED,ENQUEUED,RUNNING,SLEEPING,WAITING_FOR_EXTERNAL}'::workflow.step_status[])) o"
		" WHERE s.id" OP("=") "o.id"
		" RETURNING s.workflow_run_id, s.step_key, o.status::pg_catalog.text AS old_status,"
		" s.counter_shard::pg_catalog.int4 AS shard),"
		" q AS (DELETE FROM workflow.parked_steps p"
		" WHERE p.workflow_run_id" OP("=") "$1),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'step_canceled',"
		"  pg_catalog.jsonb_build_object('error_code', '" WF_REASON_RUN_COMPENSATING "'::pg_catalog.text,"
		"  'reason', $2)"
		"  FROM u WHERE $3)"
		" SELECT u.old_status, u.shard FROM u";
	static SPIPlanPtr shards_plan = NULL;
	static const char *shards_sql =
		"SELECT r.counter_shards::pg_catalog.int4 FROM workflow.workflow_runs r"
		" WHERE r.id" OP("=") "$1";
	static const Oid types[3] = {UUIDOID, TEXTOID, BOOLOID};
	Datum		values[3];
	char		nulls[3] = "   ";
	int16		shard;

	values[0] = UUIDPGetDatum(run_id);
	if (nowait)
		WfExecuteNowait(&lock_nowait_plan, LIVE_STEPS_SQL " NOWAIT", 1, types,
						values, NULL);
	else
		WfExecute(&lock_plan, LIVE_STEPS_SQL, 1, types, values, NULL, false, 0);

	values[1] = reason;
	nulls[1] = reason_null ? 'n' : ' ';
	values[2] = BoolGetDatum(WfHistoryRecordsSteps());
	WfExecuteAsEngine(&plan, sql, 3, types, values, nulls);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		pg_uuid_t	run = *run_id;
		int16		step_shard = (int16) WfResultInt32(i, 2);

		WfRunDeltaAdd(&run, step_shard, LiveCounter(WfResultText(i, 1)), -1);
		WfRunDeltaAdd(&run, step_shard, WF_COUNT_CANCELED, 1);
	}

	WfExecute(&shards_plan, shards_sql, 1, types, values, NULL, false, 0);
	shard = WfResultInt32(0, 1) > 0 ? 1 : 0;
	return shard;
#undef LIVE_STEPS_SQL
}

/*
 * MarkNothingToUndo marks the run's succeeded steps without a compensate
 * job COMPENSATED, with status_reason workflow.no_compensation.  They are
 * locked NOWAIT first, as StartNextCompensation takes its step.
 */
static void
MarkNothingToUndo(const pg_uuid_t *run_id)
{
	static SPIPlanPtr lock_plan = NULL;
	static const char *lock_sql =
		"SELECT s.id FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1"
		" AND s.status" OP("=") "'SUCCEEDED' AND s.compensate IS NULL"
		" ORDER BY s.id FOR NO KEY UPDATE NOWAIT";
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET status = 'COMPENSATED',"
		" status_reason = '" WF_REASON_NO_COMPENSATION "',"
		" history_gap = s.history_gap OR NOT $2,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.workflow_run_id" OP("=") "$1"
		" AND s.status" OP("=") "'SUCCEEDED' AND s.compensate IS NULL"
		" RETURNING s.workflow_run_id, s.step_key),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'step_compensated',"
		"  '{\"reason\": \"" WF_REASON_NO_COMPENSATION "\"}'::pg_catalog.jsonb"
		"  FROM u WHERE $2)"
		" SELECT 1 FROM u";
	static const Oid types[2] = {UUIDOID, BOOLOID};
	Datum		values[2];

	values[0] = UUIDPGetDatum(run_id);
	WfExecuteNowait(&lock_plan, lock_sql, 1, types, values, NULL);
	values[1] = BoolGetDatum(WfHistoryRecordsSteps());
	WfExecuteAsEngine(&plan, sql, 2, types, values, NULL);
}

/*
 * WfStartCompensation begins to undo a run whose release lock the caller
 * holds exclusive, with its live jobs, which the caller cancels next (their
 * steps are canceled here first, so the job triggers find nothing to do).
 * The run moves to COMPENSATING by call when the counters are applied;
 * the caller then calls WfAdvanceCompensation.
 */
void
WfStartCompensation(const pg_uuid_t *run_id, const char *reason,
					WfRunCall call, bool nowait)
{
	Datum		reason_value = reason ? CStringGetTextDatum(reason) : (Datum) 0;
	int16		shard;
	StringInfoData detail;

	WfDetailBegin(&detail);
	WfDetailText(&detail, "reason", reason);
	WfDetailText(&detail, "by", call == WF_CALL_COMPENSATE_RUN ?
				 "compensate_run" : "compensate_on failure");
	WfRecordRunEvent(run_id, "compensation_started", WfDetailEnd(&detail));
	shard = CancelLiveSteps(run_id, reason_value, reason == NULL, nowait);
	MarkNothingToUndo(run_id);
	WfRunDeltaCall(run_id, shard, call);
}

/*
 * StartNextCompensation starts the compensation job of the run's
 * succeeded step that finished last, if one is left: the step becomes
 * COMPENSATING, at its next generation, with that job (a loop's body step:
 * the work of the generation it succeeded in).  Returns whether it found
 * one.  The step is taken
 * NOWAIT: the caller holds the run's jobs, and a transaction that holds
 * the step's row (a repeat of an external step's completion) may wait for
 * them next, so a busy row is workflow.release_conflict.
 */
static bool
StartNextCompensation(const pg_uuid_t *run_id)
{
	static SPIPlanPtr next_plan = NULL;
	static const char *next_sql =
		"SELECT s.id FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1 AND s.completion_seq IS NOT NULL"
		" AND s.status" OP("=") "'SUCCEEDED'"
		" ORDER BY s.completion_seq DESC LIMIT 1 FOR NO KEY UPDATE NOWAIT";
	static SPIPlanPtr step_plan = NULL;
	static const char *step_sql =
		"WITH u AS (UPDATE workflow.workflow_steps t SET status = 'COMPENSATING',"
		"  job_id = $2, generation = t.generation" OP("+") "1,"
		"  completion_seq = NULL,"
		"  history_gap = t.history_gap OR NOT $3,"
		"  updated_at = pg_catalog.statement_timestamp()"
		"  FROM (SELECT s.completion_seq FROM workflow.workflow_steps s"
		"   WHERE s.id" OP("=") "$1) o"
		"  WHERE t.id" OP("=") "$1"
		"  RETURNING t.workflow_run_id, t.step_key, o.completion_seq),"
		" e AS (" WF_INSERT_EVENTS
		"  SELECT u.workflow_run_id, u.step_key, 'step_compensating',"
		"  pg_catalog.jsonb_build_object('job_id', $2, 'completion_seq', u.completion_seq)"
		"  FROM u WHERE $3)"
		" SELECT 1 FROM u";
	static WfDueStatement insert = {
		"INSERT INTO workflow.job_queue AS j (id, job_type, organization_id,"
		" payload, priority, stage, max_attempts, timeout_seconds, run_at,"
		" workflow_run_id, workflow_step_id, generation, compensation)"
		" SELECT s.job_id, s.compensate" OP("->>") "'job_type', s.organization_id,"
		" pg_catalog.jsonb_build_object('step_key', s.step_key,"
		"  'output', s.output,"
		"  'payload', COALESCE(s.compensate" OP("->") "'payload', s.payload)),"
		" COALESCE((s.compensate" OP("->>") "'priority')::pg_catalog.int4, 0),"
		" s.compensate" OP("->>") "'stage',"
		" COALESCE((s.compensate" OP("->>") "'max_attempts')::pg_catalog.int4, 3),"
		" COALESCE((s.compensate" OP("->>") "'timeout_seconds')::pg_catalog.int4, 300),"
		" pg_catalog.statement_timestamp(), s.workflow_run_id, s.id,"
		" s.generation, true"
		" FROM workflow.workflow_steps s WHERE s.id" OP("=") "$1"};
	static const Oid types[3] = {UUIDOID, UUIDOID, BOOLOID};
	Datum		values[3];
	pg_uuid_t	step_id;
	pg_uuid_t	job_id;

	values[0] = UUIDPGetDatum(run_id);
	WfExecuteNowait(&next_plan, next_sql, 1, types, values, NULL);
	if (SPI_processed == 0)
		return false;
	WfResultUuid(0, 1, &step_id);

	WfNewUuidV7(&job_id);
	values[0] = UUIDPGetDatum(&step_id);
	values[1] = UUIDPGetDatum(&job_id);
	values[2] = BoolGetDatum(WfHistoryRecordsSteps());
	if (WfExecuteAsEngine(&step_plan, step_sql, 3, types, values, NULL) !=
		SPI_OK_SELECT || SPI_processed != 1 ||
		WfExecuteDue(&insert, 1, types, values, NULL) != 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": the compensation of step %s did not start",
						WfUuidString(&step_id))));
	return true;
}

/*
 * FinishCompensatingRun counts the run's failed compensations and, when
 * its chain is done, ends it: COMPENSATED when none failed, else
 * COMPENSATION_FAILED.
 */
static void
FinishCompensatingRun(const pg_uuid_t *run_id, int32 failed, bool finished)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_runs r SET"
		" compensations_failed = r.compensations_failed" OP("+") "$2,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE r.id" OP("=") "$1"
		" RETURNING r.status::pg_catalog.text, r.compensations_failed";
	static const Oid types[2] = {UUIDOID, INT4OID};
	Datum		values[2];
	char	   *status;

	if (failed == 0 && !finished)
		return;
	values[0] = UUIDPGetDatum(run_id);
	values[1] = Int32GetDatum(failed);
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": run %s vanished while it was compensated",
						WfUuidString(run_id))));
	status = WfResultText(0, 1);
	if (finished)
		WfSetRunStatus(run_id, status,
					   WfResultInt32(0, 2) > 0 ? "COMPENSATION_FAILED" :
					   "COMPENSATED", WF_CALL_STEP_CHANGE);
}

/*
 * WfAdvanceCompensation goes on with a COMPENSATING run: the next
 * compensation job, or the run's end; failed counts a compensation that
 * just failed.
 */
void
WfAdvanceCompensation(const pg_uuid_t *run_id, int32 failed)
{
	bool		started = StartNextCompensation(run_id);

	FinishCompensatingRun(run_id, failed, !started);
}

/*
 * WfSettleCompensationJob records the end of a compensation job: its
 * COMPENSATING step becomes COMPENSATED or COMPENSATION_FAILED, and the
 * chain goes on.  A job whose step is no longer compensating with it
 * (cancel_run stopped the chain) changes nothing.
 */
void
WfSettleCompensationJob(const WfCompensationEnd *end)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET"
		" status = CASE WHEN $4 THEN 'COMPENSATED'"
		"  ELSE 'COMPENSATION_FAILED' END::workflow.step_status,"
		" status_reason = CASE WHEN $4 THEN NULL ELSE $5 END,"
		" last_error_code = CASE WHEN $4 THEN s.last_error_code ELSE $5 END,"
		" last_error_message = CASE WHEN $4 THEN s.last_error_message ELSE $6 END,"
		" history_gap = s.history_gap OR NOT $7,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.id" OP("=") "$1 AND s.job_id" OP("=") "$2"
		" AND s.workflow_run_id" OP("=") "$3"
		" AND s.status" OP("=") "'COMPENSATING'"
		" RETURNING s.workflow_run_id, s.step_key),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key,"
		"  CASE WHEN $4 THEN 'step_compensated' ELSE 'step_compensation_failed' END,"
		"  pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object("
		"  'job_id', $2, 'error_code', $5, 'error_message', $6))"
		"  FROM u WHERE $7)"
		" SELECT 1 FROM u";
	static const Oid types[7] = {UUIDOID, UUIDOID, UUIDOID, BOOLOID, TEXTOID,
	TEXTOID, BOOLOID};
	Datum		values[7];
	char		nulls[7] = "       ";

	values[0] = UUIDPGetDatum(&end->step_id);
	values[1] = UUIDPGetDatum(&end->job_id);
	values[2] = UUIDPGetDatum(&end->run_id);
	values[3] = BoolGetDatum(end->succeeded);
	values[4] = end->error_code ? CStringGetTextDatum(end->error_code) : (Datum) 0;
	nulls[4] = end->error_code ? ' ' : 'n';
	values[5] = end->error_message ? CStringGetTextDatum(end->error_message) : (Datum) 0;
	nulls[5] = end->error_message ? ' ' : 'n';
	values[6] = BoolGetDatum(WfHistoryRecordsSteps());
	WfExecuteAsEngine(&plan, sql, 7, types, values, nulls);
	if (SPI_processed == 0)
		return;
	WfAdvanceCompensation(&end->run_id, end->succeeded ? 0 : 1);
}

/*
 * WfAbandonCompensation stops a compensating run's chain for cancel_run:
 * its COMPENSATING step becomes COMPENSATION_FAILED (workflow.run_canceled),
 * counted in the run's compensations_failed as a failed compensation is;
 * the caller cancels the step's job, which it holds.
 */
void
WfAbandonCompensation(const pg_uuid_t *run_id, Datum reason, bool reason_null)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET"
		" status = 'COMPENSATION_FAILED',"
		" status_reason = '" WF_REASON_RUN_CANCELED "',"
		" last_error_code = '" WF_REASON_RUN_CANCELED "',"
		" last_error_message = $2,"
		" history_gap = s.history_gap OR NOT $3,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.workflow_run_id" OP("=") "$1"
		" AND s.status" OP("=") "'COMPENSATING'"
		" RETURNING s.workflow_run_id, s.step_key, s.job_id),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'step_compensation_failed',"
		"  pg_catalog.jsonb_build_object('job_id', u.job_id,"
		"  'error_code', '" WF_REASON_RUN_CANCELED "'::pg_catalog.text, 'reason', $2)"
		"  FROM u WHERE $3),"
		" r AS (UPDATE workflow.workflow_runs r SET"
		"  compensations_failed = r.compensations_failed" OP("+") "(SELECT pg_catalog.count(*) FROM u)::pg_catalog.int4"
		"  WHERE r.id" OP("=") "$1 AND EXISTS (SELECT 1 FROM u))"
		" SELECT 1 FROM u";
	static const Oid types[3] = {UUIDOID, TEXTOID, BOOLOID};
	Datum		values[3];
	char		nulls[3] = "   ";

	values[0] = UUIDPGetDatum(run_id);
	values[1] = reason;
	nulls[1] = reason_null ? 'n' : ' ';
	values[2] = BoolGetDatum(WfHistoryRecordsSteps());
	WfExecuteAsEngine(&plan, sql, 3, types, values, nulls);
}
