/*-------------------------------------------------------------------------
 *
 * run.c
 *	  start_run: definition parsing, whole-DAG validation and the inserts
 *	  of a new run.
 *
 * The definition is validated whole before anything is written, in time
 * linear in steps plus edges (a hash of keys, Kahn's algorithm for
 * cycles).  Then one INSERT each writes the run, its steps, its edges and
 * the jobs of its root steps, with the run counters already right.
 *
 * Locks: none beyond the rows it inserts; a concurrent start_run with the
 * same idempotency key waits on the unique index and then returns the
 * first run's id.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_start_run);

static Datum StartRun(PG_FUNCTION_ARGS);

typedef struct StepDef
{
	char	   *key;
	bool		external;
	char	   *job_type;
	Datum		payload;		/* jsonb */
	int32		priority;
	int32		max_attempts;
	int32		timeout_seconds;
	char	   *stage;
	int			first_edge;		/* its prerequisites: edges[first_edge ..] */
	int			nedges;
	pg_uuid_t	id;
	pg_uuid_t	job_id;
	int16		counter_shard;	/* 0: counted on the run row */
} StepDef;

typedef struct EdgeDef
{
	int			prerequisite;	/* index into steps */
	int			dependent;
	bool		on_terminal;
} EdgeDef;

typedef struct KeyEntry
{
	char		key[NAMEDATALEN * 4];	/* hash key; longer keys are refused
										 * before they get here */
	int			index;
} KeyEntry;

typedef struct Definition
{
	char	   *name;
	char	   *result_step;
	StepDef    *steps;
	int			nsteps;
	EdgeDef    *edges;
	int			nedges;
	char	  **dep_keys;		/* per edge, the named prerequisite key */
	int			counter_shards; /* 0: counters on the run row */
} Definition;

static void ParseDefinition(Jsonb *definition, Definition *def);
static void ResolveDependencies(Definition *def, HTAB *keys);
static void CheckAcyclic(Definition *def);
static void AssignCounterShards(Definition *def, const int *order,
								const int *depth);
static void InsertRun(Definition *def, Jsonb *definition,
					  pg_uuid_t *run_id, Datum org, bool org_null,
					  Datum idem, bool idem_null);

/* --- JSON helpers --- */

static const char *
JsonTypeName(JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return "null";
		case jbvString:
			return "a string";
		case jbvNumeric:
			return "a number";
		case jbvBool:
			return "a boolean";
		case jbvBinary:
			return JsonContainerIsArray(v->val.binary.data) ? "an array" :
				"an object";
		default:
			return "a JSON value";
	}
}

static bool
IsObject(JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsObject(v->val.binary.data);
}

static bool
IsArray(JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data);
}

static JsonbValue *
GetKey(JsonbContainer *obj, const char *key)
{
	JsonbValue	k;

	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	return findJsonbValueFromContainer(obj, JB_FOBJECT, &k);
}

static char *
StringValue(JsonbValue *v)
{
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/*
 * CheckKeys refuses any key of obj not in allowed: a misspelt depends_on
 * must not silently make a root step.
 */
static void
CheckKeys(JsonbContainer *obj, const char *const *allowed, const char *where)
{
	JsonbIterator *it = JsonbIteratorInit(obj);
	JsonbValue	v;
	JsonbIteratorToken tok;

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		bool		known = false;

		if (tok != WJB_KEY)
			continue;
		for (int i = 0; allowed[i] != NULL; i++)
			if (strlen(allowed[i]) == (size_t) v.val.string.len &&
				memcmp(allowed[i], v.val.string.val, v.val.string.len) == 0)
				known = true;
		if (!known)
			wf_invalid_definition("%s has unknown key \"%s\"", where,
								  pnstrdup(v.val.string.val, v.val.string.len));
	}
}

/* IntValue reads an integral JSON number in [min, max]. */
static int32
IntValue(JsonbValue *v, int32 min, int32 max, const char *what,
		 const char *step)
{
	char	   *text;
	char	   *end;
	long		value;

	if (v->type != jbvNumeric)
		wf_invalid_definition("step \"%s\": %s must be an integer, not %s",
							  step, what, JsonTypeName(v));
	text = DatumGetCString(DirectFunctionCall1(numeric_out,
											   NumericGetDatum(v->val.numeric)));
	errno = 0;
	value = strtol(text, &end, 10);
	if (*end != '\0' || errno != 0 || value < min || value > max)
		wf_invalid_definition("step \"%s\": %s must be an integer between %d and %d, not %s",
							  step, what, min, max, text);
	return (int32) value;
}

static bool
ValidStepKey(const char *key, int len)
{
	if (len < 1 || len > wf_max_step_key_length)
		return false;
	for (int i = 0; i < len; i++)
	{
		char		c = key[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
			  c == '-'))
			return false;
	}
	return true;
}

static Datum
JsonbValueDatum(JsonbValue *v)
{
	return PointerGetDatum(JsonbValueToJsonb(v));
}

/* --- parsing --- */

static void
ParseStep(JsonbValue *sv, int index, StepDef *step, Definition *def,
		  int *max_edges_seen, HTAB *keys)
{
	static const char *const step_keys[] = {"key", "kind", "job_type",
		"payload", "depends_on", "priority", "max_attempts",
	"timeout_seconds", "stage", NULL};
	JsonbContainer *obj;
	JsonbValue *v;
	KeyEntry   *entry;
	bool		found;
	char		where[64];

	if (!IsObject(sv))
		wf_invalid_definition("steps[%d] must be an object, not %s", index,
							  JsonTypeName(sv));
	obj = sv->val.binary.data;

	v = GetKey(obj, "key");
	if (v == NULL)
		wf_invalid_definition("steps[%d] has no key", index);
	if (v->type != jbvString)
		wf_invalid_definition("steps[%d]: key must be a string, not %s", index,
							  JsonTypeName(v));
	if (!ValidStepKey(v->val.string.val, v->val.string.len))
		wf_invalid_definition("steps[%d]: key \"%s\" must match ^[A-Za-z0-9_.:-]{1,%d}$",
							  index, StringValue(v), wf_max_step_key_length);
	step->key = StringValue(v);

	snprintf(where, sizeof(where), "step \"%.40s\"", step->key);
	CheckKeys(obj, step_keys, where);

	if (strlen(step->key) >= sizeof(entry->key))
		wf_invalid_definition("step \"%s\": key is too long", step->key);
	entry = hash_search(keys, step->key, HASH_ENTER, &found);
	if (found)
		wf_invalid_definition("step \"%s\" appears more than once", step->key);
	entry->index = index;

	step->external = false;
	v = GetKey(obj, "kind");
	if (v != NULL)
	{
		char	   *kind;

		if (v->type != jbvString)
			wf_invalid_definition("step \"%s\": kind must be \"job\" or \"external\", not %s",
								  step->key, JsonTypeName(v));
		kind = StringValue(v);
		if (strcmp(kind, "external") == 0)
			step->external = true;
		else if (strcmp(kind, "job") != 0)
			wf_invalid_definition("step \"%s\": kind must be \"job\" or \"external\", not \"%s\"",
								  step->key, kind);
	}

	step->job_type = NULL;
	v = GetKey(obj, "job_type");
	if (step->external && v != NULL)
		wf_invalid_definition("step \"%s\": an external step has no job_type",
							  step->key);
	if (!step->external)
	{
		if (v == NULL)
			wf_invalid_definition("step \"%s\": a job step needs a job_type",
								  step->key);
		if (v->type != jbvString || v->val.string.len == 0)
			wf_invalid_definition("step \"%s\": job_type must be a non-empty string",
								  step->key);
		if (v->val.string.len > wf_max_job_type_bytes)
			wf_invalid_definition("step \"%s\": job_type is %d bytes, more than workflow.max_job_type_bytes (%d)",
								  step->key, v->val.string.len,
								  wf_max_job_type_bytes);
		step->job_type = StringValue(v);
	}

	v = GetKey(obj, "payload");
	if (v == NULL)
		step->payload = DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"));
	else
	{
		if (v->type == jbvNull)
			wf_invalid_definition("step \"%s\": payload must not be null",
								  step->key);
		step->payload = JsonbValueDatum(v);
		if (VARSIZE(DatumGetPointer(step->payload)) > (Size) wf_max_payload_bytes)
			wf_invalid_definition("step \"%s\": payload is larger than workflow.max_payload_bytes (%d)",
								  step->key, wf_max_payload_bytes);
	}

	v = GetKey(obj, "priority");
	step->priority = v ? IntValue(v, PG_INT32_MIN, PG_INT32_MAX, "priority",
								  step->key) : 0;
	v = GetKey(obj, "max_attempts");
	step->max_attempts = v ? IntValue(v, 1, PG_INT32_MAX, "max_attempts",
									  step->key) : 3;
	v = GetKey(obj, "timeout_seconds");
	step->timeout_seconds = v ? IntValue(v, 1, PG_INT32_MAX,
										 "timeout_seconds", step->key) : 300;
	step->stage = NULL;
	v = GetKey(obj, "stage");
	if (v != NULL && v->type != jbvNull)
	{
		if (v->type != jbvString)
			wf_invalid_definition("step \"%s\": stage must be a string, not %s",
								  step->key, JsonTypeName(v));
		step->stage = StringValue(v);
	}

	/* dependencies: keys are resolved once every step is known */
	step->first_edge = def->nedges;
	step->nedges = 0;
	v = GetKey(obj, "depends_on");
	if (v != NULL)
	{
		JsonbContainer *arr;
		int			n;

		if (!IsArray(v))
			wf_invalid_definition("step \"%s\": depends_on must be an array, not %s",
								  step->key, JsonTypeName(v));
		arr = v->val.binary.data;
		n = JsonContainerSize(arr);
		if ((int64) def->nedges + n > wf_max_edges)
			wf_invalid_definition("more than workflow.max_edges (%d) dependencies",
								  wf_max_edges);
		if (def->nedges + n > *max_edges_seen)
		{
			while (def->nedges + n > *max_edges_seen)
				*max_edges_seen *= 2;
			def->edges = repalloc(def->edges, sizeof(EdgeDef) * *max_edges_seen);
			def->dep_keys = repalloc(def->dep_keys, sizeof(char *) * *max_edges_seen);
		}
		for (int i = 0; i < n; i++)
		{
			JsonbValue *dv = getIthJsonbValueFromContainer(arr, i);
			EdgeDef    *edge = &def->edges[def->nedges];
			char	   *dep_key;

			edge->dependent = index;
			edge->on_terminal = false;
			if (dv->type == jbvString)
				dep_key = StringValue(dv);
			else if (IsObject(dv))
			{
				static const char *const dep_keys[] = {"step", "release", NULL};
				JsonbValue *sk;
				JsonbValue *rv;
				char		dwhere[96];

				snprintf(dwhere, sizeof(dwhere), "step \"%.40s\": depends_on[%d]",
						 step->key, i);
				CheckKeys(dv->val.binary.data, dep_keys, dwhere);
				sk = GetKey(dv->val.binary.data, "step");
				if (sk == NULL || sk->type != jbvString)
					wf_invalid_definition("%s needs \"step\" naming a step key",
										  dwhere);
				dep_key = StringValue(sk);
				rv = GetKey(dv->val.binary.data, "release");
				if (rv != NULL)
				{
					char	   *mode = rv->type == jbvString ? StringValue(rv) : NULL;

					if (mode != NULL && strcmp(mode, "on_terminal") == 0)
						edge->on_terminal = true;
					else if (mode == NULL || strcmp(mode, "on_success") != 0)
						wf_invalid_definition("%s: release must be \"on_success\" or \"on_terminal\"",
											  dwhere);
				}
			}
			else
				wf_invalid_definition("step \"%s\": depends_on[%d] must be a step key or an object, not %s",
									  step->key, i, JsonTypeName(dv));
			def->dep_keys[def->nedges] = dep_key;
			def->nedges++;
			step->nedges++;
		}
	}
}

/* ParseDefinition checks the shape of the definition and reads its steps. */
static void
ParseDefinition(Jsonb *definition, Definition *def)
{
	static const char *const top_keys[] = {"name", "result_step", "steps", NULL};
	JsonbContainer *root = &definition->root;
	JsonbValue *v;
	JsonbContainer *steps;
	HTAB	   *keys;
	HASHCTL		ctl;
	int			max_edges_seen = 64;

	memset(def, 0, sizeof(Definition));
	if (!JsonContainerIsObject(root) || JsonContainerIsScalar(root))
		wf_invalid_definition("definition must be a JSON object");
	CheckKeys(root, top_keys, "definition");

	v = GetKey(root, "name");
	if (v != NULL && v->type != jbvNull)
	{
		if (v->type != jbvString)
			wf_invalid_definition("name must be a string, not %s", JsonTypeName(v));
		def->name = StringValue(v);
	}
	v = GetKey(root, "result_step");
	if (v != NULL && v->type != jbvNull)
	{
		if (v->type != jbvString)
			wf_invalid_definition("result_step must be a step key, not %s",
								  JsonTypeName(v));
		def->result_step = StringValue(v);
	}

	v = GetKey(root, "steps");
	if (v == NULL)
		wf_invalid_definition("definition has no steps");
	if (!IsArray(v))
		wf_invalid_definition("steps must be an array, not %s", JsonTypeName(v));
	steps = v->val.binary.data;
	def->nsteps = JsonContainerSize(steps);
	if (def->nsteps == 0)
		wf_invalid_definition("steps must not be empty");
	if (def->nsteps > wf_max_steps)
		wf_invalid_definition("%d steps, more than workflow.max_steps (%d)",
							  def->nsteps, wf_max_steps);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(((KeyEntry *) NULL)->key);
	ctl.entrysize = sizeof(KeyEntry);
	ctl.hcxt = CurrentMemoryContext;
	keys = hash_create("workflow step keys", def->nsteps, &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);

	def->steps = palloc0(sizeof(StepDef) * def->nsteps);
	def->edges = palloc(sizeof(EdgeDef) * max_edges_seen);
	def->dep_keys = palloc(sizeof(char *) * max_edges_seen);
	{
		JsonbIterator *it = JsonbIteratorInit(steps);
		JsonbValue	sv;
		JsonbIteratorToken tok;
		int			index = 0;

		while ((tok = JsonbIteratorNext(&it, &sv, true)) != WJB_DONE)
		{
			if (tok != WJB_ELEM)
				continue;
			ParseStep(&sv, index, &def->steps[index], def, &max_edges_seen,
					  keys);
			index++;
		}
	}

	ResolveDependencies(def, keys);
	if (def->result_step != NULL)
	{
		bool		found;

		if (strlen(def->result_step) >= sizeof(((KeyEntry *) NULL)->key))
			found = false;
		else
			hash_search(keys, def->result_step, HASH_FIND, &found);
		if (!found)
			wf_invalid_definition("result_step \"%s\" is not a step",
								  def->result_step);
	}
	CheckAcyclic(def);
	hash_destroy(keys);
}

/*
 * ResolveDependencies turns prerequisite keys into step indexes and
 * refuses unknown steps, self-edges and duplicate edges.
 */
static void
ResolveDependencies(Definition *def, HTAB *keys)
{
	int		   *last_seen = palloc(sizeof(int) * def->nsteps);

	/* last_seen[p] == dependent + 1 when p was already named by it */
	memset(last_seen, 0, sizeof(int) * def->nsteps);
	for (int s = 0; s < def->nsteps; s++)
	{
		StepDef    *step = &def->steps[s];

		for (int e = step->first_edge; e < step->first_edge + step->nedges; e++)
		{
			char	   *key = def->dep_keys[e];
			KeyEntry   *entry = NULL;

			if (strlen(key) < sizeof(entry->key))
				entry = hash_search(keys, key, HASH_FIND, NULL);
			if (entry == NULL)
				wf_invalid_definition("step \"%s\" depends on unknown step \"%s\"",
									  step->key, key);
			if (entry->index == s)
				wf_invalid_definition("step \"%s\" depends on itself", step->key);
			if (last_seen[entry->index] == s + 1)
				wf_invalid_definition("step \"%s\" depends on \"%s\" more than once",
									  step->key, key);
			last_seen[entry->index] = s + 1;
			def->edges[e].prerequisite = entry->index;
		}
	}
	pfree(last_seen);
}

/*
 * CheckAcyclic runs Kahn's algorithm; if steps remain, it walks back from
 * one of them through remaining prerequisites until a step repeats, which
 * names a step that is on a cycle.  On the way it assigns counter shards.
 */
static void
CheckAcyclic(Definition *def)
{
	int			n = def->nsteps;
	int		   *indegree = palloc0(sizeof(int) * n);
	int		   *out_start = palloc0(sizeof(int) * (n + 1));
	int		   *out_edges = palloc(sizeof(int) * Max(def->nedges, 1));
	int		   *queue = palloc(sizeof(int) * n);
	int		   *depth = palloc0(sizeof(int) * n);
	int			head = 0;
	int			tail = 0;

	for (int e = 0; e < def->nedges; e++)
	{
		indegree[def->edges[e].dependent]++;
		out_start[def->edges[e].prerequisite + 1]++;
	}
	for (int i = 0; i < n; i++)
		out_start[i + 1] += out_start[i];
	{
		int		   *fill = palloc(sizeof(int) * n);

		memcpy(fill, out_start, sizeof(int) * n);
		for (int e = 0; e < def->nedges; e++)
			out_edges[fill[def->edges[e].prerequisite]++] = def->edges[e].dependent;
		pfree(fill);
	}
	for (int i = 0; i < n; i++)
		if (indegree[i] == 0)
			queue[tail++] = i;
	while (head < tail)
	{
		int			s = queue[head++];

		for (int k = out_start[s]; k < out_start[s + 1]; k++)
		{
			if (depth[out_edges[k]] < depth[s] + 1)
				depth[out_edges[k]] = depth[s] + 1;
			if (--indegree[out_edges[k]] == 0)
				queue[tail++] = out_edges[k];
		}
	}
	if (tail < n)
	{
		bool	   *visited = palloc0(sizeof(bool) * n);
		int			s = 0;

		while (indegree[s] == 0)
			s++;
		/* each remaining step has a remaining prerequisite */
		while (!visited[s])
		{
			StepDef    *step = &def->steps[s];

			visited[s] = true;
			for (int e = step->first_edge; e < step->first_edge + step->nedges; e++)
			{
				if (indegree[def->edges[e].prerequisite] > 0)
				{
					s = def->edges[e].prerequisite;
					break;
				}
			}
		}
		wf_invalid_definition("the dependencies form a cycle through step \"%s\"",
							  def->steps[s].key);
	}
	AssignCounterShards(def, queue, depth);
	pfree(depth);
	pfree(indegree);
	pfree(out_start);
	pfree(out_edges);
	pfree(queue);
}

/*
 * AssignCounterShards spreads the steps of each level (steps at the same
 * depth, which can run at the same time) round-robin over the run's
 * counter shards, so concurrent completions rarely share a shard, while a
 * chain stays in one shard and never moves the run row.  Runs narrower
 * than workflow.counter_shard_min_width keep their counters on the run row.
 */
static void
AssignCounterShards(Definition *def, const int *order, const int *depth)
{
	int			n = def->nsteps;
	int		   *width = palloc0(sizeof(int) * n);
	int			max_width = 0;
	int			shards;

	for (int i = 0; i < n; i++)
	{
		int			w = ++width[depth[i]];

		max_width = Max(max_width, w);
	}
	shards = Min(wf_counter_shards, Max(2, max_width / 4));
	if (max_width < wf_counter_shard_min_width || shards < 2)
		shards = 0;
	def->counter_shards = shards;
	memset(width, 0, sizeof(int) * n);
	for (int i = 0; i < n; i++)
	{
		int			s = order[i];

		def->steps[s].counter_shard =
			shards == 0 ? 0 : (int16) (1 + width[depth[s]]++ % shards);
	}
	pfree(width);
}

/* --- writing --- */

static Datum
TextOrNull(const char *s, bool *isnull)
{
	*isnull = (s == NULL);
	return s ? CStringGetTextDatum(s) : (Datum) 0;
}

/*
 * InsertRun writes the run, steps, edges and root jobs.  Returns with
 * *run_id set to the new run's id, or to the existing run's id when the
 * idempotency key matched a run with the same definition.
 */
static void
InsertRun(Definition *def, Jsonb *definition, pg_uuid_t *run_id,
		  Datum org, bool org_null, Datum idem, bool idem_null)
{
	static SPIPlanPtr run_plan = NULL;
	static const char *run_sql =
		"INSERT INTO workflow.workflow_runs (id, organization_id, name,"
		" definition, status, result_step_key, idempotency_key,"
		" steps_total, steps_active, steps_waiting, steps_blocked,"
		" counter_shards)"
		" VALUES ($1, $2, $3, $4, $5::workflow.run_status, $6, $7, $8, $9,"
		" $10, $11, $12)"
		" ON CONFLICT (organization_id, idempotency_key)"
		" WHERE idempotency_key IS NOT NULL DO NOTHING"
		" RETURNING id";
	static const Oid run_types[12] = {UUIDOID, UUIDOID, TEXTOID, JSONBOID,
		TEXTOID, TEXTOID, TEXTOID, INT4OID, INT4OID, INT4OID,
	INT4OID, INT2OID};
	static SPIPlanPtr existing_plan = NULL;
	static const char *existing_sql =
		"SELECT r.id, r.definition" OP("=") "$3 FROM workflow.workflow_runs r"
		" WHERE (r.organization_id" OP("=") "$1"
		"  OR (r.organization_id IS NULL AND $1 IS NULL))"
		" AND r.idempotency_key" OP("=") "$2";
	static const Oid existing_types[3] = {UUIDOID, TEXTOID, JSONBOID};
	static SPIPlanPtr steps_plan = NULL;
	static const char *steps_sql =
		"INSERT INTO workflow.workflow_steps (id, workflow_run_id, step_key,"
		" execution_kind, job_type, organization_id, payload, priority,"
		" max_attempts, timeout_seconds, stage, status, job_id, released_at,"
		" dependency_count_total, dependency_count_pending, counter_shard)"
		" SELECT u.id, $1, u.step_key, u.kind::workflow.execution_kind,"
		" u.job_type, $2, u.payload, u.priority, u.max_attempts,"
		" u.timeout_seconds, u.stage, u.status::workflow.step_status, u.job_id,"
		" CASE WHEN u.status" OP("<>") "'BLOCKED' THEN pg_catalog.statement_timestamp() END,"
		" u.deps, u.deps, u.shard"
		" FROM ROWS FROM (pg_catalog.unnest($3::pg_catalog.uuid[]),"
		" pg_catalog.unnest($4::pg_catalog.text[]),"
		" pg_catalog.unnest($5::pg_catalog.text[]),"
		" pg_catalog.unnest($6::pg_catalog.text[]),"
		" pg_catalog.unnest($7::pg_catalog.jsonb[]),"
		" pg_catalog.unnest($8::pg_catalog.int4[]),"
		" pg_catalog.unnest($9::pg_catalog.int4[]),"
		" pg_catalog.unnest($10::pg_catalog.int4[]),"
		" pg_catalog.unnest($11::pg_catalog.text[]),"
		" pg_catalog.unnest($12::pg_catalog.text[]),"
		" pg_catalog.unnest($13::pg_catalog.uuid[]),"
		" pg_catalog.unnest($14::pg_catalog.int4[]),"
		" pg_catalog.unnest($15::pg_catalog.int2[]))"
		" AS u(id, step_key, kind, job_type, payload, priority, max_attempts,"
		" timeout_seconds, stage, status, job_id, deps, shard)";
	static const Oid steps_types[15] = {UUIDOID, UUIDOID, UUIDARRAYOID,
		TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID, JSONBARRAYOID, INT4ARRAYOID,
		INT4ARRAYOID, INT4ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, UUIDARRAYOID,
	INT4ARRAYOID, INT2ARRAYOID};
	static SPIPlanPtr shards_plan = NULL;
	static const char *shards_sql =
		"INSERT INTO workflow.workflow_run_counters (workflow_run_id, shard,"
		" steps_active, steps_waiting, steps_blocked)"
		" SELECT $1, u.shard, u.active, u.waiting, u.blocked"
		" FROM ROWS FROM (pg_catalog.unnest($2::pg_catalog.int2[]),"
		" pg_catalog.unnest($3::pg_catalog.int4[]),"
		" pg_catalog.unnest($4::pg_catalog.int4[]),"
		" pg_catalog.unnest($5::pg_catalog.int4[]))"
		" AS u(shard, active, waiting, blocked)";
	static const Oid shards_types[5] = {UUIDOID, INT2ARRAYOID, INT4ARRAYOID,
	INT4ARRAYOID, INT4ARRAYOID};
	static SPIPlanPtr edges_plan = NULL;
	static const char *edges_sql =
		"INSERT INTO workflow.workflow_step_dependencies (workflow_run_id,"
		" prerequisite_step_id, dependent_step_id, release_mode)"
		" SELECT $1, u.p, u.d, u.m::workflow.release_mode"
		" FROM ROWS FROM (pg_catalog.unnest($2::pg_catalog.uuid[]),"
		" pg_catalog.unnest($3::pg_catalog.uuid[]),"
		" pg_catalog.unnest($4::pg_catalog.text[])) AS u(p, d, m)";
	static const Oid edges_types[4] = {UUIDOID, UUIDARRAYOID, UUIDARRAYOID,
	TEXTARRAYOID};
	static SPIPlanPtr jobs_plan = NULL;
	static const char *jobs_sql =
		"INSERT INTO workflow.job_queue (id, job_type, organization_id,"
		" payload, priority, stage, max_attempts, timeout_seconds, run_at,"
		" workflow_run_id, workflow_step_id, generation)"
		" SELECT s.job_id, s.job_type, s.organization_id, s.payload,"
		" s.priority, s.stage, s.max_attempts, s.timeout_seconds,"
		" pg_catalog.statement_timestamp(), s.workflow_run_id, s.id, 0"
		" FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1"
		" AND s.id" OP("=") "ANY ($2)";
	static const Oid jobs_types[2] = {UUIDOID, UUIDARRAYOID};
	int			n = def->nsteps;
	int			nroot_jobs = 0;
	int			nroot_external = 0;
	Datum		values[15];
	char		nulls[15];
	bool		isnull;
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *keys = palloc(sizeof(Datum) * n);
	Datum	   *kinds = palloc(sizeof(Datum) * n);
	Datum	   *job_types = palloc(sizeof(Datum) * n);
	bool	   *job_type_nulls = palloc(sizeof(bool) * n);
	Datum	   *payloads = palloc(sizeof(Datum) * n);
	Datum	   *priorities = palloc(sizeof(Datum) * n);
	Datum	   *attempts = palloc(sizeof(Datum) * n);
	Datum	   *timeouts = palloc(sizeof(Datum) * n);
	Datum	   *stages = palloc(sizeof(Datum) * n);
	bool	   *stage_nulls = palloc(sizeof(bool) * n);
	Datum	   *statuses = palloc(sizeof(Datum) * n);
	Datum	   *job_ids = palloc(sizeof(Datum) * n);
	bool	   *job_id_nulls = palloc(sizeof(bool) * n);
	Datum	   *deps = palloc(sizeof(Datum) * n);
	Datum	   *root_steps = palloc(sizeof(Datum) * n);
	Datum	   *step_shards = palloc(sizeof(Datum) * n);
	int			nshards = def->counter_shards;
	int32	   *shard_count[3] = {NULL, NULL, NULL};	/* active, waiting,
														 * blocked */
	int32		run_count[3];
	Datum		status_blocked = CStringGetTextDatum("BLOCKED");
	Datum		status_enqueued = CStringGetTextDatum("ENQUEUED");
	Datum		status_waiting = CStringGetTextDatum("WAITING_FOR_EXTERNAL");
	Datum		kind_job = CStringGetTextDatum("JOB");
	Datum		kind_external = CStringGetTextDatum("EXTERNAL");
	const char *run_status;

	WfNewUuidV7(run_id);
	for (int i = 0; i < n; i++)
	{
		StepDef    *s = &def->steps[i];

		WfNewUuidV7(&s->id);
		ids[i] = UUIDPGetDatum(&s->id);
		keys[i] = CStringGetTextDatum(s->key);
		kinds[i] = s->external ? kind_external : kind_job;
		job_types[i] = TextOrNull(s->job_type, &job_type_nulls[i]);
		payloads[i] = s->payload;
		priorities[i] = Int32GetDatum(s->priority);
		attempts[i] = Int32GetDatum(s->max_attempts);
		timeouts[i] = Int32GetDatum(s->timeout_seconds);
		stages[i] = TextOrNull(s->stage, &stage_nulls[i]);
		deps[i] = Int32GetDatum(s->nedges);
		job_id_nulls[i] = true;
		job_ids[i] = (Datum) 0;
		step_shards[i] = Int16GetDatum(s->counter_shard);
		if (s->nedges > 0)
			statuses[i] = status_blocked;
		else if (s->external)
		{
			statuses[i] = status_waiting;
			nroot_external++;
		}
		else
		{
			statuses[i] = status_enqueued;
			WfNewUuidV7(&s->job_id);
			job_ids[i] = UUIDPGetDatum(&s->job_id);
			job_id_nulls[i] = false;
			root_steps[nroot_jobs++] = ids[i];
		}
	}

	/*
	 * A sharded run's row counts the shards where a counter is not zero;
	 * either way the status follows from the same zeros.
	 */
	run_count[0] = nroot_jobs;
	run_count[1] = nroot_external;
	run_count[2] = n - nroot_jobs - nroot_external;
	if (nshards > 0)
	{
		for (int c = 0; c < 3; c++)
			shard_count[c] = palloc0(sizeof(int32) * (nshards + 1));
		for (int i = 0; i < n; i++)
		{
			StepDef    *s = &def->steps[i];
			int			c = s->nedges > 0 ? 2 : s->external ? 1 : 0;

			shard_count[c][s->counter_shard]++;
		}
		for (int c = 0; c < 3; c++)
		{
			run_count[c] = 0;
			for (int k = 1; k <= nshards; k++)
				run_count[c] += shard_count[c][k] > 0;
		}
	}

	/* the run, unless its idempotency key is taken */
	run_status = WfComputeRunStatus(run_count[0], run_count[1], run_count[2],
									0, 0);
	memset(nulls, ' ', sizeof(nulls));
	values[0] = UUIDPGetDatum(run_id);
	values[1] = org;
	nulls[1] = org_null ? 'n' : ' ';
	values[2] = TextOrNull(def->name, &isnull);
	nulls[2] = isnull ? 'n' : ' ';
	values[3] = JsonbPGetDatum(definition);
	values[4] = CStringGetTextDatum(run_status);
	values[5] = TextOrNull(def->result_step, &isnull);
	nulls[5] = isnull ? 'n' : ' ';
	values[6] = idem;
	nulls[6] = idem_null ? 'n' : ' ';
	values[7] = Int32GetDatum(n);
	values[8] = Int32GetDatum(run_count[0]);
	values[9] = Int32GetDatum(run_count[1]);
	values[10] = Int32GetDatum(run_count[2]);
	values[11] = Int16GetDatum((int16) nshards);
	WfExecute(&run_plan, run_sql, 12, run_types, values, nulls, false, 0);
	if (SPI_processed == 0)
	{
		/* the key is taken: same definition returns the first run */
		values[0] = org;
		nulls[0] = org_null ? 'n' : ' ';
		values[1] = idem;
		nulls[1] = ' ';
		values[2] = JsonbPGetDatum(definition);
		nulls[2] = ' ';
		/* not read-only: a fresh snapshot sees the run we waited for */
		WfExecute(&existing_plan, existing_sql, 3, existing_types, values,
				  nulls, false, 1);
		if (SPI_processed != 1)
			ereport(ERROR,
					(errcode(WF_SQLSTATE_RETRY),
					 errmsg(WF_RELEASE_CONFLICT ": the run holding this idempotency key is not visible yet"),
					 errhint("Retry the transaction.")));
		if (!WfResultBool(0, 2))
			ereport(ERROR,
					(errcode(WF_SQLSTATE_CONFLICT),
					 errmsg(WF_IDEMPOTENCY_CONFLICT ": idempotency key \"%s\" was used for another definition",
							TextDatumGetCString(idem)),
					 errdetail("Run %s was started with this key.",
							   WfUuidString(DatumGetUUIDP(WfResultDatum(0, 1, &isnull))))));
		WfResultUuid(0, 1, run_id);
		return;
	}

	/* steps */
	values[0] = UUIDPGetDatum(run_id);
	values[1] = org;
	nulls[1] = org_null ? 'n' : ' ';
	values[2] = WfArray(ids, NULL, n, UUIDOID);
	values[3] = WfArray(keys, NULL, n, TEXTOID);
	values[4] = WfArray(kinds, NULL, n, TEXTOID);
	values[5] = WfArray(job_types, job_type_nulls, n, TEXTOID);
	values[6] = WfArray(payloads, NULL, n, JSONBOID);
	values[7] = WfArray(priorities, NULL, n, INT4OID);
	values[8] = WfArray(attempts, NULL, n, INT4OID);
	values[9] = WfArray(timeouts, NULL, n, INT4OID);
	values[10] = WfArray(stages, stage_nulls, n, TEXTOID);
	values[11] = WfArray(statuses, NULL, n, TEXTOID);
	values[12] = WfArray(job_ids, job_id_nulls, n, UUIDOID);
	values[13] = WfArray(deps, NULL, n, INT4OID);
	values[14] = WfArray(step_shards, NULL, n, INT2OID);
	memset(nulls + 2, ' ', 13);
	WfExecute(&steps_plan, steps_sql, 15, steps_types, values, nulls, false, 0);

	/* counter shards */
	if (nshards > 0)
	{
		Datum	   *shard_no = palloc(sizeof(Datum) * nshards);
		Datum	   *counts[3];

		for (int c = 0; c < 3; c++)
			counts[c] = palloc(sizeof(Datum) * nshards);
		for (int k = 0; k < nshards; k++)
		{
			shard_no[k] = Int16GetDatum((int16) (k + 1));
			for (int c = 0; c < 3; c++)
				counts[c][k] = Int32GetDatum(shard_count[c][k + 1]);
		}
		values[0] = UUIDPGetDatum(run_id);
		values[1] = WfArray(shard_no, NULL, nshards, INT2OID);
		for (int c = 0; c < 3; c++)
			values[c + 2] = WfArray(counts[c], NULL, nshards, INT4OID);
		WfExecute(&shards_plan, shards_sql, 5, shards_types, values, NULL,
				  false, 0);
	}

	/* edges */
	if (def->nedges > 0)
	{
		Datum	   *pre = palloc(sizeof(Datum) * def->nedges);
		Datum	   *dep = palloc(sizeof(Datum) * def->nedges);
		Datum	   *mode = palloc(sizeof(Datum) * def->nedges);
		Datum		on_success = CStringGetTextDatum("ON_SUCCESS");
		Datum		on_terminal = CStringGetTextDatum("ON_TERMINAL");

		for (int e = 0; e < def->nedges; e++)
		{
			pre[e] = ids[def->edges[e].prerequisite];
			dep[e] = ids[def->edges[e].dependent];
			mode[e] = def->edges[e].on_terminal ? on_terminal : on_success;
		}
		values[0] = UUIDPGetDatum(run_id);
		values[1] = WfArray(pre, NULL, def->nedges, UUIDOID);
		values[2] = WfArray(dep, NULL, def->nedges, UUIDOID);
		values[3] = WfArray(mode, NULL, def->nedges, TEXTOID);
		WfExecute(&edges_plan, edges_sql, 4, edges_types, values, NULL,
				  false, 0);
	}

	/* jobs of the root job steps */
	if (nroot_jobs > 0)
	{
		values[0] = UUIDPGetDatum(run_id);
		values[1] = WfArray(root_steps, NULL, nroot_jobs, UUIDOID);
		WfExecute(&jobs_plan, jobs_sql, 2, jobs_types, values, NULL, false, 0);
	}
}

/* workflow_start_run validates a definition and starts a run of it. */
static Datum
StartRun(PG_FUNCTION_ARGS)
{
	Jsonb	   *definition;
	Definition	def;
	pg_uuid_t	run_id;
	const pg_uuid_t *org;

	WfRequireReadCommitted();
	if (PG_ARGISNULL(0))
		wf_invalid_definition("definition must not be null");
	definition = PG_GETARG_JSONB_P(0);
	ParseDefinition(definition, &def);
	if (!PG_ARGISNULL(2))
	{
		int			len = VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(2));

		if (len == 0 || len > wf_max_idempotency_key_bytes)
			wf_invalid_argument("idempotency_key must be 1 to %d bytes, not %d",
								wf_max_idempotency_key_bytes, len);
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	org = WfCallOrganization(PG_ARGISNULL(1) ? NULL : PG_GETARG_UUID_P(1));
	InsertRun(&def, definition, &run_id,
			  org ? UUIDPGetDatum(org) : (Datum) 0, org == NULL,
			  PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2), PG_ARGISNULL(2));
	SPI_finish();
	PG_RETURN_DATUM(WfUuidDatum(&run_id));
}

/*
 * The SQL-callable entry points: each body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
Datum
workflow_start_run(PG_FUNCTION_ARGS)
{
	return WfCallAsOwner(StartRun, fcinfo);
}
