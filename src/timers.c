/*-------------------------------------------------------------------------
 *
 * timers.c
 *	  fire_timers: the sweep that ends runs past their deadline
 *	  (deadlines.c), wakes sleeping steps and times out event waits.
 *
 * A step's timer is its wake_at: set when a sleep step starts to sleep or
 * an event step with a timeout starts to wait, cleared when it fires or
 * the step is canceled.  Nothing else looks at timers, so a claim never
 * pays for them; fire_timers must be called regularly, and a timer fires
 * at most one sweep interval late.
 *
 * Like reap_expired, a call reads a page of due timers, oldest first,
 * without locking them; tries each run's release lock, shared, once, in
 * ascending run id, and skips busy runs; then locks only the steps it
 * fires, SKIP LOCKED and with the due time and status re-checked, so a
 * send_event or cancel_run that got the step first wins.  It never waits
 * for a timer.  The fired steps count as rows it holds, so its cascade
 * takes dependents below them NOWAIT; a page whose cascade conflicts so
 * is rolled back (a subtransaction) and fired again run by run, each run
 * in a subtransaction of its own, skipping the runs that conflict: a run
 * whose dependent another transaction holds delays only its own timers.
 * The steps it fires are cascaded like any other (cascade.c): a woken
 * sleep SUCCEEDED, a timed-out event wait FAILED with
 * workflow.event_timeout.
 *
 * Locks, in order: the runs' release locks (tried), the steps (SKIP
 * LOCKED), then the cascade's dependents and run rows.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/resowner.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_fire_timers);

static Datum FireTimers(PG_FUNCTION_ARGS);

#define WF_MAX_TIMER_BATCH	10000
#define WF_TIMER_PAGES		10

/* where the last page ended: timers are read in (wake_at, id) order */
typedef struct TimerCursor
{
	bool		started;
	TimestampTz wake_at;
	pg_uuid_t	id;
} TimerCursor;

static uint64 DueTimers(int32 batch_size, const TimerCursor *after);
static int	FireSteps(Datum *chosen, int nchosen, WfSettledStep *fired);
static int	FireAndCascade(Datum *chosen, int nchosen);
static int	FirePage(int32 batch_size, TimerCursor *cursor, uint64 *nread);

/*
 * DueTimers reads up to batch_size due timers after the cursor, oldest
 * first, of the caller's organizations when it is confined; nothing is
 * locked yet.  Leaves (id, run, wake_at) in SPI_tuptable.
 */
static uint64
DueTimers(int32 batch_size, const TimerCursor *after)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT s.id, s.workflow_run_id, s.wake_at"
		" FROM workflow.workflow_steps s"
		" WHERE s.wake_at" OP("<=") "pg_catalog.statement_timestamp()"
		" AND (NOT $2 OR ROW(s.wake_at, s.id)" OP(">") "ROW($3, $4))"
		" AND ($5::pg_catalog.uuid[] IS NULL"
		"  OR s.organization_id" OP("=") "ANY ($5))"
		" ORDER BY s.wake_at, s.id LIMIT $1";
	static const Oid types[5] = {INT4OID, BOOLOID, TIMESTAMPTZOID, UUIDOID,
	UUIDARRAYOID};
	Datum		values[5];
	char		nulls[5] = "     ";
	bool		unconfined;

	values[0] = Int32GetDatum(batch_size);
	values[1] = BoolGetDatum(after->started);
	values[2] = TimestampTzGetDatum(after->wake_at);
	values[3] = UUIDPGetDatum(&after->id);
	values[4] = WfCallOrganizationsArray(&unconfined);
	if (unconfined)
		nulls[4] = 'n';
	WfExecute(&plan, sql, 5, types, values, nulls, false, 0);
	return SPI_processed;
}

/*
 * FireSteps locks the chosen steps SKIP LOCKED, re-checks that their
 * timer is due and that they still sleep or wait, and fires them: a
 * sleeping step SUCCEEDED (step_woken), a waiting event step FAILED with
 * workflow.event_timeout (step_event_timeout).  Fills fired, returns how
 * many.
 */
static int
FireSteps(Datum *chosen, int nchosen, WfSettledStep *fired)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH c AS (SELECT s.id, s.wake_at FROM workflow.workflow_steps s"
		"  WHERE s.id" OP("=") "ANY ($1)"
		"  AND s.wake_at" OP("<=") "pg_catalog.statement_timestamp()"
		"  AND s.status::pg_catalog.text" OP("=") "ANY ('{SLEEPING,WAITING_FOR_EXTERNAL}')"
		"  ORDER BY s.id FOR NO KEY UPDATE SKIP LOCKED),"
		" u AS (UPDATE workflow.workflow_steps s SET"
		"  status = CASE WHEN s.status::pg_catalog.text" OP("=") "'SLEEPING'"
		"   THEN 'SUCCEEDED' ELSE 'FAILED' END::workflow.step_status,"
		"  status_reason = CASE WHEN s.status::pg_catalog.text" OP("=") "'SLEEPING'"
		"   THEN s.status_reason ELSE '" WF_REASON_EVENT_TIMEOUT "' END,"
		"  last_error_code = CASE WHEN s.status::pg_catalog.text" OP("=") "'SLEEPING'"
		"   THEN s.last_error_code ELSE '" WF_REASON_EVENT_TIMEOUT "' END,"
		"  last_error_message = CASE WHEN s.status::pg_catalog.text" OP("=") "'SLEEPING'"
		"   THEN s.last_error_message"
		"   ELSE pg_catalog.format('no event %s arrived within %s seconds',"
		"    s.event_name, s.wait_timeout_seconds) END,"
		"  wake_at = NULL,"
		"  finished_at = pg_catalog.statement_timestamp(),"
		"  history_gap = s.history_gap OR NOT $2,"
		"  updated_at = pg_catalog.statement_timestamp()"
		"  FROM c WHERE s.id" OP("=") "c.id"
		"  RETURNING s.id, s.workflow_run_id, s.counter_shard, s.step_key,"
		"  s.status, s.event_name, c.wake_at),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key,"
		"  CASE WHEN u.status::pg_catalog.text" OP("=") "'SUCCEEDED'"
		"   THEN 'step_woken' ELSE 'step_event_timeout' END,"
		"  CASE WHEN u.status::pg_catalog.text" OP("=") "'SUCCEEDED'"
		"   THEN pg_catalog.jsonb_build_object('wake_at', u.wake_at)"
		"   ELSE pg_catalog.jsonb_build_object('event_name', u.event_name,"
		"    'error_code', '" WF_REASON_EVENT_TIMEOUT "'::pg_catalog.text) END"
		"  FROM u WHERE $2)"
		" SELECT u.id, u.workflow_run_id, u.counter_shard::pg_catalog.int4,"
		" u.status::pg_catalog.text" OP("=") "'SUCCEEDED' FROM u";
	static const Oid types[2] = {UUIDARRAYOID, BOOLOID};
	Datum		values[2];
	uint64		n;

	values[0] = WfArray(chosen, NULL, nchosen, UUIDOID);
	values[1] = BoolGetDatum(WfHistoryRecordsSteps());
	WfExecuteAsEngine(&plan, sql, 2, types, values, NULL);
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		bool		woken = WfResultBool(i, 4);

		WfReadSettledStep(i, woken ? WF_COUNT_ACTIVE : WF_COUNT_WAITING,
						  woken, &fired[i]);
		/* ours now: the cascade must not wait below it */
		WfNoteHeldStep(&fired[i].step_id);
	}
	return (int) n;
}

/* FireAndCascade fires the chosen steps and cascades them; returns how many fired. */
static int
FireAndCascade(Datum *chosen, int nchosen)
{
	WfSettledStep *fired = palloc(sizeof(WfSettledStep) * nchosen);
	int			nfired = FireSteps(chosen, nchosen, fired);

	for (int i = 0; i < nfired; i++)
		WfNoteStepTerminal(&fired[i].run_id, fired[i].shard,
						   &fired[i].step_id,
						   fired[i].succeeded ? "SUCCEEDED" : "FAILED",
						   fired[i].from);
	WfFinishPending();
	return nfired;
}

/*
 * FirePage fires the due timers of one page whose runs' release locks it
 * gets, cascades them, and moves the cursor past the page.  The page is
 * fired at once; if its cascade conflicts, run by run, skipping the runs
 * that conflict.  Returns how many it fired; *nread is how many timers the
 * page held.
 */
static int
FirePage(int32 batch_size, TimerCursor *cursor, uint64 *nread)
{
	uint64		n = DueTimers(batch_size, cursor);
	pg_uuid_t  *ids;
	pg_uuid_t  *runs;
	bool	   *has_run;
	bool	   *run_ok;
	Datum	   *chosen;
	pg_uuid_t  *chosen_runs;
	int			nchosen = 0;
	int			nfired;
	bool		isnull;

	*nread = n;
	if (n == 0)
		return 0;
	ids = palloc(sizeof(pg_uuid_t) * n);
	runs = palloc(sizeof(pg_uuid_t) * n);
	has_run = palloc(sizeof(bool) * n);
	for (uint64 i = 0; i < n; i++)
	{
		WfResultUuid(i, 1, &ids[i]);
		has_run[i] = WfResultUuid(i, 2, &runs[i]);
	}
	cursor->started = true;
	cursor->id = ids[n - 1];
	cursor->wake_at = DatumGetTimestampTz(WfResultDatum(n - 1, 3, &isnull));

	run_ok = WfTryLockRunsShared(runs, has_run, n);
	chosen = palloc(sizeof(Datum) * n);
	chosen_runs = palloc(sizeof(pg_uuid_t) * n);
	for (uint64 i = 0; i < n; i++)
		if (run_ok[i])
		{
			chosen_runs[nchosen] = runs[i];
			chosen[nchosen++] = UUIDPGetDatum(&ids[i]);
		}
	if (nchosen == 0)
		return 0;

	nfired = WfTryInSubtransaction(FireAndCascade, chosen, nchosen);
	if (nfired < 0)
		nfired = WfRunByRun(FireAndCascade, chosen, chosen_runs, nchosen);
	return nfired;
}

/*
 * FireTimers ends up to batch_size runs past their deadline (deadlines.c),
 * then fires up to batch_size due timers; returns how many of both.  A page
 * whose timers all
 * belong to busy runs (or steps someone holds) does not end the call: it
 * goes on to the next page, up to WF_TIMER_PAGES pages, so that 0 means
 * no timer it could fire now is left among them.
 */
static Datum
FireTimers(PG_FUNCTION_ARGS)
{
	int32		batch_size;
	TimerCursor cursor;
	uint64		nread;
	int			fired = 0;
	int			ended;

	WfRequireReadCommitted();
	if (PG_ARGISNULL(0))
		wf_invalid_argument("batch_size must not be null");
	batch_size = PG_GETARG_INT32(0);
	if (batch_size < 1 || batch_size > WF_MAX_TIMER_BATCH)
		wf_invalid_argument("batch_size must be between 1 and %d, not %d",
							WF_MAX_TIMER_BATCH, batch_size);

	memset(&cursor, 0, sizeof(cursor));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* runs past their deadline first: their timers need not fire */
	ended = WfSweepDeadlines(batch_size);
	for (int page = 0; page < WF_TIMER_PAGES && fired == 0; page++)
	{
		CHECK_FOR_INTERRUPTS();
		fired = FirePage(batch_size, &cursor, &nread);
		if (nread < (uint64) batch_size)
			break;
	}
	SPI_finish();
	PG_RETURN_INT32(fired + ended);
}

/*
 * The SQL-callable entry point: its body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
WF_OWNER_ENTRY(workflow_fire_timers, FireTimers)
