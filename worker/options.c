/*
 * options.c: the command-line flags, their checks, and --help.
 *
 * A bad flag is reported as one line on stderr (exit status 2), so that a
 * supervisor's log shows exactly what to fix.
 */
#include "worker.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *usage_text =
"workflow-worker runs a command for each job of the workflow extension.\n"
"\n"
"Usage:\n"
"  workflow-worker [--dsn DSN] --type TYPE [--type TYPE ...] --exec COMMAND [OPTION...]\n"
"\n"
"Options:\n"
"  --dsn DSN            libpq connection string or URI (default: the PG*\n"
"                       environment variables and libpq's defaults)\n"
"  --type TYPE          claim jobs of this type; repeatable, at least one\n"
"  --exec COMMAND       run COMMAND with /bin/sh -c for each job; the payload\n"
"                       is on its stdin as JSON\n"
"  --concurrency N      run up to N commands at once (1..1000, default 1)\n"
"  --batch N            claim up to N jobs at a time and report results in\n"
"                       batches of up to N (1..1000; default: one at a time)\n"
"  --with-inputs        stdin is {\"payload\": ..., \"inputs\": job_inputs}\n"
"  --worker-id ID       the worker_id stored on claimed jobs (default\n"
"                       hostname:pid)\n"
"  --stage STAGE        claim only jobs of this stage\n"
"  --organization UUID  claim only jobs of this organization\n"
"  --grace SECONDS      on SIGTERM/SIGINT, let running commands finish this\n"
"                       long before killing them (default 30)\n"
"  --poll MS            claim at least every MS milliseconds when idle\n"
"                       (default 1000)\n"
"  --reconnect SECONDS  how long to retry a lost database connection\n"
"                       (default 60)\n"
"  --quiet              no log line per job\n"
"  --help               show this help and exit\n"
"  --version            show the version and exit\n"
"\n"
"COMMAND's environment: WORKFLOW_JOB_ID, WORKFLOW_ATTEMPT, WORKFLOW_JOB_TYPE,\n"
"WORKFLOW_RUN_ID and WORKFLOW_STEP_KEY (for a job of a workflow run).\n"
"Exit 0 completes the job with COMMAND's stdout (JSON as is, other text as a\n"
"JSON string, nothing as NULL); another status fails it with error code\n"
"command.exit_N and the tail of stderr; a signal fails it with\n"
"command.signal_N.\n"
"\n"
"Exit status: 0 after a clean stop, 2 on bad flags or a database that cannot\n"
"be reached.  See workflow-worker(1).\n";

enum
{
	OPT_DSN = 256, OPT_TYPE, OPT_EXEC, OPT_CONCURRENCY, OPT_BATCH,
	OPT_WITH_INPUTS, OPT_WORKER_ID, OPT_STAGE, OPT_ORGANIZATION, OPT_GRACE,
	OPT_POLL, OPT_RECONNECT, OPT_QUIET, OPT_HELP, OPT_VERSION
};

static const struct option long_options[] = {
	{"dsn", required_argument, NULL, OPT_DSN},
	{"type", required_argument, NULL, OPT_TYPE},
	{"exec", required_argument, NULL, OPT_EXEC},
	{"concurrency", required_argument, NULL, OPT_CONCURRENCY},
	{"batch", required_argument, NULL, OPT_BATCH},
	{"with-inputs", no_argument, NULL, OPT_WITH_INPUTS},
	{"worker-id", required_argument, NULL, OPT_WORKER_ID},
	{"stage", required_argument, NULL, OPT_STAGE},
	{"organization", required_argument, NULL, OPT_ORGANIZATION},
	{"grace", required_argument, NULL, OPT_GRACE},
	{"poll", required_argument, NULL, OPT_POLL},
	{"reconnect", required_argument, NULL, OPT_RECONNECT},
	{"quiet", no_argument, NULL, OPT_QUIET},
	{"help", no_argument, NULL, OPT_HELP},
	{"version", no_argument, NULL, OPT_VERSION},
	{NULL, 0, NULL, 0}
};

static int
bad(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "workflow-worker: ");
	fprintf(stderr, fmt, a, b);
	fprintf(stderr, " (try --help)\n");
	return 2;
}

static bool
parse_int(const char *s, long lo, long hi, int *out)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end != '\0' || v < lo || v > hi)
		return false;
	*out = (int) v;
	return true;
}

static bool
parse_seconds(const char *s, double *out)
{
	char	   *end;
	double		v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end != '\0' || !(v >= 0) || v > 1e7)
		return false;
	*out = v;
	return true;
}

/* 8-4-4-4-12 hex digits: caught here rather than as a server error later. */
static bool
is_uuid(const char *s)
{
	static const int groups[] = {8, 4, 4, 4, 12};
	int			g, i;

	for (g = 0; g < 5; g++)
	{
		for (i = 0; i < groups[g]; i++, s++)
			if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') ||
				  (*s >= 'A' && *s <= 'F')))
				return false;
		if (g < 4 && *s++ != '-')
			return false;
	}
	return *s == '\0';
}

static char *
default_worker_id(void)
{
	char		host[256];
	char		id[300];

	if (gethostname(host, sizeof(host)) != 0)
		strcpy(host, "localhost");
	host[sizeof(host) - 1] = '\0';
	snprintf(id, sizeof(id), "%s:%ld", host, (long) getpid());
	return xstrdup(id);
}

/* One flag; returns 0, or the exit status parse_options should return. */
static int
apply_option(int c, const char *arg, Options *o)
{
	switch (c)
	{
		case OPT_DSN: o->dsn = arg; break;
		case OPT_TYPE:
			if (arg[0] == '\0')
				return bad("--type must not be empty%s%s", "", "");
			o->types = xrealloc(o->types, sizeof(char *) * (o->ntypes + 1));
			o->types[o->ntypes++] = (char *) arg;
			break;
		case OPT_EXEC:
			if (arg[0] == '\0')
				return bad("--exec must not be empty%s%s", "", "");
			o->exec = arg;
			break;
		case OPT_CONCURRENCY:
			if (!parse_int(arg, 1, 1000, &o->concurrency))
				return bad("--concurrency must be an integer from 1 to 1000, not \"%s\"%s", arg, "");
			break;
		case OPT_BATCH:
			if (!parse_int(arg, 1, 1000, &o->batch))
				return bad("--batch must be an integer from 1 to 1000, not \"%s\"%s", arg, "");
			break;
		case OPT_WITH_INPUTS: o->with_inputs = true; break;
		case OPT_WORKER_ID:
			if (arg[0] == '\0')
				return bad("--worker-id must not be empty%s%s", "", "");
			o->worker_id = (char *) arg;
			break;
		case OPT_STAGE: o->stage = arg; break;
		case OPT_ORGANIZATION:
			if (!is_uuid(arg))
				return bad("--organization must be a UUID, not \"%s\"%s", arg, "");
			o->organization = arg;
			break;
		case OPT_GRACE:
			if (!parse_seconds(arg, &o->grace))
				return bad("--grace must be a number of seconds, not \"%s\"%s", arg, "");
			break;
		case OPT_POLL:
			if (!parse_int(arg, 1, 3600000, &o->poll_ms))
				return bad("--poll must be a number of milliseconds from 1 to 3600000, not \"%s\"%s", arg, "");
			break;
		case OPT_RECONNECT:
			if (!parse_seconds(arg, &o->reconnect))
				return bad("--reconnect must be a number of seconds, not \"%s\"%s", arg, "");
			break;
		case OPT_QUIET: o->quiet = true; break;
		case OPT_HELP: fputs(usage_text, stdout); return 1;
		case OPT_VERSION: printf("workflow-worker %s\n", WORKER_VERSION); return 1;
		default:
			return 2;
	}
	return 0;
}

int
parse_options(int argc, char **argv, Options *o)
{
	int			c, rc;

	memset(o, 0, sizeof(*o));
	o->concurrency = 1;
	o->grace = 30;
	o->poll_ms = 1000;
	o->reconnect = 60;
	opterr = 0;					/* our own one-line messages */
	while ((c = getopt_long(argc, argv, "", long_options, NULL)) != -1)
	{
		if (c == '?' || c == ':')
		{
			const char *flag = argv[optind - 1];

			if (optopt)
				return bad("option %s needs a value%s", flag, "");
			return bad("unknown option %s%s", flag, "");
		}
		if ((rc = apply_option(c, optarg, o)) != 0)
			return rc;
	}
	if (optind < argc)
		return bad("unexpected argument \"%s\"%s", argv[optind], "");
	if (o->ntypes == 0)
		return bad("at least one --type is required%s%s", "", "");
	if (o->exec == NULL)
		return bad("--exec is required%s%s", "", "");
	if (o->worker_id == NULL)
		o->worker_id = default_worker_id();
	return 0;
}
