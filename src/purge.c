/*-------------------------------------------------------------------------
 *
 * purge.c
 *	  purge: deletion of finished runs and finished plain jobs, in bounded
 *	  batches, oldest first.
 *
 * A finished run goes with its steps, its edges, its jobs, its events
 * (the history) and its inbox (the events sent to it), all in the caller's
 * transaction, so a run is deleted
 * whole or not at all.  Plain jobs go on their own.  One call deletes at most batch_size runs and at
 * most batch_size plain jobs; a scheduler calls it, one transaction per
 * call, until it returns 0.
 *
 * Locks, none of them waited for: the candidate run rows FOR UPDATE SKIP
 * LOCKED; per run, a try of its release lock exclusive, then its step rows
 * and job rows FOR UPDATE SKIP LOCKED.  A run whose release lock or any of
 * whose step or job rows another transaction holds is skipped whole (the
 * rows already locked stay locked until commit, unchanged) and counts
 * toward the batch; a later call takes it.  Plain jobs: FOR UPDATE SKIP
 * LOCKED.  Since purge waits for nothing, it closes no wait cycle, whatever
 * order it locks in.  Edges are written only by start_run and by purge, and
 * no engine path locks them, so their DELETE waits for nobody either.
 *
 * The release lock of a run is let go as soon as the run is dealt with,
 * not at commit: a call may handle up to 100000 runs, and each held lock
 * is an entry in the shared lock table (max_locks_per_transaction).  Once
 * the run's rows are deleted under our row locks, that lock guards nothing
 * more: an engine call that reaches the run either locks one of those rows
 * first, waits for our commit and finds the row gone, or only reads the
 * finished run as it was (cancel_run repeated returns CANCELED).
 *
 * A worker that calls complete_job, fail_job or heartbeat on a purged job
 * gets job.not_found, as for any unknown id; one that was waiting for the
 * job row while purge held it gets the same once purge commits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_purge);

static Datum Purge(PG_FUNCTION_ARGS);

#define WF_MAX_PURGE_BATCH	100000

static TimestampTz PurgeCutoff(Interval *older_than);
static int64 PurgeRuns(TimestampTz cutoff, int32 batch_size);
static bool LockRunRows(const pg_uuid_t *run_id);
static void DeleteRun(const pg_uuid_t *run_id);
static int64 PurgePlainJobs(TimestampTz cutoff, int32 batch_size);

/*
 * workflow_purge deletes finished runs and finished plain jobs older than
 * older_than, at most batch_size of each, and returns how many it deleted.
 */
static Datum
Purge(PG_FUNCTION_ARGS)
{
	Interval   *older_than;
	int32		batch_size;
	TimestampTz cutoff;
	int64		deleted;

	WfRequireReadCommitted();
	if (PG_ARGISNULL(0))
		wf_invalid_argument("older_than must not be null");
	older_than = PG_GETARG_INTERVAL_P(0);
	if (PG_ARGISNULL(1))
		wf_invalid_argument("batch_size must not be null");
	batch_size = PG_GETARG_INT32(1);
	if (batch_size < 1 || batch_size > WF_MAX_PURGE_BATCH)
		wf_invalid_argument("batch_size must be between 1 and %d, not %d",
							WF_MAX_PURGE_BATCH, batch_size);
	cutoff = PurgeCutoff(older_than);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	deleted = PurgeRuns(cutoff, batch_size);
	deleted += PurgePlainJobs(cutoff, batch_size);
	SPI_finish();
	PG_RETURN_INT64(deleted);
}

/*
 * PurgeCutoff is statement_timestamp() - older_than.  older_than is
 * compared with zero the way SQL compares intervals (a month counts as 30
 * days), so whether it is accepted does not depend on the date.  An
 * interval that reaches before the first representable timestamp is bad
 * input too, not a datetime overflow.
 */
static TimestampTz
PurgeCutoff(Interval *older_than)
{
	Interval	zero;
	MemoryContext oldcontext = CurrentMemoryContext;
	TimestampTz cutoff = 0;

	memset(&zero, 0, sizeof(zero));
	if (DatumGetBool(DirectFunctionCall2(interval_lt,
										 IntervalPGetDatum(older_than),
										 IntervalPGetDatum(&zero))))
		wf_invalid_argument("older_than must not be negative");

	PG_TRY();
	{
		cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
														 TimestampTzGetDatum(GetCurrentStatementStartTimestamp()),
														 IntervalPGetDatum(older_than)));
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_DATETIME_VALUE_OUT_OF_RANGE)
			PG_RE_THROW();
		FlushErrorState();
		wf_invalid_argument("older_than reaches before the earliest timestamp");
	}
	PG_END_TRY();
	return cutoff;
}

/*
 * PurgeRuns deletes up to batch_size finished runs that finished before
 * cutoff, oldest first, skipping runs that another transaction holds.
 */
static int64
PurgeRuns(TimestampTz cutoff, int32 batch_size)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT r.id FROM workflow.workflow_runs r"
		" WHERE r.finished_at" OP("<") "$1"
		" AND r.status" OP("=") "ANY ('{SUCCEEDED,COMPLETED_WITH_ERRORS,CANCELED,RETIRED_UNRESUMABLE,COMPENSATED,COMPENSATION_FAILED}'::workflow.run_status[])"
		" AND ($3::pg_catalog.uuid[] IS NULL OR r.organization_id" OP("=") "ANY ($3))"
		" ORDER BY r.finished_at, r.id LIMIT $2"
		" FOR UPDATE SKIP LOCKED";
	static const Oid types[3] = {TIMESTAMPTZOID, INT4OID, UUIDARRAYOID};
	Datum		values[3];
	char		nulls[3] = "   ";
	bool		unconfined;
	uint64		nruns;
	pg_uuid_t  *runs;
	int64		deleted = 0;

	values[0] = TimestampTzGetDatum(cutoff);
	values[1] = Int32GetDatum(batch_size);
	/* a tenant role purges only its organizations' runs */
	values[2] = WfCallOrganizationsArray(&unconfined);
	nulls[2] = unconfined ? 'n' : ' ';
	WfExecute(&plan, sql, 3, types, values, nulls, false, 0);
	nruns = SPI_processed;
	if (nruns == 0)
		return 0;
	runs = palloc(sizeof(pg_uuid_t) * nruns);
	for (uint64 i = 0; i < nruns; i++)
		WfResultUuid(i, 1, &runs[i]);
	SPI_freetuptable(SPI_tuptable);

	/* the run rows are ours until commit: later waits must not block */
	WfNoteLateLocks();

	for (uint64 i = 0; i < nruns; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (!WfLockRunRelease(&runs[i], true, false))
			continue;
		if (LockRunRows(&runs[i]))
		{
			DeleteRun(&runs[i]);
			deleted++;
		}
		WfUnlockRunRelease(&runs[i], true);
	}
	pfree(runs);
	return deleted;
}

/*
 * LockRunRows locks every step and job row of a run without waiting and
 * says whether it got them all.  The counts without locks are the rows the
 * deletes will meet; a row skipped by SKIP LOCKED (held, or deleted
 * meanwhile) makes the locked count fall short.
 */
static bool
LockRunRows(const pg_uuid_t *run_id)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT"
		" (SELECT pg_catalog.count(*) FROM workflow.workflow_steps s"
		"   WHERE s.workflow_run_id" OP("=") "$1)"
		" " OP("=")
		" (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM workflow.workflow_steps s"
		"   WHERE s.workflow_run_id" OP("=") "$1"
		"   FOR UPDATE SKIP LOCKED) l)"
		" AND"
		" (SELECT pg_catalog.count(*) FROM workflow.job_queue j"
		"   WHERE j.workflow_step_id" OP("=") "ANY (ARRAY(SELECT s.id FROM workflow.workflow_steps s"
		"    WHERE s.workflow_run_id" OP("=") "$1))"
		"   AND j.workflow_run_id" OP("=") "$1)"
		" " OP("=")
		" (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM workflow.job_queue j"
		"   WHERE j.workflow_step_id" OP("=") "ANY (ARRAY(SELECT s.id FROM workflow.workflow_steps s"
		"    WHERE s.workflow_run_id" OP("=") "$1))"
		"   AND j.workflow_run_id" OP("=") "$1"
		"   FOR UPDATE SKIP LOCKED) l)";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	bool		all_locked;

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		elog(ERROR, "purge: the lock check of run %s returned %llu rows",
			 WfUuidString(run_id), (unsigned long long) SPI_processed);
	all_locked = WfResultBool(0, 1);
	SPI_freetuptable(SPI_tuptable);
	return all_locked;
}

/*
 * DeleteRun deletes a run whose rows are all locked by us: jobs first
 * (found through the steps, so the unique (workflow_step_id, generation)
 * index serves), then edges, steps, counter shards, the run's events, its
 * inbox, its own lineage row (the row of a run that continues it stays:
 * it is the successor's) and the run.  The guards of jobs and events let the engine through.
 */
static void
DeleteRun(const pg_uuid_t *run_id)
{
	static SPIPlanPtr jobs_plan = NULL;
	static const char *jobs_sql =
		"DELETE FROM workflow.job_queue j"
		" WHERE j.workflow_step_id" OP("=") "ANY (ARRAY(SELECT s.id FROM workflow.workflow_steps s"
		"  WHERE s.workflow_run_id" OP("=") "$1))"
		" AND j.workflow_run_id" OP("=") "$1";
	static SPIPlanPtr edges_plan = NULL;
	static const char *edges_sql =
		"DELETE FROM workflow.workflow_step_dependencies e"
		" WHERE e.workflow_run_id" OP("=") "$1";
	static SPIPlanPtr steps_plan = NULL;
	static const char *steps_sql =
		"DELETE FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1";
	static SPIPlanPtr counters_plan = NULL;
	static const char *counters_sql =
		"DELETE FROM workflow.workflow_run_counters c"
		" WHERE c.workflow_run_id" OP("=") "$1";
	static SPIPlanPtr events_plan = NULL;
	static const char *events_sql =
		"DELETE FROM workflow.workflow_events e"
		" WHERE e.workflow_run_id" OP("=") "$1";
	static SPIPlanPtr inbox_plan = NULL;
	static const char *inbox_sql =
		"DELETE FROM workflow.event_inbox i"
		" WHERE i.workflow_run_id" OP("=") "$1";
	static SPIPlanPtr lineage_plan = NULL;
	static const char *lineage_sql =
		"DELETE FROM workflow.workflow_continuations c"
		" WHERE c.successor_run_id" OP("=") "$1";
	static SPIPlanPtr run_plan = NULL;
	static const char *run_sql =
		"DELETE FROM workflow.workflow_runs r WHERE r.id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = UUIDPGetDatum(run_id);
	WfExecuteAsEngine(&jobs_plan, jobs_sql, 1, types, values, NULL);
	WfExecute(&edges_plan, edges_sql, 1, types, values, NULL, false, 0);
	WfExecute(&steps_plan, steps_sql, 1, types, values, NULL, false, 0);
	WfExecute(&counters_plan, counters_sql, 1, types, values, NULL, false, 0);
	WfExecuteAsEngine(&events_plan, events_sql, 1, types, values, NULL);
	WfExecute(&inbox_plan, inbox_sql, 1, types, values, NULL, false, 0);
	WfExecute(&lineage_plan, lineage_sql, 1, types, values, NULL, false, 0);
	WfExecute(&run_plan, run_sql, 1, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		elog(ERROR, "purge: run %s vanished while its row was locked",
			 WfUuidString(run_id));
}

/*
 * PurgePlainJobs deletes up to batch_size finished plain jobs that
 * finished before cutoff, oldest first, skipping locked ones.
 */
static int64
PurgePlainJobs(TimestampTz cutoff, int32 batch_size)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH c AS (SELECT j.id FROM workflow.job_queue j"
		"  WHERE j.workflow_run_id IS NULL"
		"  AND j.status" OP("=") "ANY ('{SUCCEEDED,FAILED,CANCELED}'::workflow.job_status[])"
		"  AND j.finished_at" OP("<") "$1"
		"  AND ($3::pg_catalog.uuid[] IS NULL OR j.organization_id" OP("=") "ANY ($3))"
		"  ORDER BY j.finished_at, j.id LIMIT $2"
		"  FOR UPDATE SKIP LOCKED)"
		" DELETE FROM workflow.job_queue j USING c WHERE j.id" OP("=") "c.id";
	static const Oid types[3] = {TIMESTAMPTZOID, INT4OID, UUIDARRAYOID};
	Datum		values[3];
	char		nulls[3] = "   ";
	bool		unconfined;

	values[0] = TimestampTzGetDatum(cutoff);
	values[1] = Int32GetDatum(batch_size);
	values[2] = WfCallOrganizationsArray(&unconfined);
	nulls[2] = unconfined ? 'n' : ' ';
	WfExecute(&plan, sql, 3, types, values, nulls, false, 0);
	return (int64) SPI_processed;
}

/*
 * The SQL-callable entry points: each body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
WF_OWNER_ENTRY(workflow_purge, Purge)
