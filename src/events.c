/*-------------------------------------------------------------------------
 *
 * events.c
 *	  send_event: an event from outside, stored in the run's inbox and
 *	  consumed by the first event step of its name that waits for it.
 *
 * The event is stored first (event_inbox; a dedupe key already used in the
 * run returns the first event when it is the same, else
 * workflow.event_conflict), with its event_received event.  Then every
 * live event step of that name in the run, blocked or waiting, is locked
 * in ascending id; this is what makes an event and the release of its step
 * meet exactly once.  The release of an event step (cascade.c, waits.c)
 * holds the step's row while it looks for an event already sent: if it
 * got the row first, we wait for it and then find the step waiting; if we
 * got it first, it waits for us and then finds our event.  Of the locked
 * steps, the first WAITING_FOR_EXTERNAL one by (released_at, id) consumes
 * the event, and its dependents are released; with none, the event stays
 * unconsumed for a later release.  A step that timed out or was canceled
 * first is no longer live: a late event stays unconsumed, visibly.
 *
 * Locks, in order: the dedupe key, when one is given (an advisory lock of
 * the extension's own class, so that a concurrent send_event with the same
 * key waits here, holding nothing, rather than on the inbox's unique index;
 * only tried in a transaction that holds late locks), the inbox row it
 * inserts, a try of the run's release lock, shared (which never waits:
 * workflow.release_conflict if cancel_run holds it), the run's live event
 * steps of that name (ascending id; NOWAIT in a transaction that holds
 * late locks), which count as rows it holds for its cascade's NOWAIT rule
 * (cascade.c), then the cascade's.  The cost is one index probe
 * plus the live event steps of that name, not the size of the run.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_send_event);

static Datum SendEvent(PG_FUNCTION_ARGS);

/* what the caller sends */
typedef struct SentEvent
{
	pg_uuid_t  *run_id;
	pg_uuid_t	id;				/* the new event's id */
	Datum		name;
	Datum		payload;
	bool		payload_null;
	Datum		dedupe_key;
	bool		dedupe_null;
} SentEvent;

static void CheckArguments(FunctionCallInfo fcinfo, SentEvent *ev);
static void RefuseTerminalRun(const pg_uuid_t *run_id, const char *status);
static bool StoreEvent(SentEvent *ev);
static void ReadDedupedEvent(const SentEvent *ev);
static bool LockWaitingStep(const SentEvent *ev, pg_uuid_t *step_id);
static void ReadEvent(const pg_uuid_t *id);

/*
 * CheckArguments refuses NULLs, an empty or too long event name or
 * dedupe key, and a payload over workflow.max_payload_bytes.
 */
static void
CheckArguments(FunctionCallInfo fcinfo, SentEvent *ev)
{
	int			len;

	if (PG_ARGISNULL(0))
		wf_invalid_argument("workflow_run_id must not be null");
	ev->run_id = PG_GETARG_UUID_P(0);
	if (PG_ARGISNULL(1))
		wf_invalid_argument("event_name must not be null");
	len = VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(1));
	if (len == 0 || len > wf_max_job_type_bytes)
		wf_invalid_argument("event_name must be 1 to %d bytes, not %d",
							wf_max_job_type_bytes, len);
	ev->name = PG_GETARG_DATUM(1);
	ev->payload_null = PG_ARGISNULL(2);
	ev->payload = ev->payload_null ? (Datum) 0 : PG_GETARG_DATUM(2);
	if (!ev->payload_null &&
		toast_raw_datum_size(ev->payload) > (Size) wf_max_payload_bytes)
		wf_invalid_argument("payload is larger than workflow.max_payload_bytes (%d)",
							wf_max_payload_bytes);
	ev->dedupe_null = PG_ARGISNULL(3);
	ev->dedupe_key = ev->dedupe_null ? (Datum) 0 : PG_GETARG_DATUM(3);
	if (!ev->dedupe_null)
	{
		len = VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(3));
		if (len == 0 || len > wf_max_idempotency_key_bytes)
			wf_invalid_argument("dedupe_key must be 1 to %d bytes, not %d",
								wf_max_idempotency_key_bytes, len);
	}
}

/* RefuseTerminalRun raises workflow.run_already_terminal for a finished run. */
static void
RefuseTerminalRun(const pg_uuid_t *run_id, const char *status)
{
	if (WfRunStatusTerminal(status))
		wf_error(WF_SQLSTATE_WRONG_STATE, WF_RUN_ALREADY_TERMINAL,
				 "run %s is %s; it takes no more events",
				 WfUuidString(run_id), status);
}

/*
 * StoreEvent inserts the event into the run's inbox, with its
 * event_received event; returns false, storing nothing, when its dedupe
 * key is taken.
 */
static bool
StoreEvent(SentEvent *ev)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH i AS (INSERT INTO workflow.event_inbox (id, workflow_run_id,"
		" organization_id, event_name, payload, dedupe_key)"
		" SELECT $1, r.id, r.organization_id, $3, $4, $5"
		" FROM workflow.workflow_runs r WHERE r.id" OP("=") "$2"
		" ON CONFLICT (workflow_run_id, dedupe_key) DO NOTHING"
		" RETURNING id, workflow_run_id, event_name, dedupe_key),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT i.workflow_run_id, NULL, 'event_received',"
		"  pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object("
		"  'event_id', i.id, 'event_name', i.event_name,"
		"  'dedupe_key', i.dedupe_key))"
		"  FROM i WHERE $6)"
		" SELECT i.id FROM i";
	static const Oid types[6] = {UUIDOID, UUIDOID, TEXTOID, JSONBOID, TEXTOID,
	BOOLOID};
	Datum		values[6];
	char		nulls[6] = "      ";

	WfNewUuidV7(&ev->id);
	values[0] = UUIDPGetDatum(&ev->id);
	values[1] = UUIDPGetDatum(ev->run_id);
	values[2] = ev->name;
	values[3] = ev->payload;
	nulls[3] = ev->payload_null ? 'n' : ' ';
	values[4] = ev->dedupe_key;
	nulls[4] = ev->dedupe_null ? 'n' : ' ';
	values[5] = BoolGetDatum(WfHistoryRecordsRuns());
	WfExecute(&plan, sql, 6, types, values, nulls, false, 0);
	return SPI_processed == 1;
}

/*
 * ReadDedupedEvent reads the event that holds the dedupe key, as it stands
 * now, into SPI_tuptable, and raises workflow.event_conflict unless it has
 * the same name and payload.
 */
static void
ReadDedupedEvent(const SentEvent *ev)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT i.*, i.event_name" OP("=") "$3"
		" AND COALESCE(i.payload" OP("=") "$4, i.payload IS NULL AND $4 IS NULL) AS same"
		" FROM workflow.event_inbox i"
		" WHERE i.workflow_run_id" OP("=") "$1 AND i.dedupe_key" OP("=") "$2";
	static const Oid types[4] = {UUIDOID, TEXTOID, TEXTOID, JSONBOID};
	Datum		values[4];
	char		nulls[4] = "    ";

	values[0] = UUIDPGetDatum(ev->run_id);
	values[1] = ev->dedupe_key;
	values[2] = ev->name;
	values[3] = ev->payload;
	nulls[3] = ev->payload_null ? 'n' : ' ';
	/* not read-only: a fresh snapshot sees the event we waited for */
	WfExecute(&plan, sql, 4, types, values, nulls, false, 1);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_RETRY),
				 errmsg(WF_RELEASE_CONFLICT ": the event holding this dedupe key is not visible yet"),
				 errhint("Retry the transaction.")));
	if (!WfResultBool(0, SPI_fnumber(SPI_tuptable->tupdesc, "same")))
	{
		pg_uuid_t	held_by;

		WfResultUuid(0, SPI_fnumber(SPI_tuptable->tupdesc, "id"), &held_by);
		ereport(ERROR,
				(errcode(WF_SQLSTATE_CONFLICT),
				 errmsg(WF_EVENT_CONFLICT ": dedupe key \"%s\" was used for another event",
						TextDatumGetCString(ev->dedupe_key)),
				 errdetail("Event %s of run %s holds this key.",
						   WfUuidString(&held_by), WfUuidString(ev->run_id))));
	}
}

/*
 * LockWaitingStep locks the run's live event steps of the event's name in
 * ascending id, and returns the first WAITING_FOR_EXTERNAL one by
 * (released_at, id), if any.
 */
static bool
LockWaitingStep(const SentEvent *ev, pg_uuid_t *step_id)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr nowait_plan = NULL;
#define LIVE_EVENT_STEPS_SQL \
		"SELECT s.id, s.status" OP("=") "'WAITING_FOR_EXTERNAL', s.released_at" \
		" FROM workflow.workflow_steps s" \
		" WHERE s.workflow_run_id" OP("=") "$1 AND s.event_name" OP("=") "$2" \
		" AND s.status" OP("=") "ANY ('{BLOCKED,WAITING_FOR_EXTERNAL}'::workflow.step_status[])" \
		" ORDER BY s.id FOR NO KEY UPDATE"
	static const char *sql = LIVE_EVENT_STEPS_SQL;
	static const char *nowait_sql = LIVE_EVENT_STEPS_SQL " NOWAIT";
	static const Oid types[2] = {UUIDOID, TEXTOID};
	Datum		values[2];
	bool		found = false;
	TimestampTz first_released = 0;

	values[0] = UUIDPGetDatum(ev->run_id);
	values[1] = ev->name;
	if (WfHoldsLateLocks())
		WfExecuteNowait(&nowait_plan, nowait_sql, 2, types, values, NULL);
	else
		WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		TimestampTz released;
		pg_uuid_t	locked;

		/* these are our rows now: the cascade must not wait below them */
		WfResultUuid(i, 1, &locked);
		WfNoteHeldStep(&locked);
		if (!WfResultBool(i, 2))
			continue;
		released = DatumGetTimestampTz(WfResultDatum(i, 3, &isnull));
		/* rows come in ascending id: the first of equal times wins */
		if (!found || released < first_released)
		{
			WfResultUuid(i, 1, step_id);
			first_released = released;
			found = true;
		}
	}
	return found;
}

/* ReadEvent reads an inbox row, as it stands now, into SPI_tuptable. */
static void
ReadEvent(const pg_uuid_t *id)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT i.* FROM workflow.event_inbox i WHERE i.id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = UUIDPGetDatum(id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 1);
	if (SPI_processed != 1)
		elog(ERROR, "event %s vanished", WfUuidString(id));
}

/*
 * SendEvent stores an event for a run and lets the first event step of
 * its name that waits consume it.  Returns the inbox row.
 */
static Datum
SendEvent(PG_FUNCTION_ARGS)
{
	SentEvent	ev;
	pg_uuid_t	step_id;
	WfSettledStep settled;
	bool		waiting;
	Datum		result;

	WfRequireReadCommitted();
	CheckArguments(fcinfo, &ev);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	RefuseTerminalRun(ev.run_id,
					  WfFindRun(ev.run_id,
								PG_ARGISNULL(4) ? NULL : PG_GETARG_UUID_P(4)));

	if (!ev.dedupe_null)
		WfLockDedupeKey(ev.run_id, ev.dedupe_key);
	if (!StoreEvent(&ev))
	{
		/* no row: the key is taken, or the run went (purge) meanwhile */
		WfFindRun(ev.run_id, NULL);
		if (ev.dedupe_null)
			elog(ERROR, "an event without a dedupe key was not stored");
		ReadDedupedEvent(&ev);
		result = WfResultAsRow(fcinfo, "event_inbox");
		SPI_finish();
		PG_RETURN_DATUM(result);
	}

	/* a try never waits, so it may come before the step rows */
	if (!WfLockRunRelease(ev.run_id, false, false))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_RETRY),
				 errmsg(WF_RELEASE_CONFLICT ": run %s is being canceled",
						WfUuidString(ev.run_id)),
				 errhint("Retry the transaction.")));
	waiting = LockWaitingStep(&ev, &step_id);

	/*
	 * Under the release lock no cancel_run or purge is under way; a
	 * completion may still finish the run, in which case no step waited and
	 * the event stays unconsumed in a finished run.
	 */
	RefuseTerminalRun(ev.run_id, WfFindRun(ev.run_id, NULL));

	if (waiting)
	{
		if (!WfConsumeEvent(&step_id, &ev.id, &settled))
			ereport(ERROR,
					(errcode(WF_SQLSTATE_INTERNAL),
					 errmsg(WF_INTERNAL_STATE ": a locked waiting step did not take its event")));
		WfNoteStepTerminal(&settled.run_id, settled.shard, &settled.step_id,
						   "SUCCEEDED", settled.from);
		WfFinishPending();
	}
	ReadEvent(&ev.id);
	result = WfResultAsRow(fcinfo, "event_inbox");
	SPI_finish();
	PG_RETURN_DATUM(result);
}

/*
 * The SQL-callable entry point: its body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
WF_OWNER_ENTRY(workflow_send_event, SendEvent)
