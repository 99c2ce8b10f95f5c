/*-------------------------------------------------------------------------
 *
 * maintenance_status.c
 *	  The maintenance workers' shared memory: one slot per maintained
 *	  database, and the SQL function behind workflow.maintenance_status.
 *
 * A slot names a database of workflow.maintenance_databases, the process
 * that maintains it, and what its passes did: when the last one ended, how
 * long it took, what it reaped, fired, purged and vacuumed, and the last
 * error.  The launcher (maintenance_launcher.c) hands out and takes back
 * the slots; a database's worker (maintenance_worker.c) claims its slot
 * when it starts, so that at most one process maintains a database even
 * when a restarted launcher registers a second one, and writes its passes
 * there.  The memory exists only when the library is in
 * shared_preload_libraries; without it the view is empty.  It is
 * initialized again after a crash, and the figures count from the start
 * of the server.
 *
 * Locks: AddinShmemInitLock while the memory is set up; each slot's
 * spinlock, held only to copy a few fields.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "workflow.h"

#define WF_MAINTENANCE_ERROR_BYTES 256
#define WF_MAINTENANCE_STATE_BYTES 64

typedef struct WfMaintenanceSlot
{
	slock_t		mutex;
	bool		in_use;
	NameData	database;
	pid_t		pid;
	TimestampTz worker_started_at;
	char		state[WF_MAINTENANCE_STATE_BYTES];
	WfMaintenancePass last;
	TimestampTz last_pass_at;
	int64		passes;
	int64		reaped;
	int64		fired;
	int64		purged;
	int64		vacuums;
	TimestampTz last_vacuum_at;
	int64		errors;
	TimestampTz last_error_at;
	char		last_error[WF_MAINTENANCE_ERROR_BYTES];
} WfMaintenanceSlot;

typedef struct WfMaintenanceShared
{
	WfMaintenanceSlot slots[WF_MAINTENANCE_SLOTS];
} WfMaintenanceShared;

static WfMaintenanceShared *shared = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

PG_FUNCTION_INFO_V1(workflow_maintenance_passes);

static void MaintenanceShmemRequest(void);
static void MaintenanceShmemStartup(void);
static WfMaintenanceSlot *Slot(int slotno);
static void EmitSlot(Tuplestorestate *store, TupleDesc desc,
					 const WfMaintenanceSlot *copy);

/*
 * WfMaintenanceShmemInit asks for the slots' memory; called from _PG_init
 * while the library is being preloaded.
 */
void
WfMaintenanceShmemInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = MaintenanceShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = MaintenanceShmemStartup;
}

static void
MaintenanceShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(WfMaintenanceShared)));
}

/* MaintenanceShmemStartup creates the slots, empty, at every (re)start. */
static void
MaintenanceShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("workflow maintenance", sizeof(WfMaintenanceShared),
							 &found);
	if (!found)
	{
		memset(shared, 0, sizeof(WfMaintenanceShared));
		for (int i = 0; i < WF_MAINTENANCE_SLOTS; i++)
			SpinLockInit(&shared->slots[i].mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

static WfMaintenanceSlot *
Slot(int slotno)
{
	if (shared == NULL || slotno < 0 || slotno >= WF_MAINTENANCE_SLOTS)
		elog(ERROR, "no maintenance slot %d", slotno);
	return &shared->slots[slotno];
}

/*
 * WfMaintenanceSlotFor returns the slot of a database, taking a free one
 * when it has none; -1 when every slot is taken.  A slot is free once it
 * was given up and its worker has left it.  Only the launcher calls it, so
 * two calls never race for a free slot.
 */
int
WfMaintenanceSlotFor(const char *database)
{
	int			free_slot = -1;

	for (int i = 0; i < WF_MAINTENANCE_SLOTS; i++)
	{
		WfMaintenanceSlot *slot = Slot(i);
		bool		mine;

		SpinLockAcquire(&slot->mutex);
		mine = slot->in_use && strcmp(NameStr(slot->database), database) == 0;
		/* a slot given up keeps its worker until that worker has left */
		if (!slot->in_use && slot->pid == 0 && free_slot < 0)
			free_slot = i;
		SpinLockRelease(&slot->mutex);
		if (mine)
			return i;
	}
	if (free_slot >= 0)
	{
		WfMaintenanceSlot *slot = Slot(free_slot);

		SpinLockAcquire(&slot->mutex);
		memset((char *) slot + offsetof(WfMaintenanceSlot, in_use), 0,
			   sizeof(WfMaintenanceSlot) - offsetof(WfMaintenanceSlot, in_use));
		slot->in_use = true;
		namestrcpy(&slot->database, database);
		strlcpy(slot->state, "starting", sizeof(slot->state));
		SpinLockRelease(&slot->mutex);
	}
	return free_slot;
}

/*
 * WfMaintenanceSlotUsed says whether a slot is taken, and gives its
 * database and the pid of its worker (0 when none runs).
 */
bool
WfMaintenanceSlotUsed(int slotno, NameData *database, pid_t *pid)
{
	WfMaintenanceSlot *slot = Slot(slotno);
	bool		in_use;

	SpinLockAcquire(&slot->mutex);
	in_use = slot->in_use;
	*database = slot->database;
	*pid = slot->pid;
	SpinLockRelease(&slot->mutex);
	return in_use;
}

/* WfMaintenanceSlotForget frees the slot of a database no longer listed. */
void
WfMaintenanceSlotForget(int slotno)
{
	WfMaintenanceSlot *slot = Slot(slotno);

	SpinLockAcquire(&slot->mutex);
	slot->in_use = false;
	SpinLockRelease(&slot->mutex);
}

/*
 * WfMaintenanceSlotClaim makes this process the slot's worker, unless the
 * slot was freed, names another database, or has a worker already.
 */
bool
WfMaintenanceSlotClaim(int slotno, const char *database)
{
	WfMaintenanceSlot *slot = Slot(slotno);
	bool		claimed = false;

	SpinLockAcquire(&slot->mutex);
	if (slot->in_use && slot->pid == 0 &&
		strcmp(NameStr(slot->database), database) == 0)
	{
		slot->pid = MyProcPid;
		slot->worker_started_at = GetCurrentTimestamp();
		claimed = true;
	}
	SpinLockRelease(&slot->mutex);
	return claimed;
}

/* WfMaintenanceSlotLeave gives the slot up as its worker exits. */
void
WfMaintenanceSlotLeave(int slotno)
{
	WfMaintenanceSlot *slot = Slot(slotno);

	SpinLockAcquire(&slot->mutex);
	if (slot->pid == MyProcPid)
	{
		slot->pid = 0;
		strlcpy(slot->state, "stopped", sizeof(slot->state));
	}
	SpinLockRelease(&slot->mutex);
}

/* WfMaintenanceSlotState says what the worker is doing or why it waits. */
void
WfMaintenanceSlotState(int slotno, const char *state)
{
	WfMaintenanceSlot *slot = Slot(slotno);

	SpinLockAcquire(&slot->mutex);
	strlcpy(slot->state, state, sizeof(slot->state));
	SpinLockRelease(&slot->mutex);
}

/* WfMaintenanceSlotPass adds a finished pass to the slot's figures. */
void
WfMaintenanceSlotPass(int slotno, const WfMaintenancePass *pass)
{
	WfMaintenanceSlot *slot = Slot(slotno);
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&slot->mutex);
	slot->last = *pass;
	slot->last_pass_at = now;
	slot->passes++;
	slot->reaped += pass->reaped;
	slot->fired += pass->fired;
	slot->purged += pass->purged;
	slot->vacuums += pass->vacuumed;
	if (pass->vacuumed > 0)
		slot->last_vacuum_at = now;
	SpinLockRelease(&slot->mutex);
}

/* WfMaintenanceSlotError records an error a pass caught and logged. */
void
WfMaintenanceSlotError(int slotno, const char *message)
{
	WfMaintenanceSlot *slot = Slot(slotno);

	SpinLockAcquire(&slot->mutex);
	slot->errors++;
	slot->last_error_at = GetCurrentTimestamp();
	strlcpy(slot->last_error, message, sizeof(slot->last_error));
	SpinLockRelease(&slot->mutex);
}

/* EmitSlot adds one row of the view, from a copy of a slot. */
static void
EmitSlot(Tuplestorestate *store, TupleDesc desc, const WfMaintenanceSlot *copy)
{
	Datum		values[18];
	bool		nulls[18];
	int			n = 0;

	memset(nulls, 0, sizeof(nulls));
#define WF_TIME_OR_NULL(t) \
	do { nulls[n] = ((t) == 0); values[n++] = TimestampTzGetDatum(t); } while (0)
	values[n++] = CStringGetTextDatum(NameStr(copy->database));
	nulls[n] = (copy->pid == 0);
	values[n++] = Int32GetDatum(copy->pid);
	values[n++] = CStringGetTextDatum(copy->state);
	WF_TIME_OR_NULL(copy->last_pass_at);
	nulls[n] = (copy->passes == 0);
	values[n++] = Float8GetDatum(copy->last.ms);
	values[n++] = Int64GetDatum(copy->passes);
	values[n++] = Int64GetDatum(copy->last.reaped);
	values[n++] = Int64GetDatum(copy->last.fired);
	values[n++] = Int64GetDatum(copy->last.purged);
	values[n++] = CStringGetTextDatum(copy->last.vacuumed_tables);
	values[n++] = Int64GetDatum(copy->reaped);
	values[n++] = Int64GetDatum(copy->fired);
	values[n++] = Int64GetDatum(copy->purged);
	values[n++] = Int64GetDatum(copy->vacuums);
	WF_TIME_OR_NULL(copy->last_vacuum_at);
	values[n++] = Int64GetDatum(copy->errors);
	WF_TIME_OR_NULL(copy->last_error_at);
	nulls[n] = (copy->errors == 0);
	values[n++] = CStringGetTextDatum(copy->last_error);
#undef WF_TIME_OR_NULL
	Assert(n == lengthof(values) && n == desc->natts);
	tuplestore_putvalues(store, desc, values, nulls);
}

/*
 * workflow._maintenance_passes(): one row per maintained database, from
 * copies of the slots taken under their spinlocks.  Readable by anyone
 * who may call it; it shows database names and counts, nothing of the
 * rows.
 */
Datum
workflow_maintenance_passes(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (shared == NULL)
		PG_RETURN_VOID();
	for (int i = 0; i < WF_MAINTENANCE_SLOTS; i++)
	{
		WfMaintenanceSlot copy;

		SpinLockAcquire(&shared->slots[i].mutex);
		copy = shared->slots[i];
		SpinLockRelease(&shared->slots[i].mutex);
		if (copy.in_use)
			EmitSlot(rsinfo->setResult, rsinfo->setDesc, &copy);
	}
	PG_RETURN_VOID();
}
