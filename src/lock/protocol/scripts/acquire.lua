-- Take the lock if it is free, in one atomic step: SET with a TTL, a new fence, holder info.
-- KEYS: lock, fence counter, holder hash, cancelled tokens.
-- ARGV: token, ttl ms, fence counter ttl ms, host, pid, command.
-- Returns {1, fence} when acquired, {0, pttl, host, pid, acquired_ms} when busy, {2} for an
-- attempt that was cancelled (its reply has no reader).
-- Every check that can fail runs before the first write: a script that errors half-way
-- would otherwise leave a lock behind that nobody knows it holds.
local lock, fence_key, holder, cancelled = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl = ARGV[1], ARGV[2]

-- An attempt that its run already took back (cancel.lua) arrived late: it must not land.
if redis.call('SISMEMBER', cancelled, token) == 1 then
  return {2}
end

local kind = redis.call('TYPE', lock).ok
if kind ~= 'none' then
  if kind ~= 'string' then
    return redis.error_reply('WRONGTYPE the lock key holds a ' .. kind .. ', not a lock')
  end
  -- Busy, unless it is our own token: an earlier attempt of this run landed although its reply
  -- was lost (a timeout). Then it is taken anew below, with a new fence and a fresh TTL.
  if redis.call('GET', lock) ~= token then
    -- Report who holds it, but only if the holder info belongs to the current value:
    -- a lock taken by another client on a raw key has no (or stale) holder info.
    local host, pid, since = '', '', ''
    local info = redis.pcall('HMGET', holder, 'token', 'host', 'pid', 'acquired_ms')
    if type(info) == 'table' and not info.err and info[1] == redis.call('GET', lock) then
      host, pid, since = info[2] or '', info[3] or '', info[4] or ''
    end
    return {0, redis.call('PTTL', lock), host, pid, since}
  end
end

-- Lua numbers are doubles: integers are exact up to 2^53, far beyond microseconds since 1970
-- (2^53 us is the year 2255). Anything else in the counter is refused before any write.
local last = redis.call('GET', fence_key)
if last then
  if not string.match(last, '^%d+$') or #last > 16 or tonumber(last) >= 9007199254740991 then
    return redis.error_reply('WRONGTYPE the fence key ' .. fence_key ..
      ' does not hold a fence (a decimal integer below 2^53)')
  end
  last = tonumber(last)
else
  last = 0
end
-- The fence grows by one per acquisition and never falls behind the server clock in
-- microseconds, so it keeps growing even after the counter itself was lost (a restart
-- without persistence, a failover to a replica that missed it), as long as the server's
-- clock was not stepped back by more than the time since the previous acquisition.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = math.max(last + 1, now_us)
local fence_str = string.format('%.0f', fence)

redis.call('SET', lock, token, 'PX', ttl)
redis.call('SET', fence_key, fence_str, 'PX', ARGV[3])
redis.call('DEL', holder)
redis.call('HSET', holder, 'token', token, 'host', ARGV[4], 'pid', ARGV[5], 'cmd', ARGV[6],
  'acquired_ms', string.format('%.0f', math.floor(now_us / 1000)), 'fence', fence_str)
redis.call('PEXPIRE', holder, ttl)
return {1, fence_str}
