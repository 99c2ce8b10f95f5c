/*-------------------------------------------------------------------------
 *
 * external.c
 *	  complete_external_step: idempotent completion of an external step.
 *
 * Locks, in order: the step row (FOR NO KEY UPDATE), then a try of the
 * run's release lock, shared; if cancel_run holds it exclusive the call
 * raises workflow.release_conflict (40001) rather than wait while holding
 * the step row.  The cascade and run counters follow (cascade.c).  Only
 * the named step is locked: the cost does not grow with the run.  The
 * statement that completes the step also writes its external_completed
 * event (history.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_complete_external_step);

static Datum CompleteExternalStep(PG_FUNCTION_ARGS);

/* what the caller asks complete_external_step to record */
typedef struct ExternalCompletion
{
	pg_uuid_t  *run_id;
	char	   *step_key;
	char	   *status;
	Datum		output;
	bool		output_null;
	char	   *reason;
	char	   *code;
	char	   *message;		/* truncated */
} ExternalCompletion;

static int	StepColumn(const char *name);
static char *OptionalText(FunctionCallInfo fcinfo, int n);
static void LockExternalStep(const ExternalCompletion *c);
static void CheckCompletion(const ExternalCompletion *c);
static void CheckRepeat(const ExternalCompletion *c, const char *step_status);
static void CompleteStep(const ExternalCompletion *c,
						 const pg_uuid_t *step_id);

/* StepColumn finds a column of the step row (SELECT s.*) by name. */
static int
StepColumn(const char *name)
{
	int			attnum = SPI_fnumber(SPI_tuptable->tupdesc, name);

	if (attnum <= 0)
		elog(ERROR, "workflow_steps has no column \"%s\"", name);
	return attnum;
}

/* OptionalText returns a text argument as a C string, or NULL. */
static char *
OptionalText(FunctionCallInfo fcinfo, int n)
{
	return PG_ARGISNULL(n) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(n));
}

/*
 * LockExternalStep locks the run's step of that key (NOWAIT in a
 * transaction that holds late locks) and leaves its row in SPI_tuptable;
 * a run without such a step raises workflow.external_step_not_found.
 */
static void
LockExternalStep(const ExternalCompletion *c)
{
	static SPIPlanPtr step_plan = NULL;
	static const char *step_sql =
		"SELECT s.* FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1 AND s.step_key" OP("=") "$2"
		" FOR NO KEY UPDATE";
	static SPIPlanPtr step_nowait_plan = NULL;
	static const char *step_nowait_sql =
		"SELECT s.* FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1 AND s.step_key" OP("=") "$2"
		" FOR NO KEY UPDATE NOWAIT";
	static const Oid step_types[2] = {UUIDOID, TEXTOID};
	Datum		values[2];

	values[0] = UUIDPGetDatum(c->run_id);
	values[1] = CStringGetTextDatum(c->step_key);
	if (WfHoldsLateLocks())
		WfExecuteNowait(&step_nowait_plan, step_nowait_sql, 2, step_types,
						values, NULL);
	else
		WfExecute(&step_plan, step_sql, 2, step_types, values, NULL, false, 1);
	if (SPI_processed == 0)
		wf_error(WF_SQLSTATE_NOT_FOUND, WF_EXT_STEP_NOT_FOUND,
				 "run %s has no step \"%s\"", WfUuidString(c->run_id),
				 c->step_key);
}

/*
 * CheckCompletion refuses a job step, a status that is not terminal, and
 * an output that does not go with the status or is too large.
 */
static void
CheckCompletion(const ExternalCompletion *c)
{
	bool		isnull;

	static const char *const completed_by[] = {
		[WF_KIND_JOB] = "a job step; its job completes it",
		[WF_KIND_SLEEP] = "a sleep step; fire_timers wakes it",
		[WF_KIND_EVENT] = "an event step; send_event completes it",
		[WF_KIND_REPEAT] = "a repeat step; its loop settles it",
	};
	WfStepKind	kind;

	kind = WfStepKindFromLabel(WfEnumLabel(WfResultDatum(0, StepColumn("execution_kind"),
														 &isnull)));
	if (kind != WF_KIND_EXTERNAL)
		wf_error(WF_SQLSTATE_WRONG_STATE, WF_EXT_STEP_NOT_EXTERNAL,
				 "step \"%s\" is %s", c->step_key, completed_by[kind]);
	if (!WF_TERMINAL_STATUS(c->status))
		wf_error(WF_SQLSTATE_BAD_INPUT, WF_EXT_INVALID_STATUS,
				 "status must be SUCCEEDED, FAILED or CANCELED, not %s", c->status);
	if (!c->output_null && strcmp(c->status, "SUCCEEDED") != 0)
		wf_error(WF_SQLSTATE_BAD_INPUT, WF_EXT_OUTPUT_INVALID,
				 "output is accepted only with status SUCCEEDED, not %s", c->status);
	if (!c->output_null &&
		toast_raw_datum_size(c->output) > (Size) wf_max_payload_bytes)
		wf_error(WF_SQLSTATE_BAD_INPUT, WF_EXT_OUTPUT_INVALID,
				 "output is larger than workflow.max_payload_bytes (%d)",
				 wf_max_payload_bytes);
}

/*
 * CheckRepeat accepts a completion of a step this function completed
 * before only when it is the same: status, output, reason, code and
 * message.  A step that a saga undid, or is undoing, was completed
 * SUCCEEDED with its output; its reason and code are its compensation's.
 */
static void
CheckRepeat(const ExternalCompletion *c, const char *step_status)
{
	Datum		old_output;
	bool		old_output_null;
	/* a step being or having been undone was completed SUCCEEDED */
	bool		undone = strncmp(step_status, "COMPENSAT", 9) == 0;

	if (undone)
		step_status = "SUCCEEDED";
	if (strcmp(step_status, c->status) != 0)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_CONFLICT),
				 errmsg(WF_EXT_CONFLICT ": step \"%s\" was completed as %s, not %s",
						c->step_key, step_status, c->status)));
	old_output = WfResultDatum(0, StepColumn("output"), &old_output_null);
	if (!WfJsonbEqual(old_output, old_output_null, c->output, c->output_null))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_CONFLICT),
				 errmsg(WF_EXT_OUTPUT_CONFLICT ": step \"%s\" was completed with another output",
						c->step_key)));
	/* its reason, code and message are its compensation's now */
	if (undone)
		return;
	if (!WfTextEqual(WfResultText(0, StepColumn("status_reason")), c->reason) ||
		!WfTextEqual(WfResultText(0, StepColumn("last_error_code")), c->code) ||
		!WfTextEqual(WfResultText(0, StepColumn("last_error_message")), c->message))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_CONFLICT),
				 errmsg(WF_EXT_METADATA_CONFLICT ": step \"%s\" was completed with another reason, code or message",
						c->step_key)));
}

/*
 * CompleteStep tries the run's release lock, shared, and raises
 * workflow.release_conflict rather than wait for a cancel_run that holds
 * it; then it writes the step's completion and leaves the written row in
 * SPI_tuptable.
 */
static void
CompleteStep(const ExternalCompletion *c, const pg_uuid_t *step_id)
{
	static SPIPlanPtr update_plan = NULL;
	static const char *update_sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET"
		" status = $2::workflow.step_status, output = $3,"
		" status_reason = $4, last_error_code = $5, last_error_message = $6,"
		" completed_externally = true,"
		" completion_seq = CASE WHEN $2" OP("=") "'SUCCEEDED' AND s.compensate IS NOT NULL"
		"  THEN pg_catalog.nextval('workflow.step_completion_seq') END,"
		" finished_at = pg_catalog.statement_timestamp(),"
		" history_gap = s.history_gap OR NOT $7,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.id" OP("=") "$1 RETURNING s.*),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'external_completed',"
		"  pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object("
		"  'status', $2, 'role', $8, 'error_code', $5, 'reason', $4))"
		"  FROM u WHERE $7)"
		" SELECT u.* FROM u";
	static const Oid update_types[8] = {UUIDOID, TEXTOID, JSONBOID, TEXTOID,
	TEXTOID, TEXTOID, BOOLOID, TEXTOID};
	Datum		values[8];
	char		nulls[8];

	if (!WfLockRunRelease(c->run_id, false, false))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_RETRY),
				 errmsg(WF_RELEASE_CONFLICT ": run %s is being canceled or released",
						WfUuidString(c->run_id)),
				 errhint("Retry the transaction.")));

	memset(nulls, ' ', sizeof(nulls));
	values[0] = UUIDPGetDatum(step_id);
	values[1] = CStringGetTextDatum(c->status);
	values[2] = c->output;
	nulls[2] = c->output_null ? 'n' : ' ';
	values[3] = c->reason ? CStringGetTextDatum(c->reason) : (Datum) 0;
	nulls[3] = c->reason ? ' ' : 'n';
	values[4] = c->code ? CStringGetTextDatum(c->code) : (Datum) 0;
	nulls[4] = c->code ? ' ' : 'n';
	values[5] = c->message ? CStringGetTextDatum(c->message) : (Datum) 0;
	nulls[5] = c->message ? ' ' : 'n';
	values[6] = BoolGetDatum(WfHistoryRecordsSteps());
	values[7] = CStringGetTextDatum(WfCallCallerName());
	WfExecuteAsEngine(&update_plan, update_sql, 8, update_types, values,
					  nulls);
}

/*
 * workflow_complete_external_step finishes a WAITING_FOR_EXTERNAL step, or
 * returns it unchanged when the same completion is repeated.
 */
static Datum
CompleteExternalStep(PG_FUNCTION_ARGS)
{
	ExternalCompletion c;
	bool		isnull;
	pg_uuid_t	step_id;
	int16		shard;
	char	   *step_status;
	Datum		result;

	c.output_null = PG_ARGISNULL(3);
	c.output = c.output_null ? (Datum) 0 : PG_GETARG_DATUM(3);
	c.reason = OptionalText(fcinfo, 4);
	c.code = OptionalText(fcinfo, 5);
	c.message = OptionalText(fcinfo, 6);

	WfRequireReadCommitted();
	if (PG_ARGISNULL(0))
		wf_invalid_argument("workflow_run_id must not be null");
	c.run_id = PG_GETARG_UUID_P(0);
	if (PG_ARGISNULL(1))
		wf_invalid_argument("step_key must not be null");
	c.step_key = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (PG_ARGISNULL(2))
		wf_invalid_argument("status must not be null");
	c.status = WfEnumLabel(PG_GETARG_DATUM(2));
	c.message = WfTruncateMessage(c.message);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/* another organization's run is reported as missing */
	WfFindRun(c.run_id, PG_ARGISNULL(7) ? NULL : PG_GETARG_UUID_P(7));
	LockExternalStep(&c);
	WfResultUuid(0, StepColumn("id"), &step_id);
	shard = DatumGetInt16(WfResultDatum(0, StepColumn("counter_shard"), &isnull));
	CheckCompletion(&c);

	step_status = WfEnumLabel(WfResultDatum(0, StepColumn("status"), &isnull));
	if (WfResultBool(0, StepColumn("completed_externally")))
	{
		CheckRepeat(&c, step_status);
		result = WfResultAsRow(fcinfo, "workflow_steps");
		SPI_finish();
		PG_RETURN_DATUM(result);
	}
	if (strcmp(step_status, "WAITING_FOR_EXTERNAL") != 0)
	{
		char	   *why = WfResultText(0, StepColumn("status_reason"));

		ereport(ERROR,
				(errcode(WF_SQLSTATE_WRONG_STATE),
				 errmsg(WF_EXT_STEP_NOT_WAITING ": step \"%s\" is %s", c.step_key,
						step_status),
				 why ? errdetail("Status reason: %s.", why) : 0));
	}

	CompleteStep(&c, &step_id);
	result = WfResultAsRow(fcinfo, "workflow_steps");

	WfNoteStepTerminal(c.run_id, shard, &step_id, c.status, WF_COUNT_WAITING);
	WfFinishPending();
	SPI_finish();
	PG_RETURN_DATUM(result);
}

/*
 * The SQL-callable entry points: each body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
WF_OWNER_ENTRY(workflow_complete_external_step, CompleteExternalStep)
