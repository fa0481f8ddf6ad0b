-- Give back our permit; never touch another holder's.
-- KEYS: lock (zset). ARGV: holders, limit key, release channel; then token, keep ms, limit,
-- creating (see renew.lua); then, from ARGV[8], the run record to write (record.lua).
-- keep > 0 (--hold-at-least): the permit stays taken for keep ms more instead, and the
-- holders hash notes, as `TOKEN:kept` = `finished_ms<TAB>kept_until_ms`, that its command
-- finished.
-- Returns 1 released, -1 already gone (our lease ended; the permit may be someone else's);
-- TRYAGAIN (reach.lua).
-- Only the set decides; keys out of reach (a migration) keep their own TTL, and the limit is
-- written again only where renew.lua would.
local lock, holders, limit_key, channel = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local token, keep = ARGV[4], tonumber(ARGV[5])
local kind = type_here(lock)
if not kind then
  return split()
end
if kind ~= 'zset' then
  return -1
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', lock, token)
if not score or tonumber(score) <= now_ms then
  return -1
end
local holders_kind = type_here(holders)
if holders_kind and holders_kind ~= 'none' and holders_kind ~= 'hash' then
  return not_a_lock(lock, holders, 'holds ' .. kind_words(holders_kind) ..
    ', where redlock-run keeps a hash')
end
write_record(8, ARGV[7])
if keep > 0 then
  redis.call('ZADD', lock, 'XX', string.format('%.0f', now_ms + keep), token)
  -- The command finished: `status` and a busy reply say so (beside our info, under a field
  -- no token can be; reaped with the permit by acquire.lua).
  if holders_kind and redis.call('HEXISTS', holders, token) == 1 then
    redis.call('HSET', holders, token .. ':kept',
      string.format('%.0f', now_ms) .. '\t' .. string.format('%.0f', now_ms + keep))
  end
  keep_for_longest_lease(lock, holders, limit_key, ARGV[6], now_ms, ARGV[7])
else
  -- Ours is the last permit: nothing is left to keep the limit for. (Counted before the
  -- set goes, which on the node a migrating slot leaves ends its reach.)
  local last = redis.call('ZCARD', lock) == 1
  redis.call('ZREM', lock, token)
  if holders_kind then
    redis.call('HDEL', holders, token)
  end
  if last and here(limit_key) then
    redis.call('DEL', limit_key)
  end
  redis.pcall('PUBLISH', channel, '1')
end
return 1
