/*-------------------------------------------------------------------------
 *
 * inputs.c
 *	  job_inputs and job_step_key: what a worker's job starts from, the
 *	  run's input and the outputs of its step's prerequisites, and the key
 *	  of its step.
 *
 * For the job the caller holds (RUNNING under its lease token) it returns
 * {"input": the run's input, "steps": {prerequisite key: its output}},
 * with every prerequisite of the job's step, ON_SUCCESS and ON_TERMINAL
 * alike (a prerequisite without an output, such as one that failed, gives
 * JSON null); a plain job gives {"input": null, "steps": {}}.  The cost is
 * the job's row, the run's row and the step's in-degree: the edges are
 * read by (workflow_run_id, dependent_step_id), the prerequisites by
 * primary key.  job_step_key returns the key of the job's step (NULL for a
 * plain job), which a worker cannot read from workflow_steps itself; it
 * reads the step by primary key.
 *
 * Checks run in the order of the other worker calls: job.not_found
 * (another organization's job too), job.canceled, job.lease_lost,
 * job.not_running.
 *
 * Locks: none; it only reads.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_job_inputs);
PG_FUNCTION_INFO_V1(workflow_job_step_key);

static Datum JobInputs(PG_FUNCTION_ARGS);
static Datum JobStepKey(PG_FUNCTION_ARGS);

static pg_uuid_t *ArgUuid(FunctionCallInfo fcinfo, int n, const char *name);
static void ReadJob(const pg_uuid_t *job_id, WfJobState *job);
static void ReadHeldJob(FunctionCallInfo fcinfo, WfJobState *job);
static Datum ReadInputs(const WfJobState *job);
static Datum ReadStepKey(const WfJobState *job);
static Datum ReadForHeldJob(FunctionCallInfo fcinfo,
							Datum (*read) (const WfJobState *job), bool step_only);

/* ArgUuid returns a uuid argument, refusing NULL. */
static pg_uuid_t *
ArgUuid(FunctionCallInfo fcinfo, int n, const char *name)
{
	if (PG_ARGISNULL(n))
		wf_invalid_argument("%s must not be null", name);
	return PG_GETARG_UUID_P(n);
}

/* ReadJob reads the job's state, without a lock. */
static void
ReadJob(const pg_uuid_t *job_id, WfJobState *job)
{
	static SPIPlanPtr plan = NULL;
	static char *sql = NULL;
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	if (sql == NULL)
		sql = MemoryContextStrdup(TopMemoryContext,
								  psprintf("SELECT %s FROM workflow.job_queue j WHERE j.id" OP("=") "$1",
										   WF_JOB_STATE_COLUMNS));
	values[0] = UUIDPGetDatum(job_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 1);
	memset(job, 0, sizeof(WfJobState));
	job->id = *job_id;
	if (SPI_processed == 1)
		WfReadJobState(0, job);
}

/*
 * ReadHeldJob reads the job named by the first two arguments and checks
 * that the caller holds it, with the checks of the other worker calls.
 * The caller has connected to SPI.
 */
static void
ReadHeldJob(FunctionCallInfo fcinfo, WfJobState *job)
{
	pg_uuid_t  *job_id = ArgUuid(fcinfo, 0, "job_id");
	pg_uuid_t  *token = ArgUuid(fcinfo, 1, "lease_token");

	ReadJob(job_id, job);
	if (!WfCheckWorkerJob(job, token, false))
		WfRaiseNotRunning(job);
}

/*
 * ReadInputs builds the job's inputs: its run's input and the outputs of
 * its step's prerequisites.  A job without a run or step passes nulls,
 * which find nothing.  The result is copied out of SPI's memory.
 */
static Datum
ReadInputs(const WfJobState *job)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT pg_catalog.jsonb_build_object("
		" 'input', (SELECT r.input FROM workflow.workflow_runs r"
		"  WHERE r.id" OP("=") "$1),"
		" 'steps', COALESCE((SELECT pg_catalog.jsonb_object_agg(p.step_key, p.output)"
		"  FROM workflow.workflow_step_dependencies d"
		"  JOIN workflow.workflow_steps p"
		"   ON p.id" OP("=") "d.prerequisite_step_id"
		"  WHERE d.workflow_run_id" OP("=") "$1"
		"  AND d.dependent_step_id" OP("=") "$2),"
		"  '{}'::pg_catalog.jsonb))";
	static const Oid types[2] = {UUIDOID, UUIDOID};
	Datum		values[2];
	char		nulls[2];
	bool		isnull;
	Datum		result;

	values[0] = job->has_run ? UUIDPGetDatum(&job->run_id) : (Datum) 0;
	nulls[0] = job->has_run ? ' ' : 'n';
	values[1] = job->has_step ? UUIDPGetDatum(&job->step_id) : (Datum) 0;
	nulls[1] = job->has_step ? ' ' : 'n';
	WfExecute(&plan, sql, 2, types, values, nulls, false, 1);
	if (SPI_processed != 1)
		elog(ERROR, "the inputs of job %s were not built",
			 WfUuidString(&job->id));
	result = WfResultDatum(0, 1, &isnull);
	if (isnull)
		elog(ERROR, "the inputs of job %s are null", WfUuidString(&job->id));
	return SPI_datumTransfer(result, false, -1);
}

/*
 * ReadStepKey returns the key of the job's step, copied out of SPI's
 * memory, or a null Datum for a plain job.
 */
static Datum
ReadStepKey(const WfJobState *job)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT s.step_key FROM workflow.workflow_steps s WHERE s.id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	bool		isnull;
	Datum		key;

	if (!job->has_step)
		return (Datum) 0;
	values[0] = UUIDPGetDatum(&job->step_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 1);
	if (SPI_processed != 1)
		elog(ERROR, "the step of job %s was not found", WfUuidString(&job->id));
	key = WfResultDatum(0, 1, &isnull);
	Assert(!isnull);
	return SPI_datumTransfer(key, false, -1);
}

/*
 * ReadForHeldJob checks that the caller holds the job named by the first
 * two arguments, with the checks of the other worker calls, and returns
 * what read gives for it; a plain job's step key is NULL.
 */
static Datum
ReadForHeldJob(FunctionCallInfo fcinfo, Datum (*read) (const WfJobState *job),
			   bool step_only)
{
	WfJobState	job;
	Datum		result;

	WfRequireReadCommitted();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ReadHeldJob(fcinfo, &job);
	result = read(&job);
	SPI_finish();
	if (step_only && !job.has_step)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/* JobInputs returns the inputs of the job the caller holds. */
static Datum
JobInputs(PG_FUNCTION_ARGS)
{
	return ReadForHeldJob(fcinfo, ReadInputs, false);
}

/*
 * JobStepKey returns the key of the step of the job the caller holds, or
 * NULL for a plain job.
 */
static Datum
JobStepKey(PG_FUNCTION_ARGS)
{
	return ReadForHeldJob(fcinfo, ReadStepKey, true);
}

/*
 * The SQL-callable entry point: its body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
WF_OWNER_ENTRY(workflow_job_inputs, JobInputs)
WF_OWNER_ENTRY(workflow_job_step_key, JobStepKey)
