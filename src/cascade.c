/*-------------------------------------------------------------------------
 *
 * cascade.c
 *	  Terminal processing of steps and the dependency release cascade.
 *
 * Row triggers and API functions report each step that became terminal
 * (WfNoteStepTerminal).  At the end of the statement or API call,
 * WfFinishPending processes them all at once:
 *
 *	1. the runs' release locks, shared, in ascending run id;
 *	   the places that job steps of capped runs freed go to their runs'
 *	   oldest parked steps (admission.c, SKIP LOCKED), before any
 *	   dependent or run row is locked;
 *	2. breadth-first over the dependency edges: per level, the dependents
 *	   are locked in ascending id (NOWAIT for ids at or below the highest
 *	   dependent this transaction already holds, turned into
 *	   workflow.release_conflict), their counters updated, and those whose
 *	   last prerequisite finished are released (a job row, a wait for the
 *	   outside or for an event, a sleep) or canceled, which feeds the next
 *	   level, as do released steps that finish at once: a sleep whose wake
 *	   time is past, an event step that finds its event sent (waits.c);
 *	3. the per-run counter changes, applied last (status.c).
 *
 * The caller holds its job rows and its own step rows already, so this is
 * the lock order (docs/reference.md, section 12).  Work is proportional to
 * the edges touched.  Dependents change state in a few places:
 * UpdateDependentGroup releases job and external steps (ENQUEUED with a
 * new job, or WAITING_FOR_EXTERNAL) or cancels any, ParkDependentGroup
 * parks the ready job steps of a capped run (admission.c lets them run,
 * at the run row), HoldDependentGroup holds those of a pinned run whose
 * pin fails, and ReleaseTimerGroup
 * releases sleep and event steps (SLEEPING, or WAITING_FOR_EXTERNAL, with
 * a wake time), so that the statement of the common case knows nothing of
 * timers; each writes the steps' step_released, step_sleeping or
 * step_canceled events in the same statement (history.c).
 *
 * Collected steps are dropped with a rolled-back subtransaction and at the
 * end of the transaction, through the hooks this file registers with
 * xact_state.c; a commit that still holds some fails.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "access/xact.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "workflow.h"

typedef struct WfTerminalStep
{
	pg_uuid_t	step_id;
	pg_uuid_t	run_id;
	bool		succeeded;
	bool		failed;			/* FAILED, not CANCELED */
	bool		frees_place;	/* a capped run's job step whose job ended */
	SubTransactionId subid;		/* where it was noted */
} WfTerminalStep;

/* a compensation job that ended, with where it was noted */
typedef struct WfPendingCompensation
{
	WfCompensationEnd end;
	SubTransactionId subid;
} WfPendingCompensation;

typedef enum WfOutcome
{
	WF_OUTCOME_WAIT = 0,		/* still has pending prerequisites */
	WF_OUTCOME_RELEASE,
	WF_OUTCOME_CANCEL,
	WF_OUTCOME_HOLD,			/* ready, but its run's pin fails */
	WF_OUTCOME_PARK				/* a ready job step of a capped run */
} WfOutcome;

/* one dependent of the current level, with what the level does to it */
typedef struct WfDependent
{
	pg_uuid_t	step_id;
	int32		done;			/* prerequisites that finished */
	int32		unsatisfied;	/* ON_SUCCESS prerequisites that did not
								 * succeed */
	/* read from its locked row */
	WfOutcome	outcome;
	WfStepKind	kind;
	pg_uuid_t	run_id;
	int16		shard;
	bool		pinned;			/* its run is pinned to a registered version */
	bool		capped;			/* a job step of a run with a cap */
	const char *blocked;		/* WF_OUTCOME_HOLD: the pin's verdict */
} WfDependent;

/* a pinned run's pin, checked once per run per call */
typedef struct WfPinCheck
{
	pg_uuid_t	run_id;
	const char *verdict;		/* NULL: the pin holds */
} WfPinCheck;

/* an edge out of the current level */
typedef struct WfEdge
{
	pg_uuid_t	prerequisite;
	pg_uuid_t	dependent;
	bool		on_success;
} WfEdge;

static WfTerminalStep *pending_steps = NULL;
static int	n_pending = 0;
static int	max_pending = 0;
static bool finishing = false;

/* failed repeats of runs that compensate on failure, for the next round */
typedef struct WfDeferredRepeat
{
	pg_uuid_t	step_id;
	pg_uuid_t	run_id;
	int16		shard;
} WfDeferredRepeat;

static WfDeferredRepeat *deferred_repeats = NULL;
static int	n_deferred_repeats = 0;

static WfPinCheck *pin_checks = NULL;
static int	n_pin_checks = 0;

static WfPendingCompensation *pending_compensations = NULL;
static int	n_pending_compensations = 0;
static int	max_pending_compensations = 0;

/* the highest dependent id this transaction holds a lock on */
static LocalTransactionId held_lxid = InvalidLocalTransactionId;
static pg_uuid_t max_held_dependent;

static bool CascadeUnfinished(void);
static void CascadeAbortSub(SubTransactionId subid);
static void CascadeReset(void);
static int	CompareTerminalStep(const void *a, const void *b);
static int	CompareRunOfTerminalStep(const void *a, const void *b);
static void FinishCollected(void);
static int	CompareEdgeByDependent(const void *a, const void *b);
static void CascadeLevel(WfTerminalStep *level, int nlevel,
						 WfTerminalStep **next, int *nnext);
static uint64 LevelEdges(WfTerminalStep *level, int nlevel, WfEdge **edges);
static int	CollectDependents(WfTerminalStep *level, int nlevel,
							  WfEdge *edges, uint64 nedges,
							  WfDependent **deps);
static void LockDependents(WfDependent *deps, int ndeps);
static void DecideOutcomes(WfDependent *deps, int ndeps);
static void UpdateDependents(WfDependent *deps, int ndeps);
static void ApplyOutcomes(WfDependent *deps, int ndeps,
						  WfTerminalStep **next, int *nnext);
static void UpdateDependentGroup(pg_uuid_t *ids, int n, int32 done,
								 int32 unsatisfied, WfOutcome outcome);
static bool StartsTimer(const WfDependent *dep);
static WfOutcome GroupOutcome(const WfDependent *dep);
static void ReleaseTimerGroup(pg_uuid_t *ids, int n, int32 done,
							  int32 unsatisfied);
static Datum IdArray(const pg_uuid_t *ids, int n);
static int	SettleRepeats(const pg_uuid_t *ids, int n, WfTerminalStep *next,
						  int nnext);
static void DeferRepeat(const WfRepeat *rep);
static void NoteDeferredRepeats(void);
static void StartGeneration(const WfRepeat *rep);
static WfCounter ReleasedCounter(WfStepKind kind);
static int	SettleReleasedWaits(pg_uuid_t *sleeps, int nsleeps,
								pg_uuid_t *events, int nevents,
								WfTerminalStep *next, int nnext);
static WfTerminalStep *AppendPending(void);
static const char *RunPinVerdict(const pg_uuid_t *run_id);
static void HoldDependentGroup(pg_uuid_t *ids, int n, int32 done,
							   int32 unsatisfied);
static void ParkDependentGroup(pg_uuid_t *ids, int n, int32 done,
							   int32 unsatisfied);
static void LockRunsOfLevel(WfTerminalStep *level, int nlevel,
							WfCompensationEnd *ends, int nends);
static int	CompareCompensationEnd(const void *a, const void *b);
static int	CompensateOnFailure(WfTerminalStep *level, int nlevel,
								pg_uuid_t **runs);
static bool RunCompensatesOnFailure(const pg_uuid_t *run_id);
static void StartCompensationOnFailure(const pg_uuid_t *run_id);
static void HandOffFreedPlaces(const WfTerminalStep *level, int nlevel,
							   const pg_uuid_t *compensating,
							   int ncompensating);

/*
 * WfNoteStepTerminal records that a step just became terminal: its run's
 * counters move from the bucket it left, and its dependents are visited
 * when the statement ends.
 */
void
WfNoteStepTerminal(const pg_uuid_t *run_id, int16 shard,
				   const pg_uuid_t *step_id, const char *new_status,
				   WfCounter from)
{
	WfTerminalStep *step;
	WfCounter	to;

	if (strcmp(new_status, "SUCCEEDED") == 0)
		to = WF_COUNT_SUCCEEDED;
	else if (strcmp(new_status, "FAILED") == 0)
		to = WF_COUNT_FAILED;
	else if (strcmp(new_status, "CANCELED") == 0)
		to = WF_COUNT_CANCELED;
	else
		elog(ERROR, "step status %s is not terminal", new_status);

	WfRunDeltaAdd(run_id, shard, from, -1);
	WfRunDeltaAdd(run_id, shard, to, 1);

	step = AppendPending();
	step->step_id = *step_id;
	step->run_id = *run_id;
	step->succeeded = (to == WF_COUNT_SUCCEEDED);
	step->failed = (to == WF_COUNT_FAILED);
}

/*
 * WfNoteJobStepTerminal records that a job step whose job ended is
 * terminal, as WfNoteStepTerminal does; a step of a capped run frees its
 * place under concurrency_cap, which the end of the statement hands to the
 * run's oldest parked step before the cascade (HandOffFreedPlaces).  Not a
 * step noted while the collected steps are processed (a user's trigger
 * ending a job the cascade made): the round under way writes its counters
 * to the run row before the next round sees it, and the run row, not the
 * hand-off, gives its place.
 */
void
WfNoteJobStepTerminal(const pg_uuid_t *run_id, int16 shard,
					  const pg_uuid_t *step_id, const char *new_status,
					  bool capped)
{
	WfNoteStepTerminal(run_id, shard, step_id, new_status, WF_COUNT_ACTIVE);
	pending_steps[n_pending - 1].frees_place = capped && !finishing;
}

/*
 * WfNoteCompensationEnded records that a compensation job ended; its step
 * is settled, and the run's chain goes on, when the statement ends.
 */
void
WfNoteCompensationEnded(const WfCompensationEnd *end)
{
	MemoryContext old = MemoryContextSwitchTo(WfPendingContext());
	WfPendingCompensation *p;

	if (n_pending_compensations == max_pending_compensations)
	{
		max_pending_compensations = max_pending_compensations == 0 ? 8 :
			max_pending_compensations * 2;
		pending_compensations = pending_compensations == NULL ?
			palloc(sizeof(WfPendingCompensation) * max_pending_compensations) :
			repalloc(pending_compensations,
					 sizeof(WfPendingCompensation) * max_pending_compensations);
	}
	p = &pending_compensations[n_pending_compensations++];
	p->end = *end;
	p->end.error_code = end->error_code ? pstrdup(end->error_code) : NULL;
	p->end.error_message = end->error_message ?
		pstrdup(end->error_message) : NULL;
	p->subid = GetCurrentSubTransactionId();
	MemoryContextSwitchTo(old);
}

/*
 * AppendPending returns a new entry at the end of the collected steps,
 * tagged with the current subtransaction.
 */
static WfTerminalStep *
AppendPending(void)
{
	WfTerminalStep *step;

	if (n_pending == max_pending)
	{
		MemoryContext old = MemoryContextSwitchTo(WfPendingContext());

		max_pending = max_pending == 0 ? 16 : max_pending * 2;
		if (pending_steps == NULL)
			pending_steps = palloc(sizeof(WfTerminalStep) * max_pending);
		else
			pending_steps = repalloc(pending_steps,
									 sizeof(WfTerminalStep) * max_pending);
		MemoryContextSwitchTo(old);
	}
	step = &pending_steps[n_pending++];
	step->frees_place = false;
	step->subid = GetCurrentSubTransactionId();
	return step;
}

/*
 * WfHasPending says whether terminal steps or counter changes wait to be
 * processed.
 */
bool
WfHasPending(void)
{
	return n_pending > 0 || n_pending_compensations > 0 ||
		n_deferred_repeats > 0 || WfHasRunDeltas();
}

/* Whether terminal steps were collected and never processed. */
static bool
CascadeUnfinished(void)
{
	return n_pending > 0 || n_pending_compensations > 0 ||
		n_deferred_repeats > 0;
}

/* CascadeAbortSub forgets the steps an aborted subtransaction collected. */
static void
CascadeAbortSub(SubTransactionId subid)
{
	int			kept = 0;

	for (int i = 0; i < n_pending; i++)
		if (pending_steps[i].subid < subid)
			pending_steps[kept++] = pending_steps[i];
	n_pending = kept;
	kept = 0;
	for (int i = 0; i < n_pending_compensations; i++)
		if (pending_compensations[i].subid < subid)
			pending_compensations[kept++] = pending_compensations[i];
	n_pending_compensations = kept;
}

/*
 * CascadeReset forgets collected steps; their memory, the pending context,
 * is reset by the caller.
 */
static void
CascadeReset(void)
{
	pending_steps = NULL;
	n_pending = 0;
	max_pending = 0;
	finishing = false;
	pin_checks = NULL;
	n_pin_checks = 0;
	pending_compensations = NULL;
	n_pending_compensations = 0;
	max_pending_compensations = 0;
	deferred_repeats = NULL;
	n_deferred_repeats = 0;
}

/* WfCascadeInit registers the cascade's end-of-transaction hooks. */
void
WfCascadeInit(void)
{
	static const WfXactHooks hooks = {
		.unfinished = CascadeUnfinished,
		.reset = CascadeReset,
		.abort_sub = CascadeAbortSub,
	};

	WfRegisterXactHooks(&hooks);
}

/* CompareTerminalStep orders terminal steps by step id. */
static int
CompareTerminalStep(const void *a, const void *b)
{
	return WfUuidCompare(&((const WfTerminalStep *) a)->step_id,
						 &((const WfTerminalStep *) b)->step_id);
}

/* CompareRunOfTerminalStep orders terminal steps by run id. */
static int
CompareRunOfTerminalStep(const void *a, const void *b)
{
	return WfUuidCompare(&((const WfTerminalStep *) a)->run_id,
						 &((const WfTerminalStep *) b)->run_id);
}

/* CompareCompensationEnd orders ended compensation jobs by run, then step. */
static int
CompareCompensationEnd(const void *a, const void *b)
{
	const WfCompensationEnd *x = (const WfCompensationEnd *) a;
	const WfCompensationEnd *y = (const WfCompensationEnd *) b;
	int			cmp = WfUuidCompare(&x->run_id, &y->run_id);

	return cmp != 0 ? cmp : WfUuidCompare(&x->step_id, &y->step_id);
}

/*
 * LockRunsOfLevel takes the release locks, shared, of the runs of the
 * level's steps and of the ended compensation jobs, in ascending run id.
 */
static void
LockRunsOfLevel(WfTerminalStep *level, int nlevel, WfCompensationEnd *ends,
				int nends)
{
	pg_uuid_t  *runs = palloc(sizeof(pg_uuid_t) * Max(nlevel + nends, 1));
	int			nruns = 0;

	for (int i = 0; i < nlevel; i++)
		runs[nruns++] = level[i].run_id;
	for (int i = 0; i < nends; i++)
		runs[nruns++] = ends[i].run_id;
	qsort(runs, nruns, sizeof(pg_uuid_t), WfUuidCmpQsort);
	for (int i = 0; i < nruns; i++)
	{
		if (i > 0 && WfUuidCompare(&runs[i], &runs[i - 1]) == 0)
			continue;
		WfLockRunRelease(&runs[i], false, true);
	}
	pfree(runs);
}

/*
 * RunCompensatesOnFailure says whether a run was defined with
 * "compensate_on": "failure" and still goes forward, or is blocked with
 * work in flight.  Read only for runs in which a step failed.
 */
static bool
RunCompensatesOnFailure(const pg_uuid_t *run_id)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT r.compensate_on_failure AND r.status" OP("=")
		" ANY ('{RUNNING,WAITING_FOR_EXTERNAL,BLOCKED_MISSING_HANDLER,"
		"BLOCKED_MISSING_VERSION,BLOCKED_SIGNATURE_MISMATCH}'::workflow.run_status[])"
		" FROM workflow.workflow_runs r WHERE r.id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 0);
	return SPI_processed == 1 && WfResultBool(0, 1);
}

/*
 * StartCompensationOnFailure starts to undo a run in the transaction in
 * which one of its steps failed, before the cascade releases anything
 * more.  That transaction holds the run's release lock shared and rows
 * further down the lock order, so it takes the lock exclusive and the
 * run's live jobs without waiting, and raises workflow.release_conflict
 * (retry the call) when another transaction holds them.
 */
static void
StartCompensationOnFailure(const pg_uuid_t *run_id)
{
	Datum	   *jobs;
	uint64		njobs;

	if (!WfLockRunRelease(run_id, true, false))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_RETRY),
				 errmsg(WF_RELEASE_CONFLICT ": run %s is busy; its compensation cannot start now",
						WfUuidString(run_id)),
				 errhint("Retry the transaction.")));
	njobs = WfLockLiveJobs(run_id, true, &jobs);
	WfStartCompensation(run_id, "a step failed", WF_CALL_COMPENSATE_ON_FAILURE,
						true);
	WfCancelJobs(jobs, njobs, WF_REASON_RUN_COMPENSATING,
				 CStringGetTextDatum("a step failed"), false);
}

/*
 * CompensateOnFailure starts the compensation of each run of the level
 * that failed a step and compensates on failure; returns those runs.
 */
static int
CompensateOnFailure(WfTerminalStep *level, int nlevel, pg_uuid_t **runs)
{
	int			nruns = 0;

	pg_uuid_t	checked;
	bool		any_checked = false;

	*runs = palloc(sizeof(pg_uuid_t) * Max(nlevel, 1));
	/* level is in ascending run id: each run is looked at once */
	for (int i = 0; i < nlevel; i++)
	{
		if (!level[i].failed ||
			(any_checked && WfUuidCompare(&checked, &level[i].run_id) == 0))
			continue;
		checked = level[i].run_id;
		any_checked = true;
		if (!RunCompensatesOnFailure(&level[i].run_id))
			continue;
		StartCompensationOnFailure(&level[i].run_id);
		(*runs)[nruns++] = level[i].run_id;
	}
	return nruns;
}

/*
 * HandOffFreedPlaces gives the places that a level's capped job steps freed
 * to their runs' oldest parked steps (admission.c), run by run, and counts
 * the steps it let run in their runs' deltas.  A run that starts its
 * compensation gives nothing away.  The level is sorted by run.
 */
static void
HandOffFreedPlaces(const WfTerminalStep *level, int nlevel,
				   const pg_uuid_t *compensating, int ncompensating)
{
	for (int i = 0; i < nlevel;)
	{
		const pg_uuid_t *run_id = &level[i].run_id;
		int32		freed = 0;
		int32		started;
		bool		undone = false;

		for (; i < nlevel && WfUuidCompare(&level[i].run_id, run_id) == 0; i++)
			freed += level[i].frees_place ? 1 : 0;
		for (int c = 0; c < ncompensating && !undone; c++)
			undone = WfUuidCompare(&compensating[c], run_id) == 0;
		if (freed == 0 || undone)
			continue;
		/* a capped run keeps its counters on its run row: no shards */
		started = WfHandOffPlaces(run_id, freed);
		if (started == 0)
			continue;
		WfRunDeltaAdd(run_id, 0, WF_COUNT_PARKED, -started);
		WfRunDeltaAdd(run_id, 0, WF_COUNT_ACTIVE, started);
		WfRunDeltaAdd(run_id, 0, WF_COUNT_EXECUTIONS, started);
	}
}

/*
 * FinishCollected processes the steps collected so far: release locks,
 * compensations a failure starts, the places capped job steps freed,
 * cascade, run counters, compensation chains.
 */
static void
FinishCollected(void)
{
	WfTerminalStep *level;
	int			nlevel;
	WfCompensationEnd *ends;
	int			nends;
	pg_uuid_t  *compensating;
	int			ncompensating;

	/* copy out: the collected arrays live in memory that is reset later */
	nlevel = n_pending;
	level = palloc(sizeof(WfTerminalStep) * Max(nlevel, 1));
	if (nlevel > 0)
		memcpy(level, pending_steps, sizeof(WfTerminalStep) * nlevel);
	n_pending = 0;
	nends = n_pending_compensations;
	ends = palloc(sizeof(WfCompensationEnd) * Max(nends, 1));
	for (int i = 0; i < nends; i++)
		ends[i] = pending_compensations[i].end;
	n_pending_compensations = 0;

	/* 1. release locks, shared, ascending run id */
	qsort(level, nlevel, sizeof(WfTerminalStep), CompareRunOfTerminalStep);
	qsort(ends, nends, sizeof(WfCompensationEnd), CompareCompensationEnd);
	LockRunsOfLevel(level, nlevel, ends, nends);

	/* 2. a failure undoes its run before anything more is released */
	ncompensating = CompensateOnFailure(level, nlevel, &compensating);

	/* 3. the places of capped runs' finished job steps, to parked steps */
	HandOffFreedPlaces(level, nlevel, compensating, ncompensating);

	/* 4. breadth-first release and cancellation */
	while (nlevel > 0)
	{
		WfTerminalStep *next = NULL;
		int			nnext = 0;

		CascadeLevel(level, nlevel, &next, &nnext);
		pfree(level);
		level = next;
		nlevel = nnext;
	}

	/* 5. run counters and status, ascending run id */
	WfApplyRunDeltas();

	/* 6. the compensation chains: each run's next job, or its end */
	for (int i = 0; i < ncompensating; i++)
		WfAdvanceCompensation(&compensating[i], 0);
	for (int i = 0; i < nends; i++)
		WfSettleCompensationJob(&ends[i]);

	/* 7. failed repeats whose failure starts their run's compensation */
	NoteDeferredRepeats();
}

/*
 * WfFinishPending processes every step collected since the last call.  The
 * caller is connected to SPI.  Steps that a user's trigger finishes while
 * this runs are processed in a further round, not lost.
 */
void
WfFinishPending(void)
{
	if (finishing || !WfHasPending())
		return;

	finishing = true;
	PG_TRY();
	{
		while (WfHasPending())
			FinishCollected();
	}
	PG_FINALLY();
	{
		finishing = false;
	}
	PG_END_TRY();

	CascadeReset();
	WfRunDeltasReset();
	MemoryContextReset(WfPendingContext());
}

/* CompareEdgeByDependent orders edges by dependent step id. */
static int
CompareEdgeByDependent(const void *a, const void *b)
{
	return WfUuidCompare(&((const WfEdge *) a)->dependent,
						 &((const WfEdge *) b)->dependent);
}

/*
 * CascadeLevel visits the dependents of one level of terminal steps and
 * returns the dependents it canceled as the next level.
 */
static void
CascadeLevel(WfTerminalStep *level, int nlevel, WfTerminalStep **next,
			 int *nnext)
{
	WfEdge	   *edges;
	uint64		nedges;
	WfDependent *deps;
	int			ndeps;

	nedges = LevelEdges(level, nlevel, &edges);
	if (nedges == 0)
		return;
	ndeps = CollectDependents(level, nlevel, edges, nedges, &deps);
	pfree(edges);

	LockDependents(deps, ndeps);
	DecideOutcomes(deps, ndeps);
	UpdateDependents(deps, ndeps);
	ApplyOutcomes(deps, ndeps, next, nnext);
	pfree(deps);
}

/* LevelEdges reads the edges out of the level's steps; returns how many. */
static uint64
LevelEdges(WfTerminalStep *level, int nlevel, WfEdge **edges)
{
	static SPIPlanPtr edges_plan = NULL;
	static const char *edges_sql =
		"SELECT e.prerequisite_step_id, e.dependent_step_id,"
		" e.release_mode" OP("=") "'ON_SUCCESS'"
		" FROM workflow.workflow_step_dependencies e"
		" WHERE e.prerequisite_step_id" OP("=") "ANY ($1)";
	static const Oid edges_types[1] = {UUIDARRAYOID};
	Datum	   *ids;
	Datum		values[1];
	uint64		nedges;

	ids = palloc(sizeof(Datum) * nlevel);
	for (int i = 0; i < nlevel; i++)
		ids[i] = UUIDPGetDatum(&level[i].step_id);
	values[0] = WfArray(ids, NULL, nlevel, UUIDOID);
	WfExecute(&edges_plan, edges_sql, 1, edges_types, values, NULL, false, 0);
	nedges = SPI_processed;
	if (nedges == 0)
		return 0;

	*edges = palloc(sizeof(WfEdge) * nedges);
	for (uint64 i = 0; i < nedges; i++)
	{
		WfResultUuid(i, 1, &(*edges)[i].prerequisite);
		WfResultUuid(i, 2, &(*edges)[i].dependent);
		(*edges)[i].on_success = WfResultBool(i, 3);
	}
	return nedges;
}

/*
 * CollectDependents counts, for each dependent of the edges, how many of
 * its prerequisites this level finished and how many of its ON_SUCCESS
 * prerequisites did not succeed.  Returns the dependents in ascending id.
 */
static int
CollectDependents(WfTerminalStep *level, int nlevel, WfEdge *edges,
				  uint64 nedges, WfDependent **deps_out)
{
	WfDependent *deps;
	int			ndeps = 0;

	qsort(level, nlevel, sizeof(WfTerminalStep), CompareTerminalStep);
	qsort(edges, nedges, sizeof(WfEdge), CompareEdgeByDependent);
	deps = palloc(sizeof(WfDependent) * nedges);
	for (uint64 i = 0; i < nedges; i++)
	{
		WfTerminalStep key;
		WfTerminalStep *prereq;

		if (ndeps == 0 ||
			WfUuidCompare(&deps[ndeps - 1].step_id, &edges[i].dependent) != 0)
		{
			deps[ndeps].step_id = edges[i].dependent;
			deps[ndeps].done = 0;
			deps[ndeps].unsatisfied = 0;
			ndeps++;
		}
		key.step_id = edges[i].prerequisite;
		prereq = bsearch(&key, level, nlevel, sizeof(WfTerminalStep),
						 CompareTerminalStep);
		if (prereq == NULL)
			elog(ERROR, "edge from a step outside the cascade level");
		deps[ndeps - 1].done++;
		if (edges[i].on_success && !prereq->succeeded)
			deps[ndeps - 1].unsatisfied++;
	}
	*deps_out = deps;
	return ndeps;
}

/*
 * WfNoteHeldStep records that this transaction holds a step row it locked
 * outside the cascade (send_event's event steps, fire_timers' fired
 * steps): the cascade then takes dependents at or below it NOWAIT.
 */
void
WfNoteHeldStep(const pg_uuid_t *step_id)
{
	if (held_lxid != MyProc->lxid)
	{
		held_lxid = MyProc->lxid;
		memset(&max_held_dependent, 0, sizeof(pg_uuid_t));
	}
	if (WfUuidCompare(step_id, &max_held_dependent) > 0)
		max_held_dependent = *step_id;
}

/*
 * LockDependents locks the dependents in ascending id and leaves their
 * current status and counters in SPI_tuptable, in the same order as deps.
 * Rows at or below the highest dependent already held are taken NOWAIT:
 * waiting for them could close a cycle with a transaction that holds one
 * of them and waits for a row we hold.
 */
static void
LockDependents(WfDependent *deps, int ndeps)
{
	static SPIPlanPtr lock_plan = NULL;
	static SPIPlanPtr lock_nowait_plan = NULL;
	static const char *lock_sql =
		"SELECT s.id, s.status::pg_catalog.text, s.dependency_count_pending,"
		" s.dependency_count_unsatisfied, s.execution_kind::pg_catalog.text,"
		" s.workflow_run_id, s.counter_shard::pg_catalog.int4, s.pinned,"
		" s.capped"
		" FROM workflow.workflow_steps s"
		" WHERE s.id" OP("=") "ANY ($1)"
		" ORDER BY s.id FOR NO KEY UPDATE";
	static const char *lock_nowait_sql =
		"SELECT s.id"
		" FROM workflow.workflow_steps s"
		" WHERE s.id" OP("=") "ANY ($1)"
		" ORDER BY s.id FOR NO KEY UPDATE NOWAIT";
	static const Oid lock_types[1] = {UUIDARRAYOID};
	Datum	   *ids = palloc(sizeof(Datum) * ndeps);
	Datum		values[1];
	int			nlow = 0;

	if (held_lxid != MyProc->lxid)
	{
		held_lxid = MyProc->lxid;
		memset(&max_held_dependent, 0, sizeof(pg_uuid_t));
	}

	/*
	 * deps are sorted by id: the low ones form a prefix.  After an earlier
	 * call left run rows locked, every one is low.
	 */
	for (int i = 0; i < ndeps; i++)
	{
		ids[i] = UUIDPGetDatum(&deps[i].step_id);
		if (WfHoldsLateLocks() ||
			WfUuidCompare(&deps[i].step_id, &max_held_dependent) <= 0)
			nlow = i + 1;
	}
	if (nlow > 0)
	{
		values[0] = WfArray(ids, NULL, nlow, UUIDOID);
		WfExecuteNowait(&lock_nowait_plan, lock_nowait_sql, 1, lock_types,
						values, NULL);
	}

	/* the full set: the low rows are ours already, so this never waits on them */
	values[0] = WfArray(ids, NULL, ndeps, UUIDOID);
	WfExecute(&lock_plan, lock_sql, 1, lock_types, values, NULL, false, 0);
	if (WfUuidCompare(&deps[ndeps - 1].step_id, &max_held_dependent) > 0)
		max_held_dependent = deps[ndeps - 1].step_id;
	pfree(ids);
}

/*
 * DecideOutcomes reads each dependent's row as LockDependents left it and
 * decides what this level does to it: a BLOCKED step whose last
 * prerequisite finished is released, or canceled when an ON_SUCCESS
 * prerequisite did not succeed, or held when its run's pin fails; any
 * other waits.
 */
static void
DecideOutcomes(WfDependent *deps, int ndeps)
{
	if (SPI_processed != (uint64) ndeps)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": a dependent step is missing")));

	for (int i = 0; i < ndeps; i++)
	{
		char	   *status = WfResultText(i, 2);
		int32		pending = WfResultInt32(i, 3);
		int32		unsatisfied = WfResultInt32(i, 4);

		deps[i].kind = WfStepKindFromLabel(WfResultText(i, 5));
		WfResultUuid(i, 6, &deps[i].run_id);
		deps[i].shard = (int16) WfResultInt32(i, 7);
		deps[i].pinned = WfResultBool(i, 8);
		deps[i].capped = WfResultBool(i, 9);
		deps[i].blocked = NULL;
		if (strcmp(status, "BLOCKED") != 0)
		{
			/*
			 * A dependent that is no longer blocked took its prerequisites'
			 * outcomes when it was released: one kept by retry_run while a
			 * prerequisite of it was reset (an ON_TERMINAL dependent that
			 * went on after the prerequisite failed).  The prerequisite's
			 * new outcome changes nothing of it.
			 */
			deps[i].done = 0;
			deps[i].unsatisfied = 0;
			deps[i].outcome = WF_OUTCOME_WAIT;
			continue;
		}
		pending -= deps[i].done;
		unsatisfied += deps[i].unsatisfied;
		if (pending < 0)
			ereport(ERROR,
					(errcode(WF_SQLSTATE_INTERNAL),
					 errmsg(WF_INTERNAL_STATE ": dependency counter of step %s went below zero",
							WfUuidString(&deps[i].step_id))));
		if (pending > 0)
			deps[i].outcome = WF_OUTCOME_WAIT;
		else if (unsatisfied > 0)
			deps[i].outcome = WF_OUTCOME_CANCEL;
		else
			deps[i].outcome = WF_OUTCOME_RELEASE;
	}

	/*
	 * the pin, read only now: the run lookups leave SPI_tuptable; a step
	 * the pin lets go that counts against a cap waits for room
	 */
	for (int i = 0; i < ndeps; i++)
	{
		if (deps[i].outcome == WF_OUTCOME_RELEASE && deps[i].pinned &&
			(deps[i].blocked = RunPinVerdict(&deps[i].run_id)) != NULL)
			deps[i].outcome = WF_OUTCOME_HOLD;
		else if (deps[i].outcome == WF_OUTCOME_RELEASE && deps[i].capped)
			deps[i].outcome = WF_OUTCOME_PARK;
	}
}

/*
 * RunPinVerdict checks a pinned run's pin once per call: NULL when it
 * holds, else the BLOCKED_* status the run is held in (pins.c).
 */
static const char *
RunPinVerdict(const pg_uuid_t *run_id)
{
	MemoryContext old;
	const char *verdict;

	for (int i = 0; i < n_pin_checks; i++)
		if (WfUuidCompare(&pin_checks[i].run_id, run_id) == 0)
			return pin_checks[i].verdict;

	verdict = WfPinVerdict(run_id);
	old = MemoryContextSwitchTo(WfPendingContext());
	if (pin_checks == NULL)
		pin_checks = palloc(sizeof(WfPinCheck) * 8);
	else if (n_pin_checks % 8 == 0)
		pin_checks = repalloc(pin_checks,
							  sizeof(WfPinCheck) * (n_pin_checks + 8));
	MemoryContextSwitchTo(old);
	pin_checks[n_pin_checks].run_id = *run_id;
	pin_checks[n_pin_checks].verdict = verdict;
	n_pin_checks++;
	return verdict;
}

/*
 * StartsTimer says whether this level releases a sleep or event step, which
 * the statement of ReleaseTimerGroup releases: job and external steps keep
 * a statement that knows nothing of timers, planned as cheaply as before.
 */
static bool
StartsTimer(const WfDependent *dep)
{
	return dep->outcome == WF_OUTCOME_RELEASE &&
		(dep->kind == WF_KIND_SLEEP || dep->kind == WF_KIND_EVENT);
}

/*
 * GroupOutcome is what UpdateDependents writes for a dependent: a released
 * repeat step only has its counters updated here; repeat.c settles it.
 */
static WfOutcome
GroupOutcome(const WfDependent *dep)
{
	if (dep->outcome == WF_OUTCOME_RELEASE && dep->kind == WF_KIND_REPEAT)
		return WF_OUTCOME_WAIT;
	return dep->outcome;
}

/*
 * UpdateDependents writes the level's effect on its dependents: one UPDATE
 * per distinct (done, unsatisfied, outcome, starts a timer).  A fan-out or a chain has one
 * group, so this is usually a single statement.
 */
static void
UpdateDependents(WfDependent *deps, int ndeps)
{
	pg_uuid_t  *group_ids = palloc(sizeof(pg_uuid_t) * ndeps);
	bool	   *grouped = palloc0(sizeof(bool) * ndeps);

	for (int i = 0; i < ndeps; i++)
	{
		int			ngroup = 0;

		if (grouped[i])
			continue;
		for (int j = i; j < ndeps; j++)
		{
			if (grouped[j] || deps[j].done != deps[i].done ||
				deps[j].unsatisfied != deps[i].unsatisfied ||
				GroupOutcome(&deps[j]) != GroupOutcome(&deps[i]) ||
				StartsTimer(&deps[j]) != StartsTimer(&deps[i]))
				continue;
			grouped[j] = true;
			group_ids[ngroup++] = deps[j].step_id;
		}
		if (StartsTimer(&deps[i]))
			ReleaseTimerGroup(group_ids, ngroup, deps[i].done,
							  deps[i].unsatisfied);
		else if (GroupOutcome(&deps[i]) == WF_OUTCOME_HOLD)
			HoldDependentGroup(group_ids, ngroup, deps[i].done,
							   deps[i].unsatisfied);
		else if (GroupOutcome(&deps[i]) == WF_OUTCOME_PARK)
			ParkDependentGroup(group_ids, ngroup, deps[i].done,
							   deps[i].unsatisfied);
		else
			UpdateDependentGroup(group_ids, ngroup, deps[i].done,
								 deps[i].unsatisfied, GroupOutcome(&deps[i]));
	}
	pfree(grouped);
	pfree(group_ids);
}

/* ReleasedCounter is the counter a released step of a kind counts in. */
static WfCounter
ReleasedCounter(WfStepKind kind)
{
	return (kind == WF_KIND_JOB || kind == WF_KIND_SLEEP) ?
		WF_COUNT_ACTIVE : WF_COUNT_WAITING;
}

/*
 * SettleReleasedWaits wakes the released sleep steps already due and
 * lets the released event steps consume events already sent; the steps
 * that succeed so move their counters and join next, from index nnext on.
 * Returns the new length of next.
 */
static int
SettleReleasedWaits(pg_uuid_t *sleeps, int nsleeps, pg_uuid_t *events,
					int nevents, WfTerminalStep *next, int nnext)
{
	WfSettledStep *settled;
	int			nsettled = 0;

	settled = palloc(sizeof(WfSettledStep) * Max(nsleeps + nevents, 1));
	if (nsleeps > 0)
		nsettled += WfWakeDueSleeps(sleeps, nsleeps, settled);
	if (nevents > 0)
		nsettled += WfConsumeSentEvents(events, nevents, settled + nsettled);
	for (int i = 0; i < nsettled; i++)
	{
		WfSettledStep *st = &settled[i];

		WfRunDeltaAdd(&st->run_id, st->shard, st->from, -1);
		WfRunDeltaAdd(&st->run_id, st->shard, WF_COUNT_SUCCEEDED, 1);
		next[nnext].step_id = st->step_id;
		next[nnext].run_id = st->run_id;
		next[nnext].succeeded = true;
		next[nnext].failed = false;
		nnext++;
	}
	pfree(settled);
	return nnext;
}

/*
 * ApplyOutcomes moves the counters of the released and canceled
 * dependents, creates the jobs of the released job steps, starts the
 * released sleeps and event waits, and returns as the next level the
 * canceled dependents and the released ones that finished at once.
 */
static void
ApplyOutcomes(WfDependent *deps, int ndeps, WfTerminalStep **next,
			  int *nnext)
{
	WfTerminalStep *finished = palloc(sizeof(WfTerminalStep) * ndeps);
	int			nfinished = 0;
	pg_uuid_t  *released = palloc(sizeof(pg_uuid_t) * ndeps * 4);
	pg_uuid_t  *release_jobs = released;
	pg_uuid_t  *release_sleeps = released + ndeps;
	pg_uuid_t  *release_events = released + 2 * ndeps;
	pg_uuid_t  *release_repeats = released + 3 * ndeps;
	int			njobs = 0;
	int			nsleeps = 0;
	int			nevents = 0;
	int			nrepeats = 0;

	for (int i = 0; i < ndeps; i++)
	{
		WfDependent *dep = &deps[i];

		switch (dep->outcome)
		{
			case WF_OUTCOME_WAIT:
				break;
			case WF_OUTCOME_HOLD:
				WfRunDeltaBlock(&dep->run_id, dep->shard, dep->blocked);
				break;
			case WF_OUTCOME_PARK:
				/* admission, at the run row, lets it run (status.c) */
				WfRunDeltaAdd(&dep->run_id, dep->shard, WF_COUNT_BLOCKED, -1);
				WfRunDeltaAdd(&dep->run_id, dep->shard, WF_COUNT_PARKED, 1);
				break;
			case WF_OUTCOME_RELEASE:
				if (dep->kind == WF_KIND_REPEAT)
				{
					/* BLOCKED until repeat.c settles it */
					release_repeats[nrepeats++] = dep->step_id;
					break;
				}
				WfRunDeltaAdd(&dep->run_id, dep->shard, WF_COUNT_BLOCKED, -1);
				WfRunDeltaAdd(&dep->run_id, dep->shard,
							  ReleasedCounter(dep->kind), 1);
				if (dep->kind == WF_KIND_JOB)
				{
					WfRunDeltaAdd(&dep->run_id, dep->shard,
								  WF_COUNT_EXECUTIONS, 1);
					release_jobs[njobs++] = dep->step_id;
				}
				else if (dep->kind == WF_KIND_SLEEP)
					release_sleeps[nsleeps++] = dep->step_id;
				else if (dep->kind == WF_KIND_EVENT)
					release_events[nevents++] = dep->step_id;
				break;
			case WF_OUTCOME_CANCEL:
				WfRunDeltaAdd(&dep->run_id, dep->shard, WF_COUNT_BLOCKED, -1);
				WfRunDeltaAdd(&dep->run_id, dep->shard, WF_COUNT_CANCELED, 1);
				finished[nfinished].step_id = dep->step_id;
				finished[nfinished].run_id = dep->run_id;
				finished[nfinished].succeeded = false;
				finished[nfinished].failed = false;
				nfinished++;
				break;
		}
	}
	if (njobs > 0)
		WfInsertStepJobs(release_jobs, njobs);
	if (nsleeps > 0 || nevents > 0)
		nfinished = SettleReleasedWaits(release_sleeps, nsleeps,
										release_events, nevents,
										finished, nfinished);
	if (nrepeats > 0)
		nfinished = SettleRepeats(release_repeats, nrepeats, finished, nfinished);

	pfree(released);
	*next = finished;
	*nnext = nfinished;
}

/*
 * SettleRepeats settles the released repeat steps, locked and BLOCKED
 * (repeat.c): one that goes round starts its loop's next generation; one
 * that ends joins next, from index nnext on, so that its dependents are
 * visited in this same round, before the run's counters are written (the
 * run never shows a status between the two), as a released sleep that is
 * due does.  A repeat that fails in a run that compensates on failure is
 * kept for the next round instead (deferred_repeats): its failure must
 * start the compensation there, before the run could finish in this one.
 * Returns the new length of next.
 */
static int
SettleRepeats(const pg_uuid_t *ids, int n, WfTerminalStep *next, int nnext)
{
	for (int i = 0; i < n; i++)
	{
		WfRepeat	rep;
		const char *status;

		WfReadRepeat(&ids[i], &rep);
		if (rep.verdict == WF_REPEAT_ITERATE)
		{
			StartGeneration(&rep);
			continue;
		}
		status = WfEndRepeat(&rep);
		if (strcmp(status, "FAILED") == 0 && RunCompensatesOnFailure(&rep.run_id))
		{
			DeferRepeat(&rep);
			continue;
		}
		WfRunDeltaAdd(&rep.run_id, rep.shard, WF_COUNT_BLOCKED, -1);
		WfRunDeltaAdd(&rep.run_id, rep.shard, strcmp(status, "SUCCEEDED") == 0 ?
					  WF_COUNT_SUCCEEDED : WF_COUNT_FAILED, 1);
		next[nnext].step_id = rep.id;
		next[nnext].run_id = rep.run_id;
		next[nnext].succeeded = strcmp(status, "SUCCEEDED") == 0;
		next[nnext].failed = !next[nnext].succeeded;
		nnext++;
	}
	return nnext;
}

/* DeferRepeat keeps a failed repeat to be reported in the next round. */
static void
DeferRepeat(const WfRepeat *rep)
{
	MemoryContext old = MemoryContextSwitchTo(WfPendingContext());

	if (deferred_repeats == NULL)
		deferred_repeats = palloc(sizeof(WfDeferredRepeat) * 8);
	else if (n_deferred_repeats % 8 == 0)
		deferred_repeats = repalloc(deferred_repeats,
									sizeof(WfDeferredRepeat) * (n_deferred_repeats + 8));
	MemoryContextSwitchTo(old);
	deferred_repeats[n_deferred_repeats].step_id = rep->id;
	deferred_repeats[n_deferred_repeats].run_id = rep->run_id;
	deferred_repeats[n_deferred_repeats].shard = rep->shard;
	n_deferred_repeats++;
}

/* NoteDeferredRepeats reports the failed repeats kept for this round. */
static void
NoteDeferredRepeats(void)
{
	int			n = n_deferred_repeats;

	n_deferred_repeats = 0;
	for (int i = 0; i < n; i++)
		WfNoteStepTerminal(&deferred_repeats[i].run_id,
						   deferred_repeats[i].shard,
						   &deferred_repeats[i].step_id, "FAILED",
						   WF_COUNT_BLOCKED);
}

/*
 * StartGeneration locks the loop's body as dependents are locked (it is
 * finished, so nothing else works on it), resets it, and releases its
 * steps that wait for nothing as any ready step.
 */
static void
StartGeneration(const WfRepeat *rep)
{
	pg_uuid_t  *body;
	pg_uuid_t  *ready;
	WfDependent *deps;
	int			nbody;
	int			nready;

	nbody = WfRepeatBody(rep, &body);
	if (nbody > 0)
	{
		deps = palloc0(sizeof(WfDependent) * nbody);
		for (int i = 0; i < nbody; i++)
			deps[i].step_id = body[i];
		LockDependents(deps, nbody);
		if (SPI_processed != (uint64) nbody)
			ereport(ERROR,
					(errcode(WF_SQLSTATE_INTERNAL),
					 errmsg(WF_INTERNAL_STATE ": a step of the loop's body is missing")));
		pfree(deps);
	}
	ready = palloc(sizeof(pg_uuid_t) * Max(nbody, 1));
	nready = WfStartGeneration(rep, ready);
	WfReleaseSteps(ready, nready);
	pfree(ready);
	pfree(body);
}

/* IdArray makes a uuid[] Datum of ids. */
static Datum
IdArray(const pg_uuid_t *ids, int n)
{
	Datum	   *ids_d = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		ids_d[i] = UUIDPGetDatum(&ids[i]);
	return WfArray(ids_d, NULL, n, UUIDOID);
}

/*
 * UpdateDependentGroup applies one level's effect to a group of dependents
 * that starts no timer: counters only, a job or external step released, or
 * any step canceled.
 */
static void
UpdateDependentGroup(pg_uuid_t *ids, int n, int32 done, int32 unsatisfied,
					 WfOutcome outcome)
{
	static SPIPlanPtr update_plan = NULL;
	static const char *update_sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET"
		" dependency_count_pending = s.dependency_count_pending" OP("-") "$2,"
		" dependency_count_unsatisfied = s.dependency_count_unsatisfied" OP("+") "$3,"
		" status = CASE"
		"  WHEN $4" OP("=") "1 THEN CASE WHEN s.execution_kind" OP("=") "'JOB'"
		"   THEN 'ENQUEUED' ELSE 'WAITING_FOR_EXTERNAL' END::workflow.step_status"
		"  WHEN $4" OP("=") "2 THEN 'CANCELED'::workflow.step_status"
		"  ELSE s.status END,"
		" job_id = CASE WHEN $4" OP("=") "1 AND s.execution_kind" OP("=") "'JOB'"
		"  THEN workflow.uuid_v7() ELSE s.job_id END,"
		" released_at = CASE WHEN $4" OP("=") "1"
		"  THEN pg_catalog.statement_timestamp() ELSE s.released_at END,"
		" finished_at = CASE WHEN $4" OP("=") "2"
		"  THEN pg_catalog.statement_timestamp() ELSE s.finished_at END,"
		" status_reason = CASE WHEN $4" OP("=") "2"
		"  THEN '" WF_REASON_DEPENDENCY_UNSATISFIED "' ELSE s.status_reason END,"
		" last_error_code = CASE WHEN $4" OP("=") "2"
		"  THEN '" WF_REASON_DEPENDENCY_UNSATISFIED "' ELSE s.last_error_code END,"
		" last_error_message = CASE WHEN $4" OP("=") "2"
		"  THEN 'a prerequisite did not succeed' ELSE s.last_error_message END,"
		" history_gap = s.history_gap OR ($4" OP("<>") "0 AND NOT $5),"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.id" OP("=") "ANY ($1)"
		" RETURNING s.workflow_run_id, s.step_key, s.job_id),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key,"
		"  CASE WHEN $4" OP("=") "1 THEN 'step_released' ELSE 'step_canceled' END,"
		"  CASE WHEN $4" OP("=") "2 THEN '{\"error_code\": \"" WF_REASON_DEPENDENCY_UNSATISFIED "\","
		"  \"reason\": \"a prerequisite did not succeed\"}'::pg_catalog.jsonb"
		"  WHEN u.job_id IS NULL THEN '{}'::pg_catalog.jsonb"
		"  ELSE pg_catalog.jsonb_build_object('job_id', u.job_id) END"
		"  FROM u WHERE $5 AND $4" OP("<>") "0)"
		" SELECT 1 FROM u";
	static const Oid update_types[5] = {UUIDARRAYOID, INT4OID, INT4OID,
	INT4OID, BOOLOID};
	Datum		values[5];
	int			ret;

	values[0] = IdArray(ids, n);
	values[1] = Int32GetDatum(done);
	values[2] = Int32GetDatum(unsatisfied);
	values[3] = Int32GetDatum((int32) outcome);
	values[4] = BoolGetDatum(WfHistoryRecordsSteps());

	ret = WfExecuteAsEngine(&update_plan, update_sql, 5, update_types, values,
							NULL);
	if (ret != SPI_OK_SELECT || SPI_processed != (uint64) n)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": dependents changed while locked")));
}

/*
 * HoldDependentGroup applies one level's effect to a group of dependents
 * that are ready but whose run's pin fails: their counters, and held, so
 * that resume_run finds them; they stay BLOCKED.
 */
static void
HoldDependentGroup(pg_uuid_t *ids, int n, int32 done, int32 unsatisfied)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET"
		" dependency_count_pending = s.dependency_count_pending" OP("-") "$2,"
		" dependency_count_unsatisfied = s.dependency_count_unsatisfied" OP("+") "$3,"
		" held = true,"
		" history_gap = s.history_gap OR NOT $4,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.id" OP("=") "ANY ($1)"
		" RETURNING s.workflow_run_id, s.step_key),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'step_held', '{}'::pg_catalog.jsonb"
		"  FROM u WHERE $4)"
		" SELECT 1 FROM u";
	static const Oid types[4] = {UUIDARRAYOID, INT4OID, INT4OID, BOOLOID};
	Datum		values[4];
	int			ret;

	values[0] = IdArray(ids, n);
	values[1] = Int32GetDatum(done);
	values[2] = Int32GetDatum(unsatisfied);
	values[3] = BoolGetDatum(WfHistoryRecordsSteps());
	ret = WfExecuteAsEngine(&plan, sql, 4, types, values, NULL);
	if (ret != SPI_OK_SELECT || SPI_processed != (uint64) n)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": dependents changed while locked")));
}

/*
 * ParkDependentGroup applies one level's effect to a group of ready job
 * steps of capped runs: their counters, and PARKED with no job, released
 * at (and parked at) now, with their rows in the parking queue and
 * step_parked; admission lets them run when their run has room.
 */
static void
ParkDependentGroup(pg_uuid_t *ids, int n, int32 done, int32 unsatisfied)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET"
		" dependency_count_pending = s.dependency_count_pending" OP("-") "$2,"
		" dependency_count_unsatisfied = s.dependency_count_unsatisfied" OP("+") "$3,"
		" status = 'PARKED', job_id = NULL,"
		" released_at = pg_catalog.statement_timestamp(),"
		" parked_at = pg_catalog.statement_timestamp(),"
		" history_gap = s.history_gap OR NOT $4,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.id" OP("=") "ANY ($1)"
		" RETURNING s.id, s.workflow_run_id, s.step_key, s.parked_at),"
		" q AS (INSERT INTO workflow.parked_steps (workflow_run_id, parked_at,"
		" workflow_step_id) SELECT u.workflow_run_id, u.parked_at, u.id FROM u),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'step_parked', '{}'::pg_catalog.jsonb"
		"  FROM u WHERE $4)"
		" SELECT 1 FROM u";
	static const Oid types[4] = {UUIDARRAYOID, INT4OID, INT4OID, BOOLOID};
	Datum		values[4];
	int			ret;

	values[0] = IdArray(ids, n);
	values[1] = Int32GetDatum(done);
	values[2] = Int32GetDatum(unsatisfied);
	values[3] = BoolGetDatum(WfHistoryRecordsSteps());
	ret = WfExecuteAsEngine(&plan, sql, 4, types, values, NULL);
	if (ret != SPI_OK_SELECT || SPI_processed != (uint64) n)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": dependents changed while locked")));
}

/*
 * WfReleaseSteps releases BLOCKED steps that wait for nothing (resume_run's
 * held steps, retry_run's reset ones) as the cascade releases a dependent
 * whose last prerequisite finished, the pin check included.  Steps that
 * finish at once are collected for WfFinishPending, which the caller calls
 * next, holding the runs' release locks.
 */
void
WfReleaseSteps(const pg_uuid_t *ids, int n)
{
	WfDependent *deps;
	pg_uuid_t  *sorted;
	WfTerminalStep *next;
	int			nnext = 0;

	if (n == 0)
		return;
	sorted = palloc(sizeof(pg_uuid_t) * n);
	memcpy(sorted, ids, sizeof(pg_uuid_t) * n);
	qsort(sorted, n, sizeof(pg_uuid_t), WfUuidCmpQsort);
	deps = palloc0(sizeof(WfDependent) * n);
	for (int i = 0; i < n; i++)
		deps[i].step_id = sorted[i];
	pfree(sorted);

	LockDependents(deps, n);
	DecideOutcomes(deps, n);
	UpdateDependents(deps, n);
	ApplyOutcomes(deps, n, &next, &nnext);
	for (int i = 0; i < nnext; i++)
	{
		WfTerminalStep *step = AppendPending();

		step->step_id = next[i].step_id;
		step->run_id = next[i].run_id;
		step->succeeded = next[i].succeeded;
		step->failed = next[i].failed;
	}
	pfree(next);
	pfree(deps);
}

/*
 * ReleaseTimerGroup releases a group of sleep and event steps: a sleep step
 * SLEEPING until its wake time, an event step WAITING_FOR_EXTERNAL with its
 * timeout as its wake time (none without one), with step_released and, for
 * a sleep, step_sleeping.  Whether one finishes at once is settled after
 * (waits.c).
 */
static void
ReleaseTimerGroup(pg_uuid_t *ids, int n, int32 done, int32 unsatisfied)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET"
		" dependency_count_pending = s.dependency_count_pending" OP("-") "$2,"
		" dependency_count_unsatisfied = s.dependency_count_unsatisfied" OP("+") "$3,"
		" status = CASE WHEN s.execution_kind::pg_catalog.text" OP("=") "'SLEEP'"
		"  THEN 'SLEEPING' ELSE 'WAITING_FOR_EXTERNAL' END::workflow.step_status,"
		" wake_at = CASE WHEN s.execution_kind::pg_catalog.text" OP("=") "'SLEEP'"
		"  THEN COALESCE(s.sleep_until, pg_catalog.statement_timestamp()"
		"   " OP("+") "pg_catalog.make_interval(secs => s.sleep_seconds))"
		"  ELSE pg_catalog.statement_timestamp()"
		"   " OP("+") "pg_catalog.make_interval(secs => s.wait_timeout_seconds) END,"
		" released_at = pg_catalog.statement_timestamp(),"
		" history_gap = s.history_gap OR NOT $4,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.id" OP("=") "ANY ($1)"
		" RETURNING s.workflow_run_id, s.step_key, s.status, s.wake_at),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, v.event_type, v.detail"
		"  FROM u, LATERAL (VALUES ('step_released', '{}'::pg_catalog.jsonb),"
		"  ('step_sleeping', pg_catalog.jsonb_build_object('wake_at', u.wake_at)))"
		"  AS v(event_type, detail)"
		"  WHERE $4 AND (v.event_type" OP("=") "'step_released'"
		"   OR u.status::pg_catalog.text" OP("=") "'SLEEPING'))"
		" SELECT 1 FROM u";
	static const Oid types[4] = {UUIDARRAYOID, INT4OID, INT4OID, BOOLOID};
	Datum		values[4];
	int			ret;

	values[0] = IdArray(ids, n);
	values[1] = Int32GetDatum(done);
	values[2] = Int32GetDatum(unsatisfied);
	values[3] = BoolGetDatum(WfHistoryRecordsSteps());
	ret = WfExecuteAsEngine(&plan, sql, 4, types, values, NULL);
	if (ret != SPI_OK_SELECT || SPI_processed != (uint64) n)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": dependents changed while locked")));
}
