-- Take one of LIMIT permits if one is free, in one atomic step. The lock key is a sorted set
-- of holders' tokens scored by when their lease ends (server time, ms): a holder that dies
-- just expires, and no second counter can drift from it.
-- With a waiter id, in arrival order: a waiter takes a free permit only if fewer waiters
-- queued before it than there are free permits.
-- KEYS: lock (zset).
-- ARGV: fence counter, holders (hash token -> info), cancelled tokens, queue, queue expiry,
-- limit (the LIMIT every holder of this lock uses); then token, ttl ms, fence counter ttl ms,
-- host, pid, command, waiter id ('' = does not wait), how long a waiter's place is kept (ms),
-- limit; then the pause key, the holder's note, the shared holders' set of --shared runs
-- (refused: a lock is shared or limited), and the mutex's holder hash (read only to tell a
-- lock held without --limit from somebody else's string).
-- Returns as the mutex's acquire.lua: {1, fence}; {0, pttl, host, pid, acquired_ms, queued,
-- place, finished_ms, kept_until_ms} with the holder whose lease ends first (pttl -2: a permit is free but waiters come
-- first); {2} for a cancelled attempt; TRYAGAIN (reach.lua).
-- Every check that can fail runs before the first write.
--
-- Where some keys are out of reach (the node a migrating slot leaves, where the set is, as
-- the declared key), a new permit is never taken: whether one may be depends on the queue and
-- the cancelled tokens, which may be on the other node. Our own token is taken anew if the
-- keys it writes are here.
local lock = KEYS[1]
local fence_key, holders, cancelled, queue, expiry, limit_key =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local token, ttl = ARGV[7], tonumber(ARGV[8])
local waiter, keep, limit = ARGV[13], tonumber(ARGV[14]), tonumber(ARGV[15])
-- The pause key (`pause`; after the limit), '' for none; then the holder's note ('' none).
local pause, note = ARGV[16] or '', ARGV[17] or ''

local kind = type_here(lock)
if not kind then
  return split()
end

if here(cancelled) and redis.call('SISMEMBER', cancelled, token) == 1 then
  return {2}
end

if kind == 'string' then
  -- A mutex holder of redlock-run's has its holder info beside the lock (acquire.lua);
  -- another client's string (a SET NX lock) has none.
  local holder = ARGV[19]
  if not here(holder) then
    return split()
  end
  if type_here(holder) ~= 'hash' or
      redis.call('HGET', holder, 'token') ~= redis.call('GET', lock) then
    return not_a_lock(lock, lock, 'holds a string without the holder info that redlock-run ' ..
      'keeps beside its locks (' .. holder .. '): another client\'s lock')
  end
  -- LIMITMISMATCH: a configuration error, told apart from a Redis failure (lock/error.rs).
  return redis.error_reply('LIMITMISMATCH the lock ' .. lock ..
    ' is held without --limit elsewhere and this run has --limit ' .. ARGV[15] ..
    '; give every user of a lock the same --limit (nothing was changed)')
elseif kind ~= 'none' and kind ~= 'zset' then
  return not_a_lock(lock, lock, 'holds ' .. kind_words(kind))
end
local bad = check_kinds(lock, 'zset', {queue, expiry}) or check_kinds(lock, 'hash', {holders})
  or check_kinds(lock, 'string', {limit_key})
if bad then
  return bad
end
-- A lock held with --shared (its shared holders' set, ARGV[18], has members) is not for
-- --limit runs (shared/acquire.lua refuses the other way round).
local shared = ARGV[18]
if here(shared) and redis.call('EXISTS', shared) == 1 then
  local bad_shared = check_kinds(lock, 'zset', {shared})
  if bad_shared then
    return bad_shared
  end
  if not shared_ours(shared, holders) then
    return not_shared_holders(lock, shared, holders)
  end
  -- LIMITMISMATCH: a configuration error, as a limit mismatch (lock/error.rs).
  return redis.error_reply('LIMITMISMATCH the lock ' .. lock ..
    ' is used with --shared; --limit cannot share it: use the same options as its other users')
end
-- The limit lives exactly as long as the holders (every script that extends a lease extends
-- it too): a sorted set without one is somebody else's, not to be touched.
if kind == 'zset' then
  if not here(limit_key) then
    return split()
  end
  if not limit_recorded(limit_key) then
    return not_a_limit_lock(lock, limit_key)
  end
  local recorded = redis.call('GET', limit_key)
  if tonumber(recorded) ~= limit then
    return redis.error_reply('LIMITMISMATCH the lock ' .. lock .. ' is used with --limit ' ..
      recorded .. ' elsewhere and this run has --limit ' .. ARGV[15] ..
      '; give every user of a lock the same --limit (nothing was changed)')
  end
end
-- nil while the counter is out of reach.
local last
if here(fence_key) then
  local bad_fence
  last, bad_fence = last_fence(lock, fence_key)
  if bad_fence then
    return bad_fence
  end
end

local now_us, now_ms = server_now()

-- Holders whose lease ended, and waiters that stopped asking, are gone.
local ended = redis.call('ZRANGEBYSCORE', lock, '-inf', now_ms, 'LIMIT', 0, 1000)
if #ended > 0 then
  redis.call('ZREM', lock, unpack(ended))
  if here(holders) then
    redis.call('HDEL', holders, unpack(ended))
    -- And what release.lua noted of those kept by --hold-at-least.
    local kept = {}
    for i, token in ipairs(ended) do
      kept[i] = token .. ':kept'
    end
    redis.call('HDEL', holders, unpack(kept))
  end
  -- The set may be gone now, and where it was out of reach for anything else, it cannot be
  -- created again.
  kind = type_here(lock)
  if not kind then
    return split()
  end
end
if queue_here(queue, expiry) then
  reap_waiters(queue, expiry, now_ms, limit)
end


local function busy(free, paused)
  local place = 0
  if waiter ~= '' and queue_here(queue, expiry) then
    place = keep_place(queue, expiry, waiter, now_us, now_ms, keep)
  end
  local queued = here(queue) and redis.call('ZCARD', queue) or 0
  paused = paused or pause_in_force(pause)
  if paused and free then
    return {0, -2, '', '', '', queued, place, '', '', paused[1], paused[2], paused[3]}
  end
  if free then
    return {0, -2, '', '', '', queued, place}
  end
  -- The holder whose lease ends first: the earliest a permit frees up by itself.
  local first = redis.call('ZRANGE', lock, 0, 0, 'WITHSCORES')
  local host, pid, since, finished, kept_until = '', '', '', '', ''
  local info = here(holders) and redis.call('HGET', holders, first[1])
  if info then
    host, pid, since = string.match(info, '^([^\t]*)\t([^\t]*)\t([^\t]*)\t')
    local kept = redis.call('HGET', holders, first[1] .. ':kept')
    if kept then
      finished, kept_until = string.match(kept, '^(%d+)\t(%d+)$')
    end
  end
  local reply = {0, math.max(tonumber(first[2]) - now_ms, 0), host or '', pid or '',
    since or '', queued, place, finished or '', kept_until or ''}
  if paused then
    reply[10], reply[11], reply[12] = paused[1], paused[2], paused[3]
  end
  return reply
end

-- Our own token: an earlier attempt of this run landed although its reply was lost.
if not redis.call('ZSCORE', lock, token) then
  local free = limit - redis.call('ZCARD', lock)
  if free <= 0 then
    return busy(false)
  end
  -- Paused: busy, and a waiter keeps its place until resume or expiry. Holders renew as
  -- ever.
  local paused = pause_in_force(pause)
  if paused then
    return busy(true, paused)
  end
  if not (here(cancelled) and queue_here(queue, expiry)) then
    -- A permit is free, but not to be taken here (see above). A waiter hears so (and keeps
    -- its place elsewhere, cluster.rs); a run that does not wait is told to try again.
    if waiter ~= '' then
      return busy(true)
    end
    return split()
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
-- Taking a permit writes the fence counter, the holder's info and the limit.
if not last or not here(holders) or not here(limit_key) then
  return split()
end
local fence_str, end_of_range = next_fence(fence_key, last, now_us)
if not fence_str then
  return end_of_range
end
-- Every key of the semaphore lives as long as its longest lease: the latest score, which
-- must be a lease end (a finite number; a member added by something else may not be).
local latest = redis.call('ZRANGE', lock, -1, -1, 'WITHSCORES')[2]
latest = latest and tonumber(latest) or 0
if latest ~= latest or latest == math.huge or latest == -math.huge then
  return not_a_lock(lock, lock, 'holds a member whose score is no lease end')
end
local left = math.max(math.ceil(math.max(latest, now_ms + ttl) - now_ms), 1)
if waiter ~= '' then
  leave_queue(queue, expiry, waiter)
end

redis.call('ZADD', lock, string.format('%.0f', now_ms + ttl), token)
redis.call('SET', fence_key, fence_str, 'PX', ARGV[9])
-- host TAB pid TAB acquired TAB fence TAB command, and with a note TAB US note (US, the
-- ASCII unit separator, is in no command shown: it keeps the command's place for readers
-- that know of no note).
local info = ARGV[10] .. '\t' .. ARGV[11] .. '\t' .. string.format('%.0f', now_ms) .. '\t' ..
  fence_str .. '\t' .. ARGV[12]
if note ~= '' then
  info = info .. '\t\31' .. note
end
redis.call('HSET', holders, token, info)
redis.call('PEXPIRE', lock, left)
redis.call('PEXPIRE', holders, left)
redis.call('SET', limit_key, ARGV[15], 'PX', left)
return {1, fence_str}
