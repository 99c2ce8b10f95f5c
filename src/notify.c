/*-------------------------------------------------------------------------
 *
 * notify.c
 *	  Wake-ups: the notifications that tell waiting workers a job type has
 *	  jobs due now (workflow.notify_jobs, off by default).
 *
 * The calls that make jobs due at once (enqueue, start_run and the
 * cascade's release of steps, a retry or lease expiry that is due
 * already, release_job) report each job type here, and with the setting
 * on each becomes pg_notify('workflow_jobs', job_type).  PostgreSQL
 * delivers identical notifications of one transaction once, at commit,
 * and drops those of a subtransaction that rolls back, so a transaction
 * sends one per job type whatever it did.
 *
 * The statements that update or insert jobs have a second form with a
 * RETURNING clause that names the job type of each row they leave due,
 * used only when the setting is on: with it off, a job pays nothing.
 *
 * Takes no locks of its own; a notification takes PostgreSQL's
 * notification queue lock at commit, which is why it is opt-in.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/async.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "workflow.h"

#define WF_JOBS_CHANNEL "workflow_jobs"

/*
 * The RETURNING clause of a statement's notifying form: the job type of
 * each row it leaves QUEUED and due, else NULL.  The statement names
 * job_queue j.
 */
#define RETURNING_DUE_TYPE \
	" RETURNING CASE WHEN j.status" OP("=") "'QUEUED'" \
	" AND j.run_at" OP("<=") "pg_catalog.statement_timestamp()" \
	" THEN j.job_type END"

/* WfNotifyJobType wakes the workers of one job type at commit. */
void
WfNotifyJobType(const char *job_type)
{
	if (wf_notify_jobs)
		Async_Notify(WF_JOBS_CHANNEL, job_type);
}

/*
 * WfExecuteDue runs a statement that may leave jobs due: in its notifying
 * form when the setting is on, which then wakes the workers of every job
 * type it returned.  Returns SPI_processed; the result rows are the
 * notifying form's, so callers must not read others.
 */
uint64
WfExecuteDue(WfDueStatement *st, int nargs, const Oid *argtypes,
			 Datum *values, const char *nulls)
{
	uint64		processed;

	if (!wf_notify_jobs)
	{
		WfExecuteGeneric(&st->plan, st->sql, nargs, argtypes, values, nulls);
		return SPI_processed;
	}
	if (st->notify_sql == NULL)
		st->notify_sql = MemoryContextStrdup(TopMemoryContext,
											 psprintf("%s%s", st->sql,
													  RETURNING_DUE_TYPE));
	WfExecuteGeneric(&st->notify_plan, st->notify_sql, nargs, argtypes,
					 values, nulls);
	processed = SPI_processed;
	for (uint64 i = 0; i < processed; i++)
	{
		bool		isnull;
		Datum		type = WfResultDatum(i, 1, &isnull);

		if (!isnull)
			Async_Notify(WF_JOBS_CHANNEL, TextDatumGetCString(type));
	}
	return processed;
}
