/*-------------------------------------------------------------------------
 *
 * graph.c
 *	  run_graph: a run's DAG as a picture, in Graphviz DOT or as a Mermaid
 *	  flowchart.
 *
 * Three read-only statements on the caller's snapshot read the run (for
 * the caller's right to see it, checked as run_counters checks it), its
 * steps with their jobs' attempts, and its edges, each through an index
 * keyed by the run id.  The rows are copied out before SPI_finish and the
 * text is built afterwards: one node per step, in step id order (the
 * definition's order), one edge per dependency.
 *
 * Nodes get generated ids (s1, s2, ...); a step key appears only inside a
 * quoted label, written by the format's escaper (AppendDotText,
 * AppendMermaidText), so that no key can end the label, start a statement
 * or break a line, whatever it holds.
 *
 * Locks: none beyond AccessShareLock on the tables it reads; no row locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_run_graph);

/* the output formats */
typedef enum GraphFormat
{
	GRAPH_DOT,
	GRAPH_MERMAID
} GraphFormat;

/* how a step status is drawn */
typedef struct StatusStyle
{
	const char *status;
	const char *css_class;		/* Mermaid class name */
	const char *fill;			/* fill colour */
	const char *stroke;			/* border colour */
} StatusStyle;

/*
 * One colour per status: grey while blocked, pale pink while parked, blues
 * while queued and running, lilac while sleeping, amber while waiting for
 * the outside world, green, red and a
 * darker grey at the end; orange while a step is undone, teal once it is,
 * dark red when its undoing failed.  A status not listed here (a later version's)
 * is drawn white.
 */
static const StatusStyle status_styles[] = {
	{"BLOCKED", "blocked", "#eeeeee", "#9e9e9e"},
	{"PARKED", "parked", "#f8d7e8", "#a3386e"},
	{"ENQUEUED", "enqueued", "#cfe2ff", "#6c8ebf"},
	{"RUNNING", "running", "#8bb9fe", "#3d6fb4"},
	{"SLEEPING", "sleeping", "#e2d9f3", "#6f42c1"},
	{"WAITING_FOR_EXTERNAL", "waiting_for_external", "#ffe69c", "#b7950b"},
	{"SUCCEEDED", "succeeded", "#a3cfbb", "#2e7d57"},
	{"FAILED", "failed", "#f1aeb5", "#b02a37"},
	{"CANCELED", "canceled", "#ced4da", "#6c757d"},
	{"COMPENSATING", "compensating", "#ffd8b5", "#d9480f"},
	{"COMPENSATED", "compensated", "#c5f0e9", "#0c8599"},
	{"COMPENSATION_FAILED", "compensation_failed", "#e599a0", "#7a1c24"},
};
static const StatusStyle unknown_style = {NULL, NULL, "#ffffff", "#333333"};

/* a step as drawn */
typedef struct GraphStep
{
	pg_uuid_t	id;
	char	   *key;
	char	   *kind;
	char	   *status;
	int32		attempts;
} GraphStep;

/* an edge between two steps, as indexes into the step array */
typedef struct GraphEdge
{
	int			from;
	int			to;
	bool		on_terminal;
} GraphEdge;

/* a run's steps and edges, copied out of SPI */
typedef struct RunGraph
{
	GraphStep  *steps;			/* sorted by id */
	int			nsteps;
	GraphEdge  *edges;			/* sorted by (from, to) */
	int			nedges;
} RunGraph;

static GraphFormat ParseFormat(FunctionCallInfo fcinfo);
static void CheckRun(Datum run_id, const pg_uuid_t *org);
static void ReadSteps(Datum run_id, MemoryContext outer, RunGraph *graph);
static void ReadEdges(Datum run_id, MemoryContext outer, RunGraph *graph);
static int	StepIndex(const RunGraph *graph, const pg_uuid_t *id);
static int	CompareEdges(const void *a, const void *b);
static const StatusStyle *StyleOf(const char *status);
static int	SpecialCodePoint(const unsigned char *p, int *len);
static void AppendDotText(StringInfo buf, const char *s);
static void AppendMermaidText(StringInfo buf, const char *s);
static void AppendLabelTail(StringInfo buf, const GraphStep *step);
static void WriteDot(StringInfo buf, const RunGraph *graph);
static void WriteMermaid(StringInfo buf, const RunGraph *graph);
static Datum RunGraphBody(PG_FUNCTION_ARGS);

/* ParseFormat reads the format argument: 'dot' or 'mermaid'. */
static GraphFormat
ParseFormat(FunctionCallInfo fcinfo)
{
	char	   *format = text_to_cstring(WfArgText(fcinfo, 1, "format"));

	if (strcmp(format, "dot") == 0)
		return GRAPH_DOT;
	if (strcmp(format, "mermaid") == 0)
		return GRAPH_MERMAID;
	ereport(ERROR,
			(errcode(WF_SQLSTATE_BAD_INPUT),
			 errmsg(WF_JOB_INVALID_ARGUMENT ": format must be 'dot' or 'mermaid'"),
			 errdetail("The format given was \"%.64s\".", format)));
	return GRAPH_DOT;			/* keep the compiler quiet */
}

/*
 * CheckRun raises workflow.run_not_found unless the run exists and the
 * caller may see it: of the organization named (when one is), and, for a
 * tenant role, of one of its organizations.  Another organization's run
 * gets exactly the error of a run that does not exist.
 */
static void
CheckRun(Datum run_id, const pg_uuid_t *org)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT r.organization_id FROM workflow.workflow_runs r"
		" WHERE r.id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	pg_uuid_t	run_org;
	bool		has_org;

	values[0] = run_id;
	WfExecute(&plan, sql, 1, types, values, NULL, true, 1);
	has_org = SPI_processed == 1 && WfResultUuid(0, 1, &run_org);
	if (SPI_processed != 1 ||
		(org != NULL && (!has_org || WfUuidCompare(&run_org, org) != 0)) ||
		!WfCallSeesOrganization(has_org ? &run_org : NULL))
		wf_error(WF_SQLSTATE_NOT_FOUND, WF_RUN_NOT_FOUND, "run %s does not exist",
				 WfUuidString(DatumGetUUIDP(run_id)));
}

/*
 * ReadSteps copies the run's steps into outer, in id order, each with its
 * job's attempt (0 for a step without a job).
 */
static void
ReadSteps(Datum run_id, MemoryContext outer, RunGraph *graph)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT s.id, s.step_key, s.execution_kind::pg_catalog.text,"
		" s.status::pg_catalog.text, j.attempt"
		" FROM workflow.workflow_steps s"
		" LEFT JOIN workflow.job_queue j ON j.id" OP("=") "s.job_id"
		" AND j.workflow_run_id" OP("=") "s.workflow_run_id"
		" WHERE s.workflow_run_id" OP("=") "$1"
		" ORDER BY s.id";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	MemoryContext old;
	int			n;

	values[0] = run_id;
	WfExecute(&plan, sql, 1, types, values, NULL, true, 0);
	n = (int) SPI_processed;

	old = MemoryContextSwitchTo(outer);
	graph->nsteps = n;
	graph->steps = palloc0(sizeof(GraphStep) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		GraphStep  *step = &graph->steps[i];

		WfResultUuid(i, 1, &step->id);
		step->key = WfResultText(i, 2);
		step->kind = WfResultText(i, 3);
		step->status = WfResultText(i, 4);
		step->attempts = WfResultInt32(i, 5);
	}
	MemoryContextSwitchTo(old);
}

/*
 * ReadEdges copies the run's edges into outer, as indexes into the steps,
 * sorted by prerequisite, then dependent.
 */
static void
ReadEdges(Datum run_id, MemoryContext outer, RunGraph *graph)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT e.prerequisite_step_id, e.dependent_step_id,"
		" e.release_mode::pg_catalog.text"
		" FROM workflow.workflow_step_dependencies e"
		" WHERE e.workflow_run_id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	int			n;

	values[0] = run_id;
	WfExecute(&plan, sql, 1, types, values, NULL, true, 0);
	n = (int) SPI_processed;

	graph->nedges = n;
	graph->edges = MemoryContextAlloc(outer, sizeof(GraphEdge) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		GraphEdge  *edge = &graph->edges[i];
		pg_uuid_t	from;
		pg_uuid_t	to;
		char	   *mode;

		WfResultUuid(i, 1, &from);
		WfResultUuid(i, 2, &to);
		mode = WfResultText(i, 3);
		edge->from = StepIndex(graph, &from);
		edge->to = StepIndex(graph, &to);
		edge->on_terminal = mode != NULL && strcmp(mode, "ON_TERMINAL") == 0;
		if (edge->from < 0 || edge->to < 0)
			ereport(ERROR,
					(errcode(WF_SQLSTATE_INTERNAL),
					 errmsg(WF_INTERNAL_STATE ": an edge of run %s joins a step that is not in the run",
							WfUuidString(DatumGetUUIDP(run_id))),
					 errdetail("Edge from step %s to step %s.",
							   WfUuidString(&from), WfUuidString(&to)),
					 errhint("Run workflow.verify() on the run.")));
	}
	qsort(graph->edges, n, sizeof(GraphEdge), CompareEdges);
}

/* StepIndex finds a step by id in the sorted steps; -1 when absent. */
static int
StepIndex(const RunGraph *graph, const pg_uuid_t *id)
{
	int			lo = 0;
	int			hi = graph->nsteps - 1;

	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;
		int			cmp = WfUuidCompare(&graph->steps[mid].id, id);

		if (cmp == 0)
			return mid;
		if (cmp < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/* CompareEdges orders edges by prerequisite, then dependent. */
static int
CompareEdges(const void *a, const void *b)
{
	const GraphEdge *x = (const GraphEdge *) a;
	const GraphEdge *y = (const GraphEdge *) b;

	if (x->from != y->from)
		return x->from < y->from ? -1 : 1;
	if (x->to != y->to)
		return x->to < y->to ? -1 : 1;
	return 0;
}

/* StyleOf returns how a step status is drawn. */
static const StatusStyle *
StyleOf(const char *status)
{
	for (int i = 0; i < lengthof(status_styles); i++)
		if (status != NULL && strcmp(status, status_styles[i].status) == 0)
			return &status_styles[i];
	return &unknown_style;
}

/*
 * SpecialCodePoint says whether the character at p ends or breaks a line
 * or is invisible in a way a reader must see: the ASCII control
 * characters, DEL, and, in a UTF-8 database, the C1 controls (NEL among
 * them) and the line and paragraph separators U+2028 and U+2029.  Returns
 * the code point and sets len to the bytes it takes, or returns -1.
 */
static int
SpecialCodePoint(const unsigned char *p, int *len)
{
	*len = 1;
	if (p[0] < 0x20 || p[0] == 0x7f)
		return p[0];
	if (GetDatabaseEncoding() != PG_UTF8)
		return -1;
	if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
	{
		*len = 2;
		return p[1];
	}
	if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9))
	{
		*len = 3;
		return 0x2000 | (p[2] - 0x80);
	}
	return -1;
}

/*
 * AppendDotText writes s for the inside of a DOT double-quoted label.
 * The quote and the backslash are escaped (the backslash would otherwise
 * start one of Graphviz's label escapes, such as \N or \n); '&' becomes
 * "&amp;", since Graphviz reads HTML entities in labels; the characters
 * of SpecialCodePoint are shown as the text \uXXXX, since Graphviz can
 * neither draw them nor put them in an SVG.
 */
static void
AppendDotText(StringInfo buf, const char *s)
{
	const unsigned char *p = (const unsigned char *) s;

	while (*p != '\0')
	{
		int			len;
		int			special = SpecialCodePoint(p, &len);

		if (special >= 0)
			appendStringInfo(buf, "\\\\u%04X", special);
		else if (*p == '"')
			appendStringInfoString(buf, "\\\"");
		else if (*p == '\\')
			appendStringInfoString(buf, "\\\\");
		else if (*p == '&')
			appendStringInfoString(buf, "&amp;");
		else
			appendStringInfoChar(buf, (char) *p);
		p += len;
	}
}

/*
 * AppendMermaidText writes s for the inside of a Mermaid double-quoted
 * label.  Letters, digits and "_.:-" stay as they are, and so do
 * characters beyond ASCII but those of SpecialCodePoint; every other
 * character is written as Mermaid's entity code "#<decimal>;", which
 * Mermaid draws as that character.  No quote, bracket, '#', '<',
 * backquote or line break of a key reaches the output.
 */
static void
AppendMermaidText(StringInfo buf, const char *s)
{
	const unsigned char *p = (const unsigned char *) s;

	while (*p != '\0')
	{
		int			len;
		int			special = SpecialCodePoint(p, &len);

		if (special >= 0)
			appendStringInfo(buf, "#%d;", special);
		else if (*p >= 0x80 || (*p >= 'A' && *p <= 'Z') ||
				 (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
				 *p == '_' || *p == '.' || *p == ':' || *p == '-')
			appendStringInfoChar(buf, (char) *p);
		else
			appendStringInfo(buf, "#%d;", *p);
		p += len;
	}
}

/*
 * AppendLabelTail writes the label's second line: kind, status and
 * attempts, which come from the engine's own labels and need no escaping.
 */
static void
AppendLabelTail(StringInfo buf, const GraphStep *step)
{
	appendStringInfo(buf, "%s, %s, attempts: %d",
					 step->kind ? step->kind : "?",
					 step->status ? step->status : "?", step->attempts);
}

/* WriteDot writes the graph in Graphviz DOT. */
static void
WriteDot(StringInfo buf, const RunGraph *graph)
{
	appendStringInfoString(buf,
						   "digraph workflow_run {\n"
						   "  rankdir=LR;\n"
						   "  node [shape=box, style=\"rounded,filled\","
						   " fillcolor=\"#ffffff\", color=\"#333333\"];\n");
	for (int i = 0; i < graph->nsteps; i++)
	{
		const GraphStep *step = &graph->steps[i];
		const StatusStyle *style = StyleOf(step->status);

		appendStringInfo(buf, "  s%d [label=\"", i + 1);
		AppendDotText(buf, step->key);
		appendStringInfoString(buf, "\\n");
		AppendLabelTail(buf, step);
		appendStringInfo(buf, "\", fillcolor=\"%s\", color=\"%s\"];\n",
						 style->fill, style->stroke);
	}
	for (int i = 0; i < graph->nedges; i++)
	{
		const GraphEdge *edge = &graph->edges[i];

		appendStringInfo(buf, "  s%d -> s%d%s;\n", edge->from + 1, edge->to + 1,
						 edge->on_terminal ? " [style=dashed]" : "");
	}
	appendStringInfoString(buf, "}\n");
}

/* WriteMermaid writes the graph as a Mermaid flowchart. */
static void
WriteMermaid(StringInfo buf, const RunGraph *graph)
{
	appendStringInfoString(buf, "flowchart LR\n");
	for (int i = 0; i < lengthof(status_styles); i++)
		appendStringInfo(buf, "  classDef %s fill:%s,stroke:%s\n",
						 status_styles[i].css_class, status_styles[i].fill,
						 status_styles[i].stroke);
	for (int i = 0; i < graph->nsteps; i++)
	{
		const GraphStep *step = &graph->steps[i];
		const StatusStyle *style = StyleOf(step->status);

		appendStringInfo(buf, "  s%d[\"", i + 1);
		AppendMermaidText(buf, step->key);
		appendStringInfoString(buf, "<br/>");
		AppendLabelTail(buf, step);
		appendStringInfoString(buf, "\"]");
		if (style->css_class != NULL)
			appendStringInfo(buf, ":::%s", style->css_class);
		appendStringInfoChar(buf, '\n');
	}
	for (int i = 0; i < graph->nedges; i++)
	{
		const GraphEdge *edge = &graph->edges[i];

		appendStringInfo(buf, "  s%d %s s%d\n", edge->from + 1,
						 edge->on_terminal ? "-.->" : "-->", edge->to + 1);
	}
}

/*
 * RunGraphBody returns the run's DAG as text in the format asked for.
 * Arguments are checked first, then the caller's right to see the run.
 */
static Datum
RunGraphBody(PG_FUNCTION_ARGS)
{
	MemoryContext outer = CurrentMemoryContext;
	GraphFormat format;
	Datum		run_id;
	const pg_uuid_t *org;
	RunGraph	graph;
	StringInfoData buf;

	if (PG_ARGISNULL(0))
		wf_invalid_argument("workflow_run_id must not be null");
	run_id = PG_GETARG_DATUM(0);
	format = ParseFormat(fcinfo);
	org = PG_ARGISNULL(2) ? NULL : PG_GETARG_UUID_P(2);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	CheckRun(run_id, org);
	ReadSteps(run_id, outer, &graph);
	ReadEdges(run_id, outer, &graph);
	SPI_finish();

	initStringInfo(&buf);
	if (format == GRAPH_DOT)
		WriteDot(&buf, &graph);
	else
		WriteMermaid(&buf, &graph);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(buf.data, buf.len));
}

/*
 * The SQL-callable entry point of this file: its body runs as the
 * extension's owner, confined to the caller's organizations.
 */
WF_OWNER_ENTRY(workflow_run_graph, RunGraphBody)
