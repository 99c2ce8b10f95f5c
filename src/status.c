/*-------------------------------------------------------------------------
 *
 * status.c
 *	  Run counters, run status recomputation and the run-terminal
 *	  notification.
 *
 * Row triggers and the cascade only collect per-run counter changes here;
 * WfApplyRunDeltas writes them once per run, in ascending run id, as the
 * last step of a statement or API call.  The run row is the last lock of
 * the engine's lock order and is held until commit, so nothing slow runs
 * after it.  Because the counters are read back from the UPDATE that
 * changes them, two last completions of one run serialize on the run row
 * and exactly one of them sees the run finish.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "access/xact.h"
#include "utils/memutils.h"

#include "workflow.h"

/*
 * Counter changes are kept as records in the order they were made, each
 * tagged with the subtransaction that made it, so that a rolled-back
 * savepoint drops exactly its own changes.  Consecutive changes to one run
 * in one subtransaction share a record.
 */
typedef struct RunDeltaEntry
{
	pg_uuid_t	run_id;
	SubTransactionId subid;
	int32		delta[WF_NUM_COUNTERS];
} RunDeltaEntry;

static RunDeltaEntry *run_deltas = NULL;
static int	n_run_deltas = 0;
static int	max_run_deltas = 0;

/* WfRunDeltasReset forgets collected deltas (their memory is reset). */
void
WfRunDeltasReset(void)
{
	run_deltas = NULL;
	n_run_deltas = 0;
	max_run_deltas = 0;
}

/* WfRunDeltasAbortSub drops the deltas made in an aborted subtransaction. */
void
WfRunDeltasAbortSub(SubTransactionId subid)
{
	int			kept = 0;

	for (int i = 0; i < n_run_deltas; i++)
		if (run_deltas[i].subid < subid)
			run_deltas[kept++] = run_deltas[i];
	n_run_deltas = kept;
}

bool
WfHasRunDeltas(void)
{
	return n_run_deltas > 0;
}

/* WfRunDeltaAdd adds delta to one counter of a run. */
void
WfRunDeltaAdd(const pg_uuid_t *run_id, WfCounter counter, int32 delta)
{
	SubTransactionId subid = GetCurrentSubTransactionId();
	RunDeltaEntry *entry;

	if (n_run_deltas > 0)
	{
		entry = &run_deltas[n_run_deltas - 1];
		if (entry->subid == subid && WfUuidCompare(&entry->run_id, run_id) == 0)
		{
			entry->delta[counter] += delta;
			return;
		}
	}
	if (n_run_deltas == max_run_deltas)
	{
		MemoryContext old = MemoryContextSwitchTo(WfPendingContext());

		max_run_deltas = max_run_deltas == 0 ? 16 : max_run_deltas * 2;
		if (run_deltas == NULL)
			run_deltas = palloc(sizeof(RunDeltaEntry) * max_run_deltas);
		else
			run_deltas = repalloc(run_deltas,
								  sizeof(RunDeltaEntry) * max_run_deltas);
		MemoryContextSwitchTo(old);
	}
	entry = &run_deltas[n_run_deltas++];
	entry->run_id = *run_id;
	entry->subid = subid;
	memset(entry->delta, 0, sizeof(entry->delta));
	entry->delta[counter] = delta;
}

/*
 * WfFindRun returns the status of a run the caller may see, read on a fresh
 * snapshot.  A run of another organization (org non-NULL and different)
 * is reported as missing, like a run that does not exist.
 */
char *
WfFindRun(const pg_uuid_t *run_id, const pg_uuid_t *org)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT r.organization_id, r.status::pg_catalog.text"
		" FROM workflow.workflow_runs r WHERE r.id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	pg_uuid_t	run_org;

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 1);
	if (SPI_processed != 1 ||
		(org != NULL &&
		 (!WfResultUuid(0, 1, &run_org) || WfUuidCompare(&run_org, org) != 0)))
		wf_error(WF_SQLSTATE_NOT_FOUND, WF_RUN_NOT_FOUND, "run %s does not exist",
				 WfUuidString(run_id));
	return WfResultText(0, 2);
}

/*
 * WfComputeRunStatus derives a live run's status from its counters (see
 * DESIGN.md): work in progress first, then waiting for the outside world,
 * then steps still blocked, then the outcome.
 */
const char *
WfComputeRunStatus(int32 active, int32 waiting, int32 blocked,
				   int32 failed, int32 canceled)
{
	if (active > 0)
		return "RUNNING";
	if (waiting > 0)
		return "WAITING_FOR_EXTERNAL";
	if (blocked > 0)
		return "RUNNING";
	if (failed > 0 || canceled > 0)
		return "COMPLETED_WITH_ERRORS";
	return "SUCCEEDED";
}

bool
WfRunStatusTerminal(const char *status)
{
	return strcmp(status, "SUCCEEDED") == 0 ||
		strcmp(status, "COMPLETED_WITH_ERRORS") == 0 ||
		strcmp(status, "CANCELED") == 0;
}

/*
 * WfNotifyRunTerminal sends the one notification the engine sends: a run
 * entered a terminal status.  Delivered at commit, or never.
 */
void
WfNotifyRunTerminal(const pg_uuid_t *run_id, const char *status)
{
	StringInfoData payload;

	initStringInfo(&payload);
	appendStringInfo(&payload,
					 "{\"workflow_run_id\": \"%s\", \"status\": \"%s\"}",
					 WfUuidString(run_id), status);
	Async_Notify("workflow_run_terminal", payload.data);
	pfree(payload.data);
}

/* WfApplyRunDelta writes one run's counter changes and its new status. */
static void
WfApplyRunDelta(const RunDeltaEntry *entry)
{
	static SPIPlanPtr counters_plan = NULL;
	static const char *counters_sql =
		"UPDATE workflow.workflow_runs SET"
		" steps_active = steps_active" OP("+") "$2,"
		" steps_waiting = steps_waiting" OP("+") "$3,"
		" steps_blocked = steps_blocked" OP("+") "$4,"
		" steps_succeeded = steps_succeeded" OP("+") "$5,"
		" steps_failed = steps_failed" OP("+") "$6,"
		" steps_canceled = steps_canceled" OP("+") "$7,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE id" OP("=") "$1"
		" RETURNING status::pg_catalog.text, steps_active, steps_waiting,"
		" steps_blocked, steps_failed, steps_canceled";
	static const Oid counters_types[7] = {UUIDOID, INT4OID, INT4OID, INT4OID,
	INT4OID, INT4OID, INT4OID};
	static SPIPlanPtr status_plan = NULL;
	static const char *status_sql =
		"UPDATE workflow.workflow_runs r SET"
		" status = $2::workflow.run_status,"
		" finished_at = CASE WHEN $3 THEN pg_catalog.statement_timestamp() END,"
		" result = CASE WHEN $2" OP("=") "'SUCCEEDED' THEN"
		"  (SELECT s.output FROM workflow.workflow_steps s"
		"   WHERE s.workflow_run_id" OP("=") "r.id"
		"   AND s.step_key" OP("=") "r.result_step_key) END"
		" WHERE r.id" OP("=") "$1";
	static const Oid status_types[3] = {UUIDOID, TEXTOID, BOOLOID};
	Datum		values[7];
	char		nulls[7] = "       ";
	char	   *old_status;
	const char *new_status;
	bool		terminal;

	values[0] = WfUuidDatum(&entry->run_id);
	for (int i = 0; i < WF_NUM_COUNTERS; i++)
		values[i + 1] = Int32GetDatum(entry->delta[i]);

	if (WfExecute(&counters_plan, counters_sql, 7, counters_types, values,
				  nulls, false, 0) != SPI_OK_UPDATE_RETURNING ||
		SPI_processed != 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": run %s vanished while its steps changed",
						WfUuidString(&entry->run_id))));

	old_status = WfResultText(0, 1);
	if (strcmp(old_status, "CANCELED") == 0)
		return;					/* a canceled run stays canceled */

	new_status = WfComputeRunStatus(WfResultInt32(0, 2), WfResultInt32(0, 3),
									WfResultInt32(0, 4), WfResultInt32(0, 5),
									WfResultInt32(0, 6));
	if (strcmp(old_status, new_status) == 0)
		return;
	if (WfRunStatusTerminal(old_status))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": run %s changed after it finished",
						WfUuidString(&entry->run_id)),
				 errdetail("Its status was %s; its counters now say %s.",
						   old_status, new_status)));

	terminal = WfRunStatusTerminal(new_status);
	values[1] = CStringGetTextDatum(new_status);
	values[2] = BoolGetDatum(terminal);
	WfExecute(&status_plan, status_sql, 3, status_types, values, nulls,
			  false, 0);
	if (terminal)
		WfNotifyRunTerminal(&entry->run_id, new_status);
}

/*
 * WfApplyRunDeltas writes every collected run change, in ascending run id
 * so that two statements touching the same runs never wait on each other
 * in a cycle.  A transaction that already holds run rows from an earlier
 * call takes the new ones NOWAIT (see WfHoldsLateLocks).
 */
void
WfApplyRunDeltas(void)
{
	static SPIPlanPtr lock_plan = NULL;
	static const char *lock_sql =
		"SELECT 1 FROM workflow.workflow_runs r WHERE r.id" OP("=") "$1"
		" FOR NO KEY UPDATE NOWAIT";
	static const Oid lock_types[1] = {UUIDOID};
	RunDeltaEntry *entries;
	int			n = n_run_deltas;
	int			nruns = 0;
	bool		late = WfHoldsLateLocks();

	if (n == 0)
		return;

	entries = palloc(sizeof(RunDeltaEntry) * n);
	memcpy(entries, run_deltas, sizeof(RunDeltaEntry) * n);
	WfRunDeltasReset();
	qsort(entries, n, sizeof(RunDeltaEntry), WfUuidCmpQsort);

	/* sum the records of each run into its first one */
	for (int i = 0; i < n; i++)
	{
		if (nruns > 0 &&
			WfUuidCompare(&entries[nruns - 1].run_id, &entries[i].run_id) == 0)
		{
			for (int c = 0; c < WF_NUM_COUNTERS; c++)
				entries[nruns - 1].delta[c] += entries[i].delta[c];
		}
		else
			entries[nruns++] = entries[i];
	}

	for (int i = 0; i < nruns; i++)
	{
		bool		changed = false;

		for (int c = 0; c < WF_NUM_COUNTERS; c++)
			changed |= entries[i].delta[c] != 0;
		if (!changed)
			continue;
		if (late)
		{
			Datum		values[1];

			values[0] = UUIDPGetDatum(&entries[i].run_id);
			WfExecuteNowait(&lock_plan, lock_sql, 1, lock_types, values, NULL);
		}
		WfApplyRunDelta(&entries[i]);
		WfNoteLateLocks();
	}
	pfree(entries);
}
