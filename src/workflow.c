/*-------------------------------------------------------------------------
 *
 * workflow.c
 *	  Module entry: settings, per-transaction engine state, and the run
 *	  release lock.
 *
 * Owns the workflow.* settings, the flag that lets the engine's own writes
 * pass the guard triggers, the memory that collects terminal steps until
 * the end of a statement, and the run release lock: a transaction-level
 * advisory lock per run, taken shared by completions and exclusive by
 * cancel_run and purge.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "mb/pg_wchar.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "workflow.h"

PG_MODULE_MAGIC;

int			wf_max_steps = 100000;
int			wf_max_edges = 1000000;
int			wf_max_payload_bytes = 1024 * 1024;
int			wf_max_job_type_bytes = 128;
int			wf_max_step_key_length = 128;
int			wf_max_error_message_bytes = 4096;
int			wf_max_idempotency_key_bytes = 512;
int			wf_retry_base_delay_ms = 1000;
int			wf_retry_max_delay_ms = 3600 * 1000;
int			wf_counter_shards = 64;
int			wf_counter_shard_min_width = 64;
bool		wf_notify_per_organization = false;

/*
 * The advisory lock class of release locks (pg_locks.objsubid): 1 and 2
 * are SQL's advisory locks, and Citus takes its classes from 4 up.
 */
#define WF_RELEASE_LOCK_CLASS 0x5746

static int	engine_write_depth = 0;
static MemoryContext pending_context = NULL;

void		_PG_init(void);
static void WfXactCallback(XactEvent event, void *arg);
static void WfSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
							  SubTransactionId parentSubid, void *arg);

/* _PG_init registers the settings and the transaction callbacks. */
void
_PG_init(void)
{
	DefineCustomIntVariable("workflow.max_steps",
							"Largest number of steps in one run.",
							NULL, &wf_max_steps, 100000, 1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("workflow.max_edges",
							"Largest number of dependency edges in one run.",
							NULL, &wf_max_edges, 1000000, 0, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("workflow.max_payload_bytes",
							"Largest payload or output, in bytes.",
							NULL, &wf_max_payload_bytes, 1024 * 1024, 1,
							INT_MAX, PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("workflow.max_job_type_bytes",
							"Longest job_type, in bytes.",
							"job_type is in the claim index, whose entries are limited in size.",
							&wf_max_job_type_bytes, 128, 1, 1024,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("workflow.max_step_key_length",
							"Longest step key, in characters.",
							NULL, &wf_max_step_key_length, 128, 1, 255,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("workflow.max_error_message_bytes",
							"Error messages longer than this are truncated.",
							NULL, &wf_max_error_message_bytes, 4096, 16,
							INT_MAX, PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("workflow.max_idempotency_key_bytes",
							"Longest idempotency key, in bytes.",
							"The key is in a unique index, whose entries are limited in size.",
							&wf_max_idempotency_key_bytes, 512, 1, 2000,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("workflow.retry_base_delay_ms",
							"Delay before the first retry of a failed job.",
							"Each further retry doubles it, with jitter.",
							&wf_retry_base_delay_ms, 1000, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("workflow.retry_max_delay_ms",
							"Longest delay between two attempts of a job.",
							NULL, &wf_retry_max_delay_ms, 3600 * 1000, 0,
							INT_MAX, PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("workflow.counter_shards",
							"Most counter shards of one run; 0 keeps every run's counters on its run row.",
							"A run started with shards keeps them.",
							&wf_counter_shards, 64, 0, WF_MAX_COUNTER_SHARDS,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("workflow.counter_shard_min_width",
							"Steps in a run's widest level from which its counters are sharded.",
							NULL, &wf_counter_shard_min_width, 64, 2, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("workflow.notify_per_organization",
							 "Sends the run-terminal notification of a run with an organization on that organization's own channel.",
							 "The channel is workflow_run_terminal_ followed by the organization id without dashes; runs without an organization keep workflow_run_terminal.",
							 &wf_notify_per_organization, false,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	MarkGUCPrefixReserved("workflow");

	WfPrivilegeInit();
	RegisterXactCallback(WfXactCallback, NULL);
	RegisterSubXactCallback(WfSubXactCallback, NULL);
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

bool
WfEngineWriting(void)
{
	return engine_write_depth > 0;
}

/*
 * A transaction that holds run rows (or a run's release lock exclusive)
 * from an earlier call must not wait for locks in a later call: the
 * holder of what it waits for may be waiting for that run row, which is
 * the last lock of every other path.  Such waits become NOWAIT or a
 * try-lock, and raise workflow.release_conflict.
 */
static LocalTransactionId late_locks_lxid = InvalidLocalTransactionId;

void
WfNoteLateLocks(void)
{
	late_locks_lxid = MyProc->lxid;
}

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

static void
WfDiscardState(void)
{
	engine_write_depth = 0;
	WfDeferReset();
	WfPendingReset();
	WfSyncReset();
	if (pending_context != NULL)
		MemoryContextReset(pending_context);
}

/*
 * WfXactCallback drops collected work on abort, and refuses to commit work
 * that was collected but never applied (which would leave counters wrong).
 */
static void
WfXactCallback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			if (WfHasPending() || WfPendingSyncs() > 0)
				ereport(ERROR,
						(errcode(WF_SQLSTATE_INTERNAL),
						 errmsg(WF_INTERNAL_STATE ": terminal steps were collected but not processed")));
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			WfDiscardState();
			break;
	}
}

/*
 * A rolled-back savepoint takes back the step changes made inside it:
 * forget what was collected there, and only that.
 */
static void
WfSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
				  SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		WfPendingAbortSub(mySubid);
		WfSyncAbortSub(mySubid);
	}
}

/*
 * The release lock's key is the uuid's last eight bytes (random in a v7
 * uuid), in an advisory lock class of the extension's own: the classes of
 * pg_advisory_lock(bigint) and (int, int) are 1 and 2, so no SQL call can
 * take or hold a run's release lock.
 */
static void
RunReleaseLockTag(const pg_uuid_t *run_id, LOCKTAG *tag)
{
	uint64		key = 0;

	for (int i = 8; i < UUID_LEN; i++)
		key = (key << 8) | run_id->data[i];

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (key >> 32),
						 (uint32) key, WF_RELEASE_LOCK_CLASS);
}

/*
 * WfLockRunRelease takes the run's release lock for the rest of the
 * transaction: shared for completions, exclusive for cancel_run and purge.
 * With wait false it only tries, and returns whether it got the lock.
 */
bool
WfLockRunRelease(const pg_uuid_t *run_id, bool exclusive, bool wait)
{
	LOCKTAG		tag;
	LockAcquireResult res;
	bool		try_only = !wait || WfHoldsLateLocks();

	RunReleaseLockTag(run_id, &tag);
	res = LockAcquire(&tag, exclusive ? ExclusiveLock : ShareLock,
					  false, try_only);
	if (res != LOCKACQUIRE_NOT_AVAIL)
		return true;
	if (!wait)
		return false;
	ereport(ERROR,
			(errcode(WF_SQLSTATE_RETRY),
			 errmsg(WF_RELEASE_CONFLICT ": the release lock of run %s is busy",
					WfUuidString(run_id)),
			 errdetail("This transaction holds run rows from an earlier call and must not wait."),
			 errhint("Retry the transaction, or make one engine call per transaction.")));
	return false;				/* keep compiler quiet */
}

/*
 * WfUnlockRunRelease gives back one WfLockRunRelease of this transaction
 * before commit.  Only purge does this, once it has deleted the run under
 * its row locks or skipped it (see purge.c); a hold taken earlier in the
 * transaction, in either mode, stays.
 */
void
WfUnlockRunRelease(const pg_uuid_t *run_id, bool exclusive)
{
	LOCKTAG		tag;

	RunReleaseLockTag(run_id, &tag);
	if (!LockRelease(&tag, exclusive ? ExclusiveLock : ShareLock, false))
		elog(ERROR, "the release lock of run %s is not held",
			 WfUuidString(run_id));
}

/*
 * WfTruncateMessage cuts an error message to the configured byte limit at
 * a character boundary; long messages are kept in part, never rejected.
 */
char *
WfTruncateMessage(const char *message)
{
	int			len;

	if (message == NULL)
		return NULL;
	len = strlen(message);
	if (len <= wf_max_error_message_bytes)
		return pstrdup(message);
	len = pg_mbcliplen(message, len, wf_max_error_message_bytes);
	return pnstrdup(message, len);
}
