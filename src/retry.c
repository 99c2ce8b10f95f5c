/*-------------------------------------------------------------------------
 *
 * retry.c
 *	  retry_run: the failed part of a finished run, run again.
 *
 * A COMPLETED_WITH_ERRORS run's FAILED steps, and the steps the cascade
 * canceled for workflow.dependency_unsatisfied below them, go back to
 * BLOCKED with their dependency counters computed from their
 * prerequisites (a step of the set counts as pending); SUCCEEDED steps,
 * and steps canceled for any other reason, are kept.  A loop whose body
 * holds such a step that had a job runs its generation again, whole, at
 * the next generation (repeat.c): the body's succeeded steps are reset
 * with it.  A reset step that
 * had a job gets the next job generation, so its new job is a new
 * job_queue row; the old jobs stay as they ended.  The reset steps that
 * wait for nothing are released as the cascade releases them, and the
 * run goes on from there, RUNNING again; it notifies again when it
 * finishes.
 *
 * Locks, in order: the run's release lock exclusive (so no completion,
 * cancellation or release of the run is in flight), the steps to reset in
 * ascending id, NOWAIT, then what their release takes (cascade.c), the
 * run's counters last (status.c).  Finding the steps to reset reads the run's
 * steps once: this is an operator's call, not an event path.  The release
 * lock is held to commit, even when the run only has its status returned,
 * so a later call of the same transaction must not wait
 * (WfNoteLateLocks), as after cancel_run.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_retry_run);

/* a step retry_run resets */
typedef struct ResetStep
{
	pg_uuid_t	id;
	WfCounter	from;			/* the counter it leaves */
	int16		shard;
	bool		ready;			/* waits for nothing once reset */
} ResetStep;

static Datum RetryRun(PG_FUNCTION_ARGS);
static int	LockStepsToReset(const pg_uuid_t *run_id, ResetStep **steps);
static void ResetSteps(const pg_uuid_t *run_id, ResetStep *steps, int n,
					   const pg_uuid_t *restarted, int nrestarted);
static void ClearShardedOutcomes(const pg_uuid_t *run_id);
static void RearmDeadline(const pg_uuid_t *run_id);
static int	RestartLoops(const pg_uuid_t *run_id, ResetStep *steps, int n,
						 pg_uuid_t **restarted, pg_uuid_t **ready, int *nready);
static int	LeaveOutRestarted(ResetStep *steps, int n,
							  const pg_uuid_t *restarted, int nrestarted);

/*
 * RearmDeadline makes a retried run live again for the deadline sweep (a
 * run it ended, retried past its deadline, is ended again by the next
 * sweep: its new jobs cannot be claimed), and forgets why it ended.  The
 * run row is ours already (status.c wrote its counters).
 */
static void
RearmDeadline(const pg_uuid_t *run_id)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_runs SET deadline_swept = false,"
		" status_reason = NULL"
		" WHERE id" OP("=") "$1"
		" AND (deadline_swept OR status_reason IS NOT NULL)";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 0);
}

/*
 * LockStepsToReset locks, in ascending id, the run's FAILED steps and the
 * steps canceled for an unsatisfied dependency that descend from them
 * through such steps, and returns them.  NOWAIT: a transaction that holds
 * one (a repeat of an external step's completion) may wait for the
 * release lock we hold next, so a busy row is workflow.release_conflict.
 */
static int
LockStepsToReset(const pg_uuid_t *run_id, ResetStep **steps)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH RECURSIVE r(id) AS ("
		" SELECT s.id FROM workflow.workflow_steps s"
		"  WHERE s.workflow_run_id" OP("=") "$1"
		"  AND s.status" OP("=") "'FAILED'::workflow.step_status"
		" UNION"
		" SELECT e.dependent_step_id FROM r"
		"  JOIN workflow.workflow_step_dependencies e"
		"   ON e.prerequisite_step_id" OP("=") "r.id"
		"  JOIN workflow.workflow_steps d ON d.id" OP("=") "e.dependent_step_id"
		"  WHERE d.status" OP("=") "'CANCELED'::workflow.step_status"
		"  AND d.status_reason" OP("=") "'" WF_REASON_DEPENDENCY_UNSATISFIED "')"
		" SELECT s.id, s.status" OP("=") "'FAILED'::workflow.step_status,"
		" s.counter_shard::pg_catalog.int4"
		" FROM workflow.workflow_steps s"
		" WHERE s.id" OP("=") "ANY (ARRAY(SELECT r.id FROM r))"
		" ORDER BY s.id FOR NO KEY UPDATE NOWAIT";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	int			n;

	values[0] = UUIDPGetDatum(run_id);
	WfExecuteNowait(&plan, sql, 1, types, values, NULL);
	n = (int) SPI_processed;
	*steps = palloc0(sizeof(ResetStep) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		WfResultUuid(i, 1, &(*steps)[i].id);
		(*steps)[i].from = WfResultBool(i, 2) ? WF_COUNT_FAILED :
			WF_COUNT_CANCELED;
		(*steps)[i].shard = (int16) WfResultInt32(i, 3);
	}
	return n;
}

/*
 * RestartLoops runs again the generation of each loop whose body holds a
 * step to reset that had a job (it failed, or was canceled, in that
 * generation): a body runs a generation as a whole, so every body step and
 * the repeat go back to BLOCKED at the loop's next generation (repeat.c),
 * which counts against the loop's bound; a loop with no generation left is
 * workflow.invalid_run_transition.  Returns in restarted the steps it reset
 * and in ready those of them that wait for no prerequisite, with how many
 * of each.
 */
static int
RestartLoops(const pg_uuid_t *run_id, ResetStep *steps, int n,
			 pg_uuid_t **restarted, pg_uuid_t **ready, int *nready)
{
	WfLoopRestart *loops;
	Datum	   *ids = palloc(sizeof(Datum) * Max(n, 1));
	int			nloops;
	int			nrestarted = 0;
	int			room = 0;

	for (int i = 0; i < n; i++)
		ids[i] = UUIDPGetDatum(&steps[i].id);
	nloops = WfLoopsToRestart(run_id, WfArray(ids, NULL, n, UUIDOID), &loops);
	for (int l = 0; l < nloops; l++)
	{
		if (!loops[l].repeat_reset)
			ereport(ERROR,
					(errcode(WF_SQLSTATE_WRONG_STATE),
					 errmsg(WF_INVALID_RUN_TRANSITION ": retry_run cannot move run %s from COMPLETED_WITH_ERRORS to RUNNING",
							WfUuidString(run_id)),
					 errdetail("The loop of repeat step \"%s\" went on after a step of its body failed, and has ended: its generation is not run again.",
							   loops[l].key)));
		if (loops[l].generation + 1 >= loops[l].bound)
			ereport(ERROR,
					(errcode(WF_SQLSTATE_WRONG_STATE),
					 errmsg(WF_INVALID_RUN_TRANSITION ": retry_run cannot move run %s from COMPLETED_WITH_ERRORS to RUNNING",
							WfUuidString(run_id)),
					 errdetail("The loop of repeat step \"%s\" failed in generation %d of its bound of %d: it has no generation left to run again.",
							   loops[l].key, loops[l].generation,
							   loops[l].bound)));
		room += (int) ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(loops[l].body)),
									 ARR_DIMS(DatumGetArrayTypeP(loops[l].body))) + 1;
	}
	*restarted = palloc(sizeof(pg_uuid_t) * Max(room, 1));
	*ready = palloc(sizeof(pg_uuid_t) * Max(room, 1));
	*nready = 0;
	for (int l = 0; l < nloops; l++)
	{
		bool	   *is_ready = palloc(sizeof(bool) * Max(room, 1));
		int			k = WfRestartLoop(&loops[l], WfArray(ids, NULL, n, UUIDOID),
									  *restarted + nrestarted, is_ready);

		for (int i = 0; i < k; i++)
			if (is_ready[i])
				(*ready)[(*nready)++] = (*restarted)[nrestarted + i];
		nrestarted += k;
		pfree(is_ready);
	}
	pfree(ids);
	return nrestarted;
}

/*
 * LeaveOutRestarted removes from steps those a loop's restart reset;
 * returns how many are left.
 */
static int
LeaveOutRestarted(ResetStep *steps, int n, const pg_uuid_t *restarted,
				  int nrestarted)
{
	int			kept = 0;

	for (int i = 0; i < n; i++)
	{
		bool		found = false;

		for (int k = 0; k < nrestarted && !found; k++)
			found = WfUuidCompare(&steps[i].id, &restarted[k]) == 0;
		if (!found)
			steps[kept++] = steps[i];
	}
	return kept;
}

/*
 * ResetSteps puts the steps back to BLOCKED, counting as pending each
 * prerequisite that is reset too and as unsatisfied each ON_SUCCESS one
 * that is kept and did not succeed; clears what their last run left; and
 * writes step_reset for each.  Marks the steps that wait for nothing.
 */
static void
ResetSteps(const pg_uuid_t *run_id, ResetStep *steps, int n,
		   const pg_uuid_t *restarted, int nrestarted)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH c AS (SELECT d.id,"
		"  (pg_catalog.count(p.id) FILTER (WHERE p.id" OP("=") "ANY ($2)"
		"   OR p.id" OP("=") "ANY ($4)))::pg_catalog.int4 AS pending,"
		"  (pg_catalog.count(p.id) FILTER (WHERE e.release_mode" OP("=") "'ON_SUCCESS'"
		"   AND p.status" OP("<>") "'SUCCEEDED'::workflow.step_status"
		"   AND NOT p.id" OP("=") "ANY ($2) AND NOT p.id" OP("=") "ANY ($4)))::pg_catalog.int4"
		"   AS unsatisfied"
		"  FROM pg_catalog.unnest($2) AS d(id)"
		"  LEFT JOIN workflow.workflow_step_dependencies e"
		"   ON e.workflow_run_id" OP("=") "$1 AND e.dependent_step_id" OP("=") "d.id"
		"  LEFT JOIN workflow.workflow_steps p ON p.id" OP("=") "e.prerequisite_step_id"
		"  GROUP BY d.id),"
		" u AS (UPDATE workflow.workflow_steps s SET status = 'BLOCKED',"
		"  dependency_count_pending = c.pending,"
		"  dependency_count_unsatisfied = c.unsatisfied,"
		"  generation = s.generation" OP("+") "(s.job_id IS NOT NULL)::pg_catalog.int4,"
		"  job_id = NULL, released_at = NULL, started_at = NULL,"
		"  finished_at = NULL, wake_at = NULL, output = NULL,"
		"  status_reason = NULL, last_error_code = NULL,"
		"  last_error_message = NULL, completed_externally = false,"
		"  history_gap = s.history_gap OR NOT $3,"
		"  updated_at = pg_catalog.statement_timestamp()"
		"  FROM c WHERE s.id" OP("=") "c.id"
		"  RETURNING s.id, s.workflow_run_id, s.step_key, s.generation,"
		"  c.pending" OP("=") "0 AND c.unsatisfied" OP("=") "0 AS ready),"
		" e AS (" WF_INSERT_EVENTS
		"  SELECT u.workflow_run_id, u.step_key, 'step_reset',"
		"  pg_catalog.jsonb_build_object('generation', u.generation)"
		"  FROM u WHERE $3)"
		" SELECT u.id, u.ready FROM u ORDER BY u.id";
	static const Oid types[4] = {UUIDOID, UUIDARRAYOID, BOOLOID, UUIDARRAYOID};
	Datum		values[4];
	Datum	   *ids = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *others = palloc(sizeof(Datum) * Max(nrestarted, 1));

	if (n == 0)
		return;
	for (int i = 0; i < n; i++)
		ids[i] = UUIDPGetDatum(&steps[i].id);
	for (int i = 0; i < nrestarted; i++)
		others[i] = UUIDPGetDatum(&restarted[i]);
	values[0] = UUIDPGetDatum(run_id);
	values[1] = WfArray(ids, NULL, n, UUIDOID);
	values[2] = BoolGetDatum(WfHistoryRecordsSteps());
	values[3] = WfArray(others, NULL, nrestarted, UUIDOID);
	if (WfExecuteAsEngine(&plan, sql, 4, types, values, NULL) != SPI_OK_SELECT ||
		SPI_processed != (uint64) n)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": steps of run %s changed while locked",
						WfUuidString(run_id))));
	/* both in ascending id */
	for (int i = 0; i < n; i++)
		steps[i].ready = WfResultBool(i, 2);
	pfree(ids);
}

/*
 * ClearShardedOutcomes sets a live sharded run's outcome counters on its
 * row back to zero, as while it first ran: its shards hold them, and they
 * are summed into the row again when it finishes.
 */
static void
ClearShardedOutcomes(const pg_uuid_t *run_id)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_runs r SET steps_succeeded = 0,"
		" steps_failed = 0, steps_canceled = 0"
		" WHERE r.id" OP("=") "$1 AND r.counter_shards" OP(">") "0"
		" AND r.status" OP("<>") "ALL ('{SUCCEEDED,COMPLETED_WITH_ERRORS,CANCELED,RETIRED_UNRESUMABLE}'::workflow.run_status[])";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 0);
}

/* workflow_retry_run: see the file header. */
static Datum
RetryRun(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *run_id;
	char	   *status;
	ResetStep  *steps;
	pg_uuid_t  *ready;
	pg_uuid_t  *restarted;
	pg_uuid_t  *loop_ready;
	int			n;
	int			nready = 0;
	int			nrestarted;
	int			nfailed = 0;
	int16		shard;
	StringInfoData detail;

	WfRequireReadCommitted();
	if (PG_ARGISNULL(0))
		wf_invalid_argument("workflow_run_id must not be null");
	run_id = PG_GETARG_UUID_P(0);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	status = WfLockRunForCall(run_id, PG_ARGISNULL(1) ? NULL : PG_GETARG_UUID_P(1));
	if (strcmp(status, "COMPLETED_WITH_ERRORS") != 0)
	{
		/* a live run is retried already, or has nothing to retry yet */
		if (WfRunStatusTerminal(status))
			WfCheckRunMove(run_id, status, "RUNNING", WF_CALL_RETRY_RUN);
		PG_RETURN_DATUM(WfRunStatusResult(fcinfo, status));
	}

	n = LockStepsToReset(run_id, &steps);
	for (int i = 0; i < n; i++)
		nfailed += steps[i].from == WF_COUNT_FAILED;
	if (nfailed == 0)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_WRONG_STATE),
				 errmsg(WF_INVALID_RUN_TRANSITION ": retry_run cannot move run %s from COMPLETED_WITH_ERRORS to RUNNING",
						WfUuidString(run_id)),
				 errdetail("The run has no FAILED step; its errors are canceled steps, which retry_run keeps.")));

	nrestarted = RestartLoops(run_id, steps, n, &restarted, &loop_ready,
							  &nready);
	ready = palloc(sizeof(pg_uuid_t) * (n + nready + 1));
	memcpy(ready, loop_ready, sizeof(pg_uuid_t) * nready);
	shard = steps[0].shard;
	n = LeaveOutRestarted(steps, n, restarted, nrestarted);
	WfDetailBegin(&detail);
	WfDetailInt(&detail, "failed_steps", nfailed);
	WfDetailInt(&detail, "reset_steps", n + nrestarted);
	WfRecordRunEvent(run_id, "run_retried", WfDetailEnd(&detail));

	ResetSteps(run_id, steps, n, restarted, nrestarted);
	for (int i = 0; i < n; i++)
	{
		WfRunDeltaAdd(run_id, steps[i].shard, steps[i].from, -1);
		WfRunDeltaAdd(run_id, steps[i].shard, WF_COUNT_BLOCKED, 1);
		if (steps[i].ready)
			ready[nready++] = steps[i].id;
	}
	WfRunDeltaCall(run_id, shard, WF_CALL_RETRY_RUN);
	WfReleaseSteps(ready, nready);
	WfFinishPending();
	ClearShardedOutcomes(run_id);
	RearmDeadline(run_id);

	status = WfFindRun(run_id, NULL);
	PG_RETURN_DATUM(WfRunStatusResult(fcinfo, status));
}

WF_OWNER_ENTRY(workflow_retry_run, RetryRun)
