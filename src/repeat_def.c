/*-------------------------------------------------------------------------
 *
 * repeat_def.c
 *	  The loops of a definition: each repeat step's body, checked.
 *
 * A repeat step's body is every step that descends from one of its
 * back_to steps and is an ancestor of the repeat.  The back edge is not a
 * dependency, so the graph stays acyclic and each generation of the body
 * runs as any part of a DAG does.  WfCheckRepeats finds each body by a walk
 * forward from the back_to steps that stops at the repeat, then a walk back
 * from the repeat through the steps found: in a valid definition the first
 * walk finds only the body and the repeat, so the check is linear in the
 * bodies' steps and edges.  It refuses what the loop cannot reset as a
 * whole: a body step with a dependent outside the body (other than the
 * repeat), a step of another kind than job in a body, overlapping or nested
 * bodies.  It then writes the loop into the repeat step's payload (the
 * step has no job), where the cascade reads it (repeat.c).
 *
 * Takes no locks and runs no statement.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"

#include "workflow.h"

/* the dependents of each step, as arrays out of one allocation */
typedef struct OutEdges
{
	int		   *start;			/* step s: edges[start[s] .. start[s + 1]) */
	int		   *dependent;
} OutEdges;

static void BuildOutEdges(const WfDefinition *def, OutEdges *out);
static void CheckRepeatPrerequisite(const WfDefinition *def, int r);
static int	ResolveBackTo(const WfDefinition *def, HTAB *keys, int r,
						  int *queue);
static int	WalkForward(const WfDefinition *def, const OutEdges *out, int r,
						int *queue, int nqueue, int *seen);
static void WalkBack(const WfDefinition *def, int r, int *seen,
					 int *stack);
static void CheckBody(WfDefinition *def, int r, const int *found, int nfound,
					  const int *seen);
static void CheckBackToPayloads(const WfDefinition *def, int r,
								const int *found);
static void AppendKeys(StringInfo buf, const WfDefinition *def,
					   const int *list, int n);
static Datum RepeatSpec(const WfDefinition *def, int r, const int *found,
						int nfound);

/* each kind, as a message names it */
static const char *const kind_names[] = {"a job", "an external", "a sleep",
"an event", "a repeat"};

/* BuildOutEdges lists each step's dependents. */
static void
BuildOutEdges(const WfDefinition *def, OutEdges *out)
{
	int			n = def->nsteps;
	int		   *fill = palloc(sizeof(int) * n);

	out->start = palloc0(sizeof(int) * (n + 1));
	out->dependent = palloc(sizeof(int) * Max(def->nedges, 1));
	for (int e = 0; e < def->nedges; e++)
		out->start[def->edges[e].prerequisite + 1]++;
	for (int i = 0; i < n; i++)
		out->start[i + 1] += out->start[i];
	memcpy(fill, out->start, sizeof(int) * n);
	for (int e = 0; e < def->nedges; e++)
		out->dependent[fill[def->edges[e].prerequisite]++] = def->edges[e].dependent;
	pfree(fill);
}

/* CheckRepeatPrerequisite: a repeat has one prerequisite, on_success. */
static void
CheckRepeatPrerequisite(const WfDefinition *def, int r)
{
	const WfStepDef *step = &def->steps[r];

	if (step->nedges != 1 || def->edges[step->first_edge].on_terminal)
		wf_invalid_definition("step \"%s\": a repeat step needs exactly one prerequisite, released on_success",
							  step->key);
}

/*
 * ResolveBackTo puts the indexes of the repeat's back_to steps into queue
 * and returns how many; refuses unknown keys and the repeat itself.
 */
static int
ResolveBackTo(const WfDefinition *def, HTAB *keys, int r, int *queue)
{
	const WfStepDef *step = &def->steps[r];

	for (int i = 0; i < step->nback_to; i++)
	{
		int			b = WfStepIndex(keys, step->back_to[i]);

		if (b < 0)
			wf_invalid_definition("step \"%s\": back_to names unknown step \"%s\"",
								  step->key, step->back_to[i]);
		if (b == r)
			wf_invalid_definition("step \"%s\": back_to names the repeat step itself",
								  step->key);
		for (int j = 0; j < i; j++)
			if (queue[j] == b)
				wf_invalid_definition("step \"%s\": back_to names \"%s\" more than once",
									  step->key, step->back_to[i]);
		queue[i] = b;
	}
	return step->nback_to;
}

/*
 * WalkForward marks (seen[s] = 1) and lists in queue the steps reached
 * from the back_to steps (queue[0 .. nqueue)) through dependents, without
 * going past the repeat; returns how many.
 */
static int
WalkForward(const WfDefinition *def, const OutEdges *out, int r, int *queue,
			int nqueue, int *seen)
{
	int			head = 0;
	int			tail = 0;

	for (int i = 0; i < nqueue; i++)
		if (seen[queue[i]] == 0)
		{
			seen[queue[i]] = 1;
			queue[tail++] = queue[i];
		}
	while (head < tail)
	{
		int			s = queue[head++];

		if (s == r)
			continue;
		for (int k = out->start[s]; k < out->start[s + 1]; k++)
		{
			int			d = out->dependent[k];

			if (seen[d] == 0)
			{
				seen[d] = 1;
				queue[tail++] = d;
			}
		}
	}
	return tail;
}

/*
 * WalkBack marks (seen[s] = 2) the steps found forward from which the
 * repeat can be reached: the body.
 */
static void
WalkBack(const WfDefinition *def, int r, int *seen, int *stack)
{
	int			top = 0;

	seen[r] = 2;
	stack[top++] = r;
	while (top > 0)
	{
		const WfStepDef *step = &def->steps[stack[--top]];

		for (int e = step->first_edge; e < step->first_edge + step->nedges; e++)
		{
			int			p = def->edges[e].prerequisite;

			if (seen[p] == 1)
			{
				seen[p] = 2;
				stack[top++] = p;
			}
		}
	}
}

/*
 * CheckBody refuses a found step the repeat cannot be reached from (it
 * hangs off the body), a body step of another kind than job, and a step
 * already in another body; marks the body's steps as the repeat's.
 */
static void
CheckBody(WfDefinition *def, int r, const int *found, int nfound,
		  const int *seen)
{
	const char *repeat = def->steps[r].key;

	for (int i = 0; i < def->steps[r].nback_to; i++)
		if (seen[found[i]] != 2)
			wf_invalid_definition("step \"%s\": back_to step \"%s\" is not an ancestor of the repeat",
								  repeat, def->steps[found[i]].key);
	for (int i = 0; i < nfound; i++)
	{
		WfStepDef  *step = &def->steps[found[i]];

		if (found[i] == r)
			continue;
		if (seen[found[i]] != 2)
			wf_invalid_definition("step \"%s\": step \"%s\" depends on the loop's body but is not in it; only the repeat may follow a body step",
								  repeat, step->key);
		if (step->kind != WF_KIND_JOB)
			wf_invalid_definition("step \"%s\": the loop's body holds job steps only, and \"%s\" is %s step",
								  repeat, step->key, kind_names[step->kind]);
		if (step->repeat_of >= 0)
			wf_invalid_definition("step \"%s\": step \"%s\" is in the body of repeat \"%s\" already; bodies do not overlap",
								  repeat, step->key,
								  def->steps[step->repeat_of].key);
		step->repeat_of = r;
	}
}

/*
 * CheckBackToPayloads: a back_to step's job gets the loop's "repeat" key
 * in its payload from the second generation on, so its payload is an
 * object without one.  back_to[i] is found[i].
 */
static void
CheckBackToPayloads(const WfDefinition *def, int r, const int *found)
{
	const WfStepDef *step = &def->steps[r];

	for (int i = 0; i < step->nback_to; i++)
	{
		const WfStepDef *b = &def->steps[found[i]];
		Jsonb	   *payload = DatumGetJsonbP(b->payload);

		if (!JB_ROOT_IS_OBJECT(payload))
			wf_invalid_definition("step \"%s\": the payload of back_to step \"%s\" must be an object, which the loop adds its \"repeat\" key to",
								  step->key, b->key);
		if (getKeyJsonValueFromContainer(&payload->root, "repeat", 6, NULL) != NULL)
			wf_invalid_definition("step \"%s\": the payload of back_to step \"%s\" must not have a \"repeat\" key, which the loop sets",
								  step->key, b->key);
	}
}

/* AppendKeys appends a JSON array of the keys of steps list[0 .. n). */
static void
AppendKeys(StringInfo buf, const WfDefinition *def, const int *list, int n)
{
	appendStringInfoChar(buf, '[');
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoString(buf, ", ");
		escape_json(buf, def->steps[list[i]].key);
	}
	appendStringInfoChar(buf, ']');
}

/*
 * RepeatSpec makes the repeat step's payload: its loop, with the body's
 * keys in definition order.
 */
static Datum
RepeatSpec(const WfDefinition *def, int r, const int *found, int nfound)
{
	const WfStepDef *step = &def->steps[r];
	int		   *body = palloc(sizeof(int) * Max(nfound, 1));
	int			nbody = 0;
	StringInfoData buf;

	for (int s = 0; s < def->nsteps; s++)
		if (def->steps[s].repeat_of == r)
			body[nbody++] = s;
	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"while\": ");
	escape_json(&buf, step->repeat_while);
	appendStringInfo(&buf, ", \"max_iterations\": %d, \"exhaustion_policy\": \"%s\", \"back_to\": ",
					 step->max_iterations,
					 step->emit_outcome ? "emit_outcome" : "fail");
	AppendKeys(&buf, def, found, step->nback_to);
	appendStringInfoString(&buf, ", \"body\": ");
	AppendKeys(&buf, def, body, nbody);
	appendStringInfoChar(&buf, '}');
	pfree(body);
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
}

/*
 * WfCheckRepeats checks every repeat step of an acyclic definition (see
 * the file header), marks each body step with its repeat and sets each
 * repeat step's payload to its loop.
 */
void
WfCheckRepeats(WfDefinition *def, HTAB *keys)
{
	OutEdges	out;
	int		   *queue = NULL;
	int		   *seen = NULL;
	int		   *stack = NULL;
	bool		built = false;

	for (int r = 0; r < def->nsteps; r++)
	{
		int			nfound;

		if (def->steps[r].kind != WF_KIND_REPEAT)
			continue;
		if (!built)
		{
			BuildOutEdges(def, &out);
			queue = palloc(sizeof(int) * def->nsteps);
			seen = palloc0(sizeof(int) * def->nsteps);
			stack = palloc(sizeof(int) * def->nsteps);
			built = true;
		}
		CheckRepeatPrerequisite(def, r);
		nfound = ResolveBackTo(def, keys, r, queue);
		nfound = WalkForward(def, &out, r, queue, nfound, seen);
		WalkBack(def, r, seen, stack);
		CheckBody(def, r, queue, nfound, seen);
		CheckBackToPayloads(def, r, queue);
		def->steps[r].payload = RepeatSpec(def, r, queue, nfound);
		for (int i = 0; i < nfound; i++)
			seen[queue[i]] = 0;
		seen[r] = 0;
	}
}
