/*
 * util.c: growable buffers, allocation that cannot return NULL, the
 * monotonic clock, and the log line format (UTC time, program name).
 */
#include "worker.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void *
xmalloc(size_t n)
{
	void	   *p = malloc(n ? n : 1);

	if (p == NULL)
	{
		fprintf(stderr, "workflow-worker: out of memory\n");
		exit(EXIT_USAGE);
	}
	return p;
}

void *
xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (p == NULL)
	{
		fprintf(stderr, "workflow-worker: out of memory\n");
		exit(EXIT_USAGE);
	}
	return p;
}

char *
xstrdup(const char *s)
{
	size_t		n = strlen(s) + 1;

	return memcpy(xmalloc(n), s, n);
}

char *
xstrdup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

/* Keeps one spare byte so that data is always NUL-terminated. */
void
buf_append(Buf *b, const void *data, size_t len)
{
	if (b->len + len + 1 > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 256;

		while (b->len + len + 1 > cap)
			cap *= 2;
		b->data = xrealloc(b->data, cap);
		b->cap = cap;
	}
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
}

void
buf_puts(Buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

void
buf_printf(Buf *b, const char *fmt,...)
{
	char		small[256];
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t) n < sizeof(small))
	{
		buf_append(b, small, (size_t) n);
		return;
	}
	{
		char	   *big = xmalloc((size_t) n + 1);

		va_start(ap, fmt);
		vsnprintf(big, (size_t) n + 1, fmt, ap);
		va_end(ap);
		buf_append(b, big, (size_t) n);
		free(big);
	}
}

void
buf_reset(Buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void
buf_free(Buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

/* Hands the (always terminated) contents over to the caller. */
char *
buf_steal(Buf *b)
{
	char	   *s;

	if (b->data == NULL)
		buf_append(b, "", 0);
	s = b->data;
	b->data = NULL;
	b->len = b->cap = 0;
	return s;
}

/* Deadlines use the monotonic clock: a wall clock step must not fire them. */
double
now_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One line on stderr: "2026-12-02T16:00:00Z workflow-worker: ..." */
void
log_line(const char *fmt,...)
{
	char		stamp[32];
	time_t		t = time(NULL);
	struct tm	tm;
	va_list		ap;
	Buf			line = {0};
	char		msg[1024];

	gmtime_r(&t, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* one write, so that lines of concurrent processes do not interleave */
	buf_printf(&line, "%s workflow-worker: %s\n", stamp, msg);
	fwrite(line.data, 1, line.len, stderr);
	fflush(stderr);
	buf_free(&line);
}
