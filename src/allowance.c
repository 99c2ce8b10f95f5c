/*-------------------------------------------------------------------------
 *
 * allowance.c
 *	  increase_execution_allowance: a compare-and-set of a run's
 *	  node_execution_cap, with evidence in its history.
 *
 * The cap moves only from expected_cap to target_cap, and each move is
 * recorded as execution_allowance_increased {"version": 1, "previous_cap":
 * expected, "target_cap": target}, written whatever workflow.history says.
 * A call that finds the cap at its target already is a repeat of the
 * increase that put it there when the latest such event has exactly its
 * detail: it changes nothing.  Anything else is a conflict: the caller
 * must look at the run before it asks again.  The parked steps that the
 * larger cap lets run are let run in the same transaction, by the run's
 * counter update (status.c, admission.c).
 *
 * Locks, in order: the run's release lock exclusive (no completion,
 * admission or other increase of the run is in flight, and the cap only
 * changes under it), then the run row, last.  Held until commit, so later
 * calls of the transaction take theirs without waiting (WfNoteLateLocks).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_increase_execution_allowance);

/* the largest detail of evidence that is read back */
#define WF_MAX_EVIDENCE_BYTES 1024

static Datum IncreaseAllowance(PG_FUNCTION_ARGS);
static bool ReadCap(const pg_uuid_t *run_id, int32 *cap);
static bool LatestIncreaseIs(const pg_uuid_t *run_id, int32 expected,
							 int32 target);
static void RaiseCap(const pg_uuid_t *run_id, int32 expected, int32 target);

/* ReadCap reads the run's node_execution_cap; false when it has none. */
static bool
ReadCap(const pg_uuid_t *run_id, int32 *cap)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT r.node_execution_cap FROM workflow.workflow_runs r"
		" WHERE r.id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	bool		isnull;
	Datum		d;

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 1);
	if (SPI_processed != 1)
		elog(ERROR, "run %s vanished under its release lock",
			 WfUuidString(run_id));
	d = WfResultDatum(0, 1, &isnull);
	*cap = isnull ? 0 : DatumGetInt32(d);
	return !isnull;
}

/*
 * LatestIncreaseIs says whether the run's latest increase event records
 * exactly expected -> target.  Evidence that is too large or not of the
 * form this version writes is a broken invariant.
 */
static bool
LatestIncreaseIs(const pg_uuid_t *run_id, int32 expected, int32 target)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT e.id::pg_catalog.text, pg_catalog.octet_length(e.detail::pg_catalog.text),"
		" e.detail" OP("=") "pg_catalog.jsonb_build_object('version', 1,"
		"  'previous_cap', e.detail" OP("->") "'previous_cap',"
		"  'target_cap', e.detail" OP("->") "'target_cap')"
		" AND pg_catalog.jsonb_typeof(e.detail" OP("->") "'previous_cap')" OP("=") "'number'"
		" AND pg_catalog.jsonb_typeof(e.detail" OP("->") "'target_cap')" OP("=") "'number',"
		" e.detail" OP("=") "pg_catalog.jsonb_build_object('version', 1,"
		"  'previous_cap', $2, 'target_cap', $3)"
		" FROM workflow.workflow_events e"
		" WHERE e.workflow_run_id" OP("=") "$1"
		" AND e.event_type" OP("=") "'execution_allowance_increased'"
		" ORDER BY e.id DESC LIMIT 1";
	static const Oid types[3] = {UUIDOID, INT4OID, INT4OID};
	Datum		values[3];

	values[0] = UUIDPGetDatum(run_id);
	values[1] = Int32GetDatum(expected);
	values[2] = Int32GetDatum(target);
	WfExecute(&plan, sql, 3, types, values, NULL, false, 1);
	if (SPI_processed == 0)
		return false;
	if (WfResultInt32(0, 2) > WF_MAX_EVIDENCE_BYTES || !WfResultBool(0, 3))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": allowance evidence of run %s is malformed",
						WfUuidString(run_id)),
				 errdetail("Event %s of type execution_allowance_increased is not a detail of at most %d bytes with version 1, previous_cap and target_cap.",
						   WfResultText(0, 1), WF_MAX_EVIDENCE_BYTES)));
	return WfResultBool(0, 4);
}

/*
 * RaiseCap sets the run's cap from expected to target, records the
 * increase, and has the run's counter update let run what now fits.
 */
static void
RaiseCap(const pg_uuid_t *run_id, int32 expected, int32 target)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_runs SET node_execution_cap = $2,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE id" OP("=") "$1";
	static const Oid types[2] = {UUIDOID, INT4OID};
	Datum		values[2];
	StringInfoData detail;

	values[0] = UUIDPGetDatum(run_id);
	values[1] = Int32GetDatum(target);
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);

	WfDetailBegin(&detail);
	WfDetailInt(&detail, "version", 1);
	WfDetailInt(&detail, "previous_cap", expected);
	WfDetailInt(&detail, "target_cap", target);
	WfRecordEvidence(run_id, "execution_allowance_increased",
					 WfDetailEnd(&detail));

	WfRunDeltaCall(run_id, 0, WF_CALL_INCREASE_ALLOWANCE);
	WfFinishPending();
}

/*
 * workflow_increase_execution_allowance(workflow_run_id, expected_cap,
 * target_cap, organization_id) returns the cap in force.
 */
static Datum
IncreaseAllowance(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *run_id;
	int32		expected;
	int32		target;
	int32		cap;
	char	   *status;

	WfRequireReadCommitted();
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		wf_invalid_argument("workflow_run_id, expected_cap and target_cap must not be null");
	run_id = PG_GETARG_UUID_P(0);
	expected = PG_GETARG_INT32(1);
	target = PG_GETARG_INT32(2);
	if (expected < 1)
		wf_invalid_argument("expected_cap must be at least 1, not %d", expected);
	if (target <= expected)
		wf_invalid_argument("target_cap (%d) must be above expected_cap (%d)",
							target, expected);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	status = WfLockRunForCall(run_id, PG_ARGISNULL(3) ? NULL : PG_GETARG_UUID_P(3));
	if (WfRunStatusTerminal(status))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_WRONG_STATE),
				 errmsg(WF_RUN_ALREADY_TERMINAL ": run %s is %s",
						WfUuidString(run_id), status)));
	if (!ReadCap(run_id, &cap))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_WRONG_STATE),
				 errmsg(WF_ALLOWANCE_INELIGIBLE ": run %s has no node_execution_cap",
						WfUuidString(run_id)),
				 errdetail("Only a run whose definition sets limits.node_execution_cap has an execution allowance.")));

	if (cap == expected)
		RaiseCap(run_id, expected, target);
	else if (cap != target || !LatestIncreaseIs(run_id, expected, target))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_CONFLICT),
				 errmsg(WF_ALLOWANCE_CONFLICT ": run %s has node_execution_cap %d, not %d",
						WfUuidString(run_id), cap, expected),
				 errdetail(cap == target ?
						   "The cap is at the target, but its latest increase was not from %d to %d." :
						   "The cap changed since it was read; the increase from %d to %d was not made.",
						   expected, target),
				 errhint("Read the run's node_execution_cap and its history before asking again.")));
	SPI_finish();
	PG_RETURN_INT32(target);
}

WF_OWNER_ENTRY(workflow_increase_execution_allowance, IncreaseAllowance)
