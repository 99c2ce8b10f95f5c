/*-------------------------------------------------------------------------
 *
 * history.c
 *	  What the event history records, and the detail of its events.
 *
 * workflow.workflow_events gets one row per state change, written in the
 * transaction of the change.  A step's events are written by the very
 * statement that moves the step (triggers.c, cascade.c, cancel.c,
 * external.c, run.c add an INSERT to it as a second WITH query, so an event
 * costs no statement of its own); a run's events are written here, by
 * WfRecordRunEvent, from the few places a run's status changes.  This file
 * decides, from workflow.history, what is recorded:
 *
 *	- steps: every event;
 *	- runs: run events and operator actions (cancel_job's step_canceled);
 *	- off: nothing.
 *
 * Evidence is written whatever it says (WfRecordEvidence): the allowance
 * events that increase_execution_allowance checks a repeat against.
 *
 * A change made without its event sets history_gap on its step or run
 * row, in the statement that makes the change, so that verify() checks
 * the history only of steps and runs whose every change was recorded.
 *
 * It also builds the detail objects of the events that C code writes,
 * as JSON text the statements cast to jsonb.
 *
 * Takes no locks of its own: a run event is written by the transaction
 * that holds the run row it records.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"

#include "workflow.h"

/* WfHistoryRecordsSteps says whether step events are recorded. */
bool
WfHistoryRecordsSteps(void)
{
	return wf_history == WF_HISTORY_STEPS;
}

/* WfHistoryRecordsRuns says whether run events and operator actions are. */
bool
WfHistoryRecordsRuns(void)
{
	return wf_history != WF_HISTORY_OFF;
}

/*
 * WfRecordRunEvent writes a run event, when run events are recorded.  The
 * caller has just written the run row, and marks it history_gap in that
 * same statement when they are not (WfHistoryRecordsRuns).
 */
void
WfRecordRunEvent(const pg_uuid_t *run_id, const char *event_type,
				 const char *detail)
{
	if (WfHistoryRecordsRuns())
		WfRecordEvidence(run_id, event_type, detail);
}

/*
 * WfRecordEvidence writes a run event whatever workflow.history says: the
 * evidence that a later call is checked against (allowance increases and
 * their exhaustion), which is part of the run's state, not only its
 * history.
 */
void
WfRecordEvidence(const pg_uuid_t *run_id, const char *event_type,
				 const char *detail)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		WF_INSERT_EVENTS " VALUES ($1, NULL, $2, $3::pg_catalog.jsonb)";
	static const Oid types[3] = {UUIDOID, TEXTOID, TEXTOID};
	Datum		values[3];

	values[0] = UUIDPGetDatum(run_id);
	values[1] = CStringGetTextDatum(event_type);
	values[2] = CStringGetTextDatum(detail);
	WfExecute(&plan, sql, 3, types, values, NULL, false, 0);
}

/* WfDetailBegin starts an event's detail object in buf. */
void
WfDetailBegin(StringInfo buf)
{
	initStringInfo(buf);
	appendStringInfoChar(buf, '{');
}

/* Separates a key from the one before it and writes it. */
static void
DetailKey(StringInfo buf, const char *key)
{
	if (buf->len > 1)
		appendStringInfoString(buf, ", ");
	escape_json(buf, key);
	appendStringInfoString(buf, ": ");
}

/* WfDetailText adds a text value, or null. */
void
WfDetailText(StringInfo buf, const char *key, const char *value)
{
	DetailKey(buf, key);
	if (value == NULL)
		appendStringInfoString(buf, "null");
	else
		escape_json(buf, value);
}

/* WfDetailInt adds an integer value. */
void
WfDetailInt(StringInfo buf, const char *key, int64 value)
{
	DetailKey(buf, key);
	appendStringInfo(buf, INT64_FORMAT, value);
}

/* WfDetailTimestamp adds a timestamp, in the form jsonb gives timestamps. */
void
WfDetailTimestamp(StringInfo buf, const char *key, TimestampTz value)
{
	char		text[MAXDATELEN + 1];

	DetailKey(buf, key);
	JsonEncodeDateTime(text, TimestampTzGetDatum(value), TIMESTAMPTZOID, NULL);
	escape_json(buf, text);
}

/* WfDetailEnd closes the object and returns its text. */
char *
WfDetailEnd(StringInfo buf)
{
	appendStringInfoChar(buf, '}');
	return buf->data;
}
