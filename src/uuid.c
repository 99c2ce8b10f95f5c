/*-------------------------------------------------------------------------
 *
 * uuid.c
 *	  workflow.uuid_v7(): time-ordered identifiers (RFC 9562, version 7).
 *
 * The first 48 bits are Unix milliseconds, the next 12 a sub-millisecond
 * fraction, so ids made one after another in a backend sort in creation
 * order and inserts stay at the right edge of the primary key index.  The
 * rest comes from pg_strong_random.  Takes no locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_uuid_v7);

/* Unix epoch minus PostgreSQL epoch, in microseconds. */
#define WF_UNIX_EPOCH_OFFSET_US \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

static int64 last_unix_us = 0;

/*
 * WfNewUuidV7 fills out with a fresh version 7 uuid.  Within a backend the
 * timestamp part never goes backwards, even if the clock does.
 */
void
WfNewUuidV7(pg_uuid_t *out)
{
	int64		unix_us = GetCurrentTimestamp() + WF_UNIX_EPOCH_OFFSET_US;
	uint64		unix_ms;
	uint32		sub_ms;

	/* one microsecond past the last id keeps ids strictly ordered */
	if (unix_us <= last_unix_us)
		unix_us = last_unix_us + 1;
	last_unix_us = unix_us;

	unix_ms = (uint64) unix_us / 1000;
	sub_ms = (uint32) (((uint64) unix_us % 1000) * 4096 / 1000);

	if (!pg_strong_random(out->data, UUID_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random values")));

	out->data[0] = (unsigned char) (unix_ms >> 40);
	out->data[1] = (unsigned char) (unix_ms >> 32);
	out->data[2] = (unsigned char) (unix_ms >> 24);
	out->data[3] = (unsigned char) (unix_ms >> 16);
	out->data[4] = (unsigned char) (unix_ms >> 8);
	out->data[5] = (unsigned char) unix_ms;
	out->data[6] = (unsigned char) (0x70 | ((sub_ms >> 8) & 0x0F));
	out->data[7] = (unsigned char) sub_ms;
	out->data[8] = (unsigned char) (0x80 | (out->data[8] & 0x3F));
}

/* WfUuidCompare orders uuids as the uuid btree opclass does. */
int
WfUuidCompare(const pg_uuid_t *a, const pg_uuid_t *b)
{
	return memcmp(a->data, b->data, UUID_LEN);
}

/* WfUuidCmpQsort is WfUuidCompare for qsort and bsearch. */
int
WfUuidCmpQsort(const void *a, const void *b)
{
	return WfUuidCompare((const pg_uuid_t *) a, (const pg_uuid_t *) b);
}

/* workflow_uuid_v7 returns a new version 7 uuid. */
Datum
workflow_uuid_v7(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *uuid = palloc(sizeof(pg_uuid_t));

	WfNewUuidV7(uuid);
	PG_RETURN_UUID_P(uuid);
}
