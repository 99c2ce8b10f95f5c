-- 08_fresh_equals_updated.sql: docs/reference.md: a fresh install
-- and an updated old install end identical.  This database gets CREATE
-- EXTENSION workflow (the default version); a second one, made here, gets
-- CREATE EXTENSION workflow VERSION '1.0' and then ALTER EXTENSION workflow
-- UPDATE.  wf_tap.describe() writes down, in each, every object of the
-- extension by name (no OIDs): members, functions in full, tables and
-- their columns, indexes, constraints, triggers, policies with their
-- expressions, ACLs, the privileges pg_dump keeps as the extension's,
-- row-level security flags, the tables pg_dump dumps, types and enum labels
-- in order, comments.  The second database's description comes back here
-- through a psql variable, as JSON, and the two are compared kind by kind;
-- a difference is listed as extra or missing rows.
--
-- The file switches databases with \c, so the second database is made and
-- dropped outside the test transaction.  wf_tap.describe() is written once,
-- below; its definition is carried to each database in a psql variable.

CREATE EXTENSION IF NOT EXISTS pgtap;

\set ON_ERROR_STOP 1
SET client_min_messages = warning;

SELECT current_database() AS fresh_db, current_database() || '_updated' AS updated_db \gset
DROP DATABASE IF EXISTS :"updated_db";
CREATE DATABASE :"updated_db";

BEGIN;
CREATE SCHEMA wf_tap;

-- One row per fact: kind, object (by name), detail.
CREATE FUNCTION wf_tap.describe()
RETURNS TABLE (kind text, object text, detail text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $describe$
WITH
-- the extension, its schema, its members, and what lives in the schema
ext AS (
    SELECT e.oid, e.extname, e.extversion, e.extrelocatable, e.extnamespace,
           e.extowner, e.extconfig, e.extcondition
      FROM pg_extension e WHERE e.extname = 'workflow'
),
nsp AS (SELECT n.oid FROM pg_namespace n WHERE n.nspname = 'workflow'),
members AS (
    SELECT d.classid, d.objid, d.objsubid
      FROM pg_depend d, ext
     WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid
       AND d.deptype = 'e'
),
rels AS (
    SELECT c.* FROM pg_class c, nsp WHERE c.relnamespace = nsp.oid
),
procs AS (
    SELECT p.* FROM pg_proc p, nsp WHERE p.pronamespace = nsp.oid
),
types AS (
    SELECT t.* FROM pg_type t, nsp WHERE t.typnamespace = nsp.oid
),
-- an ACL as its effective entries, sorted, with role names
acl(kind, object, acl, owner, objtype) AS (
    SELECT 'schema', n.nspname::text, n.nspacl, n.nspowner, 'n'::"char"
      FROM pg_namespace n, nsp WHERE n.oid = nsp.oid
    UNION ALL
    SELECT 'relation', c.relname::text, c.relacl, c.relowner,
           CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char"
      FROM rels c WHERE c.relkind NOT IN ('i', 'I', 'c', 't')
    UNION ALL
    SELECT 'function', p.oid::regprocedure::text, p.proacl, p.proowner, 'f'
      FROM procs p
    UNION ALL
    SELECT 'type', t.oid::regtype::text, t.typacl, t.typowner, 'T'
      FROM types t
)
-- the extension and its members
SELECT 'extension', x.extname::text,
       format('version=%s relocatable=%s schema=%s owner=%s',
              x.extversion, x.extrelocatable, x.extnamespace::regnamespace,
              pg_get_userbyid(x.extowner))
  FROM ext x
UNION ALL
SELECT 'member', pg_describe_object(m.classid, m.objid, m.objsubid), ''
  FROM members m
UNION ALL
-- tables dumped by pg_dump, with their filter conditions
SELECT 'config_dump', c.cfg::regclass::text, coalesce(x.extcondition[c.n], '<none>')
  FROM ext x, unnest(x.extconfig) WITH ORDINALITY AS c(cfg, n)
UNION ALL
SELECT 'schema', n.nspname::text,
       format('owner=%s', pg_get_userbyid(n.nspowner))
  FROM pg_namespace n, nsp WHERE n.oid = nsp.oid
UNION ALL
-- effective ACLs (NULL read as the default), one sorted list per object
SELECT 'acl', a.kind || ' ' || a.object,
       coalesce((SELECT string_agg(e.entry, ', ' ORDER BY e.entry)
                   FROM (SELECT format('%s=%s%s/%s',
                                       CASE WHEN x.grantee = 0 THEN 'PUBLIC'
                                            ELSE pg_get_userbyid(x.grantee) END,
                                       x.privilege_type,
                                       CASE WHEN x.is_grantable THEN '*' ELSE '' END,
                                       pg_get_userbyid(x.grantor)) AS entry
                           FROM aclexplode(coalesce(a.acl, acldefault(a.objtype, a.owner))) x) e),
                '<none>')
  FROM acl a
UNION ALL
-- the privileges pg_dump takes as the extension's own
SELECT 'init_privs', pg_describe_object(i.classoid, i.objoid, i.objsubid),
       i.privtype::text || ' ' || coalesce((SELECT string_agg(x::text, ', ' ORDER BY x::text)
                                        FROM unnest(i.initprivs) x), '<none>')
  FROM pg_init_privs i
 WHERE (i.classoid, i.objoid) IN (SELECT m.classid, m.objid FROM members m)
    OR (i.classoid = 'pg_namespace'::regclass AND i.objoid = (SELECT oid FROM nsp))
    OR (i.classoid = 'pg_class'::regclass AND i.objoid IN (SELECT oid FROM rels))
UNION ALL
SELECT 'default_acl', pg_get_userbyid(d.defaclrole) || ' ' || d.defaclobjtype::text,
       coalesce((SELECT string_agg(x::text, ', ' ORDER BY x::text)
                   FROM unnest(d.defaclacl) x), '<none>')
  FROM pg_default_acl d, nsp WHERE d.defaclnamespace IN (nsp.oid, 0)
UNION ALL
-- relations: kind, options, row-level security
SELECT 'relation', c.relname::text,
       format('kind=%s persistence=%s owner=%s am=%s options=%s rls=%s force_rls=%s '
              'replica_identity=%s of_type=%s partition=%s parents=%s',
              c.relkind, c.relpersistence, pg_get_userbyid(c.relowner),
              (SELECT a.amname FROM pg_am a WHERE a.oid = c.relam),
              coalesce((SELECT string_agg(o, ',' ORDER BY o) FROM unnest(c.reloptions) o), ''),
              c.relrowsecurity, c.relforcerowsecurity, c.relreplident,
              nullif(c.reloftype, 0)::regtype, c.relispartition,
              coalesce((SELECT string_agg(i.inhparent::regclass::text, ',' ORDER BY i.inhseqno)
                          FROM pg_inherits i WHERE i.inhrelid = c.oid), ''))
  FROM rels c
UNION ALL
-- columns by their place among the live ones (an update may leave dropped
-- columns behind), with type, NOT NULL, default and the rest; pg_attver is
-- an attribute option some builds of PostgreSQL set per database
SELECT 'column', c.relname || '.' || a.attname,
       format('position=%s type=%s not_null=%s default=%s identity=%s generated=%s '
              'collation=%s storage=%s compression=%s statistics=%s options=%s fdw_options=%s',
              row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
              format_type(a.atttypid, a.atttypmod), a.attnotnull,
              pg_get_expr(ad.adbin, ad.adrelid), a.attidentity, a.attgenerated,
              (SELECT co.collname FROM pg_collation co WHERE co.oid = a.attcollation),
              a.attstorage, a.attcompression, a.attstattarget,
              coalesce((SELECT string_agg(o, ',' ORDER BY o) FROM unnest(a.attoptions) o
                         WHERE o NOT LIKE 'pg\_attver=%'), ''),
              coalesce((SELECT string_agg(o, ',' ORDER BY o) FROM unnest(a.attfdwoptions) o), ''))
  FROM rels c
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
 WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
UNION ALL
SELECT 'column_acl', c.relname || '.' || a.attname,
       (SELECT string_agg(x::text, ', ' ORDER BY x::text) FROM unnest(a.attacl) x)
  FROM rels c
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE a.attacl IS NOT NULL
UNION ALL
-- indexes, constraints, triggers, policies with their expressions, rules
SELECT 'index', c.relname::text,
       format('%s clustered=%s replica_identity=%s valid=%s',
              pg_get_indexdef(i.indexrelid), i.indisclustered, i.indisreplident,
              i.indisvalid)
  FROM rels c JOIN pg_index i ON i.indexrelid = c.oid
UNION ALL
SELECT 'constraint', r.relname || '.' || co.conname,
       format('type=%s %s deferrable=%s deferred=%s validated=%s no_inherit=%s index=%s',
              co.contype, pg_get_constraintdef(co.oid), co.condeferrable,
              co.condeferred, co.convalidated, co.connoinherit,
              (SELECT ic.relname FROM pg_class ic WHERE ic.oid = co.conindid))
  FROM pg_constraint co JOIN rels r ON r.oid = co.conrelid
UNION ALL
SELECT 'constraint', t.typname || '.' || co.conname,
       format('type=%s %s deferrable=%s deferred=%s validated=%s',
              co.contype, pg_get_constraintdef(co.oid), co.condeferrable,
              co.condeferred, co.convalidated)
  FROM pg_constraint co JOIN types t ON t.oid = co.contypid
UNION ALL
SELECT 'trigger', r.relname || '.' || tg.tgname,
       format('%s enabled=%s', pg_get_triggerdef(tg.oid), tg.tgenabled)
  FROM pg_trigger tg JOIN rels r ON r.oid = tg.tgrelid
 WHERE NOT tg.tgisinternal
UNION ALL
SELECT 'policy', r.relname || '.' || po.polname,
       format('cmd=%s permissive=%s roles=%s using=%s with_check=%s',
              po.polcmd, po.polpermissive,
              (SELECT string_agg(pr.name, ',' ORDER BY pr.name)
                 FROM (SELECT CASE WHEN x = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(x)::text END
                         FROM unnest(po.polroles) x) AS pr(name)),
              pg_get_expr(po.polqual, po.polrelid),
              pg_get_expr(po.polwithcheck, po.polrelid))
  FROM pg_policy po JOIN rels r ON r.oid = po.polrelid
UNION ALL
SELECT 'rule', r.relname || '.' || ru.rulename, pg_get_ruledef(ru.oid)
  FROM pg_rewrite ru JOIN rels r ON r.oid = ru.ev_class
UNION ALL
SELECT 'sequence', c.relname::text,
       format('type=%s start=%s increment=%s min=%s max=%s cache=%s cycle=%s',
              s.seqtypid::regtype, s.seqstart, s.seqincrement, s.seqmin, s.seqmax,
              s.seqcache, s.seqcycle)
  FROM pg_sequence s JOIN rels c ON c.oid = s.seqrelid
UNION ALL
SELECT 'statistics', st.stxname::text, pg_get_statisticsobjdef(st.oid)
  FROM pg_statistic_ext st, nsp WHERE st.stxnamespace = nsp.oid
UNION ALL
-- functions in full: arguments, defaults, result, language, volatility,
-- strictness, SECURITY, settings, body or C symbol
SELECT 'function', p.oid::regprocedure::text,
       format('owner=%s kind=%s %s', pg_get_userbyid(p.proowner), p.prokind,
              CASE WHEN p.prokind IN ('f', 'p', 'w') THEN pg_get_functiondef(p.oid)
                   ELSE format('aggregate transfn=%s finalfn=%s combinefn=%s '
                               'transtype=%s initval=%s',
                               a.aggtransfn, a.aggfinalfn, a.aggcombinefn,
                               a.aggtranstype::regtype, a.agginitval) END)
  FROM procs p LEFT JOIN pg_aggregate a ON a.aggfnoid = p.oid
UNION ALL
-- types, and enum labels in order
SELECT 'type', t.oid::regtype::text,
       format('type=%s category=%s owner=%s relation=%s element=%s base=%s typmod=%s '
              'not_null=%s default=%s collation=%s',
              t.typtype, t.typcategory, pg_get_userbyid(t.typowner),
              nullif(t.typrelid, 0)::regclass, nullif(t.typelem, 0)::regtype,
              nullif(t.typbasetype, 0)::regtype, t.typtypmod, t.typnotnull,
              t.typdefault,
              (SELECT co.collname FROM pg_collation co WHERE co.oid = t.typcollation))
  FROM types t
UNION ALL
SELECT 'enum', t.oid::regtype::text,
       (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
          FROM pg_enum e WHERE e.enumtypid = t.oid)
  FROM types t WHERE t.typtype = 'e'
UNION ALL
SELECT 'operator', o.oid::regoperator::text,
       format('function=%s commutator=%s negator=%s restrict=%s join=%s',
              o.oprcode::regprocedure, nullif(o.oprcom, 0)::regoperator,
              nullif(o.oprnegate, 0)::regoperator, o.oprrest, o.oprjoin)
  FROM pg_operator o, nsp WHERE o.oprnamespace = nsp.oid
UNION ALL
-- comments on everything above
SELECT 'comment', pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description
  FROM pg_description d
 WHERE (d.classoid = 'pg_namespace'::regclass AND d.objoid = (SELECT oid FROM nsp))
    OR (d.classoid = 'pg_extension'::regclass AND d.objoid = (SELECT oid FROM ext))
    OR (d.classoid = 'pg_class'::regclass AND d.objoid IN (SELECT oid FROM rels))
    OR (d.classoid = 'pg_proc'::regclass AND d.objoid IN (SELECT oid FROM procs))
    OR (d.classoid = 'pg_type'::regclass AND d.objoid IN (SELECT oid FROM types))
    OR (d.classoid = 'pg_constraint'::regclass
        AND d.objoid IN (SELECT co.oid FROM pg_constraint co, nsp
                          WHERE co.connamespace = nsp.oid))
    OR (d.classoid = 'pg_trigger'::regclass
        AND d.objoid IN (SELECT tg.oid FROM pg_trigger tg JOIN rels r ON r.oid = tg.tgrelid))
    OR (d.classoid = 'pg_policy'::regclass
        AND d.objoid IN (SELECT po.oid FROM pg_policy po JOIN rels r ON r.oid = po.polrelid))
    OR (d.classoid = 'pg_operator'::regclass
        AND d.objoid IN (SELECT o.oid FROM pg_operator o, nsp WHERE o.oprnamespace = nsp.oid))
$describe$;

SELECT pg_catalog.pg_get_functiondef('wf_tap.describe()'::pg_catalog.regprocedure)
    AS describe_function \gset
ROLLBACK;

-- ---------------------------------------------------------------------------
-- The second database: 1.0, then updated to the default version

\c :updated_db
SET client_min_messages = warning;
CREATE SCHEMA wf_tap;
SELECT :'describe_function' \gexec

CREATE EXTENSION workflow VERSION '1.0';
SELECT extversion AS updated_from FROM pg_catalog.pg_extension WHERE extname = 'workflow' \gset
ALTER EXTENSION workflow UPDATE;
SELECT extversion AS updated_to FROM pg_catalog.pg_extension WHERE extname = 'workflow' \gset
SELECT count(*) AS updated_members
  FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
 WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
   AND d.deptype = 'e' AND e.extname = 'workflow' \gset
SELECT pg_catalog.json_agg(pg_catalog.json_build_array(kind, object, detail))
    AS updated_description
  FROM wf_tap.describe() \gset

-- ---------------------------------------------------------------------------
-- Back in this database: the fresh install

\c :fresh_db
SET client_min_messages = warning;
DROP DATABASE :"updated_db";
CREATE EXTENSION IF NOT EXISTS workflow;

BEGIN;
SELECT plan(30);

CREATE SCHEMA wf_tap;
SELECT :'describe_function' \gexec

CREATE TABLE wf_tap.fresh AS SELECT * FROM wf_tap.describe();
CREATE TABLE wf_tap.updated AS
SELECT x->>0 AS kind, x->>1 AS object, x->>2 AS detail
  FROM json_array_elements(:'updated_description'::json) AS x;

SELECT is(:'updated_from'::text, '1.0', 'the second database was installed at 1.0');
SELECT is(:'updated_to'::text, (SELECT default_version::text FROM pg_catalog.pg_available_extensions
                           WHERE name = 'workflow'),
          'ALTER EXTENSION UPDATE took the second database to the default version');
SELECT is((SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'workflow'), '1.12',
          'this database was installed fresh at 1.12');

-- The descriptions are not empty and name every member.
SELECT is((SELECT count(*) FROM wf_tap.fresh WHERE kind = 'member'),
          (SELECT count(*) FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e
               ON e.oid = d.refobjid
            WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
              AND e.extname = 'workflow'),
          'the fresh description names every member of the extension');
SELECT is((SELECT count(*) FROM wf_tap.updated WHERE kind = 'member'), :'updated_members'::bigint,
          'the updated description names every member of the extension');
SELECT is((SELECT string_agg(format('%s %s', kind, n), ', ' ORDER BY kind)
             FROM (SELECT kind, count(*) AS n FROM wf_tap.fresh GROUP BY kind) k),
          'acl 104, column 202, comment 32, config_dump 13, constraint 15, enum 5, extension 1, '
          'function 46, index 33, init_privs 64, member 68, policy 11, relation 50, rule 4, '
          'schema 1, sequence 2, trigger 6, type 40',
          'the fresh description: so many facts of each kind');

-- Kind by kind: what the updated install has that the fresh one lacks is
-- listed as extra records, what it lacks as missing records.
CREATE TABLE wf_tap.kinds (n serial PRIMARY KEY, kind text NOT NULL, what text NOT NULL);
INSERT INTO wf_tap.kinds (kind, what) VALUES
    ('extension', 'the extension''s version, relocatability, schema and owner'),
    ('member', 'the members of the extension'),
    ('config_dump', 'the tables pg_dump dumps, with their conditions'),
    ('schema', 'schema workflow''s owner'),
    ('acl', 'the ACLs of the schema, relations, functions and types'),
    ('init_privs', 'the privileges pg_dump keeps as the extension''s'),
    ('default_acl', 'the default privileges'),
    ('relation', 'relations with their kind, options and row-level security'),
    ('column', 'columns with position, type, NOT NULL, default and options'),
    ('column_acl', 'column privileges'),
    ('index', 'index definitions'),
    ('constraint', 'constraints'),
    ('trigger', 'triggers'),
    ('policy', 'row-level security policies with their expressions'),
    ('rule', 'rules'),
    ('sequence', 'sequences'),
    ('statistics', 'extended statistics'),
    ('function', 'function definitions, owners and kinds'),
    ('type', 'types'),
    ('enum', 'enum labels in order'),
    ('operator', 'operators'),
    ('comment', 'comments');

SELECT set_eq(format('SELECT object, detail FROM wf_tap.updated WHERE kind = %L', k.kind),
              format('SELECT object, detail FROM wf_tap.fresh WHERE kind = %L', k.kind),
              format('updated and fresh installs agree on %s', k.what))
  FROM wf_tap.kinds k ORDER BY k.n;

SELECT is_empty($$
    SELECT DISTINCT kind FROM (SELECT kind FROM wf_tap.fresh UNION ALL
                               SELECT kind FROM wf_tap.updated) d
     WHERE kind NOT IN (SELECT kind FROM wf_tap.kinds)
$$, 'every kind of fact was compared above');

SELECT bag_eq('SELECT kind, object, detail FROM wf_tap.updated',
              'SELECT kind, object, detail FROM wf_tap.fresh',
              'the two descriptions are equal, fact by fact, duplicates included');

SELECT * FROM finish();
ROLLBACK;
