/*-------------------------------------------------------------------------
 *
 * maintenance_worker.c
 *	  A database's maintenance worker: every workflow.maintenance_interval
 *	  one pass of reap_expired, fire_timers, purge and VACUUM.
 *
 * The launcher (maintenance_launcher.c) starts one per listed database and
 * names its slot (maintenance_status.c), which the worker claims first: a
 * second worker for the same database exits at once.  A pass, as the
 * bootstrap superuser, in READ COMMITTED:
 *
 *	- skips the database while the extension is missing, or installed at
 *	  another version than the library's (the state in the view says so);
 *	- calls workflow.reap_expired() until it expires nothing (at most 100
 *	  calls a pass), then workflow.fire_timers(1000) until it fires less
 *	  than a page (at most 100 calls), each call its own transaction;
 *	- with workflow.retention set, calls workflow.purge(retention, 1000)
 *	  until it deletes less than a page, at most 100 calls a pass;
 *	- VACUUMs (SKIP_LOCKED) each of the engine's busy tables whose dead
 *	  tuples (pg_stat_get_dead_tuples) reach
 *	  workflow.maintenance_vacuum_threshold.
 *
 * An error in one step is logged, counted in the view, and the pass goes
 * on with the next step.  The session sets workflow.notify_jobs = on, so
 * jobs a reap or a timer makes due wake waiting workers.  A pass logs at
 * DEBUG1; what the passes did is logged at LOG at most once a minute, and
 * only when they did something.
 *
 * Between passes the worker waits on its latch, waking at least twice a
 * second, and before every step it looks whether its database is wanted
 * without sessions: DROP DATABASE, CREATE DATABASE with it as template,
 * and renaming or moving it hold a lock on the database that conflicts
 * with the one a new session takes, while they wait (5 s at most) for its
 * sessions to leave; a try of that lock tells, and the worker exits (the
 * launcher starts it again after an interval if the database is still
 * there).  SIGTERM (server shutdown, or the launcher when the database is
 * taken off the list) ends the worker at once, as it ends a backend
 * (die); a cancel while it is idle is ignored.
 *
 * Locks: a session RowExclusiveLock on its database, tried and released
 * at once; what the engine's functions and VACUUM take.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "commands/vacuum.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "parser/parse_node.h"
#include "parser/parser.h"
#include "pgstat.h"
#include "portability/instr_time.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "workflow.h"

/* At most this long between two looks at a pending DROP DATABASE. */
#define DROP_CHECK_MS 500
/* fire_timers and purge work pages of this many rows. */
#define PAGE 1000
#define MAX_CALLS 100
/* reap_expired expires up to 100 leases a call: call it until it finds none. */
#define MAX_REAP_CALLS 100
#define SUMMARY_EVERY_MS (60 * 1000)

/*
 * The tables that take dead tuples on every event; parked_steps on every
 * step a capped run lets run, whose scan for the oldest row walks the
 * dead entries at the head of its index until a VACUUM removes them.
 */
static const char *const busy_tables[] = {
	"job_queue", "workflow_steps", "workflow_runs", "workflow_run_counters",
	"workflow_events", "event_inbox", "parked_steps"
};

/* What the passes did since the last LOG line. */
typedef struct Summary
{
	TimestampTz since;
	int64		passes;
	int64		reaped;
	int64		fired;
	int64		purged;
	int64		vacuums;
	int64		errors;
} Summary;

/* A step of a pass, run in its own transaction. */
typedef void (*PassStep) (void *arg);

typedef struct ScalarCall
{
	const char *sql;
	const char *text_arg;		/* $1 as text, or NULL for none */
	int64		result;
} ScalarCall;

/* Set once the worker must go: its database is being dropped or its slot taken. */
static bool leaving = false;
static int	my_slot = -1;
static char my_database[NAMEDATALEN];
static MemoryContext pass_context = NULL;
static Summary summary;

PGDLLEXPORT void WfMaintenanceWorkerMain(Datum main_arg);

static void LeaveSlot(int code, Datum arg);
static bool StillMine(void);
static bool DatabaseBeingDropped(void);
static bool MustLeave(void);
static void WaitForNextPass(TimestampTz next_pass);
static void RunPass(void);
static bool RunStep(PassStep step, void *arg, const char *what);
static void ExtensionStep(void *arg);
static void ScalarStep(void *arg);
static int64 RunPages(const char *sql, const char *text_arg, int64 page,
					  int max_calls, bool *failed);
static void VacuumBusyTables(WfMaintenancePass *pass);
static void DeadTuplesStep(void *arg);
static void VacuumStep(void *arg);
static void Summarize(const WfMaintenancePass *pass, int errors);

static void
LeaveSlot(int code, Datum arg)
{
	WfMaintenanceSlotLeave(DatumGetInt32(arg));
}

/* The worker's main loop: a pass every interval until told to stop. */
void
WfMaintenanceWorkerMain(Datum main_arg)
{
	TimestampTz next_pass = 0;

	my_slot = DatumGetInt32(main_arg);
	strlcpy(my_database, MyBgworkerEntry->bgw_extra, sizeof(my_database));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	if (!WfMaintenanceSlotClaim(my_slot, my_database))
		proc_exit(0);
	before_shmem_exit(LeaveSlot, Int32GetDatum(my_slot));

	BackgroundWorkerInitializeConnection(my_database, NULL, 0);
	pgstat_report_appname("workflow maintenance");
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("workflow.notify_jobs", "on", PGC_SUSET, PGC_S_OVERRIDE);
	pass_context = AllocSetContextCreate(TopMemoryContext,
										 "workflow maintenance pass",
										 ALLOCSET_DEFAULT_SIZES);
	summary.since = GetCurrentTimestamp();
	WfMaintenanceSlotState(my_slot, "started");

	while (!MustLeave())
	{
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (GetCurrentTimestamp() >= next_pass)
		{
			RunPass();
			next_pass = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													wf_maintenance_interval_ms);
		}
		WaitForNextPass(next_pass);
	}
	proc_exit(0);
}

/* StillMine says whether the slot still belongs to this process. */
static bool
StillMine(void)
{
	NameData	database;
	pid_t		pid;

	return WfMaintenanceSlotUsed(my_slot, &database, &pid) && pid == MyProcPid;
}

/*
 * DatabaseBeingDropped tries the lock a new session takes on its database
 * (RowExclusiveLock, as InitPostgres does): DROP DATABASE, CREATE DATABASE
 * using it as template, and renaming or moving it hold a lock that
 * conflicts while they wait for the database's sessions to leave, so if it
 * is not free this worker must leave.
 */
static bool
DatabaseBeingDropped(void)
{
	LOCKTAG		tag;

	SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, MyDatabaseId, 0);
	if (LockAcquire(&tag, RowExclusiveLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
	{
		ereport(LOG,
				(errmsg("workflow maintenance of database \"%s\" stops: the database is being dropped, copied or altered",
						my_database)));
		return true;
	}
	LockRelease(&tag, RowExclusiveLock, true);
	return false;
}

/*
 * MustLeave says whether the worker must stop now: its slot was taken
 * back, or its database is wanted without sessions.  It is asked between
 * passes and before every step, so that a pass never keeps a DROP
 * DATABASE waiting for more than one step.
 */
static bool
MustLeave(void)
{
	if (!leaving && (!StillMine() || DatabaseBeingDropped()))
		leaving = true;
	return leaving;
}

/* WaitForNextPass sleeps until the next pass, or a signal, or a DROP check. */
static void
WaitForNextPass(TimestampTz next_pass)
{
	long		wait_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
														  next_pass);

	if (wait_ms <= 0)
		return;
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 Min(wait_ms, DROP_CHECK_MS), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	/* a cancel while idle has nothing to cancel; SIGTERM still ends us */
	QueryCancelPending = false;
	CHECK_FOR_INTERRUPTS();
}

/* RunPass runs one pass and records it in the slot. */
static void
RunPass(void)
{
	WfMaintenancePass pass;
	instr_time	start;
	instr_time	duration;
	char	   *problem = NULL;
	bool		failed = false;
	int			errors = 0;

	MemoryContextReset(pass_context);
	MemoryContextSwitchTo(pass_context);
	memset(&pass, 0, sizeof(pass));
	INSTR_TIME_SET_CURRENT(start);

	if (!RunStep(ExtensionStep, &problem, "checking the extension"))
		return;
	if (problem != NULL)
	{
		WfMaintenanceSlotState(my_slot, problem);
		return;
	}
	WfMaintenanceSlotState(my_slot, "maintaining");
	pass.reaped = RunPages("SELECT workflow.reap_expired()::pg_catalog.int8",
						   NULL, 1, MAX_REAP_CALLS, &failed);
	errors += failed;
	pass.fired = RunPages("SELECT workflow.fire_timers(1000)::pg_catalog.int8",
						  NULL, PAGE, MAX_CALLS, &failed);
	errors += failed;
	if (pg_strcasecmp(wf_retention, "off") != 0 && wf_retention[0] != '\0')
	{
		pass.purged = RunPages("SELECT workflow.purge($1::pg_catalog.interval, 1000)",
							   wf_retention, PAGE, MAX_CALLS, &failed);
		errors += failed;
	}
	VacuumBusyTables(&pass);

	INSTR_TIME_SET_CURRENT(duration);
	INSTR_TIME_SUBTRACT(duration, start);
	pass.ms = INSTR_TIME_GET_MILLISEC(duration);
	WfMaintenanceSlotPass(my_slot, &pass);
	pgstat_report_stat(false);
	Summarize(&pass, errors);
}

/*
 * RunStep runs a step in a transaction of its own.  An error is logged,
 * recorded in the slot and rolled back; the pass goes on.
 */
static bool
RunStep(PassStep step, void *arg, const char *what)
{
	MemoryContext context = CurrentMemoryContext;
	volatile bool ok = true;

	if (MustLeave())
		return false;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		step(arg);
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(context);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		ereport(LOG,
				(errmsg("workflow maintenance of database \"%s\" failed %s: %s",
						my_database, what, edata->message)));
		WfMaintenanceSlotError(my_slot, edata->message);
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	PortalContext = NULL;
	MemoryContextSwitchTo(context);
	pgstat_report_activity(STATE_IDLE, NULL);
	return ok;
}

/*
 * ExtensionStep sets *arg to why this database cannot be maintained now,
 * or leaves it NULL.
 */
static void
ExtensionStep(void *arg)
{
	char	  **problem = (char **) arg;
	MemoryContext context = CurrentMemoryContext;
	char	   *version = NULL;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_execute("SELECT e.extversion FROM pg_catalog.pg_extension e"
					" WHERE e.extname OPERATOR(pg_catalog.=) 'workflow'",
					true, 1) != SPI_OK_SELECT)
		elog(ERROR, "the extension could not be looked up");
	if (SPI_processed == 1)
		version = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	MemoryContextSwitchTo(pass_context);
	if (version == NULL)
		*problem = pstrdup("extension not installed");
	else if (strcmp(version, WF_SQL_VERSION) != 0)
		*problem = psprintf("extension at %s, library at %s: update it",
							version, WF_SQL_VERSION);
	MemoryContextSwitchTo(context);
	PopActiveSnapshot();
	SPI_finish();
}

/* ScalarStep runs a query that returns one bigint. */
static void
ScalarStep(void *arg)
{
	ScalarCall *call = (ScalarCall *) arg;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	int			ret;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, call->sql);
	if (call->text_arg != NULL)
	{
		values[0] = CStringGetTextDatum(call->text_arg);
		ret = SPI_execute_with_args(call->sql, 1, types, values, NULL, false, 1);
	}
	else
		ret = SPI_execute(call->sql, false, 1);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "\"%s\" returned no row", call->sql);
	call->result = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											   SPI_tuptable->tupdesc, 1, &isnull));
	if (isnull)
		call->result = 0;
	PopActiveSnapshot();
	SPI_finish();
}

/*
 * RunPages calls a function that works a page of rows at a time until it
 * returns less than page, at most max_calls times, and returns the sum.
 * *failed says whether a call failed (which ends the loop).
 */
static int64
RunPages(const char *sql, const char *text_arg, int64 page, int max_calls,
		 bool *failed)
{
	ScalarCall	call;
	int64		total = 0;

	*failed = false;
	for (int i = 0; i < max_calls && !leaving; i++)
	{
		call.sql = sql;
		call.text_arg = text_arg;
		call.result = 0;
		if (!RunStep(ScalarStep, &call, sql))
		{
			*failed = !leaving;
			break;
		}
		total += call.result;
		if (call.result < page)
			break;
	}
	return total;
}

/* The dead tuples of each busy table, read in one transaction. */
typedef struct DeadTuples
{
	int64		dead[lengthof(busy_tables)];
} DeadTuples;

static void
DeadTuplesStep(void *arg)
{
	DeadTuples *counts = (DeadTuples *) arg;
	Oid			schema = get_namespace_oid("workflow", false);

	for (int i = 0; i < lengthof(busy_tables); i++)
	{
		Oid			relid = get_relname_relid(busy_tables[i], schema);

		counts->dead[i] = OidIsValid(relid) ?
			DatumGetInt64(DirectFunctionCall1(pg_stat_get_dead_tuples,
											  ObjectIdGetDatum(relid))) : 0;
	}
}

/*
 * VacuumStep vacuums one table as VACUUM (SKIP_LOCKED) would at top level:
 * VACUUM commits the transaction it is called in and runs its own, so the
 * statement is parsed into the pass's memory, not the transaction's.
 */
static void
VacuumStep(void *arg)
{
	const char *sql = psprintf("VACUUM (SKIP_LOCKED) workflow.%s",
							   (const char *) arg);
	MemoryContext context = MemoryContextSwitchTo(pass_context);
	List	   *parsed = raw_parser(sql, RAW_PARSE_DEFAULT);
	RawStmt    *raw = linitial_node(RawStmt, parsed);
	ParseState *pstate = make_parsestate(NULL);
	MemoryContext portal = AllocSetContextCreate(pass_context, "workflow maintenance vacuum",
												 ALLOCSET_DEFAULT_SIZES);

	pstate->p_sourcetext = sql;
	MemoryContextSwitchTo(context);
	pgstat_report_activity(STATE_RUNNING, sql);
	PortalContext = portal;
	PushActiveSnapshot(GetTransactionSnapshot());
	ExecVacuum(pstate, castNode(VacuumStmt, raw->stmt), true);
}

/* VacuumBusyTables vacuums each busy table with enough dead tuples. */
static void
VacuumBusyTables(WfMaintenancePass *pass)
{
	DeadTuples	counts;

	memset(&counts, 0, sizeof(counts));
	if (!RunStep(DeadTuplesStep, &counts, "reading dead tuples"))
		return;
	for (int i = 0; i < lengthof(busy_tables) && !leaving; i++)
	{
		if (counts.dead[i] < wf_maintenance_vacuum_threshold)
			continue;
		if (!RunStep(VacuumStep, (void *) busy_tables[i], "vacuuming"))
			continue;
		pass->vacuumed++;
		if (pass->vacuumed_tables[0] != '\0')
			strlcat(pass->vacuumed_tables, ",", sizeof(pass->vacuumed_tables));
		strlcat(pass->vacuumed_tables, busy_tables[i], sizeof(pass->vacuumed_tables));
	}
}

/*
 * Summarize logs the pass at DEBUG1 and, at most once a minute, what the
 * passes since the last summary did, if they did anything.
 */
static void
Summarize(const WfMaintenancePass *pass, int errors)
{
	TimestampTz now = GetCurrentTimestamp();

	ereport(DEBUG1,
			(errmsg_internal("workflow maintenance of database \"%s\": reaped %lld, fired %lld, purged %lld, vacuumed %s, %d errors, in %.1f ms",
							 my_database, (long long) pass->reaped,
							 (long long) pass->fired, (long long) pass->purged,
							 pass->vacuumed > 0 ? pass->vacuumed_tables : "nothing",
							 errors, pass->ms)));
	summary.passes++;
	summary.reaped += pass->reaped;
	summary.fired += pass->fired;
	summary.purged += pass->purged;
	summary.vacuums += pass->vacuumed;
	summary.errors += errors;
	if (!TimestampDifferenceExceeds(summary.since, now, SUMMARY_EVERY_MS))
		return;
	if (summary.reaped + summary.fired + summary.purged + summary.vacuums +
		summary.errors > 0)
		ereport(LOG,
				(errmsg("workflow maintenance of database \"%s\": %lld passes in the last %ld s reaped %lld leases, fired %lld timers, purged %lld runs and jobs, ran %lld vacuums, met %lld errors",
						my_database, (long long) summary.passes,
						(long) (TimestampDifferenceMilliseconds(summary.since, now) / 1000),
						(long long) summary.reaped, (long long) summary.fired,
						(long long) summary.purged, (long long) summary.vacuums,
						(long long) summary.errors)));
	memset(&summary, 0, sizeof(summary));
	summary.since = now;
}

/*
 * WfRetentionCheck accepts "off", or an interval of at least zero in
 * PostgreSQL's interval syntax ('7 days', '12h', 'P7D'), without raising
 * an error: the postmaster runs it too.  A month counts as 30 days, as
 * purge compares intervals.
 */
bool
WfRetentionCheck(char **newval, void **extra, GucSource source)
{
	char		workbuf[256];
	char	   *field[MAXDATEFIELDS];
	int			ftype[MAXDATEFIELDS];
	int			nf;
	int			dtype;
	struct pg_itm_in itm;
	Interval	span;
	char	   *copy;
	bool		parsed;

	if (pg_strcasecmp(*newval, "off") == 0)
		return true;
	parsed = ParseDateTime(*newval, workbuf, sizeof(workbuf), field, ftype,
						   MAXDATEFIELDS, &nf) == 0 &&
		DecodeInterval(field, ftype, nf, INTERVAL_FULL_RANGE, &dtype, &itm) == 0;
	if (!parsed)
	{
		copy = pstrdup(*newval);
		parsed = DecodeISO8601Interval(copy, &dtype, &itm) == 0;
		pfree(copy);
	}
	if (!parsed || dtype != DTK_DELTA || itmin2interval(&itm, &span) != 0)
	{
		GUC_check_errdetail("Give \"off\" or an interval, such as '7 days'.");
		return false;
	}
	if ((double) span.month * DAYS_PER_MONTH * SECS_PER_DAY +
		(double) span.day * SECS_PER_DAY + (double) span.time / USECS_PER_SEC < 0)
	{
		GUC_check_errdetail("The retention must not be negative.");
		return false;
	}
	return true;
}
