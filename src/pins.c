/*-------------------------------------------------------------------------
 *
 * pins.c
 *	  Whether a pinned run's registered workflow version still stands.
 *
 * A run started by start_workflow carries the name, version and signature
 * it started from.  Before such a run releases a step, the cascade asks
 * WfPinVerdict (once per run per call): the name gone means
 * BLOCKED_MISSING_HANDLER, the version gone BLOCKED_MISSING_VERSION, the
 * version registered again with another signature
 * BLOCKED_SIGNATURE_MISMATCH.  Runs started from a definition are never
 * looked up: their steps are not marked pinned.
 *
 * Reads the registry without locks: a release that read the registry
 * before an unregister_workflow committed still releases (the window
 * docs/reference.md describes); every release after it is held.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "workflow.h"

/*
 * WfPinVerdict returns NULL when the run's pin holds (or it has none), else
 * the BLOCKED_* status it must be held in.
 */
const char *
WfPinVerdict(const pg_uuid_t *run_id)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT r.workflow_name IS NULL,"
		" r.workflow_signature" OP("=") "d.signature,"
		" d.name IS NOT NULL,"
		" EXISTS (SELECT 1 FROM workflow.workflow_definitions n"
		"  WHERE n.name" OP("=") "r.workflow_name)"
		" FROM workflow.workflow_runs r"
		" LEFT JOIN workflow.workflow_definitions d"
		"  ON d.name" OP("=") "r.workflow_name"
		"  AND d.version" OP("=") "r.workflow_version"
		" WHERE r.id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": run %s vanished while its steps changed",
						WfUuidString(run_id))));
	if (WfResultBool(0, 1))
		return NULL;			/* not pinned */
	if (!WfResultBool(0, 4))
		return "BLOCKED_MISSING_HANDLER";
	if (!WfResultBool(0, 3))
		return "BLOCKED_MISSING_VERSION";
	if (!WfResultBool(0, 2))
		return "BLOCKED_SIGNATURE_MISMATCH";
	return NULL;
}
