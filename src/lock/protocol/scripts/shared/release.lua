-- Give back our shared hold; never touch another holder's.
-- KEYS: shared holders (zset). ARGV: holders, release channel, queue, queue expiry, lock
-- (named in a refusal); then token, keep ms, creating (ScriptCall::creating); then, from
-- ARGV[9], the run record to write (record.lua).
-- keep > 0 (--hold-at-least): the hold stays for keep ms more instead, and the holders hash
-- notes, as `TOKEN:kept` = `finished_ms<TAB>kept_until_ms`, that its command finished (as
-- semaphore/release.lua does for a permit).
-- Returns 1 released, -1 already gone (our lease ended); TRYAGAIN (reach.lua).
-- The last shared holder to leave announces it (wake.lua): only then can the exclusive
-- waiter at the head of the queue go in.
local shared, holders, channel, queue, expiry = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local lock, token, keep = ARGV[5], ARGV[6], tonumber(ARGV[7])
local kind = type_here(shared)
if not kind then
  return split()
end
if kind ~= 'zset' then
  return -1
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', shared, token)
if not score or tonumber(score) <= now_ms then
  return -1
end
local holders_kind = type_here(holders)
if holders_kind and holders_kind ~= 'none' and holders_kind ~= 'hash' then
  return not_a_lock(lock, holders, 'holds ' .. kind_words(holders_kind) ..
    ', where redlock-run keeps a hash')
end
write_record(9, ARGV[8])
if keep > 0 then
  redis.call('ZADD', shared, 'XX', string.format('%.0f', now_ms + keep), token)
  -- The command finished: `status` and an exclusive run's busy reply say so (beside our
  -- info, under a field no token can be; reaped with the share by acquire.lua).
  if holders_kind and redis.call('HEXISTS', holders, token) == 1 then
    redis.call('HSET', holders, token .. ':kept',
      string.format('%.0f', now_ms) .. '\t' .. string.format('%.0f', now_ms + keep))
  end
  keep_for_longest_lease(shared, holders, now_ms)
else
  local last = not others_hold(shared, token, now_ms)
  redis.call('ZREM', shared, token)
  if holders_kind then
    redis.call('HDEL', holders, token, token .. ':kept')
  end
  if last then
    redis.pcall('PUBLISH', channel, whom_to_wake(queue, expiry))
  end
end
return 1
