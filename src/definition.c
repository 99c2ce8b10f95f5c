/*-------------------------------------------------------------------------
 *
 * definition.c
 *	  A run's definition: parsing and validation of its JSON.
 *
 * start_run validates the definition whole before anything is written, in
 * time linear in steps plus edges: its shape and every step's fields,
 * read with the jsonb API; the dependencies, resolved through a hash of
 * step keys (unknown steps, self-edges, duplicates); cycles, by Kahn's
 * algorithm, whose levels also spread the steps over the run's counter
 * shards.  The first problem raises workflow.invalid_definition.
 *
 * Takes no locks and runs no statement.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
#include "utils/resowner.h"

#include "workflow.h"

typedef struct KeyEntry
{
	char		key[NAMEDATALEN * 4];	/* hash key; longer keys are refused
										 * before they get here */
	int			index;
} KeyEntry;

static const char *JsonTypeName(JsonbValue *v);
static bool IsObject(JsonbValue *v);
static bool IsArray(JsonbValue *v);
static JsonbValue *GetKey(JsonbContainer *obj, const char *key);
static char *StringValue(JsonbValue *v);
static void CheckKeys(JsonbContainer *obj, const char *const *allowed,
					  const char *where);
static int32 IntValue(JsonbValue *v, int32 min, int32 max, const char *what,
					  const char *step);
static bool ValidStepKey(const char *key, int len);
static Datum JsonbValueDatum(JsonbValue *v);
static void ParseStepKey(JsonbContainer *obj, int index, WfStepDef *step,
						 HTAB *keys);
static void ParseStepKind(JsonbContainer *obj, WfStepDef *step);
static void CheckKindKeys(JsonbContainer *obj, const WfStepDef *step);
static void ParseJobType(JsonbContainer *obj, WfStepDef *step);
static TimestampTz TimestampValue(JsonbValue *v, const char *what,
								 const char *step);
static void ParseSleep(JsonbContainer *obj, WfStepDef *step);
static void ParseEvent(JsonbContainer *obj, WfStepDef *step);
static bool JsonpathParses(const char *text);
static void ParseRepeatStep(JsonbContainer *obj, WfStepDef *step);
static void ParseStepOptions(JsonbContainer *obj, WfStepDef *step);
static void ParseCompensate(JsonbContainer *obj, WfStepDef *step);
static char *ParseDependency(JsonbValue *dv, int i, const WfStepDef *step,
							 WfEdgeDef *edge);
static void ParseDependsOn(JsonbContainer *obj, int index, WfStepDef *step,
						   WfDefinition *def, int *max_edges_seen);
static void ParseStep(JsonbValue *sv, int index, WfStepDef *step,
					  WfDefinition *def, int *max_edges_seen, HTAB *keys);
static JsonbContainer *ParseTopLevel(JsonbContainer *root, WfDefinition *def);
static int32 LimitValue(JsonbContainer *limits, const char *key, int32 min);
static void ParseLimits(JsonbValue *v, WfLimits *limits);
static void ApplyLimits(WfDefinition *def);
static void ParseSteps(JsonbContainer *steps, WfDefinition *def, HTAB *keys);
static HTAB *StepKeyHash(int nsteps);
static void CheckResultStep(WfDefinition *def, HTAB *keys);
static void ResolveDependencies(WfDefinition *def, HTAB *keys);
static void OutgoingEdges(const WfDefinition *def, int *indegree,
						  int *out_start, int *out_edges);
static int	TopologicalOrder(int n, int *indegree, const int *out_start,
							 const int *out_edges, int *order, int *depth);
static int	StepOnCycle(const WfDefinition *def, const int *indegree);
static void CheckAcyclic(WfDefinition *def);
static void AssignCounterShards(WfDefinition *def, const int *order,
								const int *depth);

/* --- JSON helpers --- */

/* JsonTypeName names a JSON value's type for an error message. */
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

/* IsObject says whether a value is a JSON object. */
static bool
IsObject(JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsObject(v->val.binary.data);
}

/* IsArray says whether a value is a JSON array. */
static bool
IsArray(JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data);
}

/* GetKey returns the value of key in an object, or NULL. */
static JsonbValue *
GetKey(JsonbContainer *obj, const char *key)
{
	JsonbValue	k;

	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	return findJsonbValueFromContainer(obj, JB_FOBJECT, &k);
}

/* StringValue copies a JSON string into a C string. */
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

/*
 * IntValue reads an integral JSON number in [min, max]: a step's field
 * what, or, with step NULL, the limit what of "limits".
 */
static int32
IntValue(JsonbValue *v, int32 min, int32 max, const char *what,
		 const char *step)
{
	char	   *text;
	char	   *end;
	long		value;

	if (v->type != jbvNumeric)
	{
		if (step == NULL)
			wf_invalid_definition("limits.%s must be an integer, not %s", what,
								  JsonTypeName(v));
		wf_invalid_definition("step \"%s\": %s must be an integer, not %s",
							  step, what, JsonTypeName(v));
	}
	text = DatumGetCString(DirectFunctionCall1(numeric_out,
											   NumericGetDatum(v->val.numeric)));
	errno = 0;
	value = strtol(text, &end, 10);
	if (*end != '\0' || errno != 0 || value < min || value > max)
	{
		if (step == NULL)
			wf_invalid_definition("limits.%s must be an integer between %d and %d, not %s",
								  what, min, max, text);
		wf_invalid_definition("step \"%s\": %s must be an integer between %d and %d, not %s",
							  step, what, min, max, text);
	}
	return (int32) value;
}

/* ValidStepKey says whether a key matches ^[A-Za-z0-9_.:-]{1,max}$. */
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

/* JsonbValueDatum turns a JSON value into a jsonb Datum. */
static Datum
JsonbValueDatum(JsonbValue *v)
{
	return PointerGetDatum(JsonbValueToJsonb(v));
}

/* --- parsing --- */

/*
 * ParseStepKey reads the step's key, refuses keys it does not know and a
 * key used twice, and enters the key into keys.
 */
static void
ParseStepKey(JsonbContainer *obj, int index, WfStepDef *step, HTAB *keys)
{
	static const char *const step_keys[] = {"key", "kind", "job_type",
		"payload", "depends_on", "priority", "max_attempts",
		"timeout_seconds", "stage", "start_after_seconds", "seconds", "until",
	"event", "wait_timeout_seconds", "compensate", "back_to", "while",
	"max_iterations", "exhaustion_policy", NULL};
	JsonbValue *v;
	KeyEntry   *entry;
	bool		found;
	char		where[64];

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
}

/* the labels of execution_kind, in WfStepKind's order */
static const char *const kind_labels[] = {"JOB", "EXTERNAL", "SLEEP", "EVENT",
"REPEAT"};

/* WfStepKindLabel returns the execution_kind label of a kind. */
const char *
WfStepKindLabel(WfStepKind kind)
{
	return kind_labels[kind];
}

/* WfStepKindFromLabel reads an execution_kind label. */
WfStepKind
WfStepKindFromLabel(const char *label)
{
	for (int k = 0; k < lengthof(kind_labels); k++)
		if (strcmp(label, kind_labels[k]) == 0)
			return (WfStepKind) k;
	elog(ERROR, "unknown execution kind \"%s\"", label);
	return WF_KIND_JOB;			/* keep compiler quiet */
}

/*
 * ParseStepKind reads the step's kind: job (the default), external, sleep,
 * event or repeat.
 */
static void
ParseStepKind(JsonbContainer *obj, WfStepDef *step)
{
	static const char *const kinds[] = {"job", "external", "sleep", "event",
	"repeat"};
	JsonbValue *v;
	char	   *kind;

	step->kind = WF_KIND_JOB;
	v = GetKey(obj, "kind");
	if (v == NULL)
		return;
	if (v->type != jbvString)
		wf_invalid_definition("step \"%s\": kind must be \"job\", \"external\", \"sleep\", \"event\" or \"repeat\", not %s",
							  step->key, JsonTypeName(v));
	kind = StringValue(v);
	for (int k = 0; k < lengthof(kinds); k++)
		if (strcmp(kind, kinds[k]) == 0)
		{
			step->kind = (WfStepKind) k;
			return;
		}
	wf_invalid_definition("step \"%s\": kind must be \"job\", \"external\", \"sleep\", \"event\" or \"repeat\", not \"%s\"",
						  step->key, kind);
}

/*
 * CheckKindKeys refuses the keys of other kinds: the job options on a
 * sleep or event step, the timer keys on a step that has no timer.
 */
static void
CheckKindKeys(JsonbContainer *obj, const WfStepDef *step)
{
	static const char *const job_only[] = {"job_type", "payload", "priority",
	"max_attempts", "timeout_seconds", "stage", NULL};
	static const char *const names[] = {"a job", "an external", "a sleep",
	"an event", "a repeat"};
	const char *const *refused[4] = {NULL, NULL, NULL, NULL};
	static const char *const start_after[] = {"start_after_seconds", NULL};
	static const char *const sleep_keys[] = {"seconds", "until", NULL};
	static const char *const event_keys[] = {"event", "wait_timeout_seconds",
	NULL};
	static const char *const repeat_keys[] = {"back_to", "while",
	"max_iterations", "exhaustion_policy", NULL};

	switch (step->kind)
	{
		case WF_KIND_JOB:
			refused[0] = sleep_keys;
			refused[1] = event_keys;
			refused[3] = repeat_keys;
			break;
		case WF_KIND_EXTERNAL:
			refused[0] = sleep_keys;
			refused[1] = event_keys;
			refused[2] = start_after;
			refused[3] = repeat_keys;
			break;
		case WF_KIND_SLEEP:
			refused[0] = job_only;
			refused[1] = event_keys;
			refused[2] = start_after;
			refused[3] = repeat_keys;
			break;
		case WF_KIND_EVENT:
			refused[0] = job_only;
			refused[1] = sleep_keys;
			refused[2] = start_after;
			refused[3] = repeat_keys;
			break;
		case WF_KIND_REPEAT:
			refused[0] = job_only;
			refused[1] = sleep_keys;
			refused[2] = event_keys;
			refused[3] = start_after;
			break;
	}
	for (int r = 0; r < 4; r++)
		for (int i = 0; refused[r] != NULL && refused[r][i] != NULL; i++)
			if (GetKey(obj, refused[r][i]) != NULL)
				wf_invalid_definition("step \"%s\": %s step takes no \"%s\"",
									  step->key, names[step->kind],
									  refused[r][i]);
	/* only what a step did can be undone: a wait or a loop did nothing */
	if ((step->kind == WF_KIND_SLEEP || step->kind == WF_KIND_EVENT ||
		 step->kind == WF_KIND_REPEAT) &&
		GetKey(obj, "compensate") != NULL)
		wf_invalid_definition("step \"%s\": %s step takes no \"compensate\"",
							  step->key, names[step->kind]);
}

/*
 * ParseJobType reads the job_type, which a job step needs and an external
 * step must not have.
 */
static void
ParseJobType(JsonbContainer *obj, WfStepDef *step)
{
	JsonbValue *v;

	step->job_type = NULL;
	v = GetKey(obj, "job_type");
	if (step->kind == WF_KIND_EXTERNAL && v != NULL)
		wf_invalid_definition("step \"%s\": an external step has no job_type",
							  step->key);
	if (step->kind != WF_KIND_JOB)
		return;
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

/*
 * TimestampValue reads a JSON string as a timestamptz, as timestamptz's
 * input does (a value without a zone is in the session's TimeZone), but
 * refuses what it cannot read, and infinity, with the definition's error.
 */
static TimestampTz
TimestampValue(JsonbValue *v, const char *what, const char *where)
{
	char	   *str;
	char		workbuf[MAXDATELEN + MAXDATEFIELDS];
	char	   *field[MAXDATEFIELDS];
	int			ftype[MAXDATEFIELDS];
	int			nf;
	int			dtype;
	int			tz;
	struct pg_tm tt;
	fsec_t		fsec;
	TimestampTz result;
	int			dterr;

	if (v->type != jbvString)
		wf_invalid_definition("%s: %s must be a timestamp string, not %s",
							  where, what, JsonTypeName(v));
	str = StringValue(v);
	dterr = strlen(str) >= MAXDATELEN ? DTERR_BAD_FORMAT :
		ParseDateTime(str, workbuf, sizeof(workbuf), field, ftype,
					  MAXDATEFIELDS, &nf);
	if (dterr == 0)
		dterr = DecodeDateTime(field, ftype, nf, &dtype, &tt, &fsec, &tz);
	if (dterr != 0 || dtype != DTK_DATE ||
		tm2timestamp(&tt, fsec, &tz, &result) != 0 ||
		!IS_VALID_TIMESTAMP(result))
		wf_invalid_definition("%s: %s must be a finite timestamp with time zone, not \"%s\"",
							  where, what, str);
	return result;
}

/* ParseSleep reads a sleep step's seconds or until: exactly one. */
static void
ParseSleep(JsonbContainer *obj, WfStepDef *step)
{
	JsonbValue *seconds = GetKey(obj, "seconds");
	JsonbValue *until = GetKey(obj, "until");

	if ((seconds == NULL) == (until == NULL))
		wf_invalid_definition("step \"%s\": a sleep step needs exactly one of \"seconds\" and \"until\"",
							  step->key);
	if (seconds != NULL)
		step->sleep_seconds = IntValue(seconds, 0, WF_MAX_WAIT_SECONDS,
									   "seconds", step->key);
	else
	{
		step->sleep_until = TimestampValue(until, "until",
										   psprintf("step \"%s\"", step->key));
		step->has_sleep_until = true;
	}
}

/*
 * ParseEvent reads an event step's event name (its key by default) and
 * its optional wait_timeout_seconds.
 */
static void
ParseEvent(JsonbContainer *obj, WfStepDef *step)
{
	JsonbValue *v = GetKey(obj, "event");

	step->event_name = step->key;
	if (v != NULL)
	{
		if (v->type != jbvString || v->val.string.len == 0)
			wf_invalid_definition("step \"%s\": event must be a non-empty string",
								  step->key);
		if (v->val.string.len > wf_max_job_type_bytes)
			wf_invalid_definition("step \"%s\": event is %d bytes, more than workflow.max_job_type_bytes (%d)",
								  step->key, v->val.string.len,
								  wf_max_job_type_bytes);
		step->event_name = StringValue(v);
	}
	v = GetKey(obj, "wait_timeout_seconds");
	if (v != NULL)
		step->wait_timeout_seconds = IntValue(v, 1, WF_MAX_WAIT_SECONDS,
											  "wait_timeout_seconds",
											  step->key);
}

/*
 * JsonpathParses says whether text is a valid jsonpath; the parser's own
 * error is caught in a subtransaction, so that the definition's error is
 * the one raised.
 */
static bool
JsonpathParses(const char *text)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool parses = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		(void) DirectFunctionCall1(jsonpath_in, CStringGetDatum(text));
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		parses = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return parses;
}

/*
 * ParseRepeatStep reads a repeat step's loop: back_to (step keys, resolved
 * with the body by WfCheckRepeats), while (a jsonpath), max_iterations
 * (1 to workflow.max_repeat_iterations) and exhaustion_policy.
 */
static void
ParseRepeatStep(JsonbContainer *obj, WfStepDef *step)
{
	JsonbValue *v;
	JsonbContainer *arr;

	v = GetKey(obj, "back_to");
	if (v == NULL || !IsArray(v) || JsonContainerSize(v->val.binary.data) == 0)
		wf_invalid_definition("step \"%s\": a repeat step needs back_to, a non-empty array of step keys",
							  step->key);
	arr = v->val.binary.data;
	step->nback_to = JsonContainerSize(arr);
	step->back_to = palloc(sizeof(char *) * step->nback_to);
	for (int i = 0; i < step->nback_to; i++)
	{
		JsonbValue *k = getIthJsonbValueFromContainer(arr, i);

		if (k->type != jbvString)
			wf_invalid_definition("step \"%s\": back_to[%d] must be a step key, not %s",
								  step->key, i, JsonTypeName(k));
		step->back_to[i] = StringValue(k);
	}

	v = GetKey(obj, "while");
	if (v == NULL || v->type != jbvString)
		wf_invalid_definition("step \"%s\": a repeat step needs while, a jsonpath predicate",
							  step->key);
	step->repeat_while = StringValue(v);
	if (!JsonpathParses(step->repeat_while))
		wf_invalid_definition("step \"%s\": while is not a valid jsonpath: \"%s\"",
							  step->key, step->repeat_while);

	v = GetKey(obj, "max_iterations");
	if (v == NULL)
		wf_invalid_definition("step \"%s\": a repeat step needs max_iterations",
							  step->key);
	step->max_iterations = IntValue(v, 1, wf_max_repeat_iterations,
									"max_iterations", step->key);

	step->emit_outcome = false;
	v = GetKey(obj, "exhaustion_policy");
	if (v != NULL)
	{
		char	   *policy = v->type == jbvString ? StringValue(v) : NULL;

		if (policy != NULL && strcmp(policy, "emit_outcome") == 0)
			step->emit_outcome = true;
		else if (policy == NULL || strcmp(policy, "fail") != 0)
			wf_invalid_definition("step \"%s\": exhaustion_policy must be \"fail\" or \"emit_outcome\"",
								  step->key);
	}
}

/*
 * ParseStepOptions reads the step's payload, priority, max_attempts,
 * timeout_seconds, start_after_seconds and stage, with their defaults
 * (CheckKindKeys refused them on the kinds that have no job).
 */
static void
ParseStepOptions(JsonbContainer *obj, WfStepDef *step)
{
	JsonbValue *v;

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
	v = GetKey(obj, "start_after_seconds");
	if (v != NULL)
		step->start_after_seconds = IntValue(v, 0, WF_MAX_WAIT_SECONDS,
											 "start_after_seconds", step->key);
	step->stage = NULL;
	v = GetKey(obj, "stage");
	if (v != NULL && v->type != jbvNull)
	{
		if (v->type != jbvString)
			wf_invalid_definition("step \"%s\": stage must be a string, not %s",
								  step->key, JsonTypeName(v));
		step->stage = StringValue(v);
	}
}

/*
 * ParseCompensate reads a job or external step's compensate object: the
 * job that undoes the step, with a job step's fields (job_type required).
 * It is kept as given; the defaults apply when the job is made.
 */
static void
ParseCompensate(JsonbContainer *obj, WfStepDef *step)
{
	static const char *const keys[] = {"job_type", "payload", "priority",
	"max_attempts", "timeout_seconds", "stage", NULL};
	JsonbValue *v = GetKey(obj, "compensate");
	JsonbContainer *c;
	char		where[96];

	step->compensate_job_type = NULL;
	if (v == NULL || v->type == jbvNull)
		return;
	if (!IsObject(v))
		wf_invalid_definition("step \"%s\": compensate must be an object, not %s",
							  step->key, JsonTypeName(v));
	c = v->val.binary.data;
	snprintf(where, sizeof(where), "step \"%.40s\": compensate", step->key);
	CheckKeys(c, keys, where);

	v = GetKey(c, "job_type");
	if (v == NULL || v->type != jbvString || v->val.string.len == 0)
		wf_invalid_definition("step \"%s\": compensate needs a job_type, a non-empty string",
							  step->key);
	if (v->val.string.len > wf_max_job_type_bytes)
		wf_invalid_definition("step \"%s\": compensate.job_type is %d bytes, more than workflow.max_job_type_bytes (%d)",
							  step->key, v->val.string.len,
							  wf_max_job_type_bytes);
	step->compensate_job_type = StringValue(v);
	if ((v = GetKey(c, "payload")) != NULL && v->type == jbvNull)
		wf_invalid_definition("step \"%s\": compensate.payload must not be null",
							  step->key);
	if ((v = GetKey(c, "priority")) != NULL)
		IntValue(v, PG_INT32_MIN, PG_INT32_MAX, "compensate.priority", step->key);
	if ((v = GetKey(c, "max_attempts")) != NULL)
		IntValue(v, 1, PG_INT32_MAX, "compensate.max_attempts", step->key);
	if ((v = GetKey(c, "timeout_seconds")) != NULL)
		IntValue(v, 1, PG_INT32_MAX, "compensate.timeout_seconds", step->key);
	if ((v = GetKey(c, "stage")) != NULL && v->type != jbvNull &&
		v->type != jbvString)
		wf_invalid_definition("step \"%s\": compensate.stage must be a string, not %s",
							  step->key, JsonTypeName(v));
	step->compensate = JsonbValueDatum(GetKey(obj, "compensate"));
	if (VARSIZE(DatumGetPointer(step->compensate)) > (Size) wf_max_payload_bytes)
		wf_invalid_definition("step \"%s\": compensate is larger than workflow.max_payload_bytes (%d)",
							  step->key, wf_max_payload_bytes);
}

/*
 * ParseDependency reads element i of a step's depends_on, a step key or
 * {"step": key, "release": mode}, into edge, and returns the key it names.
 */
static char *
ParseDependency(JsonbValue *dv, int i, const WfStepDef *step, WfEdgeDef *edge)
{
	static const char *const dep_keys[] = {"step", "release", NULL};
	JsonbValue *sk;
	JsonbValue *rv;
	char		dwhere[96];
	char	   *dep_key;

	edge->on_terminal = false;
	if (dv->type == jbvString)
		return StringValue(dv);
	if (!IsObject(dv))
		wf_invalid_definition("step \"%s\": depends_on[%d] must be a step key or an object, not %s",
							  step->key, i, JsonTypeName(dv));

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
	return dep_key;
}

/*
 * ParseDependsOn appends the step's dependencies to def's edges, growing
 * them as needed (*max_edges_seen is their allocated length).  The keys
 * are resolved once every step is known.
 */
static void
ParseDependsOn(JsonbContainer *obj, int index, WfStepDef *step,
			   WfDefinition *def, int *max_edges_seen)
{
	JsonbValue *v;
	JsonbContainer *arr;
	int			n;

	step->first_edge = def->nedges;
	step->nedges = 0;
	v = GetKey(obj, "depends_on");
	if (v == NULL)
		return;

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
		def->edges = repalloc(def->edges, sizeof(WfEdgeDef) * *max_edges_seen);
		def->dep_keys = repalloc(def->dep_keys, sizeof(char *) * *max_edges_seen);
	}
	for (int i = 0; i < n; i++)
	{
		JsonbValue *dv = getIthJsonbValueFromContainer(arr, i);
		WfEdgeDef  *edge = &def->edges[def->nedges];

		edge->dependent = index;
		def->dep_keys[def->nedges] = ParseDependency(dv, i, step, edge);
		def->nedges++;
		step->nedges++;
	}
}

/* ParseStep reads steps[index] into step, checking every field. */
static void
ParseStep(JsonbValue *sv, int index, WfStepDef *step, WfDefinition *def,
		  int *max_edges_seen, HTAB *keys)
{
	JsonbContainer *obj;

	if (!IsObject(sv))
		wf_invalid_definition("steps[%d] must be an object, not %s", index,
							  JsonTypeName(sv));
	obj = sv->val.binary.data;

	ParseStepKey(obj, index, step, keys);
	ParseStepKind(obj, step);
	ParseJobType(obj, step);
	CheckKindKeys(obj, step);
	step->sleep_seconds = -1;
	step->wait_timeout_seconds = -1;
	step->start_after_seconds = -1;
	step->max_iterations = -1;
	step->repeat_of = -1;
	if (step->kind == WF_KIND_SLEEP)
		ParseSleep(obj, step);
	else if (step->kind == WF_KIND_EVENT)
		ParseEvent(obj, step);
	else if (step->kind == WF_KIND_REPEAT)
		ParseRepeatStep(obj, step);
	ParseStepOptions(obj, step);
	ParseCompensate(obj, step);
	ParseDependsOn(obj, index, step, def, max_edges_seen);
}

/*
 * ParseTopLevel checks that the definition is an object of known keys,
 * reads its name and result_step, and returns its steps array, whose
 * length it checks against workflow.max_steps.
 */
static JsonbContainer *
ParseTopLevel(JsonbContainer *root, WfDefinition *def)
{
	static const char *const top_keys[] = {"name", "result_step", "steps",
	"compensate_on", "limits", NULL};
	JsonbValue *v;
	JsonbContainer *steps;

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

	v = GetKey(root, "compensate_on");
	if (v != NULL && v->type != jbvNull)
	{
		if (v->type != jbvString || strcmp(StringValue(v), "failure") != 0)
			wf_invalid_definition("compensate_on must be \"failure\"");
		def->compensate_on_failure = true;
	}

	def->limits.retry_cap = -1;
	def->limits.deadline_seconds = -1;
	v = GetKey(root, "limits");
	if (v != NULL && v->type != jbvNull)
		ParseLimits(v, &def->limits);

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
	return steps;
}

/*
 * LimitValue reads limits.key, an integer of at least min; 0 when it is
 * absent or null.
 */
static int32
LimitValue(JsonbContainer *limits, const char *key, int32 min)
{
	JsonbValue *v = GetKey(limits, key);

	if (v == NULL || v->type == jbvNull)
		return 0;
	return IntValue(v, min, PG_INT32_MAX, key, NULL);
}

/*
 * ParseLimits reads the definition's "limits", checked whole: known keys,
 * each in its range, at most one deadline, and concurrency_cap within
 * node_execution_cap.
 */
static void
ParseLimits(JsonbValue *v, WfLimits *limits)
{
	static const char *const limit_keys[] = {"deadline_at",
		"deadline_seconds", "node_execution_cap", "concurrency_cap",
	"cycle_cap", "retry_cap", NULL};
	JsonbContainer *obj;
	JsonbValue *at;
	JsonbValue *seconds;

	if (!IsObject(v))
		wf_invalid_definition("limits must be an object, not %s",
							  JsonTypeName(v));
	obj = v->val.binary.data;
	CheckKeys(obj, limit_keys, "limits");
	at = GetKey(obj, "deadline_at");
	seconds = GetKey(obj, "deadline_seconds");
	if (at != NULL && at->type == jbvNull)
		at = NULL;
	if (seconds != NULL && seconds->type == jbvNull)
		seconds = NULL;
	if (at != NULL && seconds != NULL)
		wf_invalid_definition("limits: give deadline_at or deadline_seconds, not both");
	if (at != NULL)
	{
		limits->has_deadline_at = true;
		limits->deadline_at = TimestampValue(at, "deadline_at", "limits");
	}
	if (seconds != NULL)
	{
		limits->deadline_seconds = LimitValue(obj, "deadline_seconds", 0);
		if (limits->deadline_seconds > WF_MAX_WAIT_SECONDS)
			wf_invalid_definition("limits.deadline_seconds must be an integer between 0 and %d, not %d",
								  WF_MAX_WAIT_SECONDS, limits->deadline_seconds);
	}
	limits->node_execution_cap = LimitValue(obj, "node_execution_cap", 1);
	limits->concurrency_cap = LimitValue(obj, "concurrency_cap", 1);
	limits->cycle_cap = LimitValue(obj, "cycle_cap", 1);
	if (GetKey(obj, "retry_cap") != NULL &&
		GetKey(obj, "retry_cap")->type != jbvNull)
		limits->retry_cap = LimitValue(obj, "retry_cap", 0);
	if (limits->node_execution_cap > 0 && limits->concurrency_cap > 0 &&
		limits->concurrency_cap > limits->node_execution_cap)
		wf_invalid_definition("limits.concurrency_cap (%d) must not be above limits.node_execution_cap (%d)",
							  limits->concurrency_cap,
							  limits->node_execution_cap);
}

/*
 * ApplyLimits applies the run's limits to its steps: retry_cap lowers each
 * max_attempts to retry_cap + 1; under a cap every job step is capped (the
 * cascade parks it until there is room) and the run keeps its counters on
 * its row, where admission reads them.
 */
static void
ApplyLimits(WfDefinition *def)
{
	bool		capped = WF_LIMITS_CAPPED(&def->limits);

	if (capped)
		def->counter_shards = 0;
	for (int i = 0; i < def->nsteps; i++)
	{
		WfStepDef  *step = &def->steps[i];

		if (def->limits.retry_cap >= 0 &&
			step->max_attempts > (int64) def->limits.retry_cap + 1)
			step->max_attempts = def->limits.retry_cap + 1;
		step->capped = capped && step->kind == WF_KIND_JOB;
		if (capped)
			step->counter_shard = 0;
	}
}

/* ParseSteps reads every step, entering its key into keys. */
static void
ParseSteps(JsonbContainer *steps, WfDefinition *def, HTAB *keys)
{
	JsonbIterator *it = JsonbIteratorInit(steps);
	JsonbValue	sv;
	JsonbIteratorToken tok;
	int			index = 0;
	int			max_edges_seen = 64;

	def->steps = palloc0(sizeof(WfStepDef) * def->nsteps);
	def->edges = palloc(sizeof(WfEdgeDef) * max_edges_seen);
	def->dep_keys = palloc(sizeof(char *) * max_edges_seen);
	while ((tok = JsonbIteratorNext(&it, &sv, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		ParseStep(&sv, index, &def->steps[index], def, &max_edges_seen,
				  keys);
		index++;
	}
}

/* WfStepIndex returns the index of the step of a key, or -1. */
int
WfStepIndex(HTAB *keys, const char *key)
{
	KeyEntry   *entry = NULL;

	if (strlen(key) < sizeof(entry->key))
		entry = hash_search(keys, key, HASH_FIND, NULL);
	return entry == NULL ? -1 : entry->index;
}

/* StepKeyHash creates the hash of step keys to step indexes. */
static HTAB *
StepKeyHash(int nsteps)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(((KeyEntry *) NULL)->key);
	ctl.entrysize = sizeof(KeyEntry);
	ctl.hcxt = CurrentMemoryContext;
	return hash_create("workflow step keys", nsteps, &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/* CheckResultStep refuses a result_step that names no step. */
static void
CheckResultStep(WfDefinition *def, HTAB *keys)
{
	bool		found;

	if (def->result_step == NULL)
		return;
	if (strlen(def->result_step) >= sizeof(((KeyEntry *) NULL)->key))
		found = false;
	else
		hash_search(keys, def->result_step, HASH_FIND, &found);
	if (!found)
		wf_invalid_definition("result_step \"%s\" is not a step",
							  def->result_step);
}

/*
 * WfParseDefinition checks a whole definition and reads it into def:
 * its shape, every step, the dependencies (known steps, no self-edge or
 * duplicate, no cycle), the result step, and the counter shards of the
 * run.  It raises workflow.invalid_definition for the first problem.
 */
void
WfParseDefinition(Jsonb *definition, WfDefinition *def)
{
	JsonbContainer *steps;
	HTAB	   *keys;

	memset(def, 0, sizeof(WfDefinition));
	steps = ParseTopLevel(&definition->root, def);
	keys = StepKeyHash(def->nsteps);
	ParseSteps(steps, def, keys);
	ResolveDependencies(def, keys);
	CheckResultStep(def, keys);
	CheckAcyclic(def);
	WfCheckRepeats(def, keys);
	ApplyLimits(def);
	hash_destroy(keys);
}

/*
 * ResolveDependencies turns prerequisite keys into step indexes and
 * refuses unknown steps, self-edges and duplicate edges.
 */
static void
ResolveDependencies(WfDefinition *def, HTAB *keys)
{
	int		   *last_seen = palloc(sizeof(int) * def->nsteps);

	/* last_seen[p] == dependent + 1 when p was already named by it */
	memset(last_seen, 0, sizeof(int) * def->nsteps);
	for (int s = 0; s < def->nsteps; s++)
	{
		WfStepDef  *step = &def->steps[s];

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
 * OutgoingEdges counts each step's prerequisites into indegree and lists
 * each step's dependents: those of step s are out_edges[out_start[s] ..
 * out_start[s + 1] - 1].
 */
static void
OutgoingEdges(const WfDefinition *def, int *indegree, int *out_start,
			  int *out_edges)
{
	int			n = def->nsteps;
	int		   *fill = palloc(sizeof(int) * n);

	for (int e = 0; e < def->nedges; e++)
	{
		indegree[def->edges[e].dependent]++;
		out_start[def->edges[e].prerequisite + 1]++;
	}
	for (int i = 0; i < n; i++)
		out_start[i + 1] += out_start[i];
	memcpy(fill, out_start, sizeof(int) * n);
	for (int e = 0; e < def->nedges; e++)
		out_edges[fill[def->edges[e].prerequisite]++] = def->edges[e].dependent;
	pfree(fill);
}

/*
 * TopologicalOrder runs Kahn's algorithm: order receives the steps it can
 * order, each after its prerequisites, and depth each step's level (its
 * longest path from a root).  Returns how many steps it ordered; steps on
 * or behind a cycle keep a non-zero indegree.
 */
static int
TopologicalOrder(int n, int *indegree, const int *out_start,
				 const int *out_edges, int *order, int *depth)
{
	int			head = 0;
	int			tail = 0;

	for (int i = 0; i < n; i++)
		if (indegree[i] == 0)
			order[tail++] = i;
	while (head < tail)
	{
		int			s = order[head++];

		for (int k = out_start[s]; k < out_start[s + 1]; k++)
		{
			if (depth[out_edges[k]] < depth[s] + 1)
				depth[out_edges[k]] = depth[s] + 1;
			if (--indegree[out_edges[k]] == 0)
				order[tail++] = out_edges[k];
		}
	}
	return tail;
}

/*
 * StepOnCycle walks back from a step Kahn's algorithm left, through
 * prerequisites it left too, until a step repeats: that step is on a
 * cycle.
 */
static int
StepOnCycle(const WfDefinition *def, const int *indegree)
{
	bool	   *visited = palloc0(sizeof(bool) * def->nsteps);
	int			s = 0;

	while (indegree[s] == 0)
		s++;
	/* each remaining step has a remaining prerequisite */
	while (!visited[s])
	{
		const WfStepDef *step = &def->steps[s];

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
	return s;
}

/*
 * CheckAcyclic refuses dependencies that form a cycle, naming a step on
 * it.  On the way it assigns counter shards, from the levels it found.
 */
static void
CheckAcyclic(WfDefinition *def)
{
	int			n = def->nsteps;
	int		   *indegree = palloc0(sizeof(int) * n);
	int		   *out_start = palloc0(sizeof(int) * (n + 1));
	int		   *out_edges = palloc(sizeof(int) * Max(def->nedges, 1));
	int		   *order = palloc(sizeof(int) * n);
	int		   *depth = palloc0(sizeof(int) * n);

	OutgoingEdges(def, indegree, out_start, out_edges);
	if (TopologicalOrder(n, indegree, out_start, out_edges, order, depth) < n)
		wf_invalid_definition("the dependencies form a cycle through step \"%s\"",
							  def->steps[StepOnCycle(def, indegree)].key);
	AssignCounterShards(def, order, depth);
	pfree(depth);
	pfree(indegree);
	pfree(out_start);
	pfree(out_edges);
	pfree(order);
}

/*
 * AssignCounterShards spreads the steps of each level (steps at the same
 * depth, which can run at the same time) round-robin over the run's
 * counter shards, so concurrent completions rarely share a shard, while a
 * chain stays in one shard and never moves the run row.  Runs narrower
 * than workflow.counter_shard_min_width keep their counters on the run row.
 */
static void
AssignCounterShards(WfDefinition *def, const int *order, const int *depth)
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
