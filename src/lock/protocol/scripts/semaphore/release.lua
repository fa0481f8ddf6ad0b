-- Give back our permit; never touch another holder's.
-- KEYS: lock (zset), holders, release channel, limit. ARGV: token, keep ms, limit.
-- keep > 0 (--hold-at-least): the permit stays taken for keep ms more instead.
-- Returns 1 released, -1 already gone (our lease ended; the permit may be someone else's).
if redis.call('TYPE', KEYS[1]).ok ~= 'zset' then
  return -1
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now_ms then
  return -1
end
local holders_kind = redis.call('TYPE', KEYS[2]).ok
if holders_kind ~= 'none' and holders_kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE the key ' .. KEYS[2] .. ' holds a ' .. holders_kind)
end
local keep = tonumber(ARGV[2])
if keep > 0 then
  redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', now_ms + keep), ARGV[1])
  local longest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local left = math.max(tonumber(longest[2]) - now_ms, 1)
  redis.call('PEXPIRE', KEYS[1], left)
  redis.call('PEXPIRE', KEYS[2], left)
  -- The limit lives as long as the permits it governs.
  redis.call('SET', KEYS[4], ARGV[3], 'PX', left)
else
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  if redis.call('EXISTS', KEYS[1]) == 0 then
    -- The last holder: nothing is left to keep the limit for.
    redis.call('DEL', KEYS[4])
  end
  redis.pcall('PUBLISH', KEYS[3], '1')
end
return 1
