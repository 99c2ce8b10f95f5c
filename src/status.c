/*-------------------------------------------------------------------------
 *
 * status.c
 *	  Run counters, run status recomputation and the run-terminal
 *	  notification.
 *
 * run_counters reads a run's counters for callers, summed over its shards.
 *
 * Row triggers and the cascade only collect counter changes here, per run
 * and counter shard; WfApplyRunDeltas writes them once per shard and run,
 * in ascending (run id, shard), the run row after its shards, as the last
 * step of a statement or API call.  These rows are the last locks of the
 * engine's lock order and are held until commit, so nothing slow runs
 * after them.  A run's status changes only in SetRunStatus, which records
 * run_status_changed (history.c), and in cancel_run (cancel.c); both
 * check the move against the run state machine first (run_moves.c).  Collected changes are dropped with a
 * rolled-back subtransaction and at the end of the transaction, through
 * the hooks this file registers with xact_state.c.
 *
 * A capped run's parked steps are let run where its run row is written,
 * before its status is computed from the counters (admission.c): the row
 * is the point that serializes everything that changes the run's room.
 *
 * A run's counters live on its run row, or, for a run whose widest level
 * has at least workflow.counter_shard_min_width steps, in counter shards
 * (workflow.workflow_run_counters, shards 1..counter_shards): each step
 * counts in one shard, and the run row's steps_active, steps_waiting and
 * steps_blocked count the shards where that counter is not zero.  A step's
 * change locks only its shard; the run row is written only when a shard's
 * counter crosses zero.  The run's status depends only on which of those
 * counters are zero, so a change that crosses nothing cannot change it,
 * and the decision that the run finished is still taken by UPDATE ...
 * RETURNING of the run row.  The last step of every shard crosses, so two
 * last completions serialize on the run row (different shards) or on
 * their shard (the same one), and exactly one of them sees the run finish.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "access/xact.h"
#include "utils/memutils.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_run_counters);

static Datum RunCounters(PG_FUNCTION_ARGS);

/*
 * Counter changes are kept as records in the order they were made, each
 * tagged with the subtransaction that made it, so that a rolled-back
 * savepoint drops exactly its own changes.  Consecutive changes to one run
 * in one subtransaction share a record.
 */
typedef struct RunDeltaEntry
{
	pg_uuid_t	run_id;
	int16		shard;			/* 0: the run row itself */
	SubTransactionId subid;
	int32		delta[WF_NUM_COUNTERS];
	WfRunCall	call;			/* who moves the run's status */
	const char *blocked;		/* the BLOCKED_* status a release was held
								 * for, or NULL */
} RunDeltaEntry;

/* what a run's status follows from, read back from its run row */
typedef struct RunCounts
{
	int32		active;
	int32		waiting;
	int32		blocked;
	int32		failed;
	int32		canceled;
	WfRunRoom	room;			/* parked steps, executions and caps */
	bool		deadline_elapsed;	/* its deadline ended it */
} RunCounts;

static RunDeltaEntry *run_deltas = NULL;
static int	n_run_deltas = 0;
static int	max_run_deltas = 0;

static void RunDeltasAbortSub(SubTransactionId subid);
static void SumShards(const pg_uuid_t *run_id, int32 *succeeded,
					  int32 *failed, int32 *canceled, int32 *executions);
static char *UpdateRunCounters(const RunDeltaEntry *entry, RunCounts *counts);
static void FoldShardTotals(const pg_uuid_t *run_id, RunCounts *counts);
static void SetRunStatus(const pg_uuid_t *run_id, const char *old_status,
						 const char *new_status, const char *event_type);
static RunDeltaEntry *RunDeltaEntryFor(const pg_uuid_t *run_id, int16 shard);
static bool CountersChange(const RunDeltaEntry *entry);
static void MergeMove(RunDeltaEntry *into, const RunDeltaEntry *from);
static void ApplyRunDelta(const RunDeltaEntry *entry, bool sharded);
static void ApplyShardDelta(const RunDeltaEntry *entry,
							RunDeltaEntry *run_delta, bool late);
static int	CompareRunDelta(const void *a, const void *b);
static bool DeltaChanges(const RunDeltaEntry *entry);
static int	MergeRunDeltas(RunDeltaEntry *entries, int n);
static int	ApplyRunShards(const RunDeltaEntry *entries, int nkeys, int first,
						   RunDeltaEntry *run_delta, bool late);

/* WfRunDeltasReset forgets collected deltas (their memory is reset). */
void
WfRunDeltasReset(void)
{
	run_deltas = NULL;
	n_run_deltas = 0;
	max_run_deltas = 0;
}

/* RunDeltasAbortSub drops the deltas made in an aborted subtransaction. */
static void
RunDeltasAbortSub(SubTransactionId subid)
{
	int			kept = 0;

	for (int i = 0; i < n_run_deltas; i++)
		if (run_deltas[i].subid < subid)
			run_deltas[kept++] = run_deltas[i];
	n_run_deltas = kept;
}

/* WfHasRunDeltas says whether counter changes wait to be applied. */
bool
WfHasRunDeltas(void)
{
	return n_run_deltas > 0;
}

/* WfStatusInit registers the counter changes' end-of-transaction hooks. */
void
WfStatusInit(void)
{
	static const WfXactHooks hooks = {
		.unfinished = WfHasRunDeltas,
		.reset = WfRunDeltasReset,
		.abort_sub = RunDeltasAbortSub,
	};

	WfRegisterXactHooks(&hooks);
}

/*
 * RunDeltaEntryFor returns the record that collects the current
 * subtransaction's changes to a run's counter shard: the last one if it is
 * that, else a new one.
 */
static RunDeltaEntry *
RunDeltaEntryFor(const pg_uuid_t *run_id, int16 shard)
{
	SubTransactionId subid = GetCurrentSubTransactionId();
	RunDeltaEntry *entry;

	if (n_run_deltas > 0)
	{
		entry = &run_deltas[n_run_deltas - 1];
		if (entry->subid == subid && entry->shard == shard &&
			WfUuidCompare(&entry->run_id, run_id) == 0)
			return entry;
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
	entry->shard = shard;
	entry->subid = subid;
	memset(entry->delta, 0, sizeof(entry->delta));
	entry->call = WF_CALL_STEP_CHANGE;
	entry->blocked = NULL;
	return entry;
}

/* WfRunDeltaAdd adds delta to one counter of a run's counter shard. */
void
WfRunDeltaAdd(const pg_uuid_t *run_id, int16 shard, WfCounter counter,
			  int32 delta)
{
	RunDeltaEntry *entry = RunDeltaEntryFor(run_id, shard);

	entry->delta[counter] += delta;
}

/*
 * WfRunDeltaBlock records that a release in the run (counted in shard) was
 * held because its pin failed with blocked_status: the run's status
 * becomes that when its counters are applied, unless the run finished.
 */
void
WfRunDeltaBlock(const pg_uuid_t *run_id, int16 shard,
				const char *blocked_status)
{
	RunDeltaEntry *entry = RunDeltaEntryFor(run_id, shard);

	entry->blocked = blocked_status;
}

/*
 * WfRunDeltaCall records that call (resume_run, retry_run) makes this
 * transaction's change of the run's status: the run may leave a blocked
 * or finished status, by the moves of that call.
 */
void
WfRunDeltaCall(const pg_uuid_t *run_id, int16 shard, WfRunCall call)
{
	RunDeltaEntry *entry = RunDeltaEntryFor(run_id, shard);

	entry->call = call;
}

/*
 * WfFindRun returns the status of a run the caller may see, read on a fresh
 * snapshot.  A run of another organization (org non-NULL and different,
 * or not one of a confined caller's) is reported as missing, like a run
 * that does not exist.
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

	bool		has_org;

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 1);
	has_org = SPI_processed == 1 && WfResultUuid(0, 1, &run_org);
	if (SPI_processed != 1 ||
		(org != NULL && (!has_org || WfUuidCompare(&run_org, org) != 0)) ||
		!WfCallSeesOrganization(has_org ? &run_org : NULL))
		wf_error(WF_SQLSTATE_NOT_FOUND, WF_RUN_NOT_FOUND, "run %s does not exist",
				 WfUuidString(run_id));
	return WfResultText(0, 2);
}

/*
 * WfLockRunForCall finds a run the caller may see (org as in WfFindRun),
 * takes its release lock exclusive, waiting for the completions in flight,
 * and returns its status as it stands under that lock: the start of an
 * operator's call on one run (resume_run, retry_run).
 */
char *
WfLockRunForCall(const pg_uuid_t *run_id, const pg_uuid_t *org)
{
	WfFindRun(run_id, org);
	WfLockRunRelease(run_id, true, true);
	/* held until commit, even when the call only reports the status */
	WfNoteLateLocks();
	return WfFindRun(run_id, NULL);
}

/*
 * WfRunStatusResult returns the label status of fcinfo's run_status result
 * type, and disconnects from SPI: status may live in SPI's memory, so it
 * is read first.
 */
Datum
WfRunStatusResult(FunctionCallInfo fcinfo, const char *status)
{
	Datum		result;

	result = DirectFunctionCall2(enum_in, CStringGetDatum(status),
								 ObjectIdGetDatum(get_fn_expr_rettype(fcinfo->flinfo)));
	SPI_finish();
	return result;
}

/*
 * WfComputeRunStatus derives a live run's status from its counters (see
 * docs/reference.md, section 4): work in progress first, then waiting for the
 * outside world, then parked steps (with nothing active, only a larger
 * execution allowance lets them run), then steps still blocked, then the
 * outcome.
 */
const char *
WfComputeRunStatus(int32 active, int32 waiting, int32 parked, int32 blocked,
				   int32 failed, int32 canceled)
{
	if (active > 0)
		return "RUNNING";
	if (waiting > 0)
		return "WAITING_FOR_EXTERNAL";
	if (parked > 0)
		return "WAITING_FOR_ALLOWANCE";
	if (blocked > 0)
		return "RUNNING";
	if (failed > 0 || canceled > 0)
		return "COMPLETED_WITH_ERRORS";
	return "SUCCEEDED";
}

/* WfRunStatusTerminal says whether a run status is final. */
bool
WfRunStatusTerminal(const char *status)
{
	return strcmp(status, "SUCCEEDED") == 0 ||
		strcmp(status, "COMPLETED_WITH_ERRORS") == 0 ||
		strcmp(status, "CANCELED") == 0 ||
		strcmp(status, "RETIRED_UNRESUMABLE") == 0 ||
		strcmp(status, "COMPENSATED") == 0 ||
		strcmp(status, "COMPENSATION_FAILED") == 0;
}

/*
 * WfRunStatusCompensation says whether a run status is one of a run being
 * or having been undone.
 */
bool
WfRunStatusCompensation(const char *status)
{
	return strncmp(status, "COMPENSAT", 9) == 0;
}

/* WfRunStatusBlocked says whether a run status is one of BLOCKED_*. */
bool
WfRunStatusBlocked(const char *status)
{
	return strncmp(status, "BLOCKED_", 8) == 0;
}

/*
 * WfNotifyRunTerminal sends the one notification the engine sends: a run
 * entered a terminal status.  Delivered at commit, or never.
 */
void
WfNotifyRunTerminal(const pg_uuid_t *run_id, const pg_uuid_t *org,
					const char *status)
{
	StringInfoData payload;
	char		channel[NAMEDATALEN];

	strlcpy(channel, "workflow_run_terminal", sizeof(channel));
	if (wf_notify_per_organization && org != NULL)
	{
		/* 21 + 1 + 32 hex digits: within NAMEDATALEN */
		char	   *p = channel + strlen(channel);

		*p++ = '_';
		for (int i = 0; i < UUID_LEN; i++)
			p += sprintf(p, "%02x", org->data[i]);
	}
	initStringInfo(&payload);
	appendStringInfo(&payload,
					 "{\"workflow_run_id\": \"%s\", \"status\": \"%s\"}",
					 WfUuidString(run_id), status);
	Async_Notify(channel, payload.data);
	pfree(payload.data);
}

/*
 * SumShards reads a sharded run's outcome counters from its shards.  Only
 * the transaction that finishes the run calls it: it holds the run row
 * after the last crossing of every shard, so no change to a shard is in
 * flight and a fresh snapshot sees them all.
 */
static void
SumShards(const pg_uuid_t *run_id, int32 *succeeded, int32 *failed,
		  int32 *canceled, int32 *executions)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT COALESCE(pg_catalog.sum(c.steps_succeeded), 0)::pg_catalog.int4,"
		" COALESCE(pg_catalog.sum(c.steps_failed), 0)::pg_catalog.int4,"
		" COALESCE(pg_catalog.sum(c.steps_canceled), 0)::pg_catalog.int4,"
		" COALESCE(pg_catalog.sum(c.executions_used), 0)::pg_catalog.int4"
		" FROM workflow.workflow_run_counters c"
		" WHERE c.workflow_run_id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 0);
	*succeeded = WfResultInt32(0, 1);
	*failed = WfResultInt32(0, 2);
	*canceled = WfResultInt32(0, 3);
	*executions = WfResultInt32(0, 4);
}

/*
 * UpdateRunCounters adds one run's counter changes to its run row, which
 * it locks until commit, and reads back the run's status and the counters
 * its status follows from.
 */
static char *
UpdateRunCounters(const RunDeltaEntry *entry, RunCounts *counts)
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
		" steps_parked = steps_parked" OP("+") "$8,"
		" executions_used = executions_used" OP("+") "$9,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE id" OP("=") "$1"
		" RETURNING status::pg_catalog.text, steps_active, steps_waiting,"
		" steps_blocked, steps_failed, steps_canceled, steps_parked,"
		" executions_used, COALESCE(node_execution_cap, 0),"
		" COALESCE(concurrency_cap, 0), COALESCE(allowance_exhausted_cap, 0),"
		" status_reason IS NOT DISTINCT FROM '" WF_REASON_RUN_DEADLINE_ELAPSED "'";
	static const Oid counters_types[9] = {UUIDOID, INT4OID, INT4OID, INT4OID,
	INT4OID, INT4OID, INT4OID, INT4OID, INT4OID};
	Datum		values[9];
	char		nulls[9] = "         ";

	values[0] = WfUuidDatum(&entry->run_id);
	for (int i = 0; i < WF_NUM_COUNTERS; i++)
		values[i + 1] = Int32GetDatum(entry->delta[i]);

	if (WfExecute(&counters_plan, counters_sql, 9, counters_types, values,
				  nulls, false, 0) != SPI_OK_UPDATE_RETURNING ||
		SPI_processed != 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": run %s vanished while its steps changed",
						WfUuidString(&entry->run_id))));

	counts->active = WfResultInt32(0, 2);
	counts->waiting = WfResultInt32(0, 3);
	counts->blocked = WfResultInt32(0, 4);
	counts->failed = WfResultInt32(0, 5);
	counts->canceled = WfResultInt32(0, 6);
	counts->room.active = counts->active;
	counts->room.parked = WfResultInt32(0, 7);
	counts->room.executions = WfResultInt32(0, 8);
	counts->room.node_execution_cap = WfResultInt32(0, 9);
	counts->room.concurrency_cap = WfResultInt32(0, 10);
	counts->room.exhausted_cap = WfResultInt32(0, 11);
	counts->deadline_elapsed = WfResultBool(0, 12);
	return WfResultText(0, 1);
}

/*
 * FoldShardTotals writes the outcome counters of a sharded run that just
 * finished, summed over its shards, to its run row, and returns the
 * failed and canceled ones in counts.
 */
static void
FoldShardTotals(const pg_uuid_t *run_id, RunCounts *counts)
{
	static SPIPlanPtr fold_plan = NULL;
	static const char *fold_sql =
		"UPDATE workflow.workflow_runs SET steps_succeeded = $2,"
		" steps_failed = $3, steps_canceled = $4, executions_used = $5"
		" WHERE id" OP("=") "$1";
	static const Oid fold_types[5] = {UUIDOID, INT4OID, INT4OID, INT4OID,
	INT4OID};
	Datum		values[5];
	char		nulls[5] = "     ";
	int32		succeeded;
	int32		executions;

	SumShards(run_id, &succeeded, &counts->failed, &counts->canceled,
			  &executions);
	values[0] = UUIDPGetDatum(run_id);
	values[1] = Int32GetDatum(succeeded);
	values[2] = Int32GetDatum(counts->failed);
	values[3] = Int32GetDatum(counts->canceled);
	values[4] = Int32GetDatum(executions);
	WfExecute(&fold_plan, fold_sql, 5, fold_types, values, nulls,
			  false, 0);
}

/*
 * SetRunStatus writes a run's new status, with its finish time and result
 * when it enters a terminal status, records the change in the history as
 * event_type (from, to), and then notifies that the run finished.
 */
static void
SetRunStatus(const pg_uuid_t *run_id, const char *old_status,
			 const char *new_status, const char *event_type)
{
	static SPIPlanPtr status_plan = NULL;
	static const char *status_sql =
		"UPDATE workflow.workflow_runs r SET"
		" status = $2::workflow.run_status,"
		" finished_at = CASE WHEN $3 THEN pg_catalog.statement_timestamp() END,"
		" result = CASE WHEN $2" OP("=") "'SUCCEEDED' THEN"
		"  (SELECT s.output FROM workflow.workflow_steps s"
		"   WHERE s.workflow_run_id" OP("=") "r.id"
		"   AND s.step_key" OP("=") "r.result_step_key) END,"
		" history_gap = r.history_gap OR NOT $4"
		" WHERE r.id" OP("=") "$1 RETURNING r.organization_id";
	static const Oid status_types[4] = {UUIDOID, TEXTOID, BOOLOID, BOOLOID};
	Datum		values[4];
	char		nulls[4] = "    ";
	bool		terminal = WfRunStatusTerminal(new_status);
	pg_uuid_t	org;
	bool		has_org;
	StringInfoData detail;

	values[0] = UUIDPGetDatum(run_id);
	values[1] = CStringGetTextDatum(new_status);
	values[2] = BoolGetDatum(terminal);
	values[3] = BoolGetDatum(WfHistoryRecordsRuns());
	WfExecute(&status_plan, status_sql, 4, status_types, values, nulls,
			  false, 0);
	has_org = WfResultUuid(0, 1, &org);

	WfDetailBegin(&detail);
	WfDetailText(&detail, "from", old_status);
	WfDetailText(&detail, "to", new_status);
	WfRecordRunEvent(run_id, event_type, WfDetailEnd(&detail));

	if (terminal)
		WfNotifyRunTerminal(run_id, has_org ? &org : NULL, new_status);
}

/*
 * WfSetRunStatus moves a run the caller holds from one status to another
 * by call, as the run state machine allows, with its history event and,
 * when the run finishes, its notification.
 */
void
WfSetRunStatus(const pg_uuid_t *run_id, const char *from, const char *to,
			   WfRunCall call)
{
	WfCheckRunMove(run_id, from, to, call);
	SetRunStatus(run_id, from, to, "run_status_changed");
}

/*
 * ApplyRunDelta writes one run's counter changes and its new status.  For
 * a sharded run the delta counts shards crossing zero, and the outcome
 * counters are summed from the shards into the run row when it finishes.
 * A run whose release was held enters the BLOCKED_* status it was held
 * for, and stays there until resume_run moves it on.  A capped run's
 * parked steps are let run first, holding the run row (admission.c), so
 * that its status follows from what they left.
 */
static void
ApplyRunDelta(const RunDeltaEntry *entry, bool sharded)
{
	RunCounts	counts;
	char	   *old_status;
	const char *new_status;

	old_status = UpdateRunCounters(entry, &counts);
	if (strcmp(old_status, "CANCELED") == 0 ||
		strcmp(old_status, "RETIRED_UNRESUMABLE") == 0 ||
		WfRunStatusCompensation(old_status))
		return;					/* ended, or its compensation decides */
	if (counts.room.parked > 0)
	{
		int32		admitted = WfAdmitParked(&entry->run_id, &counts.room);

		counts.active += admitted;
	}
	if (WfRunStatusBlocked(old_status) && entry->call != WF_CALL_RESUME_RUN &&
		entry->call != WF_CALL_COMPENSATE_ON_FAILURE &&
		entry->call != WF_CALL_DEADLINE)
		return;					/* held until resume_run, or undone */

	if (sharded && counts.active == 0 && counts.waiting == 0 &&
		counts.blocked == 0)
		FoldShardTotals(&entry->run_id, &counts);
	new_status = WfComputeRunStatus(counts.active, counts.waiting,
									counts.room.parked, counts.blocked,
									counts.failed, counts.canceled);
	/* a run its deadline ended has not succeeded, whatever ran on */
	if (counts.deadline_elapsed && strcmp(new_status, "SUCCEEDED") == 0)
		new_status = "COMPLETED_WITH_ERRORS";
	if (entry->blocked != NULL && !WfRunStatusTerminal(new_status))
		new_status = entry->blocked;
	if (entry->call == WF_CALL_COMPENSATE_RUN ||
		entry->call == WF_CALL_COMPENSATE_ON_FAILURE)
		new_status = "COMPENSATING";	/* whatever is left, it is undone */
	if (strcmp(old_status, new_status) == 0)
	{
		/*
		 * a retried run whose reset steps all finished in retry_run's own
		 * call, ending as before: it ran again and ended again, so it moves
		 * twice (and notifies again), as a run that finishes inside
		 * start_run does
		 */
		if (entry->call == WF_CALL_RETRY_RUN && WfRunStatusTerminal(new_status))
		{
			WfCheckRunMove(&entry->run_id, old_status, "RUNNING", entry->call);
			SetRunStatus(&entry->run_id, old_status, "RUNNING", "run_status_changed");
			WfCheckRunMove(&entry->run_id, "RUNNING", new_status, WF_CALL_STEP_CHANGE);
			SetRunStatus(&entry->run_id, "RUNNING", new_status, "run_status_changed");
		}
		return;
	}
	WfCheckRunMove(&entry->run_id, old_status, new_status, entry->call);
	SetRunStatus(&entry->run_id, old_status, new_status,
				 new_status == entry->blocked ? "run_blocked" :
				 "run_status_changed");
}

/*
 * ApplyShardDelta writes one counter shard's changes and adds to run_delta
 * the shards that crossed zero: +1 for a counter that was zero and is not,
 * -1 for the reverse.  The values come back from the UPDATE, so they
 * include every committed change and are exact while the row is held.
 */
static void
ApplyShardDelta(const RunDeltaEntry *entry, RunDeltaEntry *run_delta,
				bool late)
{
	static SPIPlanPtr lock_plan = NULL;
	static const char *lock_sql =
		"SELECT 1 FROM workflow.workflow_run_counters c"
		" WHERE c.workflow_run_id" OP("=") "$1 AND c.shard" OP("=") "$2"
		" FOR NO KEY UPDATE NOWAIT";
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_run_counters c SET"
		" steps_active = c.steps_active" OP("+") "$3,"
		" steps_waiting = c.steps_waiting" OP("+") "$4,"
		" steps_blocked = c.steps_blocked" OP("+") "$5,"
		" steps_succeeded = c.steps_succeeded" OP("+") "$6,"
		" steps_failed = c.steps_failed" OP("+") "$7,"
		" steps_canceled = c.steps_canceled" OP("+") "$8,"
		" executions_used = c.executions_used" OP("+") "$9"
		" WHERE c.workflow_run_id" OP("=") "$1 AND c.shard" OP("=") "$2"
		" RETURNING c.steps_active, c.steps_waiting, c.steps_blocked";
	static const Oid types[9] = {UUIDOID, INT2OID, INT4OID, INT4OID, INT4OID,
	INT4OID, INT4OID, INT4OID, INT4OID};
	Datum		values[9];

	values[0] = WfUuidDatum(&entry->run_id);
	values[1] = Int16GetDatum(entry->shard);
	if (late)
		WfExecuteNowait(&lock_plan, lock_sql, 2, types, values, NULL);
	if (entry->delta[WF_COUNT_PARKED] != 0)
		elog(ERROR, "a step of a run with counter shards was parked");
	for (int i = 0; i <= WF_COUNT_CANCELED; i++)
		values[i + 2] = Int32GetDatum(entry->delta[i]);
	values[8] = Int32GetDatum(entry->delta[WF_COUNT_EXECUTIONS]);
	if (WfExecute(&plan, sql, 9, types, values, NULL, false, 0) !=
		SPI_OK_UPDATE_RETURNING || SPI_processed != 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": counter shard %d of run %s is missing",
						entry->shard, WfUuidString(&entry->run_id))));

	for (int c = WF_COUNT_ACTIVE; c <= WF_COUNT_BLOCKED; c++)
	{
		int32		after = WfResultInt32(0, c + 1);
		int32		before = after - entry->delta[c];

		if (after < 0)
			ereport(ERROR,
					(errcode(WF_SQLSTATE_INTERNAL),
					 errmsg(WF_INTERNAL_STATE ": counter shard %d of run %s went below zero",
							entry->shard, WfUuidString(&entry->run_id))));
		if (before == 0 && after > 0)
			run_delta->delta[c]++;
		else if (before > 0 && after == 0)
			run_delta->delta[c]--;
	}
}

/* CompareRunDelta orders counter changes by run id, then shard. */
static int
CompareRunDelta(const void *a, const void *b)
{
	const RunDeltaEntry *x = (const RunDeltaEntry *) a;
	const RunDeltaEntry *y = (const RunDeltaEntry *) b;
	int			cmp = WfUuidCompare(&x->run_id, &y->run_id);

	if (cmp != 0)
		return cmp;
	return (int) x->shard - (int) y->shard;
}

/* CountersChange says whether a record changes any counter. */
static bool
CountersChange(const RunDeltaEntry *entry)
{
	for (int c = 0; c < WF_NUM_COUNTERS; c++)
		if (entry->delta[c] != 0)
			return true;
	return false;
}

/*
 * DeltaChanges says whether a record changes any counter or says how the
 * run's status moves.
 */
static bool
DeltaChanges(const RunDeltaEntry *entry)
{
	return CountersChange(entry) || entry->blocked != NULL ||
		entry->call != WF_CALL_STEP_CHANGE;
}

/* MergeMove adds what one record says of the run's move to another. */
static void
MergeMove(RunDeltaEntry *into, const RunDeltaEntry *from)
{
	if (from->blocked != NULL)
		into->blocked = from->blocked;
	if (from->call != WF_CALL_STEP_CHANGE)
		into->call = from->call;
}

/*
 * MergeRunDeltas sums the records of each (run, shard), sorted, into its
 * first one and moves those to the front; returns how many there are.
 */
static int
MergeRunDeltas(RunDeltaEntry *entries, int n)
{
	int			nkeys = 0;

	for (int i = 0; i < n; i++)
	{
		if (nkeys > 0 && CompareRunDelta(&entries[nkeys - 1], &entries[i]) == 0)
		{
			for (int c = 0; c < WF_NUM_COUNTERS; c++)
				entries[nkeys - 1].delta[c] += entries[i].delta[c];
			MergeMove(&entries[nkeys - 1], &entries[i]);
		}
		else
			entries[nkeys++] = entries[i];
	}
	return nkeys;
}

/*
 * ApplyRunShards writes the changes of one sharded run's shards, the
 * entries from first on that belong to its run, and sets run_delta to
 * the shards that crossed zero.  Returns the index of the next run's first
 * entry.
 */
static int
ApplyRunShards(const RunDeltaEntry *entries, int nkeys, int first,
			   RunDeltaEntry *run_delta, bool late)
{
	int			i;

	*run_delta = entries[first];
	run_delta->shard = 0;
	memset(run_delta->delta, 0, sizeof(run_delta->delta));
	run_delta->call = WF_CALL_STEP_CHANGE;
	run_delta->blocked = NULL;
	for (i = first; i < nkeys &&
		 WfUuidCompare(&entries[i].run_id, &run_delta->run_id) == 0; i++)
	{
		if (entries[i].shard == 0)
			ereport(ERROR,
					(errcode(WF_SQLSTATE_INTERNAL),
					 errmsg(WF_INTERNAL_STATE ": run %s counts steps both on its row and in shards",
							WfUuidString(&run_delta->run_id))));
		if (CountersChange(&entries[i]))
			ApplyShardDelta(&entries[i], run_delta, late);
		MergeMove(run_delta, &entries[i]);
	}
	return i;
}

/*
 * WfApplyRunDeltas writes every collected change, in ascending (run id,
 * shard) with each run row after its shards, so that two statements
 * touching the same runs never wait on each other in a cycle.  A
 * transaction that already holds such rows from an earlier call takes the
 * new ones NOWAIT (see WfHoldsLateLocks).
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
	int			nkeys;
	bool		late = WfHoldsLateLocks();

	if (n == 0)
		return;

	entries = palloc(sizeof(RunDeltaEntry) * n);
	memcpy(entries, run_deltas, sizeof(RunDeltaEntry) * n);
	WfRunDeltasReset();
	qsort(entries, n, sizeof(RunDeltaEntry), CompareRunDelta);
	nkeys = MergeRunDeltas(entries, n);

	for (int i = 0; i < nkeys;)
	{
		RunDeltaEntry run_delta;
		bool		sharded = entries[i].shard != 0;

		/* a sharded run's shards, then its run row if one crossed zero */
		if (sharded)
			i = ApplyRunShards(entries, nkeys, i, &run_delta, late);
		else
			run_delta = entries[i++];

		if (!DeltaChanges(&run_delta))
			continue;
		if (late)
		{
			Datum		values[1];

			values[0] = UUIDPGetDatum(&run_delta.run_id);
			WfExecuteNowait(&lock_plan, lock_sql, 1, lock_types, values, NULL);
		}
		ApplyRunDelta(&run_delta, sharded);
		WfNoteLateLocks();
	}
	pfree(entries);
}

/*
 * RunCounters returns a run's step counts by status group, whichever way
 * the run keeps them (summed over its counter shards while a sharded run
 * is live), from one snapshot and without locks; no row for a run the
 * caller may not see.
 */
static Datum
RunCounters(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT r.organization_id, r.steps_total,"
		" CASE WHEN x.live THEN x.active ELSE r.steps_active END,"
		" CASE WHEN x.live THEN x.waiting ELSE r.steps_waiting END,"
		" CASE WHEN x.live THEN x.blocked ELSE r.steps_blocked END,"
		" CASE WHEN x.live THEN x.succeeded ELSE r.steps_succeeded END,"
		" CASE WHEN x.live THEN x.failed ELSE r.steps_failed END,"
		" CASE WHEN x.live THEN x.canceled ELSE r.steps_canceled END"
		" FROM workflow.workflow_runs r"
		" LEFT JOIN LATERAL ("
		"  SELECT true AS live,"
		"  COALESCE(pg_catalog.sum(c.steps_active), 0)::pg_catalog.int4 AS active,"
		"  COALESCE(pg_catalog.sum(c.steps_waiting), 0)::pg_catalog.int4 AS waiting,"
		"  COALESCE(pg_catalog.sum(c.steps_blocked), 0)::pg_catalog.int4 AS blocked,"
		"  COALESCE(pg_catalog.sum(c.steps_succeeded), 0)::pg_catalog.int4 AS succeeded,"
		"  COALESCE(pg_catalog.sum(c.steps_failed), 0)::pg_catalog.int4 AS failed,"
		"  COALESCE(pg_catalog.sum(c.steps_canceled), 0)::pg_catalog.int4 AS canceled"
		"  FROM workflow.workflow_run_counters c"
		"  WHERE c.workflow_run_id" OP("=") "r.id) x"
		" ON r.counter_shards" OP(">") "0"
		" AND r.status" OP("<>") "ALL ('{SUCCEEDED,COMPLETED_WITH_ERRORS,CANCELED,RETIRED_UNRESUMABLE,"
		"COMPENSATING,COMPENSATED,COMPENSATION_FAILED}'::workflow.run_status[])"
		" WHERE r.id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[1];
	pg_uuid_t	org;
	bool		has_org;

	if (PG_ARGISNULL(0))
		wf_invalid_argument("workflow_run_id must not be null");
	values[0] = PG_GETARG_DATUM(0);
	InitMaterializedSRF(fcinfo, 0);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	WfExecute(&plan, sql, 1, types, values, NULL, true, 0);
	has_org = SPI_processed == 1 && WfResultUuid(0, 1, &org);
	if (SPI_processed == 1 && WfCallSeesOrganization(has_org ? &org : NULL))
	{
		Datum		counts[7];
		bool		nulls[7];

		/* int4 columns: passed by value, nothing to copy out */
		for (int i = 0; i < 7; i++)
			counts[i] = WfResultDatum(0, i + 2, &nulls[i]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, counts,
							 nulls);
	}
	SPI_finish();
	return (Datum) 0;
}

WF_OWNER_ENTRY(workflow_run_counters, RunCounters)
