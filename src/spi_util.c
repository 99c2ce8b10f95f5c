/*-------------------------------------------------------------------------
 *
 * spi_util.c
 *	  Cached SPI plans and helpers to pass values in and out of them.
 *
 * Every statement of the engine is prepared once per backend and kept
 * (SPI_prepare + SPI_keepplan); callers hold the plan pointer in a static
 * variable next to the statement text.  The value helpers build and split
 * arrays, read result columns, compare and format values, and cut error
 * messages to workflow.max_error_message_bytes.  Takes no locks of its
 * own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"

#include "workflow.h"

static SPIPlanPtr WfPreparedPlanOptions(SPIPlanPtr *plan, const char *sql,
										int nargs, const Oid *argtypes,
										int cursor_options);
static SPIPlanPtr WfPreparedPlan(SPIPlanPtr *plan, const char *sql,
								 int nargs, const Oid *argtypes);

/*
 * WfPreparedPlanOptions returns the kept plan for sql, preparing it on
 * first use and again if it was invalidated for good (as ri_triggers.c
 * does).
 */
static SPIPlanPtr
WfPreparedPlanOptions(SPIPlanPtr *plan, const char *sql, int nargs,
					  const Oid *argtypes, int cursor_options)
{
	if (*plan != NULL && !SPI_plan_is_valid(*plan))
	{
		SPI_freeplan(*plan);
		*plan = NULL;
	}
	if (*plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare_cursor(sql, nargs, (Oid *) argtypes,
										   cursor_options);

		if (p == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(p) != 0)
			elog(ERROR, "SPI_keepplan failed");
		*plan = p;
	}
	return *plan;
}

/* WfPreparedPlan is WfPreparedPlanOptions with the default options. */
static SPIPlanPtr
WfPreparedPlan(SPIPlanPtr *plan, const char *sql, int nargs,
			   const Oid *argtypes)
{
	return WfPreparedPlanOptions(plan, sql, nargs, argtypes, 0);
}

/*
 * WfOpenCursor opens a read-only cursor over a cached statement, for a
 * result too large to fetch at once.
 */
Portal
WfOpenCursor(SPIPlanPtr *plan, const char *sql, int nargs,
			 const Oid *argtypes, Datum *values, const char *nulls)
{
	SPIPlanPtr	p = WfPreparedPlanOptions(plan, sql, nargs, argtypes,
										  CURSOR_OPT_NO_SCROLL);

	return SPI_cursor_open(NULL, p, values, nulls, true);
}

/*
 * WfExecuteGeneric is WfExecute for a statement whose best plan does not
 * depend on its parameter values: it always runs the generic plan.  The
 * plan cache would otherwise keep planning it afresh on every call when
 * the generic plan's estimate (LIMIT $1 of unknown size) looks worse than
 * the custom plans'.
 */
int
WfExecuteGeneric(SPIPlanPtr *plan, const char *sql, int nargs,
				 const Oid *argtypes, Datum *values, const char *nulls)
{
	SPIPlanPtr	p = WfPreparedPlanOptions(plan, sql, nargs, argtypes,
										  CURSOR_OPT_GENERIC_PLAN);
	int			ret;

	ret = SPI_execute_plan(p, values, nulls, false, 0);
	if (ret < 0)
		elog(ERROR, "SPI_execute_plan failed for \"%s\": %s",
			 sql, SPI_result_code_string(ret));
	return ret;
}

/*
 * WfExecute runs a cached statement and returns its SPI result code;
 * a negative code is an error, never returned.  A read_only statement runs
 * on the caller's snapshot; every other one takes a fresh snapshot, which
 * under READ COMMITTED sees what committed while we waited for a lock.
 */
int
WfExecute(SPIPlanPtr *plan, const char *sql, int nargs, const Oid *argtypes,
		  Datum *values, const char *nulls, bool read_only, long count)
{
	SPIPlanPtr	p = WfPreparedPlan(plan, sql, nargs, argtypes);
	int			ret;

	ret = SPI_execute_plan(p, values, nulls, read_only, count);
	if (ret < 0)
		elog(ERROR, "SPI_execute_plan failed for \"%s\": %s",
			 sql, SPI_result_code_string(ret));
	return ret;
}

/*
 * WfExecuteNowait runs a locking statement that uses NOWAIT and turns a
 * lock that is not available (55P03) into workflow.release_conflict, which
 * the caller retries like a serialization failure.
 */
int
WfExecuteNowait(SPIPlanPtr *plan, const char *sql, int nargs,
				const Oid *argtypes, Datum *values, const char *nulls)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	int			ret = 0;

	PG_TRY();
	{
		ret = WfExecute(plan, sql, nargs, argtypes, values, nulls, false, 0);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			PG_RE_THROW();
		FlushErrorState();
		ereport(ERROR,
				(errcode(WF_SQLSTATE_RETRY),
				 errmsg(WF_RELEASE_CONFLICT ": a row needed for the release is locked by a concurrent transaction"),
				 errdetail("%s", edata->message),
				 errhint("Retry the transaction.")));
	}
	PG_END_TRY();
	return ret;
}

/* WfArray builds a one-dimensional array of a built-in element type. */
Datum
WfArray(Datum *elems, bool *nulls, int n, Oid elemtype)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			dims[1];
	int			lbs[1];

	if (n == 0)
		return PointerGetDatum(construct_empty_array(elemtype));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	dims[0] = n;
	lbs[0] = 1;
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs,
											  elemtype, typlen, typbyval,
											  typalign));
}

/* WfDeconstruct splits a one-dimensional array of a built-in type. */
void
WfDeconstruct(ArrayType *arr, Oid elemtype, Datum **elems, bool **nulls,
			  int *n)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_BAD_INPUT),
				 errmsg(WF_JOB_INVALID_ARGUMENT ": arrays must be one-dimensional")));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(arr, elemtype, typlen, typbyval, typalign, elems, nulls,
					  n);
}

/* WfResultDatum reads column col (1-based) of row of the last SPI result. */
Datum
WfResultDatum(uint64 row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
						 col, isnull);
}

/* WfResultText returns a text column as a palloc'd string, or NULL. */
char *
WfResultText(uint64 row, int col)
{
	bool		isnull;
	Datum		d = WfResultDatum(row, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/* WfResultUuid copies a uuid column into out and says whether it was set. */
bool
WfResultUuid(uint64 row, int col, pg_uuid_t *out)
{
	bool		isnull;
	Datum		d = WfResultDatum(row, col, &isnull);

	if (isnull)
	{
		memset(out, 0, sizeof(pg_uuid_t));
		return false;
	}
	memcpy(out, DatumGetUUIDP(d), sizeof(pg_uuid_t));
	return true;
}

/* WfResultInt32 reads an int4 column, 0 for NULL. */
int32
WfResultInt32(uint64 row, int col)
{
	bool		isnull;
	Datum		d = WfResultDatum(row, col, &isnull);

	return isnull ? 0 : DatumGetInt32(d);
}

/* WfResultBool reads a boolean column, false for NULL. */
bool
WfResultBool(uint64 row, int col)
{
	bool		isnull;
	Datum		d = WfResultDatum(row, col, &isnull);

	return isnull ? false : DatumGetBool(d);
}

/* WfUuidDatum returns a palloc'd copy of uuid as a Datum. */
Datum
WfUuidDatum(const pg_uuid_t *uuid)
{
	pg_uuid_t  *copy = palloc(sizeof(pg_uuid_t));

	memcpy(copy, uuid, sizeof(pg_uuid_t));
	return UUIDPGetDatum(copy);
}

/* WfUuidString formats a uuid in its canonical text form. */
char *
WfUuidString(const pg_uuid_t *uuid)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out,
											   UUIDPGetDatum(uuid)));
}

/* WfJsonbEqual compares two jsonb values, NULL equal only to NULL. */
bool
WfJsonbEqual(Datum a, bool a_null, Datum b, bool b_null)
{
	if (a_null || b_null)
		return a_null && b_null;
	return DatumGetBool(DirectFunctionCall2(jsonb_eq, a, b));
}

/* WfTextEqual compares two strings, NULL equal only to NULL. */
bool
WfTextEqual(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == NULL && b == NULL;
	return strcmp(a, b) == 0;
}

/* WfEnumLabel returns the label of an enum value. */
char *
WfEnumLabel(Datum value)
{
	return DatumGetCString(DirectFunctionCall1(enum_out, value));
}

/*
 * WfTruncateMessage cuts an error message to the configured byte limit at
 * a character boundary; long messages are kept in part, never rejected.
 */
char *
WfTruncateMessage(const char *message)
{
	int			len;

	if (message == NULL)
		return NULL;
	len = strlen(message);
	if (len <= wf_max_error_message_bytes)
		return pstrdup(message);
	len = pg_mbcliplen(message, len, wf_max_error_message_bytes);
	return pnstrdup(message, len);
}

/*
 * WfResultAsRow returns row 0 of the last SPI result (a SELECT t.* of the
 * table "what") as the function's result: a tuple of the declared result
 * type, built column by column by name, NULL where the type has a dropped
 * column.  The SPI row has the table's columns in their logical order,
 * which is not the type's layout once a column was dropped.  The tuple is
 * copied to the caller's memory, so it outlives SPI_finish.
 */
Datum
WfResultAsRow(FunctionCallInfo fcinfo, const char *what)
{
	TupleDesc	desc;
	Datum	   *values;
	bool	   *nulls;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "a function returning %s must return a row type", what);
	values = palloc(sizeof(Datum) * desc->natts);
	nulls = palloc(sizeof(bool) * desc->natts);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		int			col;

		values[i] = (Datum) 0;
		nulls[i] = true;
		if (att->attisdropped)
			continue;
		col = SPI_fnumber(SPI_tuptable->tupdesc, NameStr(att->attname));
		if (col <= 0)
			elog(ERROR, "%s has no column \"%s\"", what, NameStr(att->attname));
		if (SPI_gettypeid(SPI_tuptable->tupdesc, col) != att->atttypid)
			elog(ERROR, "%s column \"%s\" is not of the result's type",
				 what, NameStr(att->attname));
		values[i] = WfResultDatum(0, col, &nulls[i]);
	}
	return PointerGetDatum(SPI_returntuple(heap_form_tuple(desc, values, nulls),
										   desc));
}
