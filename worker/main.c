/*
 * main.c: workflow-worker's entry point: flags, process setup (signals,
 * file descriptor limit), the first connection, then the event loop.
 *
 * Exit status: 0 after a clean stop (SIGTERM/SIGINT), 2 for bad flags, a
 * database that cannot be reached at start, or one lost for longer than
 * --reconnect.
 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

static void
install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = note_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGCHLD, &sa, NULL);
	/* a command that does not read its stdin must not kill the worker */
	signal(SIGPIPE, SIG_IGN);
}

/*
 * A worker started with stdin, stdout or stderr closed would get them back
 * from pipe2() or the connection: /dev/null holds their place.
 */
static void
fill_std_fds(void)
{
	int			fd;

	for (fd = 0; fd <= 2; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF)
		{
			int			nul = open("/dev/null", O_RDWR);

			if (nul >= 0 && nul != fd)
			{
				dup2(nul, fd);
				close(nul);
			}
		}
}

/* Three pipes per running command: --concurrency 1000 needs the hard limit. */
static void
raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max)
	{
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int
main(int argc, char **argv)
{
	Options		opts;
	char		err[600];
	int			rc;

	fill_std_fds();
	rc = parse_options(argc, argv, &opts);
	if (rc == 1)
		return 0;
	if (rc != 0)
		return EXIT_USAGE;
	install_signals();
	raise_fd_limit();
	if (!db_connect(&opts, err, sizeof(err)))
	{
		fprintf(stderr, "workflow-worker: cannot connect to the database: %s\n", err);
		return EXIT_USAGE;
	}
	if (!opts.quiet)
		log_line("worker %s started: %d type(s), concurrency %d%s",
				 opts.worker_id, opts.ntypes, opts.concurrency,
				 opts.batch ? ", batched" : "");
	return run_loop(&opts);
}
