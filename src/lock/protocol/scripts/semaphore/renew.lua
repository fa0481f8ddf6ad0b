-- Extend our permit's lease if we still hold it. A lease that already ended stays lost, even
-- if nobody took the permit since: the command may have run past it.
-- KEYS: lock (zset), holders, limit. ARGV: token, ttl ms, limit.
-- Returns 1 renewed, 0 not ours (lost).
if redis.call('TYPE', KEYS[1]).ok ~= 'zset' then
  return 0
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now_ms then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', now_ms + tonumber(ARGV[2])), ARGV[1])
local longest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local left = math.max(tonumber(longest[2]) - now_ms, 1)
redis.call('PEXPIRE', KEYS[1], left)
redis.call('PEXPIRE', KEYS[2], left)
redis.call('SET', KEYS[3], ARGV[3], 'PX', left)
return 1
