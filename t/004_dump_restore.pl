# pg_dump of a database with runs in flight, restored into a new cluster.
#
# At dump time the origin holds: finished steps, a step that failed once
# and then succeeded, two RUNNING jobs with leases (one whose holder comes
# back and finishes it, one whose holder is gone), QUEUED and BLOCKED steps,
# an external step waiting for the outside world, a run that ended with
# errors, a canceled run, a run under concurrency_cap 1 with a step
# parked in the parking queue, a loop at its second generation, a loop
# exhausted and continued in a successor run, an idempotency key, and plain
# jobs.  The dump is
# restored twice into a new cluster: pg_restore of the custom format, and
# psql of the plain format.  pg_extension_config_dump puts the table data in
# the dump, so the copies hold exactly the origin's rows.  Then the same
# continuation runs on the origin and on both copies (the holder completes
# with its old token, reap_expired reclaims the other lease, the external
# step is completed, workers drain the queue) and every copy must end
# exactly like the origin.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WorkflowTest;

my $origin = new_workflow_node('origin');

sub sql
{
	my ($node, $db, $query) = @_;
	return $node->safe_psql($db, $query);
}

# claim(NODE, DB, JOB_TYPE, WORKER): (id, token) of one claimed job
sub claim
{
	my ($node, $db, $type, $worker) = @_;
	my ($id, $token) = split /\|/,
	  sql($node, $db,
		"SELECT id, lease_token FROM workflow.claim('$worker', ARRAY['$type'])");
	die "nothing to claim of type $type" unless $token;
	return ($id, $token);
}

# ---- the origin: runs in every state ---------------------------------------

my $build_def = json_text(
	{
		name => 'build',
		result_step => 'publish',
		steps => [
			{ key => 'fetch', job_type => 'git.fetch', payload => { ref => 'main' } },
			{
				key => 'test',
				job_type => 'ci.test',
				depends_on => ['fetch'],
				max_attempts => 2
			},
			{ key => 'approve', kind => 'external', depends_on => ['test'] },
			{
				key => 'publish',
				job_type => 'ci.publish',
				depends_on =>
				  [ 'approve', { step => 'test', release => 'on_terminal' } ]
			}
		]
	});
my $fan_def = json_text(
	{
		name => 'fan',
		result_step => 'join',
		steps => [
			{ key => 'root', job_type => 'fan.root' },
			{ key => 'a', job_type => 'fan.a', depends_on => ['root'] },
			{
				key => 'b',
				job_type => 'fan.b',
				depends_on => ['root'],
				timeout_seconds => 2
			},
			{ key => 'c', job_type => 'fan.c', depends_on => ['root'] },
			{ key => 'join', job_type => 'fan.join', depends_on => [qw(a b c)] }
		]
	});
my $chain_def = json_text(
	{
		name => 'chain',
		steps => [
			{ key => 'x', job_type => 'chain.x' },
			{ key => 'y', job_type => 'chain.y', depends_on => ['x'] },
			{ key => 'z', job_type => 'chain.z', depends_on => ['y'] }
		]
	});
my $failed_def = json_text(
	{
		name => 'failed',
		steps => [
			{ key => 'f', job_type => 'bad.f', max_attempts => 1 },
			{ key => 'g', job_type => 'bad.g', depends_on => ['f'] }
		]
	});
my $capped_def = json_text(
	{
		name => 'capped',
		limits => { concurrency_cap => 1 },
		steps => [
			{ key => 'c1', job_type => 'capped.c' },
			{ key => 'c2', job_type => 'capped.c' }
		]
	});
my $loop_def = json_text(
	{
		name => 'loop',
		steps => [
			{ key => 'a', job_type => 'loop.a' },
			{
				key => 'again',
				kind => 'repeat',
				depends_on => ['a'],
				back_to => ['a'],
				while => '$.done == "loop.a"',
				max_iterations => 3,
				exhaustion_policy => 'emit_outcome'
			}
		]
	});
my $exhausted_def = json_text(
	{
		name => 'exhausted',
		steps => [
			{ key => 'x0', job_type => 'loop.x0' },
			{ key => 'x', job_type => 'loop.x', depends_on => ['x0'] },
			{
				key => 'again',
				kind => 'repeat',
				depends_on => ['x'],
				back_to => ['x'],
				while => '$.done == "loop.x"',
				max_iterations => 1
			}
		]
	});
my $canceled_def = json_text(
	{
		name => 'canceled',
		steps => [
			{ key => 'k1', job_type => 'cancel.k1' },
			{ key => 'k2', job_type => 'cancel.k2', depends_on => ['k1'] }
		]
	});

my $build = sql($origin, 'postgres',
	"SELECT workflow.start_run('$build_def', NULL, 'build-1')");
my ($id, $token) = claim($origin, 'postgres', 'git.fetch', 'w1');
sql($origin, 'postgres',
	"SELECT workflow.complete_job('$id', '$token', '{\"sha\": \"abc123\"}')");
($id, $token) = claim($origin, 'postgres', 'ci.test', 'w1');
sql($origin, 'postgres',
	"SET workflow.retry_base_delay_ms = 0;"
	  . " SELECT workflow.fail_job('$id', '$token', 'ci.flaky', 'one flaky test')");
($id, $token) = claim($origin, 'postgres', 'ci.test', 'w2');
sql($origin, 'postgres',
	"SELECT workflow.complete_job('$id', '$token', '{\"passed\": 120}')");

my $fan = sql($origin, 'postgres', "SELECT workflow.start_run('$fan_def')");
($id, $token) = claim($origin, 'postgres', 'fan.root', 'w1');
sql($origin, 'postgres',
	"SELECT workflow.complete_job('$id', '$token', '{\"root\": 1}')");
# a: its holder survives the move and finishes it with its token
my ($job_a, $token_a) = claim($origin, 'postgres', 'fan.a', 'kept-worker');
# b: its holder is gone; a 2 second lease that only reap_expired ends
my ($job_b, $token_b) = claim($origin, 'postgres', 'fan.b', 'lost-worker');

my $chain = sql($origin, 'postgres', "SELECT workflow.start_run('$chain_def')");

my $failed = sql($origin, 'postgres', "SELECT workflow.start_run('$failed_def')");

my $capped = sql($origin, 'postgres', "SELECT workflow.start_run('$capped_def')");
($id, $token) = claim($origin, 'postgres', 'bad.f', 'w1');
sql($origin, 'postgres',
	"SELECT workflow.fail_job('$id', '$token', 'bad.input', 'no such file', false)"
);

# the loop goes round once: its body is at generation 1 at dump time
my $loop = sql($origin, 'postgres', "SELECT workflow.start_run('$loop_def')");
($id, $token) = claim($origin, 'postgres', 'loop.a', 'w1');
sql($origin, 'postgres',
	"SELECT workflow.complete_job('$id', '$token', '{\"done\": \"loop.a\"}')");

# a loop exhausted at once, continued for one more generation: the
# successor copies x0 and waits for x
my $exhausted = sql($origin, 'postgres', "SELECT workflow.start_run('$exhausted_def')");
for my $type ('loop.x0', 'loop.x')
{
	($id, $token) = claim($origin, 'postgres', $type, 'w1');
	sql($origin, 'postgres',
		"SELECT workflow.complete_job('$id', '$token', '{\"done\": \"$type\"}')");
}
my $successor = sql($origin, 'postgres',
	"SELECT workflow.continue_run('$exhausted', 1, s.output_checksum)"
	  . " FROM workflow.continuation_source('$exhausted') s");
like($successor, qr/^[0-9a-f-]{36}$/, 'origin: the exhausted loop is continued');

my $canceled = sql($origin, 'postgres',
	"SELECT workflow.start_run('$canceled_def')");
sql($origin, 'postgres',
	"SELECT workflow.cancel_run('$canceled', 'no longer needed')");

sql($origin, 'postgres',
	"SELECT workflow.enqueue('plain.email', '{\"to\": \"ann\"}');"
	  . " SELECT workflow.enqueue('plain.email', '{\"to\": \"bob\"}', -1);");
($id, $token) = claim($origin, 'postgres', 'plain.email', 'w1');
sql($origin, 'postgres',
	"SELECT workflow.complete_job('$id', '$token', '{\"sent\": true}')");

# a tenant role of organization A, and plain jobs of two organizations
my $org_a = 'a0000000-0000-4000-8000-00000000000a';
my $org_b = 'b0000000-0000-4000-8000-00000000000b';
sql($origin, 'postgres',
	"CREATE ROLE tenant_a LOGIN;"
	  . " GRANT workflow_worker, workflow_reader TO tenant_a;"
	  . " SELECT workflow.grant_organization('tenant_a', '$org_a');"
	  . " SELECT workflow.enqueue('plain.org', '{\"org\": \"a\"}', organization_id => '$org_a');"
	  . " SELECT workflow.enqueue('plain.org', '{\"org\": \"b\"}', organization_id => '$org_b');"
);

is( sql(
		$origin, 'postgres', q{
SELECT string_agg(status || '=' || n, ' ' ORDER BY status)
  FROM (SELECT status, count(*) AS n FROM workflow.workflow_steps GROUP BY status) s}
	),
	'BLOCKED=6 ENQUEUED=5 RUNNING=2 WAITING_FOR_EXTERNAL=1 SUCCEEDED=6 FAILED=2 CANCELED=3 PARKED=1',
	'origin: steps in every state at dump time');
is( sql(
		$origin, 'postgres',
		"SELECT string_agg(name || '=' || status, ' ' ORDER BY name, status) FROM workflow.workflow_runs"
	),
	'build=WAITING_FOR_EXTERNAL canceled=CANCELED capped=RUNNING chain=RUNNING'
	  . ' exhausted=RUNNING exhausted=COMPLETED_WITH_ERRORS'
	  . ' failed=COMPLETED_WITH_ERRORS fan=RUNNING loop=RUNNING',
	'origin: runs in flight and finished at dump time');
verify_is_clean($origin, 'origin at dump time');

# ---- dump and restore ------------------------------------------------------

# Every row of the five tables, as text, for comparing copies.
my $fingerprint_sql = join(
	"\nUNION ALL\n",
	map {
		"SELECT '$_' || ' ' || count(*) || ' '"
		  . " || md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), ''))"
		  . " FROM workflow.$_ t"
	} qw(job_queue workflow_runs workflow_steps workflow_step_dependencies
	  organization_members workflow_events parked_steps workflow_continuations));
my $dump_last_event = sql($origin, 'postgres',
	'SELECT max(id) FROM workflow.workflow_events');
my $origin_fingerprint = sql($origin, 'postgres', $fingerprint_sql);

my $dir = PostgreSQL::Test::Utils::tempdir();
$origin->command_ok(
	[ 'pg_dump', '-Fc', '-f', "$dir/workflow.dump", '-d', 'postgres' ],
	'pg_dump, custom format');
$origin->command_ok(
	[ 'pg_dump', '-Fp', '-f', "$dir/workflow.sql", '-d', 'postgres' ],
	'pg_dump, plain format');
like(slurp_file("$dir/workflow.sql"),
	qr/COPY workflow\.job_queue .* FROM stdin;\n.*\Q$job_b\E/s,
	'the dump holds the job_queue rows (pg_extension_config_dump)');

my $copy = PostgreSQL::Test::Cluster->new('restored');
$copy->init;
$copy->append_conf('postgresql.conf', "log_statement = none\n");
$copy->start;
# roles belong to the cluster, not to the dump: the tenant role must exist
# before its organization grant is restored
$copy->safe_psql('postgres', 'CREATE ROLE tenant_a LOGIN');
$copy->command_ok(
	[
		'pg_restore', '--exit-on-error', '-d', 'postgres',
		"$dir/workflow.dump"
	],
	'pg_restore into a new cluster');
$copy->command_ok([ 'createdb', 'plain' ], 'createdb plain');
$copy->command_ok(
	[
		'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', 'plain', '-f',
		"$dir/workflow.sql"
	],
	'psql restores the plain dump');

my @targets = (
	[ $copy, 'postgres', 'pg_restore copy' ],
	[ $copy, 'plain', 'psql copy' ],
	[ $origin, 'postgres', 'origin' ]);

for my $t (@targets[ 0, 1 ])
{
	my ($node, $db, $label) = @$t;
	is(sql($node, $db, "SELECT extversion FROM pg_extension WHERE extname = 'workflow'"),
		'1.12', "$label: the extension is installed");
	is(sql($node, $db, $fingerprint_sql),
		$origin_fingerprint, "$label: every row is as in the origin");
	verify_is_clean($node, "$label after the restore", $db);
}

# The privileges and the tenant's confinement come back with the extension
# and the rows of organization_members.
$copy->safe_psql('postgres', 'GRANT workflow_worker, workflow_reader TO tenant_a');
for my $t (@targets)
{
	my ($node, $db, $label) = @$t;
	is( sql(
			$node, $db,
			"SET ROLE tenant_a; SELECT workflow.my_organizations()::text,"
			  . " (SELECT string_agg(payload->>'org', ',') FROM workflow.job_queue"
			  . "   WHERE job_type = 'plain.org')"),
		"{$org_a}|a",
		"$label: the tenant role sees only its organization");
	is( sql(
			$node, $db, q{
SELECT bool_and(c.relrowsecurity AND c.relforcerowsecurity), count(*),
       has_function_privilege('public', 'workflow.claim(text,text[],integer,uuid,text)', 'EXECUTE'),
       has_function_privilege('workflow_worker', 'workflow.claim(text,text[],integer,uuid,text)', 'EXECUTE')
  FROM pg_class c
 WHERE c.relnamespace = 'workflow'::regnamespace AND c.relkind = 'r'}),
		't|11|f|t',
		"$label: row-level security and the grants are in place");
}

# ---- the same continuation everywhere --------------------------------------

my $summary_sql = q{
SELECT string_agg(line, E'\n' ORDER BY line) FROM (
    SELECT 'run ' || r.id || ' ' || r.name || ' ' || r.status || ' '
           || coalesce(r.result::text, '-') || ' ' || r.steps_succeeded || '/'
           || r.steps_failed || '/' || r.steps_canceled || ' '
           || (r.finished_at IS NOT NULL) AS line
      FROM workflow.workflow_runs r
    UNION ALL
    SELECT 'step ' || r.name || '.' || s.step_key || ' ' || s.status || ' '
           || coalesce(s.output::text, '-') || ' ' || coalesce(s.status_reason, '-')
           || ' ' || coalesce(s.last_error_code, '-') || ' '
           || coalesce(j.status::text, '-') || ' ' || coalesce(j.attempt::text, '-')
           || ' ' || coalesce(j.worker_id, '-')
      FROM workflow.workflow_steps s
      JOIN workflow.workflow_runs r ON r.id = s.workflow_run_id
      LEFT JOIN workflow.job_queue j ON j.id = s.job_id
    UNION ALL
    SELECT 'job ' || job_type || ' ' || status || ' ' || payload::text || ' '
           || coalesce(output::text, '-') || ' ' || attempt
      FROM workflow.job_queue WHERE workflow_step_id IS NULL
    UNION ALL
    SELECT 'history ' || r.name || ' ' || string_agg(coalesce(e.step_key, '-') || ':'
           || e.event_type || (e.detail - '{job_id,run_at}'::text[])::text, ' ' ORDER BY e.id)
      FROM workflow.workflow_events e
      JOIN workflow.workflow_runs r ON r.id = e.workflow_run_id
     GROUP BY r.name) l};

my %summary;
for my $t (@targets)
{
	my ($node, $db, $label) = @$t;

	# the holder of a's lease reconnects and finishes its job
	sql($node, $db,
		"SELECT workflow.complete_job('$job_a', '$token_a', '{\"a\": 1}')");
	is(sql($node, $db, "SELECT status FROM workflow.job_queue WHERE id = '$job_a'"),
		'SUCCEEDED', "$label: the lease held at dump time is still good");

	# b's lease (2 seconds) runs out and only reap_expired ends it
	ok($node->poll_query_until($db, 'SELECT workflow.reap_expired() = 1'),
		"$label: reap_expired reclaims the job whose lease ran at dump time");
	is( sql(
			$node, $db,
			"SELECT status || ' ' || attempt || ' ' || last_error_code"
			  . " FROM workflow.job_queue WHERE id = '$job_b'"),
		'QUEUED 1 job.lease_expired',
		"$label: the reaped job is QUEUED again");
	my ($rc, $out, $err) = $node->psql($db,
		"SELECT workflow.complete_job('$job_b', '$token_b', '{}')");
	ok($rc != 0 && $err =~ /job\.lease_lost/,
		"$label: the gone holder's token is fenced off");

	# the outside world approves
	is( sql(
			$node, $db,
			"SELECT status FROM workflow.complete_external_step('$build', 'approve',"
			  . " 'SUCCEEDED', '{\"by\": \"ann\"}')"),
		'SUCCEEDED',
		"$label: the external step is completed");

	# the idempotency key survived the move
	is(sql($node, $db,
		"SELECT workflow.start_run('$build_def', NULL, 'build-1')"),
		$build, "$label: start_run with the same key returns the first run");
	($rc, $out, $err) = $node->psql($db,
		"SELECT workflow.start_run('$chain_def', NULL, 'build-1')");
	ok($rc != 0 && $err =~ /workflow\.idempotency_conflict/,
		"$label: the same key with another definition conflicts");

	# workers drain the queue
	sql(
		$node, $db, q{
DO $$
DECLARE
    ids uuid[];
    tokens uuid[];
    outputs jsonb[];
BEGIN
    LOOP
        SELECT array_agg(c.id ORDER BY c.id),
               array_agg(c.lease_token ORDER BY c.id),
               array_agg(jsonb_build_object('done', c.job_type) ORDER BY c.id)
          INTO ids, tokens, outputs
          FROM workflow.claim('drain', NULL, 2) c;
        EXIT WHEN ids IS NULL;
        PERFORM workflow.complete_jobs(ids, tokens, outputs);
        COMMIT;
    END LOOP;
END
$$});

	is( sql(
			$node, $db,
			"SELECT string_agg(name || '=' || status, ' ' ORDER BY name, status) FROM workflow.workflow_runs"
		),
		'build=SUCCEEDED canceled=CANCELED capped=SUCCEEDED chain=SUCCEEDED'
		  . ' exhausted=COMPLETED_WITH_ERRORS exhausted=COMPLETED_WITH_ERRORS'
		  . ' failed=COMPLETED_WITH_ERRORS fan=SUCCEEDED loop=SUCCEEDED',
		"$label: every run finished");
	is( sql(
			$node, $db,
			"SELECT result FROM workflow.workflow_runs WHERE id = '$build'"),
		'{"done": "ci.publish"}',
		"$label: the build run's result is its publish output");
	is( sql(
			$node, $db, q{
SELECT count(*) FROM workflow.job_queue
 WHERE status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED')}),
		'0',
		"$label: no job is left");
	is( sql(
			$node, $db, q{
SELECT count(*) FROM (
    SELECT workflow_step_id FROM workflow.job_queue
     WHERE workflow_step_id IS NOT NULL
     GROUP BY workflow_step_id, generation HAVING count(*) > 1) d}),
		'0',
		"$label: one job per step and generation");
	is( sql(
			$node, $db,
			"SELECT generation || ' ' || output::text FROM workflow.workflow_steps"
			  . " WHERE workflow_run_id = '$loop' AND step_key = 'again'"),
		'2 {"output": {"done": "loop.a"}, "outcome": "iteration_limit_reached"}',
		"$label: the loop went on from its generation to its bound");
	is( sql(
			$node, $db,
			"SELECT c.prior_iterations || ' ' || c.additional_iterations || ' '"
			  . " || (c.document_scope_id = '$exhausted') || ' ' || s.status || ' '"
			  . " || (SELECT string_agg(t.step_key || ':' || t.continued, ',' ORDER BY t.step_key)"
			  . "       FROM workflow.workflow_steps t WHERE t.workflow_run_id = s.workflow_run_id)"
			  . " FROM workflow.workflow_continuations c"
			  . " JOIN workflow.workflow_steps s ON s.workflow_run_id = c.successor_run_id"
			  . "  AND s.step_key = 'again'"
			  . " WHERE c.predecessor_run_id = '$exhausted'"),
		'1 1 true FAILED again:false,x:false,x0:true',
		"$label: the successor's lineage came along, and it ran its one generation");
	verify_is_clean($node, "$label at the end", $db);
	is( sql(
			$node, $db,
			"SELECT count(*) FILTER (WHERE id <= $dump_last_event)"
			  . " || '/' || (min(id) FILTER (WHERE id > $dump_last_event) IS NOT NULL)"
			  . " FROM workflow.workflow_events"),
		sql($origin, 'postgres',
			"SELECT count(*) FROM workflow.workflow_events WHERE id <= $dump_last_event")
		  . '/true',
		"$label: the history goes on after the dump's last event id");
	$summary{$label} = sql($node, $db, $summary_sql);
}

is($summary{'pg_restore copy'}, $summary{origin},
	'the pg_restore copy ended exactly like the origin');
is($summary{'psql copy'}, $summary{origin},
	'the psql copy ended exactly like the origin');
note("final state:\n$summary{origin}");

$copy->stop;
$origin->stop;
done_testing();
