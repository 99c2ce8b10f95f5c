/*-------------------------------------------------------------------------
 *
 * errors.h
 *	  The stable error codes of the workflow extension.
 *
 * Every error the extension raises begins its message with one of these
 * codes and carries the SQLSTATE of its class (docs/reference.md, section 15).
 *
 *-------------------------------------------------------------------------
 */
#ifndef WORKFLOW_ERRORS_H
#define WORKFLOW_ERRORS_H

#include "utils/errcodes.h"

/* bad input: 22023 */
#define WF_SQLSTATE_BAD_INPUT			ERRCODE_INVALID_PARAMETER_VALUE
#define WF_INVALID_DEFINITION			"workflow.invalid_definition"
#define WF_EXT_INVALID_STATUS			"workflow.external_completion_invalid_status"
#define WF_EXT_OUTPUT_INVALID			"workflow.external_completion_output_invalid"
#define WF_JOB_INVALID_ARGUMENT			"job.invalid_argument"

/* not found: P0002 */
#define WF_SQLSTATE_NOT_FOUND			ERRCODE_NO_DATA_FOUND
#define WF_RUN_NOT_FOUND				"workflow.run_not_found"
#define WF_EXT_STEP_NOT_FOUND			"workflow.external_step_not_found"
#define WF_JOB_NOT_FOUND				"job.not_found"
#define WF_WORKFLOW_NOT_FOUND			"workflow.workflow_not_found"

/* wrong state: 55000 */
#define WF_SQLSTATE_WRONG_STATE			ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
#define WF_EXT_STEP_NOT_EXTERNAL		"workflow.external_step_not_external"
#define WF_EXT_STEP_NOT_WAITING			"workflow.external_step_not_waiting"
#define WF_RUN_ALREADY_TERMINAL			"workflow.run_already_terminal"
#define WF_JOB_CANCELED					"job.canceled"
#define WF_JOB_NOT_RUNNING				"job.not_running"
#define WF_VERSION_MISMATCH				"workflow.version_mismatch"
#define WF_INVALID_RUN_TRANSITION		"workflow.invalid_run_transition"
#define WF_ALLOWANCE_INELIGIBLE			"workflow.execution_allowance_ineligible"
#define WF_CONTINUATION_INELIGIBLE		"workflow.continuation_ineligible"

/* conflict: 23505 */
#define WF_SQLSTATE_CONFLICT			ERRCODE_UNIQUE_VIOLATION
#define WF_IDEMPOTENCY_CONFLICT			"workflow.idempotency_conflict"
#define WF_EXT_CONFLICT					"workflow.external_completion_conflict"
#define WF_EXT_OUTPUT_CONFLICT			"workflow.external_completion_output_conflict"
#define WF_EXT_METADATA_CONFLICT		"workflow.external_completion_metadata_conflict"
#define WF_EVENT_CONFLICT				"workflow.event_conflict"
#define WF_DEFINITION_CONFLICT			"workflow.definition_conflict"
#define WF_ALLOWANCE_CONFLICT			"workflow.execution_allowance_conflict"
#define WF_CONTINUATION_CONFLICT		"workflow.continuation_conflict"

/* retry me: 40001 */
#define WF_SQLSTATE_RETRY				ERRCODE_T_R_SERIALIZATION_FAILURE
#define WF_RELEASE_CONFLICT				"workflow.release_conflict"
#define WF_JOB_LEASE_LOST				"job.lease_lost"

/* not allowed: 42501 */
#define WF_SQLSTATE_FORBIDDEN			ERRCODE_INSUFFICIENT_PRIVILEGE
#define WF_ORGANIZATION_FORBIDDEN		"workflow.organization_forbidden"

/* isolation: 25000 */
#define WF_SQLSTATE_ISOLATION			ERRCODE_INVALID_TRANSACTION_STATE
#define WF_UNSUPPORTED_ISOLATION		"workflow.unsupported_isolation"

/* broken invariant: XX000 */
#define WF_SQLSTATE_INTERNAL			ERRCODE_INTERNAL_ERROR
#define WF_INTERNAL_STATE				"workflow.internal_state"

/* Codes the engine writes into rows rather than raises. */
#define WF_REASON_DEPENDENCY_UNSATISFIED	"workflow.dependency_unsatisfied"
#define WF_REASON_RUN_CANCELED				"workflow.run_canceled"
#define WF_REASON_RUN_RETIRED				"workflow.run_retired"
#define WF_REASON_RUN_COMPENSATING			"workflow.run_compensating"
#define WF_REASON_RUN_DEADLINE_ELAPSED		"workflow.run_deadline_elapsed"
#define WF_REASON_NO_COMPENSATION			"workflow.no_compensation"
#define WF_REASON_LEASE_EXPIRED				"job.lease_expired"
#define WF_REASON_EVENT_TIMEOUT				"workflow.event_timeout"
#define WF_REPEAT_ITERATION_LIMIT_EXHAUSTED	"workflow.repeat_iteration_limit_exhausted"
#define WF_REPEAT_PREDICATE_NOT_BOOLEAN		"workflow.repeat_predicate_not_boolean"

/*
 * wf_error raises a coded error: the code is glued to the front of the
 * message at compile time, so every message starts with its stable code.
 */
#define wf_error(sqlstate, code, ...) \
	ereport(ERROR, (errcode(sqlstate), errmsg(code ": " __VA_ARGS__)))

#define wf_error_detail(sqlstate, code, detail, ...) \
	ereport(ERROR, (errcode(sqlstate), errmsg(code ": " __VA_ARGS__), \
					errdetail detail))

#define wf_invalid_argument(...) \
	wf_error(WF_SQLSTATE_BAD_INPUT, WF_JOB_INVALID_ARGUMENT, __VA_ARGS__)

#define wf_invalid_definition(...) \
	wf_error(WF_SQLSTATE_BAD_INPUT, WF_INVALID_DEFINITION, __VA_ARGS__)

#endif							/* WORKFLOW_ERRORS_H */
