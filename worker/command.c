/*
 * command.c: running COMMAND for one job: fork/exec with /bin/sh -c in its
 * own process group, the three pipes (all non-blocking, driven by the poll
 * loop), killing the group, and turning the exit status and captured output
 * into the job's outcome.
 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KILL_ESCALATE_SECONDS 3.0

static void
set_nonblocking(int fd)
{
	int			flags = fcntl(fd, F_GETFL);

	if (flags >= 0)
		fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static void
close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* The stdin document: the payload, or {"payload": ..., "inputs": ...}. */
static void
build_stdin(Job *job, const Options *opts)
{
	buf_reset(&job->stdin_data);
	if (opts->with_inputs)
	{
		buf_puts(&job->stdin_data, "{\"payload\": ");
		buf_puts(&job->stdin_data, job->payload);
		buf_puts(&job->stdin_data, ", \"inputs\": ");
		buf_puts(&job->stdin_data, job->inputs ? job->inputs : "null");
		buf_puts(&job->stdin_data, "}");
	}
	else
		buf_puts(&job->stdin_data, job->payload);
	buf_puts(&job->stdin_data, "\n");
	job->stdin_off = 0;
}

static void
set_or_unset(const char *name, const char *value)
{
	if (value)
		setenv(name, value, 1);
	else
		unsetenv(name);
}

/* In the child: never returns. */
static void
exec_child(Job *job, const Options *opts, int in, int out, int err)
{
	char		attempt[16];
	sigset_t	none;

	setpgid(0, 0);
	/* the worker ignores SIGPIPE and blocks nothing the command expects */
	signal(SIGPIPE, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGCHLD, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		_exit(127);
	snprintf(attempt, sizeof(attempt), "%d", job->attempt);
	setenv("WORKFLOW_JOB_ID", job->id, 1);
	setenv("WORKFLOW_ATTEMPT", attempt, 1);
	setenv("WORKFLOW_JOB_TYPE", job->type, 1);
	set_or_unset("WORKFLOW_RUN_ID", job->run_id);
	set_or_unset("WORKFLOW_STEP_KEY", job->step_key);
	execl("/bin/sh", "sh", "-c", opts->exec, (char *) NULL);
	_exit(127);
}

bool
command_start(Job *job, const Options *opts)
{
	int			in[2], out[2], err[2];
	pid_t		pid;

	/* O_CLOEXEC: no command inherits another job's pipes or the socket */
	if (pipe2(in, O_CLOEXEC) != 0)
		return false;
	if (pipe2(out, O_CLOEXEC) != 0)
	{
		close(in[0]), close(in[1]);
		return false;
	}
	if (pipe2(err, O_CLOEXEC) != 0)
	{
		close(in[0]), close(in[1]), close(out[0]), close(out[1]);
		return false;
	}
	build_stdin(job, opts);
	pid = fork();
	if (pid == 0)
		exec_child(job, opts, in[0], out[1], err[1]);
	close(in[0]), close(out[1]), close(err[1]);
	if (pid < 0)
	{
		close(in[1]), close(out[0]), close(err[0]);
		return false;
	}
	setpgid(pid, pid);			/* also here: no race with an early kill */
	job->pid = pid;
	job->in_fd = in[1];
	job->out_fd = out[0];
	job->err_fd = err[0];
	set_nonblocking(job->in_fd);
	set_nonblocking(job->out_fd);
	set_nonblocking(job->err_fd);
	job->state = JOB_RUNNING;
	job->started_at = now_mono();
	return true;
}

void
command_close_stdin(Job *job)
{
	close_fd(&job->in_fd);
}

/* Writes what the pipe takes now; a command that quits reading is fine. */
void
command_write_stdin(Job *job)
{
	while (job->in_fd >= 0 && job->stdin_off < job->stdin_data.len)
	{
		ssize_t		n = write(job->in_fd, job->stdin_data.data + job->stdin_off,
							  job->stdin_data.len - job->stdin_off);

		if (n > 0)
			job->stdin_off += (size_t) n;
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && errno == EAGAIN)
			return;
		else
			break;				/* EPIPE: the command does not want it */
	}
	command_close_stdin(job);
}

/* Keeps stderr's tail only, so a chatty command costs bounded memory. */
static void
keep_err_tail(Job *job)
{
	if (job->err.len > 4 * STDERR_TAIL_BYTES)
	{
		size_t		keep = STDERR_TAIL_BYTES;

		memmove(job->err.data, job->err.data + job->err.len - keep, keep);
		job->err.len = keep;
		job->err.data[keep] = '\0';
	}
}

/* Reads what fd has now; stdout beyond max_output is counted, not kept. */
void
command_read(Job *job, int fd, size_t max_output)
{
	char		chunk[65536];

	for (;;)
	{
		ssize_t		n = read(fd, chunk, sizeof(chunk));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0)
			break;
		if (fd == job->err_fd)
		{
			buf_append(&job->err, chunk, (size_t) n);
			keep_err_tail(job);
		}
		else if (!job->out_too_large)
		{
			if (job->out.len + (size_t) n > max_output)
			{
				job->out_too_large = true;
				buf_free(&job->out);
			}
			else
				buf_append(&job->out, chunk, (size_t) n);
		}
	}
	/* end of file or an error: this pipe is done */
	if (fd == job->err_fd)
		close_fd(&job->err_fd);
	else
		close_fd(&job->out_fd);
}

/*
 * After the command exited: what it wrote is in the pipes; read it without
 * waiting for background processes that may still hold them open.
 */
void
command_drain(Job *job, size_t max_output)
{
	if (job->out_fd >= 0)
		command_read(job, job->out_fd, max_output);
	if (job->err_fd >= 0)
		command_read(job, job->err_fd, max_output);
	close_fd(&job->out_fd);
	close_fd(&job->err_fd);
	command_close_stdin(job);
}

/* SIGTERM to the whole process group now, SIGKILL a few seconds later. */
void
command_kill(Job *job, double now)
{
	if (job->state != JOB_RUNNING || job->exited || job->kill_stage > 0)
		return;
	kill(-job->pid, SIGTERM);
	job->kill_stage = 1;
	job->kill_at = now + KILL_ESCALATE_SECONDS;
}

void
command_escalate(Job *job, double now)
{
	if (job->state == JOB_RUNNING && job->kill_stage == 1 && now >= job->kill_at)
	{
		kill(-job->pid, SIGKILL);
		job->kill_stage = 2;
	}
}

static void
trim_trailing_ws(Buf *b)
{
	while (b->len > 0 && (b->data[b->len - 1] == ' ' || b->data[b->len - 1] == '\n' ||
						  b->data[b->len - 1] == '\t' || b->data[b->len - 1] == '\r'))
		b->data[--b->len] = '\0';
}

/* The last ~2 KB of stderr, cut at a character boundary, as valid UTF-8. */
static char *
stderr_tail(Job *job)
{
	Buf			msg = {0};
	size_t		start = 0;

	trim_trailing_ws(&job->err);
	if (job->err.len == 0)
		return NULL;
	if (job->err.len > STDERR_TAIL_BYTES)
		start = job->err.len - STDERR_TAIL_BYTES;
	while (start < job->err.len && start > 0 &&
		   ((unsigned char) job->err.data[start] & 0xC0) == 0x80)
		start++;
	utf8_sanitize(&msg, job->err.data + start, job->err.len - start);
	return buf_steal(&msg);
}

static void
set_fail(Job *job, const char *code, bool retryable)
{
	job->outcome = OUT_FAIL;
	job->error_code = xstrdup(code);
	job->error_message = stderr_tail(job);
	job->retryable = retryable;
}

/* The exit status and stdout become complete or fail (see the man page). */
void
command_outcome(Job *job, size_t max_output)
{
	int			st = job->wait_status;
	char		code[64];

	job->state = JOB_DONE;
	job->finished_at = now_mono();
	if (WIFSIGNALED(st))
	{
		snprintf(code, sizeof(code), "command.signal_%d", WTERMSIG(st));
		set_fail(job, code, true);
	}
	else if (WEXITSTATUS(st) > 128 && WEXITSTATUS(st) <= 128 + 64)
	{
		/*
		 * COMMAND runs under /bin/sh -c, which reports a program it did not
		 * exec and that a signal killed as 128 + the signal's number.
		 */
		snprintf(code, sizeof(code), "command.signal_%d", WEXITSTATUS(st) - 128);
		set_fail(job, code, true);
	}
	else if (WEXITSTATUS(st) != 0)
	{
		snprintf(code, sizeof(code), "command.exit_%d", WEXITSTATUS(st));
		set_fail(job, code, true);
	}
	else if (job->out_too_large)
	{
		set_fail(job, "command.output_too_large", false);
		free(job->error_message);
		job->error_message = NULL;
		{
			Buf			m = {0};

			buf_printf(&m, "stdout exceeded %zu bytes", max_output);
			job->error_message = buf_steal(&m);
		}
	}
	else
	{
		job->outcome = OUT_COMPLETE;
		trim_trailing_ws(&job->out);
		if (job->out.len == 0)
			job->output = NULL;
		else if (json_is_valid(job->out.data, job->out.len))
			job->output = buf_steal(&job->out);
		else
		{
			Buf			s = {0};

			json_append_string(&s, job->out.data, job->out.len);
			job->output = buf_steal(&s);
		}
	}
	buf_free(&job->out);
	buf_free(&job->err);
	buf_free(&job->stdin_data);
}

void
job_free(Job *job)
{
	if (job == NULL)
		return;
	close_fd(&job->in_fd);
	close_fd(&job->out_fd);
	close_fd(&job->err_fd);
	free(job->type);
	free(job->payload);
	free(job->run_id);
	free(job->step_key);
	free(job->inputs);
	free(job->output);
	free(job->error_code);
	free(job->error_message);
	buf_free(&job->stdin_data);
	buf_free(&job->out);
	buf_free(&job->err);
	free(job);
}
