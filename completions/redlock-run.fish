# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_redlock_run_global_optspecs
    string join \n k/key= r/redis= quorum= password-file= prefix= connect-timeout= tls-ca-cert= tls-cert= tls-key= t/ttl= heartbeat= w/wait= limit= E/conflict-exit-code= grace= max-runtime= hold-at-least= min-replicas= replica-timeout= c/command= q/quiet v/verbose log-format= h/help V/version
end

function __fish_redlock_run_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    # After `--` the words are the command's, not redlock-run's.
    contains -- -- $cmd; and return 1
    argparse -s (__fish_redlock_run_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_redlock_run_using_subcommand
    set -l cmd (__fish_redlock_run_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c redlock-run -n "__fish_redlock_run_needs_command" -s k -l key -d 'Lock name; the Redis key is PREFIX + KEY' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s r -l redis -d 'Redis URL: redis://[user:password@]host[:port][/db], rediss:// (TLS), valkey://, unix:///path; redis+sentinel://[user:password@]host1:26379,host2/MASTER_NAME[/db]; redis+cluster://[user:password@]host1:6379,host2:6379 (seed nodes). Given 3 or more times (or several URLs separated by spaces in REDLOCK_REDIS): Redlock, one lock over independent masters' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l quorum -d 'Redlock: how many of the --redis masters must grant and renew the lock [default: more than half]' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l password-file -d 'Read the Redis password from FILE (keeps it out of ps); wins over the URL\'s' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l prefix -d 'Prefix of the Redis key; \'\' uses KEY as it is (to share a lock with other SET NX clients)' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l connect-timeout -d 'Bound on connecting to Redis (the whole start) and on each reply' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-ca-cert -d 'TLS: trust the CA certificates in FILE (PEM) instead of the system\'s' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-cert -d 'TLS: present the client certificate in FILE (PEM); needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-key -d 'TLS: the private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s t -l ttl -d 'Lease length: a holder that dies frees the lock within it' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l heartbeat -d 'Renewal interval [default: ttl/3]' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s w -l wait -d 'Wait up to DUR for a busy lock, served in arrival order (not with Redlock): 0 tries once, forever (or inf) has no limit' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l limit -d 'Let up to N runs hold the lock at once (a counting semaphore); 1 is a mutex' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s E -l conflict-exit-code -d 'Exit code for a busy lock' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l grace -d 'SIGTERM to SIGKILL when the command must stop [default: 10s, at most ttl/3]' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l max-runtime -d 'Stop the command after DUR (SIGTERM, SIGKILL after --grace) and exit 124' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l hold-at-least -d 'Keep the lock DUR after the acquire even if the command ends sooner (cron on hosts with skewed clocks)' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l min-replicas -d 'Replicas that must acknowledge the acquire and each renewal (Redis WAIT)' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l replica-timeout -d 'How long to wait for --min-replicas acknowledgements' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s c -l command -d 'Run SHELL_STRING with /bin/sh -c instead of a COMMAND after --' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l log-format -d 'Format of the messages on stderr' -r -f -a "text\t'One "redlock-run: ..." line a message'
json\t'One JSON object a line'"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s q -l quiet -d 'Print nothing for a busy lock'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s v -l verbose -d 'Report the acquire, renewals and the release'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s V -l version -d 'Print version'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "status" -d 'Tell who holds a lock: host, pid, command, age, TTL left, fence'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s k -l key -d 'Lock name; the Redis key is PREFIX + KEY' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s r -l redis -d 'Redis URL: redis://[user:password@]host[:port][/db], rediss:// (TLS), valkey://, unix:///path; redis+sentinel://[user:password@]host1:26379,host2/MASTER_NAME[/db]; redis+cluster://[user:password@]host1:6379,host2:6379 (seed nodes). Given 3 or more times (or several URLs separated by spaces in REDLOCK_REDIS): Redlock, one lock over independent masters' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l quorum -d 'Redlock: how many of the --redis masters must grant and renew the lock [default: more than half]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l password-file -d 'Read the Redis password from FILE (keeps it out of ps); wins over the URL\'s' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l prefix -d 'Prefix of the Redis key; \'\' uses KEY as it is (to share a lock with other SET NX clients)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l connect-timeout -d 'Bound on connecting to Redis (the whole start) and on each reply' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-ca-cert -d 'TLS: trust the CA certificates in FILE (PEM) instead of the system\'s' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-cert -d 'TLS: present the client certificate in FILE (PEM); needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-key -d 'TLS: the private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l log-format -d 'Format of the messages on stderr' -r -f -a "text\t'One "redlock-run: ..." line a message'
json\t'One JSON object a line'"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l json -d 'Print one JSON object instead of text'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status help" -f -a "status" -d 'Tell who holds a lock: host, pid, command, age, TTL left, fence'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
