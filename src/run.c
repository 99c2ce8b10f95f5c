/*-------------------------------------------------------------------------
 *
 * run.c
 *	  start_run and start_workflow: the inserts of a new run.
 *
 * Once definition.c has validated the whole definition, one INSERT each
 * writes the run, its steps, its counter shards, its edges and the jobs of
 * its root steps, with the run counters already right; the run's
 * run_started and its root steps' step_released (and step_sleeping)
 * events are written by the same statements (history.c).  Root sleep
 * steps whose wake time is already past are woken before start_run
 * returns, and their dependents released (waits.c, cascade.c).  A run whose
 * idempotency key is taken is not written: the first run's id comes back
 * when its definition and its input are the same.  start_workflow starts
 * the active version of a registered workflow (registry.c) the same way,
 * pinned to it: the run carries the version's name, version and signature,
 * and every step of it is marked pinned.  A continuation (continuation.c)
 * starts its successor here too, with the source's finished steps copied
 * as SUCCEEDED: they are marked continued, have no job, and count as
 * finished prerequisites of the rest.
 *
 * Locks: none beyond the rows it inserts (start_workflow reads the
 * registry without a lock); a concurrent start with the same idempotency
 * key waits on the unique index and then returns the first run's id.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_start_run);
PG_FUNCTION_INFO_V1(workflow_start_workflow);

static Datum StartRun(PG_FUNCTION_ARGS);
static Datum StartWorkflow(PG_FUNCTION_ARGS);

/*
 * What a new run starts from besides its definition: the caller's scope,
 * its idempotency key and input, and the registered version it is pinned
 * to (name NULL: none).
 */
typedef struct RunStart
{
	Datum		org;
	bool		org_null;
	Datum		idem;
	bool		idem_null;
	Datum		input;
	bool		input_null;
	const char *name;
	const char *version;
	const char *signature;
	/* a continuation's copied steps (NULL: none), per step of the run */
	const WfRunContinuation *continuation;
} RunStart;

/*
 * A run being written: its definition, the caller's scope, the columns of
 * its steps as arrays for the steps INSERT, and its starting counters.
 */
typedef struct NewRun
{
	WfDefinition *def;
	Jsonb	   *definition;
	pg_uuid_t  *id;
	const RunStart *start;

	/* per step, in the definition's order */
	Datum	   *ids;
	Datum	   *keys;
	Datum	   *kinds;
	Datum	   *job_types;
	bool	   *job_type_nulls;
	Datum	   *payloads;
	Datum	   *priorities;
	Datum	   *attempts;
	Datum	   *timeouts;
	Datum	   *stages;
	bool	   *stage_nulls;
	Datum	   *statuses;
	Datum	   *job_ids;
	bool	   *job_id_nulls;
	Datum	   *deps;
	Datum	   *pending;		/* prerequisites not copied as finished */
	Datum	   *step_shards;
	Datum	   *event_names;
	bool	   *event_name_nulls;
	Datum	   *sleep_seconds;
	bool	   *sleep_seconds_nulls;
	Datum	   *sleep_untils;
	bool	   *sleep_until_nulls;
	Datum	   *wait_timeouts;
	bool	   *wait_timeout_nulls;
	Datum	   *start_afters;
	bool	   *start_after_nulls;
	Datum	   *capped;

	/* the root job steps, whose jobs are written with the run */
	Datum	   *root_steps;
	int			nroot_jobs;
	int			nroot_waiting;	/* external and event steps */
	pg_uuid_t  *root_sleeps;
	int			nroot_sleeps;
	int			nroot_parked;	/* root job steps left waiting for room */
	int			ncopied;		/* a continuation's copied steps */

	/* active, waiting, blocked: on the run row, and per shard 1.. */
	int32		run_count[3];
	int32	   *shard_count[3];
	int32	   *shard_executions;	/* per shard 1.., the root jobs */

	/* the run's deadline, on the run, its steps and their jobs */
	bool		has_deadline;
	TimestampTz deadline;
} NewRun;

static Datum TextOrNull(const char *s, bool *isnull);
static Datum Int32OrNull(int32 v, bool *isnull);
static void NewWaitColumns(NewRun *run, int i);
static void NewStepColumns(NewRun *run);
static int	CompareStepId(const void *a, const void *b);
static void AdmitRootJobs(NewRun *run, int *roots, int nroots);
static void CountStartingSteps(NewRun *run);
static bool InsertRunRow(NewRun *run);
static void FindIdempotentRun(NewRun *run);
static void InsertSteps(NewRun *run);
static void InsertCompensations(NewRun *run);
static void InsertCounterShards(NewRun *run);
static void InsertEdges(NewRun *run);
static void InsertRootJobs(NewRun *run);
static bool AllowanceExhaustedAtStart(NewRun *run);
static void LimitColumns(NewRun *run, Datum *values, char *nulls);
static void RecordExhaustedAtStart(NewRun *run);
static void WakeRootSleeps(NewRun *run);
static void RunDeadline(NewRun *run);
static void InsertRun(WfDefinition *def, Jsonb *definition,
					  pg_uuid_t *run_id, const RunStart *start);
static void CheckStartArguments(FunctionCallInfo fcinfo, int idem_arg,
								int input_arg, RunStart *start);
static bool StepCopied(const NewRun *run, int i);
static int32 StepPending(const NewRun *run, int i);
static void InsertCopiedSteps(NewRun *run);

/* StepCopied says whether a continuation copies step i as finished. */
static bool
StepCopied(const NewRun *run, int i)
{
	const WfRunContinuation *c = run->start->continuation;

	return c != NULL && c->copied[i];
}

/*
 * StepPending counts step i's prerequisites that are not copied as
 * finished: all of them, but in a continuation.
 */
static int32
StepPending(const NewRun *run, int i)
{
	const WfStepDef *s = &run->def->steps[i];
	int32		pending = 0;

	if (StepCopied(run, i))
		return 0;
	for (int e = s->first_edge; e < s->first_edge + s->nedges; e++)
		pending += !StepCopied(run, run->def->edges[e].prerequisite);
	return pending;
}

/* TextOrNull returns s as a text Datum, or a null for NULL. */
static Datum
TextOrNull(const char *s, bool *isnull)
{
	*isnull = (s == NULL);
	return s ? CStringGetTextDatum(s) : (Datum) 0;
}

/* Int32OrNull returns v as an int4 Datum, or a null for a negative v. */
static Datum
Int32OrNull(int32 v, bool *isnull)
{
	*isnull = (v < 0);
	return Int32GetDatum(v);
}

/* NewWaitColumns fills step i's sleep, event and delay columns. */
static void
NewWaitColumns(NewRun *run, int i)
{
	WfStepDef  *s = &run->def->steps[i];

	run->event_names[i] = TextOrNull(s->event_name, &run->event_name_nulls[i]);
	run->sleep_seconds[i] = Int32OrNull(s->sleep_seconds,
										&run->sleep_seconds_nulls[i]);
	run->sleep_untils[i] = TimestampTzGetDatum(s->sleep_until);
	run->sleep_until_nulls[i] = !s->has_sleep_until;
	run->wait_timeouts[i] = Int32OrNull(s->wait_timeout_seconds,
										&run->wait_timeout_nulls[i]);
	run->start_afters[i] = Int32OrNull(s->start_after_seconds,
									   &run->start_after_nulls[i]);
}

/*
 * NewStepColumns gives every step and every root job step's job a new id,
 * and fills the columns of the steps: a step with prerequisites to wait
 * for starts BLOCKED, a root external or event step WAITING_FOR_EXTERNAL,
 * a root sleep step SLEEPING, a root job step ENQUEUED with its job, and a
 * continuation's copied step SUCCEEDED.  A step whose prerequisites are all
 * copied is a root.
 */
static void
NewStepColumns(NewRun *run)
{
	WfDefinition *def = run->def;
	int			n = def->nsteps;
	Datum		status_blocked = CStringGetTextDatum("BLOCKED");
	Datum		status_enqueued = CStringGetTextDatum("ENQUEUED");
	Datum		status_waiting = CStringGetTextDatum("WAITING_FOR_EXTERNAL");
	Datum		status_sleeping = CStringGetTextDatum("SLEEPING");
	Datum		status_succeeded = CStringGetTextDatum("SUCCEEDED");
	int		   *capped_roots = palloc(sizeof(int) * n);
	int			ncapped_roots = 0;

	run->ids = palloc(sizeof(Datum) * n);
	run->keys = palloc(sizeof(Datum) * n);
	run->kinds = palloc(sizeof(Datum) * n);
	run->job_types = palloc(sizeof(Datum) * n);
	run->job_type_nulls = palloc(sizeof(bool) * n);
	run->payloads = palloc(sizeof(Datum) * n);
	run->priorities = palloc(sizeof(Datum) * n);
	run->attempts = palloc(sizeof(Datum) * n);
	run->timeouts = palloc(sizeof(Datum) * n);
	run->stages = palloc(sizeof(Datum) * n);
	run->stage_nulls = palloc(sizeof(bool) * n);
	run->statuses = palloc(sizeof(Datum) * n);
	run->job_ids = palloc(sizeof(Datum) * n);
	run->job_id_nulls = palloc(sizeof(bool) * n);
	run->deps = palloc(sizeof(Datum) * n);
	run->pending = palloc(sizeof(Datum) * n);
	run->root_steps = palloc(sizeof(Datum) * n);
	run->step_shards = palloc(sizeof(Datum) * n);
	run->event_names = palloc(sizeof(Datum) * n);
	run->event_name_nulls = palloc(sizeof(bool) * n);
	run->sleep_seconds = palloc(sizeof(Datum) * n);
	run->sleep_seconds_nulls = palloc(sizeof(bool) * n);
	run->sleep_untils = palloc(sizeof(Datum) * n);
	run->sleep_until_nulls = palloc(sizeof(bool) * n);
	run->wait_timeouts = palloc(sizeof(Datum) * n);
	run->wait_timeout_nulls = palloc(sizeof(bool) * n);
	run->start_afters = palloc(sizeof(Datum) * n);
	run->start_after_nulls = palloc(sizeof(bool) * n);
	run->capped = palloc(sizeof(Datum) * n);
	run->root_sleeps = palloc(sizeof(pg_uuid_t) * n);
	run->nroot_jobs = 0;
	run->nroot_waiting = 0;
	run->nroot_sleeps = 0;
	run->nroot_parked = 0;
	run->ncopied = 0;

	for (int i = 0; i < n; i++)
	{
		WfStepDef  *s = &def->steps[i];

		WfNewUuidV7(&s->id);
		run->ids[i] = UUIDPGetDatum(&s->id);
		run->keys[i] = CStringGetTextDatum(s->key);
		run->kinds[i] = CStringGetTextDatum(WfStepKindLabel(s->kind));
		run->job_types[i] = TextOrNull(s->job_type, &run->job_type_nulls[i]);
		run->payloads[i] = s->payload;
		run->priorities[i] = Int32GetDatum(s->priority);
		run->attempts[i] = Int32GetDatum(s->max_attempts);
		run->timeouts[i] = Int32GetDatum(s->timeout_seconds);
		run->stages[i] = TextOrNull(s->stage, &run->stage_nulls[i]);
		run->deps[i] = Int32GetDatum(s->nedges);
		run->pending[i] = Int32GetDatum(StepPending(run, i));
		run->job_id_nulls[i] = true;
		run->job_ids[i] = (Datum) 0;
		run->step_shards[i] = Int16GetDatum(s->counter_shard);
		run->capped[i] = BoolGetDatum(s->capped);
		NewWaitColumns(run, i);
		if (StepCopied(run, i))
		{
			run->statuses[i] = status_succeeded;
			run->ncopied++;
		}
		else if (DatumGetInt32(run->pending[i]) > 0)
			run->statuses[i] = status_blocked;
		else if (s->kind == WF_KIND_EXTERNAL || s->kind == WF_KIND_EVENT)
		{
			run->statuses[i] = status_waiting;
			run->nroot_waiting++;
		}
		else if (s->kind == WF_KIND_SLEEP)
		{
			run->statuses[i] = status_sleeping;
			run->root_sleeps[run->nroot_sleeps++] = s->id;
		}
		else if (s->capped)
			capped_roots[ncapped_roots++] = i;
		else
		{
			run->statuses[i] = status_enqueued;
			WfNewUuidV7(&s->job_id);
			run->job_ids[i] = UUIDPGetDatum(&s->job_id);
			run->job_id_nulls[i] = false;
			run->root_steps[run->nroot_jobs++] = run->ids[i];
		}
	}
	if (ncapped_roots > 0)
		AdmitRootJobs(run, capped_roots, ncapped_roots);
	pfree(capped_roots);
}

/* a step of the run being written, by id */
typedef struct StepById
{
	pg_uuid_t	id;
	int			index;
} StepById;

/* CompareStepId orders StepById entries by step id. */
static int
CompareStepId(const void *a, const void *b)
{
	return WfUuidCompare(&((const StepById *) a)->id,
						 &((const StepById *) b)->id);
}

/*
 * AdmitRootJobs starts the root job steps of a capped run that its caps
 * allow, in id order as admission would (they share their released_at),
 * with their jobs; the others start PARKED.  A root sleep step is active
 * from the start, so it takes a place under concurrency_cap.
 */
static void
AdmitRootJobs(NewRun *run, int *roots, int nroots)
{
	WfLimits   *limits = &run->def->limits;
	int			room = nroots;
	StepById   *by_id = palloc(sizeof(StepById) * nroots);

	if (limits->concurrency_cap > 0)
		room = Min(room, limits->concurrency_cap - run->nroot_sleeps);
	if (limits->node_execution_cap > 0)
		room = Min(room, limits->node_execution_cap);
	room = Max(room, 0);
	for (int k = 0; k < nroots; k++)
	{
		by_id[k].id = run->def->steps[roots[k]].id;
		by_id[k].index = roots[k];
	}
	qsort(by_id, nroots, sizeof(StepById), CompareStepId);
	for (int k = 0; k < nroots; k++)
	{
		int			i = by_id[k].index;
		WfStepDef  *s = &run->def->steps[i];

		if (k >= room)
		{
			run->statuses[i] = CStringGetTextDatum("PARKED");
			run->nroot_parked++;
			continue;
		}
		run->statuses[i] = CStringGetTextDatum("ENQUEUED");
		WfNewUuidV7(&s->job_id);
		run->job_ids[i] = UUIDPGetDatum(&s->job_id);
		run->job_id_nulls[i] = false;
		run->root_steps[run->nroot_jobs++] = run->ids[i];
	}
	pfree(by_id);
}

/*
 * CountStartingSteps counts the active, waiting and blocked steps the run
 * starts with.  A sharded run's row counts the shards where a counter is
 * not zero; either way the status follows from the same zeros.
 */
static void
CountStartingSteps(NewRun *run)
{
	WfDefinition *def = run->def;
	int			n = def->nsteps;
	int			nshards = def->counter_shards;

	run->run_count[0] = run->nroot_jobs + run->nroot_sleeps;
	run->run_count[1] = run->nroot_waiting;
	run->run_count[2] = n - run->run_count[0] - run->run_count[1] -
		run->nroot_parked - run->ncopied;
	for (int c = 0; c < 3; c++)
		run->shard_count[c] = NULL;
	run->shard_executions = NULL;
	if (nshards == 0)
		return;

	/*
	 * a capped run has no shards, so no step of a sharded one is parked; a
	 * continuation has none either, so none is copied
	 */
	for (int c = 0; c < 3; c++)
		run->shard_count[c] = palloc0(sizeof(int32) * (nshards + 1));
	run->shard_executions = palloc0(sizeof(int32) * (nshards + 1));
	for (int i = 0; i < n; i++)
	{
		WfStepDef  *s = &def->steps[i];
		int			c = s->nedges > 0 ? 2 :
			(s->kind == WF_KIND_EXTERNAL || s->kind == WF_KIND_EVENT) ? 1 : 0;

		run->shard_count[c][s->counter_shard]++;
		if (s->nedges == 0 && s->kind == WF_KIND_JOB)
			run->shard_executions[s->counter_shard]++;
	}
	for (int c = 0; c < 3; c++)
	{
		run->run_count[c] = 0;
		for (int k = 1; k <= nshards; k++)
			run->run_count[c] += run->shard_count[c][k] > 0;
	}
}

/*
 * InsertRunRow writes the run row, unless its idempotency key is taken;
 * returns whether it did.
 */
static bool
InsertRunRow(NewRun *run)
{
	static SPIPlanPtr run_plan = NULL;
	static const char *run_sql =
		"WITH r AS (INSERT INTO workflow.workflow_runs (id, organization_id,"
		" name, definition, status, result_step_key, idempotency_key,"
		" steps_total, steps_active, steps_waiting, steps_blocked,"
		" counter_shards, history_gap, input, workflow_name, workflow_version,"
		" workflow_signature, node_execution_cap, concurrency_cap, cycle_cap,"
		" retry_cap, executions_used, steps_parked, allowance_exhausted_cap,"
		" deadline_at, steps_succeeded)"
		" VALUES ($1, $2, $3, $4, $5::workflow.run_status, $6, $7, $8, $9,"
		" $10, $11, $12, NOT $14, $15, $16, $17, $18, $19, $20, $21, $22,"
		" $23, $24, $25, $26, $27)"
		" ON CONFLICT (organization_id, idempotency_key)"
		" WHERE idempotency_key IS NOT NULL DO NOTHING"
		" RETURNING id),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT r.id, NULL, 'run_started', $13::pg_catalog.jsonb FROM r"
		"  WHERE $14)"
		" SELECT r.id FROM r";
	static const Oid run_types[27] = {UUIDOID, UUIDOID, TEXTOID, JSONBOID,
		TEXTOID, TEXTOID, TEXTOID, INT4OID, INT4OID, INT4OID,
		INT4OID, INT2OID, TEXTOID, BOOLOID, JSONBOID, TEXTOID, TEXTOID,
		TEXTOID, INT4OID, INT4OID, INT4OID, INT4OID, INT4OID, INT4OID,
	INT4OID, TIMESTAMPTZOID, INT4OID};
	WfDefinition *def = run->def;
	const RunStart *start = run->start;
	Datum		values[27];
	char		nulls[27];
	bool		isnull;
	const char *run_status;
	StringInfoData detail;

	run_status = WfComputeRunStatus(run->run_count[0], run->run_count[1],
									run->nroot_parked, run->run_count[2],
									0, 0);
	WfCheckRunMove(run->id, NULL, run_status, WF_CALL_START_RUN);
	memset(nulls, ' ', sizeof(nulls));
	values[0] = UUIDPGetDatum(run->id);
	values[1] = start->org;
	nulls[1] = start->org_null ? 'n' : ' ';
	values[2] = TextOrNull(def->name, &isnull);
	nulls[2] = isnull ? 'n' : ' ';
	values[3] = JsonbPGetDatum(run->definition);
	values[4] = CStringGetTextDatum(run_status);
	values[5] = TextOrNull(def->result_step, &isnull);
	nulls[5] = isnull ? 'n' : ' ';
	values[6] = start->idem;
	nulls[6] = start->idem_null ? 'n' : ' ';
	values[7] = Int32GetDatum(def->nsteps);
	values[8] = Int32GetDatum(run->run_count[0]);
	values[9] = Int32GetDatum(run->run_count[1]);
	values[10] = Int32GetDatum(run->run_count[2]);
	values[11] = Int16GetDatum((int16) def->counter_shards);
	WfDetailBegin(&detail);
	WfDetailText(&detail, "status", run_status);
	WfDetailInt(&detail, "steps", def->nsteps);
	values[12] = CStringGetTextDatum(WfDetailEnd(&detail));
	values[13] = BoolGetDatum(WfHistoryRecordsRuns());
	values[14] = start->input;
	nulls[14] = start->input_null ? 'n' : ' ';
	values[15] = TextOrNull(start->name, &isnull);
	nulls[15] = isnull ? 'n' : ' ';
	values[16] = TextOrNull(start->version, &isnull);
	nulls[16] = isnull ? 'n' : ' ';
	values[17] = TextOrNull(start->signature, &isnull);
	nulls[17] = isnull ? 'n' : ' ';
	LimitColumns(run, values + 18, nulls + 18);
	values[25] = TimestampTzGetDatum(run->deadline);
	nulls[25] = run->has_deadline ? ' ' : 'n';
	values[26] = Int32GetDatum(run->ncopied);
	WfExecute(&run_plan, run_sql, 27, run_types, values, nulls, false, 0);
	return SPI_processed > 0;
}

/*
 * AllowanceExhaustedAtStart says whether the run starts with job steps
 * parked for want of executions: its allowance is used up at once.
 */
static bool
AllowanceExhaustedAtStart(NewRun *run)
{
	int32		cap = run->def->limits.node_execution_cap;

	return run->nroot_parked > 0 && cap > 0 && run->nroot_jobs >= cap;
}

/*
 * LimitColumns fills the run row's limit columns, NULL where there is no
 * limit, and what it uses from the start: the root jobs, the parked root
 * steps and, when those are parked for want of executions, the exhausted
 * cap.  A sharded run counts its executions in its shards.
 */
static void
LimitColumns(NewRun *run, Datum *values, char *nulls)
{
	WfLimits   *limits = &run->def->limits;

	values[0] = Int32GetDatum(limits->node_execution_cap);
	nulls[0] = limits->node_execution_cap > 0 ? ' ' : 'n';
	values[1] = Int32GetDatum(limits->concurrency_cap);
	nulls[1] = limits->concurrency_cap > 0 ? ' ' : 'n';
	values[2] = Int32GetDatum(limits->cycle_cap);
	nulls[2] = limits->cycle_cap > 0 ? ' ' : 'n';
	values[3] = Int32GetDatum(limits->retry_cap);
	nulls[3] = limits->retry_cap >= 0 ? ' ' : 'n';
	values[4] = Int32GetDatum(run->def->counter_shards > 0 ? 0 :
							  run->nroot_jobs);
	nulls[4] = ' ';
	values[5] = Int32GetDatum(run->nroot_parked);
	nulls[5] = ' ';
	values[6] = Int32GetDatum(limits->node_execution_cap);
	nulls[6] = AllowanceExhaustedAtStart(run) ? ' ' : 'n';
}

/*
 * RecordExhaustedAtStart writes the evidence of an allowance used up by
 * the run's start (admission.c writes it for later exhaustion).
 */
static void
RecordExhaustedAtStart(NewRun *run)
{
	if (AllowanceExhaustedAtStart(run))
		WfRecordAllowanceExhausted(run->id,
								   run->def->limits.node_execution_cap);
}

/*
 * FindIdempotentRun sets the run's id to the run that holds its
 * idempotency key, when that run was started with the same definition and
 * the same input (both NULL counts as the same).
 */
static void
FindIdempotentRun(NewRun *run)
{
	static SPIPlanPtr existing_plan = NULL;
	static const char *existing_sql =
		"SELECT r.id, r.definition" OP("=") "$3,"
		" COALESCE(r.input" OP("=") "$4, r.input IS NULL AND $4 IS NULL)"
		" FROM workflow.workflow_runs r"
		" WHERE (r.organization_id" OP("=") "$1"
		"  OR (r.organization_id IS NULL AND $1 IS NULL))"
		" AND r.idempotency_key" OP("=") "$2";
	static const Oid existing_types[4] = {UUIDOID, TEXTOID, JSONBOID,
	JSONBOID};
	const RunStart *start = run->start;
	Datum		values[4];
	char		nulls[4];
	bool		isnull;
	bool		same_definition;

	values[0] = start->org;
	nulls[0] = start->org_null ? 'n' : ' ';
	values[1] = start->idem;
	nulls[1] = ' ';
	values[2] = JsonbPGetDatum(run->definition);
	nulls[2] = ' ';
	values[3] = start->input;
	nulls[3] = start->input_null ? 'n' : ' ';
	/* not read-only: a fresh snapshot sees the run we waited for */
	WfExecute(&existing_plan, existing_sql, 4, existing_types, values,
			  nulls, false, 1);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_RETRY),
				 errmsg(WF_RELEASE_CONFLICT ": the run holding this idempotency key is not visible yet"),
				 errhint("Retry the transaction.")));
	same_definition = WfResultBool(0, 2);
	if (!same_definition || !WfResultBool(0, 3))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_CONFLICT),
				 errmsg(WF_IDEMPOTENCY_CONFLICT ": idempotency key \"%s\" was used for another %s",
						TextDatumGetCString(start->idem),
						same_definition ? "input" : "definition"),
				 errdetail("Run %s was started with this key.",
						   WfUuidString(DatumGetUUIDP(WfResultDatum(0, 1, &isnull))))));
	WfResultUuid(0, 1, run->id);
}

/*
 * InsertCompensations writes what a saga needs, for a run whose definition
 * has any of it: the compensate job of each step that has one, and
 * whether the run compensates on failure.  A run without either writes
 * nothing more.
 */
static void
InsertCompensations(NewRun *run)
{
	static SPIPlanPtr steps_plan = NULL;
	static const char *steps_sql =
		"UPDATE workflow.workflow_steps s SET compensate = c.compensate"
		" FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.uuid[]),"
		" pg_catalog.unnest($2::pg_catalog.jsonb[])) AS c(id, compensate)"
		" WHERE s.id" OP("=") "c.id";
	static SPIPlanPtr run_plan = NULL;
	static const char *run_sql =
		"UPDATE workflow.workflow_runs r SET compensate_on_failure = true"
		" WHERE r.id" OP("=") "$1";
	static const Oid types[2] = {UUIDARRAYOID, JSONBARRAYOID};
	static const Oid run_types[1] = {UUIDOID};
	WfDefinition *def = run->def;
	Datum	   *ids = palloc(sizeof(Datum) * def->nsteps);
	Datum	   *compensates = palloc(sizeof(Datum) * def->nsteps);
	int			n = 0;
	Datum		values[2];

	for (int i = 0; i < def->nsteps; i++)
		if (def->steps[i].compensate_job_type != NULL && !StepCopied(run, i))
		{
			ids[n] = UUIDPGetDatum(&def->steps[i].id);
			compensates[n++] = def->steps[i].compensate;
		}
	if (n > 0)
	{
		values[0] = WfArray(ids, NULL, n, UUIDOID);
		values[1] = WfArray(compensates, NULL, n, JSONBOID);
		WfExecute(&steps_plan, steps_sql, 2, types, values, NULL, false, 0);
	}
	if (def->compensate_on_failure)
	{
		values[0] = UUIDPGetDatum(run->id);
		WfExecute(&run_plan, run_sql, 1, run_types, values, NULL, false, 0);
	}
	pfree(ids);
	pfree(compensates);
}

/*
 * InsertSteps writes every step of the run in one statement, with the
 * wake time of a root sleep step, or of a root event step's timeout.
 */
static void
InsertSteps(NewRun *run)
{
	static SPIPlanPtr steps_plan = NULL;
	static const char *steps_sql =
		"WITH s AS (INSERT INTO workflow.workflow_steps (id, workflow_run_id,"
		" step_key, execution_kind, job_type, organization_id, payload,"
		" priority, max_attempts, timeout_seconds, stage, status, job_id,"
		" released_at, dependency_count_total, dependency_count_pending,"
		" counter_shard, history_gap, event_name, sleep_seconds, sleep_until,"
		" wait_timeout_seconds, start_after_seconds, wake_at, pinned, capped,"
		" parked_at, deadline_at)"
		" SELECT u.id, $1, u.step_key, u.kind::workflow.execution_kind,"
		" u.job_type, $2, u.payload, u.priority, u.max_attempts,"
		" u.timeout_seconds, u.stage, u.status::workflow.step_status, u.job_id,"
		" CASE WHEN u.status" OP("<>") "'BLOCKED' THEN pg_catalog.statement_timestamp() END,"
		" u.deps, u.pending, u.shard, u.status" OP("<>") "'BLOCKED' AND NOT $16,"
		" u.event_name, u.sleep_seconds, u.sleep_until, u.wait_timeout,"
		" u.start_after,"
		" CASE WHEN u.status" OP("=") "'SLEEPING'"
		"  THEN COALESCE(u.sleep_until, pg_catalog.statement_timestamp()"
		"   " OP("+") "pg_catalog.make_interval(secs => u.sleep_seconds))"
		"  WHEN u.status" OP("=") "'WAITING_FOR_EXTERNAL'"
		"  THEN pg_catalog.statement_timestamp()"
		"   " OP("+") "pg_catalog.make_interval(secs => u.wait_timeout) END,"
		" $22, u.capped,"
		" CASE WHEN u.status" OP("=") "'PARKED' THEN pg_catalog.statement_timestamp() END,"
		" $24"
		" FROM ROWS FROM (pg_catalog.unnest($3::pg_catalog.uuid[]),"
		" pg_catalog.unnest($4::pg_catalog.text[]),"
		" pg_catalog.unnest($5::pg_catalog.text[]),"
		" pg_catalog.unnest($6::pg_catalog.text[]),"
		" pg_catalog.unnest($7::pg_catalog.jsonb[]),"
		" pg_catalog.unnest($8::pg_catalog.int4[]),"
		" pg_catalog.unnest($9::pg_catalog.int4[]),"
		" pg_catalog.unnest($10::pg_catalog.int4[]),"
		" pg_catalog.unnest($11::pg_catalog.text[]),"
		" pg_catalog.unnest($12::pg_catalog.text[]),"
		" pg_catalog.unnest($13::pg_catalog.uuid[]),"
		" pg_catalog.unnest($14::pg_catalog.int4[]),"
		" pg_catalog.unnest($15::pg_catalog.int2[]),"
		" pg_catalog.unnest($17::pg_catalog.text[]),"
		" pg_catalog.unnest($18::pg_catalog.int4[]),"
		" pg_catalog.unnest($19::pg_catalog.timestamptz[]),"
		" pg_catalog.unnest($20::pg_catalog.int4[]),"
		" pg_catalog.unnest($21::pg_catalog.int4[]),"
		" pg_catalog.unnest($23::pg_catalog.bool[]),"
		" pg_catalog.unnest($25::pg_catalog.int4[]))"
		" AS u(id, step_key, kind, job_type, payload, priority, max_attempts,"
		" timeout_seconds, stage, status, job_id, deps, shard, event_name,"
		" sleep_seconds, sleep_until, wait_timeout, start_after, capped, pending)"
		" RETURNING id, workflow_run_id, step_key, status, job_id, wake_at,"
		" parked_at),"
		" q AS (INSERT INTO workflow.parked_steps (workflow_run_id, parked_at,"
		" workflow_step_id) SELECT s.workflow_run_id, s.parked_at, s.id FROM s"
		" WHERE s.parked_at IS NOT NULL)"
		" " WF_INSERT_EVENTS
		" SELECT s.workflow_run_id, s.step_key, v.event_type, v.detail"
		" FROM s, LATERAL (VALUES ('step_released',"
		"  CASE WHEN s.job_id IS NULL THEN '{}'::pg_catalog.jsonb"
		"  ELSE pg_catalog.jsonb_build_object('job_id', s.job_id) END),"
		"  ('step_sleeping', pg_catalog.jsonb_build_object('wake_at', s.wake_at)),"
		"  ('step_parked', '{}'::pg_catalog.jsonb))"
		"  AS v(event_type, detail)"
		" WHERE $16 AND s.status::pg_catalog.text" OP("<>") "ALL ('{BLOCKED,SUCCEEDED}'::pg_catalog.text[])"
		" AND (v.event_type" OP("=") "'step_parked')"
		"  " OP("=") "(s.status::pg_catalog.text" OP("=") "'PARKED')"
		" AND (v.event_type" OP("<>") "'step_sleeping'"
		"  OR s.status::pg_catalog.text" OP("=") "'SLEEPING')";
	static const Oid steps_types[25] = {UUIDOID, UUIDOID, UUIDARRAYOID,
		TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID, JSONBARRAYOID, INT4ARRAYOID,
		INT4ARRAYOID, INT4ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, UUIDARRAYOID,
		INT4ARRAYOID, INT2ARRAYOID, BOOLOID, TEXTARRAYOID, INT4ARRAYOID,
		TIMESTAMPTZARRAYOID, INT4ARRAYOID, INT4ARRAYOID, BOOLOID, BOOLARRAYOID,
	TIMESTAMPTZOID, INT4ARRAYOID};
	int			n = run->def->nsteps;
	Datum		values[25];
	char		nulls[25];

	memset(nulls, ' ', sizeof(nulls));
	values[0] = UUIDPGetDatum(run->id);
	values[1] = run->start->org;
	nulls[1] = run->start->org_null ? 'n' : ' ';
	values[2] = WfArray(run->ids, NULL, n, UUIDOID);
	values[3] = WfArray(run->keys, NULL, n, TEXTOID);
	values[4] = WfArray(run->kinds, NULL, n, TEXTOID);
	values[5] = WfArray(run->job_types, run->job_type_nulls, n, TEXTOID);
	values[6] = WfArray(run->payloads, NULL, n, JSONBOID);
	values[7] = WfArray(run->priorities, NULL, n, INT4OID);
	values[8] = WfArray(run->attempts, NULL, n, INT4OID);
	values[9] = WfArray(run->timeouts, NULL, n, INT4OID);
	values[10] = WfArray(run->stages, run->stage_nulls, n, TEXTOID);
	values[11] = WfArray(run->statuses, NULL, n, TEXTOID);
	values[12] = WfArray(run->job_ids, run->job_id_nulls, n, UUIDOID);
	values[13] = WfArray(run->deps, NULL, n, INT4OID);
	values[14] = WfArray(run->step_shards, NULL, n, INT2OID);
	values[15] = BoolGetDatum(WfHistoryRecordsSteps());
	values[16] = WfArray(run->event_names, run->event_name_nulls, n, TEXTOID);
	values[17] = WfArray(run->sleep_seconds, run->sleep_seconds_nulls, n,
						 INT4OID);
	values[18] = WfArray(run->sleep_untils, run->sleep_until_nulls, n,
						 TIMESTAMPTZOID);
	values[19] = WfArray(run->wait_timeouts, run->wait_timeout_nulls, n,
						 INT4OID);
	values[20] = WfArray(run->start_afters, run->start_after_nulls, n,
						 INT4OID);
	values[21] = BoolGetDatum(run->start->name != NULL);
	values[22] = WfArray(run->capped, NULL, n, BOOLOID);
	values[23] = TimestampTzGetDatum(run->deadline);
	nulls[23] = run->has_deadline ? ' ' : 'n';
	values[24] = WfArray(run->pending, NULL, n, INT4OID);
	WfExecute(&steps_plan, steps_sql, 25, steps_types, values, nulls, false, 0);
}

/* InsertCounterShards writes the counter shards of a sharded run. */
static void
InsertCounterShards(NewRun *run)
{
	static SPIPlanPtr shards_plan = NULL;
	static const char *shards_sql =
		"INSERT INTO workflow.workflow_run_counters (workflow_run_id, shard,"
		" steps_active, steps_waiting, steps_blocked, executions_used)"
		" SELECT $1, u.shard, u.active, u.waiting, u.blocked, u.executions"
		" FROM ROWS FROM (pg_catalog.unnest($2::pg_catalog.int2[]),"
		" pg_catalog.unnest($3::pg_catalog.int4[]),"
		" pg_catalog.unnest($4::pg_catalog.int4[]),"
		" pg_catalog.unnest($5::pg_catalog.int4[]),"
		" pg_catalog.unnest($6::pg_catalog.int4[]))"
		" AS u(shard, active, waiting, blocked, executions)";
	static const Oid shards_types[6] = {UUIDOID, INT2ARRAYOID, INT4ARRAYOID,
	INT4ARRAYOID, INT4ARRAYOID, INT4ARRAYOID};
	int			nshards = run->def->counter_shards;
	Datum	   *shard_no = palloc(sizeof(Datum) * nshards);
	Datum	   *counts[4];
	Datum		values[6];

	for (int c = 0; c < 4; c++)
		counts[c] = palloc(sizeof(Datum) * nshards);
	for (int k = 0; k < nshards; k++)
	{
		shard_no[k] = Int16GetDatum((int16) (k + 1));
		for (int c = 0; c < 3; c++)
			counts[c][k] = Int32GetDatum(run->shard_count[c][k + 1]);
		counts[3][k] = Int32GetDatum(run->shard_executions[k + 1]);
	}
	values[0] = UUIDPGetDatum(run->id);
	values[1] = WfArray(shard_no, NULL, nshards, INT2OID);
	for (int c = 0; c < 4; c++)
		values[c + 2] = WfArray(counts[c], NULL, nshards, INT4OID);
	WfExecute(&shards_plan, shards_sql, 6, shards_types, values, NULL,
			  false, 0);
}

/*
 * InsertCopiedSteps gives a continuation's copied steps their outputs from
 * the source run, marks them continued, and writes the step_succeeded
 * that ends each one's history (naming the source).
 */
static void
InsertCopiedSteps(NewRun *run)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET continued = true,"
		" output = c.output, finished_at = pg_catalog.statement_timestamp()"
		" FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.uuid[]),"
		" pg_catalog.unnest($2::pg_catalog.jsonb[])) AS c(id, output)"
		" WHERE s.id" OP("=") "c.id AND s.workflow_run_id" OP("=") "$3"
		" RETURNING s.workflow_run_id, s.step_key)"
		" " WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'step_succeeded',"
		" pg_catalog.jsonb_build_object('continued_from', $4::pg_catalog.uuid)"
		" FROM u WHERE $5";
	static const Oid types[5] = {UUIDARRAYOID, JSONBARRAYOID, UUIDOID, UUIDOID,
	BOOLOID};
	const WfRunContinuation *c = run->start->continuation;
	Datum	   *ids = palloc(sizeof(Datum) * run->ncopied);
	Datum	   *outputs = palloc(sizeof(Datum) * run->ncopied);
	bool	   *output_nulls = palloc(sizeof(bool) * run->ncopied);
	Datum		values[5];
	int			n = 0;

	for (int i = 0; i < run->def->nsteps; i++)
		if (c->copied[i])
		{
			ids[n] = run->ids[i];
			outputs[n] = c->outputs[i];
			output_nulls[n++] = c->output_nulls[i];
		}
	values[0] = WfArray(ids, NULL, n, UUIDOID);
	values[1] = WfArray(outputs, output_nulls, n, JSONBOID);
	values[2] = UUIDPGetDatum(run->id);
	values[3] = UUIDPGetDatum(c->source_run_id);
	values[4] = BoolGetDatum(WfHistoryRecordsSteps());
	WfExecuteAsEngine(&plan, sql, 5, types, values, NULL);
	pfree(ids);
	pfree(outputs);
	pfree(output_nulls);
}

/* InsertEdges writes the run's dependency edges in one statement. */
static void
InsertEdges(NewRun *run)
{
	static SPIPlanPtr edges_plan = NULL;
	static const char *edges_sql =
		"INSERT INTO workflow.workflow_step_dependencies (workflow_run_id,"
		" prerequisite_step_id, dependent_step_id, release_mode)"
		" SELECT $1, u.p, u.d, u.m::workflow.release_mode"
		" FROM ROWS FROM (pg_catalog.unnest($2::pg_catalog.uuid[]),"
		" pg_catalog.unnest($3::pg_catalog.uuid[]),"
		" pg_catalog.unnest($4::pg_catalog.text[])) AS u(p, d, m)";
	static const Oid edges_types[4] = {UUIDOID, UUIDARRAYOID, UUIDARRAYOID,
	TEXTARRAYOID};
	WfDefinition *def = run->def;
	Datum	   *pre = palloc(sizeof(Datum) * def->nedges);
	Datum	   *dep = palloc(sizeof(Datum) * def->nedges);
	Datum	   *mode = palloc(sizeof(Datum) * def->nedges);
	Datum		on_success = CStringGetTextDatum("ON_SUCCESS");
	Datum		on_terminal = CStringGetTextDatum("ON_TERMINAL");
	Datum		values[4];

	for (int e = 0; e < def->nedges; e++)
	{
		pre[e] = run->ids[def->edges[e].prerequisite];
		dep[e] = run->ids[def->edges[e].dependent];
		mode[e] = def->edges[e].on_terminal ? on_terminal : on_success;
	}
	values[0] = UUIDPGetDatum(run->id);
	values[1] = WfArray(pre, NULL, def->nedges, UUIDOID);
	values[2] = WfArray(dep, NULL, def->nedges, UUIDOID);
	values[3] = WfArray(mode, NULL, def->nedges, TEXTOID);
	WfExecute(&edges_plan, edges_sql, 4, edges_types, values, NULL,
			  false, 0);
}

/* InsertRootJobs writes the jobs of the root job steps, copied from them. */
static void
InsertRootJobs(NewRun *run)
{
	static WfDueStatement jobs = {
		WF_STEP_JOBS_INSERT
		" FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1"
		" AND s.id" OP("=") "ANY ($2)"};
	static const Oid jobs_types[2] = {UUIDOID, UUIDARRAYOID};
	Datum		values[2];

	values[0] = UUIDPGetDatum(run->id);
	values[1] = WfArray(run->root_steps, NULL, run->nroot_jobs, UUIDOID);
	WfExecuteDue(&jobs, 2, jobs_types, values, NULL);
}

/*
 * WakeRootSleeps wakes the root sleep steps whose wake time is already
 * past, and releases their dependents: the run may even finish here.
 */
static void
WakeRootSleeps(NewRun *run)
{
	WfSettledStep *woken = palloc(sizeof(WfSettledStep) * run->nroot_sleeps);
	int			nwoken;
	bool		late = WfHoldsLateLocks();

	nwoken = WfWakeDueSleeps(run->root_sleeps, run->nroot_sleeps, woken);
	for (int i = 0; i < nwoken; i++)
		WfNoteStepTerminal(&woken[i].run_id, woken[i].shard,
						   &woken[i].step_id, "SUCCEEDED", woken[i].from);
	WfFinishPending();

	/*
	 * The only run rows this locked are the new run's, which no other
	 * transaction sees before we commit: nobody can be waiting for them,
	 * so later calls of this transaction may still wait.
	 */
	if (!late)
		WfForgetLateLocks();
	pfree(woken);
}

/*
 * RunDeadline works out the run's deadline: deadline_at as given, or
 * deadline_seconds after the start (the statement's timestamp, as every
 * time the run is written with).  A deadline already past is accepted: an
 * idempotent start may come late, and the first sweep ends the run.
 */
static void
RunDeadline(NewRun *run)
{
	WfLimits   *limits = &run->def->limits;

	run->has_deadline = limits->has_deadline_at || limits->deadline_seconds >= 0;
	if (limits->has_deadline_at)
		run->deadline = limits->deadline_at;
	else if (limits->deadline_seconds >= 0)
		run->deadline = GetCurrentStatementStartTimestamp() +
			(TimestampTz) limits->deadline_seconds * USECS_PER_SEC;
	else
		run->deadline = 0;
}

/*
 * InsertRun writes the run, steps, counter shards, edges and root jobs.
 * Returns with *run_id set to the new run's id, or to the existing run's
 * id when the idempotency key matched a run with the same definition and
 * input.
 */
static void
InsertRun(WfDefinition *def, Jsonb *definition, pg_uuid_t *run_id,
		  const RunStart *start)
{
	NewRun		run;

	run.def = def;
	run.definition = definition;
	run.id = run_id;
	run.start = start;

	WfNewUuidV7(run_id);
	RunDeadline(&run);
	NewStepColumns(&run);
	CountStartingSteps(&run);
	if (!InsertRunRow(&run))
	{
		/* the key is taken: same definition returns the first run */
		FindIdempotentRun(&run);
		return;
	}
	InsertSteps(&run);
	if (run.ncopied > 0)
		InsertCopiedSteps(&run);
	InsertCompensations(&run);
	if (def->counter_shards > 0)
		InsertCounterShards(&run);
	if (def->nedges > 0)
		InsertEdges(&run);
	if (run.nroot_jobs > 0)
		InsertRootJobs(&run);
	RecordExhaustedAtStart(&run);
	if (run.nroot_sleeps > 0)
		WakeRootSleeps(&run);
}

/*
 * WfInsertContinuationRun writes a continuation's successor: the run of a
 * checked definition, in the source's organization, with its input, the
 * steps c->copied marks copied from the source as finished; returns its
 * id in *run_id.
 */
void
WfInsertContinuationRun(WfDefinition *def, Jsonb *definition,
						pg_uuid_t *run_id, const WfRunContinuation *c)
{
	RunStart	start;

	memset(&start, 0, sizeof(RunStart));
	start.org = c->org ? UUIDPGetDatum(c->org) : (Datum) 0;
	start.org_null = c->org == NULL;
	start.idem_null = true;
	start.input = c->input;
	start.input_null = c->input_null;
	start.continuation = c;
	InsertRun(def, definition, run_id, &start);
}

/*
 * CheckStartArguments checks the idempotency key and the input of a start
 * (arguments idem_arg and input_arg) and puts them in start; the pin is
 * left empty.
 */
static void
CheckStartArguments(FunctionCallInfo fcinfo, int idem_arg, int input_arg,
					RunStart *start)
{
	memset(start, 0, sizeof(RunStart));
	start->idem_null = PG_ARGISNULL(idem_arg);
	if (!start->idem_null)
	{
		int			len = VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(idem_arg));

		if (len == 0 || len > wf_max_idempotency_key_bytes)
			wf_invalid_argument("idempotency_key must be 1 to %d bytes, not %d",
								wf_max_idempotency_key_bytes, len);
		start->idem = PG_GETARG_DATUM(idem_arg);
	}
	start->input_null = PG_ARGISNULL(input_arg);
	if (!start->input_null)
	{
		start->input = PG_GETARG_DATUM(input_arg);
		WfCheckJsonbSize(start->input, "input");
	}
}

/* workflow_start_run validates a definition and starts a run of it. */
static Datum
StartRun(PG_FUNCTION_ARGS)
{
	Jsonb	   *definition;
	WfDefinition def;
	pg_uuid_t	run_id;
	const pg_uuid_t *org;
	RunStart	start;

	WfRequireReadCommitted();
	if (PG_ARGISNULL(0))
		wf_invalid_definition("definition must not be null");
	definition = PG_GETARG_JSONB_P(0);
	WfParseDefinition(definition, &def);
	CheckStartArguments(fcinfo, 2, 3, &start);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	org = WfCallOrganization(PG_ARGISNULL(1) ? NULL : PG_GETARG_UUID_P(1));
	start.org = org ? UUIDPGetDatum(org) : (Datum) 0;
	start.org_null = org == NULL;
	InsertRun(&def, definition, &run_id, &start);
	SPI_finish();
	PG_RETURN_DATUM(WfUuidDatum(&run_id));
}

/*
 * workflow_start_workflow starts the active version of a registered
 * workflow, as start_run starts its definition, pinned to that version.
 */
static Datum
StartWorkflow(PG_FUNCTION_ARGS)
{
	text	   *name;
	WfActiveVersion active;
	WfDefinition def;
	pg_uuid_t	run_id;
	const pg_uuid_t *org;
	RunStart	start;

	WfRequireReadCommitted();
	name = WfArgText(fcinfo, 0, "name");
	CheckStartArguments(fcinfo, 3, 1, &start);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	org = WfCallOrganization(PG_ARGISNULL(2) ? NULL : PG_GETARG_UUID_P(2));
	start.org = org ? UUIDPGetDatum(org) : (Datum) 0;
	start.org_null = org == NULL;
	if (!WfReadActiveVersion(name, &active))
		wf_error(WF_SQLSTATE_NOT_FOUND, WF_WORKFLOW_NOT_FOUND,
				 "workflow \"%s\" has no active version",
				 text_to_cstring(name));
	start.name = text_to_cstring(name);
	start.version = active.version;
	start.signature = active.signature;
	WfParseDefinition(active.definition, &def);
	InsertRun(&def, active.definition, &run_id, &start);
	SPI_finish();
	PG_RETURN_DATUM(WfUuidDatum(&run_id));
}

/*
 * The SQL-callable entry points: each body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
WF_OWNER_ENTRY(workflow_start_run, StartRun)
WF_OWNER_ENTRY(workflow_start_workflow, StartWorkflow)
