/*-------------------------------------------------------------------------
 *
 * locks.c
 *	  The run release lock.
 *
 * A transaction-level advisory lock per run, in a lock class of the
 * extension's own: taken shared by completions (which wait for it) and by
 * external completion and lease reaping (which only try), exclusive by
 * cancel_run and purge.  A transaction that already holds late locks
 * (xact_state.c) only tries, and raises workflow.release_conflict where it
 * would have waited.
 *
 * Locks: the release lock of the runs it is asked for, nothing else.
 * WfTryLockRunsShared tries several at once, for the sweeps.  The lock of
 * a send_event dedupe key, and the lock that serializes the registrations
 * of one workflow name, each in a class of its own, are taken here too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "common/hashfn.h"
#include "utils/builtins.h"

#include "workflow.h"

/*
 * The advisory lock class of release locks (pg_locks.objsubid): 1 and 2
 * are SQL's advisory locks, and Citus takes its classes from 4 up.
 */
#define WF_RELEASE_LOCK_CLASS 0x5746

/* the advisory lock class of send_event's dedupe keys */
#define WF_DEDUPE_LOCK_CLASS 0x5747

/* the advisory lock class of registry names (register_workflow) */
#define WF_REGISTRY_LOCK_CLASS 0x5748

static void RunReleaseLockTag(const pg_uuid_t *run_id, LOCKTAG *tag);

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
 * WfTryLockRunsShared tries the release lock of each distinct run among
 * runs[0 .. n-1] (those with has_run), once, shared, in ascending run id,
 * and returns per entry whether its run's lock was got.  It never waits:
 * the sweeps (reap_expired, fire_timers) skip busy runs and come back.
 */
bool *
WfTryLockRunsShared(const pg_uuid_t *runs, const bool *has_run, uint64 n)
{
	pg_uuid_t  *sorted = palloc(sizeof(pg_uuid_t) * Max(n, 1));
	bool	   *sorted_ok;
	bool	   *ok = palloc0(sizeof(bool) * Max(n, 1));
	int			nruns = 0;

	for (uint64 i = 0; i < n; i++)
		if (has_run[i])
			sorted[nruns++] = runs[i];
	qsort(sorted, nruns, sizeof(pg_uuid_t), WfUuidCmpQsort);
	sorted_ok = palloc(sizeof(bool) * Max(nruns, 1));
	for (int i = 0; i < nruns; i++)
	{
		if (i > 0 && WfUuidCompare(&sorted[i], &sorted[i - 1]) == 0)
			sorted_ok[i] = sorted_ok[i - 1];
		else
			sorted_ok[i] = WfLockRunRelease(&sorted[i], false, false);
	}
	for (uint64 i = 0; i < n; i++)
	{
		pg_uuid_t  *found;

		if (!has_run[i])
			continue;
		found = bsearch(&runs[i], sorted, nruns, sizeof(pg_uuid_t),
						WfUuidCmpQsort);
		ok[i] = sorted_ok[found - sorted];
	}
	pfree(sorted);
	pfree(sorted_ok);
	return ok;
}

/*
 * WfLockDedupeKey takes, for the rest of the transaction, the lock of a
 * dedupe key of a run (a hash of both, in a class of the extension's own):
 * a second send_event with the same key waits here, before it holds
 * anything, until the first commits.  A transaction that holds late locks
 * only tries, and raises workflow.release_conflict where it would wait.
 */
void
WfLockDedupeKey(const pg_uuid_t *run_id, Datum dedupe_key)
{
	text	   *key = DatumGetTextPP(dedupe_key);
	LOCKTAG		tag;
	uint64		run_key = 0;
	uint32		key_hash;

	for (int i = 8; i < UUID_LEN; i++)
		run_key = (run_key << 8) | run_id->data[i];
	key_hash = DatumGetUInt32(hash_any((const unsigned char *) VARDATA_ANY(key),
									   VARSIZE_ANY_EXHDR(key)));
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (run_key >> 32),
						 (uint32) run_key ^ key_hash, WF_DEDUPE_LOCK_CLASS);
	if (LockAcquire(&tag, ExclusiveLock, false, WfHoldsLateLocks()) !=
		LOCKACQUIRE_NOT_AVAIL)
		return;
	ereport(ERROR,
			(errcode(WF_SQLSTATE_RETRY),
			 errmsg(WF_RELEASE_CONFLICT ": another send_event with dedupe key \"%s\" is in flight",
					text_to_cstring(key)),
			 errdetail("This transaction holds run rows from an earlier call and must not wait."),
			 errhint("Retry the transaction, or make one engine call per transaction.")));
}

/*
 * WfLockWorkflowName takes, for the rest of the transaction, the lock of a
 * registered workflow's name (a hash of it, in a class of the extension's
 * own): register_workflow and unregister_workflow of one name wait here
 * for each other.  A transaction that holds late locks only tries, and
 * raises workflow.release_conflict where it would wait.
 */
void
WfLockWorkflowName(text *name)
{
	LOCKTAG		tag;
	uint64		key;

	key = DatumGetUInt64(hash_any_extended((const unsigned char *) VARDATA_ANY(name),
										   VARSIZE_ANY_EXHDR(name), 0));
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (key >> 32),
						 (uint32) key, WF_REGISTRY_LOCK_CLASS);
	if (LockAcquire(&tag, ExclusiveLock, false, WfHoldsLateLocks()) !=
		LOCKACQUIRE_NOT_AVAIL)
		return;
	ereport(ERROR,
			(errcode(WF_SQLSTATE_RETRY),
			 errmsg(WF_RELEASE_CONFLICT ": another registration of workflow \"%s\" is in flight",
					text_to_cstring(name)),
			 errdetail("This transaction holds run rows from an earlier call and must not wait."),
			 errhint("Retry the transaction, or make one engine call per transaction.")));
}
