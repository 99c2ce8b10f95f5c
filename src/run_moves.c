/*-------------------------------------------------------------------------
 *
 * run_moves.c
 *	  The run state machine: which run status may follow which, and which
 *	  call makes the move.
 *
 * Every change of a run's status passes WfCheckRunMove, under the run's
 * lock: start_run before it inserts the run row, the status recomputation
 * (status.c) holding the run row it just updated, cancel_run (cancel.c)
 * holding the run's release lock exclusive.  So the check and the write
 * are one compare-and-set.  A move the table does not hold raises
 * workflow.invalid_run_transition.  The table is docs/reference.md's run
 * state machine; workflow._run_moves() returns it, so a test can hold the
 * two together.
 *
 * Takes no locks; runs no statement.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "utils/builtins.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_run_moves);

/* one allowed move; from NULL is a run that does not exist yet */
typedef struct RunMove
{
	const char *from;
	const char *to;
	WfRunCall	call;
} RunMove;

static const char *const call_names[] = {
	[WF_CALL_START_RUN] = "start_run",
	[WF_CALL_STEP_CHANGE] = "step change",
	[WF_CALL_CANCEL_RUN] = "cancel_run",
	[WF_CALL_RETIRE_RUN] = "retire_run",
	[WF_CALL_RESUME_RUN] = "resume_run",
	[WF_CALL_RETRY_RUN] = "retry_run",
	[WF_CALL_COMPENSATE_RUN] = "compensate_run",
	[WF_CALL_COMPENSATE_ON_FAILURE] = "compensate_on failure",
	[WF_CALL_INCREASE_ALLOWANCE] = "increase_execution_allowance",
	[WF_CALL_DEADLINE] = "run deadline",
};

#define BLOCKED_STATUSES(to, call) \
	{"BLOCKED_MISSING_HANDLER", to, call}, \
	{"BLOCKED_MISSING_VERSION", to, call}, \
	{"BLOCKED_SIGNATURE_MISMATCH", to, call}
#define TO_BLOCKED(from, call) \
	{from, "BLOCKED_MISSING_HANDLER", call}, \
	{from, "BLOCKED_MISSING_VERSION", call}, \
	{from, "BLOCKED_SIGNATURE_MISMATCH", call}

static const RunMove run_moves[] = {
	{NULL, "RUNNING", WF_CALL_START_RUN},
	{NULL, "WAITING_FOR_EXTERNAL", WF_CALL_START_RUN},
	{"RUNNING", "WAITING_FOR_EXTERNAL", WF_CALL_STEP_CHANGE},
	{"RUNNING", "SUCCEEDED", WF_CALL_STEP_CHANGE},
	{"RUNNING", "COMPLETED_WITH_ERRORS", WF_CALL_STEP_CHANGE},
	{"WAITING_FOR_EXTERNAL", "RUNNING", WF_CALL_STEP_CHANGE},
	{"WAITING_FOR_EXTERNAL", "SUCCEEDED", WF_CALL_STEP_CHANGE},
	{"WAITING_FOR_EXTERNAL", "COMPLETED_WITH_ERRORS", WF_CALL_STEP_CHANGE},
	{"RUNNING", "CANCELED", WF_CALL_CANCEL_RUN},
	{"WAITING_FOR_EXTERNAL", "CANCELED", WF_CALL_CANCEL_RUN},
	/* a pinned run whose pin no longer holds is held at a release */
	TO_BLOCKED("RUNNING", WF_CALL_STEP_CHANGE),
	TO_BLOCKED("WAITING_FOR_EXTERNAL", WF_CALL_STEP_CHANGE),
	BLOCKED_STATUSES("CANCELED", WF_CALL_CANCEL_RUN),
	/* retire_run ends a live or blocked run */
	{"RUNNING", "RETIRED_UNRESUMABLE", WF_CALL_RETIRE_RUN},
	{"WAITING_FOR_EXTERNAL", "RETIRED_UNRESUMABLE", WF_CALL_RETIRE_RUN},
	BLOCKED_STATUSES("RETIRED_UNRESUMABLE", WF_CALL_RETIRE_RUN),
	/*
	 * resume_run releases what a blocked run held; the released steps may
	 * finish the run at once, or its pin may fail another way
	 */
	BLOCKED_STATUSES("RUNNING", WF_CALL_RESUME_RUN),
	BLOCKED_STATUSES("WAITING_FOR_EXTERNAL", WF_CALL_RESUME_RUN),
	BLOCKED_STATUSES("SUCCEEDED", WF_CALL_RESUME_RUN),
	BLOCKED_STATUSES("COMPLETED_WITH_ERRORS", WF_CALL_RESUME_RUN),
	{"BLOCKED_MISSING_HANDLER", "BLOCKED_MISSING_VERSION", WF_CALL_RESUME_RUN},
	{"BLOCKED_MISSING_HANDLER", "BLOCKED_SIGNATURE_MISMATCH", WF_CALL_RESUME_RUN},
	{"BLOCKED_MISSING_VERSION", "BLOCKED_MISSING_HANDLER", WF_CALL_RESUME_RUN},
	{"BLOCKED_MISSING_VERSION", "BLOCKED_SIGNATURE_MISMATCH", WF_CALL_RESUME_RUN},
	{"BLOCKED_SIGNATURE_MISMATCH", "BLOCKED_MISSING_HANDLER", WF_CALL_RESUME_RUN},
	{"BLOCKED_SIGNATURE_MISMATCH", "BLOCKED_MISSING_VERSION", WF_CALL_RESUME_RUN},
	/*
	 * retry_run runs the failed part of a finished run again; what it
	 * releases may finish at once or be held by the pin
	 */
	{"COMPLETED_WITH_ERRORS", "RUNNING", WF_CALL_RETRY_RUN},
	{"COMPLETED_WITH_ERRORS", "WAITING_FOR_EXTERNAL", WF_CALL_RETRY_RUN},
	{"COMPLETED_WITH_ERRORS", "SUCCEEDED", WF_CALL_RETRY_RUN},
	TO_BLOCKED("COMPLETED_WITH_ERRORS", WF_CALL_RETRY_RUN),
	/*
	 * a saga undone: by compensate_run, or by the failure of a step of a
	 * run defined with "compensate_on": "failure"; its last compensation
	 * ends it; cancel_run stops it
	 */
	{"RUNNING", "COMPENSATING", WF_CALL_COMPENSATE_RUN},
	{"WAITING_FOR_EXTERNAL", "COMPENSATING", WF_CALL_COMPENSATE_RUN},
	{"COMPLETED_WITH_ERRORS", "COMPENSATING", WF_CALL_COMPENSATE_RUN},
	{"RUNNING", "COMPENSATING", WF_CALL_COMPENSATE_ON_FAILURE},
	{"WAITING_FOR_EXTERNAL", "COMPENSATING", WF_CALL_COMPENSATE_ON_FAILURE},
	BLOCKED_STATUSES("COMPENSATING", WF_CALL_COMPENSATE_ON_FAILURE),
	{"COMPENSATING", "COMPENSATED", WF_CALL_STEP_CHANGE},
	{"COMPENSATING", "COMPENSATION_FAILED", WF_CALL_STEP_CHANGE},
	{"COMPENSATING", "CANCELED", WF_CALL_CANCEL_RUN},
	/*
	 * limits: with nothing active or waiting and job steps parked for
	 * want of executions, a run waits for its allowance to grow; the
	 * increase lets them run; the calls that stop a run stop it
	 */
	{"RUNNING", "WAITING_FOR_ALLOWANCE", WF_CALL_STEP_CHANGE},
	{"WAITING_FOR_EXTERNAL", "WAITING_FOR_ALLOWANCE", WF_CALL_STEP_CHANGE},
	{"WAITING_FOR_ALLOWANCE", "RUNNING", WF_CALL_INCREASE_ALLOWANCE},
	{"WAITING_FOR_EXTERNAL", "RUNNING", WF_CALL_INCREASE_ALLOWANCE},
	{"COMPLETED_WITH_ERRORS", "WAITING_FOR_ALLOWANCE", WF_CALL_RETRY_RUN},
	BLOCKED_STATUSES("WAITING_FOR_ALLOWANCE", WF_CALL_RESUME_RUN),
	{"WAITING_FOR_ALLOWANCE", "CANCELED", WF_CALL_CANCEL_RUN},
	{"WAITING_FOR_ALLOWANCE", "RETIRED_UNRESUMABLE", WF_CALL_RETIRE_RUN},
	{"WAITING_FOR_ALLOWANCE", "COMPENSATING", WF_CALL_COMPENSATE_RUN},
	/*
	 * the deadline sweep cancels what has not started; running jobs may
	 * finish, so a run may stay (or, out of a blocked status, become)
	 * RUNNING until they do
	 */
	{"RUNNING", "COMPLETED_WITH_ERRORS", WF_CALL_DEADLINE},
	{"WAITING_FOR_EXTERNAL", "COMPLETED_WITH_ERRORS", WF_CALL_DEADLINE},
	{"WAITING_FOR_ALLOWANCE", "COMPLETED_WITH_ERRORS", WF_CALL_DEADLINE},
	BLOCKED_STATUSES("COMPLETED_WITH_ERRORS", WF_CALL_DEADLINE),
	BLOCKED_STATUSES("RUNNING", WF_CALL_DEADLINE),
};

/* SameStatus compares two statuses, either of which may be NULL. */
static bool
SameStatus(const char *a, const char *b)
{
	return a == NULL ? b == NULL : (b != NULL && strcmp(a, b) == 0);
}

/*
 * WfCheckRunMove raises workflow.invalid_run_transition unless the run
 * state machine lets call move the run from "from" (NULL: a new run) to
 * "to".  The caller holds the run's lock and writes the move at once.
 */
void
WfCheckRunMove(const pg_uuid_t *run_id, const char *from, const char *to,
			   WfRunCall call)
{
	for (int i = 0; i < lengthof(run_moves); i++)
		if (run_moves[i].call == call && SameStatus(run_moves[i].from, from) &&
			strcmp(run_moves[i].to, to) == 0)
			return;
	ereport(ERROR,
			(errcode(WF_SQLSTATE_WRONG_STATE),
			 errmsg(WF_INVALID_RUN_TRANSITION ": %s cannot move run %s from %s to %s",
					call_names[call], WfUuidString(run_id),
					from ? from : "(none)", to),
			 errhint("The run state machine in docs/reference.md lists the moves each call may make.")));
}

/* workflow_run_moves returns the table: (from_status, to_status, call). */
Datum
workflow_run_moves(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < lengthof(run_moves); i++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		nulls[0] = run_moves[i].from == NULL;
		values[0] = nulls[0] ? (Datum) 0 : CStringGetTextDatum(run_moves[i].from);
		values[1] = CStringGetTextDatum(run_moves[i].to);
		values[2] = CStringGetTextDatum(call_names[run_moves[i].call]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
