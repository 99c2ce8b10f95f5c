/*-------------------------------------------------------------------------
 *
 * admission.c
 *	  Letting a capped run's parked steps run, and the evidence that its
 *	  execution allowance ran out.
 *
 * A job step of a run with node_execution_cap or concurrency_cap is never
 * released straight into a job: the cascade parks it (PARKED, parked_at),
 * and the run's counter update (status.c) calls WfAdmitParked while it
 * holds the run row.  That row is the admission point: every change of a
 * capped run's active steps or executions passes through it, so two
 * transactions that both free room are serialized there, and the one that
 * comes second sees what the first admitted.  Admission takes the oldest
 * parked steps, (parked_at, id), that fit under both caps, gives each its
 * job, and writes the run's counters again.  When work is left parked
 * because the executions reached node_execution_cap, it records
 * execution_allowance_exhausted, once per cap value.
 *
 * Locks: the parked step rows, after the run row, against the lock
 * order; SKIP LOCKED, so never waited for.  The other paths that lock
 * parked steps (cancel_run, compensate_run, the deadline sweep,
 * increase_execution_allowance) hold the run's release lock exclusive,
 * which every admitting transaction holds shared, so only an outside
 * transaction that locked the rows by hand is skipped: its step waits for
 * the next admission.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "workflow.h"

static int32 Room(const WfRunRoom *room);
static uint64 RunStartParked(void *arg);
static int32 StartParked(const pg_uuid_t *run_id, int32 n);
static bool Exhausted(const WfRunRoom *room);
static void WriteExhaustedCap(const pg_uuid_t *run_id, int32 exhausted_cap);

/* Room is how many more steps the run's caps let run now. */
static int32
Room(const WfRunRoom *room)
{
	int32		n = room->parked;

	if (room->concurrency_cap > 0)
		n = Min(n, room->concurrency_cap - room->active);
	if (room->node_execution_cap > 0)
		n = Min(n, room->node_execution_cap - room->executions);
	return Max(n, 0);
}

/* what StartParked's statement is run with */
typedef struct StartParkedCall
{
	Datum		values[3];
} StartParkedCall;

/*
 * RunStartParked runs StartParked's statement, which may leave jobs due
 * (notify.c); returns how many jobs it made.
 */
static uint64
RunStartParked(void *arg)
{
	/*
	 * The oldest parked steps, as many as fit, locked SKIP LOCKED: against
	 * the lock order (after the run row), so they are never waited for;
	 * only a transaction outside the engine could hold one (every path of
	 * the engine that locks parked steps holds the run's release lock
	 * exclusive, which an admitting call excludes), and that step waits
	 * for the next admission.
	 */
	static WfDueStatement st = {
		"WITH p AS (SELECT x.id FROM workflow.workflow_steps x"
		" WHERE x.workflow_run_id" OP("=") "$1 AND x.parked_at IS NOT NULL"
		" AND x.status" OP("=") "'PARKED'::workflow.step_status"
		" ORDER BY x.parked_at, x.id LIMIT $2"
		" FOR NO KEY UPDATE SKIP LOCKED),"
		" u AS (UPDATE workflow.workflow_steps s SET"
		" status = 'ENQUEUED', job_id = workflow.uuid_v7(), parked_at = NULL,"
		" history_gap = s.history_gap OR NOT $3,"
		" updated_at = pg_catalog.statement_timestamp()"
		" FROM p WHERE s.id" OP("=") "p.id RETURNING s.*),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'step_released',"
		"  pg_catalog.jsonb_build_object('job_id', u.job_id)"
		"  FROM u WHERE $3),"
		" n AS (SELECT pg_catalog.count(*)::pg_catalog.int4 AS n FROM u),"
		" r AS (UPDATE workflow.workflow_runs SET"
		" steps_active = steps_active" OP("+") "n.n,"
		" steps_parked = steps_parked" OP("-") "n.n,"
		" executions_used = executions_used" OP("+") "n.n"
		" FROM n WHERE id" OP("=") "$1) "
		WF_STEP_JOBS_INSERT " FROM u AS s"};
	static const Oid types[3] = {UUIDOID, INT4OID, BOOLOID};
	StartParkedCall *call = (StartParkedCall *) arg;

	return WfExecuteDue(&st, 3, types, call->values, NULL);
}

/*
 * StartParked lets run up to n of the run's parked steps, oldest first:
 * ENQUEUED, each with a new job id, step_released and its job, and their
 * move from parked to active, and their executions, written to the run
 * row the caller holds; all in one statement, in a section every
 * completion of the run waits for.  Returns how many it let run.
 */
static int32
StartParked(const pg_uuid_t *run_id, int32 n)
{
	StartParkedCall call;

	call.values[0] = UUIDPGetDatum(run_id);
	call.values[1] = Int32GetDatum(n);
	call.values[2] = BoolGetDatum(WfHistoryRecordsSteps());
	return (int32) WfRunAsEngine(RunStartParked, &call);
}

/*
 * Exhausted says whether work is left waiting only for executions at a
 * cap whose exhaustion is not on record yet.
 */
static bool
Exhausted(const WfRunRoom *room)
{
	return room->parked > 0 && room->node_execution_cap > 0 &&
		room->executions >= room->node_execution_cap &&
		room->exhausted_cap != room->node_execution_cap;
}

/*
 * WfRecordAllowanceExhausted writes the evidence that the run's work
 * waits for executions beyond cap.
 */
void
WfRecordAllowanceExhausted(const pg_uuid_t *run_id, int32 cap)
{
	StringInfoData detail;

	WfDetailBegin(&detail);
	WfDetailInt(&detail, "version", 1);
	WfDetailInt(&detail, "cap", cap);
	appendStringInfoString(&detail, ", \"additional_work_admitted\": false");
	WfRecordEvidence(run_id, "execution_allowance_exhausted",
					 WfDetailEnd(&detail));
}

/*
 * WriteExhaustedCap writes to the run row, which the caller holds, the cap
 * whose exhaustion is now on record, when no step was let run (StartParked
 * writes it with theirs otherwise).
 */
static void
WriteExhaustedCap(const pg_uuid_t *run_id, int32 exhausted_cap)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_runs SET allowance_exhausted_cap = $2"
		" WHERE id" OP("=") "$1";
	static const Oid types[2] = {UUIDOID, INT4OID};
	Datum		values[2];

	values[0] = UUIDPGetDatum(run_id);
	values[1] = Int32GetDatum(exhausted_cap);
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
}

/*
 * WfAdmitParked lets run as many of the run's parked steps as its caps
 * now allow, oldest first, and records an exhausted allowance.  The caller
 * holds the run row, whose counters are in room; room is updated.
 * Returns how many steps it let run.
 */
int32
WfAdmitParked(const pg_uuid_t *run_id, WfRunRoom *room)
{
	int32		want = Room(room);
	int32		admitted = want > 0 ? StartParked(run_id, want) : 0;

	room->active += admitted;
	room->parked -= admitted;
	room->executions += admitted;
	if (Exhausted(room))
	{
		WfRecordAllowanceExhausted(run_id, room->node_execution_cap);
		room->exhausted_cap = room->node_execution_cap;
		WriteExhaustedCap(run_id, room->exhausted_cap);
	}
	return admitted;
}
