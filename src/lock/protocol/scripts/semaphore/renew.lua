-- Extend our permit's lease if we still hold it. A lease that already ended stays lost, even
-- if nobody took the permit since: the command may have run past it.
-- KEYS: lock (zset). ARGV: holders, limit key; then token, ttl ms, limit, creating ('1':
-- write the limit again if it is missing; '0' on the node a migrating slot goes to, where
-- the node it leaves may still have it and a key on both would stop the migration;
-- protocol/mod.rs, ScriptCall::creating).
-- Then the broken marks (break.lua).
-- Returns 1 renewed, 0 not ours (lost), or {0, 'host TAB ms'} when lost to a `break`;
-- TRYAGAIN (reach.lua).
-- Only the set decides. The limit lives as long as the set: a limit lost while the set is
-- held (an eviction, a migration stalled past a lease) would make every new run refuse the
-- set as not a --limit lock, so it is written again where it may be. Keys out of reach
-- keep their own TTL.
local lock, holders, limit_key = KEYS[1], ARGV[1], ARGV[2]
local kind = type_here(lock)
if not kind then
  return split()
end
if kind ~= 'zset' then
  return lost(ARGV[7], ARGV[3])
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', lock, ARGV[3])
if not score or tonumber(score) <= now_ms then
  return lost(ARGV[7], ARGV[3])
end
redis.call('ZADD', lock, 'XX', string.format('%.0f', now_ms + tonumber(ARGV[4])), ARGV[3])
keep_for_longest_lease(lock, holders, limit_key, ARGV[5], now_ms, ARGV[6])
return 1
