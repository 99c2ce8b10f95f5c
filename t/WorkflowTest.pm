# Shared helpers for the workflow TAP tests (t/*.pl).
#
# - new_workflow_node: a cluster with the extension created in "postgres";
# - verify_is_clean: the closing check of every test, count(*) of verify();
# - layered_definition: a deterministic layered DAG for start_run;
# - WorkflowTest::Workers: a pool of worker sessions, each a psql process
#   driven from this (single) Perl process, that claim and complete jobs in
#   autocommit and log every acknowledged completion to a file.
#
# A completion counts as acknowledged only when psql has run the statement
# to its end (commit included, since every statement is autocommitted) and
# reports no error: each command is followed by
#   \if :ERROR \echo FAIL \else \echo OK \endif
# and psql prints the marker only once the server has answered
# ReadyForQuery, that is after the commit returned.

package WorkflowTest;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(new_workflow_node verify_is_clean acked_are_present
  layered_definition json_text);

my $json = JSON::PP->new->canonical;

# json_text(REF): canonical JSON text.
sub json_text
{
	my ($ref) = @_;
	return $json->encode($ref);
}

# new_workflow_node(NAME, init => {...}, conf => "..."): initialize and start
# a cluster, then CREATE EXTENSION workflow in database postgres.
sub new_workflow_node
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opts{init} // {} });
	# log_statement = all (set by Cluster.pm) would log every worker call.
	$node->append_conf('postgresql.conf',
		"log_statement = none\nlog_min_duration_statement = -1\n"
		  . ($opts{conf} // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION workflow');
	return $node;
}

# verify_is_clean(NODE, LABEL[, DB]): verify() finds no broken invariant.
sub verify_is_clean
{
	my ($node, $label, $db) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	$db //= 'postgres';
	my $n = $node->safe_psql($db, 'SELECT count(*) FROM workflow.verify()');
	is($n, '0', "$label: workflow.verify() reports no broken invariant")
	  or diag($node->safe_psql($db,
			'SELECT * FROM workflow.verify() LIMIT 20'));
	return $n eq '0';
}

# acked_are_present(NODE, LABEL, ACKED): every completion a worker saw
# acknowledged (ACKED: job id => worker name) is SUCCEEDED on NODE, with
# that worker's output, and so is its step.
sub acked_are_present
{
	my ($node, $label, $acked) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $list = join(',', map { "('$_','$acked->{$_}')" } sort keys %$acked);
	my $bad = $node->safe_psql(
		'postgres', qq{
SELECT a.id || ' ' || coalesce(j.status::text, 'missing') || ' '
       || coalesce(j.output ->> 'worker', '-') || ' ' || coalesce(s.status::text, '-')
  FROM (VALUES $list) AS a(id, worker)
  LEFT JOIN workflow.job_queue j ON j.id = a.id::uuid
  LEFT JOIN workflow.workflow_steps s ON s.id = j.workflow_step_id
 WHERE j.status IS DISTINCT FROM 'SUCCEEDED'
    OR j.output ->> 'worker' IS DISTINCT FROM a.worker
    OR s.status IS DISTINCT FROM 'SUCCEEDED'});
	return is($bad, '',
		"$label: every acknowledged completion (" . scalar(keys %$acked)
		  . ") is SUCCEEDED with its worker's output");
}

# layered_definition(NAME, SEED, WIDTHS...): a DAG whose layer k has
# WIDTHS[k] job steps; a step of layer k > 0 depends on 1 to 3 steps of
# layer k - 1, one edge in five ON_TERMINAL, so that runs have fan-outs and
# joins.  The last layer's first step is the result step.  Job timeouts are
# 3 seconds, so that leases held at a crash expire soon.  Deterministic for a
# given SEED.
sub layered_definition
{
	my ($name, $seed, @widths) = @_;
	my $state = $seed * 7919 + 17;
	my $rand = sub {
		my ($n) = @_;
		$state = ($state * 1103515245 + 12345) % 2147483648;
		return int(($state / 2147483648) * $n);
	};
	my (@steps, @prev);
	for my $layer (0 .. $#widths)
	{
		my @cur;
		for my $i (1 .. $widths[$layer])
		{
			my $key = sprintf('l%d_s%02d', $layer, $i);
			my %step = (
				key => $key,
				job_type => "tap.layer$layer",
				payload => { layer => $layer, i => $i },
				timeout_seconds => 3,
				max_attempts => 5);
			if (@prev)
			{
				my %deps;
				# the i-th step always takes one prerequisite so that every
				# step of the previous layer is someone's prerequisite
				$deps{ $prev[ ($i - 1) % @prev ] } = 1;
				my $extra = $rand->(3);
				$deps{ $prev[ $rand->(scalar @prev) ] } = 1 for 1 .. $extra;
				$step{depends_on} = [
					map {
						$rand->(5) == 0
						  ? { step => $_, release => 'on_terminal' }
						  : $_
					} sort keys %deps
				];
			}
			push @steps, \%step;
			push @cur, $key;
		}
		@prev = @cur;
	}
	return json_text(
		{
			name => $name,
			result_step => sprintf('l%d_s01', $#widths),
			steps => \@steps
		});
}

package WorkflowTest::Workers;

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use Time::HiRes qw(usleep time);
use Test::More;

# new(node => NODE, workers => N, log => FILE, prefix => 'w', db => DB)
sub new
{
	my ($class, %p) = @_;
	my $self = bless {
		node => $p{node},
		db => $p{db} // 'postgres',
		log => $p{log},
		workers => [],
		acked => {},       # job id -> worker name
		errors => {},      # first line of an error -> count
		connects => 0,
		retried_acks => 0,
	}, $class;
	open(my $fh, '>>', $self->{log}) or die "cannot open $self->{log}: $!";
	$fh->autoflush(1);
	$self->{log_fh} = $fh;
	for my $i (1 .. ($p{workers} // 4))
	{
		push @{ $self->{workers} },
		  {
			name => ($p{prefix} // 'w') . $i,
			state => 'down',
			next_at => 0,
			seq => 0,
			job => undef,
			in => '',
			out => '',
			err => '',
		  };
	}
	return $self;
}

# set_node(NODE): connect to NODE from the next (re)connection on.
sub set_node
{
	my ($self, $node) = @_;
	$self->{node} = $node;
	return;
}

# paused(BOOL): a paused pool does not (re)connect.
sub paused
{
	my ($self, $paused) = @_;
	$self->{paused} = $paused;
	return;
}

sub acked { return $_[0]->{acked}; }
sub errors { return $_[0]->{errors}; }
sub connects { return $_[0]->{connects}; }
sub retried_acks { return $_[0]->{retried_acks}; }

# n_up(): workers whose psql is running.
sub n_up
{
	my ($self) = @_;
	return scalar grep { $_->{state} ne 'down' } @{ $self->{workers} };
}

# in_flight(): workers with a command sent and not yet answered.
sub in_flight
{
	my ($self) = @_;
	return scalar grep { $_->{pending} } @{ $self->{workers} };
}

# Sends one command with its OK/FAIL marker.
sub _send
{
	my ($self, $w, $kind, $sql) = @_;
	my $seq = ++$w->{seq};
	$w->{pending} = { kind => $kind, seq => $seq };
	$w->{in} .= "$sql;\n"
	  . "\\if :ERROR\n\\echo '\@\@FAIL $seq'\n\\warn '\@\@FAIL $seq'\n"
	  . "\\else\n\\echo '\@\@OK $seq'\n\\warn '\@\@OK $seq'\n\\endif\n";
	return;
}

sub _send_next
{
	my ($self, $w) = @_;
	if ($w->{job})
	{
		my ($id, $token) = @{ $w->{job} }{qw(id token)};
		my $output = qq({"worker": "$w->{name}"});
		$self->_send($w, 'complete',
			"SELECT workflow.complete_job('$id', '$token', '$output')");
	}
	elsif ($w->{reap_due})
	{
		$w->{reap_due} = 0;
		$self->_send($w, 'reap', 'SELECT workflow.reap_expired()');
	}
	else
	{
		$self->_send($w, 'claim',
			"SELECT id || ' ' || lease_token FROM workflow.claim('$w->{name}')"
		);
	}
	return;
}

sub _connect
{
	my ($self, $w) = @_;
	my $node = $self->{node};
	$w->{in} = $w->{out} = $w->{err} = '';
	$w->{pending} = undef;
	$w->{h} = IPC::Run::start(
		[
			$node->installed_command('psql'), '-XAtq',
			'-v', 'ON_ERROR_STOP=0',
			'-d', $node->connstr($self->{db}) . " application_name=$w->{name}",
			'-f', '-'
		],
		'<', \$w->{in}, '>', \$w->{out}, '2>', \$w->{err});
	$w->{state} = 'up';
	$self->{connects}++;
	if ($w->{job})
	{
		# the acknowledgement of this completion was lost with the
		# connection: repeat it (an identical repeat returns quietly)
		$w->{retrying_ack} = 1;
	}
	$self->_send_next($w);
	return;
}

sub _note_error
{
	my ($self, $err) = @_;
	my ($line) = grep { /\S/ } split /\n/, $err;
	$line //= '(no message)';
	$line =~ s/^psql:<stdin>:\d+: //;
	$line =~ s/[0-9a-f]{8}-[0-9a-f-]{27}/<uuid>/g;
	$self->{errors}{$line}++;
	return;
}

# Handles one finished command of worker W.
sub _finished
{
	my ($self, $w, $ok, $result, $err) = @_;
	my $kind = $w->{pending}{kind};
	$w->{pending} = undef;
	if ($kind eq 'claim')
	{
		if (!$ok)
		{
			$self->_note_error($err);
			$w->{next_at} = time + 0.05;
		}
		elsif ($result =~ /^([0-9a-f-]{36}) ([0-9a-f-]{36})$/m)
		{
			$w->{job} = { id => $1, token => $2 };
			$w->{empty} = 0;
		}
		else
		{
			# nothing due: reap now and then, and do not spin
			$w->{reap_due} = 1 if ($w->{empty}++ % 4) == 0;
			$w->{next_at} = time + 0.05;
		}
	}
	elsif ($kind eq 'complete')
	{
		my $id = $w->{job}{id};
		if ($ok)
		{
			$self->{acked}{$id} = $w->{name};
			$self->{retried_acks}++ if $w->{retrying_ack};
			print { $self->{log_fh} } "$id $w->{name}\n";
			$w->{job} = undef;
		}
		else
		{
			$self->_note_error($err);
			# a lost lease or a finished job is given up; anything else
			# (workflow.release_conflict) is retried
			$w->{job} = undef
			  if $err =~ /job\.(lease_lost|canceled|not_running|not_found)/;
			$w->{next_at} = time + 0.02;
		}
		$w->{retrying_ack} = 0;
	}
	elsif ($kind eq 'reap')
	{
		$self->_note_error($err) if !$ok;
	}
	return;
}

# poll(): one round over all workers; returns how many commands finished.
sub poll
{
	my ($self) = @_;
	my $events = 0;
	for my $w (@{ $self->{workers} })
	{
		if ($w->{state} eq 'down')
		{
			next if $self->{paused} || time < $w->{next_at};
			$self->_connect($w);
		}
		my $alive = eval { $w->{h}->pump_nb; 1 };
		# every finished command: its marker on both stdout and stderr
		while ($w->{pending})
		{
			my $seq = $w->{pending}{seq};
			last
			  unless $w->{out} =~ /^\@\@(OK|FAIL) $seq\n/m
			  && $w->{err} =~ /^\@\@(?:OK|FAIL) $seq\n/m;
			my $ok = 0;
			my ($result, $err);
			if ($w->{out} =~ s/\A(.*?)^\@\@(OK|FAIL) $seq\n//ms)
			{
				($result, $ok) = ($1, $2 eq 'OK');
			}
			$w->{err} =~ s/\A(.*?)^\@\@(?:OK|FAIL) $seq\n//ms;
			$err = $1;
			$self->_finished($w, $ok, $result, $err);
			$events++;
		}
		if (!$alive || !$w->{h}->pumpable)
		{
			# psql exited: the server went away (or refused us)
			eval { $w->{h}->finish; };
			$self->_note_error($w->{err}) if $w->{err} =~ /\S/;
			$w->{h} = undef;
			$w->{state} = 'down';
			$w->{pending} = undef;
			$w->{next_at} = time + 0.2;
			next;
		}
		if (!$w->{pending} && time >= $w->{next_at})
		{
			$self->_send_next($w);
		}
	}
	return $events;
}

# run_until(COND, TIMEOUT, WHAT): poll until COND returns true; false (and
# a diagnostic) after TIMEOUT seconds.
sub run_until
{
	my ($self, $cond, $timeout, $what) = @_;
	my $deadline = time + $timeout;
	while (1)
	{
		my $events = $self->poll;
		return 1 if $cond->();
		if (time > $deadline)
		{
			diag("workers: timed out waiting for $what");
			return 0;
		}
		usleep(2_000) unless $events;
	}
}

# stop(): ends every psql of the pool.
sub stop
{
	my ($self) = @_;
	for my $w (@{ $self->{workers} })
	{
		next if $w->{state} eq 'down';
		$w->{in} .= "\\q\n";
		eval { $w->{h}->finish; };
		$w->{state} = 'down';
		$w->{h} = undef;
	}
	$self->paused(1);
	return;
}

# error_summary(): the errors the workers saw, one per line with counts.
sub error_summary
{
	my ($self) = @_;
	my $e = $self->{errors};
	return join('', map { "$e->{$_} x $_\n" } sort keys %$e);
}

1;
