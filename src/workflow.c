/*-------------------------------------------------------------------------
 *
 * workflow.c
 *	  Module entry: the library's magic block, _PG_init and the settings.
 *
 * Owns the workflow.* settings, which every other file reads.  _PG_init
 * registers them, then lets each module set itself up: the transaction
 * callbacks (xact_state.c), the cache invalidation callbacks
 * (privilege.c), and the end-of-transaction hooks of the modules that
 * collect work within a transaction (status.c, cascade.c, triggers.c).
 * Nothing here runs after _PG_init, and no other file calls into it.
 *
 * Takes no locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/guc.h"

#include "workflow.h"

PG_MODULE_MAGIC;

int			wf_max_steps = 100000;
int			wf_max_repeat_iterations = 1000;
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
bool		wf_notify_jobs = false;
int			wf_history = WF_HISTORY_STEPS;
char	   *wf_maintenance_databases = NULL;
int			wf_maintenance_interval_ms = 1000;
char	   *wf_retention = NULL;
int			wf_maintenance_vacuum_threshold = 1000;

static const struct config_enum_entry history_options[] = {
	{"steps", WF_HISTORY_STEPS, false},
	{"runs", WF_HISTORY_RUNS, false},
	{"off", WF_HISTORY_OFF, false},
	{NULL, 0, false}
};

void		_PG_init(void);
static void DefineMaintenanceSettings(void);

/*
 * _PG_init registers the settings, then the callbacks and hooks of the
 * modules, lowest first.
 */
void
_PG_init(void)
{
	DefineCustomIntVariable("workflow.max_steps",
							"Largest number of steps in one run.",
							NULL, &wf_max_steps, 100000, 1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("workflow.max_repeat_iterations",
							"Largest max_iterations of a repeat step.",
							NULL, &wf_max_repeat_iterations, 1000, 1,
							1000000, PGC_SUSET, 0, NULL, NULL, NULL);
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
	DefineCustomBoolVariable("workflow.notify_jobs",
							 "Wakes waiting workers: one notification on channel workflow_jobs per job type per transaction that makes jobs of that type due now.",
							 "The payload is the job type.  Off by default: a notification takes a cluster-wide lock at commit.",
							 &wf_notify_jobs, false,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("workflow.history",
							 "What the event history records: steps (every event), runs (run events and operator actions) or off.",
							 "Superusers only, so that no caller can hide its own actions.",
							 &wf_history, WF_HISTORY_STEPS, history_options,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	DefineMaintenanceSettings();
	MarkGUCPrefixReserved("workflow");

	WfPrivilegeInit();
	WfXactStateInit();
	WfStatusInit();
	WfCascadeInit();
	WfTriggersInit();
	if (process_shared_preload_libraries_in_progress)
	{
		WfMaintenanceShmemInit();
		WfMaintenanceLauncherRegister();
	}
}

/*
 * DefineMaintenanceSettings registers the settings of the maintenance
 * workers.  They are read from the server's configuration only (a reload
 * applies them), and they exist, with no effect, when the library is not
 * preloaded.
 */
static void
DefineMaintenanceSettings(void)
{
	DefineCustomStringVariable("workflow.maintenance_databases",
							   "Databases whose workflow maintenance the background worker does, comma-separated.",
							   "Needs workflow in shared_preload_libraries; empty: none.",
							   &wf_maintenance_databases, "",
							   PGC_SIGHUP, GUC_LIST_INPUT, WfDatabaseListCheck, NULL, NULL);
	DefineCustomIntVariable("workflow.maintenance_interval",
							"Time between two maintenance passes of a database.",
							NULL, &wf_maintenance_interval_ms, 1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomStringVariable("workflow.retention",
							   "How long finished runs and jobs are kept before maintenance purges them; off keeps them.",
							   "An interval such as '7 days'.",
							   &wf_retention, "off",
							   PGC_SIGHUP, 0, WfRetentionCheck, NULL, NULL);
	DefineCustomIntVariable("workflow.maintenance_vacuum_threshold",
							"Dead tuples of a busy table from which a maintenance pass vacuums it.",
							NULL, &wf_maintenance_vacuum_threshold, 1000, 1, INT_MAX,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
}
