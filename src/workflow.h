/*-------------------------------------------------------------------------
 *
 * workflow.h
 *	  Shared declarations of the workflow extension, grouped by the file
 *	  that owns them.
 *
 * The groups run down the module call graph: a file calls functions only
 * of the files whose group comes after its own (docs/DECISIONS.md, "Source
 * layout").  The settings are variables, which every file reads;
 * xact_state.c calls the other files' transaction hooks only through the
 * pointers they register.
 *
 *-------------------------------------------------------------------------
 */
#ifndef WORKFLOW_H
#define WORKFLOW_H

#include "postgres.h"

#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "errors.h"

/*
 * OP qualifies an operator in SPI text so that no object on the caller's
 * search_path can stand in for it.
 */
#define OP(o) " OPERATOR(pg_catalog." o ") "

/* The statuses after which a job or step never changes again. */
#define WF_TERMINAL_STATUS(s) \
	(strcmp((s), "SUCCEEDED") == 0 || strcmp((s), "FAILED") == 0 || \
	 strcmp((s), "CANCELED") == 0)

/*
 * The run counters a step moves between.  ENQUEUED and RUNNING share
 * WF_COUNT_ACTIVE, so claims and retries never touch the run row.
 * PARKED steps exist only in capped runs, which have no counter shards;
 * WF_COUNT_EXECUTIONS counts the jobs created for the run's job steps.
 */
typedef enum WfCounter
{
	WF_COUNT_ACTIVE = 0,
	WF_COUNT_WAITING,
	WF_COUNT_BLOCKED,
	WF_COUNT_SUCCEEDED,
	WF_COUNT_FAILED,
	WF_COUNT_CANCELED,
	WF_COUNT_PARKED,
	WF_COUNT_EXECUTIONS,
	WF_NUM_COUNTERS
} WfCounter;

/* workflow.c: settings */
extern int	wf_max_steps;
extern int	wf_max_repeat_iterations;
extern int	wf_max_edges;
extern int	wf_max_payload_bytes;
extern int	wf_max_job_type_bytes;
extern int	wf_max_step_key_length;
extern int	wf_max_error_message_bytes;
extern int	wf_max_idempotency_key_bytes;
extern int	wf_retry_base_delay_ms;
extern int	wf_retry_max_delay_ms;
extern int	wf_counter_shards;
#define WF_MAX_COUNTER_SHARDS 1024
extern int	wf_counter_shard_min_width;
extern bool wf_notify_per_organization;
extern bool wf_notify_jobs;

typedef enum WfHistoryLevel
{
	WF_HISTORY_OFF = 0,
	WF_HISTORY_RUNS,
	WF_HISTORY_STEPS
} WfHistoryLevel;
extern int	wf_history;
extern char *wf_maintenance_databases;
extern int	wf_maintenance_interval_ms;
extern char *wf_retention;
extern int	wf_maintenance_vacuum_threshold;

/* queue.c: the single-job calls; the job state claim.c and batch.c share */

/* the columns WfReadJobState reads, in its order, of job_queue j */
#define WF_JOB_STATE_COLUMNS \
	"j.id, j.status::pg_catalog.text, j.lease_token, j.output," \
	" j.last_error_code, j.last_error_message, j.attempt, j.max_attempts," \
	" j.workflow_step_id, j.workflow_run_id, j.organization_id"
#define WF_JOB_STATE_NCOLUMNS 11

/* What a worker-facing call needs to know about a job it names. */
typedef struct WfJobState
{
	pg_uuid_t	id;
	bool		found;
	char	   *status;
	bool		has_token;
	pg_uuid_t	lease_token;
	bool		output_null;
	Datum		output;
	char	   *error_code;
	char	   *error_message;
	int32		attempt;
	int32		max_attempts;
	bool		has_step;
	pg_uuid_t	step_id;
	bool		has_run;
	pg_uuid_t	run_id;
	bool		has_org;
	pg_uuid_t	org;
} WfJobState;

/*
 * A checked complete_job call, ready to run: job_id, lease_token, output
 * and the caller's organizations (NULL when unconfined), as SPI parameters.
 */
typedef struct WfCompletion
{
	Datum		values[4];
	char		nulls[4];
} WfCompletion;

extern void WfParseCompletion(FunctionCallInfo fcinfo,
							  WfCompletion *completion);
extern void WfCompleteOne(WfCompletion *completion);
extern text *WfArgText(FunctionCallInfo fcinfo, int n, const char *name);
extern void WfCheckJsonbSize(Datum value, const char *name);
extern void WfReadJobState(uint64 row, WfJobState *job);
extern bool WfCheckWorkerJob(const WfJobState *job, const pg_uuid_t *token,
							 bool skip_soft);
extern void WfRaiseNotRunning(const WfJobState *job);
extern bool WfIsFailRepeat(const WfJobState *job, const char *code,
						   const char *message);
extern void WfFailJobRows(int n, const WfJobState *const *jobs,
						  const Datum *codes, const Datum *messages,
						  const bool *message_nulls, bool retryable);

/* triggers.c: step moves noted per row and written per statement */
extern void WfTriggersInit(void);

/* a compensation job that ended, noted by its trigger */
typedef struct WfCompensationEnd
{
	pg_uuid_t	run_id;
	pg_uuid_t	step_id;
	pg_uuid_t	job_id;
	bool		succeeded;
	char	   *error_code;		/* the job's, when it did not succeed */
	char	   *error_message;
} WfCompensationEnd;

/* deadlines.c: the deadline sweep of fire_timers */
extern int	WfSweepDeadlines(int32 batch_size);

/* cascade.c: terminal processing and dependency release */
extern void WfCascadeInit(void);
extern void WfNoteStepTerminal(const pg_uuid_t *run_id, int16 shard,
							   const pg_uuid_t *step_id,
							   const char *new_status, WfCounter from);
extern void WfNoteJobStepTerminal(const pg_uuid_t *run_id, int16 shard,
								  const pg_uuid_t *step_id,
								  const char *new_status, bool capped);
extern void WfFinishPending(void);
extern bool WfHasPending(void);
extern void WfNoteHeldStep(const pg_uuid_t *step_id);
extern void WfReleaseSteps(const pg_uuid_t *ids, int n);
extern void WfNoteCompensationEnded(const WfCompensationEnd *end);

/* repeat.c: settlement of released repeat steps */

/* what a repeat's settlement does */
typedef enum WfRepeatVerdict
{
	WF_REPEAT_CLEARED,			/* the predicate is false */
	WF_REPEAT_ITERATE,
	WF_REPEAT_EXHAUSTED,
	WF_REPEAT_NOT_BOOLEAN
} WfRepeatVerdict;

/* a repeat step being settled, as read from its row and its prerequisite */
typedef struct WfRepeat
{
	pg_uuid_t	id;
	pg_uuid_t	run_id;
	int16		shard;
	char	   *key;
	int32		generation;
	int32		max_iterations;
	int32		cycle_cap;		/* 0: none */
	int32		bound;
	bool		emit_outcome;
	Datum		output;			/* the prerequisite's, jsonb */
	bool		output_null;
	char	   *predicate_type; /* jsonb_typeof of the predicate's value */
	bool		predicate_true;
	char	   *predicate_error;	/* why its evaluation failed, or NULL */
	Datum		body;			/* text[] of keys */
	Datum		back_to;		/* text[] of keys */
	WfRepeatVerdict verdict;
} WfRepeat;

extern void WfReadRepeat(const pg_uuid_t *id, WfRepeat *rep);
extern const char *WfEndRepeat(const WfRepeat *rep);
extern int	WfRepeatBody(const WfRepeat *rep, pg_uuid_t **ids);
extern int	WfStartGeneration(const WfRepeat *rep, pg_uuid_t *ready);

/* a loop that retry_run runs a generation of again */
typedef struct WfLoopRestart
{
	pg_uuid_t	run_id;
	pg_uuid_t	repeat_id;
	char	   *key;
	int32		generation;
	int32		bound;
	Datum		body;			/* text[] of keys */
	Datum		back_to;		/* text[] of keys */
	bool		repeat_reset;	/* the repeat is among the steps to reset */
} WfLoopRestart;

extern int	WfLoopsToRestart(const pg_uuid_t *run_id, Datum reset_ids,
							 WfLoopRestart **loops);
extern int	WfRestartLoop(const WfLoopRestart *loop, Datum pending_too,
						  pg_uuid_t *ids, bool *ready);

/*
 * waits.c: the start of a sleep or an event wait.  A step that a wait
 * settles at once (a wake time already past, an event already sent) is
 * returned to the caller, which moves its counters and cascades it.
 */
typedef struct WfSettledStep
{
	pg_uuid_t	step_id;
	pg_uuid_t	run_id;
	int16		shard;
	WfCounter	from;			/* the counter it leaves */
	bool		succeeded;		/* else FAILED */
} WfSettledStep;

extern void WfReadSettledStep(uint64 row, WfCounter from, bool succeeded,
							  WfSettledStep *step);
extern int	WfWakeDueSleeps(const pg_uuid_t *ids, int n,
							WfSettledStep *settled);
extern int	WfConsumeSentEvents(const pg_uuid_t *ids, int n,
								WfSettledStep *settled);
extern bool WfConsumeEvent(const pg_uuid_t *step_id, const pg_uuid_t *event_id,
						   WfSettledStep *settled);

/* the calls that move a run's status (run_moves.c checks their moves) */
typedef enum WfRunCall
{
	WF_CALL_START_RUN = 0,
	WF_CALL_STEP_CHANGE,
	WF_CALL_CANCEL_RUN,
	WF_CALL_RETIRE_RUN,
	WF_CALL_RESUME_RUN,
	WF_CALL_RETRY_RUN,
	WF_CALL_COMPENSATE_RUN,
	WF_CALL_COMPENSATE_ON_FAILURE,
	WF_CALL_INCREASE_ALLOWANCE,
	WF_CALL_DEADLINE
} WfRunCall;

/* compensation.c: undoing a run's succeeded steps */

extern void WfStartCompensation(const pg_uuid_t *run_id, const char *reason,
								WfRunCall call, bool nowait);
extern void WfAdvanceCompensation(const pg_uuid_t *run_id, int32 failed);
extern void WfSettleCompensationJob(const WfCompensationEnd *end);
extern void WfAbandonCompensation(const pg_uuid_t *run_id, Datum reason,
								  bool reason_null);

/* pins.c: whether a pinned run's registered version still stands */
extern const char *WfPinVerdict(const pg_uuid_t *run_id);

/* status.c: run counters, status recomputation, notification */
extern void WfStatusInit(void);
extern void WfRunDeltaAdd(const pg_uuid_t *run_id, int16 shard,
						  WfCounter counter, int32 delta);
extern void WfRunDeltaBlock(const pg_uuid_t *run_id, int16 shard,
							const char *blocked_status);
extern void WfRunDeltaCall(const pg_uuid_t *run_id, int16 shard,
						   WfRunCall call);
extern char *WfFindRun(const pg_uuid_t *run_id, const pg_uuid_t *org);
extern char *WfLockRunForCall(const pg_uuid_t *run_id, const pg_uuid_t *org);
extern Datum WfRunStatusResult(FunctionCallInfo fcinfo, const char *status);
extern void WfApplyRunDeltas(void);
extern void WfRunDeltasReset(void);
extern bool WfHasRunDeltas(void);
extern const char *WfComputeRunStatus(int32 active, int32 waiting,
									  int32 parked, int32 blocked,
									  int32 failed, int32 canceled);
extern bool WfRunStatusTerminal(const char *status);
extern bool WfRunStatusBlocked(const char *status);
extern bool WfRunStatusCompensation(const char *status);
extern void WfSetRunStatus(const pg_uuid_t *run_id, const char *from,
						   const char *to, WfRunCall call);
extern void WfNotifyRunTerminal(const pg_uuid_t *run_id, const pg_uuid_t *org,
								const char *status);

/*
 * admission.c: letting a capped run's parked steps run.  A capped run's
 * counters and caps, as its run row holds them now, locked.
 */
typedef struct WfRunRoom
{
	int32		active;
	int32		parked;
	int32		executions;
	int32		node_execution_cap; /* 0: none */
	int32		concurrency_cap;	/* 0: none */
	int32		exhausted_cap;	/* the cap whose exhaustion was recorded */
} WfRunRoom;

extern int32 WfAdmitParked(const pg_uuid_t *run_id, WfRunRoom *room);
extern int32 WfHandOffPlaces(const pg_uuid_t *run_id, int32 n);
extern void WfRecordAllowanceExhausted(const pg_uuid_t *run_id, int32 cap);

/* run_moves.c: the run state machine */

extern void WfCheckRunMove(const pg_uuid_t *run_id, const char *from,
						   const char *to, WfRunCall call);

/* history.c: what the event history records; event details */

/*
 * The head of every INSERT of events; step events are written by a WITH
 * query of the statement that moves the steps.
 */
#define WF_INSERT_EVENTS \
	"INSERT INTO workflow.workflow_events" \
	" (workflow_run_id, step_key, event_type, detail)"

extern bool WfHistoryRecordsSteps(void);
extern bool WfHistoryRecordsRuns(void);
extern void WfRecordRunEvent(const pg_uuid_t *run_id, const char *event_type,
							 const char *detail);
extern void WfRecordEvidence(const pg_uuid_t *run_id, const char *event_type,
							 const char *detail);
extern void WfDetailBegin(StringInfo buf);
extern void WfDetailText(StringInfo buf, const char *key, const char *value);
extern void WfDetailInt(StringInfo buf, const char *key, int64 value);
extern void WfDetailTimestamp(StringInfo buf, const char *key,
							  TimestampTz value);
extern char *WfDetailEnd(StringInfo buf);

/* run_jobs.c: a run's live jobs, and the jobs of released steps */

/*
 * The INSERT of the jobs of released job steps, each copied from its step
 * (its job_id, job and options, generation and deadline), due now or
 * start_after_seconds later; the statement that uses it ends it with a FROM
 * clause whose rows are steps, aliased s.
 */
#define WF_STEP_JOBS_INSERT \
	"INSERT INTO workflow.job_queue AS j (id, job_type, organization_id," \
	" payload, priority, stage, max_attempts, timeout_seconds, run_at," \
	" workflow_run_id, workflow_step_id, generation, deadline_at)" \
	" SELECT s.job_id, s.job_type, s.organization_id, s.payload," \
	" s.priority, s.stage, s.max_attempts, s.timeout_seconds," \
	" CASE WHEN s.start_after_seconds IS NULL" \
	"  THEN pg_catalog.statement_timestamp()" \
	"  ELSE pg_catalog.statement_timestamp()" OP("+") "pg_catalog.make_interval(" \
	"   secs => s.start_after_seconds) END," \
	" s.workflow_run_id, s.id, s.generation, s.deadline_at"

extern uint64 WfLockLiveJobs(const pg_uuid_t *run_id, bool nowait,
							 Datum **ids);
extern void WfInsertStepJobs(const pg_uuid_t *ids, int n);
extern void WfCancelJobs(Datum *job_ids, uint64 njobs, const char *code,
						 Datum reason, bool reason_null);

/* registry.c: registered workflow versions */

/* the active version of a registered workflow, as start_workflow pins it */
typedef struct WfActiveVersion
{
	Jsonb	   *definition;
	char	   *version;
	char	   *signature;
} WfActiveVersion;

extern bool WfReadActiveVersion(text *name, WfActiveVersion *active);

/* run.c: the inserts of a new run */

/*
 * A continuation's successor: copied[i] for each step of its definition
 * that is copied from the source as SUCCEEDED, with outputs[i].
 */
typedef struct WfRunContinuation
{
	const pg_uuid_t *org;		/* NULL: none */
	Datum		input;
	bool		input_null;
	const pg_uuid_t *source_run_id;
	const bool *copied;
	const Datum *outputs;
	const bool *output_nulls;
} WfRunContinuation;

struct WfDefinition;
extern void WfInsertContinuationRun(struct WfDefinition *def, Jsonb *definition,
									pg_uuid_t *run_id,
									const WfRunContinuation *c);

/* definition.c: parsing and validation of a run's definition */

/* what executes a step: its execution_kind */
typedef enum WfStepKind
{
	WF_KIND_JOB = 0,			/* a job_queue row, worked by a worker */
	WF_KIND_EXTERNAL,			/* complete_external_step */
	WF_KIND_SLEEP,				/* a timer: fire_timers wakes it */
	WF_KIND_EVENT,				/* send_event, or a timeout */
	WF_KIND_REPEAT				/* settles when its prerequisite succeeds */
} WfStepKind;

/* the longest sleep, event wait or job delay a definition may ask for */
#define WF_MAX_WAIT_SECONDS 315360000	/* ten years */

typedef struct WfStepDef
{
	char	   *key;
	WfStepKind	kind;
	char	   *job_type;
	Datum		payload;		/* jsonb */
	int32		priority;
	int32		max_attempts;
	int32		timeout_seconds;
	char	   *stage;
	/* sleep, event and delayed job steps; -1 where not given */
	int32		sleep_seconds;
	bool		has_sleep_until;
	TimestampTz sleep_until;
	char	   *event_name;		/* event steps */
	int32		wait_timeout_seconds;
	int32		start_after_seconds;
	Datum		compensate;		/* jsonb, when compensate_job_type is set */
	char	   *compensate_job_type;	/* the job that undoes it, or NULL */
	int			first_edge;		/* its prerequisites: edges[first_edge ..] */
	int			nedges;
	pg_uuid_t	id;				/* set by run.c */
	pg_uuid_t	job_id;			/* set by run.c for root job steps */
	int16		counter_shard;	/* 0: counted on the run row */
	bool		capped;			/* a job step of a capped run */
	/* repeat steps: the loop; -1 / NULL elsewhere (repeat_def.c) */
	char	   *repeat_while;	/* a jsonpath predicate */
	int32		max_iterations;
	bool		emit_outcome;	/* exhaustion_policy "emit_outcome" */
	char	  **back_to;
	int			nback_to;
	int			repeat_of;		/* a body step: its repeat's index; -1 */
} WfStepDef;

typedef struct WfEdgeDef
{
	int			prerequisite;	/* index into steps */
	int			dependent;
	bool		on_terminal;
} WfEdgeDef;

/*
 * a definition's "limits"; 0 (retry_cap and deadline_seconds -1) where not
 * given
 */
typedef struct WfLimits
{
	bool		has_deadline_at;
	TimestampTz deadline_at;
	int32		deadline_seconds;
	int32		node_execution_cap;
	int32		concurrency_cap;
	int32		cycle_cap;
	int32		retry_cap;
} WfLimits;

/* whether limits park job steps */
#define WF_LIMITS_CAPPED(l) \
	((l)->node_execution_cap > 0 || (l)->concurrency_cap > 0)

typedef struct WfDefinition
{
	char	   *name;
	char	   *result_step;
	WfStepDef  *steps;
	int			nsteps;
	WfEdgeDef  *edges;
	int			nedges;
	char	  **dep_keys;		/* per edge, the named prerequisite key */
	int			counter_shards; /* 0: counters on the run row */
	bool		compensate_on_failure;	/* "compensate_on": "failure" */
	WfLimits	limits;
} WfDefinition;

extern void WfParseDefinition(Jsonb *definition, WfDefinition *def);
extern int	WfStepIndex(HTAB *keys, const char *key);

/* repeat_def.c: the loops of a definition */
extern void WfCheckRepeats(WfDefinition *def, HTAB *keys);
extern const char *WfStepKindLabel(WfStepKind kind);
extern WfStepKind WfStepKindFromLabel(const char *label);

/* notify.c: wake-ups for waiting workers (workflow.notify_jobs) */

/*
 * A statement that may leave jobs due now, with its cached plans: sql as
 * given, and its notifying form (built on first use), which also returns
 * the job type of each row left due.
 */
typedef struct WfDueStatement
{
	const char *sql;
	SPIPlanPtr	plan;
	char	   *notify_sql;
	SPIPlanPtr	notify_plan;
} WfDueStatement;

extern void WfNotifyJobType(const char *job_type);
extern uint64 WfExecuteDue(WfDueStatement *st, int nargs,
						   const Oid *argtypes, Datum *values,
						   const char *nulls);

/* locks.c: the run release lock, and the advisory locks of other classes */
extern bool WfLockRunRelease(const pg_uuid_t *run_id, bool exclusive,
							 bool wait);
extern bool *WfTryLockRunsShared(const pg_uuid_t *runs, const bool *has_run,
								 uint64 n);
extern void WfLockDedupeKey(const pg_uuid_t *run_id, Datum dedupe_key);
extern void WfUnlockRunRelease(const pg_uuid_t *run_id, bool exclusive);
extern void WfLockWorkflowName(text *name);

/*
 * The maintenance background workers (shared_preload_libraries):
 * maintenance_launcher.c starts one maintenance_worker.c process per
 * database of workflow.maintenance_databases; maintenance_status.c owns
 * their shared memory and the view.
 */
#define WF_MAINTENANCE_SLOTS 64

/* What one maintenance pass did. */
typedef struct WfMaintenancePass
{
	double		ms;
	int64		reaped;
	int64		fired;
	int64		purged;
	int			vacuumed;
	char		vacuumed_tables[160];
} WfMaintenancePass;

extern void WfMaintenanceShmemInit(void);
extern int	WfMaintenanceSlotFor(const char *database);
extern bool WfMaintenanceSlotUsed(int slotno, NameData *database, pid_t *pid);
extern void WfMaintenanceSlotForget(int slotno);
extern bool WfMaintenanceSlotClaim(int slotno, const char *database);
extern void WfMaintenanceSlotLeave(int slotno);
extern void WfMaintenanceSlotState(int slotno, const char *state);
extern void WfMaintenanceSlotPass(int slotno, const WfMaintenancePass *pass);
extern void WfMaintenanceSlotError(int slotno, const char *message);

extern void WfMaintenanceLauncherRegister(void);
extern bool WfRetentionCheck(char **newval, void **extra, GucSource source);
extern bool WfDatabaseListCheck(char **newval, void **extra, GucSource source);

/* privilege.c: version check, owner switch, tenant confinement */
#define WF_SQL_VERSION "1.12"

extern void WfPrivilegeInit(void);
extern void WfCheckVersion(void);
extern Datum WfCallAsOwner(PGFunction body, FunctionCallInfo fcinfo);

/*
 * WF_OWNER_ENTRY defines an SQL-callable function (declared with
 * PG_FUNCTION_INFO_V1) whose body runs as the extension's owner.
 */
#define WF_OWNER_ENTRY(sqlfn, body) \
	Datum sqlfn(PG_FUNCTION_ARGS) { return WfCallAsOwner(body, fcinfo); }
extern char *WfCallCallerName(void);
extern bool WfCallConfined(void);
extern int	WfCallOrganizationCount(void);
extern bool WfCallSeesOrganization(const pg_uuid_t *org);
extern const pg_uuid_t *WfCallOrganization(const pg_uuid_t *given);
extern Datum WfCallOrganizationsArray(bool *isnull);

/* xact_state.c: transaction and statement state, end-of-transaction hooks */

/*
 * The hooks of a module that collects work within a transaction; any may
 * be NULL.  unfinished says, before commit, whether work is left that was
 * never processed (the commit then fails); reset forgets everything at the
 * end of the transaction, before the pending context is reset; abort_sub
 * drops what was collected in an aborted subtransaction.
 */
typedef struct WfXactHooks
{
	bool		(*unfinished) (void);
	void		(*reset) (void);
	void		(*abort_sub) (SubTransactionId subid);
} WfXactHooks;

extern void WfXactStateInit(void);
extern void WfRegisterXactHooks(const WfXactHooks *hooks);
extern void WfRequireReadCommitted(void);
extern uint64 WfRunAsEngine(uint64 (*action) (void *arg), void *arg);
extern int	WfExecuteAsEngine(SPIPlanPtr *plan, const char *sql, int nargs,
							  const Oid *argtypes, Datum *values,
							  const char *nulls);
extern bool WfEngineWriting(void);
extern void WfDeferFinishBegin(void);
extern int	WfDeferDepth(void);
extern void WfDeferRestore(int depth);
extern void WfNoteLateLocks(void);
extern bool WfHoldsLateLocks(void);
extern void WfForgetLateLocks(void);
extern MemoryContext WfPendingContext(void);

/* an action of a sweep on the rows it chose; returns how many it changed */
typedef int (*WfChosenAction) (Datum *chosen, int nchosen);

extern int	WfTryInSubtransaction(WfChosenAction action, Datum *chosen,
								  int nchosen);
extern int	WfRunByRun(WfChosenAction action, Datum *chosen,
					   const pg_uuid_t *runs, int nchosen);

/* spi_util.c: cached plans and SPI value helpers */
extern int	WfExecute(SPIPlanPtr *plan, const char *sql, int nargs,
					  const Oid *argtypes, Datum *values, const char *nulls,
					  bool read_only, long count);
extern int	WfExecuteGeneric(SPIPlanPtr *plan, const char *sql, int nargs,
							 const Oid *argtypes, Datum *values,
							 const char *nulls);
extern Portal WfOpenCursor(SPIPlanPtr *plan, const char *sql, int nargs,
						   const Oid *argtypes, Datum *values,
						   const char *nulls);
extern int	WfExecuteNowait(SPIPlanPtr *plan, const char *sql, int nargs,
							const Oid *argtypes, Datum *values,
							const char *nulls);
extern Datum WfArray(Datum *elems, bool *nulls, int n, Oid elemtype);
extern void WfDeconstruct(ArrayType *arr, Oid elemtype, Datum **elems,
						  bool **nulls, int *n);
extern Datum WfResultDatum(uint64 row, int col, bool *isnull);
extern Datum WfResultAsRow(FunctionCallInfo fcinfo, const char *what);
extern char *WfResultText(uint64 row, int col);
extern bool WfResultUuid(uint64 row, int col, pg_uuid_t *out);
extern int32 WfResultInt32(uint64 row, int col);
extern bool WfResultBool(uint64 row, int col);
extern Datum WfUuidDatum(const pg_uuid_t *uuid);
extern char *WfUuidString(const pg_uuid_t *uuid);
extern bool WfJsonbEqual(Datum a, bool a_null, Datum b, bool b_null);
extern bool WfTextEqual(const char *a, const char *b);
extern char *WfEnumLabel(Datum value);
extern char *WfTruncateMessage(const char *message);

/* uuid.c: time-ordered identifiers */
extern void WfNewUuidV7(pg_uuid_t *out);
extern int	WfUuidCompare(const pg_uuid_t *a, const pg_uuid_t *b);
extern int	WfUuidCmpQsort(const void *a, const void *b);

#endif							/* WORKFLOW_H */
