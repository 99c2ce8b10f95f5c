# workflow-worker against a real cluster.
#
# The worker program (worker/, installed next to pg_config's binaries) is
# started as a child process of this script, with commands written to
# files in a temporary directory; each command leaves traces there (what
# it read on stdin, its environment, one line per run) that the
# assertions read back, next to the rows of workflow.job_queue.
#
# Cases, in order:
#   1. one worker, many job types: JSON stdout, plain text stdout (invalid
#      UTF-8 replaced), empty stdout, a failing command (exit status and
#      the tail of stderr), retry to success (WORKFLOW_ATTEMPT), a command
#      that outlives its lease while heartbeats keep it (reap_expired during
#      the sleep expires nothing), crashes (SIGSEGV, SIGKILL), a command
#      that does not read a large stdin, too much stdout, an output the
#      server refuses, a job canceled while its command runs (the command
#      is killed);
#   2. SIGTERM: a command finishing within the grace period is completed
#      and a claimed job not started is released; a command exceeding it is
#      killed and released (QUEUED, attempt unchanged) and a later worker
#      finishes both;
#   3. bad flags and an unreachable database: exit 2, one line on stderr;
#   4. the server stopped 'immediate' and started under a worker working a
#      stream of jobs;
#   5. --concurrency 4 over 1,000 jobs, as a login role granted only
#      workflow_worker (least privilege), whose default isolation level is
#      SERIALIZABLE (the worker sets READ COMMITTED for its session);
#   6. --batch 50 with successes and failures;
#   7. --with-inputs: a run's step gets its prerequisite's output, and
#      WORKFLOW_STEP_KEY and WORKFLOW_RUN_ID;
#   8. the database stopped for longer than --reconnect: exit 2, the
#      command killed, one line on stderr;
#   9. the database stopped for 3 s under a worker whose command ends
#      meanwhile: the worker uses (almost) no CPU while it waits;
#  10. --batch 4 --concurrency 1 with a 3 s lease: finished jobs waiting
#      for the batch are heartbeated, reap_expired expires none;
#  11. a claim that fails inside complete_and_claim or a batch report (a
#      trigger refuses it): the outcome is reported alone, not blamed;
#  12. a LATIN1 database: payload and output are UTF-8 for the command;
#  13. --grace 0 while a slow release keeps the loop busy: a command that
#      ended meanwhile is reported, not released; server notices are logged;
# and verify() is clean at the end.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use JSON::PP;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use WorkflowTest;

my $WORKER = find_worker();
my $dir = PostgreSQL::Test::Utils::tempdir;
my $node = new_workflow_node('worker',
	conf => "workflow.retry_base_delay_ms = 0\n");
my $dsn = $node->connstr('postgres');
my $json = JSON::PP->new->canonical;

# ---- helpers ----------------------------------------------------------------

sub find_worker
{
	for my $d (split /:/, $ENV{PATH})
	{
		return "$d/workflow-worker" if -x "$d/workflow-worker";
	}
	die "workflow-worker is not on the PATH";
}

sub q1
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

sub write_script
{
	my ($name, $body) = @_;
	my $path = "$dir/$name";
	open(my $fh, '>', $path) or die "cannot write $path: $!";
	print $fh "#!/bin/sh\nDIR='$dir'\n$body";
	close($fh);
	chmod(0755, $path);
	return $path;
}

sub slurp_or_empty
{
	my ($path) = @_;
	return -e $path ? slurp_file($path) : '';
}

# start_worker(NAME, ARGS...): a worker process; its stderr goes to NAME.log.
sub start_worker
{
	my ($name, @args) = @_;
	my $log = "$dir/$name.log";
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>', "$dir/$name.out");
		open(STDERR, '>', $log);
		exec($WORKER, @args) or POSIX::_exit(127);
	}
	return { pid => $pid, log => $log, name => $name };
}

# wait_exit(W, SECONDS): its exit status, or undef (then it is killed).
sub wait_exit
{
	my ($w, $timeout) = @_;
	my $deadline = time + $timeout;
	while (time < $deadline)
	{
		return $? >> 8 if waitpid($w->{pid}, WNOHANG) == $w->{pid};
		usleep(50_000);
	}
	kill 'KILL', $w->{pid};
	waitpid($w->{pid}, 0);
	diag("$w->{name} did not exit within $timeout s");
	return undef;
}

sub stop_worker
{
	my ($w, $timeout) = @_;
	kill 'TERM', $w->{pid};
	return wait_exit($w, $timeout // 30);
}

sub wait_for_file
{
	my ($path, $timeout) = @_;
	my $deadline = time + $timeout;
	while (!-e $path)
	{
		return 0 if time > $deadline;
		usleep(20_000);
	}
	return 1;
}

sub wait_until_sql
{
	my ($sql, $timeout) = @_;
	my $deadline = time + $timeout;
	while (time < $deadline)
	{
		return 1 if q1($sql) eq 't';
		usleep(100_000);
	}
	diag("timed out waiting for: $sql");
	return 0;
}

sub wait_until_sql_db
{
	my ($db, $sql, $timeout) = @_;
	my $deadline = time + $timeout;
	while (time < $deadline)
	{
		return 1 if $node->safe_psql($db, $sql) eq 't';
		usleep(100_000);
	}
	diag("timed out waiting for: $sql");
	return 0;
}

# process_gone(PID, SECONDS): the process ended (a zombie whose parent
# exited counts as ended: reaping it is init's business) within SECONDS.
sub process_gone
{
	my ($pid, $timeout) = @_;
	my $deadline = time + $timeout;
	while (1)
	{
		return 1 if !kill(0, $pid);
		my $stat = slurp_or_empty("/proc/$pid/stat");
		return 1 if $stat =~ /^\d+ \(.*\) Z/s;
		return 0 if time > $deadline;
		usleep(50_000);
	}
}

sub enqueue
{
	my ($type, $payload, %o) = @_;
	my $extra = join('', map { ", $_ => $o{$_}" } sort keys %o);
	return q1("SELECT workflow.enqueue('$type', '$payload'$extra)");
}

sub job_row
{
	my ($id, $cols) = @_;
	return q1("SELECT $cols FROM workflow.job_queue WHERE id = '$id'");
}

# run_worker_sync(ARGS...): (exit status, stdout, stderr) of a worker that
# is expected to exit at once.
sub run_worker_sync
{
	my (@args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $WORKER, @args ], '<', \'', '>', \$out, '2>', \$err,
		IPC::Run::timeout(30));
	return ($? >> 8, $out, $err);
}

# ---- 1. one worker, many cases -----------------------------------------------

my $basic_sh = write_script('basic.sh', <<'EOF');
case "$WORKFLOW_JOB_TYPE" in
t.json) cat > /dev/null
	echo "  {\"ok\": true, \"env\": \"${WORKFLOW_STEP_KEY-unset}/${WORKFLOW_RUN_ID-unset}\"}  " ;;
t.text) cat > /dev/null; printf 'hello\nworld \377\n\n' ;;
t.empty) cat > /dev/null ;;
t.echo) cat ;;
t.fail) i=0
	while [ $i -lt 300 ]; do echo "noise line $i" >&2; i=$((i + 1)); done
	echo "the last words" >&2; exit 7 ;;
t.retry) if [ "$WORKFLOW_ATTEMPT" = 1 ]; then echo "attempt 1 fails" >&2; exit 1; fi
	echo "{\"attempt\": $WORKFLOW_ATTEMPT}" ;;
t.long) echo started > "$DIR/long.started"; sleep 5; echo '{"slept": 5}' ;;
t.segv) kill -SEGV $$ ;;
t.kill9) kill -9 $$ ;;
t.nostdin) echo '"did not read"' ;;
t.big) head -c 1100000 /dev/zero | tr '\0' 'a' ;;
t.huge) echo '1e1000000' ;;
t.cancel) echo $$ > "$DIR/cancel.pid"; exec sleep 60 ;;
esac
EOF

my %job;
$job{json} = enqueue('t.json', '{}');
$job{text} = enqueue('t.text', '{}');
$job{empty} = enqueue('t.empty', '{}');
$job{echo} = enqueue('t.echo', '{"a": [1, 2.5, {"b": null}], "s": "caf\u00e9 \"q\""}');
$job{fail} = enqueue('t.fail', '{}', max_attempts => 1);
$job{retry} = enqueue('t.retry', '{}', max_attempts => 3);
$job{long} = enqueue('t.long', '{}', timeout_seconds => 2);
$job{segv} = enqueue('t.segv', '{}', max_attempts => 1);
$job{kill9} = enqueue('t.kill9', '{}', max_attempts => 1);
$job{big} = enqueue('t.big', '{}', max_attempts => 3);
$job{huge} = enqueue('t.huge', '{}', max_attempts => 3);
$job{nostdin} = q1(
	q{SELECT workflow.enqueue('t.nostdin', jsonb_build_object('blob', repeat('x', 900000)))});
$job{cancel} = enqueue('t.cancel', '{}', timeout_seconds => 3);

my $basic = start_worker('basic', '--dsn', $dsn, '--exec', "sh $basic_sh",
	'--concurrency', '4', '--poll', '200',
	map { ('--type', "t.$_") } qw(json text empty echo fail retry long segv kill9
	  nostdin big huge cancel));

# the lease of t.long is 2 s and its command sleeps 5 s: past its first
# lease, reap_expired must find it extended by the heartbeats
ok(wait_for_file("$dir/long.started", 30), 't.long started');
sleep(3);
is(q1('SELECT workflow.reap_expired()'), '0',
	'reap_expired during the long command expires nothing');
is(job_row($job{long}, q{status || ' ' || attempt || ' ' || (leased_until > now())}),
	'RUNNING 1 true', 'the long job is still RUNNING on attempt 1, its lease in the future');

# a job canceled while its command runs: the heartbeat learns it, the
# command is killed
ok(wait_for_file("$dir/cancel.pid", 30), 't.cancel started');
my $cancel_pid = slurp_file("$dir/cancel.pid");
chomp $cancel_pid;
q1("SELECT workflow.cancel_job('$job{cancel}', 'no longer wanted')");
ok(process_gone($cancel_pid, 15), 'the command of a canceled job was killed');

my @all = values %job;
my $all_list = join(',', map { "'$_'" } @all);
ok( wait_until_sql(
		"SELECT count(*) = 0 FROM workflow.job_queue WHERE id IN ($all_list)"
		  . " AND status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED')",
		60),
	'every job of the first worker ended');

is(job_row($job{json}, 'status'), 'SUCCEEDED', 'JSON stdout: SUCCEEDED');
is(job_row($job{json}, q{output = '{"ok": true, "env": "unset/unset"}'}), 't',
	'JSON stdout is the output; a plain job has no WORKFLOW_STEP_KEY or WORKFLOW_RUN_ID');
is( job_row($job{text}, q{status || ' ' || (output = to_jsonb(E'hello\nworld \uFFFD'::text))}),
	'SUCCEEDED true',
	'non-JSON stdout: a JSON string, trailing whitespace trimmed, invalid UTF-8 replaced');
is(job_row($job{empty}, q{status || ' ' || (output IS NULL)}), 'SUCCEEDED true',
	'empty stdout: NULL output');
is(job_row($job{echo}, q{status || ' ' || (output = payload)}), 'SUCCEEDED true',
	'the payload is the command\'s stdin');
is( job_row($job{fail}, q{status || ' ' || attempt || ' ' || last_error_code}),
	'FAILED 1 command.exit_7', 'exit status 7: command.exit_7');
my $msg = job_row($job{fail}, 'last_error_message');
like($msg, qr/the last words\z/, 'the error message ends with the end of stderr');
ok(length($msg) <= 2100 && $msg !~ /noise line 0\n/,
	'the error message is only the tail of stderr (' . length($msg) . ' bytes)');
is( job_row($job{retry}, q{status || ' ' || attempt || ' ' || output::text}),
	'SUCCEEDED 2 {"attempt": 2}', 'a command failing on attempt 1 succeeds on attempt 2');
is(job_row($job{long}, q{status || ' ' || attempt || ' ' || output::text}),
	'SUCCEEDED 1 {"slept": 5}', 'the command that outlived its lease succeeded on attempt 1');
is(job_row($job{segv}, q{status || ' ' || last_error_code}),
	'FAILED command.signal_11', 'SIGSEGV: command.signal_11');
is(job_row($job{kill9}, q{status || ' ' || last_error_code}),
	'FAILED command.signal_9', 'SIGKILL: command.signal_9');
is( job_row($job{big}, q{status || ' ' || attempt || ' ' || last_error_code}),
	'FAILED 1 command.output_too_large',
	'stdout above 1 MB: failed for good with command.output_too_large');
is( job_row($job{huge}, q{status || ' ' || attempt || ' ' || last_error_code}),
	'FAILED 1 command.output_rejected',
	'valid JSON that jsonb refuses (1e1000000): failed for good with command.output_rejected');
is(job_row($job{nostdin}, q{status || ' ' || output::text}),
	'SUCCEEDED "did not read"', 'a command that does not read a 900 kB stdin succeeds');
is(job_row($job{cancel}, 'status'), 'CANCELED', 'the canceled job stays CANCELED');

my $basic_log = slurp_file($basic->{log});
like(
	$basic_log,
	qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ workflow-worker: job $job{json} t\.json succeeded in \d+\.\d\d s$/m,
	'one log line per outcome: time, job, type, outcome, duration');
like($basic_log, qr/job $job{cancel} t\.cancel dropped: no longer ours \(job\.canceled\)/,
	'the canceled job is logged as dropped');
is(stop_worker($basic), 0, 'an idle worker exits 0 on SIGTERM');

# ---- 2. SIGTERM and the grace period ----------------------------------------

my $grace_sh = write_script('grace.sh', <<'EOF');
touch "$DIR/grace.$WORKFLOW_JOB_ID"; sleep 2; echo '"graceful"'
EOF
my @grace = map { enqueue('t.grace', "{\"n\": $_}") } 1 .. 2;
# --batch 2 --concurrency 1: both claimed at once, one started
my $gw = start_worker('grace', '--dsn', $dsn, '--type', 't.grace',
	'--exec', "sh $grace_sh", '--batch', '2', '--concurrency', '1',
	'--grace', '20');
ok(wait_for_file("$dir/grace.$grace[0]", 30), 'the first grace job started');
is(q1("SELECT count(*) FROM workflow.job_queue WHERE job_type = 't.grace' AND status = 'RUNNING'"),
	'2', 'both grace jobs are claimed');
is(stop_worker($gw, 30), 0, 'SIGTERM with a command running: exit 0');
is(job_row($grace[0], q{status || ' ' || output::text}), 'SUCCEEDED "graceful"',
	'the command that finished within the grace period was completed');
is(job_row($grace[1], q{status || ' ' || attempt || ' ' || (lease_token IS NULL)}),
	'QUEUED 0 true', 'the claimed job not started was released');

my $slow_sh = write_script('slow.sh', <<'EOF');
if [ ! -e "$DIR/slow.once" ]; then touch "$DIR/slow.once"; sleep 30; fi
echo '"second time"'
EOF
my $slow = enqueue('t.slow', '{}', max_attempts => 1);
my $sw = start_worker('slow', '--dsn', $dsn, '--type', 't.slow',
	'--exec', "sh $slow_sh", '--grace', '1');
ok(wait_for_file("$dir/slow.once", 30), 'the slow command started');
my $t0 = time;
is(stop_worker($sw, 30), 0, 'SIGTERM with a command exceeding the grace period: exit 0');
ok(time - $t0 < 10, 'the worker stopped after the grace period, not after the command');
is(job_row($slow, q{status || ' ' || attempt || ' ' || (lease_token IS NULL)}),
	'QUEUED 0 true', 'the killed command\'s job was released: QUEUED, attempt unchanged');
like(slurp_file($sw->{log}), qr/job $slow t\.slow released/, 'the release is logged');
my $fw = start_worker('finish', '--dsn', $dsn, '--type', 't.slow', '--type', 't.grace',
	'--exec', "if [ \"\$WORKFLOW_JOB_TYPE\" = t.slow ]; then sh $slow_sh; else echo '\"later\"'; fi",
	'--concurrency', '2');
ok( wait_until_sql(
		"SELECT count(*) = 2 FROM workflow.job_queue WHERE id IN ('$slow', '$grace[1]')"
		  . " AND status = 'SUCCEEDED'", 30),
	'a later worker finished both released jobs: none was lost');
is(job_row($slow, q{attempt || ' ' || output::text}), '1 "second time"',
	'the released job ran again on attempt 1');
is(stop_worker($fw), 0, 'that worker exits 0');

# ---- 3. bad flags, unreachable database ---------------------------------------

for my $case (
	[ 'no --exec', '--type', 'x' ],
	[ 'no --type', '--exec', 'true' ],
	[ '--concurrency 0', '--type', 'x', '--exec', 'true', '--concurrency', '0' ],
	[ '--batch 1001', '--type', 'x', '--exec', 'true', '--batch', '1001' ],
	[ 'an unknown flag', '--type', 'x', '--exec', 'true', '--bogus' ],
	[ 'a bad --organization', '--type', 'x', '--exec', 'true', '--organization', 'acme' ])
{
	my ($label, @args) = @$case;
	my ($rc, $out, $err) = run_worker_sync('--dsn', $dsn, @args);
	is($rc, 2, "bad flags ($label): exit 2");
	like($err, qr/\Aworkflow-worker: [^\n]+\n\z/, "bad flags ($label): one line on stderr");
}
{
	my ($rc, $out, $err) = run_worker_sync('--help');
	ok($rc == 0 && $out =~ /--concurrency/ && $out =~ /--with-inputs/, '--help: exit 0, the flags');
	my $host = $node->host;
	($rc, $out, $err) = run_worker_sync('--dsn', "host=$host port=1 dbname=postgres",
		'--type', 'x', '--exec', 'true');
	is($rc, 2, 'an unreachable database: exit 2');
	like($err, qr/\Aworkflow-worker: cannot connect to the database: [^\n]+\n\z/,
		'an unreachable database: one line on stderr');
}

# ---- 4. the server restarted under a worker -----------------------------------

my $STREAM = 300;
my $stream_sh = write_script('stream.sh', <<'EOF');
printf '%s\n' "$WORKFLOW_JOB_ID" >> "$DIR/stream.runs"; sleep 0.05; echo '{}'
EOF
q1("SELECT count(workflow.enqueue('t.stream', jsonb_build_object('n', n), timeout_seconds => 8))"
	  . " FROM generate_series(1, $STREAM) n");
my $rw = start_worker('restart', '--dsn', $dsn, '--type', 't.stream',
	'--exec', "sh $stream_sh", '--concurrency', '4', '--quiet');
ok( wait_until_sql(
		"SELECT count(*) >= 60 FROM workflow.job_queue WHERE job_type = 't.stream' AND status = 'SUCCEEDED'",
		60),
	'the stream is being worked');
$node->stop('immediate');
sleep(1);
$node->start;
# leases whose claim was lost with the crash come back through the reaper
ok( wait_until_sql(
		"SELECT workflow.reap_expired() >= 0 AND count(*) = $STREAM FROM workflow.job_queue"
		  . " WHERE job_type = 't.stream' AND status = 'SUCCEEDED'", 120),
	"after the restart every one of the $STREAM stream jobs is SUCCEEDED");
{
	my %runs;
	$runs{$_}++ for split /\n/, slurp_or_empty("$dir/stream.runs");
	my $ids = q1("SELECT string_agg(id::text, ' ') FROM workflow.job_queue WHERE job_type = 't.stream'");
	my @missing = grep { !$runs{$_} } split / /, $ids;
	is(scalar(@missing), 0, 'every stream job\'s command ran');
	# A command runs twice only when its completion was never acknowledged:
	# at most the commands running at the crash (--concurrency 4), whose
	# lease could run out and be reaped while the server was away.  A claim
	# whose answer the crash ate never ran its command: it only waits for
	# its lease to expire.
	my @twice = grep { $runs{$_} == 2 } keys %runs;
	my @more = grep { $runs{$_} > 2 } keys %runs;
	ok(@twice <= 4 && !@more,
		'no command ran again except the few in flight at the crash (' . scalar(@twice) . ' twice)');
	is(scalar(keys %runs), $STREAM, 'the commands ran for stream jobs only');
}
my $rlog = slurp_file($rw->{log});
like($rlog, qr/connection lost .*; reconnecting/, 'the worker saw the connection go');
like($rlog, qr/reconnected after \d+\.\d s/, 'and reconnected');
is(stop_worker($rw), 0, 'the restarted-under worker still exits 0 on SIGTERM');

# ---- 5. least privilege, --concurrency 4, 1,000 jobs ----------------------------

# the role's default isolation level is one the engine refuses: the
# worker's session sets its own
q1("CREATE ROLE wkr LOGIN; GRANT workflow_worker TO wkr;"
	  . " ALTER ROLE wkr SET default_transaction_isolation = 'serializable'");
my $wdsn = $node->connstr('postgres') . ' user=wkr';
my $thousand_sh = write_script('thousand.sh', <<'EOF');
printf '%s\n' "$WORKFLOW_JOB_ID" >> "$DIR/thousand.runs"
EOF
q1("SELECT count(workflow.enqueue('t.many', jsonb_build_object('n', n))) FROM generate_series(1, 1000) n");
my $cw = start_worker('thousand', '--dsn', $wdsn, '--type', 't.many',
	'--exec', "sh $thousand_sh", '--concurrency', '4', '--quiet');
ok( wait_until_sql(
		"SELECT count(*) = 1000 FROM workflow.job_queue WHERE job_type = 't.many' AND status = 'SUCCEEDED'",
		150),
	'--concurrency 4 as a workflow_worker-only role: 1,000 jobs SUCCEEDED');
{
	my @lines = split /\n/, slurp_or_empty("$dir/thousand.runs");
	my %seen;
	$seen{$_}++ for @lines;
	is(scalar(@lines), 1000, '1,000 runs of the command');
	is(scalar(keys %seen), 1000, '1,000 distinct job ids: each job ran exactly once');
	is( q1("SELECT count(*) FROM workflow.job_queue WHERE job_type = 't.many' AND worker_id IS NOT NULL"
			  . " AND id = ANY ('{" . join(',', keys %seen) . "}'::uuid[])"),
		'1000', 'the ids are those of the jobs');
}
is(stop_worker($cw), 0, 'the least-privilege worker exits 0');

# ---- 6. --batch ---------------------------------------------------------------

my $batch_sh = write_script('batch.sh', <<'EOF');
p=$(cat)
case "$p" in *fail*) echo "failing on purpose" >&2; exit 5 ;; esac
printf '%s\n' "$WORKFLOW_JOB_ID" >> "$DIR/batch.runs"
printf '%s\n' "$p"
EOF
q1(q{SELECT count(workflow.enqueue('t.batch', CASE WHEN n % 40 = 0 THEN '{"fail": true}'::jsonb
	ELSE jsonb_build_object('n', n) END, max_attempts => 1)) FROM generate_series(1, 200) n});
my $bw = start_worker('batch', '--dsn', $wdsn, '--type', 't.batch',
	'--exec', "sh $batch_sh", '--batch', '50', '--concurrency', '4', '--quiet');
ok( wait_until_sql(
		"SELECT count(*) = 0 FROM workflow.job_queue WHERE job_type = 't.batch' AND status NOT IN ('SUCCEEDED', 'FAILED')",
		60),
	'--batch 50: every job ended');
is( q1("SELECT string_agg(status || ':' || cnt, ' ' ORDER BY status::text) FROM (SELECT status, count(*) AS cnt"
		  . " FROM workflow.job_queue WHERE job_type = 't.batch' GROUP BY status) s"),
	'FAILED:5 SUCCEEDED:195', '--batch: 195 SUCCEEDED, 5 FAILED');
is( q1("SELECT count(*) FROM workflow.job_queue WHERE job_type = 't.batch' AND status = 'SUCCEEDED'"
		  . " AND output = payload"),
	'195', '--batch: each success has its stdout as output');
is( q1("SELECT count(*) FROM workflow.job_queue WHERE job_type = 't.batch' AND status = 'FAILED'"
		  . " AND last_error_code = 'command.exit_5' AND last_error_message = 'failing on purpose'"),
	'5', '--batch: failures carry the exit status and stderr');
{
	my @lines = split /\n/, slurp_or_empty("$dir/batch.runs");
	my %seen;
	$seen{$_}++ for @lines;
	ok(@lines == 195 && keys(%seen) == 195, '--batch: each success ran exactly once');
}
is(stop_worker($bw), 0, 'the batch worker exits 0');

# ---- 7. --with-inputs, a run's steps --------------------------------------------

my $inputs_sh = write_script('inputs.sh', <<'EOF');
cat > "$DIR/in_$WORKFLOW_STEP_KEY.json"
printf '%s %s\n' "$WORKFLOW_RUN_ID" "$WORKFLOW_STEP_KEY" > "$DIR/env_$WORKFLOW_STEP_KEY"
echo "{\"from\": \"$WORKFLOW_STEP_KEY\"}"
EOF
my $run = q1(
	q{SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t.in"},
	  {"key": "b", "job_type": "t.in", "payload": {"p": 1}, "depends_on": ["a"]}]}',
	  input => '{"customer": 7}')});
my $iw = start_worker('inputs', '--dsn', $wdsn, '--type', 't.in',
	'--exec', "sh $inputs_sh", '--with-inputs');
ok(wait_until_sql("SELECT status = 'SUCCEEDED' FROM workflow.workflow_runs WHERE id = '$run'", 30),
	'--with-inputs: the run SUCCEEDED');
{
	my $in_b = eval { $json->decode(slurp_or_empty("$dir/in_b.json")) };
	is( $json->encode($in_b // {}),
		'{"inputs":{"input":{"customer":7},"steps":{"a":{"from":"a"}}},"payload":{"p":1}}',
		'--with-inputs: stdin is the payload and the inputs with the prerequisite\'s output');
	is(slurp_or_empty("$dir/env_b"), "$run b\n",
		'a run\'s step gets WORKFLOW_RUN_ID and WORKFLOW_STEP_KEY');
}
is(stop_worker($iw), 0, 'the inputs worker exits 0');

# ---- 8. a database gone for longer than --reconnect -------------------------------

my $gone_sh = write_script('gone.sh', <<'EOF');
echo $$ > "$DIR/gone.pid"; exec sleep 60
EOF
my $gone = enqueue('t.gone', '{}', timeout_seconds => 5);
my $gw2 = start_worker('gone', '--dsn', $dsn, '--type', 't.gone',
	'--exec', "sh $gone_sh", '--reconnect', '2');
ok(wait_for_file("$dir/gone.pid", 30), 'the command of t.gone started');
my $gone_pid = slurp_file("$dir/gone.pid");
chomp $gone_pid;
$node->stop('fast');
is(wait_exit($gw2, 30), 2, 'the database gone for longer than --reconnect: exit 2');
ok(process_gone($gone_pid, 5), 'its command was killed');
like(slurp_file($gw2->{log}), qr/workflow-worker: giving up after \d+ s without the database: [^\n]+\n\z/,
	'one line says why, last');
$node->start;
# the lease of the abandoned job runs out and the job comes back
ok( wait_until_sql(
		"SELECT workflow.reap_expired() >= 0 AND status = 'QUEUED' AND attempt = 1"
		  . " FROM workflow.job_queue WHERE id = '$gone'", 30),
	'the abandoned job is QUEUED again once its lease expired');
q1("SELECT workflow.cancel_job('$gone')");

# ---- 9. no busy loop while the database is away -------------------------------

# cpu_seconds(PID): user + system CPU time of a process so far
sub cpu_seconds
{
	my ($pid) = @_;
	my $stat = slurp_or_empty("/proc/$pid/stat");
	$stat =~ s/^.*\) //s;
	my @f = split / /, $stat;
	# after "pid (comm) ": state is field 0, utime 11, stime 12
	return ($f[11] + $f[12]) / POSIX::sysconf(POSIX::_SC_CLK_TCK);
}

my $idle_sh = write_script('idle.sh', <<'EOF');
touch "$DIR/idle.started"; sleep 1; echo '{"idle": true}'
EOF
my $idle = enqueue('t.idle', '{}', timeout_seconds => 9);
my $iw2 = start_worker('idle', '--dsn', $dsn, '--type', 't.idle',
	'--exec', "sh $idle_sh");
ok(wait_for_file("$dir/idle.started", 30), 'the command of t.idle started');
my $cpu0 = cpu_seconds($iw2->{pid});
$node->stop('fast');
# the command ends while the server is away: its report and the heartbeats
# wait for the reconnection
sleep(3);
my $cpu = cpu_seconds($iw2->{pid}) - $cpu0;
$node->start;
ok($cpu < 0.5, "the worker idles while the database is away ($cpu s of CPU in 3 s)");
ok(wait_until_sql("SELECT status = 'SUCCEEDED' FROM workflow.job_queue WHERE id = '$idle'", 30),
	'the job that ended while the database was away is SUCCEEDED after the reconnection');
is(stop_worker($iw2), 0, 'that worker exits 0');

# ---- 10. finished jobs keep their lease while they wait for the batch --------------

# --batch 4 --concurrency 1: the first outcome waits for the fourth, longer
# than the 3 s lease; reap_expired meanwhile must find every lease extended
my $lease_sh = write_script('lease.sh', <<'EOF');
sleep 1.5; printf '%s\n' "$WORKFLOW_JOB_ID" >> "$DIR/lease.runs"; echo '{}'
EOF
my @lease = map { enqueue('t.lease', "{\"n\": $_}", timeout_seconds => 3) } 1 .. 4;
my $lw = start_worker('lease', '--dsn', $dsn, '--type', 't.lease',
	'--exec', "sh $lease_sh", '--batch', '4', '--concurrency', '1');
{
	my $deadline = time + 40;
	my $reaped = 0;
	while (time < $deadline)
	{
		$reaped += q1('SELECT workflow.reap_expired()');
		last if q1("SELECT count(*) = 4 FROM workflow.job_queue WHERE job_type = 't.lease'"
			  . " AND status = 'SUCCEEDED'") eq 't';
		usleep(200_000);
	}
	is($reaped, 0, '--batch: no lease expired while finished jobs waited for the batch');
}
is( q1("SELECT string_agg(status || ' ' || attempt, ',') FROM workflow.job_queue WHERE job_type = 't.lease'"),
	'SUCCEEDED 1,SUCCEEDED 1,SUCCEEDED 1,SUCCEEDED 1', '--batch: the four jobs SUCCEEDED on attempt 1');
{
	my @lines = split /\n/, slurp_or_empty("$dir/lease.runs");
	my %seen;
	$seen{$_}++ for @lines;
	ok(@lines == 4 && keys(%seen) == 4, '--batch: each command ran once');
}
is(stop_worker($lw), 0, 'the lease worker exits 0');
unlike(slurp_file($lw->{log}), qr/dropped/, '--batch: no outcome was dropped');

# ---- 11. an error of the claim is not blamed on the output ------------------------

# a trigger makes the claim of t.m5bad* fail: with a data exception
# (SQLSTATE 22023) for t.m5bad, any other error for t.m5bad2
q1(q{CREATE FUNCTION public.block_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.status = 'RUNNING' AND NEW.job_type = 't.m5bad' THEN
		RAISE EXCEPTION 'no claim of t.m5bad' USING ERRCODE = '22023';
	ELSIF NEW.status = 'RUNNING' AND NEW.job_type = 't.m5bad2' THEN
		RAISE EXCEPTION 'no claim of t.m5bad2';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER block_claim BEFORE UPDATE ON workflow.job_queue
	FOR EACH ROW EXECUTE FUNCTION public.block_claim()});
my $m5ok = enqueue('t.m5ok', '{}', max_attempts => 1);
my $m5bad = enqueue('t.m5bad', '{}');
my @m5ok2 = map { enqueue('t.m5ok2', "{\"n\": $_}", max_attempts => 1) } 1 .. 2;
my $m5bad2 = enqueue('t.m5bad2', '{}');
# complete_and_claim: the claim half fails with a data exception
my $m5w = start_worker('claimerr', '--dsn', $dsn, '--type', 't.m5ok', '--type', 't.m5bad',
	'--exec', "sleep 0.5; echo '\"fine\"'");
# --batch: the claim of the batch fails with another error
my $m5bw = start_worker('claimerr2', '--dsn', $dsn, '--type', 't.m5ok2', '--type', 't.m5bad2',
	'--exec', "sleep 0.5; echo '\"fine\"'", '--batch', '2', '--concurrency', '2');
ok( wait_until_sql(
		"SELECT count(*) = 0 FROM workflow.job_queue WHERE job_type IN ('t.m5ok', 't.m5ok2')"
		  . " AND status NOT IN ('SUCCEEDED', 'FAILED')", 20),
	'the jobs whose report carried a failing claim ended');
is(job_row($m5ok, q{status || ' ' || output::text}), 'SUCCEEDED "fine"',
	'complete_and_claim: a claim error is not blamed on the output');
is( q1("SELECT string_agg(status || ' ' || output::text, ',') FROM workflow.job_queue"
		  . " WHERE job_type = 't.m5ok2'"),
	'SUCCEEDED "fine",SUCCEEDED "fine"', '--batch: the outcomes are reported without the failing claim');
is(stop_worker($m5w), 0, 'the first claim-error worker exits 0');
is(stop_worker($m5bw), 0, 'the second claim-error worker exits 0');
like(slurp_file($m5w->{log}), qr/with a claim: ERROR:  no claim of t\.m5bad .*; reporting it alone/,
	'the claim error is logged');
q1("DROP TRIGGER block_claim ON workflow.job_queue; DROP FUNCTION public.block_claim();"
	  . " SELECT workflow.cancel_job('$m5bad'), workflow.cancel_job('$m5bad2')");

# ---- 12. a LATIN1 database ----------------------------------------------------------

q1("CREATE DATABASE lat ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
$node->safe_psql('lat', 'CREATE EXTENSION workflow');
my $enc_sh = write_script('enc.sh', <<'EOF');
cat > "$DIR/enc.in"; printf '{"s": "\303\251"}\n'
EOF
my $enc = $node->safe_psql('lat',
	q{SELECT workflow.enqueue('t.enc', jsonb_build_object('s', chr(233)))});
my $ew = start_worker('enc', '--dsn', $node->connstr('lat'), '--type', 't.enc',
	'--exec', "sh $enc_sh");
ok( wait_for_file("$dir/enc.in", 30)
	  && wait_until_sql_db('lat', "SELECT status = 'SUCCEEDED' FROM workflow.job_queue WHERE id = '$enc'", 30),
	'LATIN1 database: the job SUCCEEDED');
is(slurp_file("$dir/enc.in"), "{\"s\": \"\xc3\xa9\"}\n", 'LATIN1 database: the command reads its payload in UTF-8');
is( $node->safe_psql('lat',
		"SELECT output->>'s' = chr(233) FROM workflow.job_queue WHERE id = '$enc'"),
	't', 'LATIN1 database: UTF-8 stdout is stored as the same characters');
is(stop_worker($ew), 0, 'the LATIN1 worker exits 0');
verify_is_clean($node, 'the LATIN1 database', 'lat');

# ---- 13. a command that ends just as the grace period does ------------------------

# --grace 0, --batch 2 --concurrency 1: at SIGTERM the job not started is
# released, and a trigger makes that release take 2 s; the running command
# ends meanwhile, before the grace period's SIGTERM: its outcome counts
q1(q{CREATE FUNCTION public.slow_release() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF OLD.status = 'RUNNING' AND NEW.status = 'QUEUED' AND NEW.job_type = 't.l5' THEN
		RAISE NOTICE 'slow release';
		PERFORM pg_sleep(2);
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER slow_release BEFORE UPDATE ON workflow.job_queue
	FOR EACH ROW EXECUTE FUNCTION public.slow_release()});
my $l5_sh = write_script('l5.sh', <<'EOF');
touch "$DIR/l5.$WORKFLOW_JOB_ID"; sleep 1; echo '"ended on its own"'
EOF
my @l5 = map { enqueue('t.l5', "{\"n\": $_}") } 1 .. 2;
my $l5w = start_worker('l5', '--dsn', $dsn, '--type', 't.l5', '--exec', "sh $l5_sh",
	'--batch', '2', '--concurrency', '1', '--grace', '0');
ok(wait_for_file("$dir/l5.$l5[0]", 30), 'the first t.l5 command started');
is(stop_worker($l5w, 30), 0, 'SIGTERM with --grace 0: exit 0');
is(job_row($l5[0], q{status || ' ' || output::text}), 'SUCCEEDED "ended on its own"',
	'a command that ended before the SIGTERM of the grace period is reported, not released');
is(job_row($l5[1], q{status || ' ' || attempt}), 'QUEUED 0', 'the job not started was released');
my $l5_log = slurp_file($l5w->{log});
like($l5_log, qr/^\S+Z workflow-worker: server: NOTICE:  slow release/m,
	'a server notice is logged in the worker\'s format');
unlike($l5_log, qr/^NOTICE/m, 'no bare notice line');
q1("DROP TRIGGER slow_release ON workflow.job_queue; DROP FUNCTION public.slow_release();"
	  . " SELECT workflow.cancel_job('$l5[1]')");

verify_is_clean($node, 'after the workers');
$node->stop;
done_testing();
