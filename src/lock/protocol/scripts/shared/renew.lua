-- Extend our shared hold's lease if we still have it. A lease that already ended stays lost:
-- an exclusive run may have gone in since.
-- KEYS: shared holders (zset). ARGV: holders; then token, ttl ms; then the broken marks
-- (break.lua).
-- Returns 1 renewed, 0 not ours (lost), or {0, 'host TAB ms'} when lost to a `break` (who
-- broke it, and when; lost.lua); TRYAGAIN (reach.lua).
local shared, holders = KEYS[1], ARGV[1]
local kind = type_here(shared)
if not kind then
  return split()
end
if kind ~= 'zset' then
  return lost(ARGV[4], ARGV[2])
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', shared, ARGV[2])
if not score or tonumber(score) <= now_ms then
  return lost(ARGV[4], ARGV[2])
end
redis.call('ZADD', shared, 'XX', string.format('%.0f', now_ms + tonumber(ARGV[3])), ARGV[2])
keep_for_longest_lease(shared, holders, now_ms)
return 1
