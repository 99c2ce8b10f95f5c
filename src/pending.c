/* Entry points of 1.7 not written yet: each is removed as it is written. */
#include "postgres.h"
#include "fmgr.h"

#define PENDING(fn) \
	PG_FUNCTION_INFO_V1(fn); \
	Datum fn(PG_FUNCTION_ARGS) { elog(ERROR, #fn " is not written yet"); }

PENDING(workflow_job_inputs)
PENDING(workflow_register_workflow)
PENDING(workflow_unregister_workflow)
PENDING(workflow_start_workflow)
