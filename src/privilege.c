/*-------------------------------------------------------------------------
 *
 * privilege.c
 *	  Who calls, and with whose rights the engine runs.
 *
 * Every SQL-callable function of the engine runs its body through
 * WfCallAsOwner, which checks, once per backend, that the SQL objects are
 * of the version this library was built for; finds out whether the caller
 * is a tenant role and, if so, its organizations; and switches the current
 * user to the extension's owner, the way ri_triggers.c does, so that a
 * caller needs only EXECUTE and the engine's statements run with the
 * owner's rights.  On the way out, an error included, it puts back the
 * user and the confinement of the call it was nested in: a caught error in
 * a nested call must not leave the outer call unconfined.
 *
 * A tenant role is a role that is a member of a role granted an
 * organization in workflow.organization_members (superusers and the
 * extension's owner never are).  Its organizations are cached per backend
 * and forgotten when organization_members changes (its statement trigger
 * sends a relcache invalidation) or when role memberships change.
 *
 * Locks: AccessShareLock on pg_extension while the version is read; reads
 * organization_members as the owner.  No row locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_my_organizations);
PG_FUNCTION_INFO_V1(workflow_grant_organization);
PG_FUNCTION_INFO_V1(workflow_revoke_organization);
PG_FUNCTION_INFO_V1(workflow_organization_members_changed);

/* what pg_extension said, valid until an invalidation of job_queue */
static bool extension_checked = false;
static Oid	extension_owner = InvalidOid;
static Oid	job_queue_relid = InvalidOid;
static Oid	members_relid = InvalidOid;

/* the organizations of one role, valid until members or roles change */
static bool tenant_valid = false;
static Oid	tenant_role = InvalidOid;
static int	tenant_norgs = 0;	/* 0: not a tenant role */
static pg_uuid_t *tenant_orgs = NULL;

/* the confinement of the call in progress */
static Oid	call_caller = InvalidOid;
static int	call_norgs = 0;
static pg_uuid_t *call_orgs = NULL;

/* what an engine call puts back when it ends */
typedef struct WfCall
{
	Oid			saved_userid;
	int			saved_sec_context;
	Oid			saved_caller;
	int			saved_norgs;
	pg_uuid_t  *saved_orgs;
} WfCall;

static void CheckExtension(void);
static void LoadTenant(Oid role);
static void InvalidateRelation(Datum arg, Oid relid);
static void InvalidateRoles(Datum arg, int cacheid, uint32 hashvalue);
static bool InOwnScript(void);
static bool IsUnscopedRole(Oid role);
static void ConfineCall(Oid caller);
static bool IsExtensionRole(Oid role);
static void MembershipArgs(FunctionCallInfo fcinfo, Datum *values);
static bool ChangeMembership(FunctionCallInfo fcinfo, SPIPlanPtr *plan,
							 const char *sql);
static void SaveCall(WfCall *call);
static void EnterCall(WfCall *call);
static void EndCall(const WfCall *call);
static Datum MyOrganizations(PG_FUNCTION_ARGS);
static Datum GrantOrganization(PG_FUNCTION_ARGS);
static Datum RevokeOrganization(PG_FUNCTION_ARGS);

/* WfPrivilegeInit registers the cache invalidation callbacks. */
void
WfPrivilegeInit(void)
{
	CacheRegisterRelcacheCallback(InvalidateRelation, (Datum) 0);
	CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, InvalidateRoles, (Datum) 0);
	CacheRegisterSyscacheCallback(AUTHOID, InvalidateRoles, (Datum) 0);
}

/*
 * InvalidateRelation forgets the version check after a change of job_queue,
 * and the cached organizations after a change of organization_members.
 */
static void
InvalidateRelation(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == job_queue_relid)
		extension_checked = false;
	if (relid == InvalidOid || relid == job_queue_relid ||
		relid == members_relid)
		tenant_valid = false;
}

/* InvalidateRoles forgets the cached organizations after a role change. */
static void
InvalidateRoles(Datum arg, int cacheid, uint32 hashvalue)
{
	tenant_valid = false;
}

/* Whether the running script is this extension's own CREATE or UPDATE. */
static bool
InOwnScript(void)
{
	return creating_extension &&
		CurrentExtensionObject == get_extension_oid("workflow", true);
}

/*
 * CheckExtension reads the installed version and the owner.  A mismatch
 * is not cached, so that ALTER EXTENSION ... UPDATE in this very backend
 * is seen by the next call.
 */
static void
CheckExtension(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		isnull;
	Datum		d;
	char	   *version;
	Oid			owner;
	Oid			nsp;

	if (extension_checked)
		return;
	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("workflow"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_WRONG_STATE),
				 errmsg(WF_VERSION_MISMATCH ": extension \"workflow\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION workflow.")));
	owner = ((Form_pg_extension) GETSTRUCT(tup))->extowner;
	d = heap_getattr(tup, Anum_pg_extension_extversion,
					 RelationGetDescr(rel), &isnull);
	version = isnull ? pstrdup("?") : TextDatumGetCString(d);
	systable_endscan(scan);
	table_close(rel, AccessShareLock);

	if (strcmp(version, WF_SQL_VERSION) != 0)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_WRONG_STATE),
				 errmsg(WF_VERSION_MISMATCH ": the workflow library is version %s, but the extension's SQL objects in this database are version %s",
						WF_SQL_VERSION, version),
				 errdetail("The library was updated without updating the extension."),
				 errhint("Run ALTER EXTENSION workflow UPDATE.")));

	nsp = get_namespace_oid("workflow", false);
	job_queue_relid = get_relname_relid("job_queue", nsp);
	members_relid = get_relname_relid("organization_members", nsp);
	extension_owner = owner;
	extension_checked = true;
}

/*
 * WfCheckVersion refuses to go on with SQL objects of another version.
 * The extension's own scripts run before their version is recorded, and
 * pass.
 */
void
WfCheckVersion(void)
{
	if (extension_checked || InOwnScript())
		return;
	CheckExtension();
}

/* Whether a role is never confined: a superuser or the owner. */
static bool
IsUnscopedRole(Oid role)
{
	return role == extension_owner || superuser_arg(role);
}

/*
 * LoadTenant reads the organizations of the roles that role is a member
 * of.  Runs as the owner, so organization_members is read whole.
 */
static void
LoadTenant(Oid role)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT DISTINCT m.organization_id FROM workflow.organization_members m"
		" WHERE pg_catalog.pg_has_role($1, m.role::pg_catalog.oid, 'MEMBER')"
		" ORDER BY 1";
	static const Oid types[1] = {OIDOID};
	Datum		values[1];
	pg_uuid_t  *orgs = NULL;
	int			n;

	if (tenant_valid && tenant_role == role)
		return;
	tenant_valid = false;
	if (tenant_orgs != NULL)
		pfree(tenant_orgs);
	tenant_orgs = NULL;
	tenant_norgs = 0;
	tenant_role = role;
	if (IsUnscopedRole(role))
	{
		tenant_valid = true;
		return;
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	values[0] = ObjectIdGetDatum(role);
	WfExecute(&plan, sql, 1, types, values, NULL, true, 0);
	n = (int) SPI_processed;
	if (n > 0)
		orgs = MemoryContextAlloc(TopMemoryContext, sizeof(pg_uuid_t) * n);
	for (int i = 0; i < n; i++)
		WfResultUuid(i, 1, &orgs[i]);
	SPI_finish();

	tenant_orgs = orgs;
	tenant_norgs = n;
	tenant_valid = true;
}

/*
 * ConfineCall sets the organizations the call in progress is confined to,
 * copied into the call's memory: an invalidation during the call must not
 * change them under it.
 */
static void
ConfineCall(Oid caller)
{
	LoadTenant(caller);
	call_norgs = tenant_norgs;
	call_orgs = NULL;
	if (tenant_norgs > 0)
	{
		call_orgs = palloc(sizeof(pg_uuid_t) * tenant_norgs);
		memcpy(call_orgs, tenant_orgs, sizeof(pg_uuid_t) * tenant_norgs);
	}
}

/* SaveCall notes what EndCall puts back; it cannot fail. */
static void
SaveCall(WfCall *call)
{
	GetUserIdAndSecContext(&call->saved_userid, &call->saved_sec_context);
	call->saved_caller = call_caller;
	call->saved_norgs = call_norgs;
	call->saved_orgs = call_orgs;
}

/*
 * EnterCall starts an engine call: version check, the switch to the owner
 * and the caller's confinement.  The owner is exempt from forced row-level
 * security, as the referential integrity triggers are.
 */
static void
EnterCall(WfCall *call)
{
	Oid			owner;

	if (InOwnScript())
		owner = call->saved_userid;
	else
	{
		CheckExtension();
		owner = extension_owner;
	}
	SetUserIdAndSecContext(owner, call->saved_sec_context |
						   SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_NOFORCE_RLS);
	call_caller = call->saved_userid;
	ConfineCall(call->saved_userid);
}

/*
 * WfCallAsOwner runs the body of an SQL-callable function as the owner,
 * confined to the caller's organizations.
 */
Datum
WfCallAsOwner(PGFunction body, FunctionCallInfo fcinfo)
{
	WfCall		call;
	volatile Datum result = (Datum) 0;

	SaveCall(&call);
	PG_TRY();
	{
		EnterCall(&call);
		result = body(fcinfo);
	}
	PG_FINALLY();
	{
		EndCall(&call);
	}
	PG_END_TRY();
	return result;
}

/* EndCall switches back to the caller and the caller's confinement. */
static void
EndCall(const WfCall *call)
{
	SetUserIdAndSecContext(call->saved_userid, call->saved_sec_context);
	call_caller = call->saved_caller;
	call_norgs = call->saved_norgs;
	call_orgs = call->saved_orgs;
}

/*
 * WfCallCallerName is the name of the role that made the call in progress
 * (the current user before the switch to the owner), for the history.
 */
char *
WfCallCallerName(void)
{
	if (!OidIsValid(call_caller))
		return GetUserNameFromId(GetUserId(), false);
	return GetUserNameFromId(call_caller, false);
}

/* Whether the call in progress is confined to some organizations. */
bool
WfCallConfined(void)
{
	return call_norgs > 0;
}

/* How many organizations the call in progress is confined to (0: none). */
int
WfCallOrganizationCount(void)
{
	return call_norgs;
}

/*
 * WfCallSeesOrganization says whether the call in progress may see a row
 * of that organization (org NULL: a row without one, which only unconfined
 * callers see).
 */
bool
WfCallSeesOrganization(const pg_uuid_t *org)
{
	if (call_norgs == 0)
		return true;
	if (org == NULL)
		return false;
	return bsearch(org, call_orgs, call_norgs, sizeof(pg_uuid_t),
				   WfUuidCmpQsort) != NULL;
}

/*
 * WfCallOrganization checks the organization a call writes under.  An
 * unconfined caller writes what it names; a tenant role writes only under
 * its own organizations and, naming none, under its only one.  Returns the
 * organization to write (NULL: none), pointing into given or into the
 * call's memory.
 */
const pg_uuid_t *
WfCallOrganization(const pg_uuid_t *given)
{
	if (call_norgs == 0)
		return given;
	if (given != NULL)
	{
		if (!WfCallSeesOrganization(given))
			ereport(ERROR,
					(errcode(WF_SQLSTATE_FORBIDDEN),
					 errmsg(WF_ORGANIZATION_FORBIDDEN ": organization %s is not one of this role's",
							WfUuidString(given)),
					 errdetail("Role \"%s\" may act only for the organizations granted to it.",
							   GetUserNameFromId(call_caller, false))));
		return given;
	}
	if (call_norgs > 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_FORBIDDEN),
				 errmsg(WF_ORGANIZATION_FORBIDDEN ": organization_id is required"),
				 errdetail("This role belongs to %d organizations; name the one to act for.",
						   call_norgs)));
	return &call_orgs[0];
}

/*
 * WfCallOrganizationsArray returns the call's organizations as a uuid[],
 * or a null when it is not confined.
 */
Datum
WfCallOrganizationsArray(bool *isnull)
{
	Datum	   *elems;

	*isnull = call_norgs == 0;
	if (*isnull)
		return (Datum) 0;
	elems = palloc(sizeof(Datum) * call_norgs);
	for (int i = 0; i < call_norgs; i++)
		elems[i] = UUIDPGetDatum(&call_orgs[i]);
	return WfArray(elems, NULL, call_norgs, UUIDOID);
}

/*
 * MyOrganizations returns the organizations the current role is
 * confined to, or NULL when it is not confined.  The row-level security
 * policies call it once per query.
 */
static Datum
MyOrganizations(PG_FUNCTION_ARGS)
{
	bool		isnull;
	Datum		result = WfCallOrganizationsArray(&isnull);

	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/* Whether role is one of the four roles the extension grants rights to. */
static bool
IsExtensionRole(Oid role)
{
	static const char *const names[] = {"workflow_admin", "workflow_worker",
	"workflow_client", "workflow_reader"};

	for (int i = 0; i < lengthof(names); i++)
		if (get_role_oid(names[i], true) == role)
			return true;
	return false;
}

/*
 * MembershipArgs reads and checks the arguments of grant and revoke.
 * Memberships are changed only by unconfined callers: a tenant admin could
 * otherwise revoke its own last organization and be unconfined, or confine
 * other tenants' roles.  The extension's own roles are refused: a grant to
 * one of them would confine every role holding it, in every tenant.
 */
static void
MembershipArgs(FunctionCallInfo fcinfo, Datum *values)
{
	Oid			role;

	WfRequireReadCommitted();
	if (WfCallConfined())
		ereport(ERROR,
				(errcode(WF_SQLSTATE_FORBIDDEN),
				 errmsg(WF_ORGANIZATION_FORBIDDEN ": a tenant role may not change organization memberships"),
				 errdetail("Only a role that is not confined to organizations grants and revokes them.")));
	if (PG_ARGISNULL(0))
		wf_invalid_argument("role must not be null");
	if (PG_ARGISNULL(1))
		wf_invalid_argument("organization_id must not be null");
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	role = DatumGetObjectId(values[0]);
	if (IsUnscopedRole(role))
		wf_invalid_argument("role \"%s\" is a superuser or the extension's owner, which are never confined",
							GetUserNameFromId(role, false));
	if (IsExtensionRole(role))
		wf_invalid_argument("role \"%s\" is one of the extension's roles; grant organizations to the roles that hold it",
							GetUserNameFromId(role, false));
}

/*
 * ChangeMembership runs the insert or delete of grant or revoke and says
 * whether it changed a row.
 */
static bool
ChangeMembership(FunctionCallInfo fcinfo, SPIPlanPtr *plan, const char *sql)
{
	static const Oid types[2] = {REGROLEOID, UUIDOID};
	Datum		values[2];
	bool		changed;

	MembershipArgs(fcinfo, values);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	WfExecute(plan, sql, 2, types, values, NULL, false, 0);
	changed = SPI_processed > 0;
	SPI_finish();
	return changed;
}

/*
 * GrantOrganization makes a role (and every role that is a member of it)
 * a tenant of an organization.  Returns whether the grant is new.
 */
static Datum
GrantOrganization(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;

	PG_RETURN_BOOL(ChangeMembership(fcinfo, &plan,
									"INSERT INTO workflow.organization_members (role, organization_id)"
									" VALUES ($1, $2) ON CONFLICT DO NOTHING"));
}

/* RevokeOrganization takes a grant back; returns whether it was there. */
static Datum
RevokeOrganization(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;

	PG_RETURN_BOOL(ChangeMembership(fcinfo, &plan,
									"DELETE FROM workflow.organization_members m"
									" WHERE m.role" OP("=") "$1"
									" AND m.organization_id" OP("=") "$2"));
}

/*
 * workflow_organization_members_changed (AFTER each statement on
 * organization_members) makes every backend forget the organizations it
 * cached, once this transaction commits.
 */
Datum
workflow_organization_members_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event))
		elog(ERROR, "organization_members_changed: must be fired for each statement");
	CacheInvalidateRelcache(trigdata->tg_relation);
	return PointerGetDatum(NULL);
}

/*
 * The SQL-callable entry points of this file: each body runs as the
 * extension's owner, confined to the caller's organizations.
 */
WF_OWNER_ENTRY(workflow_my_organizations, MyOrganizations)
WF_OWNER_ENTRY(workflow_grant_organization, GrantOrganization)
WF_OWNER_ENTRY(workflow_revoke_organization, RevokeOrganization)
