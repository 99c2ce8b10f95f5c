/*-------------------------------------------------------------------------
 *
 * admission.c
 *	  Letting a capped run's parked steps run, and the evidence that its
 *	  execution allowance ran out.
 *
 * A job step of a run with node_execution_cap or concurrency_cap is never
 * released straight into a job: the cascade parks it (PARKED, parked_at,
 * and a row in the parking queue, workflow.parked_steps),
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
 * A job step of a run whose only cap is concurrency_cap hands its place
 * over as it finishes (WfHandOffPlaces): before the cascade and the run
 * row, the place goes to the oldest parked step, so that admission at the
 * run row only sees what is left.
 *
 * Locks: the parking queue's rows, after the run row (admission) or
 * before the dependents and the run row (a hand-off), taken SKIP LOCKED,
 * so never waited for; then the steps of the rows taken, which only the
 * taker changes.  The other paths that end parked steps (cancel_run,
 * compensate_run, the deadline sweep) hold the run's release lock
 * exclusive, which every admitting transaction holds shared.  A row that
 * another transaction holds (its hand-off, or a transaction outside the
 * engine) is skipped: its step waits for the run's next completion.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "workflow.h"

static int32 Room(const WfRunRoom *room);
static uint64 RunParkedStatement(void *arg);
static int32 StartOldestParked(WfDueStatement *st, const pg_uuid_t *run_id,
							   int32 n);
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

/*
 * The oldest rows of run $1 in the parking queue, at most limit of them,
 * taken: locked SKIP LOCKED and deleted; then their steps' start: ENQUEUED
 * with a new job id, and step_released when $3 says the history records
 * steps.  A row another transaction took and committed
 * is gone, not a newer version, so skipping it leaves no lock behind.
 * The rows are deleted by the addresses the scan locked (rows of the queue
 * are never updated, and nobody can delete one this statement holds), and
 * their steps found by id, each from an array: the limit is no constant to
 * the planner, which took it for a tenth of the queue and joined the rows
 * to the run's whole queue by hashing it, for every step it let run.
 */
#define PARKED_TAKE(limit) \
	"WITH p AS (SELECT q.ctid AS tid" \
	" FROM workflow.parked_steps q WHERE q.workflow_run_id" OP("=") "$1" \
	" ORDER BY q.parked_at, q.workflow_step_id LIMIT " limit \
	" FOR UPDATE SKIP LOCKED)," \
	" d AS (DELETE FROM workflow.parked_steps q" \
	" WHERE q.ctid" OP("=") "ANY (ARRAY(SELECT p.tid FROM p))" \
	" RETURNING q.workflow_step_id)," \
	" u AS (UPDATE workflow.workflow_steps s SET" \
	" status = 'ENQUEUED', job_id = workflow.uuid_v7(), parked_at = NULL," \
	" history_gap = s.history_gap OR NOT $3," \
	" updated_at = pg_catalog.statement_timestamp()" \
	" WHERE s.id" OP("=") "ANY (ARRAY(SELECT d.workflow_step_id FROM d))" \
	" AND s.status" OP("=") "'PARKED'::workflow.step_status RETURNING s.*)," \
	" e AS (" WF_INSERT_EVENTS \
	" SELECT u.workflow_run_id, u.step_key, 'step_released'," \
	"  pg_catalog.jsonb_build_object('job_id', u.job_id)" \
	"  FROM u WHERE $3)"

/*
 * Admission at the run row: the steps, their jobs, and their move from
 * parked to active, and their executions, written to the run row.
 */
static WfDueStatement start_parked = {
	PARKED_TAKE("$2") ","
	" n AS (SELECT pg_catalog.count(*)::pg_catalog.int4 AS n FROM u),"
	" r AS (UPDATE workflow.workflow_runs SET"
	" steps_active = steps_active" OP("+") "n.n,"
	" steps_parked = steps_parked" OP("-") "n.n,"
	" executions_used = executions_used" OP("+") "n.n"
	" FROM n WHERE id" OP("=") "$1) "
	WF_STEP_JOBS_INSERT " FROM u AS s"};

/*
 * A hand-off: the steps and their jobs, for a live run whose only cap is
 * concurrency_cap, as many as the $2 places freed and the room allow; the
 * caller adds their counts to the run's delta.  The run row, read without
 * a lock, still counts the finished steps active (this transaction has not
 * written it yet), so the room is the cap less the other active steps: a
 * sleeping step holds its place, and a step another transaction is letting
 * run counts once that transaction commits (it took its own room at the
 * run row, counting these steps active, or freed a place of its own).
 */
static WfDueStatement hand_off = {
	PARKED_TAKE("(SELECT COALESCE(pg_catalog.max(GREATEST(0, LEAST($2,"
				" r.concurrency_cap" OP("-") "(r.steps_active" OP("-") "$2)))), 0)"
				" FROM workflow.workflow_runs r"
				" WHERE r.id" OP("=") "$1 AND r.node_execution_cap IS NULL"
				" AND r.concurrency_cap IS NOT NULL"
				" AND r.status" OP("=") "ANY ('{RUNNING,WAITING_FOR_EXTERNAL,"
				"WAITING_FOR_ALLOWANCE}'::workflow.run_status[]))")
	" " WF_STEP_JOBS_INSERT " FROM u AS s"};

/* what a statement on the parking queue is run with */
typedef struct ParkedCall
{
	WfDueStatement *st;
	Datum		values[3];
} ParkedCall;

/*
 * RunParkedStatement runs a statement on the parking queue, which may
 * leave jobs due (notify.c); returns how many jobs it made.
 */
static uint64
RunParkedStatement(void *arg)
{
	static const Oid types[3] = {UUIDOID, INT4OID, BOOLOID};
	ParkedCall *call = (ParkedCall *) arg;

	return WfExecuteDue(call->st, 3, types, call->values, NULL);
}

/*
 * StartOldestParked lets run up to n of the run's parked steps, oldest
 * first, each with step_released and its job, by the given statement, as
 * the engine; returns how many it let run.
 */
static int32
StartOldestParked(WfDueStatement *st, const pg_uuid_t *run_id, int32 n)
{
	ParkedCall	call;

	call.st = st;
	call.values[0] = UUIDPGetDatum(run_id);
	call.values[1] = Int32GetDatum(n);
	call.values[2] = BoolGetDatum(WfHistoryRecordsSteps());
	return (int32) WfRunAsEngine(RunParkedStatement, &call);
}

/*
 * StartParked lets run up to n of the run's parked steps, oldest first,
 * and writes their move from parked to active, and their executions, to
 * the run row the caller holds; all in one statement, in a section every
 * completion of the run waits for.  Returns how many it let run.
 */
static int32
StartParked(const pg_uuid_t *run_id, int32 n)
{
	return StartOldestParked(&start_parked, run_id, n);
}

/*
 * WfHandOffPlaces lets up to n of the run's parked steps run in the places
 * that n of its job steps, finished in this transaction, free: the end of
 * the statement calls it before the cascade locks any dependent and before
 * the run row, so that a capped run's completions, which that row
 * serializes, hold it no longer than an uncapped run's hold their join.
 * Until this transaction commits, the run row still counts the finished
 * steps active, so no other transaction can give their places away, and
 * the cap holds without the row.  Only for a live run whose only cap is
 * concurrency_cap: an execution under node_execution_cap is judged at the
 * run row (WfAdmitParked).  The caller adds the moves to the run's counter
 * delta.  Returns how many steps it let run.
 */
int32
WfHandOffPlaces(const pg_uuid_t *run_id, int32 n)
{
	return StartOldestParked(&hand_off, run_id, n);
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
