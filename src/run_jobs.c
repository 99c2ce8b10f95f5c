/*-------------------------------------------------------------------------
 *
 * run_jobs.c
 *	  The live jobs of a run: locking them and canceling them, for the
 *	  calls that stop a run (cancel_run, retire_run, compensate_run, and a
 *	  compensation that starts when a step fails).
 *
 * A run's live jobs are the QUEUED or RUNNING jobs of its ENQUEUED,
 * RUNNING or COMPENSATING steps.  It also creates the jobs of released
 * steps (cascade.c, admission.c), new rows that no one else can hold.  They are locked in ascending id, first
 * of the lock order; a caller that already holds later locks takes them
 * NOWAIT and turns a failure into workflow.release_conflict.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "workflow.h"

#define LIVE_JOBS_SQL \
	"SELECT j.id FROM workflow.job_queue j" \
	" WHERE j.id" OP("=") "ANY (ARRAY(SELECT s.job_id FROM workflow.workflow_steps s" \
	"  WHERE s.workflow_run_id" OP("=") "$1" \
	"  AND s.status" OP("=") "ANY ('{ENQUEUED,RUNNING,COMPENSATING}'::workflow.step_status[])))" \
	" AND j.status" OP("=") "ANY ('{QUEUED,RUNNING}'::workflow.job_status[])" \
	" ORDER BY j.id FOR NO KEY UPDATE"

/*
 * WfLockLiveJobs locks the run's live jobs in ascending id, NOWAIT when
 * nowait, and returns how many it locked, with their ids when ids is not
 * NULL.
 */
uint64
WfLockLiveJobs(const pg_uuid_t *run_id, bool nowait, Datum **ids)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr nowait_plan = NULL;
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	uint64		n;

	values[0] = UUIDPGetDatum(run_id);
	if (nowait)
		WfExecuteNowait(&nowait_plan, LIVE_JOBS_SQL " NOWAIT", 1, types,
						values, NULL);
	else
		WfExecute(&plan, LIVE_JOBS_SQL, 1, types, values, NULL, false, 0);
	n = SPI_processed;
	if (ids == NULL)
		return n;
	*ids = palloc(sizeof(Datum) * Max(n, 1));
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		(*ids)[i] = WfUuidDatum(DatumGetUUIDP(WfResultDatum(i, 1, &isnull)));
	}
	return n;
}

/*
 * WfCancelJobs cancels jobs the caller holds, with last_error_code code
 * and last_error_message reason (NULL when reason_null).
 */
void
WfCancelJobs(Datum *job_ids, uint64 njobs, const char *code, Datum reason,
			 bool reason_null)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.job_queue j SET status = 'CANCELED',"
		" last_error_code = $3,"
		" last_error_message = $2, leased_until = NULL,"
		" finished_at = pg_catalog.statement_timestamp(),"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE j.id" OP("=") "ANY ($1)";
	static const Oid types[3] = {UUIDARRAYOID, TEXTOID, TEXTOID};
	Datum		values[3];
	char		nulls[3] = "   ";

	if (njobs == 0)
		return;
	values[0] = WfArray(job_ids, NULL, njobs, UUIDOID);
	values[1] = reason;
	nulls[1] = reason_null ? 'n' : ' ';
	values[2] = CStringGetTextDatum(code);
	WfExecute(&plan, sql, 3, types, values, nulls, false, 0);
}

/*
 * WfInsertStepJobs creates the job row of each released job step, from the
 * step (its job_id, payload and options, and its generation): the
 * cascade's releases and admission's parked steps.
 */
void
WfInsertStepJobs(const pg_uuid_t *ids, int n)
{
	static WfDueStatement insert = {
		WF_STEP_JOBS_INSERT
		" FROM workflow.workflow_steps s WHERE s.id" OP("=") "ANY ($1)"};
	static const Oid insert_types[1] = {UUIDARRAYOID};
	Datum	   *ids_d = palloc(sizeof(Datum) * n);
	Datum		values[1];

	for (int i = 0; i < n; i++)
		ids_d[i] = UUIDPGetDatum(&ids[i]);
	values[0] = WfArray(ids_d, NULL, n, UUIDOID);
	if (WfExecuteDue(&insert, 1, insert_types, values, NULL) != (uint64) n)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": released steps lost their job")));
	pfree(ids_d);
}
