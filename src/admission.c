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
 * A job step of a run whose only cap is concurrency_cap hands its place
 * over as it finishes (WfHandOffPlaces): before the cascade and the run
 * row, the place goes to the oldest parked step, so that admission at the
 * run row only sees what is left.  A hand-off runs in a subtransaction,
 * rolled back when it may have locked a step another transaction started
 * meanwhile (LockHandOffCandidates says why).
 *
 * Locks: the parked step rows, after the run row (admission) or before
 * the dependents and the run row (a hand-off), against the lock order;
 * SKIP LOCKED, so never waited for.  The other paths that lock
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
static uint64 RunParkedStatement(void *arg);
static int	LockHandOffCandidates(const pg_uuid_t *run_id, int32 n, Datum *locked,
								  Datum *suspect, int *nsuspect);
static bool SuspectsStarted(Datum *suspect, int nsuspect);
static int	HandOffAction(Datum *chosen, int nchosen);
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
 * The oldest parked steps of run $1, at most $2, locked SKIP LOCKED; then,
 * for any set p of locked parked steps, their start: ENQUEUED with a new
 * job id, and step_released when the history parameter says the history
 * records steps.
 */
/* the candidates a hand-off reads beyond the places it gives */
#define HAND_OFF_SLACK 8

#define PARKED_OLDEST \
	"WITH p AS (SELECT x.id FROM workflow.workflow_steps x" \
	" WHERE x.workflow_run_id" OP("=") "$1 AND x.parked_at IS NOT NULL" \
	" AND x.status" OP("=") "'PARKED'::workflow.step_status" \
	" ORDER BY x.parked_at, x.id LIMIT $2" \
	" FOR NO KEY UPDATE SKIP LOCKED),"
#define PARKED_START(history) \
	" u AS (UPDATE workflow.workflow_steps s SET" \
	" status = 'ENQUEUED', job_id = workflow.uuid_v7(), parked_at = NULL," \
	" history_gap = s.history_gap OR NOT " history "," \
	" updated_at = pg_catalog.statement_timestamp()" \
	" FROM p WHERE s.id" OP("=") "p.id RETURNING s.*)," \
	" e AS (" WF_INSERT_EVENTS \
	" SELECT u.workflow_run_id, u.step_key, 'step_released'," \
	"  pg_catalog.jsonb_build_object('job_id', u.job_id)" \
	"  FROM u WHERE " history ")"

/*
 * Admission at the run row: the steps, their jobs, and their move from
 * parked to active, and their executions, written to the run row.
 */
static WfDueStatement start_parked = {
	PARKED_OLDEST PARKED_START("$3") ","
	" n AS (SELECT pg_catalog.count(*)::pg_catalog.int4 AS n FROM u),"
	" r AS (UPDATE workflow.workflow_runs SET"
	" steps_active = steps_active" OP("+") "n.n,"
	" steps_parked = steps_parked" OP("-") "n.n,"
	" executions_used = executions_used" OP("+") "n.n"
	" FROM n WHERE id" OP("=") "$1) "
	WF_STEP_JOBS_INSERT " FROM u AS s"};

/*
 * A hand-off's start of the parked steps it locked ($1); the caller adds
 * their counts to the run's delta.
 */
static WfDueStatement hand_off_start = {
	"WITH p AS (SELECT pg_catalog.unnest($1::pg_catalog.uuid[]) AS id),"
	PARKED_START("$2") " "
	WF_STEP_JOBS_INSERT " FROM u AS s"};

/* what a statement that starts parked steps is run with */
typedef struct ParkedCall
{
	WfDueStatement *st;
	int			nargs;
	const Oid  *types;
	Datum		values[3];
} ParkedCall;

/*
 * RunParkedStatement runs a statement that starts parked steps, which may
 * leave jobs due (notify.c); returns how many jobs it made.
 */
static uint64
RunParkedStatement(void *arg)
{
	ParkedCall *call = (ParkedCall *) arg;

	return WfExecuteDue(call->st, call->nargs, call->types, call->values,
						NULL);
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
	static const Oid types[3] = {UUIDOID, INT4OID, BOOLOID};
	ParkedCall	call;

	call.st = &start_parked;
	call.nargs = 3;
	call.types = types;
	call.values[0] = UUIDPGetDatum(run_id);
	call.values[1] = Int32GetDatum(n);
	call.values[2] = BoolGetDatum(WfHistoryRecordsSteps());
	return (int32) WfRunAsEngine(RunParkedStatement, &call);
}

/*
 * LockHandOffCandidates locks, SKIP LOCKED, up to n of the oldest parked
 * steps of a live run whose only cap is concurrency_cap, from a few more
 * candidates read first, into locked; and puts into suspect the candidates
 * it passed over before its last lock (all it passed over, when it locked
 * fewer than n).  Returns how many it locked.
 *
 * A candidate passed over was locked by another transaction, or was
 * started by one that committed after this statement's snapshot: then
 * PostgreSQL locked its newest version before finding it no longer parked,
 * and that lock stays until the end of the transaction.  A claim of the
 * started step's job would wait for that lock, while this transaction goes
 * on to wait for the run row, which the claiming transaction may hold
 * (complete_and_claim): a deadlock.  The caller checks the suspects.
 */
static int
LockHandOffCandidates(const pg_uuid_t *run_id, int32 n, Datum *locked,
					  Datum *suspect, int *nsuspect)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH c AS (SELECT x.id, x.parked_at FROM workflow.workflow_steps x"
		" WHERE x.workflow_run_id" OP("=") "$1 AND x.parked_at IS NOT NULL"
		" AND x.status" OP("=") "'PARKED'::workflow.step_status"
		" AND EXISTS (SELECT FROM workflow.workflow_runs r"
		"  WHERE r.id" OP("=") "$1 AND r.node_execution_cap IS NULL"
		"  AND r.concurrency_cap IS NOT NULL"
		"  AND r.status::pg_catalog.text" OP("=") "ANY ('{RUNNING,"
		"WAITING_FOR_EXTERNAL,WAITING_FOR_ALLOWANCE}'::pg_catalog.text[]))"
		" ORDER BY x.parked_at, x.id LIMIT $2" OP("+") CppAsString2(HAND_OFF_SLACK) "),"
		" p AS (SELECT s.id FROM workflow.workflow_steps s"
		" WHERE s.id" OP("=") "ANY (ARRAY(SELECT c.id FROM c))"
		" AND s.status" OP("=") "'PARKED'::workflow.step_status"
		" ORDER BY s.parked_at, s.id LIMIT $2"
		" FOR NO KEY UPDATE SKIP LOCKED)"
		" SELECT c.id, EXISTS (SELECT FROM p WHERE p.id" OP("=") "c.id)"
		" FROM c ORDER BY c.parked_at, c.id";
	static const Oid types[2] = {UUIDOID, INT4OID};
	Datum		values[2];
	int			nlocked = 0;
	int			npassed = 0;

	values[0] = UUIDPGetDatum(run_id);
	values[1] = Int32GetDatum(n);
	WfExecuteAsEngine(&plan, sql, 2, types, values, NULL);
	*nsuspect = 0;
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));

		WfResultUuid(r, 1, id);
		if (WfResultBool(r, 2))
		{
			locked[nlocked++] = UUIDPGetDatum(id);
			*nsuspect = npassed;	/* those passed over before this lock */
		}
		else
			suspect[npassed++] = UUIDPGetDatum(id);
	}
	if (nlocked < n)
		*nsuspect = npassed;
	return nlocked;
}

/*
 * SuspectsStarted says whether a candidate the hand-off passed over is no
 * longer parked, read with a snapshot taken after the hand-off's locks:
 * the hand-off may hold that candidate's newest version locked.
 */
static bool
SuspectsStarted(Datum *suspect, int nsuspect)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT pg_catalog.count(*)::pg_catalog.int4"
		" FROM workflow.workflow_steps s WHERE s.id" OP("=") "ANY ($1)"
		" AND s.status" OP("<>") "'PARKED'::workflow.step_status";
	static const Oid types[1] = {UUIDARRAYOID};
	Datum		values[1];

	values[0] = WfArray(suspect, NULL, nsuspect, UUIDOID);
	WfExecute(&plan, sql, 1, types, values, NULL, true, 0);
	return WfResultInt32(0, 1) > 0;
}

/*
 * HandOffAction is a hand-off's subtransaction (chosen: the run and the
 * places): it locks candidates, gives up with workflow.release_conflict,
 * which takes the subtransaction and its locks back, when it may hold a
 * started step's lock, and starts the steps it locked.
 */
static int
HandOffAction(Datum *chosen, int nchosen)
{
	static const Oid types[2] = {UUIDARRAYOID, BOOLOID};
	const pg_uuid_t *run_id = DatumGetUUIDP(chosen[0]);
	int32		n = DatumGetInt32(chosen[1]);
	Datum	   *locked = palloc(sizeof(Datum) * n);
	Datum	   *suspect = palloc(sizeof(Datum) * (n + HAND_OFF_SLACK));
	int			nsuspect;
	int			nlocked;
	ParkedCall	call;

	Assert(nchosen == 2);
	nlocked = LockHandOffCandidates(run_id, n, locked, suspect, &nsuspect);
	if (nsuspect > 0 && SuspectsStarted(suspect, nsuspect))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_RETRY),
				 errmsg(WF_RELEASE_CONFLICT ": a parked step was started meanwhile")));
	if (nlocked == 0)
		return 0;
	call.st = &hand_off_start;
	call.nargs = 2;
	call.types = types;
	call.values[0] = WfArray(locked, NULL, nlocked, UUIDOID);
	call.values[1] = BoolGetDatum(WfHistoryRecordsSteps());
	return (int) WfRunAsEngine(RunParkedStatement, &call);
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
 * run row (WfAdmitParked).  In a subtransaction: when it may hold the lock
 * of a step that another transaction started meanwhile (HandOffAction), it
 * takes everything back and hands nothing over; the places then go to the
 * parked steps at the run row, as they would without a hand-off.  The
 * caller adds the moves to the run's counter delta.  Returns how many
 * steps it let run.
 */
int32
WfHandOffPlaces(const pg_uuid_t *run_id, int32 n)
{
	Datum		chosen[2];
	int			started;

	chosen[0] = UUIDPGetDatum(run_id);
	chosen[1] = Int32GetDatum(n);
	started = WfTryInSubtransaction(HandOffAction, chosen, 2);
	return Max(started, 0);
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
