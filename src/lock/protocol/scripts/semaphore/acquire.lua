-- Take one of LIMIT permits if one is free, in one atomic step. The lock key is a sorted set
-- of holders' tokens scored by when their lease ends (server time, ms): a holder that dies
-- just expires, and no second counter can drift from it.
-- With a waiter id, in arrival order: a waiter takes a free permit only if fewer waiters
-- queued before it than there are free permits.
-- KEYS: lock (zset), fence counter, holders (hash token -> info), cancelled tokens, queue,
-- queue expiry, limit (the LIMIT every holder of this lock uses).
-- ARGV: token, ttl ms, fence counter ttl ms, host, pid, command, waiter id ('' = does not
-- wait), how long a waiter's place is kept (ms), limit.
-- Returns as the mutex's acquire.lua: {1, fence}; {0, pttl, host, pid, acquired_ms, queued,
-- place} with the holder whose lease ends first (pttl -2: a permit is free but waiters come
-- first); {2} for a cancelled attempt.
-- Every check that can fail runs before the first write.
local lock, fence_key, holders, cancelled = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local queue, expiry, limit_key = KEYS[5], KEYS[6], KEYS[7]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local waiter, keep, limit = ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])

if redis.call('SISMEMBER', cancelled, token) == 1 then
  return {2}
end

local kind = redis.call('TYPE', lock).ok
if kind == 'string' then
  return redis.error_reply('WRONGTYPE the lock ' .. lock ..
    ' is held as a mutex (without --limit); use the same --limit as its other users')
elseif kind ~= 'none' and kind ~= 'zset' then
  return redis.error_reply('WRONGTYPE the lock key holds a ' .. kind .. ', not a lock')
end
local bad_queue = check_queue_keys(queue, expiry)
if bad_queue then
  return bad_queue
end
for key, want in pairs({[holders] = 'hash', [limit_key] = 'string'}) do
  local k = redis.call('TYPE', key).ok
  if k ~= 'none' and k ~= want then
    return redis.error_reply('WRONGTYPE the key ' .. key .. ' holds a ' .. k .. ', not a ' .. want)
  end
end
-- The limit lives exactly as long as the holders (every script that extends a lease extends
-- it too): a sorted set without one is somebody else's, not to be touched.
local recorded = redis.call('GET', limit_key)
if kind == 'zset' and not recorded then
  return redis.error_reply('WRONGTYPE the lock key ' .. lock ..
    ' holds a sorted set that is not a redlock-run --limit lock; refusing to touch it')
end
if kind == 'zset' and tonumber(recorded) ~= limit then
  return redis.error_reply('WRONGTYPE the lock ' .. lock .. ' is used with --limit ' ..
    recorded .. ', not ' .. ARGV[9] .. '; use the same --limit as its other users')
end
local last, bad_fence = last_fence(fence_key)
if bad_fence then
  return bad_fence
end

local now_us, now_ms = server_now()

-- Holders whose lease ended, and waiters that stopped asking, are gone.
local ended = redis.call('ZRANGEBYSCORE', lock, '-inf', now_ms, 'LIMIT', 0, 1000)
if #ended > 0 then
  redis.call('ZREM', lock, unpack(ended))
  redis.call('HDEL', holders, unpack(ended))
end
reap_waiters(queue, expiry, now_ms)

local function busy(free)
  local place = 0
  if waiter ~= '' then
    place = keep_place(queue, expiry, waiter, now_us, now_ms, keep)
  end
  local queued = redis.call('ZCARD', queue)
  if free then
    return {0, -2, '', '', '', queued, place}
  end
  -- The holder whose lease ends first: the earliest a permit frees up by itself.
  local first = redis.call('ZRANGE', lock, 0, 0, 'WITHSCORES')
  local host, pid, since = '', '', ''
  local info = redis.call('HGET', holders, first[1])
  if info then
    host, pid, since = string.match(info, '^([^\t]*)\t([^\t]*)\t([^\t]*)\t')
  end
  return {0, math.max(tonumber(first[2]) - now_ms, 0), host or '', pid or '', since or '',
    queued, place}
end

-- Our own token: an earlier attempt of this run landed although its reply was lost.
if not redis.call('ZSCORE', lock, token) then
  local free = limit - redis.call('ZCARD', lock)
  if free <= 0 then
    return busy(false)
  end
  local queued = redis.call('ZCARD', queue)
  if queued > 0 then
    -- Only the first `free` waiters may take a permit; a run that does not wait only takes
    -- one that no waiter is owed.
    local rank = waiter ~= '' and redis.call('ZRANK', queue, waiter) or nil
    if (waiter == '' and queued >= free) or (waiter ~= '' and (rank == nil or rank >= free)) then
      return busy(true)
    end
  end
end
if waiter ~= '' then
  leave_queue(queue, expiry, waiter)
end

local fence_str = next_fence(last, now_us)
redis.call('ZADD', lock, string.format('%.0f', now_ms + ttl), token)
redis.call('SET', fence_key, fence_str, 'PX', ARGV[3])
redis.call('HSET', holders, token, ARGV[4] .. '\t' .. ARGV[5] .. '\t' ..
  string.format('%.0f', now_ms) .. '\t' .. fence_str .. '\t' .. ARGV[6])
-- Every key of the semaphore lives as long as its longest lease.
local longest = redis.call('ZRANGE', lock, -1, -1, 'WITHSCORES')
local left = math.max(tonumber(longest[2]) - now_ms, 1)
redis.call('PEXPIRE', lock, left)
redis.call('PEXPIRE', holders, left)
redis.call('SET', limit_key, ARGV[9], 'PX', left)
return {1, fence_str}
