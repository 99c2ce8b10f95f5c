/*-------------------------------------------------------------------------
 *
 * resume.c
 *	  resume_run: a blocked run checks its pin again and releases what it
 *	  held.
 *
 * Locks, in order: the run's release lock exclusive (waiting for the
 * completions in flight, which hold it shared and may hold more steps),
 * the run's held steps in ascending id, then what the release of those
 * steps takes (cascade.c), the run's counters last (status.c).  The
 * run's status is judged only under the release lock.  If the pin still
 * fails, nothing is released and the run takes the BLOCKED_* status of
 * the new verdict.  The release lock is held to commit, even when the run
 * only has its status returned, so a later call of the same transaction
 * must not wait (WfNoteLateLocks), as after cancel_run.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_resume_run);

static Datum ResumeRun(PG_FUNCTION_ARGS);
static int	LockHeldSteps(const pg_uuid_t *run_id, pg_uuid_t **ids,
						  int16 *shard);
static void ClearHeld(const pg_uuid_t *run_id);

/*
 * LockHeldSteps locks the run's held steps in ascending id and returns
 * them, with the counter shard of the first (0 when there is none).
 */
static int
LockHeldSteps(const pg_uuid_t *run_id, pg_uuid_t **ids, int16 *shard)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT s.id, s.counter_shard::pg_catalog.int4"
		" FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1 AND s.held"
		" ORDER BY s.id FOR NO KEY UPDATE";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	int			n;

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 0);
	n = (int) SPI_processed;
	*ids = palloc(sizeof(pg_uuid_t) * Max(n, 1));
	*shard = n > 0 ? (int16) WfResultInt32(0, 2) : 0;
	for (int i = 0; i < n; i++)
		WfResultUuid(i, 1, &(*ids)[i]);
	return n;
}

/* ClearHeld takes the held mark off the run's held steps, which we hold. */
static void
ClearHeld(const pg_uuid_t *run_id)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_steps s SET held = false,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.workflow_run_id" OP("=") "$1 AND s.held";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = UUIDPGetDatum(run_id);
	WfExecuteAsEngine(&plan, sql, 1, types, values, NULL);
}

/* workflow_resume_run: see the file header. */
static Datum
ResumeRun(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *run_id;
	char	   *status;
	const char *verdict;
	pg_uuid_t  *held;
	int			nheld;
	int16		shard;
	StringInfoData detail;

	WfRequireReadCommitted();
	if (PG_ARGISNULL(0))
		wf_invalid_argument("workflow_run_id must not be null");
	run_id = PG_GETARG_UUID_P(0);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	status = WfLockRunForCall(run_id, PG_ARGISNULL(1) ? NULL : PG_GETARG_UUID_P(1));
	if (!WfRunStatusBlocked(status))
	{
		/* a live run has nothing held: resumed already, or never blocked */
		if (WfRunStatusTerminal(status))
			WfCheckRunMove(run_id, status, "RUNNING", WF_CALL_RESUME_RUN);
		PG_RETURN_DATUM(WfRunStatusResult(fcinfo, status));
	}

	nheld = LockHeldSteps(run_id, &held, &shard);
	verdict = WfPinVerdict(run_id);
	WfRunDeltaCall(run_id, shard, WF_CALL_RESUME_RUN);
	if (verdict != NULL)
	{
		/* still blocked, perhaps for another reason: nothing is released */
		WfRunDeltaBlock(run_id, shard, verdict);
	}
	else
	{
		WfDetailBegin(&detail);
		WfDetailText(&detail, "from", status);
		WfDetailInt(&detail, "held_steps", nheld);
		WfRecordRunEvent(run_id, "run_resumed", WfDetailEnd(&detail));
		ClearHeld(run_id);
		WfReleaseSteps(held, nheld);
	}
	WfFinishPending();

	status = WfFindRun(run_id, NULL);
	PG_RETURN_DATUM(WfRunStatusResult(fcinfo, status));
}

WF_OWNER_ENTRY(workflow_resume_run, ResumeRun)
