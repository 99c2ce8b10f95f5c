/*-------------------------------------------------------------------------
 *
 * xact_state.c
 *	  Per-transaction engine state and the end-of-transaction hooks.
 *
 * Owns the engine's transaction callbacks (RegisterXactCallback and
 * RegisterSubXactCallback) and the state that belongs to the transaction
 * rather than to one module:
 *
 *	- the depth of the engine's own writes, which lets them pass the guard
 *	  triggers;
 *	- the depth of batch deferral, which makes the statement trigger leave
 *	  finished steps to the batch call that runs the statement;
 *	- the note that this transaction holds late locks (run rows, or a run's
 *	  release lock exclusive), after which the engine's waits become NOWAIT
 *	  or a try-lock;
 *	- the memory where collected steps and counter changes wait for the end
 *	  of the statement.
 *
 * It also refuses isolation levels above READ COMMITTED, and runs the
 * sweeps' work in subtransactions (WfTryInSubtransaction, WfRunByRun): a
 * page of reap_expired or fire_timers at once, or run by run when a run's
 * work conflicts, so that one busy run does not stop the call.
 *
 * Modules that collect work within a transaction (status.c, cascade.c,
 * triggers.c) register hooks here from _PG_init, as PostgreSQL's xact.c
 * calls each module's callbacks: before commit each says whether it still
 * holds work it never processed, which fails the commit; at the end of the
 * transaction each forgets its state; when a subtransaction aborts each
 * drops what was collected inside it.  Besides spi_util.c and uuid.c, this
 * file reaches other modules only through those hooks and the action a
 * sweep hands it, so no module calls back into one that called it.
 *
 * The two depths are restored on every error exit by their callers
 * (PG_FINALLY); the callbacks only clear them for the next transaction.
 *
 * Takes no locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "workflow.h"

/* status.c, cascade.c and triggers.c: one each */
#define WF_MAX_XACT_HOOKS 8

static const WfXactHooks *xact_hooks[WF_MAX_XACT_HOOKS];
static int	n_xact_hooks = 0;

static int	engine_write_depth = 0;
static int	defer_depth = 0;
static LocalTransactionId late_locks_lxid = InvalidLocalTransactionId;
static MemoryContext pending_context = NULL;

static void WfXactCallback(XactEvent event, void *arg);
static void WfSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
							  SubTransactionId parentSubid, void *arg);
static bool HasUnfinishedWork(void);
static void DiscardState(void);

/* WfXactStateInit registers the transaction callbacks; _PG_init calls it. */
void
WfXactStateInit(void)
{
	RegisterXactCallback(WfXactCallback, NULL);
	RegisterSubXactCallback(WfSubXactCallback, NULL);
}

/*
 * WfRegisterXactHooks adds a module's hooks, called in the order they were
 * registered.  Only _PG_init registers, so the array never shrinks.
 */
void
WfRegisterXactHooks(const WfXactHooks *hooks)
{
	if (n_xact_hooks == WF_MAX_XACT_HOOKS)
		elog(ERROR, "too many workflow transaction hooks");
	xact_hooks[n_xact_hooks++] = hooks;
}

/*
 * WfRequireReadCommitted refuses to run under REPEATABLE READ or
 * SERIALIZABLE: the cascade relies on every statement seeing the latest
 * committed counters.
 */
void
WfRequireReadCommitted(void)
{
	if (XactIsoLevel != XACT_READ_COMMITTED)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_ISOLATION),
				 errmsg(WF_UNSUPPORTED_ISOLATION ": workflow functions require READ COMMITTED"),
				 errdetail("The current transaction runs at a stricter isolation level."),
				 errhint("Call the function in a READ COMMITTED transaction.")));
}

/*
 * The guard trigger on workflow_steps lets a status change through only
 * while the engine runs one of its own statements.  The depth is restored
 * on the way out of an error, so a caught error leaves no way in.
 */
int
WfExecuteAsEngine(SPIPlanPtr *plan, const char *sql, int nargs,
				  const Oid *argtypes, Datum *values, const char *nulls)
{
	int			depth = engine_write_depth;
	int			ret;

	engine_write_depth++;
	PG_TRY();
	{
		ret = WfExecute(plan, sql, nargs, argtypes, values, nulls, false, 0);
	}
	PG_FINALLY();
	{
		engine_write_depth = depth;
	}
	PG_END_TRY();
	return ret;
}

/*
 * WfRunAsEngine runs action(arg), whose statements are the engine's own
 * writes (as WfExecuteAsEngine runs one), and returns what it returns: for
 * a statement that another wrapper runs, such as a job insert that may
 * notify (WfExecuteDue).
 */
uint64
WfRunAsEngine(uint64 (*action) (void *arg), void *arg)
{
	int			depth = engine_write_depth;
	uint64		ret;

	engine_write_depth++;
	PG_TRY();
	{
		ret = action(arg);
	}
	PG_FINALLY();
	{
		engine_write_depth = depth;
	}
	PG_END_TRY();
	return ret;
}

/* WfEngineWriting says whether one of the engine's own writes runs. */
bool
WfEngineWriting(void)
{
	return engine_write_depth > 0;
}

/*
 * WfDeferFinishBegin makes the statement trigger leave collected work for
 * the caller, which finishes a whole batch of statements at once so that
 * its run rows are locked once, in order, at the end.
 */
void
WfDeferFinishBegin(void)
{
	defer_depth++;
}

/* WfDeferDepth is how many batch calls in progress defer statement ends. */
int
WfDeferDepth(void)
{
	return defer_depth;
}

/* WfDeferRestore puts back the depth saved before a batch, on any exit. */
void
WfDeferRestore(int depth)
{
	defer_depth = depth;
}

/*
 * A transaction that holds run rows (or a run's release lock exclusive)
 * from an earlier call must not wait for locks in a later call: the
 * holder of what it waits for may be waiting for that run row, which is
 * the last lock of every other path.  Such waits become NOWAIT or a
 * try-lock, and raise workflow.release_conflict.
 */
void
WfNoteLateLocks(void)
{
	late_locks_lxid = MyProc->lxid;
}

/*
 * WfForgetLateLocks takes the note back, for a caller whose only late locks
 * are rows no other transaction can see yet (start_run's new run).
 */
void
WfForgetLateLocks(void)
{
	late_locks_lxid = InvalidLocalTransactionId;
}

/* WfHoldsLateLocks says whether this transaction noted late locks. */
bool
WfHoldsLateLocks(void)
{
	return late_locks_lxid == MyProc->lxid &&
		late_locks_lxid != InvalidLocalTransactionId;
}

/*
 * WfPendingContext holds what row triggers collect until the statement
 * ends; it lives outside any transaction context so that the pointers into
 * it can be reset explicitly on abort.
 */
MemoryContext
WfPendingContext(void)
{
	if (pending_context == NULL)
		pending_context = AllocSetContextCreate(TopMemoryContext,
												"workflow pending work",
												ALLOCSET_DEFAULT_SIZES);
	return pending_context;
}

/* Whether a registered module still holds work it never processed. */
static bool
HasUnfinishedWork(void)
{
	for (int i = 0; i < n_xact_hooks; i++)
		if (xact_hooks[i]->unfinished != NULL && xact_hooks[i]->unfinished())
			return true;
	return false;
}

/* DiscardState forgets every module's collected work, then its memory. */
static void
DiscardState(void)
{
	engine_write_depth = 0;
	defer_depth = 0;
	for (int i = 0; i < n_xact_hooks; i++)
		if (xact_hooks[i]->reset != NULL)
			xact_hooks[i]->reset();
	if (pending_context != NULL)
		MemoryContextReset(pending_context);
}

/*
 * WfXactCallback drops collected work at the end of the transaction, and
 * refuses to commit work that was collected but never applied (which
 * would leave counters wrong).
 */
static void
WfXactCallback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			if (HasUnfinishedWork())
				ereport(ERROR,
						(errcode(WF_SQLSTATE_INTERNAL),
						 errmsg(WF_INTERNAL_STATE ": terminal steps were collected but not processed")));
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			DiscardState();
			break;
	}
}

/*
 * A rolled-back savepoint takes back the step changes made inside it:
 * every module forgets what was collected there, and only that.
 */
static void
WfSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
				  SubTransactionId parentSubid, void *arg)
{
	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	for (int i = 0; i < n_xact_hooks; i++)
		if (xact_hooks[i]->abort_sub != NULL)
			xact_hooks[i]->abort_sub(mySubid);
}

/*
 * WfTryInSubtransaction runs action on the chosen rows in a subtransaction.
 * A workflow.release_conflict there rolls back only the subtransaction, and
 * it returns -1; any other error is raised.  The sweeps (reap_expired,
 * fire_timers) use it so that one busy run does not stop a whole call.
 */
int
WfTryInSubtransaction(WfChosenAction action, Datum *chosen, int nchosen)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile int done = -1;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		done = action(chosen, nchosen);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		if (edata->sqlerrcode != WF_SQLSTATE_RETRY)
			ReThrowError(edata);
		FreeErrorData(edata);
		done = -1;
	}
	PG_END_TRY();
	return done;
}

/*
 * WfRunByRun runs action on the chosen rows one run at a time (runs[i] is
 * the run of chosen[i]), each in a subtransaction, and skips the runs
 * whose turn conflicts; returns the sum of what the others returned.
 */
int
WfRunByRun(WfChosenAction action, Datum *chosen, const pg_uuid_t *runs,
		   int nchosen)
{
	Datum	   *group = palloc(sizeof(Datum) * nchosen);
	bool	   *done = palloc0(sizeof(bool) * nchosen);
	int			total = 0;

	for (int i = 0; i < nchosen; i++)
	{
		int			ngroup = 0;
		int			n;

		if (done[i])
			continue;
		for (int j = i; j < nchosen; j++)
			if (!done[j] && WfUuidCompare(&runs[j], &runs[i]) == 0)
			{
				done[j] = true;
				group[ngroup++] = chosen[j];
			}
		CHECK_FOR_INTERRUPTS();
		n = WfTryInSubtransaction(action, group, ngroup);
		if (n > 0)
			total += n;
	}
	pfree(group);
	pfree(done);
	return total;
}
