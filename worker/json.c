/*
 * json.c: a small JSON validator and a JSON string escaper.
 *
 * The validator decides whether a command's stdout is stored as the JSON
 * value it is or wrapped as a JSON string.  It accepts only what PostgreSQL's
 * jsonb accepts, so that a "valid" output is never refused by the server:
 * strict RFC 8259 grammar, valid UTF-8, no \u0000, surrogate escapes only in
 * pairs.  The escaper replaces invalid UTF-8 and NUL bytes with U+FFFD.
 */
#include "worker.h"

#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 1000

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t
utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t		len, i;
	uint32_t	cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		len = 2, cp = c & 0x1F;
	else if (c >= 0xE0 && c <= 0xEF)
		len = 3, cp = c & 0x0F;
	else if (c >= 0xF0 && c <= 0xF4)
		len = 4, cp = c & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (i = 1; i < len; i++)
	{
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	/* overlong forms, surrogates and beyond U+10FFFF */
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
		(cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
		return 0;
	return len;
}

typedef struct Parser
{
	const unsigned char *p;
	const unsigned char *end;
	int			depth;
} Parser;

static bool parse_value(Parser *ps);

static void
skip_ws(Parser *ps)
{
	while (ps->p < ps->end &&
		   (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static int
hex4(const unsigned char *p)
{
	int			v = 0, i;

	for (i = 0; i < 4; i++)
	{
		int			c = p[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	return v;
}

/* A \uXXXX escape (p at the 'u'); a high surrogate must pair with a low. */
static bool
parse_unicode_escape(Parser *ps)
{
	int			v;

	if (ps->end - ps->p < 5 || (v = hex4(ps->p + 1)) < 0 || v == 0)
		return false;
	ps->p += 5;
	if (v >= 0xDC00 && v <= 0xDFFF)
		return false;
	if (v >= 0xD800 && v <= 0xDBFF)
	{
		int			lo;

		if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' ||
			(lo = hex4(ps->p + 2)) < 0xDC00 || lo > 0xDFFF)
			return false;
		ps->p += 6;
	}
	return true;
}

static bool
parse_string(Parser *ps)
{
	ps->p++;					/* the opening quote */
	while (ps->p < ps->end)
	{
		unsigned char c = *ps->p;

		if (c == '"')
		{
			ps->p++;
			return true;
		}
		if (c < 0x20)
			return false;
		if (c == '\\')
		{
			if (ps->p + 1 >= ps->end)
				return false;
			ps->p++;
			if (*ps->p == 'u')
			{
				if (!parse_unicode_escape(ps))
					return false;
				continue;
			}
			if (!strchr("\"\\/bfnrt", *ps->p) || *ps->p == '\0')
				return false;
			ps->p++;
			continue;
		}
		{
			size_t		n = utf8_len(ps->p, (size_t) (ps->end - ps->p));

			if (n == 0)
				return false;
			ps->p += n;
		}
	}
	return false;
}

static bool
digits(Parser *ps)
{
	const unsigned char *start = ps->p;

	while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
		ps->p++;
	return ps->p > start;
}

static bool
parse_number(Parser *ps)
{
	if (*ps->p == '-')
		ps->p++;
	if (ps->p < ps->end && *ps->p == '0')
		ps->p++;
	else if (!digits(ps))
		return false;
	if (ps->p < ps->end && *ps->p == '.')
	{
		ps->p++;
		if (!digits(ps))
			return false;
	}
	if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E'))
	{
		ps->p++;
		if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
			ps->p++;
		if (!digits(ps))
			return false;
	}
	return true;
}

static bool
parse_literal(Parser *ps, const char *word)
{
	size_t		n = strlen(word);

	if ((size_t) (ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
		return false;
	ps->p += n;
	return true;
}

/* Elements of an array (close ']') or members of an object (close '}'). */
static bool
parse_container(Parser *ps, char close)
{
	bool		object = close == '}';

	if (++ps->depth > MAX_DEPTH)
		return false;
	ps->p++;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == close)
	{
		ps->p++;
		ps->depth--;
		return true;
	}
	for (;;)
	{
		if (object)
		{
			if (ps->p >= ps->end || *ps->p != '"' || !parse_string(ps))
				return false;
			skip_ws(ps);
			if (ps->p >= ps->end || *ps->p++ != ':')
				return false;
		}
		if (!parse_value(ps))
			return false;
		skip_ws(ps);
		if (ps->p >= ps->end)
			return false;
		if (*ps->p == ',')
		{
			ps->p++;
			skip_ws(ps);
			continue;
		}
		if (*ps->p++ != close)
			return false;
		ps->depth--;
		return true;
	}
}

static bool
parse_value(Parser *ps)
{
	skip_ws(ps);
	if (ps->p >= ps->end)
		return false;
	switch (*ps->p)
	{
		case '{': return parse_container(ps, '}');
		case '[': return parse_container(ps, ']');
		case '"': return parse_string(ps);
		case 't': return parse_literal(ps, "true");
		case 'f': return parse_literal(ps, "false");
		case 'n': return parse_literal(ps, "null");
		default:
			if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
				return parse_number(ps);
			return false;
	}
}

bool
json_is_valid(const char *s, size_t len)
{
	Parser		ps = {(const unsigned char *) s, (const unsigned char *) s + len, 0};

	if (!parse_value(&ps))
		return false;
	skip_ws(&ps);
	return ps.p == ps.end;
}

/*
 * Appends s as a JSON string.  Control characters are escaped; invalid UTF-8
 * and NUL become U+FFFD (jsonb refuses both).
 */
void
json_append_string(Buf *out, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *) s;
	size_t		i = 0;

	buf_append(out, "\"", 1);
	while (i < len)
	{
		unsigned char c = p[i];
		size_t		n;

		if (c == '"' || c == '\\')
		{
			buf_append(out, "\\", 1);
			buf_append(out, &p[i++], 1);
		}
		else if (c == '\n')
			buf_puts(out, "\\n"), i++;
		else if (c == '\t')
			buf_puts(out, "\\t"), i++;
		else if (c == '\r')
			buf_puts(out, "\\r"), i++;
		else if (c == 0)
			buf_puts(out, "\xEF\xBF\xBD"), i++;
		else if (c < 0x20)
			buf_printf(out, "\\u%04x", c), i++;
		else if ((n = utf8_len(p + i, len - i)) == 0)
			buf_puts(out, "\xEF\xBF\xBD"), i++;
		else
		{
			buf_append(out, p + i, n);
			i += n;
		}
	}
	buf_append(out, "\"", 1);
}

/* Copies s as valid UTF-8 text without NUL: what a text parameter needs. */
void
utf8_sanitize(Buf *out, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *) s;
	size_t		i = 0;

	while (i < len)
	{
		size_t		n = p[i] ? utf8_len(p + i, len - i) : 0;

		if (n == 0)
		{
			buf_puts(out, "\xEF\xBF\xBD");
			i++;
		}
		else
		{
			buf_append(out, p + i, n);
			i += n;
		}
	}
	if (out->data == NULL)
		buf_append(out, "", 0);
}
