/*-------------------------------------------------------------------------
 *
 * registry.c
 *	  The workflow registry: register_workflow, unregister_workflow, the
 *	  signature of a definition's contract, and the active version that
 *	  start_workflow (run.c) starts.
 *
 * A registered version is a row of workflow.workflow_definitions: a name,
 * a version, a definition validated whole (definition.c) and its
 * signature, the lower-case hex sha256 of the definition's canonical
 * contract (CanonicalContract).  The same version registered again with
 * the same signature changes nothing but, asked to, which version is
 * active; with another signature it raises workflow.definition_conflict.
 * At most one version of a name is active: activating one deactivates the
 * other first (a unique partial index holds this).
 *
 * Locks: register_workflow and unregister_workflow of one name take the
 * name's lock (an advisory lock of the extension's own class, locks.c)
 * for the rest of the transaction, then the registry rows they write.
 * WfReadActiveVersion takes no lock: a version unregistered or replaced
 * while a run of it starts is the case of any later change to the
 * registry, which the pinned run's releases check.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/cryptohash.h"
#include "common/sha2.h"
#include "utils/builtins.h"
#include "utils/json.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_register_workflow);
PG_FUNCTION_INFO_V1(workflow_unregister_workflow);

static Datum RegisterWorkflow(PG_FUNCTION_ARGS);
static Datum UnregisterWorkflow(PG_FUNCTION_ARGS);

/* an edge of the contract, by its steps' keys */
typedef struct ContractEdge
{
	const char *prerequisite;
	const char *dependent;
	bool		on_terminal;
} ContractEdge;

static text *ArgName(FunctionCallInfo fcinfo, int n, const char *what);
static int	CompareSteps(const void *a, const void *b);
static int	CompareEdges(const void *a, const void *b);
static void AppendContractStep(StringInfo buf, const WfStepDef *step);
static void AppendContractSteps(StringInfo buf, const WfDefinition *def);
static void AppendContractEdges(StringInfo buf, const WfDefinition *def);
static char *CanonicalContract(const WfDefinition *def);
static char *Sha256Hex(const char *data, size_t len);
static bool ReadVersion(text *name, text *version, char **signature,
						bool *active);
static void DeactivateOthers(text *name, text *version);
static void ActivateVersion(text *name, text *version);
static void InsertVersion(text *name, text *version, Jsonb *definition,
						  const char *signature, bool active);

/* ArgName returns a name or version argument: not null, 1 to max bytes. */
static text *
ArgName(FunctionCallInfo fcinfo, int n, const char *what)
{
	text	   *arg;
	int			len;

	if (PG_ARGISNULL(n))
		wf_invalid_argument("%s must not be null", what);
	arg = PG_GETARG_TEXT_PP(n);
	len = VARSIZE_ANY_EXHDR(arg);
	if (len == 0)
		wf_invalid_argument("%s must not be empty", what);
	if (len > wf_max_job_type_bytes)
		wf_invalid_argument("%s is %d bytes, more than workflow.max_job_type_bytes (%d)",
							what, len, wf_max_job_type_bytes);
	return arg;
}

/* --- the canonical contract --- */

/* CompareSteps orders steps by key, byte by byte. */
static int
CompareSteps(const void *a, const void *b)
{
	const WfStepDef *sa = *(const WfStepDef *const *) a;
	const WfStepDef *sb = *(const WfStepDef *const *) b;

	return strcmp(sa->key, sb->key);
}

/* CompareEdges orders edges by prerequisite key, then dependent key. */
static int
CompareEdges(const void *a, const void *b)
{
	const ContractEdge *ea = (const ContractEdge *) a;
	const ContractEdge *eb = (const ContractEdge *) b;
	int			c = strcmp(ea->prerequisite, eb->prerequisite);

	return c != 0 ? c : strcmp(ea->dependent, eb->dependent);
}

/*
 * AppendContractStep writes one step of the contract: key and kind, then
 * the fields its kind has.  A field that only some steps have comes after
 * these and only when present, so that adding one leaves the signature of
 * every definition without it as it was.
 */
static void
AppendContractStep(StringInfo buf, const WfStepDef *step)
{
	/* the kinds as a definition spells them, in WfStepKind's order */
	static const char *const kinds[] = {"job", "external", "sleep", "event",
	"repeat"};

	appendStringInfoString(buf, "{\"key\":");
	escape_json(buf, step->key);
	appendStringInfoString(buf, ",\"kind\":");
	escape_json(buf, kinds[step->kind]);
	if (step->kind == WF_KIND_JOB)
	{
		appendStringInfoString(buf, ",\"job_type\":");
		escape_json(buf, step->job_type);
	}
	if (step->kind == WF_KIND_EVENT)
	{
		appendStringInfoString(buf, ",\"event\":");
		escape_json(buf, step->event_name);
	}
	if (step->compensate_job_type != NULL)
	{
		appendStringInfoString(buf, ",\"compensate\":");
		escape_json(buf, step->compensate_job_type);
	}
	appendStringInfoChar(buf, '}');
}

/* AppendContractSteps writes the steps of the contract, sorted by key. */
static void
AppendContractSteps(StringInfo buf, const WfDefinition *def)
{
	const WfStepDef **sorted = palloc(sizeof(WfStepDef *) * def->nsteps);

	for (int i = 0; i < def->nsteps; i++)
		sorted[i] = &def->steps[i];
	qsort(sorted, def->nsteps, sizeof(WfStepDef *), CompareSteps);
	appendStringInfoString(buf, "\"steps\":[");
	for (int i = 0; i < def->nsteps; i++)
	{
		if (i > 0)
			appendStringInfoChar(buf, ',');
		AppendContractStep(buf, sorted[i]);
	}
	appendStringInfoChar(buf, ']');
	pfree(sorted);
}

/*
 * AppendContractEdges writes the edges of the contract, sorted by their
 * prerequisite's key, then their dependent's, with their release modes.
 */
static void
AppendContractEdges(StringInfo buf, const WfDefinition *def)
{
	ContractEdge *edges = palloc(sizeof(ContractEdge) * Max(def->nedges, 1));

	for (int e = 0; e < def->nedges; e++)
	{
		edges[e].prerequisite = def->steps[def->edges[e].prerequisite].key;
		edges[e].dependent = def->steps[def->edges[e].dependent].key;
		edges[e].on_terminal = def->edges[e].on_terminal;
	}
	qsort(edges, def->nedges, sizeof(ContractEdge), CompareEdges);
	appendStringInfoString(buf, "\"edges\":[");
	for (int e = 0; e < def->nedges; e++)
	{
		if (e > 0)
			appendStringInfoChar(buf, ',');
		appendStringInfoString(buf, "{\"prerequisite\":");
		escape_json(buf, edges[e].prerequisite);
		appendStringInfoString(buf, ",\"dependent\":");
		escape_json(buf, edges[e].dependent);
		appendStringInfo(buf, ",\"release\":\"%s\"}",
						 edges[e].on_terminal ? "on_terminal" : "on_success");
	}
	appendStringInfoChar(buf, ']');
	pfree(edges);
}

/*
 * CanonicalContract returns the canonical text of a parsed definition's
 * contract (docs/reference.md, register_workflow): its steps, its edges
 * and its result step, without white space; payloads, tuning, stages,
 * waits and the definition's name are left out.
 */
static char *
CanonicalContract(const WfDefinition *def)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	AppendContractSteps(&buf, def);
	appendStringInfoChar(&buf, ',');
	AppendContractEdges(&buf, def);
	appendStringInfoString(&buf, ",\"result_step\":");
	if (def->result_step != NULL)
		escape_json(&buf, def->result_step);
	else
		appendStringInfoString(&buf, "null");
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/* Sha256Hex returns the lower-case hex sha256 of data. */
static char *
Sha256Hex(const char *data, size_t len)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char	   *hex = palloc(PG_SHA256_DIGEST_LENGTH * 2 + 1);

	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "could not compute a sha256 digest: %s",
			 pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
	hex_encode((const char *) digest, sizeof(digest), hex);
	hex[PG_SHA256_DIGEST_LENGTH * 2] = '\0';
	return hex;
}

/* --- the registry rows --- */

/*
 * ReadVersion reads a registered version's signature and whether it is
 * active; returns whether it is registered.
 */
static bool
ReadVersion(text *name, text *version, char **signature, bool *active)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT d.signature, d.active FROM workflow.workflow_definitions d"
		" WHERE d.name" OP("=") "$1 AND d.version" OP("=") "$2";
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];

	values[0] = PointerGetDatum(name);
	values[1] = PointerGetDatum(version);
	WfExecute(&plan, sql, 2, types, values, NULL, false, 1);
	if (SPI_processed != 1)
		return false;
	*signature = WfResultText(0, 1);
	*active = WfResultBool(0, 2);
	return true;
}

/* DeactivateOthers deactivates the name's active version, unless it is version. */
static void
DeactivateOthers(text *name, text *version)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_definitions d SET active = false,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE d.name" OP("=") "$1 AND d.active"
		" AND d.version" OP("<>") "$2";
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];

	values[0] = PointerGetDatum(name);
	values[1] = PointerGetDatum(version);
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
}

/* ActivateVersion makes a registered version the name's active one. */
static void
ActivateVersion(text *name, text *version)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"UPDATE workflow.workflow_definitions d SET active = true,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE d.name" OP("=") "$1 AND d.version" OP("=") "$2"
		" AND NOT d.active";
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];

	DeactivateOthers(name, version);
	values[0] = PointerGetDatum(name);
	values[1] = PointerGetDatum(version);
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
}

/* InsertVersion writes a new version, active or not. */
static void
InsertVersion(text *name, text *version, Jsonb *definition,
			  const char *signature, bool active)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"INSERT INTO workflow.workflow_definitions"
		" (name, version, definition, signature, active)"
		" VALUES ($1, $2, $3, $4, $5)";
	static const Oid types[5] = {TEXTOID, TEXTOID, JSONBOID, TEXTOID, BOOLOID};
	Datum		values[5];

	if (active)
		DeactivateOthers(name, version);
	values[0] = PointerGetDatum(name);
	values[1] = PointerGetDatum(version);
	values[2] = JsonbPGetDatum(definition);
	values[3] = CStringGetTextDatum(signature);
	values[4] = BoolGetDatum(active);
	WfExecute(&plan, sql, 5, types, values, NULL, false, 0);
}

/*
 * WfReadActiveVersion reads the active version of a registered workflow;
 * returns false when the name has none.
 * The caller is connected to SPI; what it returns lives until SPI_finish.
 */
bool
WfReadActiveVersion(text *name, WfActiveVersion *active)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT d.definition, d.version, d.signature"
		" FROM workflow.workflow_definitions d"
		" WHERE d.name" OP("=") "$1 AND d.active";
	static const Oid types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;

	values[0] = PointerGetDatum(name);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 1);
	if (SPI_processed != 1)
		return false;
	active->definition = (Jsonb *)
		PG_DETOAST_DATUM_COPY(WfResultDatum(0, 1, &isnull));
	active->version = WfResultText(0, 2);
	active->signature = WfResultText(0, 3);
	return true;
}

/* --- the SQL-callable functions --- */

/*
 * RegisterWorkflow registers a version of a named workflow, or finds it
 * registered with the same signature, and activates it when asked to.
 * Returns the signature.
 */
static Datum
RegisterWorkflow(PG_FUNCTION_ARGS)
{
	text	   *name;
	text	   *version;
	Jsonb	   *definition;
	WfDefinition def;
	bool		activate;
	char	   *signature;
	char	   *contract;
	char	   *stored;
	bool		active;

	WfRequireReadCommitted();
	name = ArgName(fcinfo, 0, "name");
	version = ArgName(fcinfo, 1, "version");
	if (PG_ARGISNULL(2))
		wf_invalid_definition("definition must not be null");
	definition = PG_GETARG_JSONB_P(2);
	WfParseDefinition(definition, &def);
	if (PG_ARGISNULL(3))
		wf_invalid_argument("activate must not be null");
	activate = PG_GETARG_BOOL(3);
	contract = CanonicalContract(&def);
	signature = Sha256Hex(contract, strlen(contract));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	WfLockWorkflowName(name);
	if (!ReadVersion(name, version, &stored, &active))
		InsertVersion(name, version, definition, signature, activate);
	else if (strcmp(stored, signature) != 0)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_CONFLICT),
				 errmsg(WF_DEFINITION_CONFLICT ": version \"%s\" of workflow \"%s\" is registered with another contract",
						text_to_cstring(version), text_to_cstring(name)),
				 errdetail("Its signature is %s; this definition's is %s.",
						   stored, signature),
				 errhint("Register the changed definition as a new version.")));
	else if (activate && !active)
		ActivateVersion(name, version);
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(signature));
}

/* UnregisterWorkflow removes a registered version. */
static Datum
UnregisterWorkflow(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"DELETE FROM workflow.workflow_definitions d"
		" WHERE d.name" OP("=") "$1 AND d.version" OP("=") "$2";
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];

	WfRequireReadCommitted();
	values[0] = PointerGetDatum(ArgName(fcinfo, 0, "name"));
	values[1] = PointerGetDatum(ArgName(fcinfo, 1, "version"));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	WfLockWorkflowName(DatumGetTextPP(values[0]));
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
	if (SPI_processed == 0)
		wf_error(WF_SQLSTATE_NOT_FOUND, WF_WORKFLOW_NOT_FOUND,
				 "workflow \"%s\" has no version \"%s\"",
				 TextDatumGetCString(values[0]),
				 TextDatumGetCString(values[1]));
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * The SQL-callable entry points: each body runs as the extension's owner
 * (privilege.c).
 */
WF_OWNER_ENTRY(workflow_register_workflow, RegisterWorkflow)
WF_OWNER_ENTRY(workflow_unregister_workflow, UnregisterWorkflow)
