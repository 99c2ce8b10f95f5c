/*
 * worker.h: the types and functions shared by the files of workflow-worker.
 *
 * One process, one database connection, one poll() loop.  A Job is a job the
 * worker holds (claimed, lease token in hand) from its claim until its
 * outcome has been acknowledged by the server, or until it is found to be no
 * longer ours.
 */
#ifndef WORKFLOW_WORKER_H
#define WORKFLOW_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define WORKER_VERSION "1.0"
#define EXIT_USAGE 2
#define STDERR_TAIL_BYTES 2048
#define DEFAULT_MAX_OUTPUT (1024 * 1024)

/* ---- util.c ---- */

typedef struct Buf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} Buf;

void		buf_append(Buf *b, const void *data, size_t len);
void		buf_puts(Buf *b, const char *s);
void		buf_printf(Buf *b, const char *fmt,...)
			__attribute__((format(printf, 2, 3)));
void		buf_reset(Buf *b);
void		buf_free(Buf *b);
char	   *buf_steal(Buf *b);

void	   *xmalloc(size_t n);
void	   *xrealloc(void *p, size_t n);
char	   *xstrdup(const char *s);
char	   *xstrdup_or_null(const char *s);

double		now_mono(void);
void		log_line(const char *fmt,...) __attribute__((format(printf, 1, 2)));

/* ---- options.c ---- */

typedef struct Options
{
	const char *dsn;
	char	  **types;
	int			ntypes;
	const char *exec;
	int			concurrency;
	int			batch;			/* 0: one job per report */
	bool		with_inputs;
	char	   *worker_id;
	const char *stage;
	const char *organization;
	double		grace;
	int			poll_ms;
	double		reconnect;
	bool		quiet;
} Options;

/* 0: run; 1: --help or --version printed, exit 0; 2: bad flags (message printed) */
int			parse_options(int argc, char **argv, Options *opts);

/* ---- json.c ---- */

bool		json_is_valid(const char *s, size_t len);
void		json_append_string(Buf *out, const char *s, size_t len);
void		utf8_sanitize(Buf *out, const char *s, size_t len);

/* ---- command.c ---- */

typedef enum JobState
{
	JOB_QUEUED,					/* claimed, command not started yet */
	JOB_RUNNING,				/* command running */
	JOB_DONE					/* outcome known, waiting to be reported */
} JobState;

typedef enum Outcome
{
	OUT_NONE,
	OUT_COMPLETE,
	OUT_FAIL,
	OUT_RELEASE,				/* killed at shutdown: give the claim back */
	OUT_DROP					/* no longer ours: forget it */
} Outcome;

typedef struct Job
{
	char		id[40];
	char		token[40];
	int			attempt;
	char	   *type;
	char	   *payload;
	int			timeout_seconds;
	char	   *run_id;			/* NULL for a plain job */
	char	   *step_key;		/* NULL for a plain job */
	char	   *inputs;			/* job_inputs() with --with-inputs */

	JobState	state;
	double		claimed_at;
	double		started_at;
	double		finished_at;
	double		next_heartbeat;
	double		lease_until;	/* when the lease ends unless heartbeated */
	double		retry_at;		/* a failed report is retried from then */
	int			report_tries;	/* failed reports so far (for the backoff) */

	/* the command */
	pid_t		pid;
	bool		exited;
	int			wait_status;
	int			in_fd;
	int			out_fd;
	int			err_fd;
	Buf			stdin_data;
	size_t		stdin_off;
	Buf			out;
	Buf			err;			/* only the last STDERR_TAIL_BYTES matter */
	bool		out_too_large;
	int			kill_stage;		/* 0 none, 1 SIGTERM sent, 2 SIGKILL sent */
	double		kill_at;		/* when to send the next signal */
	Outcome		on_exit;		/* what to do once the killed command ends */

	/* the outcome */
	Outcome		outcome;
	char	   *output;			/* JSON text or NULL */
	char	   *error_code;
	char	   *error_message;
	bool		retryable;
	bool		acked;			/* a batch call returned its id */
} Job;

bool		command_start(Job *job, const Options *opts);
void		command_read(Job *job, int fd, size_t max_output);
void		command_write_stdin(Job *job);
void		command_close_stdin(Job *job);
void		command_drain(Job *job, size_t max_output);
void		command_kill(Job *job, double now);
void		command_escalate(Job *job, double now);
void		command_outcome(Job *job, size_t max_output);
void		job_free(Job *job);

/* ---- db.c ---- */

typedef enum DbStatus
{
	DB_OK,
	DB_JOB_GONE,				/* job.canceled, lease_lost, not_found, not_running */
	DB_INVALID,					/* job.invalid_argument */
	DB_CONN,					/* the connection is lost: retry after reconnecting */
	DB_RETRY					/* another error: retry later */
} DbStatus;

typedef struct DbReport
{
	Job		  **jobs;
	int			njobs;
} DbReport;

bool		db_connect(const Options *opts, char *err, size_t errlen);
bool		db_connected(void);
void		db_disconnect(void);
int			db_socket(void);
size_t		db_max_output(void);
bool		db_consume(bool *woken, const Options *opts);
const char *db_last_error(void);
const char *db_last_code(void);

DbStatus	db_claim(const Options *opts, int n, Job ***out, int *nout);
DbStatus	db_complete_and_claim(const Options *opts, Job *job, int n,
								  Job ***out, int *nout);
DbStatus	db_complete(Job *job);
DbStatus	db_fail(Job *job);
DbStatus	db_release(Job *job);
DbStatus	db_heartbeat(Job *job);
DbStatus	db_report_batch(const Options *opts, Job **done, int ndone, int n,
							Job ***out, int *nout);

/* ---- loop.c ---- */

int			run_loop(const Options *opts);
void		note_signal(int signo);

#endif
