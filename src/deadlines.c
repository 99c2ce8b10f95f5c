/*-------------------------------------------------------------------------
 *
 * deadlines.c
 *	  The deadline sweep of fire_timers: a run past its deadline_at is
 *	  ended.
 *
 * Past its deadline no job of a run is claimed (claim.c filters on the
 * jobs' copy of the deadline), and the sweep, run by fire_timers and so by
 * the maintenance worker, ends the run: its QUEUED jobs and its BLOCKED,
 * PARKED, ENQUEUED, SLEEPING and waiting steps are canceled with
 * workflow.run_deadline_elapsed, its RUNNING jobs may finish (their
 * dependents are canceled already, so nothing more is released), and the
 * run records run_deadline_elapsed once and takes that status_reason.
 * Its status follows from its steps: COMPLETED_WITH_ERRORS, or RUNNING
 * until its running jobs end.  The run is marked swept once none runs: a
 * running job that is retried meanwhile goes back to QUEUED, where no
 * claim takes it, and the next sweep cancels it.  A run found finished
 * (or being compensated, which the deadline does not stop) is only marked
 * swept.
 *
 * Each run is swept in a subtransaction of its own, and never waited for:
 * its release lock is tried exclusive (a run whose completions are in
 * flight is left for the next call), then its QUEUED jobs and its steps
 * are locked NOWAIT, so a claim or a cancel_job that holds one makes the
 * sweep skip the run, rolled back, until the next call.  The run row is
 * written last.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "workflow.h"

/* the steps the sweep cancels: all that have not started work */
#define UNSTARTED_STEPS \
	"'{BLOCKED,PARKED,ENQUEUED,SLEEPING,WAITING_FOR_EXTERNAL}'::workflow.step_status[]"

/* where the last page ended: runs are read in (deadline_at, id) order */
typedef struct DeadlineCursor
{
	bool		started;
	TimestampTz deadline_at;
	pg_uuid_t	id;
} DeadlineCursor;

/* pages one call reads at most, as fire_timers reads timers */
#define WF_DEADLINE_PAGES 10

static uint64 DueDeadlines(int32 batch_size, DeadlineCursor *after);
static int	SweepRun(Datum *run, int n);
static int	SweepPage(int32 batch_size, DeadlineCursor *cursor, uint64 *nread);
static bool RunToSweep(const pg_uuid_t *run_id, TimestampTz *deadline,
					   bool *first);
static void MarkSwept(const pg_uuid_t *run_id, bool ended, bool done);
static bool StepsStillRunning(const pg_uuid_t *run_id);
static uint64 LockQueuedJobs(const pg_uuid_t *run_id, Datum **jobs);
static void CancelUnfinishedSteps(const pg_uuid_t *run_id);

/*
 * DueDeadlines reads up to batch_size runs past their deadline, oldest
 * first, after the cursor, and moves the cursor past them.  A run whose
 * job still runs stays among them until it ends; the cursor keeps such
 * runs from hiding the others from a call.
 */
static uint64
DueDeadlines(int32 batch_size, DeadlineCursor *after)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT r.id, r.deadline_at FROM workflow.workflow_runs r"
		" WHERE r.deadline_at IS NOT NULL AND NOT r.deadline_swept"
		" AND r.deadline_at" OP("<=") "pg_catalog.statement_timestamp()"
		" AND (NOT $2 OR (r.deadline_at, r.id)" OP(">") "($3, $4))"
		" ORDER BY r.deadline_at, r.id LIMIT $1";
	static const Oid types[4] = {INT4OID, BOOLOID, TIMESTAMPTZOID, UUIDOID};
	Datum		values[4];
	uint64		n;
	bool		isnull;

	values[0] = Int32GetDatum(batch_size);
	values[1] = BoolGetDatum(after->started);
	values[2] = TimestampTzGetDatum(after->deadline_at);
	values[3] = UUIDPGetDatum(&after->id);
	WfExecute(&plan, sql, 4, types, values, NULL, false, 0);
	n = SPI_processed;
	if (n > 0)
	{
		after->started = true;
		WfResultUuid(n - 1, 1, &after->id);
		after->deadline_at = DatumGetTimestampTz(WfResultDatum(n - 1, 2, &isnull));
	}
	return n;
}

/*
 * RunToSweep reads the run under its release lock: whether it is still to
 * be ended (live, past its deadline, not swept), its deadline, and whether
 * this is the first sweep that ends it.  A run found finished, or being
 * compensated, is marked swept.
 */
static bool
RunToSweep(const pg_uuid_t *run_id, TimestampTz *deadline, bool *first)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT r.status::pg_catalog.text, r.deadline_at, r.deadline_swept,"
		" r.deadline_at" OP("<=") "pg_catalog.statement_timestamp(),"
		" r.status_reason IS DISTINCT FROM '" WF_REASON_RUN_DEADLINE_ELAPSED "'"
		" FROM workflow.workflow_runs r WHERE r.id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	char	   *status;
	bool		isnull;

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 1);
	if (SPI_processed != 1 || WfResultBool(0, 3) || !WfResultBool(0, 4))
		return false;			/* purged, swept, or its deadline moved */
	status = WfResultText(0, 1);
	*deadline = DatumGetTimestampTz(WfResultDatum(0, 2, &isnull));
	*first = WfResultBool(0, 5);
	if (WfRunStatusTerminal(status) || WfRunStatusCompensation(status))
	{
		MarkSwept(run_id, false, true);
		return false;
	}
	return true;
}

/* StepsStillRunning says whether a step of the run has a running job. */
static bool
StepsStillRunning(const pg_uuid_t *run_id)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT EXISTS (SELECT 1 FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1"
		" AND s.status" OP("=") "'RUNNING'::workflow.step_status)";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 1);
	return WfResultBool(0, 1);
}

/*
 * MarkSwept records why the run ends, when the deadline ends it, and that
 * the sweep is done with it, once nothing of it runs.
 */
static void
MarkSwept(const pg_uuid_t *run_id, bool ended, bool done)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_runs SET deadline_swept = $3,"
		" status_reason = CASE WHEN $2 THEN '" WF_REASON_RUN_DEADLINE_ELAPSED "'"
		"  ELSE status_reason END"
		" WHERE id" OP("=") "$1";
	static const Oid types[3] = {UUIDOID, BOOLOID, BOOLOID};
	Datum		values[3];

	values[0] = UUIDPGetDatum(run_id);
	values[1] = BoolGetDatum(ended);
	values[2] = BoolGetDatum(done);
	WfExecute(&plan, sql, 3, types, values, NULL, false, 0);
}

/* LockQueuedJobs locks the run's QUEUED step jobs, NOWAIT; returns them. */
static uint64
LockQueuedJobs(const pg_uuid_t *run_id, Datum **jobs)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT j.id FROM workflow.job_queue j"
		" WHERE j.id" OP("=") "ANY (ARRAY(SELECT s.job_id FROM workflow.workflow_steps s"
		"  WHERE s.workflow_run_id" OP("=") "$1"
		"  AND s.status" OP("=") "'ENQUEUED'::workflow.step_status))"
		" AND j.status" OP("=") "'QUEUED'::workflow.job_status"
		" ORDER BY j.id FOR NO KEY UPDATE NOWAIT";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	uint64		n;

	values[0] = UUIDPGetDatum(run_id);
	WfExecuteNowait(&plan, sql, 1, types, values, NULL);
	n = SPI_processed;
	*jobs = palloc(sizeof(Datum) * Max(n, 1));
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		(*jobs)[i] = WfUuidDatum(DatumGetUUIDP(WfResultDatum(i, 1, &isnull)));
	}
	return n;
}

/*
 * CancelUnfinishedSteps cancels the run's steps that have not started
 * work (BLOCKED, PARKED, ENQUEUED, SLEEPING, WAITING_FOR_EXTERNAL), locked
 * NOWAIT first, with step_canceled, and moves their counters.  RUNNING
 * steps are left to finish.
 */
static void
CancelUnfinishedSteps(const pg_uuid_t *run_id)
{
	static SPIPlanPtr lock_plan = NULL;
	static const char *lock_sql =
		"SELECT s.id FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1"
		" AND s.status" OP("=") "ANY (" UNSTARTED_STEPS ")"
		" ORDER BY s.id FOR NO KEY UPDATE NOWAIT";
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET status = 'CANCELED',"
		" wake_at = NULL, held = false, parked_at = NULL,"
		" status_reason = '" WF_REASON_RUN_DEADLINE_ELAPSED "',"
		" last_error_code = '" WF_REASON_RUN_DEADLINE_ELAPSED "',"
		" last_error_message = 'the run''s deadline passed',"
		" finished_at = pg_catalog.statement_timestamp(),"
		" history_gap = s.history_gap OR NOT $2,"
		" updated_at = pg_catalog.statement_timestamp()"
		" FROM (SELECT x.id, x.status FROM workflow.workflow_steps x"
		"  WHERE x.workflow_run_id" OP("=") "$1"
		"  AND x.status" OP("=") "ANY (" UNSTARTED_STEPS ")) o"
		" WHERE s.id" OP("=") "o.id"
		" RETURNING s.workflow_run_id, s.step_key, o.status::pg_catalog.text AS old_status,"
		" s.counter_shard::pg_catalog.int4 AS shard),"
		" q AS (DELETE FROM workflow.parked_steps p"
		" WHERE p.workflow_run_id" OP("=") "$1),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'step_canceled',"
		"  pg_catalog.jsonb_build_object('error_code', '" WF_REASON_RUN_DEADLINE_ELAPSED "'::pg_catalog.text,"
		"  'reason', 'the run''s deadline passed'::pg_catalog.text)"
		"  FROM u WHERE $2)"
		" SELECT u.old_status, u.shard FROM u";
	static const Oid types[2] = {UUIDOID, BOOLOID};
	Datum		values[2];

	values[0] = UUIDPGetDatum(run_id);
	WfExecuteNowait(&lock_plan, lock_sql, 1, types, values, NULL);
	values[1] = BoolGetDatum(WfHistoryRecordsSteps());
	WfExecuteAsEngine(&plan, sql, 2, types, values, NULL);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *old = WfResultText(i, 1);
		int16		shard = (int16) WfResultInt32(i, 2);
		WfCounter	from;

		if (strcmp(old, "BLOCKED") == 0)
			from = WF_COUNT_BLOCKED;
		else if (strcmp(old, "PARKED") == 0)
			from = WF_COUNT_PARKED;
		else if (strcmp(old, "WAITING_FOR_EXTERNAL") == 0)
			from = WF_COUNT_WAITING;
		else
			from = WF_COUNT_ACTIVE;
		WfRunDeltaAdd(run_id, shard, from, -1);
		WfRunDeltaAdd(run_id, shard, WF_COUNT_CANCELED, 1);
	}

	/*
	 * the run moves by the deadline, even out of a BLOCKED_* status (noted
	 * on a shard the run counts in)
	 */
	if (SPI_processed > 0)
		WfRunDeltaCall(run_id, (int16) WfResultInt32(0, 2), WF_CALL_DEADLINE);
}

/*
 * SweepRun ends one run past its deadline, in the caller's subtransaction;
 * returns 1 when this sweep is the one that ended it, 0 when there was
 * nothing to end (or only a job retried since), or the run is busy (its
 * release lock held).
 */
static int
SweepRun(Datum *run, int n)
{
	pg_uuid_t  *run_id = DatumGetUUIDP(run[0]);
	TimestampTz deadline;
	bool		first;
	Datum	   *jobs;
	uint64		njobs;

	Assert(n == 1);
	if (!WfLockRunRelease(run_id, true, false))
		return 0;
	if (!RunToSweep(run_id, &deadline, &first))
		return 0;
	njobs = LockQueuedJobs(run_id, &jobs);
	CancelUnfinishedSteps(run_id);
	WfCancelJobs(jobs, njobs, WF_REASON_RUN_DEADLINE_ELAPSED,
				 CStringGetTextDatum("the run's deadline passed"), false);

	MarkSwept(run_id, true, !StepsStillRunning(run_id));
	if (first)
	{
		StringInfoData detail;

		WfDetailBegin(&detail);
		WfDetailTimestamp(&detail, "deadline_at", deadline);
		WfDetailTimestamp(&detail, "observed_at",
						  GetCurrentStatementStartTimestamp());
		WfRecordRunEvent(run_id, "run_deadline_elapsed", WfDetailEnd(&detail));
	}
	WfFinishPending();
	return first ? 1 : 0;
}

/*
 * SweepPage sweeps the runs of one page, each in a subtransaction,
 * skipping busy ones; returns how many it ended.  *nread is how many runs
 * the page held.
 */
static int
SweepPage(int32 batch_size, DeadlineCursor *cursor, uint64 *nread)
{
	uint64		n = DueDeadlines(batch_size, cursor);
	Datum	   *runs;
	int			ended = 0;

	*nread = n;
	if (n == 0)
		return 0;
	runs = palloc(sizeof(Datum) * n);
	for (uint64 i = 0; i < n; i++)
	{
		pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));

		WfResultUuid(i, 1, id);
		runs[i] = UUIDPGetDatum(id);
	}
	for (uint64 i = 0; i < n; i++)
	{
		int			done;

		CHECK_FOR_INTERRUPTS();
		done = WfTryInSubtransaction(SweepRun, &runs[i], 1);
		if (done > 0)
			ended += done;
	}
	pfree(runs);
	return ended;
}

/*
 * WfSweepDeadlines ends up to batch_size runs past their deadline; a page
 * of runs it ended none of (runs whose jobs still run, or busy ones) does
 * not end the call, which reads on, up to WF_DEADLINE_PAGES pages.
 * Returns how many runs it ended.
 */
int
WfSweepDeadlines(int32 batch_size)
{
	DeadlineCursor cursor;
	uint64		nread;
	int			ended = 0;

	memset(&cursor, 0, sizeof(cursor));
	for (int page = 0; page < WF_DEADLINE_PAGES && ended == 0; page++)
	{
		ended = SweepPage(batch_size, &cursor, &nread);
		if (nread < (uint64) batch_size)
			break;
	}
	return ended;
}
