/*-------------------------------------------------------------------------
 *
 * waits.c
 *	  The start of a sleep or an event wait: what a released sleep or event
 *	  step does at once.
 *
 * A released sleep step is SLEEPING with a wake time; one whose wake time
 * is already past is woken here, SUCCEEDED.  A released event step is
 * WAITING_FOR_EXTERNAL; if an event of its name was sent to its run
 * before, it consumes the oldest such event here and SUCCEEDS with the
 * event's payload.  The steps these settle are returned; the caller (the
 * cascade, or start_run) moves their counters and cascades them.  Each
 * statement also writes the step's event (history.c).
 *
 * Locks: the caller holds the steps' rows and their runs' release locks.
 * The oldest event is locked NOWAIT before it is consumed: two steps of
 * one name released at once by two transactions never take the same
 * event, and the second never waits for the first (which may be about to
 * wait for one of its dependents): it gets workflow.release_conflict.  An event sent by a
 * send_event that is still in flight is not seen here; that call locks
 * the live event steps of its name first, so either it waits for our step
 * row and finds the step waiting, or we wait for it and find its event
 * (events.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "workflow.h"

/*
 * WfReadSettledStep reads row of the last SPI result, whose first columns
 * are a step's id, run id and counter shard, into *step: the step left
 * counter from, and succeeded (else FAILED).
 */
void
WfReadSettledStep(uint64 row, WfCounter from, bool succeeded,
				  WfSettledStep *step)
{
	WfResultUuid(row, 1, &step->step_id);
	WfResultUuid(row, 2, &step->run_id);
	step->shard = (int16) WfResultInt32(row, 3);
	step->from = from;
	step->succeeded = succeeded;
}

/*
 * WfWakeDueSleeps wakes those of the given SLEEPING steps whose wake time
 * is past: SUCCEEDED, with their step_woken events.  Fills settled and
 * returns how many.
 */
int
WfWakeDueSleeps(const pg_uuid_t *ids, int n, WfSettledStep *settled)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET"
		" status = 'SUCCEEDED', wake_at = NULL,"
		" finished_at = pg_catalog.statement_timestamp(),"
		" history_gap = s.history_gap OR NOT $2,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.id" OP("=") "ANY ($1)"
		" AND s.status::pg_catalog.text" OP("=") "'SLEEPING'"
		" AND s.wake_at" OP("<=") "pg_catalog.statement_timestamp()"
		" RETURNING s.id, s.workflow_run_id, s.counter_shard, s.step_key,"
		"  s.sleep_until, s.sleep_seconds, s.released_at),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'step_woken',"
		"  pg_catalog.jsonb_build_object('wake_at', COALESCE(u.sleep_until,"
		"   u.released_at" OP("+") "pg_catalog.make_interval(secs => u.sleep_seconds)))"
		"  FROM u WHERE $2)"
		" SELECT u.id, u.workflow_run_id, u.counter_shard::pg_catalog.int4 FROM u";
	static const Oid types[2] = {UUIDARRAYOID, BOOLOID};
	Datum	   *ids_d = palloc(sizeof(Datum) * Max(n, 1));
	Datum		values[2];
	uint64		nwoken;

	for (int i = 0; i < n; i++)
		ids_d[i] = UUIDPGetDatum(&ids[i]);
	values[0] = WfArray(ids_d, NULL, n, UUIDOID);
	values[1] = BoolGetDatum(WfHistoryRecordsSteps());
	WfExecuteAsEngine(&plan, sql, 2, types, values, NULL);
	nwoken = SPI_processed;
	for (uint64 i = 0; i < nwoken; i++)
		WfReadSettledStep(i, WF_COUNT_ACTIVE, true, &settled[i]);
	pfree(ids_d);
	return (int) nwoken;
}

/*
 * The statement that lets a waiting event step (the step $1) consume an
 * event, chosen by the query EV (its id and payload): the step SUCCEEDS
 * with the event's payload, the event is marked consumed by it, and
 * event_consumed is recorded ($2: whether step events are).
 */
#define CONSUME_EVENT_SQL(EV) \
	"WITH w AS (SELECT s.id, s.workflow_run_id, s.event_name, s.step_key" \
	"  FROM workflow.workflow_steps s WHERE s.id" OP("=") "$1" \
	"  AND s.status" OP("=") "'WAITING_FOR_EXTERNAL')," \
	" ev AS (" EV ")," \
	" c AS (UPDATE workflow.event_inbox i SET" \
	"  consumed_at = pg_catalog.statement_timestamp()," \
	"  consumed_by_step_key = w.step_key" \
	"  FROM ev, w WHERE i.id" OP("=") "ev.id" \
	"  RETURNING i.id, i.payload, i.event_name)," \
	" u AS (UPDATE workflow.workflow_steps s SET status = 'SUCCEEDED'," \
	"  output = c.payload, wake_at = NULL," \
	"  finished_at = pg_catalog.statement_timestamp()," \
	"  history_gap = s.history_gap OR NOT $2," \
	"  updated_at = pg_catalog.statement_timestamp()" \
	"  FROM c WHERE s.id" OP("=") "$1" \
	"  RETURNING s.id, s.workflow_run_id, s.counter_shard, s.step_key," \
	"  c.id AS event_id, c.event_name)," \
	" e AS (" WF_INSERT_EVENTS \
	" SELECT u.workflow_run_id, u.step_key, 'event_consumed'," \
	"  pg_catalog.jsonb_build_object('event_id', u.event_id," \
	"  'event_name', u.event_name)" \
	"  FROM u WHERE $2)" \
	" SELECT u.id, u.workflow_run_id, u.counter_shard::pg_catalog.int4 FROM u"

/*
 * LockOldestEvent locks the oldest unconsumed event of the step's name sent
 * to its run, NOWAIT, and returns whether there is one.  Only another
 * release of an event step of that name can hold it, to consume it; we
 * must not wait for that transaction, which may go on to wait for a
 * dependent we hold: workflow.release_conflict, and the retry finds the
 * event consumed, or free again.
 */
static bool
LockOldestEvent(const pg_uuid_t *step_id, pg_uuid_t *event_id)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT i.id FROM workflow.event_inbox i"
		" JOIN workflow.workflow_steps s"
		"  ON i.workflow_run_id" OP("=") "s.workflow_run_id"
		"  AND i.event_name" OP("=") "s.event_name"
		" WHERE s.id" OP("=") "$1 AND i.consumed_at IS NULL"
		" ORDER BY i.id LIMIT 1 FOR UPDATE OF i NOWAIT";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = UUIDPGetDatum(step_id);
	WfExecuteNowait(&plan, sql, 1, types, values, NULL);
	return SPI_processed == 1 && WfResultUuid(0, 1, event_id);
}

/*
 * WfConsumeEvent lets a waiting event step consume an event: the event
 * given (one send_event just stored), or with event_id NULL the oldest
 * unconsumed event of its name sent to its run.  Returns whether the step
 * consumed one, and then fills settled.
 */
bool
WfConsumeEvent(const pg_uuid_t *step_id, const pg_uuid_t *event_id,
			   WfSettledStep *settled)
{
	static SPIPlanPtr plan = NULL;
	/*
	 * The run and name in the lookup keep the partial index of unconsumed
	 * events on its leading columns, should the planner take it rather
	 * than the primary key (as it does when statistics say the inbox holds
	 * few unconsumed events).
	 */
	static const char *sql = CONSUME_EVENT_SQL(
		"SELECT i.id, i.payload FROM workflow.event_inbox i, w"
		"  WHERE i.id" OP("=") "$3"
		"  AND i.workflow_run_id" OP("=") "w.workflow_run_id"
		"  AND i.event_name" OP("=") "w.event_name"
		"  AND i.consumed_at IS NULL");
	static const Oid types[3] = {UUIDOID, BOOLOID, UUIDOID};
	Datum		values[3];
	pg_uuid_t	oldest;

	if (event_id == NULL)
	{
		if (!LockOldestEvent(step_id, &oldest))
			return false;
		event_id = &oldest;
	}
	values[0] = UUIDPGetDatum(step_id);
	values[1] = BoolGetDatum(WfHistoryRecordsSteps());
	values[2] = UUIDPGetDatum(event_id);
	WfExecuteAsEngine(&plan, sql, 3, types, values, NULL);
	if (SPI_processed == 0)
		return false;
	WfReadSettledStep(0, WF_COUNT_WAITING, true, settled);
	return true;
}

/*
 * WfConsumeSentEvents lets each of the given just released event steps,
 * in the order given (ascending id: they were released together), consume
 * an event already sent.  Fills settled and returns how many did.
 */
int
WfConsumeSentEvents(const pg_uuid_t *ids, int n, WfSettledStep *settled)
{
	int			nsettled = 0;

	for (int i = 0; i < n; i++)
		if (WfConsumeEvent(&ids[i], NULL, &settled[nsettled]))
			nsettled++;
	return nsettled;
}
