-- The run record (protocol/record.rs), prepended to both release scripts after reach.lua.
-- A release script calls write_record(first) once it has checked that the lock still holds
-- the caller's token, before it deletes anything: the record is written by a holder, in the
-- same atomic step as its release, or not at all.
--
-- ARGV from `first` on: last-run key, last-success key, retention ms, host, pid, program,
-- fence, ran ms, outcome, exit code ('' when killed by a signal), signal ('' when it exited).
-- No arguments there (a release that records nothing: the command never started, a take-back
-- on a Redlock minority): nothing is written.
--
-- Each key is a hash with the fields host, pid, program, started_ms, ended_ms, exit_code,
-- signal, outcome, fence (times in ms since 1970 on this server's clock: ended is now,
-- started is now minus the run time the client measured on its monotonic clock); absent
-- exit_code or signal fields mean null. The last-success copy is written only for the
-- outcome 'succeeded'. Both expire after the retention. A key this node cannot reach (a
-- migration of the slot) is left as it is: the record is best effort there, the release is
-- not.
local function write_record(first)
  local run_key = ARGV[first]
  if not run_key or run_key == '' then
    return
  end
  local success_key, keep = ARGV[first + 1], ARGV[first + 2]
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ran_ms = tonumber(ARGV[first + 7]) or 0
  local outcome = ARGV[first + 8]
  local fields = {
    'host', ARGV[first + 3],
    'pid', ARGV[first + 4],
    'program', ARGV[first + 5],
    'fence', ARGV[first + 6],
    'started_ms', string.format('%.0f', math.max(now_ms - ran_ms, 0)),
    'ended_ms', string.format('%.0f', now_ms),
    'outcome', outcome,
  }
  if ARGV[first + 9] ~= '' then
    fields[#fields + 1] = 'exit_code'
    fields[#fields + 1] = ARGV[first + 9]
  end
  if ARGV[first + 10] ~= '' then
    fields[#fields + 1] = 'signal'
    fields[#fields + 1] = ARGV[first + 10]
  end
  local targets = {run_key}
  if outcome == 'succeeded' then
    targets[2] = success_key
  end
  for _, key in ipairs(targets) do
    if here(key) then
      redis.call('DEL', key)
      redis.call('HSET', key, unpack(fields))
      redis.call('PEXPIRE', key, keep)
    end
  end
end
