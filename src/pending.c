/* Entry points of 1.7 not written yet: each is removed as it is written. */
#include "postgres.h"
#include "fmgr.h"

#define PENDING(fn) \
	PG_FUNCTION_INFO_V1(fn); \
	Datum fn(PG_FUNCTION_ARGS) { elog(ERROR, #fn " is not written yet"); }

PENDING(workflow_resume_run)
PENDING(workflow_retire_run)
PENDING(workflow_retry_run)
