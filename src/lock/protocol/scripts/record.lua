-- The run record (protocol/record.rs), prepended to both release scripts after reach.lua.
-- A release script calls write_record(first) once it has checked that the lock still holds
-- the caller's token, before it deletes anything: the record is written by a holder, in the
-- same atomic step as its release, or not at all.
--
-- `creating` ('1' or '0', see ScriptCall::creating): whether a record key that does not exist
-- on this node may be created here ('0' on the node a migrating slot goes to, where the node
-- it leaves may still have it: a key on both would stop the migration).
-- ARGV from `first` on: last-run key, last-success key, retention ms, host, pid, program,
-- fence, ran ms, outcome, exit code ('' when killed by a signal), signal ('' when it exited).
-- No arguments there (a release that records nothing: the command never started, a take-back
-- on a Redlock minority): nothing is written.
-- Then, for `release` of a hold across CI steps (hold.lua), from `first` + 11: the holds key,
-- the token, the reason, the hold record's retention ms: see end_hold.
--
-- Each key is a hash with the fields host, pid, program, started_ms, ended_ms, exit_code,
-- signal, outcome, fence (times in ms since 1970 on this server's clock: ended is now,
-- started is now minus the run time the client measured on its monotonic clock); an empty
-- (or absent) exit_code or signal field means null. The last-success copy is written only for the
-- outcome 'succeeded'. Both expire after the retention. A key this node cannot reach or may
-- not create (a migration of the slot), or one that holds another type, is left as it is:
-- the record is best effort there; the release is not.
-- The hold record of the token, if it is still `held` or `releasing`, ends `released` with the
-- reason, in the same step as the release: a `release` that finds the lock gone afterwards
-- (a second `release` of the hold at the same time) reads it released, not lost. Only an
-- existing record is changed; one this node cannot reach (a migration) is left to the
-- client's own `end` (hold.lua).
local function end_hold(first, now_ms)
  local holds = ARGV[first]
  if not holds or holds == '' or type_here(holds) ~= 'hash' then
    return
  end
  local token, reason, retention = ARGV[first + 1], ARGV[first + 2], tonumber(ARGV[first + 3])
  local stored = redis.call('HGET', holds, token)
  if not stored then
    return
  end
  local ok, record = pcall(cjson.decode, stored)
  if not ok or type(record) ~= 'table' or (record.state ~= 'held' and record.state ~= 'releasing') then
    return
  end
  record.state = 'released'
  record.reason = reason
  record.ended_ms = string.format('%.0f', now_ms)
  redis.call('HSET', holds, token, cjson.encode(record))
  -- As hold.lua keeps it: never shortened.
  if redis.call('PTTL', holds) < retention then
    redis.call('PEXPIRE', holds, retention)
  end
end

local function write_record(first, creating)
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
  -- Both always written ('' is null), so that no field of an earlier record is left over.
  for i, name in ipairs({'exit_code', 'signal'}) do
    fields[#fields + 1] = name
    fields[#fields + 1] = ARGV[first + 8 + i]
  end
  -- Only `break` writes who broke a run (break.lua); a later run's record has nobody.
  fields[#fields + 1] = 'broken_by'
  fields[#fields + 1] = ''
  local targets = {run_key}
  if outcome == 'succeeded' then
    targets[2] = success_key
  end
  -- Overwritten in place, never deleted first: on the node a migrating slot leaves, a key
  -- that is gone can no longer be written (ASK).
  for _, key in ipairs(targets) do
    if everywhere and creating ~= '0' then
      -- Every key is in reach (reach.lua): HSET itself refuses a key of another type, which
      -- is then left as it is, as is one this user may not write.
      local written = redis.pcall('HSET', key, unpack(fields))
      if type(written) == 'number' then
        redis.call('PEXPIRE', key, keep)
      end
    else
      local kind = type_here(key)
      if kind == 'hash' or (kind == 'none' and creating ~= '0') then
        redis.call('HSET', key, unpack(fields))
        redis.call('PEXPIRE', key, keep)
      end
    end
  end
  end_hold(first + 11, now_ms)
end
