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
 * order; NOWAIT, so a holder turns into workflow.release_conflict.  The
 * other paths that lock parked steps (cancel_run, compensate_run,
 * increase_execution_allowance) hold the run's release lock exclusive,
 * which every admitting transaction holds shared, so this waits only on
 * an outside transaction that locked the rows by hand.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "workflow.h"

static int32 Room(const WfRunRoom *room);
static int	LockOldestParked(const pg_uuid_t *run_id, int32 n,
							 pg_uuid_t **ids);
static void StartParked(const pg_uuid_t *run_id, pg_uuid_t *ids, int n,
						int32 exhausted_cap);
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
 * LockOldestParked locks up to n of the run's parked steps, oldest first,
 * NOWAIT; returns how many, with their ids.
 */
static int
LockOldestParked(const pg_uuid_t *run_id, int32 n, pg_uuid_t **ids)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT s.id FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1 AND s.parked_at IS NOT NULL"
		" AND s.status" OP("=") "'PARKED'::workflow.step_status"
		" ORDER BY s.parked_at, s.id LIMIT $2"
		" FOR NO KEY UPDATE NOWAIT";
	static const Oid types[2] = {UUIDOID, INT4OID};
	Datum		values[2];
	int			nlocked;

	values[0] = UUIDPGetDatum(run_id);
	values[1] = Int32GetDatum(n);
	WfExecuteNowait(&plan, sql, 2, types, values, NULL);
	nlocked = (int) SPI_processed;
	*ids = palloc(sizeof(pg_uuid_t) * Max(nlocked, 1));
	for (int i = 0; i < nlocked; i++)
		WfResultUuid(i, 1, &(*ids)[i]);
	return nlocked;
}

/*
 * StartParked moves parked steps the caller holds to ENQUEUED, each with a
 * new job id and step_released, writes their move to the run row the
 * caller holds (with the cap whose exhaustion is on record) in the same
 * statement, and creates their jobs: two statements, however many steps,
 * in a section every completion of the run waits for.
 */
static void
StartParked(const pg_uuid_t *run_id, pg_uuid_t *ids, int n,
			int32 exhausted_cap)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET"
		" status = 'ENQUEUED', job_id = workflow.uuid_v7(), parked_at = NULL,"
		" history_gap = s.history_gap OR NOT $2,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.id" OP("=") "ANY ($1)"
		" RETURNING s.workflow_run_id, s.step_key, s.job_id),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'step_released',"
		"  pg_catalog.jsonb_build_object('job_id', u.job_id)"
		"  FROM u WHERE $2),"
		" r AS (UPDATE workflow.workflow_runs SET"
		" steps_active = steps_active" OP("+") "$4,"
		" steps_parked = steps_parked" OP("-") "$4,"
		" executions_used = executions_used" OP("+") "$4,"
		" allowance_exhausted_cap = $5"
		" WHERE id" OP("=") "$3)"
		" SELECT 1 FROM u";
	static const Oid types[5] = {UUIDARRAYOID, BOOLOID, UUIDOID, INT4OID,
	INT4OID};
	Datum	   *ids_d = palloc(sizeof(Datum) * n);
	Datum		values[5];
	char		nulls[5] = "     ";

	for (int i = 0; i < n; i++)
		ids_d[i] = UUIDPGetDatum(&ids[i]);
	values[0] = WfArray(ids_d, NULL, n, UUIDOID);
	values[1] = BoolGetDatum(WfHistoryRecordsSteps());
	values[2] = UUIDPGetDatum(run_id);
	values[3] = Int32GetDatum(n);
	values[4] = Int32GetDatum(exhausted_cap);
	nulls[4] = exhausted_cap == 0 ? 'n' : ' ';
	if (WfExecuteAsEngine(&plan, sql, 5, types, values, nulls) != SPI_OK_SELECT ||
		SPI_processed != (uint64) n)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": parked steps changed while locked")));
	WfInsertStepJobs(ids, n);
	pfree(ids_d);
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
	bool		exhausted;
	pg_uuid_t  *ids = NULL;

	if (want > 0 &&
		LockOldestParked(run_id, want, &ids) != want)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": run %s counts %d parked steps but has fewer",
						WfUuidString(run_id), room->parked)));
	room->active += want;
	room->parked -= want;
	room->executions += want;
	exhausted = Exhausted(room);
	if (exhausted)
	{
		WfRecordAllowanceExhausted(run_id, room->node_execution_cap);
		room->exhausted_cap = room->node_execution_cap;
	}
	if (want > 0)
		StartParked(run_id, ids, want, room->exhausted_cap);
	else if (exhausted)
		WriteExhaustedCap(run_id, room->exhausted_cap);
	return want;
}
