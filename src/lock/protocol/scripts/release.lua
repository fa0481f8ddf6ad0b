-- Release the lock if it still holds our token; never touch anyone else's.
-- KEYS: lock. ARGV: holder hash, release channel, queue, queue expiry; then token, keep ms,
-- announce ('0': do not announce the release: a take-back of a grant on a minority of
-- Redlock nodes, where the lock was never free, would only wake the waiters, this run among
-- them). The announcement names the waiter to wake (wake.lua).
-- keep > 0 (--hold-at-least): leave the lock to expire after keep ms instead of deleting it,
-- and note in the holder info when the command finished and until when the lock is kept.
-- With a run record: then 'creating' (ScriptCall::creating) and, from ARGV[9], the record to
-- write while the token still holds (record.lua).
-- Returns 1 released, 0 held by another value, -1 already gone; TRYAGAIN (reach.lua).
-- Only the lock decides: holder info this node cannot reach (a migration) is left to expire
-- with the lease it was written for, and `status` shows holder info only for the token the
-- lock holds.
local lock, holder, channel = KEYS[1], ARGV[1], ARGV[2]
local queue, expiry = ARGV[3], ARGV[4]
local token, keep, announce = ARGV[5], tonumber(ARGV[6]), ARGV[7]
-- One command tells that every key is in reach and nobody is queued (reach.lua).
local none_queued = probe({queue, expiry}) == 0
local kind, value = read_string(lock)
if not kind then
  return split()
end
if kind == 'none' then
  return -1
end
if kind ~= 'string' or value ~= token then
  return 0
end
write_record(9, ARGV[8])
if keep > 0 then
  redis.call('PEXPIRE', lock, keep)
  if here(holder) then
    -- The command finished: `status` and a busy reply say so, and until when the lock is
    -- kept, rather than name a pid that has exited. Only in our own holder info.
    if redis.call('TYPE', holder).ok == 'hash' and redis.call('HGET', holder, 'token') == token then
      local t = redis.call('TIME')
      local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      redis.call('HSET', holder, 'finished_ms', string.format('%.0f', now_ms),
        'kept_until_ms', string.format('%.0f', now_ms + keep))
    end
    redis.call('PEXPIRE', holder, keep)
  end
else
  -- Where not every key is known to be in reach, one key per command: a command naming
  -- several keys is refused during a migration unless this node has them all.
  if everywhere then
    redis.call('DEL', lock, holder)
  else
    redis.call('DEL', lock)
    if here(holder) then
      redis.call('DEL', holder)
    end
  end
  -- Wake the waiters now instead of at their next poll. A channel is not a key: any node
  -- publishes to the whole cluster.
  -- pcall: an ACL user without channel access still releases; waiters then just poll.
  if announce ~= '0' then
    -- Nobody queued: every waiter (a Redlock waiter never queues).
    local whom = none_queued and '1' or whom_to_wake(queue, expiry)
    redis.pcall('PUBLISH', channel, whom)
  end
end
return 1
