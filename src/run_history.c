/*-------------------------------------------------------------------------
 *
 * run_history.c
 *	  run_history: a run's events, in the order they were written.
 *
 * The events are read through a cursor, a page at a time, into the
 * function's result store, so a run of any size is returned without
 * holding all of its events in memory twice.  The run is looked up first,
 * as every call does: a run of another organization, or of none the
 * caller may see, is reported as missing.
 *
 * Takes no locks beyond the snapshot's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/tuplestore.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_run_history);

#define HISTORY_PAGE_ROWS 1000

static Datum RunHistory(PG_FUNCTION_ARGS);
static bool SameLayout(TupleDesc result, TupleDesc rows);
static void CopyHistoryPage(ReturnSetInfo *rsinfo);

/*
 * SameLayout says whether the cursor's rows have the result's layout:
 * the same columns of the same types, in the same order, none dropped.
 * Then a page's rows go into the result store as they are.
 */
static bool
SameLayout(TupleDesc result, TupleDesc rows)
{
	if (result->natts != rows->natts)
		return false;
	for (int c = 0; c < result->natts; c++)
	{
		Form_pg_attribute a = TupleDescAttr(result, c);
		Form_pg_attribute b = TupleDescAttr(rows, c);

		if (a->attisdropped || a->atttypid != b->atttypid ||
			strcmp(NameStr(a->attname), NameStr(b->attname)) != 0)
			return false;
	}
	return true;
}

/*
 * CopyHistoryPage copies the rows of the last fetch into the result
 * store: as they are when the layouts agree, otherwise column by column
 * by name (the table's row type, which the result is, can have dropped
 * columns or a new order after an update of the extension).
 */
static void
CopyHistoryPage(ReturnSetInfo *rsinfo)
{
	TupleDesc	desc = rsinfo->setDesc;
	Datum	   *values;
	bool	   *nulls;
	int		   *columns;

	if (SameLayout(desc, SPI_tuptable->tupdesc))
	{
		for (uint64 r = 0; r < SPI_processed; r++)
			tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[r]);
		return;
	}

	values = palloc(sizeof(Datum) * desc->natts);
	nulls = palloc(sizeof(bool) * desc->natts);
	columns = palloc(sizeof(int) * desc->natts);
	for (int c = 0; c < desc->natts; c++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, c);

		columns[c] = att->attisdropped ? 0 :
			SPI_fnumber(SPI_tuptable->tupdesc, NameStr(att->attname));
		if (!att->attisdropped && columns[c] <= 0)
			elog(ERROR, "run_history: no column \"%s\"", NameStr(att->attname));
	}
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		for (int c = 0; c < desc->natts; c++)
		{
			if (columns[c] == 0)
			{
				values[c] = (Datum) 0;
				nulls[c] = true;
			}
			else
				values[c] = WfResultDatum(r, columns[c], &nulls[c]);
		}
		/* the store copies the values into its own memory */
		tuplestore_putvalues(rsinfo->setResult, desc, values, nulls);
	}
	pfree(values);
	pfree(nulls);
	pfree(columns);
}

/* workflow_run_history returns a run's events in id order. */
static Datum
RunHistory(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT e.id, e.workflow_run_id, e.step_key, e.event_type, e.detail,"
		" e.created_at FROM workflow.workflow_events e"
		" WHERE e.workflow_run_id" OP("=") "$1 ORDER BY e.id";
	static const Oid types[1] = {UUIDOID};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[1];
	Portal		portal;

	if (PG_ARGISNULL(0))
		wf_invalid_argument("workflow_run_id must not be null");
	values[0] = PG_GETARG_DATUM(0);
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	WfFindRun(PG_GETARG_UUID_P(0), PG_ARGISNULL(1) ? NULL : PG_GETARG_UUID_P(1));

	portal = WfOpenCursor(&plan, sql, 1, types, values, NULL);
	for (;;)
	{
		SPI_cursor_fetch(portal, true, HISTORY_PAGE_ROWS);
		if (SPI_processed == 0)
			break;
		CopyHistoryPage(rsinfo);
		SPI_freetuptable(SPI_tuptable);
	}
	SPI_cursor_close(portal);
	SPI_finish();
	return (Datum) 0;
}

/*
 * The SQL-callable entry point: its body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
WF_OWNER_ENTRY(workflow_run_history, RunHistory)
