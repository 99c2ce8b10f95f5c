/*-------------------------------------------------------------------------
 *
 * maintenance_launcher.c
 *	  The maintenance launcher: a background worker that keeps one
 *	  maintenance worker running per database of
 *	  workflow.maintenance_databases.
 *
 * _PG_init registers the launcher when the library is in
 * shared_preload_libraries.  It connects to no database (it reads only
 * pg_database, a shared catalog), so it never stands in the way of DROP
 * DATABASE.  Every workflow.maintenance_interval, and whenever a worker it
 * started starts or stops or the configuration is reloaded, it gives each
 * listed database a slot (maintenance_status.c) and starts a worker for a
 * slot that has none, at most once per interval, and only for a database
 * that exists; it stops the workers of databases taken off the list.  The
 * workers are dynamic background workers that are never restarted by the
 * postmaster: the launcher starts them again, so that a database being
 * dropped, or a worker that failed, costs one interval and no restart
 * storm.  The postmaster restarts the launcher itself after a crash, and
 * the launcher finds its workers again through the slots.
 *
 * What one pass of its loop allocates lives in a context reset at every
 * pass; the handles of its workers in TopMemoryContext.
 *
 * Locks: AccessShareLock on pg_database, for a transaction, to look a
 * database up; the slots' spinlocks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "workflow.h"

/* The launcher's own view of its workers, by slot. */
typedef struct LaunchedWorker
{
	BackgroundWorkerHandle *handle;
	TimestampTz launched_at;
	char		warned[NAMEDATALEN + 64];
} LaunchedWorker;

static LaunchedWorker launched[WF_MAINTENANCE_SLOTS];

/* What one pass of the loop allocates; reset at every pass. */
static MemoryContext loop_context = NULL;

PGDLLEXPORT void WfMaintenanceLauncherMain(Datum main_arg);

static void LaunchListed(void);
static void LaunchIfStopped(int slotno, const char *database);
static bool WorkerMayStart(int slotno);
static bool DatabaseExists(const char *database);
static void StartWorker(int slotno, const char *database);
static void StopUnlisted(const bool *listed);
static void WarnOnce(int slotno, const char *state, const char *message);

/*
 * WfMaintenanceLauncherRegister registers the launcher; the postmaster
 * starts it once recovery has finished (never on a standby) and again
 * five seconds after it fails.
 */
void
WfMaintenanceLauncherRegister(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, "workflow", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "WfMaintenanceLauncherMain", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "workflow maintenance launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "workflow maintenance launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/* The launcher's main loop. */
void
WfMaintenanceLauncherMain(Datum main_arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	memset(launched, 0, sizeof(launched));
	loop_context = AllocSetContextCreate(TopMemoryContext,
										 "workflow maintenance launcher",
										 ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		/* a cancel has nothing to cancel here; SIGTERM still ends us */
		QueryCancelPending = false;
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		MemoryContextReset(loop_context);
		MemoryContextSwitchTo(loop_context);
		LaunchListed();
		MemoryContextSwitchTo(TopMemoryContext);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 wf_maintenance_interval_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/*
 * WfDatabaseListCheck refuses a workflow.maintenance_databases that is not
 * a list of names, so that a typo in a reload keeps the list in force
 * instead of stopping every database's maintenance.
 */
bool
WfDatabaseListCheck(char **newval, void **extra, GucSource source)
{
	char	   *copy = pstrdup(*newval);
	List	   *names = NIL;
	bool		ok = SplitIdentifierString(copy, ',', &names);

	list_free(names);
	pfree(copy);
	if (!ok)
		GUC_check_errdetail("Give database names separated by commas; quote a name with double quotes.");
	return ok;
}

/*
 * LaunchListed starts a worker for each listed database that has none and
 * stops those of databases no longer listed.
 */
static void
LaunchListed(void)
{
	bool		listed[WF_MAINTENANCE_SLOTS];
	char	   *raw = pstrdup(wf_maintenance_databases);
	List	   *names = NIL;
	ListCell   *lc;

	memset(listed, 0, sizeof(listed));
	if (!SplitIdentifierString(raw, ',', &names))
	{
		ereport(WARNING,
				(errmsg("workflow.maintenance_databases is not a list of database names: \"%s\"",
						wf_maintenance_databases)));
		names = NIL;
	}
	foreach(lc, names)
	{
		const char *database = lfirst(lc);
		int			slotno = WfMaintenanceSlotFor(database);

		if (slotno < 0)
		{
			ereport(WARNING,
					(errmsg("workflow maintenance: more than %d databases listed; \"%s\" is not maintained",
							WF_MAINTENANCE_SLOTS, database)));
			continue;
		}
		listed[slotno] = true;
		LaunchIfStopped(slotno, database);
	}
	StopUnlisted(listed);
	list_free(names);
	pfree(raw);
}

/* LaunchIfStopped starts the slot's worker when none runs or is starting. */
static void
LaunchIfStopped(int slotno, const char *database)
{
	if (!WorkerMayStart(slotno))
		return;
	launched[slotno].launched_at = GetCurrentTimestamp();
	if (!DatabaseExists(database))
	{
		WarnOnce(slotno, "no such database",
				 psprintf("workflow maintenance: database \"%s\" of workflow.maintenance_databases does not exist",
						  database));
		return;
	}
	StartWorker(slotno, database);
}

/*
 * WorkerMayStart says whether the slot needs a worker: none holds it, the
 * one this launcher registered (if any) has stopped, and the last start
 * was at least an interval ago.
 */
static bool
WorkerMayStart(int slotno)
{
	LaunchedWorker *w = &launched[slotno];
	NameData	database;
	pid_t		pid;

	(void) WfMaintenanceSlotUsed(slotno, &database, &pid);
	if (pid != 0)
		return false;
	if (w->handle != NULL)
	{
		pid_t		handle_pid;

		if (GetBackgroundWorkerPid(w->handle, &handle_pid) != BGWH_STOPPED)
			return false;
		pfree(w->handle);
		w->handle = NULL;
	}
	return w->launched_at == 0 ||
		TimestampDifferenceExceeds(w->launched_at, GetCurrentTimestamp(),
								   wf_maintenance_interval_ms);
}

/*
 * DatabaseExists looks the database up in pg_database, by a scan of the
 * table as the autovacuum launcher does: without a database, the launcher
 * cannot open pg_database's indexes.  A database that takes no
 * connections counts as missing.
 */
static bool
DatabaseExists(const char *database)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;
	bool		found = false;
	MemoryContext context = CurrentMemoryContext;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (!found && HeapTupleIsValid(tuple = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database form = (Form_pg_database) GETSTRUCT(tuple);

		found = form->datallowconn && strcmp(NameStr(form->datname), database) == 0;
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	MemoryContextSwitchTo(context);
	return found;
}

/*
 * StartWorker registers the database's worker; the postmaster tells this
 * launcher (bgw_notify_pid) when it starts and when it stops.
 */
static void
StartWorker(int slotno, const char *database)
{
	BackgroundWorker worker;
	MemoryContext context;
	bool		registered;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "workflow", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "WfMaintenanceWorkerMain", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "workflow maintenance of %s", database);
	strlcpy(worker.bgw_type, "workflow maintenance", BGW_MAXLEN);
	worker.bgw_main_arg = Int32GetDatum(slotno);
	strlcpy(worker.bgw_extra, database, BGW_EXTRALEN);
	worker.bgw_notify_pid = MyProcPid;
	context = MemoryContextSwitchTo(TopMemoryContext);
	registered = RegisterDynamicBackgroundWorker(&worker, &launched[slotno].handle);
	MemoryContextSwitchTo(context);
	if (!registered)
	{
		launched[slotno].handle = NULL;
		WarnOnce(slotno, "no background worker slot",
				 psprintf("workflow maintenance: no background worker slot for database \"%s\"",
						  database));
		return;
	}
	launched[slotno].warned[0] = '\0';
}

/*
 * StopUnlisted stops the workers of databases taken off the list and frees
 * their slots; a worker also stops by itself once its slot is no longer
 * its own.
 */
static void
StopUnlisted(const bool *listed)
{
	for (int slotno = 0; slotno < WF_MAINTENANCE_SLOTS; slotno++)
	{
		NameData	database;
		pid_t		pid;

		if (listed[slotno] || !WfMaintenanceSlotUsed(slotno, &database, &pid))
			continue;
		if (launched[slotno].handle != NULL)
		{
			TerminateBackgroundWorker(launched[slotno].handle);
			pfree(launched[slotno].handle);
		}
		else if (pid != 0)
			(void) kill(pid, SIGTERM);
		WfMaintenanceSlotForget(slotno);
		memset(&launched[slotno], 0, sizeof(LaunchedWorker));
	}
}

/*
 * WarnOnce logs a problem that stops a database's maintenance when it is
 * new, and shows it in the slot every time.
 */
static void
WarnOnce(int slotno, const char *state, const char *message)
{
	WfMaintenanceSlotState(slotno, state);
	if (strcmp(launched[slotno].warned, state) == 0)
		return;
	strlcpy(launched[slotno].warned, state, sizeof(launched[slotno].warned));
	ereport(WARNING, (errmsg_internal("%s", message)));
}
